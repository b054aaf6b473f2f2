r"""Fused ALiBi attention (Numba): tiled, online softmax, no ``(q_len, k_len)`` matrix.

Forward (FlashAttention, Dao et al. 2022, alg. 1, in the FlashAttention-2 loop order of Dao 2023,
alg. 1): for each query tile :math:`Q_a` and key tile :math:`K_b, V_b`

.. math::

    S_{ab} = s\,Q_a K_b^\top + B_{ab}, \qquad
    m' = \max(m, \mathrm{rowmax}\,S_{ab}), \qquad
    \tilde P = e^{S_{ab} - m'}, \\
    \ell' = e^{m - m'}\ell + \mathrm{rowsum}\,\tilde P, \qquad
    O' = e^{m - m'} O + \tilde P V_b,

then :math:`O \leftarrow O / \ell`, :math:`\mathrm{lse} = m + \log \ell`. The bias of a tile is
recomputed from the slope and the positions: ``causal`` :math:`B_{h,i,j} = -m_h (p_i - j)` for
:math:`j \le p_i` (later keys masked, and key tiles wholly after a query tile skipped),
``symmetric`` :math:`-m_h |j - p_i|`, with :math:`p_i = i + \text{query\_offset}` (Press et al.
2022, arXiv:2108.12409; conventions in :mod:`posenc_np.alibi`).

Backward (FlashAttention-2, alg. 2), recomputing :math:`P = e^{S - \mathrm{lse}}` per tile, with
:math:`G = \partial L/\partial O` and :math:`D_i = \sum_c G_{ic} O_{ic}`:

.. math::

    dV_b = \sum_a P_{ab}^\top G_a, \qquad dP_{ab} = G_a V_b^\top, \qquad
    dS_{ab} = P_{ab} \odot (dP_{ab} - D_a), \\
    dQ_a = s \sum_b dS_{ab} K_b, \qquad dK_b = s \sum_a dS_{ab}^\top Q_a.

Parallel scheme (race-free, no atomics; each work item owns the rows it writes): the forward
runs ``prange`` over (batch*head, query tile); with too few items for the threads (decoding) each
item's keys are split into ranges whose partial states :math:`(m_r, \ell_r, O_r)` are combined
exactly (flash-decoding, ``key_splits``). The backward runs *one pass* (one item per key/value
head, five tile products per tile pair) or *two passes* (:math:`dQ` over query tiles, :math:`dK,
dV` over key tiles: seven products, more items). Tiles go in zig-zag order (first, last, second,
...) so that Numba's static split gives every thread equal causal work. Grouped-query heads:
query head ``h`` reads key/value head ``h // group``; the item of a key/value head sums its
group's gradients.

Numerics and speed (``docs/alibi.md``, ``docs/benchmarks.md``): tile products are BLAS ``np.dot``
with BLAS held to one thread (:class:`~posenc_np.kernels._numba.blas_single_thread`: no
oversubscription under ``prange``). The forward forms each tile of scores transposed,
:math:`S_{ab}^\top = K_b Q_a^\top` (the key rows as stored, the query tile transposed once per
work item), so that its online softmax runs along key rows with the queries as vector lanes: the
running maxima and sums are elementwise updates, no horizontal reduction (:func:`_fwd_scores_t`),
and :math:`\tilde P V_b` is BLAS's product with a transposed first operand; it copies no input.
The backward's products with a transpose take C-contiguous transposed tiles: the one-pass
backward transposes each query tile of Q and dO once into tile buffers (it copies no input), the
two-pass backward stores tile-transposed copies of Q, dO, K and V (:func:`_transpose_tiles`).
Small query tiles (decoding) keep the row form, whose row maxima are integer maxima of order keys
(:func:`~posenc_np.kernels._numba.order_key`), so that the score loop vectorises along the keys.
The exponential is the vectorisable polynomial :func:`posenc_np.kernels._numba.exp` (within
0.91-2.0 ulp; ``math.exp`` stays a scalar libm call, 1.33-1.48x slower), and every inner loop avoids float -> int64 conversions (no AVX2 instruction;
they kept the loops scalar). float32 and float64 inputs compute and accumulate in their dtype;
float16 and bfloat16 are converted to float32 once and rounded back once (``lse`` stays float32).
Measured float32 error against float64: <= 7.5e-7 (normalised by ``max(1, max|ref|)``), enforced
at 2e-6 by ``tests/test_kernels_alibi.py``.

Semantics match :func:`posenc_np.alibi.attention`: fully masked rows (``causal`` with
``q_len > k_len``) give output 0, ``lse = -inf``, gradients 0, no NaN; a NaN or ``+inf`` logit at
a kept pair makes its row NaN (``lse`` NaN or ``+inf``, so the backward's ``P`` is NaN where the
reference's is), ``-inf`` logits count as masked. Non-finite inputs at *masked* pairs leak NaN
everywhere in the reference (``0 * nan``) but only within the diagonal tile here, since skipped
tiles are never read. Memory: a few ``BLOCK_Q x BLOCK_K`` tiles per work item besides the outputs,
and in the two-pass backward tile-transposed copies of Q, dO, K and V.
"""

from __future__ import annotations

import contextlib
import functools
import math

import numba
import numpy as np
from llvmlite import ir
from numba import prange, types
from numba.core.extending import intrinsic
from numpy.typing import ArrayLike

from .._checks import (check_bool, check_choice, check_exact_distances, check_grouped_heads, check_int, check_real,
                       check_slopes, require)
from ._numba import blas_single_thread, exp, from_order_key, launch_guard, new_array, njit_kernel, order_key

