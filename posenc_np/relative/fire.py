r"""FIRE: Functional Interpolation for Relative Positions (Li et al. 2023, arXiv 2310.04418).

A per-head bias added to the scaled attention logits, a learned function of the query-key
distance normalised by the query's position:

.. math::

    b_h(i, j) = f_\theta\!\left(\frac{\psi(i - j)}{\psi(\max(L, i)) + \varepsilon}\right)_h,
    \qquad \psi(x) = \log(c\,x + 1),

for a causal query at position :math:`i \ge j`. :math:`f_\theta` is an MLP with one hidden ReLU
layer (``width`` units, 32 in the paper) and one output per head (:mod:`._mlp`). :math:`c` and
:math:`L` are learned. Dividing by :math:`\psi(\max(L, i))` maps every distance a query sees into
:math:`[0, 1]` ("progressive interpolation"); the threshold :math:`L` keeps the normalisation of
short sequences from blowing small distances up.

Positivity, as the paper's reference code keeps it: the parameters are ``c`` and
``L_multiplier`` and the formula uses :math:`|c|` and :math:`L = |L_{mult}|\,L_0` with a fixed
``init_L`` :math:`= L_0 > 0` (512 in the paper, with ``L_multiplier`` starting at 1 and ``c`` at
0.1). So :math:`\psi(x) = \log(|c|\,|x| + 1)`; :math:`\varepsilon` (``eps``, 1e-6 in the reference
code, 0 gives the paper's equation) only matters when :math:`c = 0`. The gradients of the
absolute values are :math:`\mathrm{sign}(c)` and :math:`\mathrm{sign}(L_{mult})\,L_0`.

Positions: key :math:`j` at :math:`j`, query :math:`i` at :math:`i + o` with the query offset
:math:`o = k_{len} - q_{len}` (bottom-right, :mod:`posenc_np.positions`) or an explicit
``query_offset``; under KV-cache decoding :math:`i` is the query's absolute position, so the one
new query of a decoding step is normalised by :math:`\psi(\max(L, \text{its position}))`, as in the
full forward. The distance is :math:`i - j` (query - key); keys after the query (an encoder, no
causal mask) get :math:`\psi(|i - j|)`, symmetric, as the reference code's absolute value gives.
The bias is not multiplied by the logit scale.
"""

from __future__ import annotations

import numpy as np

from .._attention_checks import (check_fire_config, check_fire_distance, check_fire_layer, check_mlp_bias,
                                 check_mlp_bias_grad, check_mlp_hook)
from .._util import memo_table, sum_to_shape
from ..attention import Hook
from ..positions import _grid
from ._mlp import init_mlp, mlp, mlp_backward

__all__ = ["FIREBias", "fire_bias", "fire_bias_backward", "fire_normalized_distance"]

#: The two learned scalars next to the MLP weights.
SCALARS = ("c", "L_multiplier")


# --------------------------------------------------------------------------- the formulas (unchecked)

@memo_table
def _fire_grid(q_len: int, k_len: int, offset: int):
    """``(|i - j|, i)``: float64 distances ``(q_len, k_len)`` and query positions ``(q_len, 1)``."""
    return np.abs(_grid(q_len, k_len, offset)).astype(np.float64), np.arange(offset, offset + q_len,
                                                                           dtype=np.float64)[:, None]


def _ratio(c, lmult, dist, qpos, init_L: float, eps: float):
    r""":math:`x_{ij} = \psi(|i-j|)/(\psi(\max(L, i)) + \varepsilon)` and the pieces its gradient needs."""
    ac, L = np.abs(c[0]), np.abs(lmult[0]) * init_L
    top = np.maximum(qpos, L)
    num = np.log1p(ac * dist)
    den = np.log1p(ac * top) + eps
    return num / den, (ac, L, dist, qpos, top, num, den)


def _ratio_backward(dx, c, lmult, parts, init_L: float):
    r"""Gradients of ``c`` and ``L_multiplier`` from :math:`\partial L/\partial x`:
    :math:`\partial x/\partial |c| = \frac{|i-j|}{(|c||i-j|+1)D} - \frac{x}{D}\frac{M}{|c|M+1}`,
    :math:`\partial x/\partial L = -\frac{x}{D}\frac{|c|}{|c|M+1}[L > i]`, with :math:`M = \max(L, i)`."""
    ac, L, dist, qpos, top, num, den = parts
    x = num / den
    dac = dist / ((ac * dist + 1.0) * den) - x / den * top / (ac * top + 1.0)
    dL = -x / den * ac / (ac * top + 1.0) * (L > qpos)
    return (np.sum(dx * dac) * np.sign(c)).reshape(1), (np.sum(dx * dL) * init_L * np.sign(lmult)).reshape(1)


def _fire(params: dict, dist, qpos, init_L: float, eps: float):
    """The bias ``(heads, q_len, k_len)`` and the cache of :func:`_fire_backward`."""
    x, parts = _ratio(params["c"], params["L_multiplier"], dist, qpos, init_L, eps)
    y, mcache = mlp(x.reshape(-1, 1).astype(params["w1"].dtype, copy=False), params, "relu")
    return np.moveaxis(y.reshape(x.shape + (y.shape[-1],)), -1, 0), (parts, mcache)


