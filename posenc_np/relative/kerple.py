r"""KERPLE: kernelized relative positional embedding (Chi et al. 2022, arXiv 2205.09921).

A per-head bias of the query-key distance :math:`|m - n|`, a conditionally positive definite
kernel with learnable :math:`r_1, r_2 > 0`:

.. math::

    \text{log:}\quad b_h(m, n) = -r_{1,h}\,\log\!\big(1 + r_{2,h}\,|m - n|\big) \qquad
    \text{power:}\quad b_h(m, n) = -r_{1,h}\,|m - n|^{r_{2,h}},\ 0 < r_{2,h} \le 2

(paper, eq. 2 and sec. 4). The bias is added to the scaled logits, like ALiBi's (ALiBi is the
power variant at :math:`r_2 = 1` with fixed :math:`r_1`). Gradients:

.. math::

    \text{log:}\ \partial b/\partial r_1 = -\log(1 + r_2 d),\ \partial b/\partial r_2 = -r_1 d / (1 + r_2 d);\qquad
    \text{power:}\ \partial b/\partial r_1 = -d^{r_2},\ \partial b/\partial r_2 = -r_1 d^{r_2} \ln d

with :math:`d^{r_2} \ln d = 0` at :math:`d = 0` (its limit for :math:`r_2 > 0`).

Conventions and parametrization:

- distance :math:`d = |m - n|` with query :math:`i` at :math:`i + k_{len} - q_{len}` (bottom-right,
  like the causal mask). The reference code (``chijames/KERPLE``, ``ParallelKerpleLog`` /
  ``ParallelKerplePower`` in gpt-neox) uses ``tril(m - n)``: equal on every key a causal mask
  keeps; here the encoder (bidirectional) case uses :math:`|m - n|`, the paper's formula.
- parameters are kept positive by a clip, as the paper's code does: the bias is computed from
  :math:`\max(r_1, \epsilon)` and :math:`r_2` clipped to :math:`[\epsilon, \infty)` (power:
  :math:`[\epsilon, 2]`), :math:`\epsilon = 10^{-2}` (the reference code's ``eps``). The reference
  clamps the stored ``.data`` in place at every forward and then takes the gradient at the clamped
  value (projected gradient descent); :class:`KerpleBias` leaves the stored parameter alone and
  differentiates the clip itself: 1 on the closed interval, 0 outside (so a parameter that left
  the interval gets no gradient from the loss until something moves it back). The two agree while
  the parameters are inside; this one is a function with an exact derivative, so the model's
  gradient check holds everywhere. :func:`kerple_bias` and :func:`kerple_bias_backward` take the
  parameters as they are and refuse values outside the paper's domain (``r1, r2 > 0``;
  ``r2 <= 2`` for power).
- names: ``r1`` multiplies, ``r2`` is inside (log) or the exponent (power). The reference code
  calls them ``bias_p``/``bias_a`` (log: ``-p log(1 + a d)``) and ``bias_a``/``bias_p``
  (power: ``-a d^p``): the letters swap between the variants, the roles here do not.
- initialisation as the reference: log :math:`r_1 \sim U(0, 2)`, :math:`r_2 \sim U(0, 1)`;
  power :math:`r_1 \sim U(0, 1)`, :math:`r_2 \sim U(0, 2)`; then clipped into the range.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .._checks import as_float_array, check_alloc, check_choice, check_int, check_lengths, require
from .._util import memo_table, sum_to_shape
from ..alibi import MAX_HEADS
from ..attention import Hook, check_hook_args
from ..positions import relative_grid

__all__ = ["KERPLE_VARIANTS", "KerpleBias", "kerple_bias", "kerple_bias_backward", "kerple_clip", "kerple_distance",
           "kerple_kernel", "kerple_kernel_backward"]

KERPLE_VARIANTS = ("log", "power")
#: Lower bound of the projection (the reference code's ``eps``) and the power variant's upper bound.
EPS, POWER_MAX = 1e-2, 2.0


# --------------------------------------------------------------------------- the formulas (cores)

@memo_table
def kerple_distance(q_len: int, k_len: int) -> np.ndarray:
    """``(q_len, k_len)`` float64 :math:`|m - n|` of the bottom-right aligned grid (kept, read-only).

    Examples
    --------
    >>> from posenc_np.relative import kerple
    >>> kerple.kerple_distance(2, 3).tolist()   # |j - (i + 1)|: the queries sit at positions 1 and 2
    [[1.0, 0.0, 1.0], [2.0, 1.0, 0.0]]
    """
    return np.abs(relative_grid(q_len, k_len, k_len - q_len)).astype(np.float64)


def kerple_kernel(r1: np.ndarray, r2: np.ndarray, dist: np.ndarray, variant: str) -> np.ndarray:
    """``(heads, q_len, k_len)``: :math:`-r_1 \\log(1 + r_2 d)` or :math:`-r_1 d^{r_2}`. Core of
    :func:`kerple_bias`; arguments are not checked.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import kerple
    >>> dist = np.array([[2.0, 1.0, 0.0]])
    >>> kerple.kerple_kernel(np.array([2.0]), np.array([2.0]), dist, "power").tolist()   # -2 d**2
    [[[-8.0, -2.0, -0.0]]]
    """
    a, b = r1[:, None, None], r2[:, None, None]
    return -a * (np.log1p(b * dist) if variant == "log" else dist ** b)


def kerple_kernel_backward(dbias: np.ndarray, r1: np.ndarray, r2: np.ndarray, dist: np.ndarray,
                           variant: str) -> tuple[np.ndarray, np.ndarray]:
    """``(dr1, dr2)`` of :func:`kerple_kernel` for the upstream ``dbias`` ``(..., heads, q_len, k_len)``.
    Core of :func:`kerple_bias_backward`; arguments are not checked.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import kerple
    >>> one, dist = np.array([1.0]), np.array([[2.0, 1.0, 0.0]])
    >>> dr1, dr2 = kerple.kerple_kernel_backward(np.ones((1, 1, 3)), one, one, dist, "log")
    >>> dr1.round(6).tolist(), dr2.round(6).tolist()   # -(ln 3 + ln 2), -(2/3 + 1/2)
    ([-1.791759], [-1.166667])
    >>> [g.round(6).tolist() for g in kerple.kerple_kernel_backward(np.ones((1, 1, 3)), one, one, dist, "power")]
    [[-3.0], [-1.386294]]
    """
    g = sum_to_shape(dbias, dbias.shape[-3:])
    a, b = r1[:, None, None], r2[:, None, None]
    if variant == "log":
        dr1, dr2 = -np.log1p(b * dist), -a * dist / (1 + b * dist)
    else:
        power = dist ** b
        dr1, dr2 = -power, -a * power * np.log(np.where(dist > 0, dist, 1.0))  # d^r ln d -> 0 at d = 0
    return (g * dr1).sum(axis=(-2, -1)), (g * dr2).sum(axis=(-2, -1))


def kerple_clip(r1: np.ndarray, r2: np.ndarray, variant: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(r1, r2, inside1, inside2)``: the parameters clipped to their range and where the clip is the identity.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import kerple
    >>> r1, r2, inside1, inside2 = kerple.kerple_clip(np.array([0.001, 1.0]), np.array([3.0, 0.5]), "power")
    >>> r1.tolist(), r2.tolist(), inside1.tolist(), inside2.tolist()   # clipped to [0.01, inf) and [0.01, 2]
    ([0.01, 1.0], [2.0, 0.5], [False, True], [False, True])
    """
    hi = POWER_MAX if variant == "power" else np.inf
    return (np.maximum(r1, EPS), np.clip(r2, EPS, hi), r1 >= EPS, (r2 >= EPS) & (r2 <= hi))