__all__ = ["BLOCK_K", "BLOCK_Q", "KERNEL_DTYPES", "alibi_attention_backward", "alibi_attention_forward",
           "fused_backward", "fused_forward"]

#: Query and key tile sizes (rows): 64 x 64 float32 tiles of S, P, dP (16 KiB each) stay in L1/L2;
#: 128 measured no faster, and 64 keeps causal skipping fine-grained.
BLOCK_Q = 64
BLOCK_K = 64

#: Forward query tiles of at most this many rows (decoding) form their tile products with loops, not
#: ``np.dot``, and then skip the BLAS thread limit (~50 us a call). Measured against BLAS for every
#: tile (transposed score tiles; causal, d = 64, 1 and 2 threads, 1 and 8 heads, 4096 and 16384
#: keys, 7 alternating rounds): the loops take 0.70-0.90x the time for one query, 0.72-0.95x for
#: 4, 0.75-0.94x for 5 to 7, and 0.99-1.45x for 8 (BLAS ahead but for one tie), 1.09-1.47x for 12,
#: 1.29-2.05x for 16.
SMALL_Q = 7

#: Least query-key products of a flash-decoding key range (``key_splits=None``): a range of a tile
#: of ``r`` queries has at least ``MIN_SPLIT_PRODUCTS / r`` keys (one head, d = 64, 2 threads: one
#: query over 4096 keys gains nothing from splitting, over 16384 keys 1.1-1.4x; 16 queries over
#: 4096 keys 0.89 -> 0.54 ms).
MIN_SPLIT_PRODUCTS = 4096

# njit_kernel's fastmath has no "nnan"/"ninf": the kernels use -inf and let NaN through.
_helper = njit_kernel(parallel=False)


# --------------------------------------------------------------------------- public API

#: Input dtypes, by ``dtype.name``. bfloat16 is ``ml_dtypes.bfloat16`` (``posenc-np[bfloat16]``),
#: cast to float32 by its dtype's own casts (Numba has no bfloat16; the kernel never imports it).
KERNEL_DTYPES = ("float16", "bfloat16", "float32", "float64")
_KERNEL_DTYPE_SET = frozenset(KERNEL_DTYPES)


@functools.lru_cache(maxsize=64)
def _name(dtype: np.dtype) -> str:
    """``dtype.name``, cached (NumPy computes it in Python, ~2 us, and a call asks a dozen times)."""
    return dtype.name


def _dtypes(arrays) -> tuple[np.dtype, np.dtype]:
    """``(compute, io)``: float64 if any input is float64, else float32; outputs in the inputs'
    common dtype (float16 or bfloat16 stay themselves when all inputs share them)."""
    kinds = {_name(a.dtype) for a in arrays}
    compute = np.dtype(np.float64 if "float64" in kinds else np.float32)
    return compute, arrays[0].dtype if len(kinds) == 1 else compute


def _items(a: np.ndarray, compute) -> np.ndarray:
    """``a`` as C-contiguous ``(items, len, width)`` in the compute dtype (one copy at most)."""
    a3 = a.reshape((math.prod(a.shape[:-2]),) + a.shape[-2:])
    if a.dtype == np.float16:  # (NumPy's cast: ~7 ns an element here, this threaded loop ~0.2 ns)
        wide = np.empty(a3.shape, np.float32)
        _half_to_float(np.ascontiguousarray(a3).view(np.uint16).reshape(-1), wide.reshape(-1))
        return wide.astype(compute, copy=False)
    return np.ascontiguousarray(a3, dtype=compute)


def _transposed(a: np.ndarray) -> np.ndarray:
    """Storage for :func:`_transpose_tiles` of ``a`` ``(n, rows, d)``: ``(n, rows * d)``."""
    return np.empty((a.shape[0], a.shape[1] * a.shape[2]), dtype=a.dtype)


def _to_io(a: np.ndarray, io) -> np.ndarray:
    """A compute-dtype result in the inputs' dtype (rounded once)."""
    if io == np.float16:
        bits = np.empty(a.shape, np.uint16)
        _float_to_half(np.ascontiguousarray(a, dtype=np.float32).reshape(-1), bits.reshape(-1))
        return bits.view(np.float16)
    return a.astype(io, copy=False)


def _check_args(q, k, v, slopes, causal, scale, query_offset, others=()) -> None:
    """The checks of both doors: grouped-head shapes, dtypes, slopes, the flags and exact distances."""
    check_grouped_heads(q, k, v)
    arrays = (q, k, v, *others)
    if not {_name(a.dtype) for a in arrays} <= _KERNEL_DTYPE_SET:  # (str(dtype) is slow: formatted only here)
        raise TypeError(f"q/k/v{'/dout/out' if others else ''} must be float16, bfloat16, float32 or float64 arrays, "
                        f"got dtypes {', '.join(str(a.dtype) for a in arrays)}")
    check_slopes(slopes, q.shape[-3])
    check_bool(causal, "causal")
    check_real(scale, "scale", positive=True)
    if query_offset is not None:
        check_int(query_offset, "query_offset")
    offset = k.shape[-2] - q.shape[-2] if query_offset is None else query_offset
    check_exact_distances(q.shape[-2], k.shape[-2], offset, _dtypes(arrays)[0])


