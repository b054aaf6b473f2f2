r"""Numba kernel for the RoPE rotation (forward and backward), an optimisation of
:func:`posenc_np.rope.apply` / :func:`posenc_np.rope.apply_backward`.

Each channel pair :math:`(a, b)` of ``x`` (:math:`(i, i + d/2)` for ``half``, :math:`(2i, 2i+1)`
for ``interleaved``) becomes :math:`(a\cos t - b\sin t,\ a\sin t + b\cos t)`; channels past the
rotary dim pass through; the backward (``inverse=True``) uses :math:`-\sin t`. The arithmetic is
the reference's, operation for operation, in ``x``'s dtype; ``contract`` (FMA) is left out of the
fast-math flags so that results are bit-identical to the NumPy reference (up to the sign of zero
results, ``nsz``). Output channel ``j`` is computed with table channel ``j`` (Hugging Face's
``x * cos + rotate(x) * sin``, elementwise); in a valid layout table both channels of a pair hold
the same value, and then this is the reference's per-pair result bit for bit.
:func:`rope_apply` checks only the tables' shapes (:func:`posenc_np.rope.apply` checks their
values); :func:`rotate_tables` is the unchecked entry :func:`posenc_np.rope.rotate` calls.

How the work is laid out (no copy of ``x`` for any strides)
-----------------------------------------------------------
Two paths. When ``x``, ``out`` and the tables are all C-contiguous and the tables vary along one
run of ``x``'s leading axes (``(T, d)`` tables for ``(B, H, T, D)``, ``(T, 1, d)`` for
``(B, T, H, D)``: the common case), the *memory-order path* rotates row ``r`` of the flat
``(rows, D)`` view with table row ``(r // rep) % table_rows``. The table rows repeat every
``table_rows * rep`` rows (every head of ``(B, H, T, D)``), and each work item rotates a block of
rows in up to eight such periods at once (eight heads), so that each table row is read once for
eight rows of ``x``. On more than one thread the loop prefetches the rows it will reach a few rows
later (a software prefetch: the rotation's table loads and arithmetic leave the hardware
prefetchers behind a fast L3; the serial copies that small calls run do not). ``prange`` runs over
the items: each thread streams one contiguous range of ``x`` and ``out``, and first-touches its own
pages of a new ``out``. It needs no plan (``docs/benchmarks.md``, "Kernel mechanisms", shows what
it buys on large calls over the planned path).

Any other strides take the *planned path*. ``x``'s leading axes split into *table axes* (where
``cos``/``sin`` vary) and *broadcast axes* (where they repeat). The Python wrapper builds the
element offset of every row along each group from each operand's own strides (negative, zero,
transposed: any; 8 bytes per row per operand) and hands the kernel flat 1-D views. The group with
the smaller ``x`` stride is walked innermost, so ``(B, H, T, D)`` with ``(T, d)`` tables streams
each head's rows in memory order, and ``(B, T, H, D)`` with ``(T, 1, d)`` tables each position's
heads with one table row. ``prange`` runs over blocks of rows whose table rows fit 256 KiB
(L2-resident). Unit-stride channels take a vectorised loop, any other channel stride a scalar loop.

What copies: ``x`` with a non-native byte order, misaligned data or strides that are not a
multiple of its item size; ``cos``/``sin`` of another dtype than ``x`` (cast, as the reference
does) or whose channel axis is not unit-stride; an input that partially overlaps ``out`` (copied
first, like NumPy ufuncs); a misaligned or byte-swapped ``out`` (computed into a temporary).
``out=x`` works in place without a copy. Small calls (under ``_ELEMENTS_PER_THREAD`` elements
per thread) run on one thread.
"""

from __future__ import annotations

import contextlib
import functools
import math
import types

import numba
import numpy as np
from numba import uint64
from numpy.typing import ArrayLike

from .._checks import ROPE_LAYOUTS as LAYOUTS
from .._checks import check_choice, check_out, check_rope_tables
from .._checks import shares_memory as _overlaps
from ._numba import FASTMATH, launch_guard, njit_kernel, prefetch_lines

__all__ = ["rope_apply", "rotate_tables"]

# RoPE needs no contraction: without ``contract`` each product and sum is rounded exactly as
# the NumPy reference rounds it, so the table path matches it bit for bit.
_FASTMATH = set(FASTMATH - {"contract"})

# Calls below this many elements per thread use fewer threads: one thread rotates 2^17
# float32 elements in ~60 us, a parallel launch costs a few microseconds on an idle machine,
# and on a busy one (other processes on both cores) every 2-thread launch was measured to
# stall for ~7.5 ms waiting for the worker to be scheduled (GNU OpenMP layer), so small
# calls are kept on the calling thread.
_ELEMENTS_PER_THREAD = 1 << 17


