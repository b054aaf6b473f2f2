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
*exact* floor. It evaluates the expression in float64 and settles every value within
``1e-9`` of an integer :math:`m` exactly: :math:`\ln(n/e)(H-e)/\ln(D/e) \ge m \iff
n^{H-e} e^{m} \ge D^{m} e^{H-e}` (Python integers). For the published configuration
(32 buckets, distance 128, either direction) exact, float64 and float32 agree for every
distance. Elsewhere they can differ by one bucket at a boundary: with the plain float64
expression, bidirectional ``num_buckets=20, max_distance=160`` puts distances 10, 20 and 80
one bucket low (``ln 2 / ln 32 * 5`` evaluates to ``0.9999999999999999``); T5's float32 path
differs from the exact value for e.g. unidirectional ``num_buckets=32, max_distance=939`` at
distance 728 (float32 gives bucket 31, exact is 30). See ``docs/relative.md``.

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

import numpy as np

from .._checks import as_int_array, check_lengths
from .._attention_checks import (check_param, check_qk_heads, check_t5_bias, check_t5_buckets, check_t5_grad,
                                 check_t5_layer)
from .._util import memo_table, normal_init, scatter_add_rows, sum_to_shape
from ..attention import Hook
from ..positions import _grid

__all__ = [
    "T5RelativeBias",
    "t5_bias",
    "t5_bias_backward",
    "t5_relative_position_bucket",
    "t5_relative_positions",
]

#: Half-width of the window in which a float64 log-bucket value is settled exactly.
_NEAR_INTEGER = 1e-9


# --------------------------------------------------------------------------- the formulas (unchecked)

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


def _bucket(rel: np.ndarray, num_buckets: int, max_distance: int, bidirectional: bool) -> np.ndarray:
    """The bucket of each ``key - query`` in ``rel`` (int64; the module docstring's :math:`b`)."""
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
def _bucket_map(q_len: int, k_len: int, num_buckets: int, max_distance: int, bidirectional: bool) -> np.ndarray:
    """``(q_len, k_len)`` buckets of the bottom-right aligned grid, kept per configuration and lengths."""
    return _bucket(_grid(q_len, k_len, k_len - q_len), num_buckets, max_distance, bidirectional)


def _bias(table: np.ndarray, buckets: np.ndarray) -> np.ndarray:
    """:math:`\\text{bias}[h, i, j] = W[b_{ij}, h]`, ``(heads, q_len, k_len)``."""
    return np.moveaxis(table[buckets], -1, 0)  # (q, k, H) -> (H, q, k)


def _bias_backward(dbias: np.ndarray, buckets: np.ndarray, num_buckets: int) -> np.ndarray:
    """Scatter-add of ``dbias`` ``(..., heads, q_len, k_len)`` into the table rows of the buckets."""
    dbias = sum_to_shape(dbias, dbias.shape[-3:])
    return scatter_add_rows(buckets, np.moveaxis(dbias, 0, -1), num_buckets)


# --------------------------------------------------------------------------- public functions

