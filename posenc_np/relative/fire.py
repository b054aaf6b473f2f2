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

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .._checks import as_float_array, check_alloc, check_int, check_real, require
from .._util import memo_table, sum_to_shape
from ..attention import Hook, check_hook_args
from ..positions import relative_grid
from ._mlp import check_mlp_grid, check_mlp_params, init_mlp, layer_count, mlp, mlp_backward

__all__ = ["FIREBias", "fire_bias", "fire_bias_backward", "fire_grid", "fire_normalized_distance", "fire_ratio",
           "fire_ratio_backward", "fire_term", "fire_term_backward"]

#: The two learned scalars next to the MLP weights.
SCALARS = ("c", "L_multiplier")


# --------------------------------------------------------------------------- the formulas (cores)

@memo_table
def fire_grid(q_len: int, k_len: int, offset: int) -> tuple[np.ndarray, np.ndarray]:
    """``(|i - j|, i)``: float64 distances ``(q_len, k_len)`` and query positions ``(q_len, 1)`` (kept, read-only).

    Examples
    --------
    >>> from posenc_np.relative import fire
    >>> dist, qpos = fire.fire_grid(2, 3, 1)     # queries at positions 1, 2
    >>> dist.tolist(), qpos.tolist()             # |i - j| and i
    ([[1.0, 0.0, 1.0], [2.0, 1.0, 0.0]], [[1.0], [2.0]])
    """
    return np.abs(relative_grid(q_len, k_len, offset)).astype(np.float64), np.arange(offset, offset + q_len,
                                                                           dtype=np.float64)[:, None]


def fire_ratio(c: np.ndarray, lmult: np.ndarray, dist: np.ndarray, qpos: np.ndarray, init_L: float,
               eps: float) -> tuple[np.ndarray, tuple]:
    r""":math:`x_{ij} = \psi(|i-j|)/(\psi(\max(L, i)) + \varepsilon)` and the pieces its gradient needs.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import fire
    >>> one = np.array([1.0])                    # c = 1, L_multiplier = 1: psi(x) = ln(x + 1), L = init_L = 3
    >>> x, parts = fire.fire_ratio(one, one, np.array([[0.0, 1.0, 3.0]]), np.array([[3.0]]), 3.0, 0.0)
    >>> x.tolist()                               # 0, ln 2 / ln 4, ln 4 / ln 4
    [[0.0, 0.5, 1.0]]
    """
    ac, L = np.abs(c[0]), np.abs(lmult[0]) * init_L
    top = np.maximum(qpos, L)
    num = np.log1p(ac * dist)
    den = np.log1p(ac * top) + eps
    return num / den, (ac, L, dist, qpos, top, num, den)


def fire_ratio_backward(dx: np.ndarray, c: np.ndarray, lmult: np.ndarray, parts: tuple,
                        init_L: float) -> tuple[np.ndarray, np.ndarray]:
    r"""Gradients of ``c`` and ``L_multiplier`` from :math:`\partial L/\partial x`:
    :math:`\partial x/\partial |c| = \frac{|i-j|}{(|c||i-j|+1)D} - \frac{x}{D}\frac{M}{|c|M+1}`,
    :math:`\partial x/\partial L = -\frac{x}{D}\frac{|c|}{|c|M+1}[L > i]`, with :math:`M = \max(L, i)`.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import fire
    >>> m, (dist, qpos) = np.array([1.0]), fire.fire_grid(3, 3, 0)
    >>> f = lambda c: fire.fire_ratio(np.array([c]), m, dist, qpos, 2.5, 1e-6)   # L = 2.5 > i for i = 0, 1, 2
    >>> dc, dm = fire.fire_ratio_backward(np.ones((3, 3)), np.array([0.5]), m, f(0.5)[1], 2.5)   # of L = sum(x)
    >>> bool(np.isclose(dc[0], (f(0.5 + 1e-6)[0].sum() - f(0.5 - 1e-6)[0].sum()) / 2e-6)), dm.shape
    (True, (1,))
    """
    ac, L, dist, qpos, top, num, den = parts
    x = num / den
    dac = dist / ((ac * dist + 1.0) * den) - x / den * top / (ac * top + 1.0)
    dL = -x / den * ac / (ac * top + 1.0) * (L > qpos)
    return (np.sum(dx * dac) * np.sign(c)).reshape(1), (np.sum(dx * dL) * init_L * np.sign(lmult)).reshape(1)