# --------------------------------------------------------------------------- kernel
#
# The memory-order path is one kernel, _rows_kernel, specialised in place or not (xb is None or not):
# a prange over blocks of rows, _rotate_row inlined once. The planned path has three layers, each
# compiled once per dtype:
#   _rope_kernel   prange over the work items (blocks of rows) of x; holds only a call, which
#                  keeps Numba's parfor passes cheap (compile 8.2 -> 5.7 s CPU per dtype, measured)
#   _rotate_block  one work item (a block of outer x inner rows): calls _walk
#   _walk          two plain nested loops over the block's rows. It is specialised in place
#                  (xb is None) or not, so that each compiled loop nest inlines _rotate_row
#                  exactly once, and its loop order is fixed (the planner decides which axes
#                  are outer). Measured on one core: two inlined copies in one loop nest, or a
#                  loop order chosen at run time, made LLVM give up vectorising (1.5-6x
#                  slower); a call per row costs more than the row.
#
# The rotation is described by the flat buffers (x, out) and two int64 offset arrays, ``A`` for
# the outer rows and ``I`` for the inner rows, each with three lines: x, out and table row
# offsets (the element offset of row (a, b) is ``A[k, a] + I[k, b]``; origins are folded into
# ``A``; cos and sin are laid out alike, so one table offset serves both), and ``meta``: x's and
# out's channel strides, tables_inner, a_block, b_block, in_place. The loops that touch the arrays
# are compiled ``noalias`` (see ``njit_kernel``): ``_run`` guarantees that no array a kernel
# writes shares memory with another array argument (in place, ``x`` is not passed at all).

_M_XSTEP, _M_OSTEP, _M_TINNER, _M_ABLOCK, _M_BBLOCK, _M_INPLACE = range(6)


@njit_kernel(parallel=False, fastmath=_FASTMATH, inline="always")
def _rotate_row(src, s0, s_step, dst, d0, d_step, ctab, c0, stab, t0, n_pairs, width, interleaved, sign,
                in_place):
    """Rotate one row: ``src[s0 + j*s_step]`` -> ``dst[d0 + j*d_step]``, j < width.

    ``ctab[c0 + j]``, ``stab[t0 + j]`` is a table row with unit channel stride. Output channel ``j``
    uses table channel ``j`` (see the module docstring). Reading
    only the first channel of each pair is slower: for ``interleaved`` the gap stops LLVM
    vectorising (5x), for ``half`` the half-rows defeat the prefetcher (measured ~25 %).
    ``sign`` is +1 (forward) or -1 (backward: ``s * -1`` is exactly ``-s``). ``in_place``:
    ``src`` is ``dst`` with the same offsets, and both members of a pair are loaded before
    either is stored; otherwise channels past ``2 n_pairs`` are copied. All offsets are >= 0.

    Out of place, the ``half`` layout writes the two half-rows in two loops: one loop storing
    to both halves at once ran at 12 GB/s against 18 GB/s for two loops on a 2-core Xeon with
    AVX-512 (512 MiB array, out-of-place, a minimal kernel of each form; interleaved 20 GB/s).
    In place the two loops would overwrite inputs of the second, and the one loop is as fast.
    """
    if s_step == 1 and d_step == 1:
        # Unit-stride channels. Indices are unsigned so that Numba emits no negative-index
        # wraparound (which hides the consecutive accesses from LLVM's vectoriser). Keep
        # every operand uint64: uint64 op int64 is float64 in Numba.
        one = uint64(1)
        n = uint64(n_pairs)
        xs, ys, cs, ss = uint64(s0), uint64(d0), uint64(c0), uint64(t0)
        if interleaved:
            for k in range(n_pairs):  # pair (2i, 2i+1)
                i = uint64(k)
                j = i + i
                c, c1 = ctab[cs + j], ctab[cs + j + one]
                s, s1 = stab[ss + j] * sign, stab[ss + j + one] * sign
                a = src[xs + j]
                b = src[xs + j + one]
                dst[ys + j] = a * c - b * s
                dst[ys + j + one] = a * s1 + b * c1
        elif in_place:
            for k in range(n_pairs):  # pair (i, i + d/2)
                i = uint64(k)
                c, c1 = ctab[cs + i], ctab[cs + i + n]
                s, s1 = stab[ss + i] * sign, stab[ss + i + n] * sign
                a = src[xs + i]
                b = src[xs + i + n]
                dst[ys + i] = a * c - b * s
                dst[ys + i + n] = a * s1 + b * c1
        else:  # one half-row per loop (see above)
            for k in range(n_pairs):
                i = uint64(k)
                dst[ys + i] = src[xs + i] * ctab[cs + i] - src[xs + i + n] * (stab[ss + i] * sign)
            for k in range(n_pairs):
                i = uint64(k)
                dst[ys + i + n] = src[xs + i] * (stab[ss + i + n] * sign) + src[xs + i + n] * ctab[cs + i + n]
        if not in_place:
            for k in range(2 * n_pairs, width):
                j = uint64(k)
                dst[ys + j] = src[xs + j]
    else:
        _rotate_row_strided(src, s0, s_step, dst, d0, d_step, ctab, c0, stab, t0, n_pairs, width, interleaved,
                            sign, not in_place)


