r"""Dynamic position bias: a small MLP of the (log-scaled) signed distance, one bias per head.

Used by CrossFormer (Wang et al. 2021, arXiv 2108.00154, sec. 3.2, "dynamic position bias"
over 2-D offsets) and, in this 1-D form, by x-transformers' ``DynamicPositionBias``:

.. math::

    u(r) = \mathrm{sign}(r)\,\log(|r| + 1) \quad(\texttt{log\_distance=True}), \qquad
    u(r) = r \quad(\texttt{log\_distance=False}),

    b_h(i, j) = f_\theta\big(u(i - j)\big)_h,

with :math:`r = i - j` the signed query - key distance (x-transformers' sign) and :math:`f_\theta`
an MLP of ``depth`` hidden SiLU layers of ``width`` units and a linear output per head
(:mod:`._mlp`): ``Linear(1, width), SiLU, (Linear(width, width), SiLU) * (depth - 1),
Linear(width, heads)``. The MLP is evaluated once per distinct distance and gathered into the
``(heads, q_len, k_len)`` grid; its gradient is the scatter-add back. The bias is added to the
scaled logits, not multiplied by the logit scale.

Positions: query :math:`i` at :math:`i + o`, :math:`o = k_{len} - q_{len}` (bottom-right, as a KV
cache needs; x-transformers only takes ``q_len == k_len``) or an explicit ``query_offset``.

Not implemented: x-transformers' ``norm=True`` (a LayerNorm after each hidden linear layer) and
CrossFormer's 2-D input :math:`(\Delta x, \Delta y)` with ReLU; ``docs/relative.md`` maps the
options.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .._checks import as_float_array, check_alloc, check_bool, check_int, require
from .._util import memo_table, scatter_add_rows, sum_to_shape
from ..attention import Hook, check_hook_args
from ..positions import relative_grid
from ._mlp import check_mlp_grid, check_mlp_params, init_mlp, layer_count, mlp, mlp_backward

__all__ = ["DynamicPositionBias", "dpb_bias", "dpb_bias_backward", "dpb_grid", "dpb_inputs", "dpb_term",
           "dpb_term_backward", "dpb_transform"]


# --------------------------------------------------------------------------- the formulas (cores)

def dpb_transform(r: np.ndarray, log_distance: bool) -> np.ndarray:
    r""":math:`u(r) = \mathrm{sign}(r) \log(|r| + 1)` (or :math:`r`) in float64. Core of :func:`dpb_inputs`.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import dpb
    >>> dpb.dpb_transform(np.array([-3, 0, 1, 7]), True).round(6).tolist()   # -ln 4, 0, ln 2, ln 8
    [-1.386294, 0.0, 0.693147, 2.079442]
    >>> dpb.dpb_transform(np.array([-3, 0, 1, 7]), False).tolist()
    [-3.0, 0.0, 1.0, 7.0]
    """
    r = r.astype(np.float64)
    return np.sign(r) * np.log1p(np.abs(r)) if log_distance else r


@memo_table
def dpb_grid(q_len: int, k_len: int, offset: int, log_distance: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(u, index)``: the MLP inputs of the distinct distances ``i - j`` ``(m, 1)`` and each entry's
    row ``(q_len, k_len)`` (kept, read-only). Arguments are not checked.

    Examples
    --------
    >>> from posenc_np.relative import dpb
    >>> u, index = dpb.dpb_grid(2, 3, 1, False)   # i - j = [[1, 0, -1], [2, 1, 0]]: distinct -1, 0, 1, 2
    >>> u.ravel().tolist(), index.tolist()
    ([-1.0, 0.0, 1.0, 2.0], [[2, 1, 0], [3, 2, 1]])
    """
    distinct, index = np.unique(-relative_grid(q_len, k_len, offset), return_inverse=True)
    return dpb_transform(distinct, log_distance)[:, None], index.reshape(q_len, k_len)


def dpb_term(params: dict, u: np.ndarray, index: np.ndarray) -> tuple[np.ndarray, Any]:
    """The bias ``(heads, q_len, k_len)`` and the MLP cache. Core of :func:`dpb_bias`; not checked.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import dpb
    >>> params = {"w1": np.ones((1, 1)), "b1": np.zeros(1), "w2": np.ones((1, 1)), "b2": np.zeros(1)}   # f(u) = silu(u)
    >>> bias, cache = dpb.dpb_term(params, *dpb.dpb_grid(2, 2, 0, False))   # u = i - j = [[0, -1], [1, 0]]
    >>> bias.round(6).tolist()                                             # silu(1) = sigmoid(1) = 0.731059
    [[[0.0, -0.268941], [0.731059, 0.0]]]
    """
    y, cache = mlp(u.astype(params["w1"].dtype, copy=False), params, "silu")
    return np.moveaxis(y[index], -1, 0), cache