def fire_term(params: dict, dist: np.ndarray, qpos: np.ndarray, init_L: float, eps: float) -> tuple[np.ndarray, tuple]:
    """The bias ``(heads, q_len, k_len)`` and the cache of :func:`fire_term_backward`. Core of :func:`fire_bias`;
    arguments are not checked.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import fire
    >>> params = {"w1": np.array([[1.0]]), "b1": np.zeros(1), "w2": np.array([[2.0]]), "b2": np.array([0.5]),
    ...           "c": np.array([1.0]), "L_multiplier": np.array([1.0])}     # f(x) = 2 relu(x) + 0.5, one head
    >>> bias, cache = fire.fire_term(params, np.array([[0.0, 1.0, 3.0]]), np.array([[3.0]]), 3.0, 0.0)
    >>> bias.tolist()                            # x = 0, 1/2, 1
    [[[0.5, 1.5, 2.5]]]
    """
    x, parts = fire_ratio(params["c"], params["L_multiplier"], dist, qpos, init_L, eps)
    y, mcache = mlp(x.reshape(-1, 1).astype(params["w1"].dtype, copy=False), params, "relu")
    return np.moveaxis(y.reshape(x.shape + (y.shape[-1],)), -1, 0), (parts, mcache)


def fire_term_backward(dbias: np.ndarray, params: dict, cache: Any, init_L: float) -> dict:
    """Gradients of every parameter from ``dbias`` ``(..., heads, q_len, k_len)``. Core of :func:`fire_bias_backward`.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import fire
    >>> params = {"w1": np.array([[1.0]]), "b1": np.zeros(1), "w2": np.array([[2.0]]), "b2": np.array([0.5]),
    ...           "c": np.array([1.0]), "L_multiplier": np.array([1.0])}     # f(x) = 2 relu(x) + 0.5, one head
    >>> bias, cache = fire.fire_term(params, np.array([[0.0, 1.0, 3.0]]), np.array([[3.0]]), 3.0, 0.0)
    >>> grads = fire.fire_term_backward(np.ones((1, 1, 3)), params, cache, 3.0)
    >>> grads["b2"].tolist(), grads["w2"].tolist()   # sum of 1, and sum of relu(x) = 0 + 1/2 + 1
    ([3.0], [[1.5]])
    """
    parts, mcache = cache
    dbias = sum_to_shape(dbias, dbias.shape[-3:])
    dy = np.moveaxis(dbias, 0, -1).reshape(-1, dbias.shape[0])
    dx, grads = mlp_backward(dy, params, mcache, "relu")
    grads["c"], grads["L_multiplier"] = fire_ratio_backward(dx.reshape(dbias.shape[1:]), params["c"],
                                                             params["L_multiplier"], parts, init_L)
    return grads


# --------------------------------------------------------------------------- public functions

def fire_normalized_distance(q_len: int, k_len: int, *, c: float = 0.1, L: float = 512.0, eps: float = 1e-6,
                             query_offset: int | None = None) -> np.ndarray:
    r"""The MLP's input :math:`\psi(|i-j|)/(\psi(\max(L, i)) + \varepsilon)`, float64 ``(q_len, k_len)``.

    ``c`` and ``L`` are the effective values (:math:`|c|` and :math:`L > 0` are used); query
    :math:`i` sits at ``i + query_offset`` (default ``k_len - q_len``).

    Examples
    --------
    >>> from posenc_np.relative import fire
    >>> fire.fire_normalized_distance(1, 4, c=1.0, L=3.0, eps=0.0).round(6).tolist()   # query at 3: ln(1 + |i-j|)/ln 4
    [[1.0, 0.792481, 0.5, 0.0]]
    >>> fire.fire_normalized_distance(1, 8, c=1.0, L=3.0, eps=0.0)[0, [0, 4, 6]].round(6).tolist()   # / ln 8
    [1.0, 0.666667, 0.333333]
    """
    q_len, k_len, offset = check_mlp_grid(q_len, k_len, query_offset, 1)
    c = check_real(c, "c")
    L = check_real(L, "L", positive=True)
    eps = check_real(eps, "eps", nonnegative=True)
    require(math.isfinite(abs(c) * max(L, abs(offset) + q_len + k_len)), f"c * position overflows float64 (c = {c}, "
            f"L = {L}, query_offset = {offset})")
    return fire_ratio(np.array([c]), np.ones(1), *fire_grid(q_len, k_len, offset), L, eps)[0]


