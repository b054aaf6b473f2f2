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

from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .._checks import (as_float_array, check_alloc, check_choice, check_grad, check_int, check_lengths, check_real,
                       require)
from .._util import memo_table, normal_init, scatter_add_rows
from ..attention import Hook, check_hook_args
from ..positions import relative_grid

__all__ = [
    "BertRelativeKey",
    "bert_index_grid",
    "bert_relative_distance",
    "bert_relative_scores",
    "bert_relative_scores_backward",
    "bert_score_term",
    "bert_score_term_backward",
]

MODES = ("relative_key", "relative_key_query")


# --------------------------------------------------------------------------- the formulas (cores)

@memo_table
def bert_index_grid(q_len: int, k_len: int, max_position: int) -> np.ndarray:
    r"""Table row :math:`\delta_{ij} + P - 1` of each pair (:math:`\delta = -r`, query - key), kept
    (read-only) per lengths. Arguments are not checked (both lengths ``<= P``).

    Examples
    --------
    >>> from posenc_np.relative import bert
    >>> bert.bert_index_grid(2, 2, 3).tolist()   # query - key = [[0, -1], [1, 0]], plus P - 1 = 2
    [[2, 1], [3, 2]]
    """
    return -relative_grid(q_len, k_len, k_len - q_len) + (max_position - 1)


def _flat(x: np.ndarray) -> np.ndarray:
    """Merge the leading axes of ``(..., m, n)`` into one, so that einsum can sum over them."""
    return x.reshape((-1,) + x.shape[-2:])


