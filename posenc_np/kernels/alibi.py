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

Parallel scheme (race-free, no atomics): the forward runs ``prange`` over (batch*head, query
tile); each work item owns its output rows. When those items are too few to occupy every
thread (decoding: one or a few queries against a long cache), each item's keys are split into
ranges that run as separate items and write partial states :math:`(m_r, \ell_r, O_r)`, which a
second loop combines exactly (flash-decoding; :func:`alibi_attention_forward`, ``key_splits``).
The backward has two schemes. *One pass* (FlashAttention-2's own): one work item per key/value
head visits every (key tile, query tile) pair once, computing the five tile products once, and
owns the ``dq`` rows of its query heads and its ``dk``, ``dv`` rows; it needs at least one head
per thread. *Two passes*: :math:`dQ` runs ``prange`` over (batch*head, query tile) and
:math:`dK, dV` over (batch*kv_head, key tile), each item owning its rows and recomputing
:math:`S` and :math:`dP` (7 tile products instead of 5): more, finer work items for few heads.
Tiles are visited in a zig-zag order (first, last, second, ...) so that Numba's static split of
the iteration space gives every thread the same amount of causal work even for a single head.

Grouped-query and multi-query attention: ``k`` and ``v`` may have ``kv_heads`` heads, a divisor
of the query heads; query head ``h`` reads key/value head ``h // group``, and the backward
sums the gradients of a group's query heads into its key/value head (the work item of a
key/value head loops over them, so no two items write the same rows).

Tile products use ``np.dot`` (BLAS ``gemm`` on ``BLOCK_Q x BLOCK_K`` tiles): on the 2-core
AVX-512 development machine a float32 forward ran at ~55 GFLOP/s with BLAS tiles against
~23 GFLOP/s with hand-written (vectorised, axpy-ordered) loops. Every kernel call runs with
BLAS limited to one thread (:class:`~posenc_np.kernels._numba.blas_single_thread`), so the ``prange`` threads never start
BLAS threads of their own: no oversubscription, no OpenBLAS "may hang" warning under an
OpenMP threading layer. The exponential is a vectorisable polynomial (:func:`_exp32`,
:func:`_exp64`: measured within 0.58 and 2.0 ulp, ``tests/test_kernels_alibi_paths.py``),
since ``math.exp`` stays a scalar libm call without Intel SVML (4.5x slower per element here).
Every step of it must vectorise on AVX2 (no float -> int64 conversion): with ``math.floor``
(an int64) the exponential loops stayed scalar, and the fused float32 forward took 100 ms at
T = 2048 (H = 8, d = 64) against 82-90 ms with the float ``np.floor``.

Precision: float32 inputs are computed and accumulated in float32, float64 in float64;
float16 and bfloat16 inputs are converted to float32 once, computed and accumulated in float32,
and the outputs rounded back once (``lse`` stays float32). The float32 error against the
float64 reference was measured at <= 7.5e-7 (normalised by ``max(1, max|ref|)``; H = 8, d = 64,
T <= 1024), no worse than the materialised NumPy path in float32 (<= 1.6e-6);
``tests/test_kernels_alibi.py`` enforces 2e-6, and for float16/bfloat16 inputs the float32
result rounded once to the input dtype.

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

import contextlib
import functools
import math

import numba
import numpy as np
from llvmlite import ir
from numba import prange, types
from numba.core.extending import intrinsic, overload

from .._checks import check_bool, check_choice, check_int, check_real
from .._attention_checks import check_exact_distances as _check_distances
from .._attention_checks import check_slopes as _check_slopes
from . import ALIBI_NUMBA_MIN_T
from ._numba import FASTMATH, blas_single_thread, launch_guard, njit_kernel

__all__ = ["ALIBI_NUMBA_MIN_T", "BLOCK_K", "BLOCK_Q", "KERNEL_DTYPES", "alibi_attention_backward",
           "alibi_attention_forward"]

#: Query and key tile sizes (rows). 64 x 64 float32 tiles of S, P and dP (16 KiB each) stay in
#: L1/L2 next to the Q, K, V tiles. 128-row tiles measured no faster on the development
#: machine; 64 keeps causal skipping fine-grained and gives more work items to balance.
BLOCK_Q = 64
BLOCK_K = 64

#: Forward query tiles of at most this many rows (decoding: one or a few queries) form their
#: two tile products with plain loops instead of ``np.dot``: a BLAS call costs more than the
#: product of a 1-row tile. Measured on the 2-core box, one thread, 64k keys, d = 64: a
#: 1-query call 5.8 -> 4.3 ms, a 16-query call 21 -> 16 ms; at 64 rows BLAS stays ahead
#: (T = 2048 prefill 97 ms with BLAS, 104 ms with loops). Calls whose tiles all take the
#: loops skip the BLAS thread limit too (threadpoolctl costs ~50 us per call).
SMALL_Q = 16

#: Least work of a flash-decoding key range (``key_splits=None``), in query-key products: a
#: range of a tile of ``r`` query rows has at least ``MIN_SPLIT_PRODUCTS / r`` keys. Measured on
#: the 2-core box, one head, d = 64, 2 threads against one: one query over 4096 keys in 4 ranges
#: of 1024 took 0.31 ms against 0.29 ms (a one-pass read of those keys gains nothing from a
#: second thread either), 16384 keys gain 1.1-1.4x; 16 queries over 4096 keys in 4 ranges of
#: 1024 (16384 products each) 0.54 ms against 0.89 ms, over 1024 keys no gain.
MIN_SPLIT_PRODUCTS = 4096

