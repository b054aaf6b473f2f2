r"""Numba kernel for the RoPE rotation (forward and backward), an optimisation of
:func:`posenc_np.rope.apply` / :func:`posenc_np.rope.apply_backward`.

Each channel pair :math:`(a, b)` of ``x`` is rotated by its angle :math:`t`:

.. math::

    a' = a\cos t - b\sin t, \qquad b' = a\sin t + b\cos t,

with pairs :math:`(i, i + d/2)` for ``layout="half"`` and :math:`(2i, 2i+1)` for
``layout="interleaved"``; channels past the rotary dim :math:`d` pass through. The backward
(``inverse=True``) is the same rotation with :math:`-\sin t`. The arithmetic is the
reference's, operation for operation, in ``x``'s dtype; ``contract`` (FMA) is left out of
the fast-math flags so that the table path is bit-identical to the NumPy reference (up to the
sign of zero results, ``nsz``).

Two entry points share one kernel:

* :func:`rope_apply` takes ``cos``/``sin`` tables (``posenc_np.rope.cos_sin``), broadcast
  against ``x``'s leading axes exactly as NumPy would. Output channel ``j`` is computed with
  table channel ``j`` (Hugging Face's ``x * cos + rotate(x) * sin``, elementwise); in a valid
  layout table both channels of a pair hold the same value, and then this is the reference's
  per-pair result bit for bit. :func:`posenc_np.rope.apply` checks the tables; this function
  does not (it is the fast path).
* :func:`rope_apply_angles` takes positions and ``inv_freq`` and computes
  :math:`f\cos(p\,\omega_i)`, :math:`f\sin(p\,\omega_i)` on the fly in float64, cast once to
  ``x``'s dtype: the same numbers as ``cos_sin(positions, inv_freq, attention_factor=f,
  dtype=x.dtype, method="direct")`` up to the libm ``sin``/``cos`` (glibc in Numba; NumPy 2.4 calls the same
  libm here, and the results were identical in every test).

How the work is laid out (no copy of ``x`` for any strides)
-----------------------------------------------------------
``x``'s leading axes split into *table axes* (where ``cos``/``sin`` or the positions vary)
and *broadcast axes* (where they repeat). For each operand the Python wrapper builds the
element offset of every row along each group, from the array's own strides (negative, zero,
transposed: any), and hands the kernel a flat 1-D view of the operand's memory. The group
with the smaller ``x`` stride is walked innermost, so ``(B, H, T, D)`` with ``(T, d)``
tables streams each head's rows in memory order (tables re-read from cache), and
``(B, T, H, D)`` with ``(T, 1, d)`` tables streams each position's heads with one table row.
``prange`` runs over blocks of rows. With on-the-fly angles each block first computes a
tile of cos/sin for its table rows (at most 256 KiB, L2-resident) that all its broadcast
rows reuse, so each angle's sin and cos is evaluated about once per call. Rows with
unit-stride channels take a vectorised loop; any other channel stride a scalar loop.
The offsets cost 8 bytes per row per operand.

What copies: ``x`` with a non-native byte order, misaligned data or strides that are not a
multiple of its item size (a contiguous copy); ``cos``/``sin`` of another dtype than ``x``
(cast, as the reference does) or whose channel axis is not unit-stride (a contiguous copy of
the table); an ``x`` or table that partially overlaps ``out`` (copied first, like NumPy
ufuncs); a misaligned or byte-swapped ``out`` (computed into a temporary, then copied in).
``out=x`` (the same view) works in place without a copy: each pair is read before it is
written. Small calls (under ``_ELEMENTS_PER_THREAD`` elements per thread) run on one thread.
"""

from __future__ import annotations

import contextlib
import threading

import numba
import numpy as np
from numba import uint64

from .. import _exact
from .._checks import (
    as_float_array,
    as_positions,
    check_choice,
    check_out_form,
    check_real,
)
from .._checks import shares_memory as _overlaps
from .._table_checks import ROPE_LAYOUTS as LAYOUTS
from .._table_checks import check_rope_tables as _check_tables
from ._numba import FASTMATH, launch_guard, njit_kernel

__all__ = ["ROPE_NUMBA_MIN_ELEMENTS", "rope_apply", "rope_apply_angles", "rope_apply_qk"]