def bert_score_term(q: np.ndarray, k: np.ndarray, table: np.ndarray, mode: str, scale: float) -> np.ndarray:
    r""":math:`s\,(q_i \cdot r_{ij} [+ k_j \cdot r_{ij}])`. Core of :func:`bert_relative_scores`.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import bert
    >>> q, k = np.array([[1.0, 2.0], [3.0, 4.0]]), np.eye(2)
    >>> table = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])   # P = 2: rows for query - key = -1, 0, 1
    >>> bert.bert_score_term(q, k, table, "relative_key", 1.0).tolist()   # rows [[1, 0], [2, 1]]: q_i . r_ij
    [[2.0, 1.0], [7.0, 4.0]]
    >>> bert.bert_score_term(q, k, table, "relative_key_query", 1.0).tolist()   # plus k_j . r_ij
    [[2.0, 1.0], [8.0, 5.0]]
    """
    rel = table[bert_index_grid(q.shape[-2], k.shape[-2], (table.shape[0] + 1) // 2)]  # r_ij, (q_len, k_len, d)
    out = np.einsum("...id,ijd->...ij", q, rel)
    if mode == "relative_key_query":
        out = out + np.einsum("...jd,ijd->...ij", k, rel)
    return (scale * out).astype(np.result_type(q, k, table), copy=False)


def bert_score_term_backward(dscores: np.ndarray, q: np.ndarray, k: np.ndarray, table: np.ndarray, mode: str,
                             scale: float) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    r"""``(dq, dk, dtable)``: :math:`dq_i = s\sum_j G_{ij} r_{ij}`, :math:`dk_j = s\sum_i G_{ij} r_{ij}`
    (``relative_key_query``), :math:`dW[\rho] = s\sum_{\delta_{ij}+P-1=\rho} G_{ij}(q_i [+ k_j])`.
    Core of :func:`bert_relative_scores_backward`.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import bert
    >>> q, k, w, g = [np.random.default_rng(i).normal(size=s) for i, s in enumerate([(3, 4), (3, 4), (5, 4), (3, 3)])]
    >>> dq, dk, dw = bert.bert_score_term_backward(g, q, k, w, "relative_key_query", 0.5)
    >>> e = (g * bert.bert_score_term(q, k, w, "relative_key_query", 0.5)).sum()   # bilinear in (q, k) and w
    >>> bool(np.isclose(e, (dq * q).sum() + (dk * k).sum()) and np.isclose(e, (dw * w).sum()))
    True
    """
    index = bert_index_grid(q.shape[-2], k.shape[-2], (table.shape[0] + 1) // 2)
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

def _fit_message(q_len: int, k_len: int, max_position: int) -> str:
    return (f"q_len={q_len} and k_len={k_len} must be <= max_position_embeddings={max_position}: distances must lie "
            f"in [-{max_position - 1}, {max_position - 1}] and a learned distance table cannot extrapolate")


def _check_scores(q, k, table, mode, scale):
    """``(q, k, table, mode, scale)`` of the two score doors: matching ``q``/``k``, a ``(2P - 1, d)``
    table whose ``P`` covers both lengths."""
    mode = check_choice(mode, "mode", MODES)
    q = as_float_array(q, "q", ndim_min=2)
    k = as_float_array(k, "k", ndim_min=2)
    require(q.shape[:-2] == k.shape[:-2] and q.shape[-1] == k.shape[-1], f"q (..., q_len, d) and k (..., k_len, d) "
            f"must share leading axes and d; got q {q.shape}, k {k.shape}")
    table = as_float_array(table, "table")
    require(table.ndim == 2 and table.shape[0] % 2 == 1 and table.shape[1] == q.shape[-1], f"table must be "
            f"(2*max_position_embeddings - 1, d={q.shape[-1]}) (odd row count), got shape {table.shape}")
    p = (table.shape[0] + 1) // 2
    require(max(q.shape[-2], k.shape[-2]) <= p, _fit_message(q.shape[-2], k.shape[-2], p))
    return q, k, table, mode, check_real(scale, "scale", positive=True)


def bert_relative_distance(q_len: int, k_len: int) -> np.ndarray:
    r"""``(q_len, k_len)`` int64 :math:`\delta_{ij} = (i + k_{len} - q_{len}) - j` (query - key, unclipped).

    Examples
    --------
    >>> from posenc_np.relative import bert
    >>> bert.bert_relative_distance(3, 3).tolist()   # i - j (T5 and Shaw use the opposite sign)
    [[0, -1, -2], [1, 0, -1], [2, 1, 0]]
    >>> bert.bert_relative_distance(1, 3).tolist()   # one cached query at position 2
    [[2, 1, 0]]
    """
    q_len, k_len = check_lengths(q_len, k_len, "relative distances (q_len, k_len)")
    return -relative_grid(q_len, k_len, k_len - q_len)


def bert_relative_scores(q: ArrayLike, k: ArrayLike, table: ArrayLike, *, mode: str = "relative_key",
                         scale: float = 1.0) -> np.ndarray:
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

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import bert
    >>> q, k = np.array([[1.0, 2.0], [3.0, 4.0]]), np.eye(2)
    >>> table = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])   # P = 2: rows for query - key = -1, 0, 1
    >>> bert.bert_relative_scores(q, k, table, scale=0.5).tolist()   # s q_i . r_ij, rows [[1, 0], [2, 1]]
    [[1.0, 0.5], [3.5, 2.0]]
    """
    q, k, table, mode, scale = _check_scores(q, k, table, mode, scale)
    return bert_score_term(q, k, table, mode, scale)


def bert_relative_scores_backward(dscores: ArrayLike, q: ArrayLike, k: ArrayLike, table: ArrayLike, *,
                                  mode: str = "relative_key",
                                  scale: float = 1.0) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    r"""Gradients ``(dq, dk, dtable)`` of :func:`bert_relative_scores`; ``dk`` is None for ``relative_key``.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import bert
    >>> q, k, w, g = [np.random.default_rng(i).normal(size=s) for i, s in enumerate([(3, 4), (3, 4), (5, 4), (3, 3)])]
    >>> dq, dk, dw = bert.bert_relative_scores_backward(g, q, k, w)      # relative_key: no k term
    >>> e = (g * bert.bert_relative_scores(q, k, w)).sum()               # bilinear: <G, e> = <dq, q> = <dW, W>
    >>> dk is None, bool(np.isclose(e, (dq * q).sum()) and np.isclose(e, (dw * w).sum()))
    (True, True)
    """
    q, k, table, mode, scale = _check_scores(q, k, table, mode, scale)
    dscores = check_grad(dscores, "dscores", q.shape[:-1] + (k.shape[-2],))
    return bert_score_term_backward(dscores, q, k, table, mode, scale)


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

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import attention
    >>> from posenc_np.relative import bert
    >>> layer = bert.BertRelativeKey(max_position_embeddings=4, head_dim=4, mode="relative_key_query", seed=0)
    >>> q = k = v = np.random.default_rng(0).normal(size=(2, 3, 4))
    >>> attention.forward(q, k, v, hooks=[layer])[0].shape, layer.params["weight"].shape   # 2 P - 1 = 7 rows
    ((2, 3, 4), (7, 4))
    """

    def __init__(self, max_position_embeddings: int, head_dim: int, *, mode: str = "relative_key",
                 seed: int | np.random.Generator | None = None, init_std: float = 0.02):
        self.max_position_embeddings = check_int(max_position_embeddings, "max_position_embeddings", minimum=1)
        self.head_dim = check_int(head_dim, "head_dim", minimum=1)
        self.mode = check_choice(mode, "mode", MODES)
        init_std = check_real(init_std, "init_std", nonnegative=True)
        shape = check_alloc((2 * self.max_position_embeddings - 1, self.head_dim), np.float64,
                            "distance table (2 * max_position_embeddings - 1, head_dim)")
        self.params = {"weight": normal_init(np.random.default_rng(seed), init_std, shape)}
        self.grads = {"weight": np.zeros_like(self.params["weight"])}

    def logits(self, q: ArrayLike, k: ArrayLike, scale: float,
               mask: ArrayLike | None = None) -> tuple[np.ndarray | None, Any]:
        """Hook: ``s (q_i . r_ij [+ k_j . r_ij])`` with the attention scale ``s``."""
        q, k, scale, mask = check_hook_args(q, k, scale, mask, head_dim=self.head_dim)
        w = np.asarray(self.params["weight"])
        p = self.max_position_embeddings
        require(w.shape == (2 * p - 1, self.head_dim), f"params['weight'] must have shape {(2 * p - 1, self.head_dim)}, "
                f"got {w.shape}")
        require(max(q.shape[-2], k.shape[-2]) <= p, _fit_message(q.shape[-2], k.shape[-2], p))
        return bert_score_term(q, k, w, self.mode, scale).astype(q.dtype, copy=False), (q, k, scale, w)

    def logits_backward(self, dlogits: np.ndarray, cache: Any) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Hook: returns ``(dq, dk)`` (``dk`` None for ``relative_key``) and writes ``grads["weight"]``."""
        q, k, scale, w = cache
        dq, dk, dw = bert_score_term_backward(dlogits.astype(w.dtype, copy=False), q, k, w, self.mode, scale)
        self.grads["weight"] = dw
        return dq.astype(q.dtype, copy=False), None if dk is None else dk.astype(k.dtype, copy=False)
