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

import numpy as np

from .._attention_checks import check_kerple_bias, check_kerple_grad, check_num_heads, check_qk_heads
from .._checks import check_choice, check_lengths
from .._util import memo_table, sum_to_shape
from ..attention import Hook
from ..positions import _grid

__all__ = ["KERPLE_VARIANTS", "KerpleBias", "kerple_bias", "kerple_bias_backward"]

KERPLE_VARIANTS = ("log", "power")
#: Lower bound of the projection (the reference code's ``eps``) and the power variant's upper bound.
EPS, POWER_MAX = 1e-2, 2.0


# --------------------------------------------------------------------------- the formulas (unchecked)

@memo_table
def _distance(q_len: int, k_len: int) -> np.ndarray:
    """``(q_len, k_len)`` float64 :math:`|m - n|` of the bottom-right aligned grid."""
    return np.abs(_grid(q_len, k_len, k_len - q_len)).astype(np.float64)


def _bias(r1: np.ndarray, r2: np.ndarray, dist: np.ndarray, variant: str) -> np.ndarray:
    """``(heads, q_len, k_len)``: :math:`-r_1 \\log(1 + r_2 d)` or :math:`-r_1 d^{r_2}`."""
    a, b = r1[:, None, None], r2[:, None, None]
    return -a * (np.log1p(b * dist) if variant == "log" else dist ** b)


def _bias_backward(dbias: np.ndarray, r1: np.ndarray, r2: np.ndarray, dist: np.ndarray, variant: str):
    """``(dr1, dr2)`` of :func:`_bias` for the upstream ``dbias`` ``(..., heads, q_len, k_len)``."""
    g = sum_to_shape(dbias, dbias.shape[-3:])
    a, b = r1[:, None, None], r2[:, None, None]
    if variant == "log":
        dr1, dr2 = -np.log1p(b * dist), -a * dist / (1 + b * dist)
    else:
        power = dist ** b
        dr1, dr2 = -power, -a * power * np.log(np.where(dist > 0, dist, 1.0))  # d^r ln d -> 0 at d = 0
    return (g * dr1).sum(axis=(-2, -1)), (g * dr2).sum(axis=(-2, -1))


def _clip(r1: np.ndarray, r2: np.ndarray, variant: str):
    """``(r1, r2, inside1, inside2)``: the parameters clipped to their range and where the clip is the identity."""
    hi = POWER_MAX if variant == "power" else np.inf
    return (np.maximum(r1, EPS), np.clip(r2, EPS, hi), r1 >= EPS, (r2 >= EPS) & (r2 <= hi))


# --------------------------------------------------------------------------- public functions

def kerple_bias(r1, r2, q_len: int, k_len: int, *, variant: str = "log") -> np.ndarray:
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
    """
    r1, r2, q_len, k_len, variant = check_kerple_bias(r1, r2, q_len, k_len, variant, KERPLE_VARIANTS)
    return _bias(r1, r2, _distance(q_len, k_len), variant).astype(np.result_type(r1, r2), copy=False)


def kerple_bias_backward(dbias, r1, r2, *, variant: str = "log") -> tuple[np.ndarray, np.ndarray]:
    r"""Gradients ``(dr1, dr2)`` of :func:`kerple_bias` for the upstream ``dbias``
    ``(..., num_heads, q_len, k_len)`` (leading axes summed); each ``(num_heads,)``."""
    dbias, r1, r2, variant = check_kerple_grad(dbias, r1, r2, variant, KERPLE_VARIANTS)
    return _bias_backward(dbias, r1, r2, _distance(*dbias.shape[-2:]), variant)


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
    """

    def __init__(self, num_heads: int, *, variant: str = "log", seed=None):
        self.num_heads = check_num_heads(num_heads)
        self.variant = check_choice(variant, "variant", KERPLE_VARIANTS)
        rng = np.random.default_rng(seed)
        first, second = (2.0, 1.0) if self.variant == "log" else (1.0, 2.0)
        r1, r2, _, _ = _clip(rng.random(self.num_heads) * first, rng.random(self.num_heads) * second, self.variant)
        self.params = {"r1": r1, "r2": r2}
        self.grads = {k: np.zeros_like(v) for k, v in self.params.items()}

    def _clipped(self):
        """``_clip`` of the stored parameters, which must be finite float ``(num_heads,)`` arrays."""
        r1, r2 = (np.asarray(self.params[k]) for k in ("r1", "r2"))
        if r1.shape != (self.num_heads,) or r2.shape != (self.num_heads,) or r1.dtype.kind != "f" \
                or r2.dtype.kind != "f" or not (np.all(np.isfinite(r1)) and np.all(np.isfinite(r2))):
            raise ValueError(f"params['r1'] and params['r2'] must be finite float arrays of shape ({self.num_heads},)")
        return _clip(r1, r2, self.variant)

    def bias(self, q_len: int, k_len: int) -> np.ndarray:
        """The bias ``(num_heads, q_len, k_len)`` of the (clipped) parameters."""
        q_len, k_len = check_lengths(q_len, k_len, "KERPLE bias (q_len, k_len)")
        r1, r2, _, _ = self._clipped()
        return _bias(r1, r2, _distance(q_len, k_len), self.variant)

    # -- attention hook ------------------------------------------------------------------
    def logits(self, q, k, scale, mask=None):
        """Hook: the bias (cast to ``q``'s dtype), not multiplied by ``scale``."""
        q, k, scale, mask = check_qk_heads(q, k, scale, mask, self.num_heads, None)
        clipped = self._clipped()
        dist = _distance(q.shape[-2], k.shape[-2])
        return _bias(*clipped[:2], dist, self.variant).astype(q.dtype, copy=False), (clipped, dist)

    def logits_backward(self, dlogits, cache):
        """Hook: writes ``grads["r1"]``, ``grads["r2"]``; no gradient to ``q`` or ``k``."""
        (r1, r2, inside1, inside2), dist = cache
        dr1, dr2 = _bias_backward(dlogits, r1, r2, dist, self.variant)
        self.grads["r1"], self.grads["r2"] = (dr1 * inside1).astype(r1.dtype), (dr2 * inside2).astype(r2.dtype)
        return None, None