# ``backend="auto"``'s switch, defined (with its measurement) in the package
# ``posenc_np/kernels/__init__.py`` so that ``rope.apply`` can read it without importing Numba.
from . import ROPE_NUMBA_MIN_ELEMENTS

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
# Three layers, each compiled once per dtype:
#   _rope_kernel   prange over the work items of one or two operands (x, or q and k); holds
#                  only calls, which keeps Numba's parfor passes cheap (compile 8.2 -> 5.7 s
#                  CPU per dtype, measured)
#   _rotate_block  one work item (a block of outer x inner rows of one operand): fills the
#                  cos/sin tile when angles are computed on the fly, then calls _walk
#   _walk          two plain nested loops over the block's rows. It is specialised in place
#                  (xb is None) or not, so that each compiled loop nest inlines _rotate_row
#                  exactly once, and its loop order is fixed (the planner decides which axes
#                  are outer). Measured on one core: two inlined copies in one loop nest, or a
#                  loop order chosen at run time, made LLVM give up vectorising (1.5-6x
#                  slower); a call per row costs more than the row.
#
# An operand is described by its flat buffers (x, out) and two int64 offset arrays, ``A`` for
# the outer rows and ``I`` for the inner rows, each with three lines: x, out and table row
# offsets (the element offset of row (a, b) is ``A[k, a] + I[k, b]``; origins are folded into
# ``A``; cos and sin are laid out alike, so one table offset serves both), a second pair
# ``PA``/``PI`` of two lines (on-the-fly angles: the row of the small "block" and "offset"
# tables of each table row along the outer and inner axes), and ``meta``: x's and out's
# channel strides, tables_inner, a_block, b_block, in_place. The loops that touch the arrays
# are compiled ``noalias`` (see ``njit_kernel``): ``_run`` guarantees that no array a kernel
# writes shares memory with another array argument (in place, ``x`` is not passed at all).

_M_XSTEP, _M_OSTEP, _M_TINNER, _M_ABLOCK, _M_BBLOCK, _M_INPLACE = range(6)


