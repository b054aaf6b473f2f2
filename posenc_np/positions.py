r"""Where queries and keys sit: the one rule for relative positions and their alignment.

Key :math:`j` sits at position :math:`j`; query :math:`i` at :math:`i + o`, with the query
offset :math:`o`:

``alignment="bottom-right"`` (the default of every module here)
    :math:`o = k_{len} - q_{len}`: the queries are the *last* :math:`q_{len}` positions of the key
    sequence, as when decoding with a KV cache or a Transformer-XL memory. The causal mask keeps
    key :math:`j` for query :math:`i` iff :math:`j \le i + o` (:func:`posenc_np.attention.causal_mask`).
``alignment="top-left"``
    :math:`o = 0`: query :math:`i` at position :math:`i` (Hugging Face's
    ``build_relative_position``, BERT and DeBERTa without a cache).
an explicit ``query_offset``
    that :math:`o` (ALiBi's, DeBERTa's, FIRE's and the dynamic position bias's ``query_offset``).

The two agree when :math:`q_{len} = k_{len}`. The relative position of key :math:`j` seen from
query :math:`i` is

.. math:: r_{ij} = j - (i + o) \qquad \text{(key - query)},

the sign of T5, Shaw et al. and ALiBi's causal form :math:`m\,r_{ij}`; BERT ``relative_key``,
DeBERTa and Transformer-XL use query - key, :math:`-r_{ij}`. Every relative grid in the package
is built by :func:`relative_grid` (T5 buckets, Shaw's clipped index, BERT's distance, DeBERTa's
positions, the ALiBi bias, the causal mask).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import DTypeLike

from ._checks import check_choice, check_int, check_lengths

__all__ = ["ALIGNMENTS", "alignment_offset", "causal_keep", "query_offset", "relative_grid", "relative_positions"]

ALIGNMENTS = ("bottom-right", "top-left")


def alignment_offset(q_len: int, k_len: int, alignment: str) -> int:
    """The query offset :math:`o` of ``alignment``: ``k_len - q_len`` (bottom-right) or 0 (top-left).

    Core of :func:`query_offset`; arguments are not checked.

    Examples
    --------
    >>> from posenc_np.positions import alignment_offset
    >>> alignment_offset(2, 5, "bottom-right")   # the 2 queries are keys 3 and 4
    3
    >>> alignment_offset(2, 5, "top-left")
    0
    """
    return k_len - q_len if alignment == "bottom-right" else 0


def relative_grid(q_len: int, k_len: int, offset: int, dtype: DTypeLike = np.int64) -> np.ndarray:
    r""":math:`r_{ij} = j - (i + o)` (key - query), shape ``(q_len, k_len)``.

    Core of :func:`relative_positions`; arguments are not checked (lengths >= 0, every value
    exact in ``dtype``).

    Examples
    --------
    >>> from posenc_np.positions import relative_grid
    >>> relative_grid(2, 3, 1)   # query 0 at position 1, query 1 at 2
    array([[-1,  0,  1],
           [-2, -1,  0]])
    """
    return np.arange(k_len, dtype=dtype)[None, :] - (np.arange(q_len, dtype=dtype)[:, None] + offset)


def causal_keep(q_len: int, k_len: int) -> np.ndarray:
    r"""The causal mask, boolean ``(q_len, k_len)``: key ``j`` kept for query ``i`` iff
    :math:`r_{ij} \le 0`, i.e. ``j <= i + (k_len - q_len)`` (bottom-right).

    Core of :func:`posenc_np.attention.causal_mask`; arguments are not checked.

    Examples
    --------
    >>> from posenc_np.positions import causal_keep
    >>> causal_keep(2, 3)   # queries at positions 1 and 2
    array([[ True,  True, False],
           [ True,  True,  True]])
    """
    return relative_grid(q_len, k_len, k_len - q_len) <= 0


def query_offset(q_len: int, k_len: int, alignment: str = "bottom-right") -> int:
    """Position of query 0 for ``alignment``: ``k_len - q_len`` (bottom-right) or 0 (top-left).

    Examples
    --------
    >>> from posenc_np.positions import query_offset
    >>> query_offset(3, 5), query_offset(3, 5, "top-left")
    (2, 0)
    """
    q_len = check_int(q_len, "q_len", minimum=0)
    k_len = check_int(k_len, "k_len", minimum=0)
    alignment = check_choice(alignment, "alignment", ALIGNMENTS)
    return alignment_offset(q_len, k_len, alignment)


def relative_positions(q_len: int, k_len: int, *, alignment: str = "bottom-right",
                       query_offset: int | None = None) -> np.ndarray:
    r"""Relative positions :math:`r_{ij} = j - (i + o)` (key - query), int64 ``(q_len, k_len)``.

    Parameters
    ----------
    q_len, k_len : int
        Numbers of queries and keys (>= 0).
    alignment : {"bottom-right", "top-left"}
        Where the queries sit when ``query_offset`` is not given (see the module docstring).
    query_offset : int, optional
        Position of query 0, overriding ``alignment``; ``|query_offset| <= 2**53``.

    Examples
    --------
    >>> from posenc_np.positions import relative_positions
    >>> relative_positions(2, 4)   # key - query, queries at positions 2 and 3
    array([[-2, -1,  0,  1],
           [-3, -2, -1,  0]])
    >>> relative_positions(2, 3, alignment="top-left")
    array([[ 0,  1,  2],
           [-1,  0,  1]])
    """
    q_len, k_len = check_lengths(q_len, k_len, "relative positions (q_len, k_len)")
    alignment = check_choice(alignment, "alignment", ALIGNMENTS)
    offset = (alignment_offset(q_len, k_len, alignment) if query_offset is None
              else check_int(query_offset, "query_offset", minimum=-2**53, maximum=2**53))
    return relative_grid(q_len, k_len, offset)
