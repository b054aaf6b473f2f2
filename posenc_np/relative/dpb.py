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

import numpy as np

from .._attention_checks import check_mlp_bias, check_mlp_bias_grad, check_mlp_grid, check_mlp_hook, check_mlp_layer
from .._checks import check_bool
from .._util import memo_table, scatter_add_rows, sum_to_shape
from ..attention import Hook
from ..positions import _grid
from ._mlp import init_mlp, mlp, mlp_backward

__all__ = ["DynamicPositionBias", "dpb_bias", "dpb_bias_backward", "dpb_inputs"]


# --------------------------------------------------------------------------- the formulas (unchecked)

def _inputs(r: np.ndarray, log_distance: bool) -> np.ndarray:
    r""":math:`u(r) = \mathrm{sign}(r) \log(|r| + 1)` (or :math:`r`) in float64."""
    r = r.astype(np.float64)
    return np.sign(r) * np.log1p(np.abs(r)) if log_distance else r


@memo_table
def _dpb_grid(q_len: int, k_len: int, offset: int, log_distance: bool):
    """``(u, index)``: the MLP inputs of the distinct distances ``i - j`` ``(m, 1)`` and each entry's
    row ``(q_len, k_len)``."""
    distinct, index = np.unique(-_grid(q_len, k_len, offset), return_inverse=True)
    return _inputs(distinct, log_distance)[:, None], index.reshape(q_len, k_len)


def _dpb(params: dict, u, index):
    """The bias ``(heads, q_len, k_len)`` and the MLP cache."""
    y, cache = mlp(u.astype(params["w1"].dtype, copy=False), params, "silu")
    return np.moveaxis(y[index], -1, 0), cache


def _dpb_backward(dbias, params: dict, cache, index) -> dict:
    """Gradients of the MLP: the grid's gradient summed per distance, then the MLP's backward."""
    dbias = sum_to_shape(dbias, dbias.shape[-3:])
    dy = scatter_add_rows(index, np.moveaxis(dbias, 0, -1), cache[0][0].shape[0])
    return mlp_backward(dy, params, cache, "silu")[1]


# --------------------------------------------------------------------------- public functions

def dpb_inputs(q_len: int, k_len: int, *, log_distance: bool = True, query_offset=None) -> np.ndarray:
    r"""The MLP input of every entry, :math:`u(i - j)`, float64 ``(q_len, k_len)``."""
    q_len, k_len, offset = check_mlp_grid(q_len, k_len, query_offset, 1)
    return _inputs(-_grid(q_len, k_len, offset), check_bool(log_distance, "log_distance"))


def dpb_bias(params: dict, q_len: int, k_len: int, *, log_distance: bool = True, query_offset=None) -> np.ndarray:
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
    """
    params, q_len, k_len, offset = check_mlp_bias(params, q_len, k_len, query_offset)
    return _dpb(params, *_dpb_grid(q_len, k_len, offset, check_bool(log_distance, "log_distance")))[0]


def dpb_bias_backward(dbias, params: dict, *, log_distance: bool = True, query_offset=None) -> dict:
    """Gradients of :func:`dpb_bias`'s ``params`` (same keys) for ``dbias`` ``(..., heads, q_len, k_len)``
    (leading axes are summed)."""
    dbias, params, q_len, k_len, offset = check_mlp_bias_grad(dbias, params, query_offset)
    u, index = _dpb_grid(q_len, k_len, offset, check_bool(log_distance, "log_distance"))
    return _dpb_backward(dbias, params, _dpb(params, u, index)[1], index)


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
    """

    def __init__(self, num_heads: int, *, width: int = 16, depth: int = 2, log_distance: bool = True, seed=None):
        self.num_heads, self.width, self.depth = check_mlp_layer(num_heads, width, depth)
        self.log_distance = check_bool(log_distance, "log_distance")
        sizes = (1,) + (self.width,) * self.depth + (self.num_heads,)
        self.params = init_mlp(np.random.default_rng(seed), sizes)
        self.grads = {key: np.zeros_like(value) for key, value in self.params.items()}

    def logits(self, q, k, scale, mask=None):
        """Hook: the bias for query positions ``i + k_len - q_len`` (cast to ``q``'s dtype)."""
        q, params, q_len, k_len = check_mlp_hook(q, k, scale, mask, self.params, self.num_heads, self.depth + 1)
        u, index = _dpb_grid(q_len, k_len, k_len - q_len, self.log_distance)
        bias, cache = _dpb(params, u, index)
        return bias.astype(q.dtype, copy=False), (params, cache, index)

    def logits_backward(self, dlogits, cache):
        """Hook: only the MLP gets gradients (the bias does not depend on ``q`` or ``k``)."""
        params, mcache, index = cache
        grads = _dpb_backward(dlogits, params, mcache, index)
        self.grads = {key: grads[key].astype(params[key].dtype, copy=False) for key in params}
        return None, None