def dpb_term_backward(dbias: np.ndarray, params: dict, cache: Any, index: np.ndarray) -> dict:
    """Gradients of the MLP: the grid's gradient summed per distance, then the MLP's backward.
    Core of :func:`dpb_bias_backward`.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import dpb
    >>> params = {"w1": np.ones((1, 1)), "b1": np.zeros(1), "w2": np.ones((1, 1)), "b2": np.zeros(1)}   # f(u) = silu(u)
    >>> u, index = dpb.dpb_grid(2, 2, 0, False)
    >>> grads = dpb.dpb_term_backward(np.ones((1, 2, 2)), params, dpb.dpb_term(params, u, index)[1], index)
    >>> grads["b2"].tolist(), grads["w2"].round(6).tolist()   # 4 entries; sum of silu = silu(1) + silu(-1)
    ([4.0], [[0.462117]])
    """
    dbias = sum_to_shape(dbias, dbias.shape[-3:])
    dy = scatter_add_rows(index, np.moveaxis(dbias, 0, -1), cache[0][0].shape[0])
    return mlp_backward(dy, params, cache, "silu")[1]


# --------------------------------------------------------------------------- public functions

def dpb_inputs(q_len: int, k_len: int, *, log_distance: bool = True, query_offset: int | None = None) -> np.ndarray:
    r"""The MLP input of every entry, :math:`u(i - j)`, float64 ``(q_len, k_len)``.

    Examples
    --------
    >>> from posenc_np.relative import dpb
    >>> dpb.dpb_inputs(2, 3).round(6).tolist()    # sign(i - j) ln(|i - j| + 1), queries at 1, 2
    [[0.693147, 0.0, -0.693147], [1.098612, 0.693147, 0.0]]
    >>> dpb.dpb_inputs(1, 3, log_distance=False, query_offset=0).tolist()
    [[0.0, -1.0, -2.0]]
    """
    q_len, k_len, offset = check_mlp_grid(q_len, k_len, query_offset, 1)
    log_distance = check_bool(log_distance, "log_distance")
    return dpb_transform(-relative_grid(q_len, k_len, offset), log_distance)


def dpb_bias(params: dict, q_len: int, k_len: int, *, log_distance: bool = True,
             query_offset: int | None = None) -> np.ndarray:
    r"""Dynamic position bias :math:`b_h(i, j)`, shape ``(num_heads, q_len, k_len)``.

    Parameters
    ----------
    params : dict
        The MLP ``w1 (1, width), b1, ..., wL (width, heads), bL`` (``x @ w``; ``L = depth + 1``);
        the dtype of the arrays is kept.
    q_len, k_len : int
        Query and key counts.
    log_distance : bool
        :math:`u(r) = \mathrm{sign}(r)\log(|r| + 1)` when True, the raw distance :math:`r` otherwise.
    query_offset : int, optional
        Position of query 0 (default ``k_len - q_len``, bottom-right).

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import dpb
    >>> params = {"w1": np.ones((1, 1)), "b1": np.zeros(1), "w2": np.ones((1, 1)), "b2": np.zeros(1)}   # f(u) = silu(u)
    >>> dpb.dpb_bias(params, 1, 3, log_distance=False).round(6).tolist()   # u = 2, 1, 0: 2 sigmoid(2), sigmoid(1), 0
    [[[1.761594, 0.731059, 0.0]]]
    """
    params = check_mlp_params(params)
    q_len, k_len, offset = check_mlp_grid(q_len, k_len, query_offset, params["w1"].shape[1])
    log_distance = check_bool(log_distance, "log_distance")
    return dpb_term(params, *dpb_grid(q_len, k_len, offset, log_distance))[0]