# --------------------------------------------------------------------------- public functions

def _check_params(r1, r2, variant, length: int):
    """KERPLE's per-head ``r1``, ``r2`` (float ``(heads,)`` of one shape, finite, ``> 0``: the paper's
    domain; ``r2 <= 2`` for the power variant) and ``variant``, for both doors; the bias at the largest
    distance ``length - 1`` (where ``|bias|`` is largest) must be finite in the parameters' dtype."""
    variant = check_choice(variant, "variant", KERPLE_VARIANTS)
    r1 = as_float_array(r1, "r1")
    r2 = as_float_array(r2, "r2")
    require(r1.ndim == 1 and r1.shape == r2.shape and r1.size > 0, f"r1 and r2 must be (num_heads,) arrays of one "
            f"shape, got {r1.shape} and {r2.shape}")
    for name, x in (("r1", r1), ("r2", r2)):
        require(bool(np.all(np.isfinite(x)) and np.all(x > 0)), f"{name} must be finite and > 0 (KERPLE keeps its "
                f"parameters positive), got min {np.min(x)}")
    require(variant == "log" or bool(np.all(r2 <= POWER_MAX)), f"r2 must be <= 2 for the power variant "
            f"(0 < r2 <= 2 keeps -|m-n|^r2 conditionally positive definite), got max {np.max(r2)}")
    with np.errstate(over="ignore"):
        edge = kerple_kernel(r1, r2, np.full((1, 1), max(length - 1, 0), np.float64), variant)
    require(bool(np.all(np.abs(edge) <= np.finfo(np.result_type(r1, r2)).max)), f"r1 and r2 make the KERPLE bias "
            f"overflow {np.result_type(r1, r2)} at distance {max(length - 1, 0)} (r1 up to {np.max(r1)}, r2 up to "
            f"{np.max(r2)}); the bias would be -inf")
    return r1, r2, variant


