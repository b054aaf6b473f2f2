r"""BERT-style learned relative distance embeddings: Hugging Face ``position_embedding_type``
``"relative_key"`` (Shaw et al. 2018 keys, unclipped) and ``"relative_key_query"``
(Huang et al. 2020, "Improve Transformer Models with Better Relative Position Embeddings",
method 4).

Sign convention: :math:`\delta_{ij} = \text{query} - \text{key}` (opposite to T5 and Shaw),
*unclipped*, looked up in a table of :math:`2P - 1` rows (:math:`P` =
``max_position_embeddings``) at row :math:`\delta_{ij} + P - 1`; :math:`r_{ij}` is that row.

.. math::

    \texttt{relative\_key}:\quad e_{ij} = s\,\big(q_i \cdot k_j + q_i \cdot r_{ij}\big)

    \texttt{relative\_key\_query}:\quad e_{ij} = s\,\big(q_i \cdot k_j + q_i \cdot r_{ij} + k_j \cdot r_{ij}\big)

with :math:`s = 1/\sqrt{d}`: Hugging Face adds the relative scores to the *raw* scores and
divides the sum by :math:`\sqrt{d}`, so the hook multiplies its terms by the attention scale.
Both terms use the same row :math:`r_{ij}` (the key term is *not* indexed by
:math:`-\delta`). The table is shared across heads and batch; rows have the per-head width.

Positions come from the shapes with the attention core's alignment: key :math:`j` at
:math:`j`, query :math:`i` at :math:`i + (k_{len} - q_{len})`. This matches Hugging Face for
self-attention without a cache (:math:`q_{len} = k_{len}`) and for cached one-token decoding
(HF uses query position ``key_length - 1``); for :math:`q_{len} \ne k_{len}` without a cache
HF instead places query :math:`i` at :math:`i`. Every distance must lie in
:math:`[-(P-1), P-1]`, i.e. ``q_len, k_len <= P``: the table cannot extrapolate.

Gradients (:math:`G = \partial L/\partial e`): :math:`dq_i \mathrel{+}= s\sum_j G_{ij} r_{ij}`,
:math:`dk_j \mathrel{+}= s\sum_i G_{ij} r_{ij}` (``relative_key_query`` only),
:math:`dW[\rho] = s\sum_{\delta_{ij}+P-1=\rho} G_{ij}(q_i + k_j)` (the :math:`k_j` part only for
``relative_key_query``), a scatter-add summed over batch and heads.
"""

from __future__ import annotations

import numpy as np

from .._checks import check_lengths
from .._attention_checks import check_bert_layer, check_bert_scores, check_hook_args, check_param
from .._util import memo_table, normal_init, scatter_add_rows
from ..attention import Hook
from ..positions import _grid

__all__ = [
    "BertRelativeKey",
    "bert_relative_distance",
    "bert_relative_scores",
    "bert_relative_scores_backward",
]

MODES = ("relative_key", "relative_key_query")


# --------------------------------------------------------------------------- the formulas (unchecked)

@memo_table
def _index(q_len: int, k_len: int, max_position: int) -> np.ndarray:
    r"""Table row :math:`\delta_{ij} + P - 1` of each pair (:math:`\delta = -r`, query - key), kept per lengths."""
    return -_grid(q_len, k_len, k_len - q_len) + (max_position - 1)


def _flat(x: np.ndarray) -> np.ndarray:
    """Merge the leading axes of ``(..., m, n)`` into one, so that einsum can sum over them."""
    return x.reshape((-1,) + x.shape[-2:])