def fire_bias(params: dict, q_len: int, k_len: int, *, init_L: float = 512.0, eps: float = 1e-6,
              query_offset: int | None = None) -> np.ndarray:
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

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import fire
    >>> params = {"w1": np.array([[1.0]]), "b1": np.zeros(1), "w2": np.array([[2.0]]), "b2": np.array([0.5]),
    ...           "c": np.array([1.0]), "L_multiplier": np.array([1.0])}     # f(x) = 2 relu(x) + 0.5, one head
    >>> fire.fire_bias(params, 1, 4, init_L=3.0, eps=0.0).round(6).tolist()   # x = 1, ln 3 / ln 4, 1/2, 0
    [[[2.5, 2.084963, 1.5, 0.5]]]
    """
    params = check_mlp_params(params, extra=SCALARS)
    q_len, k_len, offset = check_mlp_grid(q_len, k_len, query_offset, params["w1"].shape[1])
    init_L = check_real(init_L, "init_L", positive=True)
    eps = check_real(eps, "eps", nonnegative=True)
    return fire_term(params, *fire_grid(q_len, k_len, offset), init_L, eps)[0]


def fire_bias_backward(dbias: ArrayLike, params: dict, *, init_L: float = 512.0, eps: float = 1e-6,
                       query_offset: int | None = None) -> dict:
    """Gradients of :func:`fire_bias`'s ``params`` (same keys) for ``dbias`` ``(..., heads, q_len, k_len)``
    (leading axes are summed).

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import fire
    >>> params = fire.FIREBias(2, width=4, init_L=4.0, seed=0).params   # two heads, c = 0.1
    >>> g = np.random.default_rng(1).normal(size=(2, 3, 3))
    >>> f = lambda c: (g * fire.fire_bias({**params, "c": np.array([c])}, 3, 3, init_L=4.0)).sum()   # L(c)
    >>> bool(np.isclose(fire.fire_bias_backward(g, params, init_L=4.0)["c"][0], (f(0.1 + 1e-6) - f(0.1 - 1e-6)) / 2e-6))
    True
    """
    params = check_mlp_params(params, extra=SCALARS)
    dbias = as_float_array(dbias, "dbias", ndim_min=3)
    heads = params[f"w{layer_count(params)}"].shape[1]
    require(dbias.shape[-3] == heads, f"dbias must be (..., num_heads={heads}, q_len, k_len), got shape {dbias.shape}")
    q_len, k_len, offset = check_mlp_grid(*dbias.shape[-2:], query_offset, params["w1"].shape[1])
    init_L = check_real(init_L, "init_L", positive=True)
    eps = check_real(eps, "eps", nonnegative=True)
    cache = fire_term(params, *fire_grid(q_len, k_len, offset), init_L, eps)[1]
    return fire_term_backward(dbias, params, cache, init_L)


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

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import attention
    >>> from posenc_np.relative import fire
    >>> hook = fire.FIREBias(num_heads=2, width=8, seed=0)   # c = 0.1, L = 512
    >>> q = k = v = np.random.default_rng(0).normal(size=(2, 3, 4))
    >>> attention.forward(q, k, v, causal=True, hooks=[hook])[0].shape, hook.params["w1"].shape
    ((2, 3, 4), (1, 8))
    """

    def __init__(self, num_heads: int, *, width: int = 32, init_c: float = 0.1, init_L: float = 512.0,
                 eps: float = 1e-6, seed: int | np.random.Generator | None = None):
        self.num_heads = check_int(num_heads, "num_heads", minimum=1)
        self.width = check_int(width, "width", minimum=1)
        check_alloc((self.width + 2, self.num_heads + 1), np.float64, "MLP weights (width + 2, num_heads + 1)")
        c = check_real(init_c, "init_c")
        self.init_L = check_real(init_L, "init_L", positive=True)
        self.eps = check_real(eps, "eps", nonnegative=True)
        self.params = {**init_mlp(np.random.default_rng(seed), (1, self.width, self.num_heads)), "c": np.array([c]),
                       "L_multiplier": np.ones(1)}
        self.grads = {key: np.zeros_like(value) for key, value in self.params.items()}

    def logits(self, q: ArrayLike, k: ArrayLike, scale: float,
               mask: ArrayLike | None = None) -> tuple[np.ndarray | None, Any]:
        """Hook: the bias for query positions ``i + k_len - q_len`` (cast to ``q``'s dtype)."""
        q, k, scale, mask = check_hook_args(q, k, scale, mask, self.num_heads)
        params = check_mlp_params(self.params, self.num_heads, extra=SCALARS, layers=2)
        q_len, k_len, offset = check_mlp_grid(q.shape[-2], k.shape[-2], None, params["w1"].shape[1])
        bias, cache = fire_term(params, *fire_grid(q_len, k_len, offset), self.init_L, self.eps)
        return bias.astype(q.dtype, copy=False), (params, cache)

    def logits_backward(self, dlogits: np.ndarray, cache: Any) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Hook: only the parameters get gradients (the bias does not depend on ``q`` or ``k``)."""
        params, fcache = cache
        grads = fire_term_backward(dlogits, params, fcache, self.init_L)
        self.grads = {key: grads[key].astype(params[key].dtype, copy=False) for key in params}
        return None, None
