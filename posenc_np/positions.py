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
    that :math:`o` (ALiBi's ``q_offset``, DeBERTa's ``query_offset``).

The two agree when :math:`q_{len} = k_{len}`. The relative position of key :math:`j` seen from
query :math:`i` is

.. math:: r_{ij} = j - (i + o) \qquad \text{(key - query)},

the sign of T5, Shaw et al. and ALiBi's causal form :math:`m\,r_{ij}`; BERT ``relative_key``,
DeBERTa and Transformer-XL use query - key, :math:`-r_{ij}`. Every relative grid in the package
is built by :func:`_grid` (T5 buckets, Shaw's clipped index, BERT's distance, DeBERTa's
positions, the ALiBi bias, the causal mask).
"""

from __future__ import annotations

import numpy as np

from ._attention_checks import check_alignment

__all__ = ["ALIGNMENTS", "query_offset", "relative_positions"]

ALIGNMENTS = ("bottom-right", "top-left")


def _offset(q_len: int, k_len: int, alignment: str) -> int:
    """The query offset :math:`o` of ``alignment`` (unchecked)."""
    return k_len - q_len if alignment == "bottom-right" else 0


def _grid(q_len: int, k_len: int, offset: int, dtype=np.int64) -> np.ndarray:
    r""":math:`r_{ij} = j - (i + o)`, shape ``(q_len, k_len)`` (unchecked: lengths >= 0, exact in ``dtype``)."""
    return np.arange(k_len, dtype=dtype)[None, :] - (np.arange(q_len, dtype=dtype)[:, None] + offset)


def _causal(q_len: int, k_len: int) -> np.ndarray:
    r"""The causal mask: key ``j`` kept for query ``i`` iff :math:`r_{ij} \le 0`, i.e.
    ``j <= i + (k_len - q_len)`` (bottom-right)."""
    return _grid(q_len, k_len, k_len - q_len) <= 0


def query_offset(q_len: int, k_len: int, alignment: str = "bottom-right") -> int:
    """Position of query 0 for ``alignment``: ``k_len - q_len`` (bottom-right) or 0 (top-left)."""
    q_len, k_len, alignment, _ = check_alignment(q_len, k_len, alignment, ALIGNMENTS, alloc=False)
    return _offset(q_len, k_len, alignment)


def relative_positions(q_len: int, k_len: int, *, alignment: str = "bottom-right", query_offset=None) -> np.ndarray:
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
    >>> relative_positions(2, 4)
    array([[-2, -1,  0,  1],
           [-3, -2, -1,  0]])
    """
    q_len, k_len, alignment, offset = check_alignment(q_len, k_len, alignment, ALIGNMENTS, query_offset)
    return _grid(q_len, k_len, _offset(q_len, k_len, alignment) if offset is None else offset)