# ALIBI_NUMBA_MIN_T (the backend="auto" switch) is defined in posenc_np.kernels so that reading
# it does not import Numba; it is re-exported here.

# Kernels use njit_kernel's settings: fastmath without "nnan"/"ninf" (they use -inf for
# masked rows and the empty running max, and must let NaN through like the reference).
_helper = njit_kernel(parallel=False)


# --------------------------------------------------------------------------- public API

#: Input dtypes the kernel accepts, by ``dtype.name``. float16 and bfloat16 are converted to
#: float32 once at the door (O(T d) per head, next to the O(T^2 d) work) and computed and
#: accumulated in float32; outputs are rounded back once. bfloat16 is ``ml_dtypes.bfloat16``
#: (the NumPy bfloat16 of JAX, TensorFlow and ``ml_dtypes``; install ``posenc-np[bfloat16]``), read
#: and written through its bits here, so the kernel never imports ``ml_dtypes``.
KERNEL_DTYPES = ("float16", "bfloat16", "float32", "float64")


@functools.lru_cache(maxsize=64)
def _name(dtype: np.dtype) -> str:
    """``dtype.name``, cached (NumPy computes it in Python, ~2 us, and a call asks a dozen times)."""
    return dtype.name


def _dtypes(arrays, names) -> tuple[np.dtype, np.dtype]:
    """``(compute, io)``: float64 if any input is float64, else float32; outputs in the inputs'
    common dtype (float16 or bfloat16 stay themselves when all inputs share them)."""
    kinds = {_name(a.dtype) for a in arrays}
    if not kinds <= set(KERNEL_DTYPES):
        raise TypeError(f"{'/'.join(names)} must be float16, bfloat16, float32 or float64 arrays, got dtypes "
                        f"{', '.join(str(a.dtype) for a in arrays)}")
    compute = np.dtype(np.float64 if "float64" in kinds else np.float32)
    io = arrays[0].dtype if len(kinds) == 1 else compute
    return compute, io


def _bf16_to_f32(a: np.ndarray) -> np.ndarray:
    """bfloat16 (any 2-byte array holding bfloat16 bits) to float32, exactly: the bits shifted up."""
    return (np.ascontiguousarray(a).view(np.uint16).astype(np.uint32) << 16).view(np.float32)


def _f32_to_bf16_bits(a: np.ndarray) -> np.ndarray:
    """float32 to bfloat16 bits (uint16), rounded to nearest, ties to even; NaN stays a (quiet) NaN."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    bits = ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
    nan = np.isnan(a)
    if np.any(nan):
        bits[nan] = ((u[nan] >> 16) | np.uint32(0x40)).astype(np.uint16)
    return bits


def _items(a: np.ndarray, compute) -> np.ndarray:
    """``a`` as C-contiguous ``(items, len, width)`` in the compute dtype (one copy at most)."""
    a3 = a.reshape((math.prod(a.shape[:-2]),) + a.shape[-2:])
    if _name(a.dtype) == "bfloat16":
        return _bf16_to_f32(a3).astype(compute, copy=False)
    if a.dtype == np.float16:
        wide = np.empty(a3.shape, np.float32)
        _half_to_float(np.ascontiguousarray(a3).view(np.uint16).reshape(-1), wide.reshape(-1))
        return wide.astype(compute, copy=False)
    return np.ascontiguousarray(a3, dtype=compute)


def _to_io(a: np.ndarray, io) -> np.ndarray:
    """A compute-dtype result in the inputs' dtype (rounded once)."""
    if _name(io) == "bfloat16":
        return _f32_to_bf16_bits(a).view(io)
    if io == np.float16:
        bits = np.empty(a.shape, np.uint16)
        _float_to_half(np.ascontiguousarray(a, dtype=np.float32).reshape(-1), bits.reshape(-1))
        return bits.view(np.float16)
    return a.astype(io, copy=False)


def _check_inputs(q, k, v, slopes, causal, scale, q_offset):
    """Shapes (with grouped-query heads), slopes, flags; returns them and the group size."""
    q, k, v = (np.asarray(x) for x in (q, k, v))
    for name, x in (("q", q), ("k", k), ("v", v)):
        if x.ndim < 3:
            raise ValueError(f"{name} must be (..., heads, len, d), got shape {x.shape}")
    heads, kv_heads = q.shape[-3], k.shape[-3]
    if (q.shape[:-3] != k.shape[:-3] or k.shape[:-1] != v.shape[:-1] or q.shape[-1] != k.shape[-1]
            or (kv_heads == 0) != (heads == 0) or (kv_heads and heads % kv_heads)):
        raise ValueError(f"q, k, v must be (..., heads, q_len, d), (..., kv_heads, k_len, d), "
                         f"(..., kv_heads, k_len, d_v) with matching leading axes and heads a multiple of "
                         f"kv_heads (grouped-query attention); got q {q.shape}, k {k.shape}, v {v.shape}")
    group = heads // kv_heads if kv_heads else 1
    q_len, k_len = q.shape[-2], k.shape[-2]
    slopes = _check_slopes(slopes, heads)
    causal = check_bool(causal, "causal")
    scale = check_real(scale, "scale", positive=True)
    q_offset = k_len - q_len if q_offset is None else check_int(q_offset, "q_offset")
    if {_name(a.dtype) for a in (q, k, v)} <= set(KERNEL_DTYPES):  # (other dtypes are refused by _dtypes)
        _check_distances(q_len, k_len, q_offset, _dtypes((q, k, v), ("q", "k", "v"))[0])
    return q, k, v, slopes, causal, scale, q_offset, group