@njit_kernel(parallel=False, fastmath=_FASTMATH)
def _rotate_row_strided(src, s0, s_step, dst, d0, d_step, ctab, c0, stab, t0, n_pairs, width, interleaved,
                        sign, copy_tail):
    """:func:`_rotate_row` for any channel stride (negative, transposed, sliced): plain signed
    indices, not vectorised, called rather than inlined so that the unit-stride loop nests
    stay small and quick to compile."""
    step = 2 if interleaved else 1
    other = 1 if interleaved else n_pairs
    for i in range(n_pairs):
        ja = i * step
        jb = ja + other
        c, c1 = ctab[c0 + ja], ctab[c0 + jb]
        s, s1 = stab[t0 + ja] * sign, stab[t0 + jb] * sign
        a = src[s0 + ja * s_step]
        b = src[s0 + jb * s_step]
        dst[d0 + ja * d_step] = a * c - b * s
        dst[d0 + jb * d_step] = a * s1 + b * c1
    if copy_tail:
        for j in range(2 * n_pairs, width):
            dst[d0 + j * d_step] = src[s0 + j * s_step]


@njit_kernel(parallel=False, fastmath=_FASTMATH, noalias=True)
def _walk(xb, ob, A, I, x_step, o_step, ctab, stab, a_lo, a_hi, b_lo, b_hi, n_pairs, width, interleaved, sign):
    """Rotate rows ``(a, b)`` for ``a_lo <= a < a_hi`` (outer) and ``b_lo <= b < b_hi`` (inner).

    Row ``(a, b)`` of x starts at ``A[0, a] + I[0, b]``, of out at ``A[1, a] + I[1, b]``, of both
    tables at ``A[2, a] + I[2, b]`` (one of the two is all zeros: the tables vary along the outer
    or along the inner axes).
    ``xb is None``: in place (``out`` is ``x``); resolved at compile time.
    """
    for a in range(a_lo, a_hi):
        x_a = A[0, a]
        y_a = A[1, a]
        t_a = A[2, a]
        for b in range(b_lo, b_hi):
            y_row = y_a + I[1, b]
            t_row = t_a + I[2, b]
            if xb is None:
                _rotate_row(ob, y_row, o_step, ob, y_row, o_step, ctab, t_row, stab, t_row,
                            n_pairs, width, interleaved, sign, True)
            else:
                _rotate_row(xb, x_a + I[0, b], x_step, ob, y_row, o_step, ctab, t_row, stab, t_row,
                            n_pairs, width, interleaved, sign, False)


@njit_kernel(parallel=False, fastmath=_FASTMATH, noalias=True)
def _rotate_block(item, xb, ob, A, I, meta, cb, sb, n_pairs, width, interleaved, inverse):
    """Rotate work item ``item`` of one operand: ``a_block`` outer x ``b_block`` inner rows."""
    a_block, b_block = meta[_M_ABLOCK], meta[_M_BBLOCK]
    b_items = (I.shape[1] + b_block - 1) // b_block
    ai = item // b_items
    bi = item - ai * b_items
    a_lo = ai * a_block
    a_hi = min(A.shape[1], a_lo + a_block)
    b_lo = bi * b_block
    b_hi = min(I.shape[1], b_lo + b_block)
    one = ob.dtype.type(1)
    sign = -one if inverse else one  # backward: rotate by -t
    if meta[_M_INPLACE]:
        _walk(None, ob, A, I, meta[_M_XSTEP], meta[_M_OSTEP], cb, sb, a_lo, a_hi, b_lo, b_hi, n_pairs, width,
              interleaved, sign)
    else:
        _walk(xb, ob, A, I, meta[_M_XSTEP], meta[_M_OSTEP], cb, sb, a_lo, a_hi, b_lo, b_hi, n_pairs, width,
              interleaved, sign)


def _rope_kernel(xb, ob, A, I, meta, n_items, cb, sb, n_pairs, width, interleaved, inverse):
    """Rotate every row of one operand: ``prange`` over its ``n_items`` work items (see
    :func:`_rotate_block`)."""
    for item in numba.prange(n_items):
        # int64(): the prange index may be typed uint64, which would compile the block twice
        _rotate_block(numba.int64(item), xb, ob, A, I, meta, cb, sb, n_pairs, width, interleaved, inverse)