def _per_item_slopes(slopes, n_items, dtype):
    """Negated slope of every flattened (batch..., head) item: item ``n`` is head ``n % H``."""
    return np.ascontiguousarray(np.tile(-np.asarray(slopes, np.float64), n_items // len(slopes)), dtype=dtype)


def _key_splits(key_splits, work: int, k_len: int, rows: int) -> int:
    """How many key ranges each (head, query tile) is split into (flash-decoding).

    ``None`` (auto): 1 when the ``work`` (head, query tile) items already give every thread two,
    else enough ranges for about two items per thread, each of at least
    :data:`MIN_SPLIT_PRODUCTS` query-key products for a tile of ``rows`` queries (a smaller
    range costs more in thread wake-up and combining than it saves).
    """
    if key_splits is not None:
        return key_splits
    threads = numba.get_num_threads()
    if threads == 1 or work >= 2 * threads:
        return 1
    return max(1, min(-(-2 * threads // work), k_len * rows // MIN_SPLIT_PRODUCTS))


def alibi_attention_forward(q: ArrayLike, k: ArrayLike, v: ArrayLike, slopes: ArrayLike, *, causal: bool, scale: float,
                            query_offset: int | None = None,
                            key_splits: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    r"""Fused ALiBi attention forward: ``(out, lse)``.

    .. math::

        O = \mathrm{softmax}(s\,QK^\top + B)\,V, \qquad
        \mathrm{lse}_i = \log \sum_{j\ \text{kept}} e^{S_{ij}}

    with the ALiBi bias :math:`B` (module docstring) computed tile by tile.

    Parameters
    ----------
    q, k, v : ndarray
        ``(..., heads, q_len, d)``, ``(..., kv_heads, k_len, d)``, ``(..., kv_heads, k_len, d_v)`` as in
        :func:`posenc_np.alibi.attention`, of :data:`KERNEL_DTYPES`: computed in float64 if any is
        float64, else in float32. Views that are not C-contiguous are copied once.
    slopes : array_like ``(heads,)``
        Finite, non-negative ALiBi slopes :math:`m_h` (:func:`posenc_np.alibi.slopes`).
    causal : bool
        ``causal`` form and causal mask, or ``symmetric`` form without a mask.
    scale : float
        Logit scale :math:`s` (the bias is added after it).
    query_offset : int, optional
        Position of query 0 (key ``j`` at ``j``; causal keeps ``j <= i + query_offset``); default
        ``k_len - q_len`` (bottom-right). Every distance must be exact in the compute dtype
        (2^24 in float32, 2^53 in float64), else ``ValueError``.
    key_splits : int, optional
        Key ranges per (head, query tile), run in parallel and combined exactly (flash-decoding:
        :math:`m = \max_r m_r`, :math:`\ell = \sum_r e^{m_r - m}\ell_r`,
        :math:`O = \sum_r e^{m_r - m} O_r / \ell`). Default: more than 1 only when the items are
        too few for the threads (:data:`MIN_SPLIT_PRODUCTS`).

    Returns
    -------
    out : ndarray ``(..., heads, q_len, d_v)``, in the inputs' dtype
    lse : ndarray ``(..., heads, q_len)``, in the compute dtype
        Log-sum-exp of the kept logits per row (``-inf`` for a fully masked row, whose output is 0),
        for :func:`alibi_attention_backward`.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import alibi
    >>> from posenc_np.kernels import alibi as kernel
    >>> q, k, v = np.random.default_rng(0).standard_normal((3, 1, 2, 3, 4))   # (batch, heads, len, d)
    >>> out, lse = kernel.alibi_attention_forward(q, k, v, alibi.slopes(2), causal=True, scale=0.5)
    >>> out.shape, lse.shape, bool(np.allclose(out, alibi.attention(q, k, v, backend="numpy")[0]))
    ((1, 2, 3, 4), (1, 2, 3), True)
    """
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    _check_args(q, k, v, slopes, causal, scale, query_offset)
    key_splits = None if key_splits is None else check_int(key_splits, "key_splits", minimum=1)
    offset = k.shape[-2] - q.shape[-2] if query_offset is None else int(query_offset)
    return fused_forward(q, k, v, np.asarray(slopes), bool(causal), float(scale), offset, key_splits)


def fused_forward(q: np.ndarray, k: np.ndarray, v: np.ndarray, slopes: np.ndarray, causal: bool, scale: float,
                  query_offset: int, key_splits: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(out, lse)`` of the fused ALiBi attention (see :func:`alibi_attention_forward`).

    Core of :func:`alibi_attention_forward`; arguments are not checked.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.kernels import alibi as kernel
    >>> q, k, v = np.random.default_rng(0).standard_normal((3, 1, 2, 3, 4))
    >>> out, lse = kernel.fused_forward(q, k, v, np.array([0.25, 0.0625]), True, 0.5, 0)   # query_offset 0
    >>> bool(np.allclose(out[..., 0, :], v[..., 0, :]))   # causal: query 0 sees key 0 only, with bias 0
    True
    >>> bool(np.allclose(lse[..., 0], 0.5 * (q[..., 0, :] * k[..., 0, :]).sum(axis=-1)))   # lse = s q0 . k0
    True
    """
    lead = q.shape[:-2]
    q_len, k_len, dv = q.shape[-2], k.shape[-2], v.shape[-1]
    group = q.shape[-3] // k.shape[-3] if k.shape[-3] else 1
    compute, io = _dtypes((q, k, v))
    q3, k3, v3 = (_items(a, compute) for a in (q, k, v))
    n_items = q3.shape[0]
    out = new_array((n_items, q_len, dv), compute, zero=True)  # (on huge pages: kernels._numba)
    lse = np.full((n_items, q_len), -np.inf, dtype=compute)
    if n_items and q_len and k_len:
        mneg = _per_item_slopes(slopes, n_items, compute)
        work = n_items * -(-q_len // BLOCK_Q)
        splits = _key_splits(key_splits, work, k_len, min(q_len, BLOCK_Q))
        sc, ninf = compute.type(scale), compute.type(-np.inf)
        blas = blas_single_thread() if q_len > SMALL_Q else contextlib.nullcontext()
        with launch_guard(), blas, _threads_for(work * splits):
            rows = q_len if splits > 1 else 0  # one key range writes no partial state
            part_acc = np.empty((n_items, splits, rows, dv), dtype=compute)
            part_m = np.empty((n_items, splits, rows), dtype=compute)
            part_l = np.empty((n_items, splits, rows), dtype=compute)
            # decided here: get_num_threads() inside a kernel stops Numba caching it; with one
            # range there is nothing to combine, and no second parallel region is started
            parallel_combine = splits > 1 and work >= 2 * numba.get_num_threads()
            _forward_kernel(q3, k3, v3, mneg, group, causal, sc, query_offset, ninf, splits, part_acc, part_m,
                            part_l, out, lse, parallel_combine)
    return _to_io(out, io).reshape(lead + (q_len, dv)), lse.reshape(lead + (q_len,))


def alibi_attention_backward(dout: ArrayLike, q: ArrayLike, k: ArrayLike, v: ArrayLike, out: ArrayLike, lse: ArrayLike,
                             slopes: ArrayLike, *, causal: bool, scale: float, query_offset: int | None = None,
                             method: str = "auto") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""Gradients ``(dq, dk, dv)`` of :func:`alibi_attention_forward` (FlashAttention-2).

    ``dout`` is :math:`\partial L/\partial O`; ``q, k, v, slopes, causal, scale, query_offset`` as
    passed to the forward, ``out, lse`` as it returned them. Recomputes :math:`P` tile by tile (module
    docstring); grouped-query ``dk``, ``dv`` sum over their group. ``method``: ``"one-pass"`` (an item
    per key/value head, five tile products), ``"two-pass"`` (seven products, an item per tile) or
    ``"auto"`` (one-pass from two key/value heads per thread). Returns gradients shaped like ``q``,
    ``k``, ``v`` in the inputs' dtype.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.kernels import alibi as kernel
    >>> q, k, v, g, d = np.random.default_rng(0).standard_normal((5, 1, 2, 3, 4))
    >>> fwd = lambda q: kernel.alibi_attention_forward(q, k, v, [0.25, 0.0625], causal=True, scale=0.5)
    >>> dq = kernel.alibi_attention_backward(g, q, k, v, *fwd(q), [0.25, 0.0625], causal=True, scale=0.5)[0]
    >>> bool(np.isclose(((fwd(q + 1e-6 * d)[0] - fwd(q - 1e-6 * d)[0]) * g).sum() / 2e-6, (dq * d).sum()))
    True
    """
    q, k, v, dout, out, lse = (np.asarray(a) for a in (q, k, v, dout, out, lse))
    _check_args(q, k, v, slopes, causal, scale, query_offset, (dout, out))
    method = check_choice(method, "method", ("auto", "one-pass", "two-pass"))
    out_shape = q.shape[:-1] + (v.shape[-1],)
    require(dout.shape == out_shape and out.shape == out_shape, f"dout and out must have shape {out_shape}, got "
            f"{dout.shape} and {out.shape}")
    require(lse.shape == q.shape[:-1], f"lse must have shape {q.shape[:-1]}, got {lse.shape}")
    offset = k.shape[-2] - q.shape[-2] if query_offset is None else int(query_offset)
    return fused_backward(dout, q, k, v, out, lse, np.asarray(slopes), bool(causal), float(scale), offset, method)


def fused_backward(dout: np.ndarray, q: np.ndarray, k: np.ndarray, v: np.ndarray, out: np.ndarray, lse: np.ndarray,
                   slopes: np.ndarray, causal: bool, scale: float, query_offset: int,
                   method: str = "auto") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(dq, dk, dv)`` of :func:`fused_forward` (see :func:`alibi_attention_backward`).

    Core of :func:`alibi_attention_backward`; arguments are not checked.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.kernels import alibi as kernel
    >>> q, k, v, g = np.random.default_rng(0).standard_normal((4, 1, 2, 3, 4))
    >>> m = np.array([0.25, 0.0625]); out, lse = kernel.fused_forward(q, k, v, m, True, 0.5, 0)
    >>> dq, dk, dv = kernel.fused_backward(g, q, k, v, out, lse, m, True, 0.5, 0)
    >>> bool(np.allclose(dv.sum(axis=-2), g.sum(axis=-2)))   # dV = P^T G, and each row of P sums to 1
    True
    """
    q_len, k_len = q.shape[-2], k.shape[-2]
    group = q.shape[-3] // k.shape[-3] if k.shape[-3] else 1
    compute, io = _dtypes((q, k, v, dout, out))
    q3, k3, v3, do3, o3 = (_items(a, compute) for a in (q, k, v, dout, out))
    lse2 = np.ascontiguousarray(lse.reshape(q3.shape[:2]), dtype=compute)
    n_items, n_kv = q3.shape[0], k3.shape[0]
    dq, dk, dv = (new_array(a.shape, compute, zero=True) for a in (q3, k3, v3))  # (on huge pages)
    if n_items and q_len and k_len:
        mneg = _per_item_slopes(slopes, n_items, compute)
        delta = np.empty((n_items, q_len), dtype=compute)
        sc, ninf = compute.type(scale), compute.type(-np.inf)
        off = query_offset
        if method == "auto":
            threads = numba.get_num_threads()
            method = "one-pass" if threads == 1 or n_kv >= 2 * threads else "two-pass"
        with launch_guard(), blas_single_thread():
            if method == "one-pass":
                with _threads_for(n_kv):
                    _backward_one_pass_kernel(q3, k3, v3, do3, o3, lse2, mneg, group, causal, sc, off, ninf, dq, dk,
                                              dv, delta)
            else:  # the products with a transpose take stored tiles
                qt, dot, kt, vt = _transposed(q3), _transposed(do3), _transposed(k3), _transposed(v3)
                with _threads_for(n_items * -(-q_len // BLOCK_Q)):
                    _transpose_tiles(q3, qt)
                    _transpose_tiles(do3, dot)
                with _threads_for(n_kv * -(-k_len // BLOCK_K)):
                    _transpose_tiles(k3, kt)
                    _transpose_tiles(v3, vt)
                with _threads_for(n_items * -(-q_len // BLOCK_Q)):
                    _backward_dq_kernel(q3, k3, kt, v3, vt, do3, o3, lse2, mneg, group, causal, sc, off, ninf, dq,
                                        delta)
                with _threads_for(n_kv * -(-k_len // BLOCK_K)):
                    _backward_dkdv_kernel(q3, qt, k3, v3, do3, dot, lse2, delta, mneg, group, causal, sc, off, ninf,
                                          dk, dv)
    return (_to_io(dq, io).reshape(q.shape), _to_io(dk, io).reshape(k.shape), _to_io(dv, io).reshape(v.shape))


# --------------------------------------------------------------------------- threads

class _threads_for:
    """Run the next kernel on one Numba thread when it has fewer than two work items per thread: a
    parallel region waits for every thread, and a descheduled one costs milliseconds. (Numba's thread
    count is thread-local; results do not depend on it.)"""

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
# Compiled on first call per dtype, cached on disk. Scalars of the inner loops (scale, -inf, slopes)
# come in the array dtype so that float32 kernels never widen to float64.

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


# float16 <-> float32 at the door: NumPy's casts (~3 ns an element) made float16 attention 1.3-1.5x
# the float32 time at T = 2048; these threaded loops give the same bits (tested on every pattern).

@njit_kernel()
def _half_to_float(bits, out):
    for i in prange(bits.shape[0]):
        out[i] = _half_bits_to_f32(bits[i])


@njit_kernel()
def _float_to_half(x, bits):
    for i in prange(x.shape[0]):
        bits[i] = _f32_to_half_bits(x[i])


@_helper
def _zigzag(z, count):
    """Tile order 0, count-1, 1, count-2, ...: equal causal work in every contiguous chunk."""
    return z // 2 if z % 2 == 0 else count - 1 - z // 2


# Each kernel is a prange over work items calling BLAS for the tile products and the serial helpers
# below for a tile's elementwise work (inline in the prange body, a causal loop compiled 2.5x slower).

@_helper
def _fwd_scores(s, pos0, j0, causal, m, scale, ninf, row_max, row_sum, alpha):
    """One online-softmax step: ``s`` (Q_a K_b^T; query ``a`` at ``pos0 + a``, key ``b`` at ``j0 + b``)
    becomes P~ in place; updates the running max/sum and writes the rescale factors ``alpha``.

    The distance ``q - k`` is a float counter stepped per key, not ``ft(base - b)``: int64 -> float has
    no AVX2 instruction (a 64 x 64 exp loop 10.5 -> 6.3 us). Both are the exact integer
    (``check_exact_distances``), so the logits are unchanged; likewise in the backward helpers.
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
        key_max = order_key(row_max[a])  # the running max as an order key: the loops vectorise
        nan_seen = row_max[a] != row_max[a]  # (a NaN orders below -inf or above +inf by its sign)
        dist = ft(base)  # q - k as a float counter (see the docstring)
        if causal:
            for b in range(kept):  # bias -m (q - k), q - k = base - b >= 0
                x = srow[b] * scale + m * dist
                dist -= one
                srow[b] = x
                key = order_key(x)
                key_max = key if key > key_max else key_max
                nan_seen |= x != x
        else:
            for b in range(bk):  # bias -m |k - q|
                x = srow[b] * scale + m * abs(dist)
                dist -= one
                srow[b] = x
                key = order_key(x)
                key_max = key if key > key_max else key_max
                nan_seen |= x != x
        # a NaN logit makes the whole row NaN, as in the reference
        mx = nan if nan_seen else from_order_key(key_max)
        alpha[a] = 1
        if mx == ninf:  # nothing kept (or only -inf logits): P row is 0, state unchanged
            for b in range(bk):
                srow[b] = 0
            continue
        al = exp(row_max[a] - mx)
        total = zero
        for b in range(kept):
            p = exp(srow[b] - mx)
            srow[b] = p
            total += p
        for b in range(kept, bk):
            srow[b] = 0
        alpha[a] = al
        row_sum[a] = row_sum[a] * al + total
        row_max[a] = mx


@_helper
def _fwd_scores_t(st, pos0, j0, causal, m, scale, ninf, row_max, row_sum, alpha, ref, nan_seen, apos):
    """:func:`_fwd_scores` on the transposed tile: ``st`` (K_b Q_a^T; key ``b`` at ``j0 + b``, query ``a``
    at ``pos0 + a``) becomes P~^T in place. The maxima, sums and rescale factors of the queries are
    elementwise updates along a key row, so every loop vectorises over the queries with no
    horizontal reduction (a float maximum, no order keys: nothing is reordered), and a masked score
    is ``-inf``, whose exponential is 0. ``ref``, ``nan_seen``: scratch of one entry per query;
    ``apos[a] = a``. The logits are :func:`_fwd_scores`' (the same exact distance as a float, the
    same operations) up to a rounding: the fast-math flags allow fused multiply-adds, and LLVM
    contracts the two loops differently (``tests/test_kernels_alibi.py`` compares the two).
    """
    bk, bq = st.shape
    ft = st.dtype.type
    for a in range(bq):
        ref[a] = row_max[a]
        nan_seen[a] = row_max[a] != row_max[a]
    for b in range(bk):
        base = ft(pos0 - j0 - b)  # q - k = base + a (exact: check_exact_distances)
        strow = st[b]
        if causal:
            for a in range(bq):
                dist = base + apos[a]
                x = strow[a] * scale + m * dist
                x = x if dist >= 0 else ninf  # a later key: masked
                strow[a] = x
                ref[a] = x if x > ref[a] else ref[a]
                nan_seen[a] |= x != x
        else:
            for a in range(bq):
                x = strow[a] * scale + m * abs(base + apos[a])
                strow[a] = x
                ref[a] = x if x > ref[a] else ref[a]
                nan_seen[a] |= x != x
    nan = ninf - ninf
    for a in range(bq):
        mx = nan if nan_seen[a] else ref[a]  # a NaN logit makes the whole row NaN, as in the reference
        # nothing kept yet (or only -inf logits): subtract 0 (e^-inf = 0), state unchanged
        al = ft(1) if mx == ninf else exp(row_max[a] - mx)
        ref[a] = ft(0) if mx == ninf else mx
        alpha[a] = al
        row_sum[a] *= al
        row_max[a] = mx
    for b in range(bk):
        strow = st[b]
        for a in range(bq):
            p = exp(strow[a] - ref[a])
            strow[a] = p
            row_sum[a] += p


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
                p = exp(srow[b] * scale + m * dist - lse_i)
                dist -= one
                srow[b] = p * (dprow[b] - d_i)
        else:
            for b in range(kept):
                p = exp(srow[b] * scale + m * abs(dist) - lse_i)
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
            # (views from index 0: an index not provably >= 0 gets a wrap-around check, 6x slower)
            strow, dprow, lse_v, delta_v = strow[first:], dprow[first:], lse_a[first:], delta_a[first:]
            dist = ft(base + first)  # q - k, a float counter (see _fwd_scores)
            for a in range(bq - first):
                lse_i = lse_v[a]
                p = exp(strow[a] * scale + m * dist - lse_i)
                dist += one
                p = zero if lse_i == ninf else p
                strow[a] = p
                dprow[a] = p * (dprow[a] - delta_v[a])
        else:
            dist = ft(base)
            for a in range(bq):
                lse_i = lse_a[a]
                p = exp(strow[a] * scale + m * abs(dist) - lse_i)
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
    """``pv = s @ v_n[j0:j0 + bk]`` for at most :data:`SMALL_Q` query rows, without BLAS; four keys per
    pass over ``pv``'s row (one a pass waits on the previous stores: 8.7 -> 6.4 ns a key)."""
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
def _attend_range(q_a, k_n, v_n, pos0, j_lo, j_hi, causal, m, scale, ninf, acc, row_max, row_sum):
    """Online softmax of query tile ``q_a`` (query ``a`` at position ``pos0 + a``) over keys
    ``j_lo <= j < j_hi``, tile by tile: updates the unnormalised output ``acc`` and the running
    ``row_max``/``row_sum`` in place (FlashAttention-2 forward).

    A tile of more than :data:`SMALL_Q` queries forms the transposed scores ``S^T = K_b Q_a^T``
    (BLAS, on the key rows as stored and the query tile transposed once here), turns them into
    ``P~^T`` (:func:`_fwd_scores_t`) and multiplies ``P~ V_b`` as ``(P~^T)^T V_b``; one of
    fewer queries (decoding) forms ``S`` with loops and takes the row form (:func:`_fwd_scores`).
    64 x 64 x 64 float32 products, one thread: ``K_b Q_a^T`` 3.7 us with both operands C-contiguous
    (5.6 us with ``Q_a^T`` a view, which BLAS takes as a "T" operand), ``(P~^T)^T V_b`` 3.3 us.
    """
    bq, d = q_a.shape
    dt = acc.dtype
    alpha = np.empty(bq, dt)
    pv = np.empty((bq, acc.shape[1]), dt)
    s_buf = np.empty(bq * BLOCK_K, dt)
    small = bq <= SMALL_Q
    qt_a = np.empty((0 if small else d, bq), dt)  # Q_a^T (the row form needs none: zero rows)
    _transpose_into(q_a, qt_a)
    ref = np.empty(bq, dt)
    nan_seen = np.empty(bq, np.bool_)
    apos = np.arange(bq).astype(dt)
    for j0 in range(j_lo, j_hi, BLOCK_K):
        bk = min(BLOCK_K, j_hi - j0)
        if small:
            s = s_buf[: bq * bk].reshape((bq, bk))
            _small_qkt(q_a, k_n, j0, s)
            _fwd_scores(s, pos0, j0, causal, m, scale, ninf, row_max, row_sum, alpha)
            _small_pv(s, v_n, j0, pv)
        else:
            st = s_buf[: bk * bq].reshape((bk, bq))
            np.dot(k_n[j0:j0 + bk], qt_a, st)
            _fwd_scores_t(st, pos0, j0, causal, m, scale, ninf, row_max, row_sum, alpha, ref, nan_seen, apos)
            np.dot(st.T, v_n[j0:j0 + bk], pv)
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


@_helper
def _transpose_into(x, xt):
    """``xt = x.T`` for C-contiguous ``x`` ``(r, c)`` and ``xt`` ``(c, r)`` (``xt`` of zero rows: nothing)."""
    for c in range(xt.shape[0]):
        for r in range(xt.shape[1]):
            xt[c, r] = x[r, c]


@njit_kernel()
def _transpose_tiles(x, xt):
    """``xt[h, j0 d:(j0 + b) d]`` = tile ``x[h, j0:j0 + b]`` transposed, ``(d, b)`` in C order, for every
    tile of :data:`BLOCK_K` (= :data:`BLOCK_Q`) rows: a product with a tile's transpose (the
    backward's ``K_b Q_a^T``, ``V_b dO_a^T``, ``Q_a K_b^T`` and ``dO_a V_b^T``) is then a plain
    product of two C-contiguous tiles (64 x 64 x 64 float32, one thread: 3.7 us against 5.6 us with
    the transpose as a view, which BLAS takes as a "T" operand)."""
    n, rows, d = x.shape
    n_t = (rows + BLOCK_K - 1) // BLOCK_K
    for item in prange(n * n_t):
        h = item // n_t
        j0 = (item % n_t) * BLOCK_K
        b = min(BLOCK_K, rows - j0)
        _transpose_into(x[h, j0:j0 + b], xt[h, j0 * d:(j0 + b) * d].reshape((d, b)))


@_helper
def _tile(xt_n, i0, i1, d):
    """The stored transposed tile of rows ``i0:i1`` (``i0`` on the tile grid) of one head, ``(d, i1 - i0)``."""
    return xt_n[i0 * d:i1 * d].reshape((d, i1 - i0))


@njit_kernel()
def _forward_kernel(q, k, v, mneg, group, causal, scale, off, ninf, splits, part_acc, part_m, part_l, out, lse,
                    parallel_combine):
    """Every (head, query tile) item, query tiles in :func:`_zigzag` order, its keys in ``splits``
    ranges of whole key tiles, one work item per range. One range: the item writes its rows.
    More (flash-decoding): each range writes its partial state, then an exact combination per row
    (a parallel loop over the (head, query tile) items if ``parallel_combine``).

    One kernel for both: against a second kernel for one range, the same bits and the same speed
    (one process, 21 alternating rounds, 8 shapes from T = 64 to decoding over 65536 keys:
    0.97-1.10x, within the noise), and the first forward calls of a process with an empty cache
    compile in 27 s instead of 41 s (float32 and float64, one and several ranges)."""
    n_items, q_len, _ = q.shape
    k_len = k.shape[1]
    d_v = v.shape[2]
    n_qt = (q_len + BLOCK_Q - 1) // BLOCK_Q
    for item in prange(n_items * n_qt * splits):
        r = item % splits
        t = item // splits
        n = t // n_qt
        i0 = _zigzag(t % n_qt, n_qt) * BLOCK_Q
        i1 = min(i0 + BLOCK_Q, q_len)
        bq = i1 - i0
        j_end = _key_end(i1, off, k_len, causal)
        tiles = (j_end + BLOCK_K - 1) // BLOCK_K
        j_lo = min(j_end, (tiles * r // splits) * BLOCK_K)
        j_hi = min(j_end, (tiles * (r + 1) // splits) * BLOCK_K)
        # the running state is the item's own, copied out once (the partial arrays share cache lines)
        acc = np.zeros((bq, d_v), out.dtype)  # unnormalised output rows
        row_max = np.full(bq, ninf)
        row_sum = np.zeros(bq, out.dtype)
        _attend_range(q[n][i0:i1], k[n // group], v[n // group], i0 + off, j_lo, j_hi, causal, mneg[n], scale, ninf,
                      acc, row_max, row_sum)
        if splits == 1:
            _finish_rows(acc, row_max, row_sum, out[n][i0:i1], lse[n][i0:i1], ninf)
        else:
            part_acc[n, r, i0:i1] = acc
            part_m[n, r, i0:i1] = row_max
            part_l[n, r, i0:i1] = row_sum
    # the exact combination per (head, query tile); serial unless every thread gets two items
    n_out = n_items * n_qt if splits > 1 else 0
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
            w = exp(m_r - mx)
            row_sum[a] += w * part_l[n, r, i0 + a]
            for c in range(d_v):
                acc[a, c] += w * part_acc[n, r, i0 + a, c]
    _finish_rows(acc, row_max, row_sum, out[n][i0:i1], lse[n][i0:i1], ninf)


@njit_kernel()
def _backward_dq_kernel(q, k, kt, v, vt, do, o, lse, mneg, group, causal, scale, off, ninf, dq, delta):
    n_items, q_len, d = q.shape
    k_len, d_v = k.shape[1], v.shape[2]
    n_qt = (q_len + BLOCK_Q - 1) // BLOCK_Q
    for item in prange(n_items * n_qt):
        n = item // n_qt
        i0 = _zigzag(item % n_qt, n_qt) * BLOCK_Q
        i1 = min(i0 + BLOCK_Q, q_len)
        bq = i1 - i0
        q_a = q[n][i0:i1]
        do_a = do[n][i0:i1]
        dq_a = dq[n][i0:i1]
        h = n // group
        _row_dots(do_a, o[n][i0:i1], delta[n, i0:i1])
        s_buf = np.empty(bq * BLOCK_K, dq.dtype)
        dp_buf = np.empty(bq * BLOCK_K, dq.dtype)
        tmp = np.empty((bq, d), dq.dtype)
        j_end = _key_end(i1, off, k_len, causal)
        for j0 in range(0, j_end, BLOCK_K):
            j1 = min(j0 + BLOCK_K, k_len)  # whole stored tiles (keys past j_end are masked)
            bk = j1 - j0
            s = s_buf[: bq * bk].reshape((bq, bk))
            dp = dp_buf[: bq * bk].reshape((bq, bk))
            np.dot(q_a, _tile(kt[h], j0, j1, d), s)
            np.dot(do_a, _tile(vt[h], j0, j1, d_v), dp)
            _dq_scores(s, dp, i0 + off, j0, causal, mneg[n], scale, ninf, lse[n, i0:i1], delta[n, i0:i1])
            np.dot(s, k[h][j0:j1], tmp)
            _add(dq_a, tmp)
        _scale(dq_a, scale)


@_helper
def _dkdv_tile(q_a, qt_a, do_a, dot_a, k_b, v_b, pos0, j0, causal, m, scale, ninf, lse_a, delta_a, st_buf, dpt_buf,
               tmp_k, tmp_v, dk_b, dv_b):
    """One (key tile, query tile) step of the backward: ``dv_b += P^T dO_a``, ``dk_b += dS^T Q_a``
    (unscaled); returns ``dS^T`` (``(bk, bq)``, a view of ``dpt_buf``) for the caller's ``dQ``.
    ``qt_a``, ``dot_a``: the query tile's stored transposes (:func:`_transpose_tiles`)."""
    bk, bq = k_b.shape[0], q_a.shape[0]
    st = st_buf[: bk * bq].reshape((bk, bq))  # S^T, then P^T
    dpt = dpt_buf[: bk * bq].reshape((bk, bq))  # dP^T, then dS^T
    np.dot(k_b, qt_a, st)
    np.dot(v_b, dot_a, dpt)
    _dkdv_scores(st, dpt, pos0, j0, causal, m, scale, ninf, lse_a, delta_a)
    np.dot(st, do_a, tmp_v)
    np.dot(dpt, q_a, tmp_k)
    _add(dv_b, tmp_v)
    _add(dk_b, tmp_k)
    return dpt


@_helper
def _first_query_tile(j0, off, q_len, causal):
    """Start, on the tile grid, of the query tiles that see key ``j0`` (causal: query ``i`` sees it
    from ``i + off >= j0``; the rows of that tile before it are masked in the score loop)."""
    i_start = max(0, j0 - off) if causal else 0
    return q_len if i_start >= q_len else i_start - i_start % BLOCK_Q


@njit_kernel()
def _backward_dkdv_kernel(q, qt, k, v, do, dot, lse, delta, mneg, group, causal, scale, off, ninf, dk, dv):
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
        for n in range(h * group, (h + 1) * group):  # the query heads of this key/value head
            for i0 in range(_first_query_tile(j0, off, q_len, causal), q_len, BLOCK_Q):
                i1 = min(i0 + BLOCK_Q, q_len)
                _dkdv_tile(q[n][i0:i1], _tile(qt[n], i0, i1, d), do[n][i0:i1], _tile(dot[n], i0, i1, d_v), k_b, v_b,
                           i0 + off, j0, causal, mneg[n], scale, ninf, lse[n, i0:i1], delta[n, i0:i1], st_buf,
                           dpt_buf, tmp_k, tmp_v, dk_b, dv_b)
        _scale(dk_b, scale)


@njit_kernel()
def _backward_one_pass_kernel(q, k, v, do, o, lse, mneg, group, causal, scale, off, ninf, dq, dk, dv, delta):
    """One work item per key/value head: every tile product once (five per tile pair), and the
    item owns the ``dq`` rows of its query heads and its ``dk``, ``dv`` rows (no atomics). Query
    tiles outside, key tiles inside: each query tile and its output-gradient tile are transposed
    once, into tile buffers, for the products that take them transposed (no copy of ``q`` or
    ``dout``). A ``dq`` row sums its terms over the key tiles in ascending order, a ``dk`` or ``dv``
    row over its query heads and their query tiles in ascending order."""
    q_len, d = q.shape[1], q.shape[2]
    n_kv, k_len, d_v = v.shape
    for h in prange(n_kv):
        for n in range(h * group, (h + 1) * group):
            _row_dots(do[n], o[n], delta[n])
        st_buf = np.empty(BLOCK_K * BLOCK_Q, dk.dtype)
        dpt_buf = np.empty(BLOCK_K * BLOCK_Q, dk.dtype)
        qt_buf = np.empty(d * BLOCK_Q, dk.dtype)
        dot_buf = np.empty(d_v * BLOCK_Q, dk.dtype)
        tmp_k = np.empty((BLOCK_K, d), dk.dtype)
        tmp_v = np.empty((BLOCK_K, d_v), dk.dtype)
        tmp_q = np.empty((BLOCK_Q, d), dk.dtype)
        for n in range(h * group, (h + 1) * group):
            for i0 in range(0, q_len, BLOCK_Q):
                i1 = min(i0 + BLOCK_Q, q_len)
                bq = i1 - i0
                q_a, do_a, dq_a = q[n][i0:i1], do[n][i0:i1], dq[n][i0:i1]
                qt_a = qt_buf[: d * bq].reshape((d, bq))
                dot_a = dot_buf[: d_v * bq].reshape((d_v, bq))
                _transpose_into(q_a, qt_a)
                _transpose_into(do_a, dot_a)
                t_q = tmp_q[:bq]
                for j0 in range(0, _key_end(i1, off, k_len, causal), BLOCK_K):
                    j1 = min(j0 + BLOCK_K, k_len)  # whole tiles (keys past the causal end are masked)
                    k_b = k[h][j0:j1]
                    dst = _dkdv_tile(q_a, qt_a, do_a, dot_a, k_b, v[h][j0:j1], i0 + off, j0, causal, mneg[n], scale,
                                     ninf, lse[n, i0:i1], delta[n, i0:i1], st_buf, dpt_buf, tmp_k[:j1 - j0],
                                     tmp_v[:j1 - j0], dk[h][j0:j1], dv[h][j0:j1])
                    np.dot(dst.T, k_b, t_q)  # dQ_a += dS K_b
                    _add(dq_a, t_q)
                _scale(dq_a, scale)
        _scale(dk[h], scale)