def _per_item_slopes(slopes, n_items, dtype):
    """Negated slope of every flattened (batch..., head) item: item ``n`` is head ``n % H``."""
    return np.ascontiguousarray(np.tile(-slopes.astype(np.float64), n_items // slopes.shape[0]), dtype=dtype)


def _key_splits(key_splits, work: int, k_len: int, rows: int) -> int:
    """How many key ranges each (head, query tile) is split into (flash-decoding).

    ``None`` (auto): 1 when the ``work`` (head, query tile) items already give every thread two,
    else enough ranges for about two items per thread, each of at least
    :data:`MIN_SPLIT_PRODUCTS` query-key products for a tile of ``rows`` queries (a smaller
    range costs more in thread wake-up and combining than it saves).
    """
    if key_splits is not None:
        return check_int(key_splits, "key_splits", minimum=1)
    threads = numba.get_num_threads()
    if threads == 1 or work >= 2 * threads:
        return 1
    return max(1, min(-(-2 * threads // work), k_len * rows // MIN_SPLIT_PRODUCTS))


def alibi_attention_forward(q, k, v, slopes, *, causal: bool, scale: float, q_offset=None, key_splits=None):
    r"""Fused ALiBi attention forward: ``(out, lse)``.

    .. math::

        O = \mathrm{softmax}(s\,QK^\top + B)\,V, \qquad
        \mathrm{lse}_i = \log \sum_{j\ \text{kept}} e^{S_{ij}}

    with the ALiBi bias :math:`B` (module docstring) computed tile by tile.

    Parameters
    ----------
    q, k, v : ndarray
        ``(..., heads, q_len, d)``, ``(..., kv_heads, k_len, d)``, ``(..., kv_heads, k_len, d_v)``,
        float16, bfloat16 (``ml_dtypes``), float32 or float64: computed in float64 if any is
        float64, else in float32 (float16/bfloat16 converted once; see :data:`KERNEL_DTYPES`).
        Any leading axes; inputs that are not C-contiguous in the last two axes (transposed,
        strided, offset views) are copied once to C order. ``heads`` a multiple of ``kv_heads``
        (grouped-query attention; 1 = multi-query): query head ``h`` attends with key/value
        head ``h // (heads // kv_heads)``.
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
    key_splits : int, optional
        Split each (head, query tile)'s keys into this many ranges, run them in parallel and
        combine their partial softmaxes exactly (flash-decoding: with running maxima
        :math:`m_r`, sums :math:`\ell_r` and outputs :math:`O_r`, :math:`m = \max_r m_r`,
        :math:`\ell = \sum_r e^{m_r - m}\ell_r`, :math:`O = \sum_r e^{m_r - m} O_r / \ell`).
        Default: automatic, more than 1 only when the heads and query tiles are too few to
        occupy every thread (decoding: one or a few queries against a long cache).

    Returns
    -------
    out : ndarray ``(..., heads, q_len, d_v)``, in the inputs' dtype
    lse : ndarray ``(..., heads, q_len)``, in the compute dtype
        Per-row log-sum-exp of the kept logits, ``-inf`` for fully masked rows (whose output
        is 0). Save it with ``out`` for :func:`alibi_attention_backward`.
    """
    q, k, v, slopes, causal, scale, q_offset, group = _check_inputs(q, k, v, slopes, causal, scale, q_offset)
    lead = q.shape[:-2]
    q_len, k_len, dv = q.shape[-2], k.shape[-2], v.shape[-1]
    compute, io = _dtypes((q, k, v), ("q", "k", "v"))
    q3, k3, v3 = (_items(a, compute) for a in (q, k, v))
    n_items = q3.shape[0]
    out = np.zeros((n_items, q_len, dv), dtype=compute)
    lse = np.full((n_items, q_len), -np.inf, dtype=compute)
    if n_items and q_len and k_len:
        mneg = _per_item_slopes(slopes, n_items, compute)
        work = n_items * -(-q_len // BLOCK_Q)
        splits = _key_splits(key_splits, work, k_len, min(q_len, BLOCK_Q))
        sc, ninf = compute.type(scale), compute.type(-np.inf)
        blas = blas_single_thread() if q_len > SMALL_Q else contextlib.nullcontext()
        with launch_guard(), blas, _threads_for(work * splits):
            if splits == 1:
                _forward_kernel(q3, k3, v3, mneg, group, causal, sc, q_offset, ninf, out, lse)
            else:
                part_acc = np.empty((n_items, splits, q_len, dv), dtype=compute)
                part_m = np.empty((n_items, splits, q_len), dtype=compute)
                part_l = np.empty((n_items, splits, q_len), dtype=compute)
                # the combination's items: in parallel only when every thread gets two (see
                # the kernel); decided here, as get_num_threads() in a kernel stops Numba caching it
                parallel_combine = work >= 2 * numba.get_num_threads()
                _forward_split_kernel(q3, k3, v3, mneg, group, causal, sc, q_offset, ninf, splits,
                                      part_acc, part_m, part_l, out, lse, parallel_combine)
    return _to_io(out, io).reshape(lead + (q_len, dv)), lse.reshape(lead + (q_len,))


def alibi_attention_backward(dout, q, k, v, out, lse, slopes, *, causal: bool, scale: float, q_offset=None,
                             method: str = "auto"):
    r"""Gradients ``(dq, dk, dv)`` of :func:`alibi_attention_forward` (FlashAttention-2).

    Recomputes :math:`P = e^{S - \mathrm{lse}}` tile by tile (module docstring); memory is
    :math:`O(\text{tile}^2)` per thread besides the gradients themselves. With grouped-query
    heads, ``dk`` and ``dv`` of a key/value head sum over the query heads of its group.

    Parameters
    ----------
    dout : ndarray ``(..., heads, q_len, d_v)``
        :math:`\partial L/\partial O`.
    q, k, v, slopes, causal, scale, q_offset
        As passed to :func:`alibi_attention_forward`.
    out, lse : ndarray
        As returned by :func:`alibi_attention_forward`.
    method : {"auto", "one-pass", "two-pass"}
        ``"one-pass"``: one work item per key/value head computes all five tile products once
        and owns its ``dq``, ``dk``, ``dv`` rows; ``"two-pass"``: a ``dq`` pass over query tiles
        and a ``dk, dv`` pass over key tiles (seven products, but as many work items as tiles).
        ``"auto"``: one-pass when there are at least two key/value heads per thread (or one
        thread), else two-pass.

    Returns
    -------
    dq, dk, dv : ndarray
        Shapes of ``q``, ``k``, ``v``, in the inputs' dtype.
    """
    q, k, v, slopes, causal, scale, q_offset, group = _check_inputs(q, k, v, slopes, causal, scale, q_offset)
    method = check_choice(method, "method", ("auto", "one-pass", "two-pass"))
    dout, out, lse = np.asarray(dout), np.asarray(out), np.asarray(lse)
    out_shape = q.shape[:-1] + (v.shape[-1],)
    if dout.shape != out_shape or out.shape != out_shape:
        raise ValueError(f"dout and out must have shape {out_shape}, got {dout.shape} and {out.shape}")
    if lse.shape != q.shape[:-1]:
        raise ValueError(f"lse must have shape {q.shape[:-1]}, got {lse.shape}")
    q_len, k_len = q.shape[-2], k.shape[-2]
    compute, io = _dtypes((q, k, v, dout, out), ("q", "k", "v", "dout", "out"))
    q3, k3, v3, do3, o3 = (_items(a, compute) for a in (q, k, v, dout, out))
    lse2 = np.ascontiguousarray(lse.reshape(q3.shape[:2]), dtype=compute)
    n_items, n_kv = q3.shape[0], k3.shape[0]
    dq = np.zeros(q3.shape, dtype=compute)
    dk = np.zeros(k3.shape, dtype=compute)
    dv = np.zeros(v3.shape, dtype=compute)
    if n_items and q_len and k_len:
        mneg = _per_item_slopes(slopes, n_items, compute)
        delta = np.empty((n_items, q_len), dtype=compute)
        sc, ninf = compute.type(scale), compute.type(-np.inf)
        if method == "auto":
            threads = numba.get_num_threads()
            method = "one-pass" if threads == 1 or n_kv >= 2 * threads else "two-pass"
        with launch_guard(), blas_single_thread():
            if method == "one-pass":
                with _threads_for(n_kv):
                    _backward_one_pass_kernel(q3, k3, v3, do3, o3, lse2, mneg, group, causal, sc, q_offset, ninf,
                                              dq, dk, dv, delta)
            else:
                with _threads_for(n_items * -(-q_len // BLOCK_Q)):
                    _backward_dq_kernel(q3, k3, v3, do3, o3, lse2, mneg, group, causal, sc, q_offset, ninf, dq,
                                        delta)
                with _threads_for(n_kv * -(-k_len // BLOCK_K)):
                    _backward_dkdv_kernel(q3, k3, v3, do3, lse2, delta, mneg, group, causal, sc, q_offset, ninf,
                                          dk, dv)
    return (_to_io(dq, io).reshape(q.shape), _to_io(dk, io).reshape(k.shape), _to_io(dv, io).reshape(v.shape))


# --------------------------------------------------------------------------- threads

class _threads_for:
    """Run the next kernel on one Numba thread when it has fewer than two work items per thread.

    A parallel region waits for every thread of the team, even those without work; on a busy
    machine a descheduled thread costs milliseconds, on a quiet one the fork/join still costs
    more than one tiny tile. Numba's thread count is thread-local, and results do not depend on
    it (every output row is computed by one work item in a fixed order).
    """

    def __init__(self, work_items: int):
        self._saved = numba.get_num_threads()
        self._wanted = self._saved if work_items >= 2 * self._saved else 1

    def __enter__(self):
        if self._wanted != self._saved:
            numba.set_num_threads(self._wanted)
        return self

    def __exit__(self, *exc):
        if self._wanted != self._saved:
            numba.set_num_threads(self._saved)
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


@intrinsic
def _half_bits_to_f32(typingctx, x):
    """IEEE half bits (uint16) to float32, exactly (LLVM ``fpext``: ``vcvtph2ps`` with F16C)."""
    def codegen(context, builder, signature, args):
        return builder.fpext(builder.bitcast(args[0], ir.HalfType()), ir.FloatType())
    return types.float32(types.uint16), codegen


@intrinsic
def _f32_to_half_bits(typingctx, x):
    """float32 to IEEE half bits, rounded to nearest, ties to even (LLVM ``fptrunc``)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(builder.fptrunc(args[0], ir.HalfType()), ir.IntType(16))
    return types.uint16(types.float32), codegen


# float16 <-> float32 at the door. NumPy's casts run at ~3 ns per element here (1M elements:
# 3.2 ms one way, 6.7 ms back), which made float16 attention 1.3-1.5x the float32 time at
# T = 2048; these vectorised, threaded loops give the same bits (IEEE conversions, tested
# against NumPy on every half bit pattern).

@njit_kernel()
def _half_to_float(bits, out):
    for i in prange(bits.shape[0]):
        out[i] = _half_bits_to_f32(bits[i])


@njit_kernel()
def _float_to_half(x, bits):
    for i in prange(x.shape[0]):
        bits[i] = _f32_to_half_bits(x[i])


@_helper
def _exp32(x):
    # e^x for float32 x <= ~88 (also -inf and NaN): x = n ln2 + r with |r| <= ln2/2, e^r by
    # its degree-7 Taylor polynomial evaluated in float64 (truncation < 1.2e-8 relative; the
    # reduction in float64 is exact enough that the result is rounded once, to float32), 2^n
    # built from the exponent bits. Max error measured 0.58 ulp on [-86.9, 88.0]; exp(x) = 0
    # for x < -87 (below float32's normal range), NaN in gives NaN out. Every step vectorises
    # on AVX2: n stays a float (np.floor) until the int32 conversion (math.floor returns an
    # int64, and the float -> int64 conversion has no AVX2 instruction: that kept the loops
    # of this kernel scalar, 2.3x slower per element).
    lo = np.float32(-87.0)
    xc = lo if x < lo else x
    xc = np.float32(0.0) if xc != xc else xc  # NaN: keep n finite; r below stays NaN
    nf = np.floor(xc * np.float32(1.4426950408889634) + np.float32(0.5))
    r = np.float64(x) - np.float64(nf) * 0.6931471805599453
    p = 1.0 / 5040.0
    p = p * r + 1.0 / 720.0
    p = p * r + 1.0 / 120.0
    p = p * r + 1.0 / 24.0
    p = p * r + 1.0 / 6.0
    p = p * r + 0.5
    p = p * r + 1.0
    p = p * r + 1.0
    res = np.float32(p) * _bits_to_f32((np.int32(nf) + np.int32(127)) << np.int32(23))
    return np.float32(0.0) if x < lo else res


@njit_kernel(parallel=False, fastmath=False)
def _reduce64(x, nf):
    """``x - nf ln2`` with ln2 in two parts, evaluated as written: compiled without fast-math so
    that LLVM cannot reassociate the two subtractions into one (which loses the low part:
    ~200 ulp at |x| ~ 700). Small enough that LLVM inlines it into the vectorised loops; the
    instructions keep their own (strict) flags there."""
    return (x - nf * 0.6931471803691238) - nf * 1.9082149292705877e-10


@_helper
def _exp64(x):
    # float64 version of _exp32: degree-12 Taylor polynomial (truncation < 6e-17 relative),
    # Cody-Waite reduction with a two-part ln2 (_reduce64); n converted through int32
    # (float64 -> int32 vectorises on AVX2, float64 -> int64 does not). Max error measured
    # 2.0 ulp against mpmath on [-707, 709].
    lo = -708.0
    xc = lo if x < lo else x
    xc = 0.0 if xc != xc else xc
    nf = np.floor(xc * 1.4426950408889634 + 0.5)
    r = _reduce64(x, nf)
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
    res = p * _bits_to_f64((np.int64(np.int32(nf)) + np.int64(1023)) << np.int64(52))
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

    The distance ``q - k`` is a float counter stepped by one per key, not ``ft(base - b)``: the
    int64 -> float conversion has no AVX2 instruction and kept these loops scalar (an exp loop
    of a 64 x 64 tile 10.5 -> 6.3 us). Both are the exact integer (distances are at most 2^24
    in float32, 2^53 in float64: ``check_exact_distances``), so the logits are unchanged. The
    same holds in :func:`_dq_scores` and :func:`_dkdv_scores`.
    """
    bq, bk = s.shape
    ft = s.dtype.type
    zero = ft(0)
    one = ft(1)
    nan = ninf - ninf
    for a in range(bq):
        base = pos0 + a - j0  # query position minus key position, for b = 0
        kept = min(bk, max(0, base + 1)) if causal else bk
        srow = s[a]
        mx = row_max[a]
        nan_seen = False
        dist = ft(base)  # q - k as a float counter (see the docstring)
        if causal:
            for b in range(kept):  # bias -m (q - k), q - k = base - b >= 0
                x = srow[b] * scale + m * dist
                dist -= one
                srow[b] = x
                mx = x if x > mx else mx
                nan_seen |= x != x
        else:
            for b in range(bk):  # bias -m |k - q|
                x = srow[b] * scale + m * abs(dist)
                dist -= one
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
    one = ft(1)
    for a in range(bq):
        base = pos0 + a - j0
        kept = min(bk, max(0, base + 1)) if causal else bk
        lse_i = lse_a[a]
        if lse_i == ninf:  # fully masked row: P = 0
            kept = 0
        d_i = delta_a[a]
        srow = s[a]
        dprow = dp[a]
        dist = ft(base)  # q - k, a float counter (see _fwd_scores)
        if causal:
            for b in range(kept):
                p = _exp(srow[b] * scale + m * dist - lse_i)
                dist -= one
                srow[b] = p * (dprow[b] - d_i)
        else:
            for b in range(kept):
                p = _exp(srow[b] * scale + m * abs(dist) - lse_i)
                dist -= one
                srow[b] = p * (dprow[b] - d_i)
        for b in range(kept, bk):
            srow[b] = 0


@_helper
def _dkdv_scores(st, dpt, pos0, j0, causal, m, scale, ninf, lse_a, delta_a):
    """Transposed tile: ``st`` (K_b Q_a^T) becomes P^T and ``dpt`` (V_b dO_a^T) dS^T."""
    bk, bq = st.shape
    ft = st.dtype.type
    zero = ft(0)
    one = ft(1)
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
            dist = ft(base + first)  # q - k, a float counter (see _fwd_scores)
            for a in range(bq - first):
                lse_i = lse_v[a]
                p = _exp(strow[a] * scale + m * dist - lse_i)
                dist += one
                p = zero if lse_i == ninf else p
                strow[a] = p
                dprow[a] = p * (dprow[a] - delta_v[a])
        else:
            dist = ft(base)
            for a in range(bq):
                lse_i = lse_a[a]
                p = _exp(strow[a] * scale + m * abs(dist) - lse_i)
                dist += one
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


@njit_kernel(parallel=False, noalias=True)  # writes only s / pv, never an input
def _small_qkt(q_a, k_n, j0, s):
    """``s = q_a @ k_n[j0:j0 + bk].T`` for at most :data:`SMALL_Q` query rows, without a BLAS call."""
    bq, bk = s.shape
    d = q_a.shape[1]
    for a in range(bq):
        for b in range(bk):
            t = s.dtype.type(0)
            for c in range(d):
                t += q_a[a, c] * k_n[j0 + b, c]
            s[a, b] = t


@njit_kernel(parallel=False, noalias=True)  # writes only s / pv, never an input
def _small_pv(s, v_n, j0, pv):
    """``pv = s @ v_n[j0:j0 + bk]`` for at most :data:`SMALL_Q` query rows, without a BLAS call.

    Four keys per pass over ``pv``'s row: one key per pass makes every pass wait for the
    previous pass's stores (8.7 -> 6.4 ns a key, one query, d = 64, L2-resident keys)."""
    bq, bk = s.shape
    dv = pv.shape[1]
    quads = bk - bk % 4
    for a in range(bq):
        for c in range(dv):
            pv[a, c] = 0
        for b in range(0, quads, 4):
            p0, p1, p2, p3 = s[a, b], s[a, b + 1], s[a, b + 2], s[a, b + 3]
            r = j0 + b
            for c in range(dv):
                pv[a, c] += (p0 * v_n[r, c] + p1 * v_n[r + 1, c]) + (p2 * v_n[r + 2, c] + p3 * v_n[r + 3, c])
        for b in range(quads, bk):
            p = s[a, b]
            for c in range(dv):
                pv[a, c] += p * v_n[j0 + b, c]


@_helper
def _attend_range(q_a, k_n, v_n, pos0, j_lo, j_hi, causal, m, scale, ninf, acc, row_max, row_sum, alpha, pv,
                  s_buf):
    """Online softmax of query tile ``q_a`` (query ``a`` at position ``pos0 + a``) over keys
    ``j_lo <= j < j_hi``, tile by tile: updates the unnormalised output ``acc`` and the running
    ``row_max``/``row_sum`` in place (FlashAttention-2 forward)."""
    bq = q_a.shape[0]
    for j0 in range(j_lo, j_hi, BLOCK_K):
        bk = min(BLOCK_K, j_hi - j0)
        s = s_buf[: bq * bk].reshape((bq, bk))
        if bq <= SMALL_Q:
            _small_qkt(q_a, k_n, j0, s)
        else:
            np.dot(q_a, k_n[j0:j0 + bk].T, s)
        _fwd_scores(s, pos0, j0, causal, m, scale, ninf, row_max, row_sum, alpha)
        if bq <= SMALL_Q:
            _small_pv(s, v_n, j0, pv)
        else:
            np.dot(s, v_n[j0:j0 + bk], pv)
        _rescale_add(acc, alpha, pv)


@_helper
def _finish_rows(acc, row_max, row_sum, out_rows, lse_rows, ninf):
    """``out = acc / row_sum`` and ``lse = row_max + log(row_sum)`` for the rows with a kept key."""
    for a in range(acc.shape[0]):
        l = row_sum[a]
        if l == 0:  # fully masked row: output 0, lse -inf (already in out/lse)
            continue
        inv = out_rows.dtype.type(1) / l
        for c in range(acc.shape[1]):
            out_rows[a, c] = acc[a, c] * inv
        # A +inf logit (and no NaN): the row is NaN, and lse = +inf makes the backward's
        # P = exp(S - lse) NaN at the +inf logits and 0 elsewhere, like the reference's P.
        lse_rows[a] = row_max[a] if row_max[a] == -ninf else row_max[a] + math.log(l)


@_helper
def _key_end(i1, off, k_len, causal):
    """End of the keys a query tile ending at row ``i1`` sees (its last query at ``i1 - 1 + off``)."""
    return min(k_len, max(0, i1 + off)) if causal else k_len


@njit_kernel()
def _forward_kernel(q, k, v, mneg, group, causal, scale, off, ninf, out, lse):
    n_items, q_len, _ = q.shape
    k_len = k.shape[1]
    d_v = v.shape[2]
    n_qt = (q_len + BLOCK_Q - 1) // BLOCK_Q
    for item in prange(n_items * n_qt):
        n = item // n_qt
        i0 = _zigzag(item % n_qt, n_qt) * BLOCK_Q
        i1 = min(i0 + BLOCK_Q, q_len)
        bq = i1 - i0
        acc = np.zeros((bq, d_v), out.dtype)  # unnormalised output rows
        row_max = np.full(bq, ninf)
        row_sum = np.zeros(bq, out.dtype)
        _attend_range(q[n][i0:i1], k[n // group], v[n // group], i0 + off, 0, _key_end(i1, off, k_len, causal),
                      causal, mneg[n], scale, ninf, acc, row_max, row_sum, np.empty(bq, out.dtype),
                      np.empty((bq, d_v), out.dtype), np.empty(bq * BLOCK_K, out.dtype))
        _finish_rows(acc, row_max, row_sum, out[n][i0:i1], lse[n][i0:i1], ninf)


@njit_kernel()
def _forward_split_kernel(q, k, v, mneg, group, causal, scale, off, ninf, splits, part_acc, part_m, part_l,
                          out, lse, parallel_combine):
    """Flash-decoding: each (head, query tile)'s keys in ``splits`` ranges of whole key tiles,
    one work item per range writing its partial state, then an exact combination per row
    (a parallel loop over the (head, query tile) items if ``parallel_combine``)."""
    n_items, q_len, _ = q.shape
    k_len = k.shape[1]
    d_v = v.shape[2]
    n_qt = (q_len + BLOCK_Q - 1) // BLOCK_Q
    for item in prange(n_items * n_qt * splits):
        r = item % splits
        t = item // splits
        n = t // n_qt
        i0 = (t % n_qt) * BLOCK_Q
        i1 = min(i0 + BLOCK_Q, q_len)
        bq = i1 - i0
        j_end = _key_end(i1, off, k_len, causal)
        tiles = (j_end + BLOCK_K - 1) // BLOCK_K
        j_lo = min(j_end, (tiles * r // splits) * BLOCK_K)
        j_hi = min(j_end, (tiles * (r + 1) // splits) * BLOCK_K)
        # The running state lives in the item's own arrays and is copied out once: the
        # partial arrays of all ranges share cache lines, which per-tile updates from two cores
        # would bounce between them.
        acc = np.zeros((bq, d_v), out.dtype)
        row_max = np.full(bq, ninf)
        row_sum = np.zeros(bq, out.dtype)
        _attend_range(q[n][i0:i1], k[n // group], v[n // group], i0 + off, j_lo, j_hi, causal, mneg[n], scale,
                      ninf, acc, row_max, row_sum, np.empty(bq, out.dtype), np.empty((bq, d_v), out.dtype),
                      np.empty(bq * BLOCK_K, out.dtype))
        part_acc[n, r, i0:i1] = acc
        part_m[n, r, i0:i1] = row_max
        part_l[n, r, i0:i1] = row_sum
    # The exact combination, one (head, query tile) per call. With fewer items than two per
    # thread (what key_splits=None gives) it runs on the calling thread: a second parallel
    # region would wake the sleeping OpenMP threads again for a few microseconds of work.
    n_out = n_items * n_qt
    if parallel_combine:
        for t in prange(n_out):
            _combine_splits(t, n_qt, splits, part_acc, part_m, part_l, out, lse, ninf)
    else:
        for t in range(n_out):
            _combine_splits(t, n_qt, splits, part_acc, part_m, part_l, out, lse, ninf)


@_helper
def _combine_splits(t, n_qt, splits, part_acc, part_m, part_l, out, lse, ninf):
    """Rows of (head, query tile) ``t`` from the partial states of its key ranges: rescaled to
    their common maximum and summed (flash-decoding's combination), then normalised."""
    q_len, d_v = out.shape[1], out.shape[2]
    n = t // n_qt
    i0 = (t % n_qt) * BLOCK_Q
    i1 = min(i0 + BLOCK_Q, q_len)
    bq = i1 - i0
    acc = np.zeros((bq, d_v), out.dtype)
    row_max = np.full(bq, ninf)
    row_sum = np.zeros(bq, out.dtype)
    for a in range(bq):
        mx = ninf
        nan_seen = False
        for r in range(splits):
            m_r = part_m[n, r, i0 + a]
            mx = m_r if m_r > mx else mx
            nan_seen |= m_r != m_r
        if nan_seen:
            mx = ninf - ninf
        row_max[a] = mx
        if mx == ninf:
            continue
        for r in range(splits):
            m_r = part_m[n, r, i0 + a]
            if m_r == ninf:  # a range without kept keys contributes nothing
                continue
            w = _exp(m_r - mx)
            row_sum[a] += w * part_l[n, r, i0 + a]
            for c in range(d_v):
                acc[a, c] += w * part_acc[n, r, i0 + a, c]
    _finish_rows(acc, row_max, row_sum, out[n][i0:i1], lse[n][i0:i1], ninf)


@njit_kernel()
def _backward_dq_kernel(q, k, v, do, o, lse, mneg, group, causal, scale, off, ninf, dq, delta):
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
        k_n, v_n = k[n // group], v[n // group]
        _row_dots(do_a, o[n][i0:i1], delta[n, i0:i1])
        s_buf = np.empty(bq * BLOCK_K, dq.dtype)
        dp_buf = np.empty(bq * BLOCK_K, dq.dtype)
        tmp = np.empty((bq, d), dq.dtype)
        j_end = _key_end(i1, off, k_len, causal)
        for j0 in range(0, j_end, BLOCK_K):
            bk = min(BLOCK_K, j_end - j0)
            s = s_buf[: bq * bk].reshape((bq, bk))
            dp = dp_buf[: bq * bk].reshape((bq, bk))
            k_b = k_n[j0:j0 + bk]
            np.dot(q_a, k_b.T, s)
            np.dot(do_a, v_n[j0:j0 + bk].T, dp)
            _dq_scores(s, dp, i0 + off, j0, causal, mneg[n], scale, ninf, lse[n, i0:i1], delta[n, i0:i1])
            np.dot(s, k_b, tmp)
            _add(dq_a, tmp)
        _scale(dq_a, scale)


@_helper
def _dkdv_tile(q_a, do_a, k_b, v_b, pos0, j0, causal, m, scale, ninf, lse_a, delta_a, st_buf, dpt_buf, tmp_k,
               tmp_v, dk_b, dv_b):
    """One (key tile, query tile) step of the backward: ``dv_b += P^T dO_a``, ``dk_b += dS^T Q_a``
    (unscaled); returns ``dS^T`` (``(bk, bq)``, a view of ``dpt_buf``) for the caller's ``dQ``."""
    bk, bq = k_b.shape[0], q_a.shape[0]
    st = st_buf[: bk * bq].reshape((bk, bq))  # S^T, then P^T
    dpt = dpt_buf[: bk * bq].reshape((bk, bq))  # dP^T, then dS^T
    np.dot(k_b, q_a.T, st)
    np.dot(v_b, do_a.T, dpt)
    _dkdv_scores(st, dpt, pos0, j0, causal, m, scale, ninf, lse_a, delta_a)
    np.dot(st, do_a, tmp_v)
    np.dot(dpt, q_a, tmp_k)
    _add(dv_b, tmp_v)
    _add(dk_b, tmp_k)
    return dpt


@njit_kernel()
def _backward_dkdv_kernel(q, k, v, do, lse, delta, mneg, group, causal, scale, off, ninf, dk, dv):
    q_len, d = q.shape[1], q.shape[2]
    n_kv, k_len, d_v = v.shape
    n_kt = (k_len + BLOCK_K - 1) // BLOCK_K
    for item in prange(n_kv * n_kt):
        h = item // n_kt
        j0 = _zigzag(item % n_kt, n_kt) * BLOCK_K
        bk = min(BLOCK_K, k_len - j0)
        k_b = k[h][j0:j0 + bk]
        v_b = v[h][j0:j0 + bk]
        dk_b = dk[h][j0:j0 + bk]
        dv_b = dv[h][j0:j0 + bk]
        st_buf = np.empty(bk * BLOCK_Q, dk.dtype)
        dpt_buf = np.empty(bk * BLOCK_Q, dk.dtype)
        tmp_k = np.empty((bk, d), dk.dtype)
        tmp_v = np.empty((bk, d_v), dk.dtype)
        i_start = min(q_len, max(0, j0 - off)) if causal else 0  # first query that sees key j0
        for n in range(h * group, (h + 1) * group):  # the query heads of this key/value head
            for i0 in range(i_start, q_len, BLOCK_Q):
                i1 = min(i0 + BLOCK_Q, q_len)
                _dkdv_tile(q[n][i0:i1], do[n][i0:i1], k_b, v_b, i0 + off, j0, causal, mneg[n], scale, ninf,
                           lse[n, i0:i1], delta[n, i0:i1], st_buf, dpt_buf, tmp_k, tmp_v, dk_b, dv_b)
        _scale(dk_b, scale)


@njit_kernel()
def _backward_one_pass_kernel(q, k, v, do, o, lse, mneg, group, causal, scale, off, ninf, dq, dk, dv, delta):
    """One work item per key/value head: every tile product once (five per tile pair), and the
    item owns the ``dq`` rows of its query heads and its ``dk``, ``dv`` rows (no atomics)."""
    q_len, d = q.shape[1], q.shape[2]
    n_kv, k_len, d_v = v.shape
    for h in prange(n_kv):
        for n in range(h * group, (h + 1) * group):
            _row_dots(do[n], o[n], delta[n])
        st_buf = np.empty(BLOCK_K * BLOCK_Q, dk.dtype)
        dpt_buf = np.empty(BLOCK_K * BLOCK_Q, dk.dtype)
        tmp_k = np.empty((BLOCK_K, d), dk.dtype)
        tmp_v = np.empty((BLOCK_K, d_v), dk.dtype)
        tmp_q = np.empty((BLOCK_Q, d), dk.dtype)
        for j0 in range(0, k_len, BLOCK_K):
            bk = min(BLOCK_K, k_len - j0)
            k_b = k[h][j0:j0 + bk]
            dk_b = dk[h][j0:j0 + bk]
            i_start = min(q_len, max(0, j0 - off)) if causal else 0
            for n in range(h * group, (h + 1) * group):
                for i0 in range(i_start, q_len, BLOCK_Q):
                    i1 = min(i0 + BLOCK_Q, q_len)
                    dst = _dkdv_tile(q[n][i0:i1], do[n][i0:i1], k_b, v[h][j0:j0 + bk], i0 + off, j0, causal,
                                     mneg[n], scale, ninf, lse[n, i0:i1], delta[n, i0:i1], st_buf, dpt_buf,
                                     tmp_k[:bk], tmp_v[:bk], dk_b, dv[h][j0:j0 + bk])
                    t_q = tmp_q[: i1 - i0]
                    np.dot(dst.T, k_b, t_q)  # dQ_a += dS K_b
                    _add(dq[n][i0:i1], t_q)
            _scale(dk_b, scale)
        for n in range(h * group, (h + 1) * group):
            _scale(dq[n], scale)