@njit_kernel(parallel=False, fastmath=_FASTMATH, inline="always")
def _rotate_row(src, s0, s_step, dst, d0, d_step, ctab, c0, stab, t0, n_pairs, width, interleaved, sign,
                in_place):
    """Rotate one row: ``src[s0 + j*s_step]`` -> ``dst[d0 + j*d_step]``, j < width.

    ``ctab[c0 + j]``, ``stab[t0 + j]`` is a table row with unit channel stride (or a tile laid
    out the same way). Output channel ``j`` uses table channel ``j`` (Hugging Face's
    ``x * cos + rotate(x) * sin``, elementwise); the two channels of a pair hold the same
    value in a valid table, so this is the reference's per-pair result bit for bit. Reading
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
def _walk(xb, ob, A, I, x_step, o_step, ctab, stab, c_shift, a_lo, a_hi, b_lo, b_hi, n_pairs, width,
          interleaved, sign):
    """Rotate rows ``(a, b)`` for ``a_lo <= a < a_hi`` (outer) and ``b_lo <= b < b_hi`` (inner).

    Row ``(a, b)`` of x starts at ``A[0, a] + I[0, b]``, of out at ``A[1, a] + I[1, b]``, of both
    tables at ``A[2, a] + I[2, b] + c_shift`` (one of the two is all zeros: the tables vary along
    the outer or along the inner axes; ``c_shift`` moves the rows into an on-the-fly tile).
    ``xb is None``: in place (``out`` is ``x``); resolved at compile time.
    """
    for a in range(a_lo, a_hi):
        x_a = A[0, a]
        y_a = A[1, a]
        t_a = A[2, a] + c_shift
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
def _fill_tile(cb, sb, p_lo, p_hi, blk, off, hc, hs, lc, ls, factor, n_pairs, interleaved):
    r"""The cos/sin rows of table rows ``p_lo <= p < p_hi`` by angle addition, laid out like table rows.

    Table row ``p`` is at position :math:`P = B\,j + r` with ``j = blk[p]``, ``r = off[p]``
    (rows of the small tables): with :math:`a = Bj\omega_i`, :math:`b = r\omega_i`,

    .. math::

        \cos(a + b) = \cos a\cos b - \sin a\sin b, \qquad \sin(a + b) = \sin a\cos b + \cos a\sin b,

    evaluated in float64 from the exact small tables ``hc, hs`` (:math:`\cos a, \sin a`) and
    ``lc, ls`` (:math:`\cos b, \sin b`), times ``factor``, cast once to the tile's dtype.
    """
    rotary = 2 * n_pairs
    for p in range(p_lo, p_hi):
        j = blk[p]
        r = off[p]
        t0 = (p - p_lo) * rotary
        for i in range(n_pairs):
            ca, sa, cr, sr = hc[j, i], hs[j, i], lc[r, i], ls[r, i]
            c = factor * (ca * cr - sa * sr)
            s = factor * (sa * cr + ca * sr)
            ja = 2 * i if interleaved else i  # both channels of the pair, like a table row
            jb = ja + 1 if interleaved else i + n_pairs
            cb[t0 + ja] = c  # cast once to x's dtype
            cb[t0 + jb] = c
            sb[t0 + ja] = s
            sb[t0 + jb] = s


@njit_kernel(parallel=False, fastmath=_FASTMATH, noalias=True)
def _rotate_block(item, xb, ob, A, I, PA, PI, meta, cb, sb, hc, hs, lc, ls, factor, from_angles,
                  n_pairs, width, interleaved, inverse):
    """Rotate work item ``item`` of one operand: ``a_block`` outer x ``b_block`` inner rows.

    With ``from_angles`` the item first fills a tile with the cos/sin rows of its table rows
    (the inner rows if the tables vary along the inner axes, else the outer rows) by
    :func:`_fill_tile`; the operand's table offsets are then tile row offsets ``p * rotary``
    (zeros on the other axis), shifted by the item's first table row.
    """
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
    c_shift = 0
    if from_angles:
        rotary = 2 * n_pairs
        if meta[_M_TINNER]:
            p_lo, p_hi, blk, off = b_lo, b_hi, PI[0], PI[1]
        else:
            p_lo, p_hi, blk, off = a_lo, a_hi, PA[0], PA[1]
        cb = np.empty((p_hi - p_lo) * rotary, dtype=ob.dtype)
        sb = np.empty((p_hi - p_lo) * rotary, dtype=ob.dtype)
        _fill_tile(cb, sb, p_lo, p_hi, blk, off, hc, hs, lc, ls, factor, n_pairs, interleaved)
        c_shift = -p_lo * rotary  # tile row of p: p * rotary + c_shift
    if meta[_M_INPLACE]:
        _walk(None, ob, A, I, meta[_M_XSTEP], meta[_M_OSTEP], cb, sb, c_shift, a_lo, a_hi, b_lo, b_hi,
              n_pairs, width, interleaved, sign)
    else:
        _walk(xb, ob, A, I, meta[_M_XSTEP], meta[_M_OSTEP], cb, sb, c_shift, a_lo, a_hi, b_lo, b_hi,
              n_pairs, width, interleaved, sign)


def _rope_kernel_of(parallel: bool):
    """The kernel, compiled with ``parallel`` or not (the serial one runs small calls on the
    calling thread: no thread wake-up and no change of Numba's thread count, which costs tens
    of microseconds per call). One body for both; each gets its own name for Numba's cache."""

    def kernel(xb1, ob1, A1, I1, PA1, PI1, meta1, n1, xb2, ob2, A2, I2, PA2, PI2, meta2, n2,
               cb, sb, hc, hs, lc, ls, factor, from_angles, n_pairs, width, interleaved, inverse):
        """Rotate every row of one or two operands: ``prange`` over their ``n1 + n2`` work items.

        Operand 1 (``x``, or ``q``) owns items ``[0, n1)``, operand 2 (``k``; ``n2 = 0`` when
        there is none) the rest. Tables and the small angle tables are shared. See
        :func:`_rotate_block`.
        """
        for item in numba.prange(n1 + n2):
            # int64(): the prange index may be typed uint64, which would compile the block twice
            it = numba.int64(item)
            if it < n1:
                _rotate_block(it, xb1, ob1, A1, I1, PA1, PI1, meta1, cb, sb, hc, hs, lc, ls, factor, from_angles,
                              n_pairs, width, interleaved, inverse)
            else:
                _rotate_block(it - n1, xb2, ob2, A2, I2, PA2, PI2, meta2, cb, sb, hc, hs, lc, ls, factor,
                              from_angles, n_pairs, width, interleaved, inverse)

    kernel.__name__ = kernel.__qualname__ = "_rope_kernel" if parallel else "_rope_kernel_serial"
    return njit_kernel(parallel=parallel, fastmath=_FASTMATH)(kernel)


_rope_kernel = _rope_kernel_of(True)
_rope_kernel_serial = _rope_kernel_of(False)


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
    """The kernel's ``out``: the form of :func:`posenc_np._checks.check_out_form`; it may overlap
    the inputs (the launch copies an input that overlaps its output other than exactly)."""
    return check_out_form(out, x, out_name, name)


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


