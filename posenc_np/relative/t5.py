r"""T5 relative position buckets and the learned per-head relative bias (Raffel et al. 2020).

Sign convention: :math:`r = \text{key} - \text{query}` (a key *after* the query has
:math:`r > 0`). This is the opposite of DeBERTa and BERT ``relative_key``, which use
``query - key``.

Buckets (Hugging Face ``T5Attention._relative_position_bucket``, Mesh TensorFlow
``_relative_position_bucket``). With :math:`B` = ``num_buckets`` and :math:`D` = ``max_distance``:

- bidirectional: :math:`H = \lfloor B/2 \rfloor`, offset :math:`H` if :math:`r > 0` else 0,
  :math:`n = |r|`;
- unidirectional (causal decoders): :math:`H = B`, offset 0, :math:`n = \max(-r, 0)`
  (every future key lands in bucket 0).

With the exact range :math:`e = \lfloor H/2 \rfloor`,

.. math::

    b(n) = \begin{cases} n & n < e \\
    \min\!\Big(e + \Big\lfloor \dfrac{\ln(n/e)}{\ln(D/e)}\,(H - e) \Big\rfloor,\; H - 1\Big) & n \ge e
    \end{cases}

and the bucket is ``offset + b(n)``. Defaults :math:`B = 32`, :math:`D = 128`; bidirectional
test points: -200→15, -64→14, -9→8, -1→1, 0→0, 1→17, 8→24, 64→30, 128→31.

Arithmetic. T5 evaluates the log term in float32 and truncates; this module returns the
*exact* floor: the expression in float64, every value within ``1e-9`` of an integer :math:`m`
settled exactly by :math:`\ln(n/e)(H-e)/\ln(D/e) \ge m \iff n^{H-e} e^{m} \ge D^{m} e^{H-e}`
(Python integers). For the published configuration (32 buckets, distance 128) exact, float64
and float32 agree everywhere; elsewhere they can differ by one bucket at a boundary (e.g.
float64 at bidirectional ``num_buckets=20, max_distance=160``, float32 at unidirectional
``num_buckets=32, max_distance=939``; the cases are in ``docs/relative.md``).

Bias layer: a learned table :math:`W \in \mathbb{R}^{B \times \text{heads}}`;
:math:`\text{bias}[h, i, j] = W[b(r_{ij}), h]`. It is added to the attention logits and is
*not* scaled by :math:`1/\sqrt{d}`. T5 applies no logit scale at all (the scale is folded
into the initialisation), so T5's attention is
``attention.forward(q, k, v, scale=1.0, hooks=[T5RelativeBias(...)])``; with the default
scale the bias is added to the *scaled* logits :math:`qk^\top/\sqrt{d}`. The gradient of
the table is a scatter-add over the buckets.

Positions come from the shapes with the attention core's alignment: key :math:`j` is at
position :math:`j`, query :math:`i` at :math:`i + (k_{len} - q_{len})` (queries are the last
positions, as when decoding with a KV cache), so :math:`r_{ij} = j - i - (k_{len} - q_{len})`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .._checks import as_float_array, as_int_array, check_alloc, check_bool, check_int, check_lengths, check_real, require
from .._util import memo_table, normal_init, scatter_add_rows, sum_to_shape
from ..attention import Hook, check_hook_args
from ..positions import relative_grid

__all__ = [
    "T5RelativeBias",
    "t5_bias",
    "t5_bias_backward",
    "t5_bucket_grid",
    "t5_buckets",
    "t5_relative_position_bucket",
    "t5_relative_positions",
    "t5_table_bias",
    "t5_table_bias_backward",
]

#: Half-width of the window in which a float64 log-bucket value is settled exactly.
_NEAR_INTEGER = 1e-9


# --------------------------------------------------------------------------- the formulas (cores)

def _log_steps(n: np.ndarray, exact: int, steps: int, max_distance: int) -> np.ndarray:
    r"""Exact :math:`\lfloor \ln(n/e)/\ln(D/e)\cdot s \rfloor` for integers ``n >= e`` (``s = steps``)."""
    v = np.log(n.astype(np.float64) / exact) / math.log(max_distance / exact) * steps  # T5's expression
    out = np.floor(v).astype(np.int64)
    m = np.rint(v)
    for idx in np.flatnonzero(np.abs(v - m) < _NEAR_INTEGER):
        # v is within 1e-9 of the integer m: decide v >= m exactly, (n/e)^s >= (D/e)^m.
        nn, mm = int(n[idx]), int(m[idx])
        out[idx] = mm if nn**steps * exact**mm >= max_distance**mm * exact**steps else mm - 1
    return out


def t5_buckets(rel: np.ndarray, num_buckets: int, max_distance: int, bidirectional: bool) -> np.ndarray:
    """The bucket :math:`b` of each ``key - query`` in ``rel`` (int64, the module docstring's formula).

    Core of :func:`t5_relative_position_bucket`; arguments are not checked.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import t5
    >>> t5.t5_buckets(np.array([-9, -1, 0, 1, 8]), 32, 128, True).tolist()  # e = 8; -9: 8 + floor(0.34); r > 0: +16
    [8, 1, 0, 17, 24]
    >>> t5.t5_buckets(np.array([3, 0, -1, -17]), 32, 128, False).tolist()    # causal: future keys share bucket 0
    [0, 0, 1, 16]
    """
    # Clip before abs/negation so int64 extremes cannot overflow; every distance >= D maps to
    # the last bucket of its direction, so the clip changes no bucket.
    rel = np.clip(rel, -max_distance, max_distance)
    if bidirectional:
        half = num_buckets // 2
        offset = np.where(rel > 0, half, 0)
        n = np.abs(rel)
    else:
        half = num_buckets
        offset = 0
        n = -np.minimum(rel, 0)
    exact = half // 2
    uniq, inverse = np.unique(n, return_inverse=True)  # at most D + 1 distinct distances
    large = np.minimum(exact + _log_steps(np.maximum(uniq, exact), exact, half - exact, max_distance), half - 1)
    bucket = np.where(uniq < exact, uniq, large)[inverse.reshape(n.shape)]
    return (offset + bucket).astype(np.int64)


@memo_table
def t5_bucket_grid(q_len: int, k_len: int, num_buckets: int, max_distance: int, bidirectional: bool) -> np.ndarray:
    """``(q_len, k_len)`` buckets of the bottom-right aligned grid, kept (read-only) per configuration and
    lengths. Core of :meth:`T5RelativeBias.buckets`; arguments are not checked.

    Examples
    --------
    >>> from posenc_np.relative import t5
    >>> t5.t5_relative_positions(2, 3).tolist()          # key - query, queries at positions 1, 2
    [[-1, 0, 1], [-2, -1, 0]]
    >>> t5.t5_bucket_grid(2, 3, 32, 128, True).tolist()  # r <= 0 -> |r|, r > 0 -> 16 + r
    [[1, 0, 17], [2, 1, 0]]
    """
    return t5_buckets(relative_grid(q_len, k_len, k_len - q_len), num_buckets, max_distance, bidirectional)


def t5_table_bias(table: np.ndarray, buckets: np.ndarray) -> np.ndarray:
    r""":math:`\text{bias}[h, i, j] = W[b_{ij}, h]`, ``(heads, q_len, k_len)``. Core of :func:`t5_bias`.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import t5
    >>> table = np.arange(64.0).reshape(32, 2)           # W[b, h] = 2 b + h
    >>> t5.t5_table_bias(table, np.array([[0, 17], [1, 0]])).tolist()
    [[[0.0, 34.0], [2.0, 0.0]], [[1.0, 35.0], [3.0, 1.0]]]
    """
    return np.moveaxis(table[buckets], -1, 0)  # (q, k, H) -> (H, q, k)


def t5_table_bias_backward(dbias: np.ndarray, buckets: np.ndarray, num_buckets: int) -> np.ndarray:
    """Scatter-add of ``dbias`` ``(..., heads, q_len, k_len)`` into the table rows of the buckets.
    Core of :func:`t5_bias_backward`.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import t5
    >>> buckets = np.array([[0, 17], [1, 0]])
    >>> dw = t5.t5_table_bias_backward(np.ones((1, 2, 2)), buckets, 32)   # one head
    >>> dw.shape, dw[[0, 1, 17], 0].tolist(), float(dw.sum())              # bucket 0 is used twice
    ((32, 1), [2.0, 1.0, 1.0], 4.0)
    """
    dbias = sum_to_shape(dbias, dbias.shape[-3:])
    return scatter_add_rows(buckets, np.moveaxis(dbias, 0, -1), num_buckets)


# --------------------------------------------------------------------------- public functions

def _check_buckets(num_buckets, max_distance, bidirectional) -> tuple[int, int, bool]:
    """T5's bucket parameters, checked for the doors that take them.

    Requirements (derived from the formula): the exact range ``e`` must be at least 1
    (otherwise ``ln(n/e)`` is undefined), so ``num_buckets >= 2`` unidirectional and
    ``>= 4`` bidirectional; bidirectional counts must be even (an odd count leaves the last
    bucket unreachable: each half has ``num_buckets // 2`` buckets); ``max_distance > e``
    (otherwise ``ln(max_distance / e) <= 0``).
    """
    bidirectional = check_bool(bidirectional, "bidirectional")
    nb = check_int(num_buckets, "num_buckets")
    require(nb >= (4 if bidirectional else 2) and not (bidirectional and nb % 2),
            f"num_buckets must be >= 4 and even when bidirectional=True (each direction gets num_buckets // 2 "
            f"buckets and needs an exact one), got {nb}" if bidirectional else
            f"num_buckets must be >= 2 when bidirectional=False (at least one exact bucket), got {nb}")
    max_distance = check_int(max_distance, "max_distance", maximum=2**62)
    exact = (nb // 2 if bidirectional else nb) // 2  # e, the exact range
    require(max_distance > exact, f"max_distance must exceed the exact range "
            f"{'num_buckets // 4' if bidirectional else 'num_buckets // 2'} = {exact} for num_buckets={nb}, "
            f"bidirectional={bidirectional}, got {max_distance}")
    return nb, max_distance, bidirectional


def t5_relative_position_bucket(relative_position: ArrayLike, *, bidirectional: bool = True, num_buckets: int = 32,
                                max_distance: int = 128) -> np.ndarray:
    r"""Map relative positions ``key - query`` to T5 buckets (see the module docstring).

    Parameters
    ----------
    relative_position : array_like of int, any shape
        :math:`r = \text{key} - \text{query}`. Integer arrays only: floats (even whole
        numbers) raise ``TypeError``.
    bidirectional : bool
        True for encoders (separate buckets for keys before and after the query), False for
        causal decoders (``n = max(-r, 0)``). Hugging Face: ``bidirectional = not is_decoder``.
    num_buckets : int
        :math:`B`; ``>= 2`` unidirectional, even and ``>= 4`` bidirectional.
    max_distance : int
        :math:`D`; distances ``>= D`` share the last bucket of their direction. Must exceed
        the exact range ``num_buckets // 4`` (bidirectional) or ``num_buckets // 2``.

    Returns
    -------
    ndarray of int64, same shape as ``relative_position``, values in ``[0, num_buckets)``.
        The exact floor of the log term (see the module docstring for where float32/float64
        evaluations of T5's expression differ).

    Examples
    --------
    >>> from posenc_np.relative import t5
    >>> t5.t5_relative_position_bucket([-200, -64, -9, -1, 0, 1, 8, 64, 128]).tolist()
    [15, 14, 8, 1, 0, 17, 24, 30, 31]
    >>> t5.t5_relative_position_bucket([2, 0, -1, -15, -16, -17], bidirectional=False).tolist()  # e = 16
    [0, 0, 1, 15, 16, 16]
    """
    rel = as_int_array(relative_position, "relative_position")
    config = _check_buckets(num_buckets, max_distance, bidirectional)
    return t5_buckets(rel, *config)


def t5_relative_positions(q_len: int, k_len: int) -> np.ndarray:
    r"""``(q_len, k_len)`` int64 matrix of :math:`r_{ij} = j - (i + k_{len} - q_{len})` (key - query).

    Queries are aligned to the last ``q_len`` key positions, as in the attention core's causal
    mask (:mod:`posenc_np.positions`); for ``q_len == k_len`` this is simply :math:`j - i`.

    Examples
    --------
    >>> from posenc_np.relative import t5
    >>> t5.t5_relative_positions(3, 3).tolist()    # j - i
    [[0, 1, 2], [-1, 0, 1], [-2, -1, 0]]
    >>> t5.t5_relative_positions(1, 3).tolist()    # one decoding query at position 2
    [[-2, -1, 0]]
    """
    q_len, k_len = check_lengths(q_len, k_len, "relative positions (q_len, k_len)")
    return relative_grid(q_len, k_len, k_len - q_len)


def t5_bias(table: ArrayLike, q_len: int, k_len: int, *, bidirectional: bool = True,
            max_distance: int = 128) -> np.ndarray:
    r"""T5 relative bias :math:`\text{bias}[h, i, j] = W[b(r_{ij}), h]`, shape ``(num_heads, q_len, k_len)``.

    Parameters
    ----------
    table : ndarray ``(num_buckets, num_heads)``
        The learned table :math:`W` (its dtype is kept).
    q_len, k_len : int
        Query and key lengths; :math:`r_{ij}` as in :func:`t5_relative_positions`.
    bidirectional, max_distance
        As in :func:`t5_relative_position_bucket` (``num_buckets`` is ``table.shape[0]``).

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import t5
    >>> table = np.arange(64.0).reshape(32, 2)     # W[b, h] = 2 b + h
    >>> bias = t5.t5_bias(table, 2, 2)             # r = [[0, 1], [-1, 0]] -> buckets [[0, 17], [1, 0]]
    >>> bias.shape, bias[0].tolist()
    ((2, 2, 2), [[0.0, 34.0], [2.0, 0.0]])
    """
    table = as_float_array(table, "table")
    require(table.ndim == 2 and min(table.shape) >= 1, f"table must be a non-empty 2-D (num_buckets, num_heads) "
            f"table, got shape {table.shape}")
    q_len, k_len = check_lengths(q_len, k_len, "relative positions (q_len, k_len)")
    config = _check_buckets(table.shape[0], max_distance, bidirectional)
    return t5_table_bias(table, t5_bucket_grid(q_len, k_len, *config))


def t5_bias_backward(dbias: ArrayLike, num_buckets: int, *, bidirectional: bool = True,
                     max_distance: int = 128) -> np.ndarray:
    r"""Gradient of :func:`t5_bias` with respect to the table.

    :math:`\partial L/\partial W[b, h] = \sum_{(i, j):\, b(r_{ij}) = b} \partial L/\partial \text{bias}[h, i, j]`
    (a scatter-add over the buckets).

    Parameters
    ----------
    dbias : ndarray ``(..., num_heads, q_len, k_len)``
        Upstream gradient; leading (batch) axes are summed.
    num_buckets : int
        Rows of the table.

    Returns
    -------
    ndarray ``(num_buckets, num_heads)`` in ``dbias``'s float dtype.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import t5
    >>> dw = t5.t5_bias_backward(np.ones((1, 2, 2)), 32)   # buckets [[0, 17], [1, 0]]: row 0 gets two entries
    >>> dw.shape, dw[[0, 1, 17], 0].tolist(), float(dw.sum())
    ((32, 1), [2.0, 1.0, 1.0], 4.0)
    """
    dbias = as_float_array(dbias, "dbias", ndim_min=3)
    config = _check_buckets(num_buckets, max_distance, bidirectional)
    return t5_table_bias_backward(dbias, t5_bucket_grid(*dbias.shape[-2:], *config), config[0])


class T5RelativeBias(Hook):
    r"""T5's learned relative attention bias, usable as an attention hook.

    ``attention.forward(q, k, v, hooks=[layer])`` adds ``layer.bias(q_len, k_len)`` to the
    scaled logits; ``attention.backward`` writes the table gradient into ``layer.grads``.
    For T5's own (unscaled) attention pass ``scale=1.0``. One layer may be shared by every
    attention layer of a stack, as in T5 (the last ``backward`` overwrites ``grads``).

    Parameters
    ----------
    num_heads : int
        Heads; ``q`` must have shape ``(..., num_heads, q_len, d)``.
    num_buckets, max_distance, bidirectional
        See :func:`t5_relative_position_bucket`. Hugging Face config:
        ``relative_attention_num_buckets``, ``relative_attention_max_distance``,
        ``bidirectional = not is_decoder``.
    seed : int or None
        Seed for the ``N(0, init_std^2)`` initialisation.
    init_std : float
        Standard deviation of the initial table (HF T5 uses ``factor * d_model**-0.5``).

    Attributes
    ----------
    params : dict
        ``{"weight": ndarray (num_buckets, num_heads)}``.
    grads : dict
        Same keys; overwritten by :meth:`bias_backward` / :meth:`logits_backward`.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import attention
    >>> from posenc_np.relative import t5
    >>> layer = t5.T5RelativeBias(num_heads=2, seed=0)
    >>> layer.buckets(2, 3).tolist(), bool(layer.bias(2, 3)[1, 0, 2] == layer.params["weight"][17, 1])   # W[b, h]
    ([[1, 0, 17], [2, 1, 0]], True)
    >>> attention.forward(*[np.ones((2, 3, 4))] * 3, scale=1.0, hooks=[layer])[0].shape   # T5: no 1/sqrt(d)
    (2, 3, 4)
    """

    def __init__(self, num_heads: int, *, num_buckets: int = 32, max_distance: int = 128, bidirectional: bool = True,
                 seed: int | np.random.Generator | None = None, init_std: float = 0.02):
        self.num_heads = check_int(num_heads, "num_heads", minimum=1)
        self.num_buckets, self.max_distance, self.bidirectional = _check_buckets(num_buckets, max_distance,
                                                                                 bidirectional)
        init_std = check_real(init_std, "init_std", nonnegative=True)
        shape = check_alloc((self.num_buckets, self.num_heads), np.float64, "bias table (num_buckets, num_heads)")
        self.params = {"weight": normal_init(np.random.default_rng(seed), init_std, shape)}
        self.grads = {"weight": np.zeros_like(self.params["weight"])}

    def _weight(self) -> np.ndarray:
        w = np.asarray(self.params["weight"])
        require(w.shape == (self.num_buckets, self.num_heads), f"params['weight'] must have shape "
                f"{(self.num_buckets, self.num_heads)}, got {w.shape}")
        return w

    def buckets(self, q_len: int, k_len: int) -> np.ndarray:
        """``(q_len, k_len)`` bucket indices of :func:`t5_relative_positions` (read-only, kept per lengths)."""
        q_len, k_len = check_lengths(q_len, k_len, "relative positions (q_len, k_len)")
        return t5_bucket_grid(q_len, k_len, self.num_buckets, self.max_distance, self.bidirectional)

    def bias(self, q_len: int, k_len: int) -> np.ndarray:
        """The bias ``(num_heads, q_len, k_len)`` in the table's dtype."""
        return t5_table_bias(self._weight(), self.buckets(q_len, k_len))

    def bias_backward(self, dbias: ArrayLike) -> None:
        """Write ``grads["weight"]`` from ``dbias`` of shape ``(..., num_heads, q_len, k_len)``."""
        dbias = as_float_array(dbias, "dbias", ndim_min=3)
        require(dbias.shape[-3] == self.num_heads, f"dbias must be (..., num_heads={self.num_heads}, q_len, k_len), "
                f"got shape {dbias.shape}")
        self._table_grad(dbias, self._weight())

    def _table_grad(self, dbias: np.ndarray, w: np.ndarray) -> None:
        buckets = t5_bucket_grid(*dbias.shape[-2:], self.num_buckets, self.max_distance, self.bidirectional)
        self.grads["weight"] = t5_table_bias_backward(dbias.astype(w.dtype, copy=False), buckets, self.num_buckets)

    # -- attention hook ------------------------------------------------------------------
    def logits(self, q: ArrayLike, k: ArrayLike, scale: float,
               mask: ArrayLike | None = None) -> tuple[np.ndarray | None, Any]:
        """Hook: the bias (cast to ``q``'s dtype), not multiplied by ``scale``."""
        q, k, scale, mask = check_hook_args(q, k, scale, mask, self.num_heads)
        w = self._weight()
        buckets = t5_bucket_grid(q.shape[-2], k.shape[-2], self.num_buckets, self.max_distance, self.bidirectional)
        return t5_table_bias(w, buckets).astype(q.dtype, copy=False), w

    def logits_backward(self, dlogits: np.ndarray, cache: Any) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Hook: the bias does not depend on ``q`` or ``k``; only the table gets a gradient."""
        self._table_grad(dlogits, cache)
        return None, None