def t5_relative_position_bucket(relative_position, *, bidirectional: bool = True, num_buckets: int = 32,
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
    """
    rel = as_int_array(relative_position, "relative_position")
    return _bucket(rel, *check_t5_buckets(num_buckets, max_distance, bidirectional))


def t5_relative_positions(q_len: int, k_len: int) -> np.ndarray:
    r"""``(q_len, k_len)`` int64 matrix of :math:`r_{ij} = j - (i + k_{len} - q_{len})` (key - query).

    Queries are aligned to the last ``q_len`` key positions, as in the attention core's causal
    mask (:mod:`posenc_np.positions`); for ``q_len == k_len`` this is simply :math:`j - i`.
    """
    q_len, k_len = check_lengths(q_len, k_len, "relative positions (q_len, k_len)")
    return _grid(q_len, k_len, k_len - q_len)


def t5_bias(table, q_len: int, k_len: int, *, bidirectional: bool = True, max_distance: int = 128) -> np.ndarray:
    r"""T5 relative bias :math:`\text{bias}[h, i, j] = W[b(r_{ij}), h]`, shape ``(num_heads, q_len, k_len)``.

    Parameters
    ----------
    table : ndarray ``(num_buckets, num_heads)``
        The learned table :math:`W` (its dtype is kept).
    q_len, k_len : int
        Query and key lengths; :math:`r_{ij}` as in :func:`t5_relative_positions`.
    bidirectional, max_distance
        As in :func:`t5_relative_position_bucket` (``num_buckets`` is ``table.shape[0]``).
    """
    table, q_len, k_len, config = check_t5_bias(table, q_len, k_len, max_distance, bidirectional)
    return _bias(table, _bucket_map(q_len, k_len, *config))


def t5_bias_backward(dbias, num_buckets: int, *, bidirectional: bool = True, max_distance: int = 128) -> np.ndarray:
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
    """
    dbias, config = check_t5_grad(dbias, num_buckets, max_distance, bidirectional)
    return _bias_backward(dbias, _bucket_map(*dbias.shape[-2:], *config), config[0])


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
    """

    def __init__(self, num_heads: int, *, num_buckets: int = 32, max_distance: int = 128,
                 bidirectional: bool = True, seed=None, init_std: float = 0.02):
        self.num_heads, self.num_buckets, self.max_distance, self.bidirectional, init_std = check_t5_layer(
            num_heads, num_buckets, max_distance, bidirectional, init_std)
        rng = np.random.default_rng(seed)
        self.params = {"weight": normal_init(rng, init_std, (self.num_buckets, self.num_heads))}
        self.grads = {"weight": np.zeros_like(self.params["weight"])}

    def _weight(self) -> np.ndarray:
        return check_param(self.params, "weight", (self.num_buckets, self.num_heads))

    def buckets(self, q_len: int, k_len: int) -> np.ndarray:
        """``(q_len, k_len)`` bucket indices of :func:`t5_relative_positions` (read-only, kept per lengths)."""
        q_len, k_len = check_lengths(q_len, k_len, "relative positions (q_len, k_len)")
        return _bucket_map(q_len, k_len, self.num_buckets, self.max_distance, self.bidirectional)

    def bias(self, q_len: int, k_len: int) -> np.ndarray:
        """The bias ``(num_heads, q_len, k_len)`` in the table's dtype."""
        return _bias(self._weight(), self.buckets(q_len, k_len))

    def bias_backward(self, dbias) -> None:
        """Write ``grads["weight"]`` from ``dbias`` of shape ``(..., num_heads, q_len, k_len)``."""
        dbias, _ = check_t5_grad(dbias, self.num_buckets, self.max_distance, self.bidirectional, self.num_heads)
        self._table_grad(dbias, self._weight())

    def _table_grad(self, dbias: np.ndarray, w: np.ndarray) -> None:
        buckets = _bucket_map(*dbias.shape[-2:], self.num_buckets, self.max_distance, self.bidirectional)
        self.grads["weight"] = _bias_backward(dbias.astype(w.dtype, copy=False), buckets, self.num_buckets)

    # -- attention hook ------------------------------------------------------------------
    def logits(self, q, k, scale, mask=None):
        """Hook: the bias (cast to ``q``'s dtype), not multiplied by ``scale``."""
        q, k, scale, mask = check_qk_heads(q, k, scale, mask, self.num_heads, None)
        w = self._weight()
        buckets = _bucket_map(q.shape[-2], k.shape[-2], self.num_buckets, self.max_distance, self.bidirectional)
        return _bias(w, buckets).astype(q.dtype, copy=False), w

    def logits_backward(self, dlogits, cache):
        """Hook: the bias does not depend on ``q`` or ``k``; only the table gets a gradient."""
        self._table_grad(dlogits, cache)
        return None, None