def kerple_bias(r1: ArrayLike, r2: ArrayLike, q_len: int, k_len: int, *, variant: str = "log") -> np.ndarray:
    r"""KERPLE bias ``(num_heads, q_len, k_len)`` for per-head parameters (see the module docstring).

    Parameters
    ----------
    r1, r2 : array_like ``(num_heads,)``
        Positive kernel parameters (``r2 <= 2`` for ``variant="power"``); the result has their
        float dtype (float64 for integers).
    q_len, k_len : int
        Query :math:`i` sits at position :math:`i + k_{len} - q_{len}`, key :math:`j` at :math:`j`.
    variant : {"log", "power"}
        :math:`-r_1 \log(1 + r_2 |m-n|)` or :math:`-r_1 |m-n|^{r_2}`.

    Examples
    --------
    >>> from posenc_np import alibi
    >>> from posenc_np.relative import kerple
    >>> kerple.kerple_bias([1.0], [1.0], 1, 3).round(6).tolist()   # -log(1 + d) for d = 2, 1, 0
    [[[-1.098612, -0.693147, -0.0]]]
    >>> b = kerple.kerple_bias([0.5], [1.0], 3, 3, variant="power")   # r2 = 1: ALiBi's symmetric bias, slope r1
    >>> bool((b == alibi.bias(1, 3, form="symmetric", slopes=[0.5])).all())
    True
    """
    q_len, k_len = check_lengths(q_len, k_len, "KERPLE bias (q_len, k_len)")
    r1, r2, variant = _check_params(r1, r2, variant, max(q_len, k_len))
    check_alloc((r1.size, q_len, k_len), np.float64, "KERPLE bias (num_heads, q_len, k_len)")
    return kerple_kernel(r1, r2, kerple_distance(q_len, k_len), variant).astype(np.result_type(r1, r2), copy=False)


def kerple_bias_backward(dbias: ArrayLike, r1: ArrayLike, r2: ArrayLike, *,
                         variant: str = "log") -> tuple[np.ndarray, np.ndarray]:
    r"""Gradients ``(dr1, dr2)`` of :func:`kerple_bias` for the upstream ``dbias``
    ``(..., num_heads, q_len, k_len)`` (leading axes summed); each ``(num_heads,)``.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import kerple
    >>> g, r1, r2 = np.random.default_rng(0).standard_normal((2, 3, 3)), np.array([0.5, 1.5]), np.array([0.3, 0.8])
    >>> loss = lambda r2: float((g * kerple.kerple_bias(r1, r2, 3, 3)).sum())   # L = sum(g * bias)
    >>> dr1, dr2 = kerple.kerple_bias_backward(g, r1, r2)
    >>> e = np.array([1e-6, 0.0]); bool(np.isclose((loss(r2 + e) - loss(r2 - e)) / 2e-6, dr2[0]))
    True
    """
    dbias = as_float_array(dbias, "dbias", ndim_min=3)
    r1, r2, variant = _check_params(r1, r2, variant, max(dbias.shape[-2:]))
    require(dbias.shape[-3] == r1.size, f"dbias must be (..., num_heads={r1.size}, q_len, k_len), got shape "
            f"{dbias.shape}")
    return kerple_kernel_backward(dbias, r1, r2, kerple_distance(*dbias.shape[-2:]), variant)