def _rows_kernel(xb, ob, cb, sb, n_rows, table_rows, rep, n_pairs, width, interleaved, inverse):
    """Rotate the ``n_rows`` rows of a C-contiguous ``x`` (``width`` channels a row) into ``ob`` in
    memory order; ``xb`` None: in place (``ob`` is ``x``; resolved at compile time).

    Row ``r`` takes table row ``(r // rep) % table_rows`` of C-contiguous tables, so the table rows
    repeat with a *period* of ``P = table_rows * rep`` rows (``T`` rows of ``(B, H, T, D)`` with
    ``(T, d)`` tables): view ``x`` as ``(n_rows / P, P)`` rows. A work item takes ``_ROWS_PER_ITEM``
    consecutive rows of a period (or all of a shorter one) and rotates them in ``G`` consecutive
    periods at once, ``G`` = ``_PERIODS_PER_ITEM`` or as many as make ``_ROWS_PER_ITEM`` rows: each
    table row is read once for ``G`` rows of ``x`` (from L1 after the first), while ``x`` and ``out``
    are read and written in ``G`` sequential streams, each row prefetched ``_PREFETCH_ROWS`` rows
    ahead (``x`` to read, ``out`` to write; none when the constant is 0, in the serial copy,
    :func:`_parallel_and_serial`). Items are ordered so that each thread's range of ``x`` and ``out``
    is contiguous (it first-touches its own pages of a new ``out``); an item divides once for its
    first table row and then counts (two integer divisions per row cost more than a short row: 3.4x
    the time at D = 16, measured).
    """
    one = ob.dtype.type(1)
    sign = -one if inverse else one
    d = 2 * n_pairs
    period = table_rows * rep
    n_periods = n_rows // period
    block = min(period, _ROWS_PER_ITEM)  # rows of one period in an item
    group = min(n_periods, max(_PERIODS_PER_ITEM, (_ROWS_PER_ITEM + period - 1) // period))  # periods
    blocks = (period + block - 1) // block
    step, end = _PREFETCH_ROWS * width, n_rows * width
    for item in numba.prange(((n_periods + group - 1) // group) * blocks):
        g = numba.int64(item) // blocks
        lo = (numba.int64(item) - g * blocks) * block
        p_lo = g * group
        p_hi = min(n_periods, p_lo + group)
        t = lo // rep  # rows lo.. of the period: repeat j of table row t
        j = lo - t * rep
        for r in range(lo, min(period, lo + block)):
            t_row = t * d
            for p in range(p_lo, p_hi):
                row = (p * period + r) * width
                if _PREFETCH_ROWS and row + step < end:  # (the row this stream reaches later, or the next item's)
                    if xb is not None:
                        prefetch_lines(xb, row + step, width, False)
                    prefetch_lines(ob, row + step, width, True)
                if xb is None:
                    _rotate_row(ob, row, 1, ob, row, 1, cb, t_row, sb, t_row, n_pairs, width, interleaved, sign, True)
                else:
                    _rotate_row(xb, row, 1, ob, row, 1, cb, t_row, sb, t_row, n_pairs, width, interleaved, sign,
                                False)
            j += 1
            if j == rep:
                j = 0
                t += 1


def _parallel_and_serial(kernel):
    """``kernel`` compiled twice: with its ``prange`` spread over Numba's threads, and serial (small
    calls run on the calling thread: no thread wake-up and no change of Numba's thread count,
    which costs tens of microseconds per call). The serial copy is compiled ``noalias`` (``_run``
    guarantees it, see the comment above ``_rotate_row``): at L2-resident sizes the memory-order
    path then runs 1.2-2.6x faster in place and up to 1.4x out of place (one thread, float32,
    (1, 4, 128, 128), (8, 4, 128, 16) and (1, 2, 256, 64), measured). The serial copy does not
    prefetch (``_PREFETCH_ROWS`` is 0 for it: its calls are cache-resident, and the prefetching rows
    cost 14 of the 66 us of an out-of-place (1, 4, 128, 128) float32 call). One body; each copy has
    its own name, so its own entry in Numba's cache."""
    compiled = []
    for parallel, suffix in ((True, ""), (False, "_serial")):
        scope = kernel.__globals__ if parallel else dict(kernel.__globals__, _PREFETCH_ROWS=0)
        copy = types.FunctionType(kernel.__code__, scope, kernel.__name__ + suffix)
        copy.__qualname__, copy.__doc__ = copy.__name__, kernel.__doc__
        compiled.append(njit_kernel(parallel=parallel, fastmath=_FASTMATH, noalias=not parallel)(copy))
    return tuple(compiled)


# A work item of the memory-order path: 64 rows of each of up to 8 periods (64 rows of 128 float32
# channels: 32 KiB of x a period). Measured on the 2-core Xeon of docs/benchmarks.md (480 MiB L3;
# float32, 2 threads, one process, interleaved rounds):
#   in place, against 2 periods an item, no prefetch, % of the in-place scale roofline:
#   (4, 32, 2048, 128) half 68.5 -> 82.2 %, interleaved 54.6 -> 73.9 %; (4, 32, 4096, 128) 65.4 ->
#   81.7 % and 59.1 -> 83.6 %, with 4 periods in between;
#   out of place, against 1 period an item, both prefetching (ms): (4, 8, 1024, 128) half 0.93 ->
#   0.79, interleaved 1.03 -> 0.90; (4, 16, 2048, 128) 4.92 -> 3.64, 4.99 -> 3.73; (1, 32, 4096,
#   128) 5.16 -> 3.74, 4.92 -> 3.83 (4 periods measured within 5 % of 8).
# On the 2-core AMD EPYC (32 MiB L3, no prefetch then) 2, 4 and 8 periods measured the same in place
# within the noise (81.7-86.5 / 81.8-88.4 / 77.7-82.7 %), and 2 periods ran slower out of place than
# one with caches swept ((524288, 128) rows, (4096, 128) tables: 25.3 -> 20.2 GB/s half, 24.8 ->
# 22.9 GB/s interleaved).
#
# The parallel memory-order kernel prefetches the row _PREFETCH_ROWS rows ahead (Xeon: 4 to 8 rows
# within the noise of each other at 256 and 512 bytes a row, 6 the best or within a point of it in
# place).
_ROWS_PER_ITEM = 64
_PERIODS_PER_ITEM = 8
_PREFETCH_ROWS = 6
_rope_kernel, _rope_kernel_serial = _parallel_and_serial(_rope_kernel)
_rows_kernel, _rows_kernel_serial = _parallel_and_serial(_rows_kernel)


# --------------------------------------------------------------------------- planning (Python)

def _check_x(x, name: str) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype.kind != "f" or x.dtype.itemsize not in (4, 8):
        raise TypeError(f"{name} must be a float32 or float64 array for the Numba kernel, got dtype {x.dtype} "
                        "(use backend='numpy' for other dtypes)")
    if x.ndim == 0:
        raise ValueError(f"{name} needs a channel axis, got a 0-d array")
    return x


def _check_out(out, x: np.ndarray, name: str, out_name: str):
    """The kernel's ``out``: :func:`posenc_np._checks.check_out` with ``overlap``: it may overlap
    the inputs (the launch copies an input that overlaps its output other than exactly)."""
    return check_out(out, x, out_name, like_name=name, overlap=True)


def _kernel_ready(a: np.ndarray) -> bool:
    """Can the kernel address ``a`` through a flat view of its memory?"""
    if not (a.dtype.isnative and a.flags.aligned):
        return False
    return a.flags.c_contiguous or all(st % a.dtype.itemsize == 0 for st in a.strides)


def _flat(a: np.ndarray, writeable: bool):
    """``(buffer, origin, element strides)``: a 1-D contiguous view over ``a``'s memory span.

    ``a[i0, i1, ...]`` is ``buffer[origin + sum(i_k * strides[k])]``. Negative strides are
    fine: the buffer starts at the lowest address ``a`` touches. Inputs are always handed
    over read-only and outputs writeable, so Numba compiles one specialisation per dtype.
    """
    item = a.dtype.itemsize
    strides = tuple(st // item for st in a.strides)
    if a.flags.c_contiguous and a.size:
        buf = a.reshape(-1)
        return (buf if writeable or not buf.flags.writeable else _readonly(buf)), 0, strides
    if a.size == 0:
        return _EMPTY[item], 0, strides
    low = sum((n - 1) * st for n, st in zip(a.shape, strides) if st < 0)
    high = sum((n - 1) * st for n, st in zip(a.shape, strides) if st > 0)
    # A view whose first element is the lowest address: flip the negative-stride axes.
    start = a[tuple(slice(None, None, -1) if st < 0 else slice(None) for st in strides)]
    buf = np.lib.stride_tricks.as_strided(start, shape=(high - low + 1,), strides=(item,),
                                          writeable=writeable)
    return buf, -low, strides


def _lead_strides(a: np.ndarray, strides, n_lead: int) -> tuple:
    """Element strides of ``a``'s leading axes aligned with ``n_lead`` leading axes of ``x``
    (missing axes and size-1 axes broadcast: stride 0)."""
    pad = (0,) * (n_lead - (a.ndim - 1))
    return pad + tuple(0 if n == 1 else st for n, st in zip(a.shape[:-1], strides[:-1]))


def _offsets(shape, strides) -> np.ndarray:
    """Element offsets of every index of ``shape`` (C order), for the given element strides."""
    off = _ZERO_OFFSET
    for n, st in zip(shape, strides):
        axis = np.arange(0, n * st, st, dtype=np.int64) if st else np.zeros(n, dtype=np.int64)
        off = axis if off is _ZERO_OFFSET else (off[:, None] + axis).reshape(-1)
    return _readonly(off)


def _same_view(a: np.ndarray, b: np.ndarray) -> bool:
    return (a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
            and a.strides == b.strides and a.shape == b.shape)


def _blocks(n_outer: int, n_inner: int, threads: int, table_rows: str, table_row_bytes: int) -> tuple[int, int]:
    """Rows per work item along the outer (``a_block``) and inner (``b_block``) axes.

    Streaming from DRAM wants long runs in memory order, so the inner axes are kept whole
    unless that leaves fewer than ~4 items per thread. ``table_row_bytes`` is the size of one
    table row (``cos`` and ``sin``; ``table_rows`` says whether the
    table rows are the ``"outer"`` or ``"inner"`` ones): an item holds at most 256 KiB of table
    rows, so they stay in L2, and as many of the other rows as possible, which all reuse them.
    (With ``(B, H, T, D)`` and ``(T, d)`` tables an item is then every head over a block of
    positions, not a few heads over all of them, which re-read the whole tables from L3 per
    head: measured on the 2-core Xeon, 256 MiB ``x``, caches swept before each call, out of
    place 57 -> 67 % of the triad roofline, in place 64 -> 75 % of the in-place one.)
    """
    want = 4 * threads
    cap = max(1, (256 << 10) // table_row_bytes)
    b_block = min(n_inner, cap) if table_rows == "inner" else n_inner
    b_items = -(-n_inner // b_block)
    a_block = max(1, -(-n_outer // -(-want // b_items)))
    if table_rows == "outer":
        a_block = min(a_block, cap)
    a_items = -(-n_outer // a_block)
    if a_items * b_items < want:  # few outer rows: split the inner ones too
        b_block = max(1, -(-n_inner // -(-want // a_items)))
    return a_block, b_block


def _plan(lead, x_strides, out_strides, table_strides, threads, table_row_bytes):
    """Row offsets, loop order and blocking for one geometry (:func:`_cached_plan` keeps small ones).

    ``table_strides``: the leading strides of ``cos`` and ``sin`` (laid out alike), aligned with
    ``lead``. The leading axes split into *table axes*
    (where the tables vary) and *broadcast axes* (where they repeat); size-1 axes drop out.
    Whichever group has the smaller x stride becomes the inner loop (memory order), so
    ``(B, H, T, D)`` with ``(T, d)`` tables walks each head's ``T`` rows in one run, and
    ``(B, T, H, D)`` with ``(T, 1, d)`` walks each position's ``H`` heads in one run.

    Returns ``(A, I, a_block, b_block, tables_inner)``: ``A`` ``(3, outer rows)`` and ``I``
    ``(3, inner rows)`` hold the row offsets of x, out and the tables (zeros along the broadcast
    axes; origins not included).
    """
    t_axes = [k for k, n in enumerate(lead) if n > 1 and table_strides[k]]
    b_axes = [k for k, n in enumerate(lead) if n > 1 and not table_strides[k]]

    def smallest_stride(axes):
        return min((abs(x_strides[k]) for k in axes), default=None)

    st_t, st_b = smallest_stride(t_axes), smallest_stride(b_axes)
    tables_inner = st_b is None or (st_t is not None and st_t < st_b)
    inner, outer = (t_axes, b_axes) if tables_inner else (b_axes, t_axes)

    def offsets(strides, axes):
        return _offsets([lead[k] for k in axes], [strides[k] for k in axes])

    A, I = (np.stack([offsets(x_strides, axes), offsets(out_strides, axes), offsets(table_strides, axes)])
            for axes in (outer, inner))
    a_block, b_block = _blocks(A.shape[1], I.shape[1], threads, "inner" if tables_inner else "outer",
                               table_row_bytes)
    return _readonly(A), _readonly(I), a_block, b_block, tables_inner


# Plans (read-only offset arrays) of the 32 most recent small geometries: a training loop rotates
# the same strided q and k views again and again (docs/benchmarks.md, "Kernel mechanisms").
# Large geometries are planned per call: their offsets are cheap next to the rotation and would
# pin memory.
_cached_plan = functools.lru_cache(maxsize=32)(_plan)
_PLAN_CACHE_ROWS = 1 << 16


def _thread_count(size: int) -> int:
    """Numba's thread count, or 1 for a call too small to run on two threads. The first
    ``numba.get_num_threads()`` of a process starts Numba's thread pool (its threading layer and
    ``multiprocessing``: 55-70 ms of a first call on the 2-core AMD EPYC of
    ``docs/benchmarks.md``, where the rest of that call took 12-16 ms), which a call on the
    calling thread does not need."""
    return 1 if size < 2 * _ELEMENTS_PER_THREAD else numba.get_num_threads()


@contextlib.contextmanager
def _num_threads(use: int, threads: int):
    """Run the enclosed launch on ``use`` threads (Numba's setting is per calling thread)."""
    if use == threads:
        yield
        return
    numba.set_num_threads(use)
    try:
        yield
    finally:
        numba.set_num_threads(threads)


def _rows_geometry(x, target, cos, sin, fresh: bool):
    """``(table_rows, rep)`` when the memory-order path can rotate ``x`` into ``target``, else None.

    That path reads every array as its flat C-order buffer: ``x``, ``target`` and the tables
    C-contiguous, native and aligned; ``target`` either ``x`` itself or sharing no memory with it,
    and sharing none with the tables (``fresh``: ``target`` is a new array, which shares nothing);
    and the axes along which the tables vary one run of ``x``'s leading axes (``(T, d)`` tables for
    ``(B, H, T, D)``, ``(T, 1, d)`` for ``(B, T, H, D)``). Row ``r`` of ``x`` then takes table row
    ``(r // rep) % table_rows``, ``rep`` being the number of rows of the axes after that run.
    """
    for a in (x, target, cos, sin):
        flags = a.flags
        if not (flags.c_contiguous and flags.aligned and a.dtype.isnative):
            return None
    if cos.shape != sin.shape:
        return None
    # (C-contiguous arrays share memory exactly when their address ranges overlap)
    if not fresh and (np.may_share_memory(cos, target) or np.may_share_memory(sin, target)
                      or (target is not x and np.may_share_memory(x, target) and not _same_view(x, target))):
        return None
    lead, t_lead = x.shape[:-1], cos.shape[:-1]
    shift = len(lead) - len(t_lead)
    if shift < 0:
        return None
    varying = [k + shift for k, n in enumerate(t_lead) if n > 1]
    if not varying:
        return 1, 1
    first, last = varying[0], varying[-1] + 1
    if t_lead[first - shift:last - shift] != lead[first:last]:
        return None  # (an axis inside the run along which the tables repeat)
    return math.prod(lead[first:last]), math.prod(lead[last:])


def _run(x, out, cos, sin, layout: str, inverse: bool) -> np.ndarray:
    """Rotate ``x`` into ``out`` (None: a new array) by checked tables of ``x``'s dtype that
    broadcast against it, and return the result.

    Two paths: when every array is C-contiguous (the common case, :func:`_rows_geometry`) the rows
    are rotated in memory order with no plan; any other strides take the planned path (row
    offsets built from each operand's strides, :func:`_plan`).
    """
    if out is None:
        result = target = np.empty_like(x, dtype=x.dtype.newbyteorder("="))
    else:
        result = out
        target = out if _kernel_ready(out) else np.empty_like(out, dtype=out.dtype.newbyteorder("="))
    if x.size:
        threads = _thread_count(x.size)
        use = max(1, min(threads, x.size // _ELEMENTS_PER_THREAD))
        rest = (cos.shape[-1] // 2, x.shape[-1], layout == "interleaved", bool(inverse))
        rows = _rows_geometry(x, target, cos, sin, fresh=target is not out)
        if rows is not None:
            cb = _typed_writeable(cos.reshape(-1))
            sb = cb if sin is cos else _typed_writeable(sin.reshape(-1))
            n_rows = x.size // x.shape[-1]
            # in place: x itself, or another view of exactly its memory (a new array never is)
            in_place = target is x or (target is out and np.may_share_memory(x, target) and _same_view(x, target))
            _launch((_rows_kernel, _rows_kernel_serial), use, threads, None if in_place else
                    _typed_writeable(x.reshape(-1)), target.reshape(-1), cb, sb, n_rows, *rows, *rest)
        else:
            _launch((_rope_kernel, _rope_kernel_serial), use, threads, *_planned(x, target, cos, sin, use), *rest)
    if target is not result:
        result[...] = target
    return result


def _planned(x, target, cos, sin, use: int) -> tuple:
    """The planned path's kernel arguments before ``n_pairs``: flat views of ``x`` (a copy when it
    is not kernel-ready or overlaps ``target`` other than exactly) and ``target``, the plan (row
    offsets, ``meta``, work items) and flat views of the tables."""
    cos, sin = (_table_view(_copy_if_overlapping(t, target)) for t in (cos, sin))
    if cos.strides != sin.strides:  # one row offset serves both tables: lay them out alike
        cos, sin = np.ascontiguousarray(cos), np.ascontiguousarray(sin)
    cb, c0, cs = _flat(cos, writeable=True)
    sb = cb if sin is cos else _flat(sin, writeable=True)[0]  # same shape and strides: same origin
    if not _kernel_ready(x):
        x = np.ascontiguousarray(x, dtype=x.dtype.newbyteorder("="))
    # An input that overlaps the output (other than exactly, in place) is read from a copy, as
    # NumPy's ufuncs do; the kernel then never sees a written array aliasing another argument,
    # which its ``noalias`` compilation relies on.
    in_place = _same_view(x, target)
    if not in_place and _overlaps(x, target):
        x = x.copy()
    xb, x0, xs = _flat(x, writeable=False)
    ob, o0, os_ = _flat(target, writeable=True)
    planner = _cached_plan if math.prod(x.shape[:-1]) <= _PLAN_CACHE_ROWS else _plan
    A, I, a_block, b_block, tables_inner = planner(x.shape[:-1], xs, os_, _lead_strides(cos, cs, x.ndim - 1), use,
                                                   2 * cos.shape[-1] * cos.dtype.itemsize)
    if x0 or o0 or c0:
        A = _readonly(A + np.array([[x0], [o0], [c0]], dtype=np.int64))
    meta = _readonly(np.array([xs[-1], os_[-1], tables_inner, a_block, b_block, in_place], dtype=np.int64))
    n_items = -(-A.shape[1] // a_block) * -(-I.shape[1] // b_block)
    return xb, ob, A, I, meta, n_items, cb, sb


def _launch(kernels, use: int, threads: int, *args):
    """``kernels[1](*args)`` (serial) for one thread, else ``kernels[0](*args)`` on ``use`` threads."""
    if use == 1:
        kernels[1](*args)
    else:
        with launch_guard(), _num_threads(use, threads):
            kernels[0](*args)


def _copy_if_overlapping(t: np.ndarray, target: np.ndarray) -> np.ndarray:
    """``t``, or a copy of it when it shares memory with the output (read before overwritten)."""
    return t.copy() if _overlaps(t, target) else t


def _table_view(t: np.ndarray) -> np.ndarray:
    """``t`` as the kernel reads tables: native, aligned, unit channel stride, typed writeable.

    Tables with another channel stride (or byte order, alignment) are copied, contiguous;
    they are usually ``(T, d)``, small next to ``x``. A read-only table (``np.broadcast_to``,
    a frozen cache) is aliased, not copied, by a view that NumPy marks writeable: the kernel
    never writes to a table, and one array type for tables means one compiled specialisation.
    """
    if not (_kernel_ready(t) and t.strides[-1] == t.dtype.itemsize):
        t = np.ascontiguousarray(t, dtype=t.dtype.newbyteorder("="))
    return _typed_writeable(t)


def _typed_writeable(a: np.ndarray) -> np.ndarray:
    """``a``, or when it is read-only a view of its memory that NumPy marks writeable, for an
    array the kernel only reads: one array type for it, so one compiled specialisation."""
    return a if a.flags.writeable else np.asarray(_WritableAlias(a))


class _WritableAlias:
    """Exposes an array's memory through ``__array_interface__`` with the read-only flag off."""

    def __init__(self, a: np.ndarray):
        self.base = a  # keeps the memory alive
        interface = dict(a.__array_interface__)
        interface["data"] = (interface["data"][0], False)
        self.__array_interface__ = interface


def _readonly(a: np.ndarray) -> np.ndarray:
    """A read-only view (inputs reach the kernel read-only: one Numba specialisation)."""
    a = a.view()
    a.flags.writeable = False
    return a


_ZERO_OFFSET = _readonly(np.zeros(1, np.int64))
_EMPTY = {4: _readonly(np.zeros(1, np.float32)), 8: _readonly(np.zeros(1, np.float64))}


# --------------------------------------------------------------------------- public API

def _cast_tables(cos, sin, dtype):
    native = dtype.newbyteorder("=")
    return cos.astype(native, copy=False), sin.astype(native, copy=False)


def rope_apply(x: ArrayLike, cos: ArrayLike, sin: ArrayLike, *, layout: str, inverse: bool = False,
               out: np.ndarray | None = None) -> np.ndarray:
    r"""Rotate the first ``cos.shape[-1]`` channels of ``x`` by the tables ``cos``, ``sin``.

    Same result as :func:`posenc_np.rope.apply` (``inverse=False``) and
    :func:`posenc_np.rope.apply_backward` (``inverse=True``, rotation by :math:`-t`).

    Parameters
    ----------
    x : ndarray, float32 or float64, shape ``(..., D)``
        Any leading axes and strides, e.g. ``(B, H, T, D)`` or ``(B, T, H, D)``.
    cos, sin : array_like, shape ``(..., d)``, ``d <= D`` even
        Tables laid out for ``layout`` (:func:`posenc_np.rope.cos_sin`); leading axes
        broadcast against ``x``'s (``(T, d)`` for ``(B, H, T, D)``, ``(T, 1, d)`` for
        ``(B, T, H, D)``). Cast to ``x``'s dtype when they differ (as the reference does).
        Both channels of each pair must hold the same value (a valid layout table: what
        ``cos_sin`` returns and ``rope.apply`` checks); output channel ``j`` uses channel ``j``.
    layout : {"half", "interleaved"}
    inverse : bool
        ``True`` for the backward (``dx = rotate(dy, -t)``).
    out : ndarray or None
        Result array, ``x``'s shape and dtype; may be ``x`` itself (in place).

    Returns
    -------
    ndarray
        ``out``, or a new array laid out like ``x``.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import rope
    >>> from posenc_np.kernels.rope import rope_apply
    >>> cos, sin = rope.cos_sin([1], np.array([np.pi / 2, 0.0]))      # pair (0, 2) turns by 90 degrees, (1, 3) by 0
    >>> rope_apply(np.array([[1.0, 2.0, 3.0, 4.0, 5.0]]), cos, sin, layout="half").round(6).tolist()
    [[-3.0, 2.0, 1.0, 4.0, 5.0]]
    >>> rope_apply(np.array([[-3.0, 2.0, 1.0, 4.0, 5.0]]), cos, sin, layout="half", inverse=True).round(6).tolist()
    [[1.0, 2.0, 3.0, 4.0, 5.0]]
    """
    layout = check_choice(layout, "layout", LAYOUTS)
    x = _check_x(x, "x")
    cos, sin = check_rope_tables(x, cos, sin, "x")
    return rotate_tables(x, cos, sin, layout, bool(inverse), _check_out(out, x, "x", "out"))


def rotate_tables(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, layout: str, inverse: bool,
                  out: np.ndarray | None = None) -> np.ndarray:
    """:func:`rope_apply` for arguments already checked (by it, or by :func:`posenc_np.rope.apply`):
    the tables are cast to ``x``'s dtype, then the kernel is launched. No argument checks.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import rope
    >>> from posenc_np.kernels.rope import rotate_tables
    >>> x = np.random.default_rng(0).standard_normal((2, 3, 8))
    >>> cos, sin = rope.cos_sin(np.arange(3), rope.inv_freq(8)[0])
    >>> bool(np.array_equal(rotate_tables(x, cos, sin, "half", False), rope.apply(x, cos, sin, backend="numpy")))
    True
    """
    return _run(x, out, *_cast_tables(cos, sin, x.dtype), layout, inverse)
