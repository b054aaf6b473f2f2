r"""Adam with decoupled weight decay (AdamW), global-norm gradient clipping, a cosine schedule.

All three work on flat dicts of named arrays (``model.params`` / ``model.grads``) and update
parameters **in place**, so layers holding the same arrays see the new values.

Adam (Kingma & Ba 2015) with decoupled weight decay (Loshchilov & Hutter 2019, "AdamW";
the update order of ``torch.optim.AdamW``), at step :math:`t = 1, 2, \dots`:

.. math::

    m &\leftarrow \beta_1 m + (1 - \beta_1) g, \qquad v \leftarrow \beta_2 v + (1 - \beta_2) g^2 \\
    \theta &\leftarrow \theta\,(1 - \eta\lambda) \quad\text{(only parameters selected for decay)} \\
    \theta &\leftarrow \theta - \frac{\eta}{1 - \beta_1^t}\,
        \frac{m}{\sqrt{v}/\sqrt{1 - \beta_2^t} + \epsilon}

The decay is *decoupled*: it shrinks the weights directly instead of being added to the
gradient (which Adam's normalisation would rescale). By default matrices (``ndim >= 2``:
linear weights, embeddings, position tables) decay and vectors (biases, LayerNorm gains) do not.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ._checks import check_int, check_real, require

__all__ = ["Adam", "AdamW", "adamw_update", "check_betas", "check_gradients", "check_lrs", "clip_grad_norm",
           "clip_to_norm", "cosine_schedule", "global_norm", "norm_from_sums", "sum_of_squares"]


def _default_decay(name: str, value: np.ndarray) -> bool:
    return value.ndim >= 2


def check_betas(betas: Sequence[float]) -> tuple[float, float]:
    """Adam's ``betas``: a pair of reals in ``[0, 1)``.

    Examples
    --------
    >>> from posenc_np.optim import check_betas
    >>> check_betas([0.9, 0.95])
    (0.9, 0.95)
    >>> check_betas((0.9, 1.0))
    Traceback (most recent call last):
        ...
    ValueError: betas must lie in [0, 1), got (0.9, 1.0)
    """
    require(not isinstance(betas, (str, bytes)) and hasattr(betas, "__len__") and len(betas) == 2,
            f"betas must be a pair (beta1, beta2), got {betas!r}", TypeError)
    out = tuple(check_real(b, f"betas[{i}]", nonnegative=True) for i, b in enumerate(betas))
    require(all(b < 1 for b in out), f"betas must lie in [0, 1), got {out}")
    return out


def check_lrs(lr: float, min_lr: float) -> tuple[float, float]:
    """A schedule's learning rates: finite, ``0 <= min_lr <= lr``.

    Examples
    --------
    >>> from posenc_np.optim import check_lrs
    >>> check_lrs(1e-3, 1e-4)
    (0.001, 0.0001)
    >>> check_lrs(1e-4, 1e-3)
    Traceback (most recent call last):
        ...
    ValueError: min_lr (0.001) must be <= lr (0.0001)
    """
    lr = check_real(lr, "lr", nonnegative=True)
    min_lr = check_real(min_lr, "min_lr", nonnegative=True)
    require(min_lr <= lr, f"min_lr ({min_lr}) must be <= lr ({lr})")
    return lr, min_lr


# The gradient checks run every training step, over every array: they test first and format
# their message only when they fail (a ``require(ok, f"...")`` formats it on every call).

def check_gradients(grads: dict, name: str = "grads") -> None:
    """A dict of float ndarrays (gradients are scaled in place, so they must be arrays).

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.optim import check_gradients
    >>> check_gradients({"w": np.zeros((2, 2)), "b": np.zeros(2, dtype=np.float32)})    # returns None
    >>> check_gradients({"w": np.arange(2)})
    Traceback (most recent call last):
        ...
    TypeError: grads['w'] must be a float ndarray, got ndarray int64
    """
    if not isinstance(grads, dict):
        raise TypeError(f"{name} must be a dict of named arrays, got {type(grads).__name__}")
    for k, g in grads.items():
        if not isinstance(g, np.ndarray) or g.dtype.kind != "f":
            raise TypeError(f"{name}[{k!r}] must be a float ndarray, got {type(g).__name__} {getattr(g, 'dtype', '')}")


def _check_step_grads(grads, params: dict, sum_of_squares) -> None:
    """:meth:`Adam.step`'s ``grads``: the keys of ``params``, float arrays of the same shapes, finite
    (tested through their ``sum_of_squares``)."""
    if not isinstance(grads, dict):
        raise TypeError(f"grads must be a dict of named arrays (model.grads), got {type(grads).__name__}")
    if grads.keys() != params.keys():
        raise ValueError(f"grads keys differ from params: missing {sorted(set(params) - set(grads))}, "
                         f"unexpected {sorted(set(grads) - set(params))}")
    for k, p in params.items():
        g = grads[k]
        if not isinstance(g, np.ndarray) or g.dtype.kind != "f" or g.shape != p.shape:
            raise ValueError(f"grads[{k!r}] must be a float array of shape {p.shape}, got "
                             f"{type(g).__name__} {getattr(g, 'dtype', '')} {getattr(g, 'shape', '')}")
    _check_finite(grads, "grads", [sum_of_squares(g) for g in grads.values()])


def _check_finite(grads: dict, name: str, sums=None) -> None:
    """Every array finite; ``sums`` (of :func:`sum_of_squares`) spares the test of the arrays whose
    sum is finite (an inf sum may be an overflow of finite squares: those are tested)."""
    for i, (k, g) in enumerate(grads.items()):
        if (sums is None or not math.isfinite(sums[i])) and not np.all(np.isfinite(g)):
            raise ValueError(f"{name}[{k!r}] holds NaN or inf (a diverged step: lower the learning rate or clip); "
                             "nothing was updated")


def adamw_update(p: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray, b1: float, b2: float, decay: float,
                 step_size: float, root_bc2: float, eps: float) -> None:
    r"""One AdamW update of one parameter, in place on ``p``, ``m``, ``v``. Core of :meth:`Adam.step`;
    arguments are not checked.

    :math:`m \leftarrow \beta_1 m + (1 - \beta_1) g`, :math:`v \leftarrow \beta_2 v + (1 - \beta_2) g^2`,
    :math:`p \leftarrow p\,d`, :math:`p \leftarrow p - s\,m / (\sqrt v / \sqrt{1 - \beta_2^t} + \epsilon)`,
    with ``decay`` :math:`d = 1 - \eta\lambda` (1: no decay), ``step_size`` :math:`s = \eta / (1 - \beta_1^t)`
    and ``root_bc2`` :math:`\sqrt{1 - \beta_2^t}`.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.optim import adamw_update
    >>> p, g, m, v = np.ones(2), np.array([0.5, -2.0]), np.zeros(2), np.zeros(2)
    >>> adamw_update(p, g, m, v, 0.9, 0.999, 1.0, 0.1 / (1 - 0.9), (1 - 0.999) ** 0.5, 1e-8)   # step t = 1, lr 0.1
    >>> p.round(6).tolist(), m.round(6).tolist()   # m = 0.1 g; p moves by lr against the sign of g
    ([0.9, 1.1], [0.05, -0.2])
    """
    m *= b1
    m += (1.0 - b1) * g
    v *= b2
    v += (1.0 - b2) * (g * g)
    if decay != 1.0:
        p *= decay
    denom = np.sqrt(v)
    denom /= root_bc2
    denom += eps
    p -= step_size * (m / denom)


def sum_of_squares(g: np.ndarray) -> float:
    """:math:`\\sum g^2` of one array, in float64 (NaN and inf propagate; a finite sum also means
    finite elements). Core of :func:`global_norm` and :func:`clip_grad_norm`; not checked.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.optim import sum_of_squares
    >>> sum_of_squares(np.array([[1.0, 2.0], [2.0, 4.0]], dtype=np.float32))   # 1 + 4 + 4 + 16, in float64
    25.0
    >>> sum_of_squares(np.array([1e200]))    # the square overflows float64
    inf
    """
    x = g.ravel().astype(np.float64)
    with np.errstate(over="ignore"):
        return float(np.dot(x, x))


class Adam:
    """Adam with decoupled weight decay (AdamW); see the module docstring.

    Parameters
    ----------
    params : dict of str to ndarray
        Updated in place by :meth:`step`.
    lr : float
        Default learning rate :math:`\\eta` (a schedule passes its own to :meth:`step`).
    betas : (float, float)
    eps : float
    weight_decay : float
        :math:`\\lambda`, decoupled.
    decay : callable ``(name, array) -> bool``, optional
        Which parameters decay; default: arrays with ``ndim >= 2``.

    Attributes
    ----------
    t : int
        Number of steps taken.
    m, v : dict of str to ndarray
        First and second moments, same dtypes as the parameters.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.optim import Adam
    >>> params = {"w": np.ones((2, 2)), "b": np.zeros(2)}
    >>> opt = Adam(params, lr=0.1, weight_decay=0.5)
    >>> opt.step({"w": np.full((2, 2), 0.5), "b": np.array([1.0, -1.0])})
    >>> params["w"].round(6).tolist(), params["b"].round(6).tolist(), opt.t   # w: 1 (1 - 0.1 * 0.5) - 0.1; b: no decay
    ([[0.85, 0.85], [0.85, 0.85]], [-0.1, 0.1], 1)
    """

    #: The update of one parameter, and the sum of squares that tests a gradient for NaN and inf
    #: (:class:`posenc_np.fused.FusedAdam` runs both as fused kernels).
    adamw_update, sum_of_squares = staticmethod(adamw_update), staticmethod(sum_of_squares)

    def __init__(self, params: dict, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, decay=None):
        require(isinstance(params, dict) and params, "params must be a non-empty dict of named arrays (model.params)",
                TypeError)
        for k, v in params.items():
            require(isinstance(v, np.ndarray) and v.dtype.kind == "f", f"params[{k!r}] must be a float ndarray "
                    f"(updated in place), got {type(v).__name__} {getattr(v, 'dtype', '')}", TypeError)
            require(v.flags.writeable,
                    f"params[{k!r}] must be writeable (it is updated in place), got a read-only array")
        self.params = params
        self.lr = check_real(lr, "lr", nonnegative=True)
        self.betas = check_betas(betas)
        self.eps = check_real(eps, "eps", positive=True)
        self.weight_decay = check_real(weight_decay, "weight_decay", nonnegative=True)
        require(decay is None or callable(decay),
                f"decay must be a callable (name, array) -> bool or None, got {type(decay).__name__}", TypeError)
        rule = decay or _default_decay
        self.decay = {k: bool(rule(k, v)) for k, v in params.items()}
        self.m = {k: np.zeros_like(v) for k, v in params.items()}
        self.v = {k: np.zeros_like(v) for k, v in params.items()}
        self.t = 0

    def step(self, grads: dict, lr: float | None = None) -> None:
        """One update of every parameter from ``grads`` (same keys and shapes as ``params``).

        Gradients holding NaN or inf raise ``ValueError`` before anything is updated.
        """
        _check_step_grads(grads, self.params, self.sum_of_squares)
        lr = self.lr if lr is None else check_real(lr, "lr", nonnegative=True)
        b1, b2 = self.betas
        self.t += 1
        step_size = lr / (1.0 - b1 ** self.t)
        root_bc2 = math.sqrt(1.0 - b2 ** self.t)
        for k, p in self.params.items():
            decay = 1.0 - lr * self.weight_decay if self.weight_decay and self.decay[k] else 1.0
            self.adamw_update(p, grads[k], self.m[k], self.v[k], b1, b2, decay, step_size, root_bc2, self.eps)

    def state_dict(self) -> dict:
        """Arrays only (for NPZ): ``t``, ``m.<name>``, ``v.<name>`` and hyper-parameters as JSON-able values."""
        state = {"t": self.t, "lr": self.lr, "betas": list(self.betas), "eps": self.eps,
                 "weight_decay": self.weight_decay, "decay": self.decay}
        arrays = {**{f"m.{k}": v for k, v in self.m.items()}, **{f"v.{k}": v for k, v in self.v.items()}}
        return {"hyper": state, "arrays": arrays}

    def load_state_dict(self, state: dict) -> None:
        """Restore what :meth:`state_dict` returned. Everything is checked (keys, shapes and
        dtypes of the moments, finite values, hyper-parameters) before anything is assigned."""
        hyper, arrays = self.check_state(state)
        for k in self.params:
            self.m[k][...] = arrays[f"m.{k}"]
            self.v[k][...] = arrays[f"v.{k}"]
        self.t = hyper["t"]
        self.lr, self.betas, self.eps = hyper["lr"], hyper["betas"], hyper["eps"]
        self.weight_decay, self.decay = hyper["weight_decay"], hyper["decay"]

    def check_state(self, state: dict) -> tuple[dict, dict]:
        """Validate a :meth:`state_dict` for these parameters without changing anything.

        Returns ``(hyper, arrays)`` normalised; raises ``ValueError``/``TypeError`` naming the
        first problem (a missing, unexpected, misshapen, mistyped or non-finite moment; a
        hyper-parameter out of range).
        """
        require(isinstance(state, dict) and set(state) == {"hyper", "arrays"},
                "state must be a dict with keys 'hyper' and 'arrays' (from Adam.state_dict)", TypeError)
        hyper, arrays = state["hyper"], state["arrays"]
        require(isinstance(hyper, dict) and isinstance(arrays, dict),
                "state['hyper'] and state['arrays'] must be dicts", TypeError)
        expected = {f"{name}.{k}" for k in self.params for name in ("m", "v")}
        require(set(arrays) == expected, "optimizer state arrays differ from the parameters: missing "
                f"{sorted(expected - set(arrays))}, unexpected {sorted(set(arrays) - expected)}")
        for key, a in arrays.items():
            p = self.params[key[2:]]
            require(isinstance(a, np.ndarray) and a.dtype == p.dtype and a.shape == p.shape,
                    f"optimizer state {key} must be a {p.dtype} array of shape {p.shape}, got "
                    f"{getattr(a, 'dtype', type(a).__name__)} {getattr(a, 'shape', '')}")
        _check_finite(arrays, "optimizer state")
        require(not any(np.any(arrays[f"v.{k}"] < 0) for k in self.params),
                "optimizer state v (second moments) must be >= 0")
        missing = {"t", "lr", "betas", "eps", "weight_decay", "decay"} - set(hyper)
        require(not missing, f"optimizer hyper-parameters lack {sorted(missing)}")
        decay = hyper["decay"]
        require(isinstance(decay, dict) and set(decay) == set(self.params)
                and all(isinstance(d, bool) for d in decay.values()),
                "optimizer hyper-parameter 'decay' must map every parameter name to a bool")
        out = {"t": check_int(hyper["t"], "optimizer t", minimum=0),
               "lr": check_real(hyper["lr"], "optimizer lr", nonnegative=True),
               "betas": check_betas(hyper["betas"]),
               "eps": check_real(hyper["eps"], "optimizer eps", positive=True),
               "weight_decay": check_real(hyper["weight_decay"], "optimizer weight_decay", nonnegative=True),
               "decay": dict(decay)}
        return out, arrays


AdamW = Adam


def norm_from_sums(grads: dict, sums: list) -> float:
    """The global norm from the per-array sums of squares; finite gradients whose squares overflow
    float64 are rescaled by their largest magnitude first. Not checked.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.optim import norm_from_sums
    >>> norm_from_sums({"w": np.array([3.0]), "b": np.array([4.0])}, [9.0, 16.0])
    5.0
    >>> big = {"w": np.array([1e200, 1e200])}                  # its sum of squares overflows to inf
    >>> round(norm_from_sums(big, [float("inf")]) / 1e200, 6)  # rescaled: 1e200 sqrt(2)
    1.414214
    """
    total = sum(sums)
    if math.isinf(total) and all(np.all(np.isfinite(g)) for g in grads.values()):
        flats = [g.ravel().astype(np.float64) for g in grads.values()]
        big = max(float(np.max(np.abs(x))) for x in flats if x.size)
        return big * math.sqrt(sum(float(np.dot(x / big, x / big)) for x in flats))
    return math.sqrt(total)


def clip_to_norm(grads: dict, max_norm: float, sums: list) -> float:
    """Core of :func:`clip_grad_norm` for the sums of squares ``sums`` of ``grads``: refuse non-finite
    gradients, scale in place, return the norm before clipping.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.optim import clip_to_norm
    >>> grads = {"w": np.array([3.0, 4.0])}
    >>> clip_to_norm(grads, 1.0, [25.0])      # the norm before clipping
    5.0
    >>> grads["w"].round(6).tolist()           # scaled in place by 1 / (5 + 1e-6)
    [0.6, 0.8]
    """
    _check_finite(grads, "grads", sums)
    total = norm_from_sums(grads, sums)
    coef = max_norm / (total + 1e-6)
    if coef < 1.0:
        for g in grads.values():
            g *= np.asarray(coef, dtype=g.dtype)
    return total


def global_norm(grads: dict) -> float:
    r""":math:`\sqrt{\sum_k \lVert g_k \rVert^2}` over every array, accumulated in float64.

    Finite gradients whose squares would overflow float64 are rescaled by their largest
    magnitude first, so the norm is finite whenever it is representable.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.optim import global_norm
    >>> global_norm({"w": np.array([3.0, 4.0]), "b": np.array([12.0])})    # sqrt(9 + 16 + 144)
    13.0
    >>> round(global_norm({"w": np.array([1e200, 1e200])}) / 1e200, 6)     # finite although 1e400 overflows
    1.414214
    """
    check_gradients(grads)
    return norm_from_sums(grads, [sum_of_squares(g) for g in grads.values()])


def clip_grad_norm(grads: dict, max_norm: float) -> float:
    r"""Scale every gradient in place by :math:`\min(1, c / (\lVert g \rVert + 10^{-6}))` (as
    ``torch.nn.utils.clip_grad_norm_``) and return the norm *before* clipping.

    A gradient holding NaN or inf raises ``ValueError`` naming it, before anything is scaled
    (a non-finite norm cannot be clipped; torch's ``error_if_nonfinite=True``).

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.optim import clip_grad_norm
    >>> grads = {"w": np.array([3.0, 4.0]), "b": np.array([0.0])}
    >>> clip_grad_norm(grads, 1.0), grads["w"].round(6).tolist()   # norm 5 returned; scaled by 1 / (5 + 1e-6)
    (5.0, [0.6, 0.8])
    >>> clip_grad_norm({"w": np.array([np.nan])}, 1.0)
    Traceback (most recent call last):
        ...
    ValueError: grads['w'] holds NaN or inf (a diverged step: lower the learning rate or clip); nothing was updated
    """
    max_norm = check_real(max_norm, "max_norm", positive=True)
    check_gradients(grads)
    return clip_to_norm(grads, max_norm, [sum_of_squares(g) for g in grads.values()])


def cosine_schedule(step: int, *, total: int, lr: float, warmup: int = 0, min_lr: float = 0.0) -> float:
    r"""Linear warm-up over ``warmup`` steps, then cosine decay to ``min_lr`` at ``total``.

    For 0-based ``step``: :math:`\eta = \eta_0 (s+1)/w` while :math:`s < w`, else
    :math:`\eta_{min} + \tfrac12(\eta_0 - \eta_{min})(1 + \cos(\pi\,\min(1, (s-w)/(T-w))))`.
    ``lr`` and ``min_lr`` are finite with ``0 <= min_lr <= lr``.

    Examples
    --------
    >>> from posenc_np.optim import cosine_schedule
    >>> [cosine_schedule(s, total=10, lr=1.0, warmup=2) for s in (0, 1, 2, 6, 10)]   # warm-up 1/2, 2/2; cos 0, pi/2, pi
    [0.5, 1.0, 1.0, 0.5, 0.0]
    >>> round(cosine_schedule(10, total=10, lr=1.0, min_lr=0.1), 6)    # ends at min_lr
    0.1
    """
    step = check_int(step, "step", minimum=0)
    total = check_int(total, "total", minimum=1)
    warmup = check_int(warmup, "warmup", minimum=0)
    lr, min_lr = check_lrs(lr, min_lr)
    if step < warmup:
        return lr * (step + 1) / warmup
    frac = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * frac))