def _fire_backward(dbias, params: dict, cache, init_L: float) -> dict:
    """Gradients of every parameter from ``dbias`` ``(..., heads, q_len, k_len)``."""
    parts, mcache = cache
    dbias = sum_to_shape(dbias, dbias.shape[-3:])
    dy = np.moveaxis(dbias, 0, -1).reshape(-1, dbias.shape[0])
    dx, grads = mlp_backward(dy, params, mcache, "relu")
    grads["c"], grads["L_multiplier"] = _ratio_backward(dx.reshape(dbias.shape[1:]), params["c"],
                                                             params["L_multiplier"], parts, init_L)
    return grads


# --------------------------------------------------------------------------- public functions

def fire_normalized_distance(q_len: int, k_len: int, *, c: float = 0.1, L: float = 512.0, eps: float = 1e-6,
                             query_offset=None) -> np.ndarray:
    r"""The MLP's input :math:`\psi(|i-j|)/(\psi(\max(L, i)) + \varepsilon)`, float64 ``(q_len, k_len)``.

    ``c`` and ``L`` are the effective values (:math:`|c|` and :math:`L > 0` are used); query
    :math:`i` sits at ``i + query_offset`` (default ``k_len - q_len``).
    """
    q_len, k_len, offset, c, L, eps = check_fire_distance(q_len, k_len, c, L, eps, query_offset)
    return _ratio(c, np.ones(1), *_fire_grid(q_len, k_len, offset), L, eps)[0]


def fire_bias(params: dict, q_len: int, k_len: int, *, init_L: float = 512.0, eps: float = 1e-6,
              query_offset=None) -> np.ndarray:
    r"""FIRE bias :math:`b_h(i, j)`, shape ``(num_heads, q_len, k_len)``.

    Parameters
    ----------
    params : dict
        ``w1 (1, width), b1, w2 (width, heads), b2`` (the MLP, ``x @ w``), ``c (1,)`` and
        ``L_multiplier (1,)``; the dtype of the arrays is kept.
    q_len, k_len : int
        Query and key counts.
    init_L : float
        :math:`L_0 > 0`: the threshold is :math:`L = |L_{mult}|\,L_0`.
    eps : float
        :math:`\varepsilon \ge 0` added to the normaliser.
    query_offset : int, optional
        Position of query 0 (default ``k_len - q_len``, bottom-right).
    """
    params, q_len, k_len, offset = check_mlp_bias(params, q_len, k_len, query_offset, SCALARS)
    init_L, eps = check_fire_config(init_L, eps)
    return _fire(params, *_fire_grid(q_len, k_len, offset), init_L, eps)[0]


def fire_bias_backward(dbias, params: dict, *, init_L: float = 512.0, eps: float = 1e-6, query_offset=None) -> dict:
    """Gradients of :func:`fire_bias`'s ``params`` (same keys) for ``dbias`` ``(..., heads, q_len, k_len)``
    (leading axes are summed)."""
    dbias, params, q_len, k_len, offset = check_mlp_bias_grad(dbias, params, query_offset, SCALARS)
    init_L, eps = check_fire_config(init_L, eps)
    return _fire_backward(dbias, params, _fire(params, *_fire_grid(q_len, k_len, offset), init_L, eps)[1], init_L)


class FIREBias(Hook):
    r"""FIRE as an attention hook: adds :math:`b_h(i, j)` to the scaled logits.

    Parameters
    ----------
    num_heads : int
        Heads (the MLP's outputs).
    width : int
        Hidden units of the MLP (32 in the paper).
    init_c, init_L : float
        Initial :math:`c` (0.1) and the fixed :math:`L_0` (512); ``L_multiplier`` starts at 1.
    eps : float
        :math:`\varepsilon` of the normaliser.
    seed : int or None
        Seed of the MLP's ``torch.nn.Linear``-style initialisation.

    Attributes
    ----------
    params, grads : dict
        ``w1, b1, w2, b2, c, L_multiplier`` (see :func:`fire_bias`).
    """

    def __init__(self, num_heads: int, *, width: int = 32, init_c: float = 0.1, init_L: float = 512.0,
                 eps: float = 1e-6, seed=None):
        self.num_heads, self.width, c, self.init_L, self.eps = check_fire_layer(num_heads, width, init_c, init_L, eps)
        self.params = {**init_mlp(np.random.default_rng(seed), (1, self.width, self.num_heads)), "c": c,
                       "L_multiplier": np.ones(1)}
        self.grads = {key: np.zeros_like(value) for key, value in self.params.items()}

    def logits(self, q, k, scale, mask=None):
        """Hook: the bias for query positions ``i + k_len - q_len`` (cast to ``q``'s dtype)."""
        q, params, q_len, k_len = check_mlp_hook(q, k, scale, mask, self.params, self.num_heads, 2, SCALARS)
        bias, cache = _fire(params, *_fire_grid(q_len, k_len, k_len - q_len), self.init_L, self.eps)
        return bias.astype(q.dtype, copy=False), (params, cache)

    def logits_backward(self, dlogits, cache):
        """Hook: only the parameters get gradients (the bias does not depend on ``q`` or ``k``)."""
        params, fcache = cache
        grads = _fire_backward(dlogits, params, fcache, self.init_L)
        self.grads = {key: grads[key].astype(params[key].dtype, copy=False) for key in params}
        return None, None
