r"""Fused ALiBi attention (Numba): tiled, online softmax, no ``(q_len, k_len)`` matrix.

Forward (FlashAttention, Dao et al. 2022, alg. 1, with the FlashAttention-2 loop order of
Dao 2023, alg. 1): for each query tile :math:`Q_a` and each key tile :math:`K_b, V_b`

.. math::

    S_{ab} = s\,Q_a K_b^\top + B_{ab}, \qquad
    m' = \max(m, \mathrm{rowmax}\,S_{ab}), \qquad
    \tilde P = e^{S_{ab} - m'}, \\
    \ell' = e^{m - m'}\ell + \mathrm{rowsum}\,\tilde P, \qquad
    O' = e^{m - m'} O + \tilde P V_b,

and at the end :math:`O \leftarrow O / \ell`, :math:`\mathrm{lse} = m + \log \ell`. The ALiBi
bias of one tile is recomputed from the slope and the two positions, never stored:
``causal`` :math:`B_{h,i,j} = -m_h (p_i - j)` for :math:`j \le p_i` (later keys masked),
``symmetric`` :math:`B_{h,i,j} = -m_h |j - p_i|`, with query ``i`` at position
:math:`p_i = i + \text{q\_offset}` (Press et al. 2022, "Train Short, Test Long",
arXiv:2108.12409; conventions in :mod:`posenc_np.alibi`). Causal key tiles that lie entirely
after a query tile's last query are skipped: about half the work.

Backward (FlashAttention-2, alg. 2), recomputing :math:`P = e^{S - \mathrm{lse}}` per tile
from the saved ``lse``, with :math:`G = \partial L/\partial O` and
:math:`D_i = \sum_c G_{ic} O_{ic}`:

.. math::

    dV_b = \sum_a P_{ab}^\top G_a, \qquad dP_{ab} = G_a V_b^\top, \qquad
    dS_{ab} = P_{ab} \odot (dP_{ab} - D_a), \\
    dQ_a = s \sum_b dS_{ab} K_b, \qquad dK_b = s \sum_a dS_{ab}^\top Q_a.

Parallel scheme (race-free, no atomics): the forward and :math:`dQ` run ``prange`` over
(batch*head, query tile); each work item owns its output rows. :math:`dK, dV` run ``prange``
over (batch*head, key tile); each work item owns its key rows and loops over the query
tiles that see it. :math:`S` and :math:`dP` are therefore recomputed in both backward
passes (7 tile products instead of 5), the price of needing neither atomics nor per-thread
copies of :math:`dQ`. Tiles are visited in a zig-zag order (first, last, second, ...) so that
Numba's static split of the iteration space gives every thread the same amount of causal
work even for a single head.

Tile products use ``np.dot`` (BLAS ``gemm`` on ``BLOCK_Q x BLOCK_K`` tiles): on the 2-core
AVX-512 development machine a float32 forward ran at ~55 GFLOP/s with BLAS tiles against
~23 GFLOP/s with hand-written (vectorised, axpy-ordered) loops. Every kernel call runs with
BLAS limited to one thread (:class:`~posenc_np.kernels._numba.blas_single_thread`), so the ``prange`` threads never start
BLAS threads of their own: no oversubscription, no OpenBLAS "may hang" warning under an
OpenMP threading layer. The exponential is a vectorisable polynomial (:func:`_exp32`,
:func:`_exp64`, ~1 ulp), since ``math.exp`` stays a scalar libm call without Intel SVML
(4.5x slower per element here).

Precision: float32 inputs are computed and accumulated in float32, float64 in float64. The
float32 error against the float64 reference was measured at <= 7.5e-7 (normalised by
``max(1, max|ref|)``; H = 8, d = 64, T <= 1024), no worse than the materialised NumPy path
in float32 (<= 1.6e-6); ``tests/test_kernels_alibi.py`` enforces 2e-6.

Semantics match :func:`posenc_np.alibi.attention` (the NumPy reference), including fully
masked rows (``causal`` with ``q_len > k_len``): output 0, ``lse = -inf``, gradients 0,
no NaN. NaN and inf inputs propagate like the reference wherever they meet a kept
(query, key) pair: a NaN or ``+inf`` logit makes its row NaN (``lse`` NaN, or ``+inf`` so
that the backward's recomputed ``P`` is NaN exactly where the reference's is), ``-inf``
logits count as masked. Where a non-finite input meets only *masked* pairs the reference
leaks NaN everywhere through ``0 * nan`` in its full-size products; the kernel never reads
skipped tiles, so it leaks only within the diagonal tile and is exact elsewhere.

Memory: besides the outputs (and ``lse``), each work item allocates a few
``BLOCK_Q x BLOCK_K`` tiles; nothing of size ``q_len x k_len`` exists at any time.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import prange, types
from numba.core.extending import intrinsic, overload

from .._checks import check_bool, check_int, check_real
from .._attention_checks import check_exact_distances as _check_distances
from .._attention_checks import check_slopes as _check_slopes
from . import ALIBI_NUMBA_MIN_T
from ._numba import FASTMATH, blas_single_thread, launch_guard, njit_kernel

__all__ = ["ALIBI_NUMBA_MIN_T", "BLOCK_K", "BLOCK_Q", "alibi_attention_backward", "alibi_attention_forward"]

#: Query and key tile sizes (rows). 64 x 64 float32 tiles of S, P and dP (16 KiB each) stay in
#: L1/L2 next to the Q, K, V tiles. 128-row tiles measured no faster on the development
#: machine; 64 keeps causal skipping fine-grained and gives more work items to balance.
BLOCK_Q = 64
BLOCK_K = 64

# ALIBI_NUMBA_MIN_T (the backend="auto" switch) is defined in posenc_np.kernels so that reading
# it does not import Numba; it is re-exported here.

# Kernels use njit_kernel's settings: fastmath without "nnan"/"ninf" (they use -inf for
# masked rows and the empty running max, and must let NaN through like the reference).
_helper = njit_kernel(parallel=False)


# --------------------------------------------------------------------------- public API

def _prepare(arrays, names):
    """Common float dtype, (N, T, d) C-contiguous views; non-contiguous inputs are copied once."""
    dtype = np.result_type(*arrays)
    if dtype not in (np.float32, np.float64):
        raise TypeError(f"{'/'.join(names)} must be float32 or float64 arrays, got dtypes "
                        f"{', '.join(str(a.dtype) for a in arrays)} (common {dtype})")
    return dtype, [np.ascontiguousarray(a.reshape((math.prod(a.shape[:-2]),) + a.shape[-2:]), dtype=dtype)
                   for a in arrays]


def _check_inputs(q, k, v, slopes, causal, scale, q_offset):
    q, k, v = (np.asarray(x) for x in (q, k, v))
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.ndim < 3:
            raise ValueError(f"{name} must be (..., heads, len, d), got shape {x.shape}")
    if q.shape[:-2] != k.shape[:-2] or k.shape[:-1] != v.shape[:-1] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q, k, v must be (..., heads, q_len, d), (..., heads, k_len, d), "
                         f"(..., heads, k_len, d_v) with matching leading axes; got q {q.shape}, "
                         f"k {k.shape}, v {v.shape}")
    heads, q_len, k_len = q.shape[-3], q.shape[-2], k.shape[-2]
    slopes = _check_slopes(slopes, heads)
    causal = check_bool(causal, "causal")
    scale = check_real(scale, "scale", positive=True)
    q_offset = k_len - q_len if q_offset is None else check_int(q_offset, "q_offset")
    dtype = np.result_type(q, k, v)
    if dtype in (np.float32, np.float64):  # (other dtypes are refused by _prepare)
        _check_distances(q_len, k_len, q_offset, dtype)
    return q, k, v, slopes, causal, scale, q_offset


def _per_item_slopes(slopes, n_items, dtype):
    """Negated slope of every flattened (batch..., head) item: item ``n`` is head ``n % H``."""
    return np.ascontiguousarray(np.tile(-slopes.astype(np.float64), n_items // slopes.shape[0]), dtype=dtype)


def alibi_attention_forward(q, k, v, slopes, *, causal: bool, scale: float, q_offset=None):
    r"""Fused ALiBi attention forward: ``(out, lse)``.

    .. math::

        O = \mathrm{softmax}(s\,QK^\top + B)\,V, \qquad
        \mathrm{lse}_i = \log \sum_{j\ \text{kept}} e^{S_{ij}}

    with the ALiBi bias :math:`B` (module docstring) computed tile by tile.

    Parameters
    ----------
    q, k, v : ndarray
        ``(..., heads, q_len, d)``, ``(..., heads, k_len, d)``, ``(..., heads, k_len, d_v)``,
        float32 or float64 (computed in their common dtype). Any leading axes; inputs that
        are not C-contiguous in the last two axes (transposed, strided, offset views) are
        copied once to C order.
    slopes : array_like ``(heads,)``
        ALiBi slopes :math:`m_h` (:func:`posenc_np.alibi.slopes`), finite and non-negative.
    causal : bool
        ``True``: ``causal`` form and causal mask; ``False``: ``symmetric`` form, no mask.
    scale : float
        Logit scale :math:`s` (the bias is added after it).
    q_offset : int, optional
        Position of query 0 (query ``i`` is at ``i + q_offset``, key ``j`` at ``j``); default
        ``k_len - q_len``, the bottom-right alignment of :func:`posenc_np.attention.forward`.
        The causal mask follows it: key ``j`` is kept iff ``j <= i + q_offset``. Every
        query-key distance must be an exact integer in the compute dtype (at most 2^24 in
        float32, 2^53 in float64), else ``ValueError``.

    Returns
    -------
    out : ndarray ``(..., heads, q_len, d_v)``
    lse : ndarray ``(..., heads, q_len)``
        Per-row log-sum-exp of the kept logits, ``-inf`` for fully masked rows (whose output
        is 0). Save it with ``out`` for :func:`alibi_attention_backward`.
    """
    q, k, v, slopes, causal, scale, q_offset = _check_inputs(q, k, v, slopes, causal, scale, q_offset)
    lead = q.shape[:-2]
    q_len, k_len, dv = q.shape[-2], k.shape[-2], v.shape[-1]
    dtype, (q3, k3, v3) = _prepare((q, k, v), ("q", "k", "v"))
    n_items = q3.shape[0]
    out = np.zeros((n_items, q_len, dv), dtype=dtype)
    lse = np.full((n_items, q_len), -np.inf, dtype=dtype)
    if n_items and q_len and k_len:
        mneg = _per_item_slopes(slopes, n_items, dtype)
        with launch_guard(), blas_single_thread(), _threads_for(n_items * -(-q_len // BLOCK_Q)):
            _forward_kernel(q3, k3, v3, mneg, causal, dtype.type(scale), q_offset, dtype.type(-np.inf), out, lse)
    return out.reshape(lead + (q_len, dv)), lse.reshape(lead + (q_len,))


def alibi_attention_backward(dout, q, k, v, out, lse, slopes, *, causal: bool, scale: float, q_offset=None):
    r"""Gradients ``(dq, dk, dv)`` of :func:`alibi_attention_forward` (FlashAttention-2).

    Recomputes :math:`P = e^{S - \mathrm{lse}}` tile by tile (module docstring); memory is
    :math:`O(\text{tile}^2)` per thread besides the gradients themselves.

    Parameters
    ----------
    dout : ndarray ``(..., heads, q_len, d_v)``
        :math:`\partial L/\partial O`.
    q, k, v, slopes, causal, scale, q_offset
        As passed to :func:`alibi_attention_forward`.
    out, lse : ndarray
        As returned by :func:`alibi_attention_forward`.

    Returns
    -------
    dq, dk, dv : ndarray
        Shapes of ``q``, ``k``, ``v``, in the common dtype.
    """
    q, k, v, slopes, causal, scale, q_offset = _check_inputs(q, k, v, slopes, causal, scale, q_offset)
    dout, out, lse = np.asarray(dout), np.asarray(out), np.asarray(lse)
    out_shape = q.shape[:-1] + (v.shape[-1],)
    if dout.shape != out_shape or out.shape != out_shape:
        raise ValueError(f"dout and out must have shape {out_shape}, got {dout.shape} and {out.shape}")
    if lse.shape != q.shape[:-1]:
        raise ValueError(f"lse must have shape {q.shape[:-1]}, got {lse.shape}")
    q_len, k_len = q.shape[-2], k.shape[-2]
    dtype, (q3, k3, v3, do3, o3) = _prepare((q, k, v, dout, out), ("q", "k", "v", "dout", "out"))
    lse2 = np.ascontiguousarray(lse.reshape(q3.shape[:2]), dtype=dtype)
    n_items = q3.shape[0]
    dq = np.zeros(q3.shape, dtype=dtype)
    dk = np.zeros(k3.shape, dtype=dtype)
    dv = np.zeros(v3.shape, dtype=dtype)
    if n_items and q_len and k_len:
        mneg = _per_item_slopes(slopes, n_items, dtype)
        delta = np.empty((n_items, q_len), dtype=dtype)
        sc, ninf = dtype.type(scale), dtype.type(-np.inf)
        with launch_guard(), blas_single_thread():
            with _threads_for(n_items * -(-q_len // BLOCK_Q)):
                _backward_dq_kernel(q3, k3, v3, do3, o3, lse2, mneg, causal, sc, q_offset, ninf, dq, delta)
            with _threads_for(n_items * -(-k_len // BLOCK_K)):
                _backward_dkdv_kernel(q3, k3, v3, do3, lse2, delta, mneg, causal, sc, q_offset, ninf, dk, dv)
    return dq.reshape(q.shape), dk.reshape(k.shape), dv.reshape(v.shape)


# --------------------------------------------------------------------------- threads

class _threads_for:
    """Run the next kernel on one Numba thread when it has fewer than two work items per thread.

    A parallel region waits for every thread of the team, even those without work; on a busy
    machine a descheduled thread costs milliseconds, on a quiet one the fork/join still costs
    more than one tiny tile. Numba's thread count is thread-local, and results do not depend on
    it (every output row is computed by one work item in a fixed order).
    """

    def __init__(self, work_items: int):
        import numba

        self._numba = numba
        self._saved = numba.get_num_threads()
        self._wanted = self._saved if work_items >= 2 * self._saved else 1

    def __enter__(self):
        if self._wanted != self._saved:
            self._numba.set_num_threads(self._wanted)
        return self

    def __exit__(self, *exc):
        if self._wanted != self._saved:
            self._numba.set_num_threads(self._saved)
        return False


# --------------------------------------------------------------------------- kernels
#
# Everything below is compiled lazily (first call, per dtype) and cached on disk by
# ``njit_kernel``. Scalars that enter the inner loops (scale, -inf, slopes) are passed in
# the array dtype so that float32 kernels never widen to float64.

@intrinsic
def _bits_to_f32(typingctx, x):
    """Reinterpret int32 bits as float32 (LLVM ``bitcast``; vectorises)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(types.int32), codegen


