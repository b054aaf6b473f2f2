r"""DeBERTa disentangled attention (He et al. 2021, "DeBERTa: Decoding-enhanced BERT with
Disentangled Attention", ICLR, section 3.1, eq. 4 and Algorithm 1; log buckets from
DeBERTa-v2/v3 as in Hugging Face ``modeling_deberta_v2.py`` and microsoft/DeBERTa
``da_utils.py``).

Sign: :math:`\mathrm{rel}_{ij} = p_i - p_j` (**query - key**), the opposite of T5 and Shaw
(key - query). With a span :math:`k` (``position_buckets`` if > 0, else
``max_relative_positions``) and :math:`\delta(i, j) = \mathrm{clamp}(\mathrm{rel}_{ij} + k,
0, 2k-1)`, the paper's score is

.. math::

    \tilde A_{ij} = \frac{1}{\sqrt{d\,(1 + n)}}\Big[\underbrace{q_i^\top k_j}_{c2c}
        + \underbrace{q_i^\top K^r_{\delta(i,j)}}_{c2p}
        + \underbrace{k_j^\top Q^r_{\delta(j,i)}}_{p2c}\Big]

where :math:`n` is the number of position terms used (``len(pos_att_type)``), :math:`K^r`
and :math:`Q^r` are ``(2k, d)`` per-head relative key and query tables, and
:math:`\delta(j, i) = \mathrm{clamp}(-\mathrm{rel}_{ij} + k, 0, 2k-1)` (the paper: "we use
δ(j,i) rather than δ(i,j) because ... position-to-content computes the attention weight of the
key content at j with respect to the query position at i"). With log buckets,
:math:`\mathrm{rel}` is replaced by :func:`deberta_log_bucket_position` of it (the bucket map is
odd, so :math:`-\mathrm{bucket}(r) = \mathrm{bucket}(-r)`).

Where the implementations differ from the paper (``p2c_index`` selects one):

* ``"paper"`` (default): p2c index :math:`\delta(j, i)`, for any ``q_len``/``k_len``.
* ``"hf"``: Hugging Face ``DisentangledSelfAttention.disentangled_attention_bias`` and
  microsoft/DeBERTa gather ``K (Q^r)^T`` (rows = keys) with ``clamp(-r_pos + k)`` and then
  transpose. Because the gather reads ``r_pos`` with the *key* as its row index, the two sign
  flips cancel: the effective index is :math:`\delta(i, j)`, the c2p index, not the paper's
  :math:`\delta(j, i)`. Pretrained checkpoints were trained with it. When
  ``q_len != k_len`` HF builds ``r_pos`` from a ``(k_len, k_len)`` key-key table and never
  selects query rows, so its p2c term has shape ``(k_len, k_len)`` and does not fit the
  ``(q_len, k_len)`` scores (microsoft/DeBERTa selects rows with ``relative_pos[..., 0]``,
  a bucket id rather than a row once log buckets are on). ``"hf"`` therefore only accepts
  ``q_len == k_len``.

Alignment: key :math:`j` is at position :math:`j`, query :math:`i` at
:math:`i + (k_{len} - q_{len})` (bottom-right, like the attention core's causal mask).
Hugging Face's ``build_relative_position`` puts query :math:`i` at position :math:`i`
(top-left); both agree when ``q_len == k_len``; :func:`deberta_relative_positions` takes
``query_offset=0`` for the top-left form.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .._checks import (as_float_array, as_int_array, check_alloc, check_choice, check_grad, check_int, check_lengths,
                       check_real, require)
from .._util import memo_table, normal_init, scatter_add_rows
from ..attention import Hook, check_hook_args
from ..positions import relative_grid

__all__ = [
    "DebertaDisentangled",
    "deberta_indices",
    "deberta_log_bucket_position",
    "deberta_log_buckets",
    "deberta_positions",
    "deberta_project_relative_embeddings",
    "deberta_projection",
    "deberta_relative_positions",
    "deberta_scale",
]

POS_ATT_TYPES = ("c2p", "p2c")
P2C_INDEX = ("paper", "hf")


# --------------------------------------------------------------------------- buckets

def _ceil_log_ratio(a: np.ndarray, mid: int, max_position: int) -> np.ndarray:
    r"""Exact :math:`\lceil (mid-1)\ln(a/mid) / \ln((max\_position-1)/mid) \rceil` for ints ``a > mid``.

    float64 gives the value to ~1e-15 relative. When it lands within 1e-9 of an integer
    :math:`n` the ceiling is decided exactly: :math:`v \le n \iff a^{mid-1}\, mid^n \le
    (max\_position-1)^n\, mid^{mid-1}` (Python integers). This matters when the exact value is
    an integer, e.g. ``bucket_size=18, max_position=26, a=15``: :math:`8\ln(5/3)/\ln(25/9) = 4`
    exactly, where plain float64 gives 4.000000000000001 and a ceiling of 5.
    """
    v = np.log(a / mid) / np.log((max_position - 1) / mid) * (mid - 1)
    out = np.ceil(v)
    n = np.rint(v)
    near = np.flatnonzero(np.abs(v - n) <= 1e-9 * np.maximum(1.0, np.abs(v)))
    for t in near:
        ai, ni = int(a[t]), int(n[t])
        out[t] = ni if ai ** (mid - 1) * mid ** ni <= (max_position - 1) ** ni * mid ** (mid - 1) else ni + 1
    return out.astype(np.int64)


def _check_buckets(bucket_size, max_position, name: str = "bucket_size") -> tuple[int, int]:
    """DeBERTa's log-bucket parameters: ``bucket_size >= 2``, ``max_position > bucket_size // 2 + 1``
    (so that ``ln((max_position - 1) / mid) > 0``); the doors that take them share this."""
    bucket_size = check_int(bucket_size, name, minimum=2)
    max_position = check_int(max_position, "max_position", minimum=1)
    require(max_position - 1 > bucket_size // 2, f"max_position must be > bucket_size // 2 + 1 = "
            f"{bucket_size // 2 + 1} so that ln((max_position - 1) / mid) > 0, got max_position={max_position} with "
            f"bucket_size={bucket_size}")
    return bucket_size, max_position


def _check_bucket_option(bucket_size, max_position, name: str) -> tuple[int, int]:
    """-1 (no buckets) or a log-bucket count that :func:`_check_buckets` accepts with ``max_position``
    (both doors that take the option share this)."""
    bucket_size = check_int(bucket_size, name)
    require(bucket_size == -1 or bucket_size >= 2, f"{name} must be -1 (no buckets) or >= 2, got {bucket_size}")
    require(bucket_size == -1 or max_position != -1, f"{name}={bucket_size} needs max_position "
            "(max_relative_positions); got -1")
    return (-1, max_position) if bucket_size == -1 else _check_buckets(bucket_size, max_position, name)


def _check_pos_att_type(value) -> tuple[str, ...]:
    """DeBERTa's ``pos_att_type``: ``"c2p|p2c"`` (Hugging Face's string) or a sequence, no repeats."""
    items = [p.strip().lower() for p in value.split("|") if p.strip()] if isinstance(value, str) else value
    require(isinstance(items, (list, tuple)), f"pos_att_type must be a string like 'c2p|p2c' or a sequence of "
            f"strings, got {type(value).__name__}", TypeError)
    require("p2p" not in items, "pos_att_type 'p2p' is not supported: it is not part of the paper's score (eq. 4) "
            "and Hugging Face DeBERTa-v2 does not add it to the scores")
    for item in items:
        check_choice(item, "pos_att_type entry", POS_ATT_TYPES)
    require(len(set(items)) == len(items), f"pos_att_type lists a term twice: {list(items)}")
    return tuple(items)


def deberta_log_bucket_position(relative_pos: ArrayLike, bucket_size: int, max_position: int) -> np.ndarray:
    r"""DeBERTa-v2's log buckets (``make_log_bucket_position``), exact.

    With :math:`m = \lfloor b/2 \rfloor`, :math:`a = m - 1` if :math:`|r| < m` else :math:`|r|`:

    .. math::

        \mathrm{bucket}(r) = \begin{cases} r & a \le m \ (\text{i.e. } |r| \le m) \\
        \mathrm{sign}(r)\Big(\Big\lceil \frac{\ln(a/m)}{\ln((M-1)/m)}(m-1) \Big\rceil + m\Big)
        & \text{otherwise} \end{cases}

    Distances up to :math:`m` keep their own bucket; beyond, buckets grow logarithmically and
    reach :math:`2m - 1` at :math:`|r| = M - 1`; larger :math:`|r|` give larger values, which
    the c2p/p2c index clamps to the last table row. The map is odd:
    ``bucket(-r) == -bucket(r)``. The ceiling is evaluated exactly (see
    :func:`_ceil_log_ratio`). Hugging Face evaluates it in float32 (torch's default dtype),
    microsoft/DeBERTa in float64 (NumPy); for ``b=256, M=512`` (DeBERTa-v3) both agree with
    the exact value for every ``|r| < 20000`` (checked with NumPy float32/float64), but they
    can miss where the exact value is an integer: for ``b=18, M=26``, ``r=15`` is bucket 13
    exactly and 14 in float64.

    Parameters
    ----------
    relative_pos : array_like of int, any shape
        Relative positions (query - key for DeBERTa). Floats are rejected.
    bucket_size : int
        :math:`b \ge 2` (config ``position_buckets``).
    max_position : int
        :math:`M > \lfloor b/2 \rfloor + 1` (config ``max_relative_positions``).

    Returns
    -------
    ndarray of int64, same shape.

    Examples
    --------
    >>> from posenc_np.relative import deberta
    >>> deberta.deberta_log_bucket_position([-8, -4, 0, 3, 4, 5, 8, 15, 100], 8, 16).tolist()
    [-6, -4, 0, 3, 4, 5, 6, 7, 12]
    >>> deberta.deberta_log_bucket_position([15], 18, 26).tolist()   # 8 ln(15/9) / ln(25/9) = 4 exactly, + 9
    [13]

    With :math:`m = 4`, :math:`M = 16`: :math:`|r| \le 4` keeps its value, 8 gives
    :math:`\lceil 3 \ln 2 / \ln 3.75 \rceil + 4 = \lceil 1.57 \rceil + 4 = 6`, and :math:`|r| = M - 1 = 15`
    reaches :math:`2m - 1 = 7`.
    """
    rel = as_int_array(relative_pos, "relative_pos")
    bucket_size, max_position = _check_buckets(bucket_size, max_position)
    far = rel[(rel > 2**53) | (rel < -2**53)]  # (not np.abs, which wraps int64's minimum)
    require(far.size == 0, f"relative_pos must satisfy |relative_pos| <= 2**53, got {int(far[0]) if far.size else 0}")
    return deberta_log_buckets(rel, bucket_size, max_position)


def deberta_log_buckets(rel: np.ndarray, bucket_size: int, max_position: int) -> np.ndarray:
    """The log buckets of ``rel`` (int64). Core of :func:`deberta_log_bucket_position`; arguments are
    not checked (``|rel| <= 2**53``, ``max_position > bucket_size // 2 + 1``).

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import deberta
    >>> deberta.deberta_log_buckets(np.array([-5, 5, 6, 7, 15]), 8, 16).tolist()   # odd: bucket(-r) = -bucket(r)
    [-5, 5, 5, 6, 7]
    """
    mid = bucket_size // 2
    a = np.where(np.abs(rel) < mid, mid - 1, np.abs(rel))
    out = rel.copy()
    far = a > mid
    if far.any():
        out[far] = np.sign(rel[far]) * (_ceil_log_ratio(a[far], mid, max_position) + mid)
    return out


def deberta_relative_positions(q_len: int, k_len: int, *, bucket_size: int = -1, max_position: int = -1,
                               query_offset: int | None = None) -> np.ndarray:
    r"""DeBERTa's relative positions :math:`p_i - p_j` (query - key), optionally log-bucketed.

    Query :math:`i` is at :math:`p_i = i + \mathrm{query\_offset}`, key :math:`j` at
    :math:`p_j = j`. The default offset ``k_len - q_len`` puts the queries at the last
    positions (bottom-right, like the attention core); ``query_offset=0`` is Hugging Face's
    ``build_relative_position`` (query :math:`i` at :math:`i`). T5 and Shaw use the opposite
    sign, key - query.

    Parameters
    ----------
    q_len, k_len : int
        Numbers of queries and keys (>= 0).
    bucket_size : int
        -1 for raw positions, else the ``position_buckets`` of
        :func:`deberta_log_bucket_position`.
    max_position : int
        ``max_relative_positions``; required when ``bucket_size`` is set, ignored otherwise.
    query_offset : int or None
        Position of query 0; ``None`` means ``k_len - q_len``.

    Returns
    -------
    ndarray of int64, shape ``(q_len, k_len)``

    Examples
    --------
    >>> from posenc_np.relative import deberta
    >>> deberta.deberta_relative_positions(2, 3).tolist()                  # query - key, queries at 1, 2
    [[1, 0, -1], [2, 1, 0]]
    >>> deberta.deberta_relative_positions(2, 3, query_offset=0).tolist()  # Hugging Face's build_relative_position
    [[0, -1, -2], [1, 0, -1]]
    >>> deberta.deberta_relative_positions(1, 9, bucket_size=8, max_position=16).tolist()   # distances 8 .. 0
    [[6, 6, 5, 5, 4, 3, 2, 1, 0]]
    """
    q_len, k_len = check_lengths(q_len, k_len, "relative positions (q_len, k_len)")
    offset = (k_len - q_len if query_offset is None
              else check_int(query_offset, "query_offset", minimum=-2**53, maximum=2**53))
    bucket_size, max_position = _check_bucket_option(bucket_size, max_position, "bucket_size")
    return deberta_positions(q_len, k_len, offset, bucket_size, max_position)


def deberta_positions(q_len: int, k_len: int, offset: int, bucket_size: int, max_position: int) -> np.ndarray:
    r""":math:`p_i - p_j = -r_{ij}` (query - key, :mod:`posenc_np.positions`), log-bucketed unless
    ``bucket_size == -1``. Core of :func:`deberta_relative_positions`; arguments are not checked.

    Examples
    --------
    >>> from posenc_np.relative import deberta
    >>> deberta.deberta_positions(2, 3, 1, -1, -1).tolist()   # p_i - p_j with p_i = i + 1
    [[1, 0, -1], [2, 1, 0]]
    """
    rel = -relative_grid(q_len, k_len, offset)
    return rel if bucket_size == -1 else deberta_log_buckets(rel, bucket_size, max_position)


def deberta_scale(head_dim: int, pos_att_type: str | Sequence[str] = ("c2p", "p2c")) -> float:
    r"""DeBERTa's logit scale :math:`1/\sqrt{d\,(1 + n)}`, :math:`n` = number of position terms.

    Pass it as ``scale`` to :func:`posenc_np.attention.forward`; :class:`DebertaDisentangled`
    applies the same scale to its terms. ``deberta_scale(64) == 1/sqrt(192)``.

    Examples
    --------
    >>> from posenc_np.relative import deberta
    >>> round(deberta.deberta_scale(64), 6), round(deberta.deberta_scale(64, "c2p"), 6)   # 1/sqrt(192), 1/sqrt(128)
    (0.072169, 0.088388)
    """
    head_dim = check_int(head_dim, "head_dim", minimum=1)
    pos_att_type = _check_pos_att_type(pos_att_type)
    return 1.0 / math.sqrt(head_dim * (1 + len(pos_att_type)))


def deberta_project_relative_embeddings(rel_embeddings: ArrayLike, weight: ArrayLike, bias: ArrayLike | None,
                                        num_heads: int) -> np.ndarray:
    r"""Per-head relative tables from a shared embedding table, as DeBERTa builds them.

    :math:`T = E W^\top + b`, split into heads: ``(2k, H*d) -> (H, 2k, d)``. In Hugging Face,
    ``E`` is ``encoder.rel_embeddings.weight`` (after ``LayerNorm`` when ``norm_rel_ebd``
    contains ``"layer_norm"``); with ``share_att_key=True`` the key table uses
    ``key_proj`` and the query table ``query_proj`` (the content projections), otherwise
    ``pos_key_proj`` / ``pos_query_proj``. ``weight`` is ``(H*d, hidden)`` (PyTorch
    ``Linear`` layout), ``bias`` ``(H*d,)`` or ``None``.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import deberta
    >>> E, W = np.eye(4), np.arange(16.0).reshape(4, 4)   # 2k = 4 rows, hidden 4; W is (H*d, hidden)
    >>> T = deberta.deberta_project_relative_embeddings(E, W, None, 2)   # E W^T = W^T, split into 2 heads of d = 2
    >>> T.shape, T[0].tolist()                                           # T[h, r, e] = W[h*d + e, r]
    ((2, 4, 2), [[0.0, 4.0], [1.0, 5.0], [2.0, 6.0], [3.0, 7.0]])
    """
    e = as_float_array(rel_embeddings, "rel_embeddings", ndim_min=2)
    w = as_float_array(weight, "weight", ndim_min=2)
    num_heads = check_int(num_heads, "num_heads", minimum=1)
    require(e.ndim == 2 and w.ndim == 2 and w.shape[1] == e.shape[1] and w.shape[0] % num_heads == 0,
            f"rel_embeddings must be (2k, hidden) and weight (num_heads*d, hidden) with num_heads={num_heads} "
            f"dividing its rows; got {e.shape} and {w.shape}")
    b = None if bias is None else check_grad(bias, "bias", (w.shape[0],))
    return deberta_projection(e, w, b, num_heads)


def deberta_projection(e: np.ndarray, w: np.ndarray, b: np.ndarray | None, num_heads: int) -> np.ndarray:
    """:math:`T = E W^\top + b` split into heads, ``(H, 2k, d)``. Core of
    :func:`deberta_project_relative_embeddings`; arguments are not checked.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import deberta
    >>> T = deberta.deberta_projection(np.eye(2), np.eye(2), np.array([1.0, 2.0]), 2)   # E W^T + b, 2 heads of d = 1
    >>> T.shape, T[:, :, 0].tolist()
    ((2, 2, 1), [[2.0, 1.0], [2.0, 3.0]])
    """
    t = e @ w.T if b is None else e @ w.T + b
    return t.reshape(e.shape[0], num_heads, -1).transpose(1, 0, 2).copy()


# --------------------------------------------------------------------------- hook

@memo_table
def deberta_indices(q_len: int, k_len: int, buckets: int, max_position: int, span: int,
                    p2c_index: str) -> tuple[np.ndarray, np.ndarray]:
    r"""``(c2p, p2c)`` rows: :math:`\delta(i,j) = \mathrm{clamp}(\mathrm{rel}_{ij} + k, 0, 2k-1)` and
    :math:`\delta(j,i)` (``"paper"``) or :math:`\delta(i,j)` (``"hf"``), kept (read-only) per (lengths,
    configuration). Core of :meth:`DebertaDisentangled.indices`; arguments are not checked.

    Examples
    --------
    >>> from posenc_np.relative import deberta
    >>> c2p, p2c = deberta.deberta_indices(3, 3, -1, 2, 2, "paper")   # span k = 2, rows 0 .. 3
    >>> c2p.tolist()                                                  # clamp(i - j + 2, 0, 3)
    [[2, 1, 0], [3, 2, 1], [3, 3, 2]]
    >>> p2c.tolist()                                                  # clamp(j - i + 2, 0, 3)
    [[2, 3, 3], [1, 2, 3], [0, 1, 2]]
    >>> bool((deberta.deberta_indices(3, 3, -1, 2, 2, "hf")[1] == c2p).all())   # "hf": p2c uses the c2p index
    True
    """
    rel = deberta_positions(q_len, k_len, k_len - q_len, buckets if buckets > 0 else -1, max_position)
    top = 2 * span - 1
    c2p = np.clip(rel + span, 0, top)
    return (c2p, c2p) if p2c_index == "hf" else (c2p, np.clip(-rel + span, 0, top))


def _gather_last(table_scores: np.ndarray, rows: np.ndarray, index: np.ndarray) -> np.ndarray:
    """``out[..., i, j] = table_scores[..., rows[i, j], index[i, j]]``."""
    return table_scores[..., rows, index]


def _scatter_last(g: np.ndarray, rows: np.ndarray, index: np.ndarray, n_rows: int, n_cols: int) -> np.ndarray:
    """Adjoint of :func:`_gather_last`: ``(..., Q, K)`` to ``(..., n_rows, n_cols)`` via scatter_add_rows."""
    lead = g.shape[:-2]
    flat_index = (rows * n_cols + index).reshape(-1)
    vals = g.reshape((-1, g.shape[-2] * g.shape[-1])).T                 # (Q*K, prod(lead))
    out = scatter_add_rows(flat_index, vals, n_rows * n_cols)           # repeated indices accumulate
    return out.T.reshape(lead + (n_rows, n_cols))


class DebertaDisentangled(Hook):
    r"""DeBERTa's c2p and p2c terms as an attention hook.

    The attention core supplies :math:`s\,q_i^\top k_j`; this hook adds
    :math:`s\,(q_i^\top K^r_{\delta(i,j)} + k_j^\top Q^r_{\delta(j,i)})` with the scale
    :math:`s` the core received. Pass ``scale=deberta_scale(head_dim, pos_att_type)``::

        hook = DebertaDisentangled(12, 64, position_buckets=256, max_relative_positions=512, seed=0)
        out, cache = attention.forward(q, k, v, scale=deberta_scale(64), hooks=[hook])

    DeBERTa obtains :math:`K^r, Q^r` by projecting one shared relative-embedding table with
    the key/query projections (:func:`deberta_project_relative_embeddings`); here they are
    learned tables directly, which is the same function of the inputs (any projected table
    is a table) and has the same gradient with respect to the table. The Hugging Face config
    key of each parameter is in brackets.

    Parameters
    ----------
    num_heads, head_dim : int
        :math:`H` [``num_attention_heads``] and :math:`d` [``hidden_size / num_attention_heads``
        or ``attention_head_size``].
    position_buckets : int
        -1 for no buckets, else the log-bucket count :math:`b` [``position_buckets``].
    max_relative_positions : int
        :math:`M` [``max_relative_positions``; HF replaces values < 1 with
        ``max_position_embeddings``, pass that value here].
    pos_att_type : str or sequence
        Subset of ``("c2p", "p2c")``, or HF's string form ``"p2c|c2p"`` [``pos_att_type``].
    p2c_index : {"paper", "hf"}
        ``"paper"``: :math:`\delta(j, i)`; ``"hf"``: Hugging Face / microsoft code,
        :math:`\delta(i, j)`, ``q_len == k_len`` only (see the module docstring).
    seed : int or None
        Seed of the ``N(0, init_std^2)`` initialisation.
    init_std : float
        DeBERTa's ``initializer_range`` is 0.02.

    Attributes
    ----------
    span : int
        :math:`k` = ``position_buckets`` if > 0 else ``max_relative_positions``; the tables
        have :math:`2k` rows and row :math:`r` holds relative position (or bucket) :math:`r - k`.
    params : dict
        ``pos_key`` :math:`K^r` ``(H, 2k, d)`` when c2p is on, ``pos_query`` :math:`Q^r`
        ``(H, 2k, d)`` when p2c is on.
    grads : dict
        Same keys, overwritten by each :meth:`logits_backward`.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import attention
    >>> from posenc_np.relative import deberta
    >>> hook = deberta.DebertaDisentangled(2, 4, max_relative_positions=2, seed=0)   # span k = 2: tables of 2k rows
    >>> q = k = v = np.random.default_rng(0).normal(size=(2, 3, 4))
    >>> attention.forward(q, k, v, scale=deberta.deberta_scale(4), hooks=[hook])[0].shape, hook.params["pos_key"].shape
    ((2, 3, 4), (2, 4, 4))
    """

    def __init__(self, num_heads: int, head_dim: int, *, position_buckets: int = -1, max_relative_positions: int = 512,
                 pos_att_type: str | Sequence[str] = ("c2p", "p2c"), p2c_index: str = "paper",
                 seed: int | np.random.Generator | None = None, init_std: float = 0.02):
        self.num_heads = check_int(num_heads, "num_heads", minimum=1)
        self.head_dim = check_int(head_dim, "head_dim", minimum=1)
        self.max_relative_positions = check_int(max_relative_positions, "max_relative_positions", minimum=1)
        self.position_buckets, _ = _check_bucket_option(position_buckets, self.max_relative_positions,
                                                        "position_buckets")
        self.pos_att_type = _check_pos_att_type(pos_att_type)
        self.p2c_index = check_choice(p2c_index, "p2c_index", P2C_INDEX)
        self.span = self.position_buckets if self.position_buckets > 0 else self.max_relative_positions
        init_std = check_real(init_std, "init_std", nonnegative=True)
        check_alloc((self.num_heads, 2 * self.span, self.head_dim), np.float64,
                    "relative tables (num_heads, 2 * span, head_dim)")
        shape = (self.num_heads, 2 * self.span, self.head_dim)
        rng = np.random.default_rng(seed)
        self.params = {}
        if "c2p" in self.pos_att_type:
            self.params["pos_key"] = normal_init(rng, init_std, shape)
        if "p2c" in self.pos_att_type:
            self.params["pos_query"] = normal_init(rng, init_std, shape)
        self.grads = {key: np.zeros_like(val) for key, val in self.params.items()}

    def relative_positions(self, q_len: int, k_len: int) -> np.ndarray:
        """Bucketed (if configured) query - key positions, bottom-right aligned, ``(q_len, k_len)``."""
        q_len, k_len = check_lengths(q_len, k_len, "relative positions (q_len, k_len)")
        return deberta_positions(q_len, k_len, k_len - q_len, self.position_buckets, self.max_relative_positions)

    def indices(self, q_len: int, k_len: int) -> tuple[np.ndarray, np.ndarray]:
        r"""``(c2p, p2c)`` table rows, each ``(q_len, k_len)``: :math:`\delta(i,j)` and the p2c index."""
        q_len, k_len = check_lengths(q_len, k_len, "relative positions (q_len, k_len)")
        self._check_p2c(q_len, k_len)
        return deberta_indices(q_len, k_len, self.position_buckets, self.max_relative_positions, self.span,
                               self.p2c_index)

    def _check_p2c(self, q_len: int, k_len: int) -> None:
        """Hugging Face's p2c index has no ``(q_len, k_len)`` form unless ``q_len == k_len``."""
        require(self.p2c_index == "paper" or q_len == k_len, f"p2c_index='hf' needs q_len == k_len (got {q_len} and "
                f"{k_len}): Hugging Face's p2c term is built from a (k_len, k_len) key-key table and has no "
                "(q_len, k_len) form; use 'paper'")

    def logits(self, q: ArrayLike, k: ArrayLike, scale: float,
               mask: ArrayLike | None = None) -> tuple[np.ndarray | None, Any]:
        """Return ``scale * (c2p + p2c)`` (the enabled terms), shape ``(..., H, q_len, k_len)``."""
        q, k, scale, mask = check_hook_args(q, k, scale, mask, self.num_heads, self.head_dim)
        q_len, k_len = q.shape[-2], k.shape[-2]
        self._check_p2c(q_len, k_len)
        c2p_idx, p2c_idx = deberta_indices(q_len, k_len, self.position_buckets, self.max_relative_positions, self.span,
                                    self.p2c_index)
        qi = np.broadcast_to(np.arange(q_len)[:, None], (q_len, k_len))
        kj = np.broadcast_to(np.arange(k_len)[None, :], (q_len, k_len))
        term = np.zeros(q.shape[:-1] + (k_len,), dtype=q.dtype)
        tables = {}
        if "c2p" in self.pos_att_type:
            kr = self.params["pos_key"].astype(q.dtype, copy=False)
            tables["pos_key"] = kr
            a = q @ np.swapaxes(kr, -1, -2)                    # (..., H, Q, 2k): q_i . K^r_t
            term = term + _gather_last(a, qi, c2p_idx)          # pick t = delta(i, j)
        if "p2c" in self.pos_att_type:
            qr = self.params["pos_query"].astype(q.dtype, copy=False)
            tables["pos_query"] = qr
            b = k @ np.swapaxes(qr, -1, -2)                     # (..., H, K, 2k): k_j . Q^r_t
            term = term + _gather_last(b, kj, p2c_idx)          # out[i, j] = b[j, p2c(i, j)]
        return scale * term, (q, k, tables, qi, kj, c2p_idx, p2c_idx, scale)

    def logits_backward(self, dlogits: np.ndarray, cache: Any) -> tuple[np.ndarray | None, np.ndarray | None]:
        """``(dq, dk)`` contributions; writes the table gradients into :attr:`grads`."""
        q, k, tables, qi, kj, c2p_idx, p2c_idx, scale = cache
        g = scale * np.asarray(dlogits)
        g = np.broadcast_to(g, q.shape[:-1] + (k.shape[-2],))
        dq = dk = None
        two_k = 2 * self.span
        grads = {}
        if "c2p" in self.pos_att_type:
            da = _scatter_last(g, qi, c2p_idx, q.shape[-2], two_k)     # (..., H, Q, 2k)
            dq = da @ tables["pos_key"]
            grads["pos_key"] = (np.swapaxes(da, -1, -2) @ q).reshape((-1,) + tables["pos_key"].shape).sum(axis=0)
        if "p2c" in self.pos_att_type:
            db = _scatter_last(g, kj, p2c_idx, k.shape[-2], two_k)     # (..., H, K, 2k)
            dk = db @ tables["pos_query"]
            grads["pos_query"] = (np.swapaxes(db, -1, -2) @ k).reshape((-1,) + tables["pos_query"].shape).sum(axis=0)
        self.grads = {key: grads[key].astype(self.params[key].dtype) for key in self.params}
        return dq, dk
