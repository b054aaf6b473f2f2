"""Testing helpers, public so that other projects can use them too.

``gradcheck``
    float64 central-difference check of a hand-written backward pass.
``load_case`` / ``assert_golden``
    read one golden case file (JSON or NPZ, validated against its index and the catalogue)
    and compare an implementation's outputs against it with the case's own tolerance.

Example (another project testing its RoPE against our vectors)::

    from posenc_np.testing import load_case, assert_golden
    case = load_case("vectors/v2/rope.apply.half.d8.json")
    assert_golden(my_rope(case.inputs["x"], case.inputs["positions"]), case)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from numpy.typing import ArrayLike

from ._checks import check_bool, check_int, check_real, require

__all__ = ["GoldenCase", "GradcheckResult", "assert_golden", "gradcheck", "gradcheck_hook", "load_case"]


# --------------------------------------------------------------------------- gradcheck

@dataclass
class GradcheckResult:
    """Outcome of :func:`gradcheck`.

    ``max_rel_error`` is the worst ``|analytic - numeric| / max(|analytic|, |numeric|, floor)``
    over all checked entries; ``where`` names the input and index where it occurred.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.testing import gradcheck
    >>> result = gradcheck(lambda x: x ** 2, lambda g, x: {"x": 2 * x * g}, {"x": np.array([1.0, 2.0])})
    >>> type(result).__name__, bool(result.ok), result.checked, result.tol
    ('GradcheckResult', True, 2, 1e-06)
    >>> str(result).split(":")[0]
    'gradcheck passed'
    """

    max_rel_error: float
    where: tuple
    analytic: float
    numeric: float
    checked: int
    tol: float

    @property
    def ok(self) -> bool:
        return bool(self.max_rel_error <= self.tol)

    def __str__(self) -> str:
        name, idx = self.where
        return (f"gradcheck {'passed' if self.ok else 'FAILED'}: worst relative error "
                f"{self.max_rel_error:.3e} (tol {self.tol:.1e}) at {name}{list(idx)}: analytic "
                f"{self.analytic:.10e}, numeric {self.numeric:.10e}; {self.checked} entries checked")


def gradcheck(
    fun: Callable[..., object],
    backward: Callable[..., dict],
    inputs: dict,
    *,
    eps: float = 1e-5,
    tol: float = 1e-6,
    max_entries: int | None = 200,
    seed: int = 0,
    raise_on_failure: bool = True,
) -> GradcheckResult:
    r"""Check a backward pass against float64 central differences.

    The scalar probed is :math:`L(x) = \sum_o \langle f(x)_o, g_o \rangle` for a fixed random
    cotangent :math:`g` (standard normal, seeded). For each checked entry :math:`x_j`,

    .. math:: \frac{\partial L}{\partial x_j} \approx \frac{L(x + \epsilon e_j) - L(x - \epsilon e_j)}{2\epsilon}

    is compared with ``backward(g, **inputs)[name][j]``.

    Parameters
    ----------
    fun : callable
        ``fun(**inputs)`` returns an array or a tuple of arrays.
    backward : callable
        ``backward(g, **inputs)`` returns a dict mapping (some of) the input names to their
        gradients; ``g`` has the structure of ``fun``'s output. Inputs absent from the dict
        are not checked (integer inputs such as positions, for instance).
    inputs : dict of str to ndarray
        Float inputs are converted to float64 copies; non-float inputs are passed as is.
    eps : float
        Central-difference step, finite and > 0.
    tol : float
        Largest accepted relative error, finite and >= 0.
    max_entries : int or None
        Check at most this many entries per input (a seeded random subset); None = all.
    seed : int
        Seed for the cotangent and the subset.
    raise_on_failure : bool
        Raise ``AssertionError`` with the report when the check fails.

    Returns
    -------
    GradcheckResult
        The entry ``floor`` of the denominator is ``1e-3 * max |numeric gradient|`` (or 1e-12
        when every gradient is zero), so entries whose true gradient is zero are judged on an
        absolute scale.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.testing import gradcheck
    >>> x = {"x": np.random.default_rng(0).standard_normal(5)}
    >>> bool(gradcheck(lambda x: np.sin(x), lambda g, x: {"x": g * np.cos(x)}, x).ok)        # d sin = cos
    True
    >>> bool(gradcheck(lambda x: np.sin(x), lambda g, x: {"x": g * np.sin(x)}, x, raise_on_failure=False).ok)   # wrong
    False
    """
    require(callable(fun) and callable(backward), "fun and backward must be callables", TypeError)
    require(isinstance(inputs, dict) and inputs, "inputs must be a non-empty dict of named arrays", TypeError)
    eps = check_real(eps, "eps", positive=True)
    tol = check_real(tol, "tol", nonnegative=True)
    if max_entries is not None:
        max_entries = check_int(max_entries, "max_entries", minimum=1)
    rng = np.random.default_rng(check_int(seed, "seed", minimum=0))
    raise_on_failure = check_bool(raise_on_failure, "raise_on_failure")
    x = {k: (np.array(v, dtype=np.float64) if np.asarray(v).dtype.kind == "f" else v) for k, v in inputs.items()}
    for k, v in x.items():
        require(not isinstance(v, np.ndarray) or v.dtype.kind != "f" or np.all(np.isfinite(v)),
                f"inputs[{k!r}] holds NaN or inf: central differences need finite inputs")

    def as_tuple(out):
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)

    raw = fun(**x)
    g = tuple(rng.standard_normal(np.shape(o)) for o in as_tuple(raw))
    g_arg = g if isinstance(raw, (tuple, list)) else g[0]

    def loss() -> float:
        return float(sum(np.sum(np.asarray(o, dtype=np.float64) * gi) for o, gi in zip(as_tuple(fun(**x)), g)))

    grads = backward(g_arg, **x)
    require(grads, "backward returned no gradients to check")
    records = []  # (name, index, analytic, numeric)
    for name, analytic in grads.items():
        if analytic is None:
            continue
        require(name in x, f"backward returned a gradient for {name!r}, which is not an input")
        arr = x[name]
        analytic = np.asarray(analytic, dtype=np.float64)
        require(analytic.shape == arr.shape, f"gradient for {name!r} has shape {analytic.shape}, input has {arr.shape}",
                AssertionError)
        n = arr.size
        idx = np.arange(n) if max_entries is None or n <= max_entries else rng.choice(n, max_entries, replace=False)
        flat = arr.reshape(-1)
        for j in idx:
            orig = flat[j]
            flat[j] = orig + eps
            plus = loss()
            flat[j] = orig - eps
            minus = loss()
            flat[j] = orig
            records.append((name, np.unravel_index(j, arr.shape), analytic.reshape(-1)[j], (plus - minus) / (2 * eps)))
    numeric_max = max((abs(r[3]) for r in records), default=0.0)
    floor = 1e-3 * numeric_max if numeric_max > 0 else 1e-12
    worst = (0.0, ("", ()), 0.0, 0.0)
    for name, index, a, num in records:
        rel = abs(a - num) / max(abs(a), abs(num), floor)
        if rel >= worst[0]:
            worst = (rel, (name, tuple(int(i) for i in index)), a, num)
    result = GradcheckResult(worst[0], worst[1], float(worst[2]), float(worst[3]), len(records), tol)
    if raise_on_failure and not result.ok:
        raise AssertionError(str(result))
    return result


def gradcheck_hook(hook: object, q: ArrayLike, k: ArrayLike, v: ArrayLike, *, causal: bool = False,
                   scale: float | None = None, mask: ArrayLike | None = None, **kwargs: Any) -> GradcheckResult:
    """:func:`gradcheck` of attention with a position hook, for ``q``, ``k``, ``v`` and every
    parameter in ``hook.params`` (reported as ``hook.<name>``).

    Runs :func:`posenc_np.attention.forward` / :func:`~posenc_np.attention.backward` with
    ``hooks=[hook]``; parameter gradients are read from ``hook.grads``. ``kwargs`` go to
    :func:`gradcheck` (``max_entries``, ``tol``, ...). The hook's parameters are restored
    afterwards.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import T5RelativeBias
    >>> from posenc_np.testing import gradcheck_hook
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = (rng.standard_normal((1, 2, 3, 4)) for _ in range(3))
    >>> bool(gradcheck_hook(T5RelativeBias(2, num_buckets=4, max_distance=8, seed=0), q, k, v, causal=True).ok)
    True
    """
    from . import attention

    require(isinstance(getattr(hook, "params", None), dict),
            f"hook must be a position hook with a params dict (e.g. posenc_np.relative.T5RelativeBias), "
            f"got {type(hook).__name__}", TypeError)
    saved = dict(hook.params)
    key = {name: f"hook.{name}" for name in saved}  # e.g. Transformer-XL has a parameter "v"

    def run(q, k, v, **params):
        hook.params = {name: params[key[name]] for name in saved}
        return attention.forward(q, k, v, causal=causal, scale=scale, mask=mask, hooks=[hook])

    def backward(g, q, k, v, **params):
        grads = attention.backward(g, run(q, k, v, **params)[1])
        return {"q": grads["q"], "k": grads["k"], "v": grads["v"], **{key[n]: hook.grads[n] for n in saved}}

    try:
        inputs = {"q": q, "k": k, "v": v, **{key[n]: value for n, value in saved.items()}}
        return gradcheck(lambda **x: run(**x)[0], backward, inputs, **kwargs)
    finally:
        hook.params = saved


# --------------------------------------------------------------------------- golden cases

@dataclass(frozen=True)
class GoldenCase:
    """A validated golden case: metadata plus its arrays as NumPy arrays.

    ``tolerances`` maps dtype names (``"float64"``, and for version-2 cases usually
    ``"float32"``, ``"bfloat16"``, ``"float16"``) to ``{"abs", "rel"}``.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.testing import GoldenCase
    >>> outputs, tolerances = {"slopes": np.array([0.0625, 0.00390625])}, {"float64": {"abs": 0.0, "rel": 1e-15}}
    >>> case = GoldenCase("demo.slopes.n2", "alibi.slopes", {"num_heads": 2}, {}, {}, outputs, tolerances, "", {})
    >>> case.tolerance, sorted(case.outputs)      # the float64 entry of tolerances
    ({'abs': 0.0, 'rel': 1e-15}, ['slopes'])
    """

    name: str
    encoding: str
    params: dict
    conventions: dict
    inputs: dict
    outputs: dict
    tolerances: dict
    sha256: str
    document: dict

    @property
    def tolerance(self) -> dict:
        """The float64 tolerance."""
        return self.tolerances["float64"]


def load_case(path: str | os.PathLike) -> GoldenCase:
    """Load one ``.json`` or ``.npz`` golden case (format v1 or v2), validated.

    The file must follow the format within its limits; if its directory holds an
    ``index.json``, it must be listed there with its digest; if the library's catalogue knows
    the case, its parameters, inputs and tolerances must be the catalogue's (a version-1 file
    must be one of the published ones).
    ``GoldenCase.sha256`` is the SHA-256 of the file's bytes.

    Raises
    ------
    posenc_np.golden.format.GoldenFormatError
        (a ``ValueError``) naming the file and the problem, for malformed, tampered or
        pickled content. Nothing in the file is executed or unpickled.

    Examples
    --------
    >>> import os, tempfile
    >>> from posenc_np.golden import catalogue, runner
    >>> from posenc_np.testing import load_case
    >>> with tempfile.TemporaryDirectory() as tmp:     # write one case of the catalogue, read it back
    ...     rows = runner.generate(tmp, formats=("json",), specs=[catalogue.by_name()["alibi.slopes.n3"]])
    ...     case = load_case(os.path.join(tmp, "alibi.slopes.n3.json"))
    >>> case.encoding, case.params, case.outputs["slopes"].tolist()   # 2**-4, 2**-8, then 2**-2 (n = 3)
    ('alibi.slopes', {'max_bias': 8.0, 'num_heads': 3}, [0.0625, 0.00390625, 0.25])
    """
    from .golden import format as fmt, runner

    doc, digest = runner.load_case_file(path)
    tolerances = doc["tolerances"] if "tolerances" in doc else {"float64": doc["tolerance"]}
    return GoldenCase(
        name=doc["name"], encoding=doc["encoding"], params=doc["params"], conventions=doc["conventions"],
        inputs=fmt.arrays(doc, "inputs"), outputs=fmt.arrays(doc, "outputs"), tolerances=tolerances,
        sha256=digest, document=doc,
    )


def assert_golden(actual: ArrayLike | dict, case: GoldenCase, *, dtype: str = "float64",
                  tolerance: dict | None = None) -> None:
    """Assert that ``actual`` matches ``case.outputs`` within the case's tolerance for ``dtype``.

    Parameters
    ----------
    actual : ndarray or dict of str to ndarray
        A single array is accepted when the case has exactly one output.
    case : GoldenCase
        From :func:`load_case`.
    dtype : str
        Which of the case's ``tolerances`` applies: the precision ``actual`` was computed in
        (``"float64"``, ``"float32"``, ``"bfloat16"``, ``"float16"``). A ``ValueError`` names the
        dtypes the case offers when it has none for ``dtype``.
    tolerance : dict, optional
        ``{"abs": a, "rel": r}`` (finite, >= 0; anything else raises ``ValueError`` or
        ``TypeError``) overriding the case's tolerance.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import alibi
    >>> from posenc_np.testing import GoldenCase, assert_golden     # (a case usually comes from load_case)
    >>> outputs, tolerances = {"slopes": np.array([0.0625, 0.00390625])}, {"float64": {"abs": 0.0, "rel": 1e-15}}
    >>> case = GoldenCase("demo.slopes.n2", "alibi.slopes", {"num_heads": 2}, {}, {}, outputs, tolerances, "", {})
    >>> assert_golden(alibi.slopes(2), case)           # 2**-4, 2**-8: passes, returns None
    >>> assert_golden(alibi.slopes(2) * 1.001, case)
    Traceback (most recent call last):
        ...
    AssertionError: golden case demo.slopes.n2 (float64; conventions {}): slopes: 2 of 2 values outside tolerance, ...
    """
    from .golden.runner import compare

    require(isinstance(case, GoldenCase), f"case must be a GoldenCase from load_case, got {type(case).__name__}",
            TypeError)
    if tolerance is not None:
        tolerance = _check_tolerance(tolerance)
    if not isinstance(actual, dict):
        require(len(case.outputs) == 1, f"case {case.name} has outputs {sorted(case.outputs)}; pass a dict", TypeError)
        actual = {next(iter(case.outputs)): actual}
    if tolerance is None:
        require(isinstance(dtype, str), f"dtype must be a string such as 'float32', got {type(dtype).__name__} "
                f"{dtype!r}", TypeError)
        require(dtype in case.tolerances,
                f"case {case.name} has no {dtype} tolerance (it has {sorted(case.tolerances)})")
        tolerance = case.tolerances[dtype]
    problems = compare(actual, case.outputs, tolerance)[3]
    if problems:
        raise AssertionError(f"golden case {case.name} ({dtype}; conventions {case.conventions}): "
                             + "; ".join(problems))


def _check_tolerance(tolerance) -> dict:
    """``{"abs": a, "rel": r}`` with finite ``a, r >= 0`` (a NaN bound would pass everything)."""
    require(isinstance(tolerance, dict) and set(tolerance) == {"abs", "rel"},
            f"tolerance must be a dict {{'abs': a, 'rel': r}}, got {tolerance!r}", TypeError)
    return {key: check_real(tolerance[key], f"tolerance[{key!r}]", nonnegative=True) for key in ("abs", "rel")}