@intrinsic
def _bits_to_f64(typingctx, x):
    """Reinterpret int64 bits as float64."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())
    return types.float64(types.int64), codegen


@_helper
def _exp32(x):
    # e^x for float32 x <= ~88 (also -inf and NaN): x = n ln2 + r with |r| <= ln2/2
    # (Cody-Waite split of ln2), e^r by its degree-7 Taylor polynomial (truncation < 1.2e-8
    # relative), 2^n built from the exponent bits. Max error measured 1 ulp; exp(x) = 0 for
    # x < -87 (below float32's normal range), NaN in gives NaN out.
    lo = np.float32(-87.0)
    xc = lo if x < lo else x
    xc = np.float32(0.0) if xc != xc else xc  # NaN: keep n finite; r below stays NaN
    n = math.floor(xc * np.float32(1.4426950408889634) + np.float32(0.5))
    r = x - n * np.float32(0.693359375) - n * np.float32(-2.12194440e-4)
    p = np.float32(1.0 / 5040.0)
    p = p * r + np.float32(1.0 / 720.0)
    p = p * r + np.float32(1.0 / 120.0)
    p = p * r + np.float32(1.0 / 24.0)
    p = p * r + np.float32(1.0 / 6.0)
    p = p * r + np.float32(0.5)
    p = p * r + np.float32(1.0)
    p = p * r + np.float32(1.0)
    res = p * _bits_to_f32((np.int32(n) + np.int32(127)) << np.int32(23))
    return np.float32(0.0) if x < lo else res


@_helper
def _exp64(x):
    # float64 version of _exp32: degree-12 Taylor polynomial (truncation < 6e-17 relative).
    lo = -708.0
    xc = lo if x < lo else x
    xc = 0.0 if xc != xc else xc
    n = math.floor(xc * 1.4426950408889634 + 0.5)
    r = x - n * 0.6931471803691238 - n * 1.9082149292705877e-10
    p = 1.0 / 479001600.0
    p = p * r + 1.0 / 39916800.0
    p = p * r + 1.0 / 3628800.0
    p = p * r + 1.0 / 362880.0
    p = p * r + 1.0 / 40320.0
    p = p * r + 1.0 / 5040.0
    p = p * r + 1.0 / 720.0
    p = p * r + 1.0 / 120.0
    p = p * r + 1.0 / 24.0
    p = p * r + 1.0 / 6.0
    p = p * r + 0.5
    p = p * r + 1.0
    p = p * r + 1.0
    res = p * _bits_to_f64((np.int64(n) + np.int64(1023)) << np.int64(52))
    return 0.0 if x < lo else res


def _exp(x):
    """Vectorisable e^x in the dtype of ``x`` (dispatches to :func:`_exp32` / :func:`_exp64`)."""
    raise NotImplementedError("only callable from Numba kernels")


@overload(_exp, jit_options={"fastmath": set(FASTMATH)})
def _exp_overload(x):
    if x == types.float32:
        return lambda x: _exp32(x)
    return lambda x: _exp64(x)


@_helper
def _zigzag(z, count):
    """Tile order 0, count-1, 1, count-2, ...: equal causal work in every contiguous chunk."""
    return z // 2 if z % 2 == 0 else count - 1 - z // 2


# Each kernel is a prange over work items whose body calls BLAS for the tile products and
# the serial helpers below for the elementwise work of one tile. (Keeping those loops in
# separate serial functions gave Numba/LLVM stable, vectorised code: written inline in the
# prange body, one causal loop compiled 2.5x slower.)

@_helper
def _fwd_scores(s, pos0, j0, causal, m, scale, ninf, row_max, row_sum, alpha):
    """One (query tile, key tile) step of the online softmax; ``s`` becomes P~ in place.

    ``s`` holds Q_a K_b^T; query row ``a`` is at position ``pos0 + a``, key column ``b`` at
    ``j0 + b``. Updates the running max/sum and writes the rescale factors ``alpha``.
    """
    bq, bk = s.shape
    ft = s.dtype.type
    zero = ft(0)
    nan = ninf - ninf
    for a in range(bq):
        base = pos0 + a - j0  # query position minus key position, for b = 0
        kept = min(bk, max(0, base + 1)) if causal else bk
        srow = s[a]
        mx = row_max[a]
        nan_seen = False
        if causal:
            for b in range(kept):  # bias -m (q - k), q - k = base - b >= 0
                x = srow[b] * scale + m * ft(base - b)
                srow[b] = x
                mx = x if x > mx else mx
                nan_seen |= x != x
        else:
            for b in range(bk):  # bias -m |k - q|
                x = srow[b] * scale + m * ft(abs(base - b))
                srow[b] = x
                mx = x if x > mx else mx
                nan_seen |= x != x
        if nan_seen:  # a NaN logit makes the whole row NaN, as in the reference
            mx = nan
        alpha[a] = 1
        if mx == ninf:  # nothing kept (or only -inf logits): P row is 0, state unchanged
            for b in range(bk):
                srow[b] = 0
            continue
        al = _exp(row_max[a] - mx)
        total = zero
        for b in range(kept):
            p = _exp(srow[b] - mx)
            srow[b] = p
            total += p
        for b in range(kept, bk):
            srow[b] = 0
        alpha[a] = al
        row_sum[a] = row_sum[a] * al + total
        row_max[a] = mx


@_helper
def _rescale_add(acc, alpha, pv):
    """``acc = alpha[:, None] * acc + pv``."""
    for a in range(acc.shape[0]):
        al = alpha[a]
        for c in range(acc.shape[1]):
            acc[a, c] = acc[a, c] * al + pv[a, c]


@_helper
def _add(acc, x):
    for a in range(acc.shape[0]):
        for c in range(acc.shape[1]):
            acc[a, c] += x[a, c]


@_helper
def _scale(acc, factor):
    for a in range(acc.shape[0]):
        for c in range(acc.shape[1]):
            acc[a, c] *= factor


@_helper
def _dq_scores(s, dp, pos0, j0, causal, m, scale, ninf, lse_a, delta_a):
    """``s`` (Q_a K_b^T) becomes dS = P * (dP - D) with P = exp(S - lse), in place."""
    bq, bk = s.shape
    ft = s.dtype.type
    for a in range(bq):
        base = pos0 + a - j0
        kept = min(bk, max(0, base + 1)) if causal else bk
        lse_i = lse_a[a]
        if lse_i == ninf:  # fully masked row: P = 0
            kept = 0
        d_i = delta_a[a]
        srow = s[a]
        dprow = dp[a]
        if causal:
            for b in range(kept):
                p = _exp(srow[b] * scale + m * ft(base - b) - lse_i)
                srow[b] = p * (dprow[b] - d_i)
        else:
            for b in range(kept):
                p = _exp(srow[b] * scale + m * ft(abs(base - b)) - lse_i)
                srow[b] = p * (dprow[b] - d_i)
        for b in range(kept, bk):
            srow[b] = 0


@_helper
def _dkdv_scores(st, dpt, pos0, j0, causal, m, scale, ninf, lse_a, delta_a):
    """Transposed tile: ``st`` (K_b Q_a^T) becomes P^T and ``dpt`` (V_b dO_a^T) dS^T."""
    bk, bq = st.shape
    ft = st.dtype.type
    zero = ft(0)
    for b in range(bk):
        base = pos0 - (j0 + b)  # position of query a minus key position is base + a
        first = min(bq, max(0, -base)) if causal else 0  # causal keeps a >= -base
        strow = st[b]
        dprow = dpt[b]
        for a in range(first):
            strow[a] = 0
            dprow[a] = 0
        if causal:
            # (loops over views from index 0: an index Numba cannot prove non-negative gets
            # a wrap-around check that blocks vectorisation, 6x slower here)
            strow, dprow, lse_v, delta_v = strow[first:], dprow[first:], lse_a[first:], delta_a[first:]
            base += first
            for a in range(bq - first):
                lse_i = lse_v[a]
                p = _exp(strow[a] * scale + m * ft(base + a) - lse_i)
                p = zero if lse_i == ninf else p
                strow[a] = p
                dprow[a] = p * (dprow[a] - delta_v[a])
        else:
            for a in range(bq):
                lse_i = lse_a[a]
                p = _exp(strow[a] * scale + m * ft(abs(base + a)) - lse_i)
                p = zero if lse_i == ninf else p
                strow[a] = p
                dprow[a] = p * (dprow[a] - delta_a[a])


@_helper
def _row_dots(x, y, out):
    """``out[a] = sum_c x[a, c] y[a, c]`` (D_i = rowsum(dO * O))."""
    for a in range(x.shape[0]):
        t = out.dtype.type(0)
        for c in range(x.shape[1]):
            t += x[a, c] * y[a, c]
        out[a] = t


@njit_kernel()
def _forward_kernel(q, k, v, mneg, causal, scale, off, ninf, out, lse):
    n_items, q_len, _ = q.shape
    k_len = k.shape[1]
    d_v = v.shape[2]
    n_qt = (q_len + BLOCK_Q - 1) // BLOCK_Q
    for item in prange(n_items * n_qt):
        n = item // n_qt
        i0 = _zigzag(item % n_qt, n_qt) * BLOCK_Q
        i1 = min(i0 + BLOCK_Q, q_len)
        bq = i1 - i0
        q_a = q[n][i0:i1]
        acc = np.zeros((bq, d_v), out.dtype)  # unnormalised output rows
        pv = np.empty((bq, d_v), out.dtype)
        s_buf = np.empty(bq * BLOCK_K, out.dtype)
        row_max = np.full(bq, ninf)
        row_sum = np.zeros(bq, out.dtype)
        alpha = np.empty(bq, out.dtype)
        j_end = k_len
        if causal:  # the tile's last query (position i1 - 1 + off) sees keys < i1 + off
            j_end = min(k_len, max(0, i1 + off))
        for j0 in range(0, j_end, BLOCK_K):
            bk = min(BLOCK_K, j_end - j0)
            s = s_buf[: bq * bk].reshape((bq, bk))
            np.dot(q_a, k[n][j0:j0 + bk].T, s)
            _fwd_scores(s, i0 + off, j0, causal, mneg[n], scale, ninf, row_max, row_sum, alpha)
            np.dot(s, v[n][j0:j0 + bk], pv)
            _rescale_add(acc, alpha, pv)
        for a in range(bq):
            l = row_sum[a]
            if l == 0:  # fully masked row: output 0, lse -inf (already in out/lse)
                continue
            inv = out.dtype.type(1) / l
            for c in range(d_v):
                out[n, i0 + a, c] = acc[a, c] * inv
            # A +inf logit (and no NaN): the row is NaN, and lse = +inf makes the backward's
            # P = exp(S - lse) NaN at the +inf logits and 0 elsewhere, like the reference's P.
            lse[n, i0 + a] = row_max[a] if row_max[a] == -ninf else row_max[a] + math.log(l)


@njit_kernel()
def _backward_dq_kernel(q, k, v, do, o, lse, mneg, causal, scale, off, ninf, dq, delta):
    n_items, q_len, d = q.shape
    k_len = k.shape[1]
    n_qt = (q_len + BLOCK_Q - 1) // BLOCK_Q
    for item in prange(n_items * n_qt):
        n = item // n_qt
        i0 = _zigzag(item % n_qt, n_qt) * BLOCK_Q
        i1 = min(i0 + BLOCK_Q, q_len)
        bq = i1 - i0
        q_a = q[n][i0:i1]
        do_a = do[n][i0:i1]
        dq_a = dq[n][i0:i1]
        _row_dots(do_a, o[n][i0:i1], delta[n, i0:i1])
        s_buf = np.empty(bq * BLOCK_K, dq.dtype)
        dp_buf = np.empty(bq * BLOCK_K, dq.dtype)
        tmp = np.empty((bq, d), dq.dtype)
        j_end = k_len
        if causal:
            j_end = min(k_len, max(0, i1 + off))
        for j0 in range(0, j_end, BLOCK_K):
            bk = min(BLOCK_K, j_end - j0)
            s = s_buf[: bq * bk].reshape((bq, bk))
            dp = dp_buf[: bq * bk].reshape((bq, bk))
            k_b = k[n][j0:j0 + bk]
            np.dot(q_a, k_b.T, s)
            np.dot(do_a, v[n][j0:j0 + bk].T, dp)
            _dq_scores(s, dp, i0 + off, j0, causal, mneg[n], scale, ninf, lse[n, i0:i1], delta[n, i0:i1])
            np.dot(s, k_b, tmp)
            _add(dq_a, tmp)
        _scale(dq_a, scale)


@njit_kernel()
def _backward_dkdv_kernel(q, k, v, do, lse, delta, mneg, causal, scale, off, ninf, dk, dv):
    n_items, q_len, d = q.shape
    k_len = k.shape[1]
    d_v = v.shape[2]
    n_kt = (k_len + BLOCK_K - 1) // BLOCK_K
    for item in prange(n_items * n_kt):
        n = item // n_kt
        j0 = _zigzag(item % n_kt, n_kt) * BLOCK_K
        bk = min(BLOCK_K, k_len - j0)
        k_b = k[n][j0:j0 + bk]
        v_b = v[n][j0:j0 + bk]
        dk_b = dk[n][j0:j0 + bk]
        dv_b = dv[n][j0:j0 + bk]
        st_buf = np.empty(bk * BLOCK_Q, dk.dtype)
        dpt_buf = np.empty(bk * BLOCK_Q, dk.dtype)
        tmp_k = np.empty((bk, d), dk.dtype)
        tmp_v = np.empty((bk, d_v), dk.dtype)
        i_start = 0
        if causal:  # first query that sees key j0: i + off >= j0
            i_start = min(q_len, max(0, j0 - off))
        for i0 in range(i_start, q_len, BLOCK_Q):
            bq = min(BLOCK_Q, q_len - i0)
            st = st_buf[: bk * bq].reshape((bk, bq))  # S^T, then P^T
            dpt = dpt_buf[: bk * bq].reshape((bk, bq))  # dP^T, then dS^T
            q_a = q[n][i0:i0 + bq]
            do_a = do[n][i0:i0 + bq]
            np.dot(k_b, q_a.T, st)
            np.dot(v_b, do_a.T, dpt)
            _dkdv_scores(st, dpt, i0 + off, j0, causal, mneg[n], scale, ninf, lse[n, i0:i0 + bq],
                         delta[n, i0:i0 + bq])
            np.dot(st, do_a, tmp_v)
            np.dot(dpt, q_a, tmp_k)
            _add(dv_b, tmp_v)
            _add(dk_b, tmp_k)
        _scale(dk_b, scale)