def dpb_bias_backward(dbias: ArrayLike, params: dict, *, log_distance: bool = True,
                      query_offset: int | None = None) -> dict:
    """Gradients of :func:`dpb_bias`'s ``params`` (same keys) for ``dbias`` ``(..., heads, q_len, k_len)``
    (leading axes are summed).

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import dpb
    >>> params = dpb.DynamicPositionBias(2, width=4, seed=0).params
    >>> g, dw = np.random.default_rng(1).normal(size=(2, 3, 3)), np.random.default_rng(2).normal(size=(1, 4))
    >>> f = lambda t: (g * dpb.dpb_bias({**params, "w1": params["w1"] + t * dw}, 3, 3)).sum()   # L(w1 + t dw)
    >>> bool(np.isclose((dpb.dpb_bias_backward(g, params)["w1"] * dw).sum(), (f(1e-6) - f(-1e-6)) / 2e-6))
    True
    """
    params = check_mlp_params(params)
    dbias = as_float_array(dbias, "dbias", ndim_min=3)
    heads = params[f"w{layer_count(params)}"].shape[1]
    require(dbias.shape[-3] == heads, f"dbias must be (..., num_heads={heads}, q_len, k_len), got shape {dbias.shape}")
    q_len, k_len, offset = check_mlp_grid(*dbias.shape[-2:], query_offset, params["w1"].shape[1])
    log_distance = check_bool(log_distance, "log_distance")
    u, index = dpb_grid(q_len, k_len, offset, log_distance)
    return dpb_term_backward(dbias, params, dpb_term(params, u, index)[1], index)


class DynamicPositionBias(Hook):
    r"""The dynamic position bias as an attention hook: adds :math:`b_h(i, j)` to the scaled logits.

    Parameters
    ----------
    num_heads : int
        Heads (the MLP's outputs).
    width : int
        Hidden units (x-transformers: ``dim // 4`` of the model width).
    depth : int
        Hidden SiLU layers (x-transformers' ``dynamic_pos_bias_mlp_depth``, default 2).
    log_distance : bool
        Log-scaled signed distance (x-transformers' ``dynamic_pos_bias_log_distance``).
    seed : int or None
        Seed of the ``torch.nn.Linear``-style initialisation.

    Attributes
    ----------
    params, grads : dict
        ``w1, b1, ..., w{depth+1}, b{depth+1}`` (see :func:`dpb_bias`).

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import attention
    >>> from posenc_np.relative import dpb
    >>> hook = dpb.DynamicPositionBias(num_heads=2, width=8, depth=2, seed=0)   # 1 -> 8 -> 8 -> 2 heads
    >>> q = k = v = np.random.default_rng(0).normal(size=(2, 3, 4))
    >>> attention.forward(q, k, v, causal=True, hooks=[hook])[0].shape, sorted(hook.params)
    ((2, 3, 4), ['b1', 'b2', 'b3', 'w1', 'w2', 'w3'])
    """

    def __init__(self, num_heads: int, *, width: int = 16, depth: int = 2, log_distance: bool = True,
                 seed: int | np.random.Generator | None = None):
        self.num_heads = check_int(num_heads, "num_heads", minimum=1)
        self.width = check_int(width, "width", minimum=1)
        self.depth = check_int(depth, "depth", minimum=1, maximum=64)
        n = max(self.width, self.num_heads)
        check_alloc((self.depth + 1, n, n), np.float64, "MLP weights (depth + 1, width, width)")
        self.log_distance = check_bool(log_distance, "log_distance")
        sizes = (1,) + (self.width,) * self.depth + (self.num_heads,)
        self.params = init_mlp(np.random.default_rng(seed), sizes)
        self.grads = {key: np.zeros_like(value) for key, value in self.params.items()}

    def logits(self, q: ArrayLike, k: ArrayLike, scale: float,
               mask: ArrayLike | None = None) -> tuple[np.ndarray | None, Any]:
        """Hook: the bias for query positions ``i + k_len - q_len`` (cast to ``q``'s dtype)."""
        q, k, scale, mask = check_hook_args(q, k, scale, mask, self.num_heads)
        params = check_mlp_params(self.params, self.num_heads, layers=self.depth + 1)
        q_len, k_len, offset = check_mlp_grid(q.shape[-2], k.shape[-2], None, params["w1"].shape[1])
        u, index = dpb_grid(q_len, k_len, offset, self.log_distance)
        bias, cache = dpb_term(params, u, index)
        return bias.astype(q.dtype, copy=False), (params, cache, index)

    def logits_backward(self, dlogits: np.ndarray, cache: Any) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Hook: only the MLP gets gradients (the bias does not depend on ``q`` or ``k``)."""
        params, mcache, index = cache
        grads = dpb_term_backward(dlogits, params, mcache, index)
        self.grads = {key: grads[key].astype(params[key].dtype, copy=False) for key in params}
        return None, None
