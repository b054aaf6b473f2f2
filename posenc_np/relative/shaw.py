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

import numpy as np

from .._checks import as_float_array
from .._attention_checks import (check_hook_args, check_param, check_shaw_index, check_shaw_layer, check_shaw_logits,
                                 check_shaw_values)
from .._util import memo_table, normal_init, scatter_add_rows
from ..attention import Hook
from ..positions import _grid

__all__ = [
    "ShawRelativeAttention",
    "shaw_logits",
    "shaw_logits_backward",
    "shaw_relative_index",
    "shaw_values",
    "shaw_values_backward",
]

# --------------------------------------------------------------------------- the formulas (unchecked)

@memo_table
def _index(q_len: int, k_len: int, kmax: int) -> np.ndarray:
    r""":math:`\mathrm{idx}_{ij} = \mathrm{clip}(r_{ij}, -K, K) + K`, kept per (lengths, K)."""
    return np.clip(_grid(q_len, k_len, k_len - q_len), -kmax, kmax) + kmax


def _flat(x: np.ndarray) -> np.ndarray:
    """Merge the leading axes of ``(..., m, n)`` into one, so that einsum can sum over them."""
    return x.reshape((-1,) + x.shape[-2:])


def _logits(q, table, k_len: int, scale: float) -> np.ndarray:
    r""":math:`s\,q_i \cdot w^K[\mathrm{idx}_{ij}]`."""
    rel = table[_index(q.shape[-2], k_len, (table.shape[0] - 1) // 2)]  # a^K_ij, (q_len, k_len, d)
    return (scale * np.einsum("...id,ijd->...ij", q, rel)).astype(np.result_type(q, table), copy=False)


def _logits_backward(dlogits, q, table, scale: float):
    r"""``(dq, dtable)``: :math:`dq_i = s \sum_j G_{ij} a^K_{ij}`, :math:`dw^K[r] = s \sum_{\mathrm{idx}_{ij}=r} G_{ij} q_i`."""
    index = _index(q.shape[-2], dlogits.shape[-1], (table.shape[0] - 1) // 2)
    dq = scale * np.einsum("...ij,ijd->...id", dlogits, table[index])
    drel = scale * np.einsum("bij,bid->ijd", _flat(dlogits), _flat(q))  # dL/da^K_ij, summed over leading axes
    return dq, scatter_add_rows(index, drel, table.shape[0])


def _values(probs, table) -> np.ndarray:
    r""":math:`\sum_j p_{ij}\, w^V[\mathrm{idx}_{ij}]`."""
    rel = table[_index(probs.shape[-2], probs.shape[-1], (table.shape[0] - 1) // 2)]  # a^V_ij
    return np.einsum("...ij,ijd->...id", probs, rel).astype(np.result_type(probs, table), copy=False)


def _values_backward(dout, probs, table):
    r"""``(dprobs, dtable)``: :math:`dp_{ij} = U_i \cdot a^V_{ij}`, :math:`dw^V[r] = \sum_{\mathrm{idx}_{ij}=r} p_{ij} U_i`."""
    index = _index(probs.shape[-2], probs.shape[-1], (table.shape[0] - 1) // 2)
    dprobs = np.einsum("...id,ijd->...ij", dout, table[index])
    drel = np.einsum("bij,bid->ijd", _flat(probs), _flat(dout))
    return dprobs, scatter_add_rows(index, drel, table.shape[0])


# --------------------------------------------------------------------------- public functions

def shaw_relative_index(q_len: int, k_len: int, max_relative_position: int) -> np.ndarray:
    r"""``(q_len, k_len)`` int64 table index :math:`\mathrm{clip}(j - i - (k_{len}-q_{len}), -K, K) + K`.

    Parameters
    ----------
    q_len, k_len : int
        Query and key lengths (queries are the last ``q_len`` positions, :mod:`posenc_np.positions`).
    max_relative_position : int
        Clipping distance :math:`K \ge 0` (the paper's ablation includes :math:`K = 0`, where
        every pair shares one vector).
    """
    return _index(*check_shaw_index(q_len, k_len, max_relative_position)).copy()


def shaw_logits(q, table, k_len: int, *, scale: float = 1.0) -> np.ndarray:
    r"""Relative key term :math:`s\,q_i \cdot w^K[\text{idx}_{ij}]`, shape ``(..., q_len, k_len)``.

    Parameters
    ----------
    q : ndarray ``(..., q_len, d)``
    table : ndarray ``(2K+1, d)``
        :math:`w^K`, shared over the leading axes of ``q``.
    k_len : int
    scale : float
        :math:`s`; the attention scale (``1/sqrt(d)`` in the paper).
    """
    q, table, scale, k_len = check_shaw_logits(q, table, scale, k_len=k_len)
    return _logits(q, table, k_len, scale)


def shaw_logits_backward(dlogits, q, table, *, scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    r"""Gradients ``(dq, dtable)`` of :func:`shaw_logits`.

    :math:`dq_i = s \sum_j G_{ij}\, a^K_{ij}`; :math:`dw^K[r] = s \sum_{\text{idx}_{ij}=r} G_{ij}\, q_i`
    summed over the leading axes (scatter-add).
    """
    q, table, scale, dlogits = check_shaw_logits(q, table, scale, dlogits=dlogits)
    return _logits_backward(dlogits, q, table, scale)


def shaw_values(probs, table) -> np.ndarray:
    r"""Relative value term :math:`\sum_j p_{ij}\, w^V[\text{idx}_{ij}]`, shape ``(..., q_len, d_v)``.

    Parameters
    ----------
    probs : ndarray ``(..., q_len, k_len)``
        Attention probabilities.
    table : ndarray ``(2K+1, d_v)``
        :math:`w^V`.
    """
    return _values(*check_shaw_values(probs, table))


def shaw_values_backward(dout, probs, table) -> tuple[np.ndarray, np.ndarray]:
    r"""Gradients ``(dprobs, dtable)`` of :func:`shaw_values`.

    :math:`dp_{ij} = U_i \cdot a^V_{ij}`; :math:`dw^V[r] = \sum_{\text{idx}_{ij}=r} p_{ij}\, U_i`.
    """
    probs, table, dout = check_shaw_values(probs, table, dout)
    return _values_backward(dout, probs, table)


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
    """

    def __init__(self, head_dim: int, max_relative_position: int, *, value_dim=None, use_values: bool = True,
                 seed=None, init_std: float = 0.02):
        self.head_dim, self.max_relative_position, self.value_dim, self.use_values, init_std = check_shaw_layer(
            head_dim, max_relative_position, value_dim, use_values, init_std)
        rows = 2 * self.max_relative_position + 1
        rng = np.random.default_rng(seed)
        self.params = {"key": normal_init(rng, init_std, (rows, self.head_dim))}
        if self.use_values:
            self.params["value"] = normal_init(rng, init_std, (rows, self.value_dim))
        self.grads = {name: np.zeros_like(p) for name, p in self.params.items()}

    def _table(self, name: str, width: int) -> np.ndarray:
        return check_param(self.params, name, (2 * self.max_relative_position + 1, width))

    # -- attention hook ------------------------------------------------------------------
    def logits(self, q, k, scale, mask=None):
        """Hook: ``s * q_i . wK[idx_ij]`` for ``q`` ``(..., heads, q_len, head_dim)``."""
        q, k, scale, mask = check_hook_args(q, k, scale, mask)
        table = self._table("key", self.head_dim)
        if q.shape[-1] != self.head_dim:
            raise ValueError(f"q must have last axis head_dim={self.head_dim}, got shape {q.shape}")
        return _logits(q, table, k.shape[-2], scale).astype(q.dtype, copy=False), (q, scale, table)

    def logits_backward(self, dlogits, cache):
        """Hook: returns ``(dq, None)`` and writes ``grads["key"]``."""
        q, scale, table = cache
        dq, self.grads["key"] = _logits_backward(dlogits.astype(table.dtype, copy=False), q, table, scale)
        return dq.astype(q.dtype, copy=False), None

    def values(self, probs):
        """Hook: ``sum_j p_ij wV[idx_ij]``, ``(..., heads, q_len, value_dim)`` (nothing without values)."""
        if not self.use_values:
            return None, None
        probs = as_float_array(probs, "probs", ndim_min=2)
        table = self._table("value", self.value_dim)
        return _values(probs, table).astype(probs.dtype, copy=False), (probs, table)

    def values_backward(self, dout, cache):
        """Hook: returns the extra ``dprobs`` and writes ``grads["value"]``."""
        if not self.use_values:
            return None
        probs, table = cache
        dprobs, self.grads["value"] = _values_backward(np.asarray(dout).astype(table.dtype, copy=False), probs, table)
        return dprobs.astype(probs.dtype, copy=False)
