r"""Relative position representations of Shaw, Uszkoreit & Vaswani (2018), "Self-Attention
with Relative Position Representations" (NAACL), as in tensor2tensor
``dot_product_attention_relative``.

Sign convention: :math:`r_{ij} = \text{key} - \text{query}`, clipped to :math:`[-K, K]`
(:math:`K` = ``max_relative_position``) and shifted to the table index
:math:`\text{idx}_{ij} = \mathrm{clip}(r_{ij}, -K, K) + K \in [0, 2K]`. Two learned tables of
:math:`2K+1` rows, :math:`w^K` and :math:`w^V`, give :math:`a^K_{ij} = w^K[\text{idx}_{ij}]` and
:math:`a^V_{ij} = w^V[\text{idx}_{ij}]`:

.. math::

    e_{ij} = s\,\big(q_i \cdot k_j + q_i \cdot a^K_{ij}\big), \qquad
    z_i = \sum_j p_{ij}\,\big(v_j + a^V_{ij}\big)

with :math:`s` the attention scale (tensor2tensor scales ``q`` by :math:`d^{-1/2}` before both
dot products, so the relative term is scaled too). As in the paper and tensor2tensor, the
tables are shared across heads (and batch); each row has the per-head width.

Positions come from the shapes with the attention core's alignment: key :math:`j` at
:math:`j`, query :math:`i` at :math:`i + (k_{len} - q_{len})` (tensor2tensor takes the last
``q_len`` key positions as the query positions too).

Gradients (with :math:`G = \partial L/\partial e` and :math:`U = \partial L/\partial z`):
:math:`\partial L/\partial q_i \mathrel{+}= s\sum_j G_{ij}\,a^K_{ij}`,
:math:`\partial L/\partial w^K[r] = s\sum_{\text{idx}_{ij} = r} G_{ij}\,q_i`,
:math:`\partial L/\partial p_{ij} \mathrel{+}= U_i \cdot a^V_{ij}`,
:math:`\partial L/\partial w^V[r] = \sum_{\text{idx}_{ij} = r} p_{ij}\,U_i`
(sums also run over batch and heads; the table gradients are scatter-adds).

The implementation gathers :math:`a_{ij}` as a ``(q_len, k_len, d)`` array, exactly as the
formula reads (tensor2tensor does the same); memory grows as ``q_len * k_len * d``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .._checks import (as_float_array, check_alloc, check_bool, check_grad, check_int, check_lengths, check_real,
                       require)
from .._util import memo_table, normal_init, scatter_add_rows
from ..attention import Hook, check_hook_args
from ..positions import relative_grid

__all__ = [
    "ShawRelativeAttention",
    "shaw_index_grid",
    "shaw_key_term",
    "shaw_key_term_backward",
    "shaw_logits",
    "shaw_logits_backward",
    "shaw_relative_index",
    "shaw_value_term",
    "shaw_value_term_backward",
    "shaw_values",
    "shaw_values_backward",
]

# --------------------------------------------------------------------------- the formulas (cores)

@memo_table
def shaw_index_grid(q_len: int, k_len: int, kmax: int) -> np.ndarray:
    r""":math:`\mathrm{idx}_{ij} = \mathrm{clip}(r_{ij}, -K, K) + K`, kept (read-only) per (lengths, K).

    Core of :func:`shaw_relative_index`; arguments are not checked.

    Examples
    --------
    >>> from posenc_np.relative import shaw
    >>> shaw.shaw_index_grid(2, 3, 1).tolist()   # r = [[-1, 0, 1], [-2, -1, 0]] clipped to [-1, 1], plus K = 1
    [[0, 1, 2], [0, 0, 1]]
    """
    return np.clip(relative_grid(q_len, k_len, k_len - q_len), -kmax, kmax) + kmax


def _flat(x: np.ndarray) -> np.ndarray:
    """Merge the leading axes of ``(..., m, n)`` into one, so that einsum can sum over them."""
    return x.reshape((-1,) + x.shape[-2:])


def shaw_key_term(q: np.ndarray, table: np.ndarray, k_len: int, scale: float) -> np.ndarray:
    r""":math:`s\,q_i \cdot w^K[\mathrm{idx}_{ij}]`, ``(..., q_len, k_len)``. Core of :func:`shaw_logits`.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import shaw
    >>> q = np.array([[1.0, 2.0], [3.0, 4.0]])
    >>> table = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])   # K = 1: rows for r = -1, 0, 1
    >>> shaw.shaw_key_term(q, table, 2, 1.0).tolist()            # idx [[1, 2], [0, 1]]: q0.t1, q0.t2 / q1.t0, q1.t1
    [[2.0, 3.0], [3.0, 4.0]]
    """
    rel = table[shaw_index_grid(q.shape[-2], k_len, (table.shape[0] - 1) // 2)]  # a^K_ij, (q_len, k_len, d)
    return (scale * np.einsum("...id,ijd->...ij", q, rel)).astype(np.result_type(q, table), copy=False)


def shaw_key_term_backward(dlogits: np.ndarray, q: np.ndarray, table: np.ndarray,
                           scale: float) -> tuple[np.ndarray, np.ndarray]:
    r"""``(dq, dtable)``: :math:`dq_i = s \sum_j G_{ij} a^K_{ij}`, :math:`dw^K[r] = s \sum_{\mathrm{idx}_{ij}=r} G_{ij} q_i`.
    Core of :func:`shaw_logits_backward`.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import shaw
    >>> q, table, g = [np.random.default_rng(i).normal(size=s) for i, s in enumerate([(2, 3, 4), (5, 4), (2, 3, 3)])]
    >>> dq, dtable = shaw.shaw_key_term_backward(g, q, table, 0.5)
    >>> e = (g * shaw.shaw_key_term(q, table, 3, 0.5)).sum()    # bilinear: <G, term> = <dq, q> = <dtable, table>
    >>> bool(np.isclose(e, (dq * q).sum()) and np.isclose(e, (dtable * table).sum())), dtable.shape
    (True, (5, 4))
    """
    index = shaw_index_grid(q.shape[-2], dlogits.shape[-1], (table.shape[0] - 1) // 2)
    dq = scale * np.einsum("...ij,ijd->...id", dlogits, table[index])
    drel = scale * np.einsum("bij,bid->ijd", _flat(dlogits), _flat(q))  # dL/da^K_ij, summed over leading axes
    return dq, scatter_add_rows(index, drel, table.shape[0])


def shaw_value_term(probs: np.ndarray, table: np.ndarray) -> np.ndarray:
    r""":math:`\sum_j p_{ij}\, w^V[\mathrm{idx}_{ij}]`, ``(..., q_len, d_v)``. Core of :func:`shaw_values`.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import shaw
    >>> probs = np.array([[1.0, 0.0], [0.5, 0.5]])
    >>> table = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])   # K = 1; idx [[1, 2], [0, 1]]
    >>> shaw.shaw_value_term(probs, table).tolist()              # row 1: (t0 + t1) / 2
    [[0.0, 1.0], [0.5, 0.5]]
    """
    rel = table[shaw_index_grid(probs.shape[-2], probs.shape[-1], (table.shape[0] - 1) // 2)]  # a^V_ij
    return np.einsum("...ij,ijd->...id", probs, rel).astype(np.result_type(probs, table), copy=False)


def shaw_value_term_backward(dout: np.ndarray, probs: np.ndarray, table: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r"""``(dprobs, dtable)``: :math:`dp_{ij} = U_i \cdot a^V_{ij}`, :math:`dw^V[r] = \sum_{\mathrm{idx}_{ij}=r} p_{ij} U_i`.
    Core of :func:`shaw_values_backward`.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import shaw
    >>> probs, table, u = [np.random.default_rng(i).random(s) for i, s in enumerate([(2, 3, 3), (5, 4), (2, 3, 4)])]
    >>> dprobs, dtable = shaw.shaw_value_term_backward(u, probs, table)
    >>> e = (u * shaw.shaw_value_term(probs, table)).sum()    # bilinear: <U, z> = <dprobs, probs> = <dtable, table>
    >>> bool(np.isclose(e, (dprobs * probs).sum()) and np.isclose(e, (dtable * table).sum())), dtable.shape
    (True, (5, 4))
    """
    index = shaw_index_grid(probs.shape[-2], probs.shape[-1], (table.shape[0] - 1) // 2)
    dprobs = np.einsum("...id,ijd->...ij", dout, table[index])
    drel = np.einsum("bij,bid->ijd", _flat(probs), _flat(dout))
    return dprobs, scatter_add_rows(index, drel, table.shape[0])


# --------------------------------------------------------------------------- public functions

def _check_table(table, width=None) -> np.ndarray:
    """A ``(2K + 1, dim)`` table (an odd row count; ``width`` columns when given), for the four doors."""
    table = as_float_array(table, "table")
    require(table.ndim == 2 and table.shape[0] % 2 == 1 and table.shape[1] >= 1 and width in (None, table.shape[1]),
            f"table must be a non-empty 2-D (2*max_relative_position + 1, dim) table (odd row count)"
            f"{'' if width is None else f' of width {width}, the last axis of q'}, got shape {table.shape}")
    return table


def shaw_relative_index(q_len: int, k_len: int, max_relative_position: int) -> np.ndarray:
    r"""``(q_len, k_len)`` int64 table index :math:`\mathrm{clip}(j - i - (k_{len}-q_{len}), -K, K) + K`.

    Parameters
    ----------
    q_len, k_len : int
        Query and key lengths (queries are the last ``q_len`` positions, :mod:`posenc_np.positions`).
    max_relative_position : int
        Clipping distance :math:`K \ge 0` (the paper's ablation includes :math:`K = 0`, where
        every pair shares one vector).

    Examples
    --------
    >>> from posenc_np.relative import shaw
    >>> shaw.shaw_relative_index(3, 3, 1).tolist()   # clip(j - i, -1, 1) + 1
    [[1, 2, 2], [0, 1, 2], [0, 0, 1]]
    >>> shaw.shaw_relative_index(2, 2, 0).tolist()   # K = 0: every pair shares row 0
    [[0, 0], [0, 0]]
    """
    q_len, k_len = check_lengths(q_len, k_len, "relative index (q_len, k_len)")
    kmax = check_int(max_relative_position, "max_relative_position", minimum=0, maximum=2**62)
    return shaw_index_grid(q_len, k_len, kmax).copy()


def shaw_logits(q: ArrayLike, table: ArrayLike, k_len: int, *, scale: float = 1.0) -> np.ndarray:
    r"""Relative key term :math:`s\,q_i \cdot w^K[\text{idx}_{ij}]`, shape ``(..., q_len, k_len)``.

    Parameters
    ----------
    q : ndarray ``(..., q_len, d)``
    table : ndarray ``(2K+1, d)``
        :math:`w^K`, shared over the leading axes of ``q``.
    k_len : int
    scale : float
        :math:`s`; the attention scale (``1/sqrt(d)`` in the paper).

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import shaw
    >>> q = np.array([[1.0, 2.0], [3.0, 4.0]])
    >>> table = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])   # K = 1: rows for r = -1, 0, 1
    >>> shaw.shaw_logits(q, table, 2, scale=0.5).tolist()        # idx [[1, 2], [0, 1]], times s = 0.5
    [[1.0, 1.5], [1.5, 2.0]]
    """
    q = as_float_array(q, "q", ndim_min=2)
    table = _check_table(table, q.shape[-1])
    scale = check_real(scale, "scale", positive=True)
    _, k_len = check_lengths(q.shape[-2], k_len, "relative index (q_len, k_len)")
    return shaw_key_term(q, table, k_len, scale)


def shaw_logits_backward(dlogits: ArrayLike, q: ArrayLike, table: ArrayLike, *,
                         scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    r"""Gradients ``(dq, dtable)`` of :func:`shaw_logits`.

    :math:`dq_i = s \sum_j G_{ij}\, a^K_{ij}`; :math:`dw^K[r] = s \sum_{\text{idx}_{ij}=r} G_{ij}\, q_i`
    summed over the leading axes (scatter-add).

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import shaw
    >>> q, table, g = [np.random.default_rng(i).normal(size=s) for i, s in enumerate([(2, 3, 4), (5, 4), (2, 3, 3)])]
    >>> dq, dtable = shaw.shaw_logits_backward(g, q, table, scale=0.5)
    >>> e = (g * shaw.shaw_logits(q, table, 3, scale=0.5)).sum()   # bilinear: <G, e> = <dq, q> = <dtable, table>
    >>> bool(np.isclose(e, (dq * q).sum()) and np.isclose(e, (dtable * table).sum())), dq.shape
    (True, (2, 3, 4))
    """
    q = as_float_array(q, "q", ndim_min=2)
    table = _check_table(table, q.shape[-1])
    scale = check_real(scale, "scale", positive=True)
    dlogits = as_float_array(dlogits, "dlogits", ndim_min=2)
    require(dlogits.shape[:-1] == q.shape[:-1], f"dlogits must be (..., q_len, k_len) matching q {q.shape}, got "
            f"{dlogits.shape}")
    return shaw_key_term_backward(dlogits, q, table, scale)


def shaw_values(probs: ArrayLike, table: ArrayLike) -> np.ndarray:
    r"""Relative value term :math:`\sum_j p_{ij}\, w^V[\text{idx}_{ij}]`, shape ``(..., q_len, d_v)``.

    Parameters
    ----------
    probs : ndarray ``(..., q_len, k_len)``
        Attention probabilities.
    table : ndarray ``(2K+1, d_v)``
        :math:`w^V`.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import shaw
    >>> probs = np.array([[1.0, 0.0], [0.5, 0.5]])
    >>> table = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])   # K = 1; idx [[1, 2], [0, 1]]
    >>> shaw.shaw_values(probs, table).tolist()                  # row 0: t1; row 1: (t0 + t1) / 2
    [[0.0, 1.0], [0.5, 0.5]]
    """
    probs = as_float_array(probs, "probs", ndim_min=2)
    return shaw_value_term(probs, _check_table(table))


def shaw_values_backward(dout: ArrayLike, probs: ArrayLike, table: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    r"""Gradients ``(dprobs, dtable)`` of :func:`shaw_values`.

    :math:`dp_{ij} = U_i \cdot a^V_{ij}`; :math:`dw^V[r] = \sum_{\text{idx}_{ij}=r} p_{ij}\, U_i`.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import shaw
    >>> table = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    >>> dprobs, dtable = shaw.shaw_values_backward(np.ones((2, 2)), np.eye(2), table)
    >>> dprobs.tolist()                                          # dp_ij = U_i . a^V_ij = row sums of t[idx]
    [[1.0, 2.0], [1.0, 1.0]]
    >>> dtable.tolist()                                          # p = I uses idx 1 twice
    [[0.0, 0.0], [2.0, 2.0], [0.0, 0.0]]
    """
    probs = as_float_array(probs, "probs", ndim_min=2)
    table = _check_table(table)
    dout = check_grad(dout, "dout", probs.shape[:-1] + (table.shape[1],))
    return shaw_value_term_backward(dout, probs, table)


class ShawRelativeAttention(Hook):
    r"""Shaw et al. relative keys (and values) as an attention hook.

    ``attention.forward(q, k, v, hooks=[layer])`` adds :math:`s\,q_i \cdot a^K_{ij}` to the
    logits and :math:`\sum_j p_{ij} a^V_{ij}` to the output; ``attention.backward`` returns
    the extra ``q`` and probability gradients and writes ``grads["key"]`` / ``grads["value"]``.

    Parameters
    ----------
    head_dim : int
        Width :math:`d` of ``q``/``k`` per head (rows of the key table).
    max_relative_position : int
        Clipping distance :math:`K \ge 0`; tables have ``2K + 1`` rows.
    value_dim : int, optional
        Width of ``v`` per head (rows of the value table); default ``head_dim``.
    use_values : bool
        Include the value term (the paper's full model); False gives keys only.
    seed : int or None
        Seed for the ``N(0, init_std^2)`` initialisation.
    init_std : float

    Attributes
    ----------
    params : dict
        ``{"key": (2K+1, head_dim), "value": (2K+1, value_dim)}`` (no ``"value"`` when
        ``use_values`` is False).
    grads : dict
        Same keys; overwritten by the backward hooks.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import attention
    >>> from posenc_np.relative import shaw
    >>> layer = shaw.ShawRelativeAttention(head_dim=4, max_relative_position=2, seed=0)   # tables of 2K + 1 = 5 rows
    >>> q = k = v = np.random.default_rng(0).normal(size=(2, 3, 4))                       # (heads, len, head_dim)
    >>> attention.forward(q, k, v, causal=True, hooks=[layer])[0].shape, layer.params["value"].shape
    ((2, 3, 4), (5, 4))
    """

    def __init__(self, head_dim: int, max_relative_position: int, *, value_dim: int | None = None,
                 use_values: bool = True, seed: int | np.random.Generator | None = None, init_std: float = 0.02):
        self.head_dim = check_int(head_dim, "head_dim", minimum=1)
        self.max_relative_position = check_int(max_relative_position, "max_relative_position", minimum=0)
        self.value_dim = self.head_dim if value_dim is None else check_int(value_dim, "value_dim", minimum=1)
        self.use_values = check_bool(use_values, "use_values")
        init_std = check_real(init_std, "init_std", nonnegative=True)
        rows = 2 * self.max_relative_position + 1
        check_alloc((rows, max(self.head_dim, self.value_dim)), np.float64,
                    "relative tables (2 * max_relative_position + 1, dim)")
        rng = np.random.default_rng(seed)
        self.params = {"key": normal_init(rng, init_std, (rows, self.head_dim))}
        if self.use_values:
            self.params["value"] = normal_init(rng, init_std, (rows, self.value_dim))
        self.grads = {name: np.zeros_like(p) for name, p in self.params.items()}

    def _table(self, name: str, width: int) -> np.ndarray:
        table = np.asarray(self.params[name])
        shape = (2 * self.max_relative_position + 1, width)
        require(table.shape == shape, f"params[{name!r}] must have shape {shape}, got {table.shape}")
        return table

    # -- attention hook ------------------------------------------------------------------
    def logits(self, q: ArrayLike, k: ArrayLike, scale: float,
               mask: ArrayLike | None = None) -> tuple[np.ndarray | None, Any]:
        """Hook: ``s * q_i . wK[idx_ij]`` for ``q`` ``(..., heads, q_len, head_dim)``."""
        q, k, scale, mask = check_hook_args(q, k, scale, mask, head_dim=self.head_dim)
        table = self._table("key", self.head_dim)
        return shaw_key_term(q, table, k.shape[-2], scale).astype(q.dtype, copy=False), (q, scale, table)

    def logits_backward(self, dlogits: np.ndarray, cache: Any) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Hook: returns ``(dq, None)`` and writes ``grads["key"]``."""
        q, scale, table = cache
        dq, self.grads["key"] = shaw_key_term_backward(dlogits.astype(table.dtype, copy=False), q, table, scale)
        return dq.astype(q.dtype, copy=False), None

    def values(self, probs: ArrayLike) -> tuple[np.ndarray | None, Any]:
        """Hook: ``sum_j p_ij wV[idx_ij]``, ``(..., heads, q_len, value_dim)`` (nothing without values)."""
        if not self.use_values:
            return None, None
        probs = as_float_array(probs, "probs", ndim_min=2)
        table = self._table("value", self.value_dim)
        return shaw_value_term(probs, table).astype(probs.dtype, copy=False), (probs, table)

    def values_backward(self, dout: np.ndarray, cache: Any) -> np.ndarray | None:
        """Hook: returns the extra ``dprobs`` and writes ``grads["value"]``."""
        if not self.use_values:
            return None
        probs, table = cache
        dprobs, self.grads["value"] = shaw_value_term_backward(np.asarray(dout).astype(table.dtype, copy=False),
                                                               probs, table)
        return dprobs.astype(probs.dtype, copy=False)