class KerpleBias(Hook):
    r"""KERPLE as an attention hook: ``attention.forward(q, k, v, hooks=[KerpleBias(H)])``.

    Parameters
    ----------
    num_heads : int
    variant : {"log", "power"}
    seed : int, Generator or None
        Seed of the reference initialisation (module docstring).

    Attributes
    ----------
    params : dict
        ``{"r1": (num_heads,), "r2": (num_heads,)}``; the forward uses them clipped to their
        range (module docstring).
    grads : dict
        Same keys, written by :meth:`logits_backward`.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import kerple
    >>> hook = kerple.KerpleBias(2, seed=0)   # log: r1 ~ U(0, 2), r2 ~ U(0, 1), clipped to >= 0.01
    >>> b = hook.bias(3, 3)
    >>> b.shape, bool(np.allclose(b, kerple.kerple_bias(hook.params["r1"], hook.params["r2"], 3, 3)))
    ((2, 3, 3), True)
    """

    def __init__(self, num_heads: int, *, variant: str = "log", seed: int | np.random.Generator | None = None) -> None:
        self.num_heads = check_int(num_heads, "num_heads", minimum=1, maximum=MAX_HEADS)
        self.variant = check_choice(variant, "variant", KERPLE_VARIANTS)
        rng = np.random.default_rng(seed)
        first, second = (2.0, 1.0) if self.variant == "log" else (1.0, 2.0)
        r1, r2, _, _ = kerple_clip(rng.random(self.num_heads) * first, rng.random(self.num_heads) * second,
                                   self.variant)
        self.params = {"r1": r1, "r2": r2}
        self.grads = {k: np.zeros_like(v) for k, v in self.params.items()}

    def _clipped(self):
        """:func:`kerple_clip` of the stored parameters, which must be finite float ``(num_heads,)`` arrays."""
        r1, r2 = (np.asarray(self.params[k]) for k in ("r1", "r2"))
        require(all(x.shape == (self.num_heads,) and x.dtype.kind == "f" and np.all(np.isfinite(x)) for x in (r1, r2)),
                f"params['r1'] and params['r2'] must be finite float arrays of shape ({self.num_heads},)")
        return kerple_clip(r1, r2, self.variant)

    def bias(self, q_len: int, k_len: int) -> np.ndarray:
        """The bias ``(num_heads, q_len, k_len)`` of the (clipped) parameters."""
        q_len, k_len = check_lengths(q_len, k_len, "KERPLE bias (q_len, k_len)")
        r1, r2, _, _ = self._clipped()
        return kerple_kernel(r1, r2, kerple_distance(q_len, k_len), self.variant)

    # -- attention hook ------------------------------------------------------------------
    def logits(self, q: ArrayLike, k: ArrayLike, scale: float,
               mask: ArrayLike | None = None) -> tuple[np.ndarray | None, Any]:
        """Hook: the bias (cast to ``q``'s dtype), not multiplied by ``scale``."""
        q, k, scale, mask = check_hook_args(q, k, scale, mask, self.num_heads)
        clipped = self._clipped()
        dist = kerple_distance(q.shape[-2], k.shape[-2])
        return kerple_kernel(*clipped[:2], dist, self.variant).astype(q.dtype, copy=False), (clipped, dist)

    def logits_backward(self, dlogits: np.ndarray, cache: Any) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Hook: writes ``grads["r1"]``, ``grads["r2"]``; no gradient to ``q`` or ``k``."""
        (r1, r2, inside1, inside2), dist = cache
        dr1, dr2 = kerple_kernel_backward(dlogits, r1, r2, dist, self.variant)
        self.grads["r1"], self.grads["r2"] = (dr1 * inside1).astype(r1.dtype), (dr2 * inside2).astype(r2.dtype)
        return None, None