def _scores(q, k, table, mode: str, scale: float) -> np.ndarray:
    r""":math:`s\,(q_i \cdot r_{ij} [+ k_j \cdot r_{ij}])`."""
    rel = table[_index(q.shape[-2], k.shape[-2], (table.shape[0] + 1) // 2)]  # r_ij, (q_len, k_len, d)
    out = np.einsum("...id,ijd->...ij", q, rel)
    if mode == "relative_key_query":
        out = out + np.einsum("...jd,ijd->...ij", k, rel)
    return (scale * out).astype(np.result_type(q, k, table), copy=False)


def _scores_backward(dscores, q, k, table, mode: str, scale: float):
    r"""``(dq, dk, dtable)``: :math:`dq_i = s\sum_j G_{ij} r_{ij}`, :math:`dk_j = s\sum_i G_{ij} r_{ij}`
    (``relative_key_query``), :math:`dW[\rho] = s\sum_{\delta_{ij}+P-1=\rho} G_{ij}(q_i [+ k_j])`."""
    index = _index(q.shape[-2], k.shape[-2], (table.shape[0] + 1) // 2)
    g = scale * dscores
    rel = table[index]
    dq = np.einsum("...ij,ijd->...id", g, rel)
    drel = np.einsum("bij,bid->ijd", _flat(g), _flat(q))  # dL/dr_ij from the query term
    dk = None
    if mode == "relative_key_query":
        dk = np.einsum("...ij,ijd->...jd", g, rel)
        drel = drel + np.einsum("bij,bjd->ijd", _flat(g), _flat(k))
    return dq, dk, scatter_add_rows(index, drel, table.shape[0])


# --------------------------------------------------------------------------- public functions

def bert_relative_distance(q_len: int, k_len: int) -> np.ndarray:
    r"""``(q_len, k_len)`` int64 :math:`\delta_{ij} = (i + k_{len} - q_{len}) - j` (query - key, unclipped)."""
    q_len, k_len = check_lengths(q_len, k_len, "relative distances (q_len, k_len)")
    return -_grid(q_len, k_len, k_len - q_len)


def bert_relative_scores(q, k, table, *, mode: str = "relative_key", scale: float = 1.0) -> np.ndarray:
    r"""Relative score term :math:`s\,(q_i \cdot r_{ij} [+ k_j \cdot r_{ij}])`, shape ``(..., q_len, k_len)``.

    Parameters
    ----------
    q, k : ndarray ``(..., q_len, d)``, ``(..., k_len, d)``
        ``k`` only contributes in ``relative_key_query`` mode (its length is always used).
    table : ndarray ``(2P - 1, d)``
        HF's ``distance_embedding.weight``.
    mode : {"relative_key", "relative_key_query"}
    scale : float
        Multiplies the term; pass the attention scale (``1/sqrt(d)`` as in HF) to add the
        result to scaled logits, or 1.0 to add it to raw scores.
    """
    return _scores(*check_bert_scores(q, k, table, mode, MODES, scale))


def bert_relative_scores_backward(dscores, q, k, table, *, mode: str = "relative_key", scale: float = 1.0):
    r"""Gradients ``(dq, dk, dtable)`` of :func:`bert_relative_scores`; ``dk`` is None for ``relative_key``."""
    q, k, table, mode, scale, dscores = check_bert_scores(q, k, table, mode, MODES, scale, dscores)
    return _scores_backward(dscores, q, k, table, mode, scale)


class BertRelativeKey(Hook):
    r"""Hugging Face BERT ``relative_key`` / ``relative_key_query`` as an attention hook.

    With the attention core's default scale :math:`1/\sqrt{d}`, ``attention.forward(q, k, v,
    hooks=[layer])`` gives exactly HF's ``(q k^T + relative scores) / sqrt(d)``.

    Parameters
    ----------
    max_position_embeddings : int
        :math:`P`; the table has ``2P - 1`` rows and both lengths must be ``<= P``.
    head_dim : int
        Per-head width :math:`d`.
    mode : {"relative_key", "relative_key_query"}
        HF ``config.position_embedding_type``.
    seed : int or None
        Seed for the ``N(0, init_std^2)`` initialisation.
    init_std : float
        HF uses ``config.initializer_range`` (0.02).

    Attributes
    ----------
    params : dict
        ``{"weight": ndarray (2P - 1, head_dim)}`` (HF ``distance_embedding.weight``).
    grads : dict
        Same keys; overwritten by :meth:`logits_backward`.
    """

    def __init__(self, max_position_embeddings: int, head_dim: int, *, mode: str = "relative_key", seed=None,
                 init_std: float = 0.02):
        self.max_position_embeddings, self.head_dim, self.mode, init_std = check_bert_layer(
            max_position_embeddings, head_dim, mode, MODES, init_std)
        rng = np.random.default_rng(seed)
        self.params = {"weight": normal_init(rng, init_std, (2 * self.max_position_embeddings - 1, self.head_dim))}
        self.grads = {"weight": np.zeros_like(self.params["weight"])}

    def _weight(self) -> np.ndarray:
        return check_param(self.params, "weight", (2 * self.max_position_embeddings - 1, self.head_dim))

    def logits(self, q, k, scale, mask=None):
        """Hook: ``s (q_i . r_ij [+ k_j . r_ij])`` with the attention scale ``s``."""
        q, k, scale, mask = check_hook_args(q, k, scale, mask)
        q, k, w, _, scale = check_bert_scores(q, k, self._weight(), self.mode, MODES, scale)
        return _scores(q, k, w, self.mode, scale).astype(q.dtype, copy=False), (q, k, scale, w)

    def logits_backward(self, dlogits, cache):
        """Hook: returns ``(dq, dk)`` (``dk`` None for ``relative_key``) and writes ``grads["weight"]``."""
        q, k, scale, w = cache
        dq, dk, dw = _scores_backward(dlogits.astype(w.dtype, copy=False), q, k, w, self.mode, scale)
        self.grads["weight"] = dw
        return dq.astype(q.dtype, copy=False), None if dk is None else dk.astype(k.dtype, copy=False)