def _blocks(n_outer: int, n_inner: int, threads: int, tile_rows: str, tile_row_bytes: int) -> tuple[int, int]:
    """Rows per work item along the outer (``a_block``) and inner (``b_block``) axes.

    Streaming from DRAM wants long runs in memory order, so the inner axes are kept whole
    unless that leaves fewer than ~4 items per thread. ``tile_row_bytes`` is the size of one
    table row (``cos`` and ``sin``, or the on-the-fly tile's row; ``tile_rows`` says whether the
    table rows are the ``"outer"`` or ``"inner"`` ones): an item holds at most 256 KiB of table
    rows, so they stay in L2, and as many of the other rows as possible, which all reuse them.
    (With ``(B, H, T, D)`` and ``(T, d)`` tables an item is then every head over a block of
    positions, not a few heads over all of them, which re-read the whole tables from L3 per
    head: measured on the 2-core Xeon, 256 MiB ``x``, caches swept before each call, out of
    place 57 -> 67 % of the triad roofline, in place 64 -> 75 % of the in-place one.)
    """
    want = 4 * threads
    cap = max(1, (256 << 10) // tile_row_bytes) if tile_row_bytes else max(n_outer, n_inner)
    b_block = min(n_inner, cap) if tile_rows == "inner" else n_inner
    b_items = -(-n_inner // b_block)
    a_block = max(1, -(-n_outer // -(-want // b_items)))
    if tile_rows == "outer":
        a_block = min(a_block, cap)
    a_items = -(-n_outer // a_block)
    if a_items * b_items < want:  # few outer rows: split the inner ones too
        b_block = max(1, -(-n_inner // -(-want // a_items)))
    return a_block, b_block


def _plan(lead, x_strides, out_strides, table_strides, threads, tile_row_bytes):
    """Row offsets, loop order and blocking for one geometry (cached when small, see :data:`_PLANS`).

    ``table_strides``: the leading strides of ``cos`` and ``sin`` (laid out alike), or of the
    positions, aligned with ``lead``. The leading axes split into *table axes*
    (where the tables vary) and *broadcast axes* (where they repeat); size-1 axes drop out.
    Whichever group has the smaller x stride becomes the inner loop (memory order), so
    ``(B, H, T, D)`` with ``(T, d)`` tables walks each head's ``T`` rows in one run, and
    ``(B, T, H, D)`` with ``(T, 1, d)`` walks each position's ``H`` heads in one run.

    Returns ``(A, I, a_block, b_block, tables_inner, table_rows)``: ``A`` ``(3, outer rows)`` and
    ``I`` ``(3, inner rows)`` hold the row offsets of x, out and the tables (zeros along the
    broadcast axes; origins not included), ``table_rows`` the table offsets along the table
    axes (the rows of the positions, with on-the-fly angles).
    """
    key = (lead, x_strides, out_strides, table_strides, threads, tile_row_bytes)
    plan = _PLANS.get(key)
    if plan is not None:
        return plan
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
                               tile_row_bytes)
    plan = (_readonly(A), _readonly(I), a_block, b_block, tables_inner, (I if tables_inner else A)[2])
    if A.shape[1] + I.shape[1] <= _PLAN_CACHE_ROWS:
        _remember(_PLANS, key, plan)
    return plan


def _remember(cache: dict, key, value):
    """Insert into a small FIFO cache (thread-safe: two Python threads may plan at once)."""
    with _CACHE_LOCK:
        if len(cache) >= _PLAN_CACHE_SIZE:
            cache.pop(next(iter(cache)), None)
        cache[key] = value


# Plans (offset arrays, read-only) of recent small geometries: a training loop calls the
# kernel with the same shapes again and again. Large geometries are not cached (building
# their offsets is cheap next to the kernel, and they would pin memory).
_PLANS: dict = {}
# Planned launches of recent geometries whose arrays are all C-contiguous (see _launch_key):
# the kernel arguments other than the arrays of x, out and the tables.
_LAUNCHES: dict = {}
_CACHE_LOCK = threading.Lock()
_PLAN_CACHE_SIZE = 32
_PLAN_CACHE_ROWS = 1 << 16


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


def _simple(a: np.ndarray) -> bool:
    """C-contiguous, native, aligned and not empty: the kernel reads it as ``a.reshape(-1)``."""
    return a.flags.c_contiguous and a.flags.aligned and a.dtype.isnative and a.size > 0


def _launch_key(operands, tables, layout, inverse):
    """Key of :data:`_LAUNCHES` for a call whose every array is :func:`_simple`, or None.

    Such a call's launch depends only on shapes, dtype and flags: the flat views are the arrays
    themselves, and the row offsets, blocks and ``meta`` follow from the shapes. Outputs must
    share no memory with another argument except exactly their own input (in place), and the
    tables must be writeable arrays (the type ``_table_view`` gives them), else the general
    path handles the call (copies, aliasing views). Each output is checked against every other
    array of the call, the other operand's input and output included. In place means
    ``out is x``; another view of ``x``'s memory takes the general path too. The thread count
    is ``key[5]``.
    """
    if tables is None:
        return None
    cos, sin = tables
    if not (_simple(cos) and _simple(sin) and cos.flags.writeable and sin.flags.writeable
            and cos.shape == sin.shape):
        return None
    key = [cos.shape, cos.dtype.char, sin is cos, layout, bool(inverse), numba.get_num_threads()]
    for i, (x, out) in enumerate(operands):
        if not (_simple(x) and (out is None or (_simple(out) and out.flags.writeable))):
            return None
        if out is not None:
            # every other array of the call: tables, every input but its own in place, other outputs
            others = [cos, sin, *(y for j, (y, o) in enumerate(operands) if not (j == i and out is y)),
                      *(o for j, (_, o) in enumerate(operands) if j != i and o is not None)]
            if any(np.may_share_memory(out, a) for a in others):
                return None  # (C-contiguous arrays: overlapping ranges share elements)
        key += [x.shape, x.dtype.char, out is x]
    return tuple(key)


def _run(operands, *, layout, inverse, tables=None, angles=None):
    """Plan every operand (row offsets, flat views, blocks) and launch the kernel once for all.

    ``operands``: one or two ``(x, out)`` pairs with the same channel count (``out`` None: a new
    array). ``tables``: ``(cos, sin)``, checked and cast to x's dtype, broadcasting against
    every operand; or ``angles``: ``(positions, inv_freq, factor)`` for one operand. Returns
    the list of results.

    A call whose arrays are all C-contiguous (the common case, see :func:`_launch_key`) plans
    once per geometry: later calls take the planned launch from :data:`_LAUNCHES` and only swap
    in their arrays (measured on the 2-core Xeon, ``(1, 4, 128, 128)`` float32 into a reused
    ``out``: 52 -> 35 us a call, of which ~20 us is the rotation).
    """
    key = _launch_key(operands, tables, layout, inverse)
    hit = _LAUNCHES.get(key) if key is not None else None
    if hit is not None:
        return _launch_planned(operands, tables, hit, key[5])
    dtype = operands[0][0].dtype
    targets, results = [], []
    for x, out in operands:
        if out is None:
            result = target = np.empty_like(x, dtype=x.dtype.newbyteorder("="))
        else:
            result = out
            target = out if _kernel_ready(out) else np.empty_like(out, dtype=out.dtype.newbyteorder("="))
        targets.append(target)
        results.append(result)
    threads = numba.get_num_threads()
    use = max(1, min(threads, sum(x.size for x, _ in operands) // _ELEMENTS_PER_THREAD))
    if tables is not None:
        cos, sin = (_table_view(_copy_if_overlapping(t, targets)) for t in tables)
        if cos.strides != sin.strides:  # one row offset serves both tables: lay them out alike
            cos, sin = np.ascontiguousarray(cos), np.ascontiguousarray(sin)
        n_pairs = cos.shape[-1] // 2
        cb, c0, cs = _flat(cos, writeable=True)
        sb = cb if sin is cos else _flat(sin, writeable=True)[0]  # same shape and strides: same origin
        small, factor = _NO_ANGLES[dtype.itemsize], 1.0
    else:
        positions, freqs, inv_freq, factor = angles
        if not _kernel_ready(positions):
            positions = np.ascontiguousarray(positions, dtype=positions.dtype.newbyteorder("="))
        pb, p0, ps = _flat(positions[..., None], writeable=False)
        n_pairs = freqs.shape[0]
        cb = sb = _SCRATCH[dtype.itemsize]  # replaced by a tile in each work item
        c0 = 0
    tile_row_bytes = 2 * 2 * n_pairs * dtype.itemsize  # one row of cos and sin (or of the tile)
    launch = []
    for (x, _), target in zip(operands, targets):
        if x.size == 0:
            continue
        if not _kernel_ready(x):
            x = np.ascontiguousarray(x, dtype=x.dtype.newbyteorder("="))
        # An input that overlaps an output (other than exactly its own, in place) is read from
        # a copy, as NumPy's ufuncs do; the kernel then never sees a written array aliasing
        # another argument, which its ``noalias`` compilation relies on.
        in_place = _same_view(x, target)
        if any(_overlaps(x, g) for g in targets if not (g is target and in_place)):
            x = x.copy()
        n_lead = x.ndim - 1
        xb, x0, xs = _flat(x, writeable=False)
        ob, o0, os_ = _flat(target, writeable=True)
        t_lead = _lead_strides(cos, cs, n_lead) if tables is not None else _lead_strides(positions[..., None], ps,
                                                                                        n_lead)
        A, I, a_block, b_block, tables_inner, table_rows = _plan(x.shape[:-1], xs, os_, t_lead, use, tile_row_bytes)
        PA = PI = _NO_ROWS
        if tables is None:
            # The small angle tables for the positions of the table rows, and the tile
            # offsets p * rotary in place of the table offsets.
            blk, off, *small = _angle_tables(pb[p0 + table_rows], freqs, inv_freq)
            rows = np.arange(table_rows.shape[0], dtype=np.int64) * (2 * n_pairs)
            tile = (np.zeros_like(A[2]), rows) if tables_inner else (rows, np.zeros_like(I[2]))
            A, I = (np.concatenate([M[:2], t[None]]) for M, t in zip((A, I), tile))
            PA, PI = (_NO_ROWS, np.stack([blk, off])) if tables_inner else (np.stack([blk, off]), _NO_ROWS)
        if x0 or o0 or c0:
            A = A + np.array([[x0], [o0], [c0]], dtype=np.int64)
        meta = np.array([xs[-1], os_[-1], tables_inner, a_block, b_block, in_place], dtype=np.int64)
        n_items = -(-A.shape[1] // a_block) * -(-I.shape[1] // b_block)
        launch.append(tuple(_readonly(a) if a.flags.writeable else a for a in (xb, A, I, PA, PI, meta))
                      + (ob, n_items))
    if launch:
        one = launch[0]
        two = launch[1] if len(launch) > 1 else one[:7] + (0,)
        (xb1, A1, I1, PA1, PI1, m1, ob1, n1), (xb2, A2, I2, PA2, PI2, m2, ob2, n2) = one, two
        args = (xb1, ob1, A1, I1, PA1, PI1, m1, n1, xb2, ob2, A2, I2, PA2, PI2, m2, n2, cb, sb, *small,
                float(factor), tables is None, n_pairs, operands[0][0].shape[-1], layout == "interleaved",
                bool(inverse))
        _launch(args, use, threads)
        if key is not None and sum(args[i].shape[1] for i in (2, 3, 10, 11)) <= _PLAN_CACHE_ROWS:
            # the launch without this call's arrays (never pin them); small plans only, as in _plan
            _remember(_LAUNCHES, key, (args[2:8], args[10:16], args[18:], use))
    for target, result in zip(targets, results):
        if target is not result:
            result[...] = target
    return results


def _launch(args, use: int, threads: int):
    if use == 1:
        _rope_kernel_serial(*args)
    else:
        with launch_guard(), _num_threads(use, threads):
            _rope_kernel(*args)


def _launch_planned(operands, tables, planned, threads: int):
    """:func:`_run` for a call of a planned geometry: its arrays into the planned launch."""
    plan1, plan2, rest, use = planned
    results = [np.empty_like(x) if out is None else out for x, out in operands]
    bufs = [(_readonly(x.reshape(-1)), y.reshape(-1)) for (x, _), y in zip(operands, results)]
    second = bufs[1] if len(bufs) > 1 else bufs[0]
    cos, sin = tables
    cb = cos.reshape(-1)
    args = (*bufs[0], *plan1, *second, *plan2, cb, cb if sin is cos else sin.reshape(-1), *rest)
    _launch(args, use, threads)
    return results


def _copy_if_overlapping(t: np.ndarray, targets) -> np.ndarray:
    """``t``, or a copy of it when it shares memory with an output (read before overwritten)."""
    for g in targets:
        if _overlaps(t, g):
            return t.copy()
    return t


def _angle_tables(pos_rows: np.ndarray, freqs: np.ndarray, inv_freq):
    r"""Small exact tables for the angle addition of :func:`_fill_tile`, cached (see :data:`_ANGLES`).

    Integer positions :math:`P = Bj + r` with :math:`0 \le r < B`, :math:`B` a power of two
    near :math:`\sqrt{\#\text{distinct}}` (64 for 4096 consecutive positions): one row of
    :math:`\cos, \sin(Bj\,\omega_i)` per distinct block start :math:`Bj` and one per distinct
    offset :math:`r`, each from :func:`posenc_np._exact.cos_sin` (within one ulp), so the
    tables hold :math:`\sim 2\sqrt{T}` rows instead of :math:`T`. Positions with a fraction
    take one exact row each (offset table: the single row :math:`r = 0`).

    Returns ``(blk, off, hc, hs, lc, ls)``: for every table row its block and offset row, and
    the block (``hc``, ``hs``) and offset (``lc``, ``ls``) tables, float64 ``(rows, n)``.
    """
    pos = _exact.positions(pos_rows)
    key = (freqs.tobytes(), _exact.exact_values(inv_freq), pos_rows.dtype.kind == "f", pos_rows.tobytes())
    hit = _ANGLES.get(key)
    if hit is not None:
        return hit
    tc = _exact.turn_constants(inv_freq)
    if pos.frac is None:
        whole = pos.whole
        n_distinct = np.unique(whole).size
        block = 1 << (max(n_distinct - 1, 0).bit_length() + 1) // 2
        r = whole & (block - 1)  # in [0, B) for negative positions too (two's complement)
        starts, blk = np.unique(whole - r, return_inverse=True)
        offs, off = np.unique(r, return_inverse=True)
        hc, hs = _exact.cos_sin(_exact.Positions(starts, None), tc)
        lc, ls = _exact.cos_sin(_exact.Positions(offs, None), tc)
    else:
        values, blk = np.unique(pos_rows.astype(np.float64), return_inverse=True)
        hc, hs = _exact.cos_sin(_exact.positions(values), tc)
        off = np.zeros_like(blk)
        lc, ls = np.ones((1, freqs.size)), np.zeros((1, freqs.size))
    value = tuple(_readonly(np.ascontiguousarray(a)) for a in (blk.astype(np.int64).reshape(-1),
                                                               off.astype(np.int64).reshape(-1), hc, hs, lc, ls))
    if pos_rows.size <= _PLAN_CACHE_ROWS:
        _remember(_ANGLES, key, value)
    return value


# Small angle tables of recent (frequencies, positions): a model rotates by the same positions
# every step, and exact evaluation costs ~0.2-0.5 us per entry.
_ANGLES: dict = {}


def _table_view(t: np.ndarray) -> np.ndarray:
    """``t`` as the kernel reads tables: native, aligned, unit channel stride, typed writeable.

    Tables with another channel stride (or byte order, alignment) are copied, contiguous;
    they are usually ``(T, d)``, small next to ``x``. A read-only table (``np.broadcast_to``,
    a frozen cache) is aliased, not copied, by a view that NumPy marks writeable: the kernel
    never writes to a table, and one array type for tables and the on-the-fly tile means one
    compiled specialisation.
    """
    if not (_kernel_ready(t) and t.strides[-1] == t.dtype.itemsize):
        t = np.ascontiguousarray(t, dtype=t.dtype.newbyteorder("="))
    if not t.flags.writeable:
        t = np.asarray(_WritableAlias(t))
    return t


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
# typed placeholders: the tables in angles mode (never read or written), no positions rows,
# and the small angle tables of the table mode (never read)
_SCRATCH = {4: np.zeros(1, np.float32), 8: np.zeros(1, np.float64)}
_NO_ROWS = _readonly(np.zeros((2, 0), np.int64))
_NO_ANGLES = {n: tuple(_readonly(np.zeros((1, 1))) for _ in range(4)) for n in (4, 8)}


# --------------------------------------------------------------------------- public API

def _check_lead(shape, x: np.ndarray, what: str, name: str):
    """``shape`` must broadcast to ``x``'s leading shape (NumPy rules, without growing it)."""
    lead = x.shape[:-1]
    if len(shape) > len(lead) or any(n != 1 and n != m for n, m in zip(shape[::-1], lead[::-1])):
        raise ValueError(f"{what} shape {shape} must broadcast to {name}'s leading shape {lead} "
                         f"({name} has shape {x.shape})")


def _cast_tables(cos, sin, dtype):
    return (cos.astype(dtype.newbyteorder("="), copy=False), sin.astype(dtype.newbyteorder("="), copy=False))


def rope_apply(x, cos, sin, *, layout: str, inverse: bool = False, out=None) -> np.ndarray:
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
    """
    layout = check_choice(layout, "layout", LAYOUTS)
    x = _check_x(x, "x")
    cos, sin = _check_tables(x, cos, sin, "x")
    return rotate_tables(x, cos, sin, layout, bool(inverse), _check_out(out, x, "x", "out"))


def rotate_tables(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, layout: str, inverse: bool, out=None) -> np.ndarray:
    """:func:`rope_apply` for arguments already checked (by it, or by :func:`posenc_np.rope.apply`):
    the tables are cast to ``x``'s dtype, then the kernel is launched. No argument checks."""
    return _run([(x, out)], layout=layout, inverse=inverse, tables=_cast_tables(cos, sin, x.dtype))[0]


def rotate_tables_qk(q: np.ndarray, k: np.ndarray, cos: np.ndarray, sin: np.ndarray, layout: str, inverse: bool,
                     out_q=None, out_k=None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`rope_apply_qk` for arguments already checked (by it, or by :func:`posenc_np.rope.apply_qk`):
    both tensors in one launch, tables cast once to ``q``'s dtype (``k`` has the same). No argument checks."""
    q_out, k_out = _run([(q, out_q), (k, out_k)], layout=layout, inverse=inverse,
                        tables=_cast_tables(cos, sin, q.dtype))
    return q_out, k_out


def rope_apply_qk(q, k, cos, sin, *, layout: str, inverse: bool = False, out_q=None, out_k=None):
    r"""Rotate queries and keys by the same tables in one kernel launch: ``(q_rot, k_rot)``.

    Equal to ``(rope_apply(q, cos, sin, ...), rope_apply(k, cos, sin, ...))`` bit for bit;
    the tables are checked, cast and laid out once, and the work items of both tensors run in
    one parallel region (one thread wake-up instead of two; the second tensor reads the table
    rows again, from cache when they fit). ``k`` may have fewer heads than ``q``
    (grouped-query attention): each broadcasts against the tables on its own.

    Parameters
    ----------
    q, k : ndarray, float32 or float64, shapes ``(..., D)`` with the same ``D`` and dtype
    cos, sin : array_like
        As in :func:`rope_apply`; their leading axes must broadcast against both ``q``'s and
        ``k``'s.
    layout : {"half", "interleaved"}
    inverse : bool
        ``True`` for the backward of both.
    out_q, out_k : ndarray or None
        Result arrays (may be ``q``/``k`` themselves: in place).
    """
    layout = check_choice(layout, "layout", LAYOUTS)
    q, k = _check_x(q, "q"), _check_x(k, "k")
    if q.shape[-1] != k.shape[-1] or q.dtype.newbyteorder("=") != k.dtype.newbyteorder("="):
        raise ValueError(f"q and k must have the same channel count and dtype, got {q.shape} {q.dtype} and "
                         f"{k.shape} {k.dtype}")
    cos, sin = _check_tables(q, cos, sin, "q")
    _check_tables(k, cos, sin, "k")
    out_q, out_k = _check_out(out_q, q, "q", "out_q"), _check_out(out_k, k, "k", "out_k")
    if out_q is not None and out_k is not None and _overlaps(out_q, out_k):
        raise ValueError("out_q and out_k overlap; they must be separate arrays")
    return rotate_tables_qk(q, k, cos, sin, layout, bool(inverse), out_q, out_k)


def rope_apply_angles(x, positions, inv_freq, *, layout: str, attention_factor: float = 1.0,
                      inverse: bool = False, out=None) -> np.ndarray:
    r"""Rotate ``x`` by angles :math:`t = p\,\omega_i` computed on the fly (no full tables in memory).

    Angles by angle addition, without a libm call per element: each integer position is split
    as :math:`p = Bj + r` (:math:`B` a power of two near :math:`\sqrt{T}`), the exact
    :math:`\cos, \sin` of the few distinct :math:`Bj\omega_i` and :math:`r\omega_i` are
    computed once per call (:func:`posenc_np._exact.cos_sin`, within one ulp; cached for
    repeated positions), and each work item combines them for its rows,

    .. math::

        \cos p\omega = \cos Bj\omega\,\cos r\omega - \sin Bj\omega\,\sin r\omega, \qquad
        \sin p\omega = \sin Bj\omega\,\cos r\omega + \cos Bj\omega\,\sin r\omega,

    in float64, times :math:`f`, cast once to ``x``'s dtype. What it matches: the exact tables
    ``cos_sin(positions, inv_freq, attention_factor=f, dtype=float64)`` (``method="exact"``)
    within a few float64 ulps (two products and a sum of values each within one ulp: at most
    ~4.5e-16 absolute, for any position), so the float32 tables it rotates by are the exact
    values rounded once to float32 up to a tie in rare cases (error <= 2^-25 ~ 3.0e-8 for
    :math:`|f| \le 1`; measured in ``tests/test_kernels_rope.py``). Non-integer positions take
    one exact row each (no split). The rotation is then :func:`rope_apply`'s, operation for
    operation.

    Parameters
    ----------
    x : ndarray, float32 or float64, shape ``(..., D)``
    positions : array_like of int or float
        Shape broadcasting against ``x.shape[:-1]`` (``(T,)`` for ``(B, H, T, D)``,
        ``(T, 1)`` for ``(B, T, H, D)``); :math:`|p| < 2^{53}` (float positions: within the
        range where their dtype holds every integer, as for ``cos_sin``).
    inv_freq : array_like, shape ``(n,)``
        Finite frequencies :math:`\omega_i`; the rotary dim is ``2n <= D``. An array from
        :func:`posenc_np.rope.inv_freq` carries its unrounded values, which are used.
    layout : {"half", "interleaved"}
    attention_factor : float
        :math:`f > 0` multiplying both cos and sin (YaRN, LongRoPE).
    inverse : bool
        ``True`` for the backward.
    out : ndarray or None
        As in :func:`rope_apply`.
    """
    layout = check_choice(layout, "layout", LAYOUTS)
    x = _check_x(x, "x")
    positions = as_positions(positions, "positions")
    freqs = as_float_array(inv_freq, "inv_freq").astype(np.float64, copy=False)
    if freqs.ndim != 1 or freqs.size == 0:
        raise ValueError(f"inv_freq must be a non-empty 1-D array, got shape {freqs.shape}")
    if not np.all(np.isfinite(freqs)):
        raise ValueError("inv_freq must be finite (no NaN or inf)")
    if 2 * freqs.size > x.shape[-1]:
        raise ValueError(f"inv_freq has {freqs.size} frequencies, a rotary dim of {2 * freqs.size} channels, "
                         f"wider than x ({x.shape[-1]} channels)")
    factor = check_real(attention_factor, "attention_factor", positive=True)
    _check_lead(positions.shape, x, "positions", "x")
    _exact.positions(positions)  # |p| < 2^53, float positions exact in their dtype: else ValueError
    out = _check_out(out, x, "x", "out")
    return _run([(x, out)], layout=layout, inverse=bool(inverse), angles=(positions, freqs, inv_freq, factor))[0]
