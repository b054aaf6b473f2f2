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
  against ``x``'s leading axes exactly as NumPy would. Like the reference it uses the first
  channel of each pair of the table (``cos[..., i]`` for ``half``, ``cos[..., 2i]`` for
  ``interleaved``); :func:`posenc_np.rope.apply` checks that both channels agree.
* :func:`rope_apply_angles` takes positions and ``inv_freq`` and computes
  :math:`f\cos(p\,\omega_i)`, :math:`f\sin(p\,\omega_i)` on the fly in float64, cast once to
  ``x``'s dtype: the same numbers as ``cos_sin(positions, inv_freq, attention_factor=f,
  dtype=x.dtype)`` up to the libm ``sin``/``cos`` (glibc here, NumPy's own SIMD code there).

How the work is laid out (no copies for any strides)
----------------------------------------------------
``x``'s leading axes split into *table axes* (where ``cos``/``sin`` or the positions vary)
and *broadcast axes* (where they are repeated). For each operand the Python wrapper builds
the element offset of every table row (``P`` of them) and of every broadcast row (``Q``),
from the array's own strides (negative, zero, transposed: any), and hands the kernel a flat
1-D view of the operand's memory. The kernel runs ``prange`` over blocks of
(table rows x broadcast rows); each block first gathers its per-pair ``cos``/``sin`` values
(from the table or from sin/cos of the angles) into a small contiguous tile, then rotates
its ``x`` rows, so the tile is computed or read once and reused across heads and batch.
Rows whose channels are unit-stride take a contiguous loop (vectorised by LLVM); any other
channel stride takes a strided loop. Offsets cost ``8 (P + Q)`` bytes per operand, not a
copy of the data.

What copies: ``x`` with a non-native byte order, misaligned data or strides that are not a
multiple of its item size (then a contiguous copy); ``cos``/``sin`` of another dtype than
``x`` (cast, as the reference does); an ``x`` or table that partially overlaps ``out``
(copied first, like NumPy ufuncs); a misaligned or byte-swapped ``out`` (computed into a
temporary, then copied into it). ``out=x`` (the same view) works in place without a copy:
each pair is read before it is written.
"""

from __future__ import annotations

import contextlib
import math

import numba
import numpy as np
from numba import uint64

from .._checks import as_float_array, as_positions, check_choice, check_real
from ._numba import FASTMATH, launch_guard, njit_kernel

__all__ = ["ROPE_NUMBA_MIN_ELEMENTS", "rope_apply", "rope_apply_angles"]

LAYOUTS = ("half", "interleaved")

#: ``backend="auto"`` uses the Numba kernel when ``x.size`` is at least this many elements
#: and NumPy below. Measured on this machine (2-core AMD EPYC znver4, numpy 2.4, numba 0.68;
#: see bench/bench_rope.py --threshold): placeholder until measured.
ROPE_NUMBA_MIN_ELEMENTS = 1 << 15

# RoPE needs no contraction: without ``contract`` each product and sum is rounded exactly as
# the NumPy reference rounds it, so the table path matches it bit for bit.
_FASTMATH = set(FASTMATH - {"contract"})

# Below this many elements per thread a second thread costs more than it saves (a parallel
# launch costs a few microseconds, and on a busy machine a descheduled worker can stall it
# for a scheduler tick): small calls run on one thread.
_ELEMENTS_PER_THREAD = 1 << 15


# --------------------------------------------------------------------------- kernel

@njit_kernel(parallel=False, fastmath=_FASTMATH, inline="always")
def _rotate_row(src, s0, s_step, dst, d0, d_step, ct, st, t0, n_pairs, width, interleaved, copy_tail):
    """Rotate one row: ``src[s0 + j*s_step]`` -> ``dst[d0 + j*d_step]``, j < width.

    ``ct[t0 + i]``, ``st[t0 + i]`` are the cos and (already signed) sin of pair ``i``.
    ``src`` may be ``dst`` with the same offsets (in place): both members of a pair are
    loaded before either is stored. Offsets are >= 0.
    """
    if s_step == 1 and d_step == 1:
        # Unit-stride channels. Indices are unsigned so that Numba emits no negative-index
        # wraparound (which hides the consecutive accesses from LLVM's vectoriser). Keep
        # every operand uint64: uint64 op int64 is float64 in Numba.
        one = uint64(1)
        n = uint64(n_pairs)
        xs, ys, ts = uint64(s0), uint64(d0), uint64(t0)
        if interleaved:
            for k in range(n_pairs):  # pair (2i, 2i+1)
                i = uint64(k)
                ja = i + i
                a = src[xs + ja]
                b = src[xs + ja + one]
                dst[ys + ja] = a * ct[ts + i] - b * st[ts + i]
                dst[ys + ja + one] = a * st[ts + i] + b * ct[ts + i]
        else:
            for k in range(n_pairs):  # pair (i, i + d/2)
                i = uint64(k)
                a = src[xs + i]
                b = src[xs + i + n]
                dst[ys + i] = a * ct[ts + i] - b * st[ts + i]
                dst[ys + i + n] = a * st[ts + i] + b * ct[ts + i]
        if copy_tail:
            for k in range(2 * n_pairs, width):
                j = uint64(k)
                dst[ys + j] = src[xs + j]
    else:
        # Any channel stride (negative, transposed, sliced): plain signed index arithmetic.
        step = 2 if interleaved else 1
        other = 1 if interleaved else n_pairs
        for i in range(n_pairs):
            ja = i * step
            jb = ja + other
            a = src[s0 + ja * s_step]
            b = src[s0 + jb * s_step]
            dst[d0 + ja * d_step] = a * ct[t0 + i] - b * st[t0 + i]
            dst[d0 + jb * d_step] = a * st[t0 + i] + b * ct[t0 + i]
        if copy_tail:
            for j in range(2 * n_pairs, width):
                dst[d0 + j * d_step] = src[s0 + j * s_step]


@njit_kernel(parallel=False, fastmath=_FASTMATH, inline="always")
def _gather_pairs(src, start, step, sign, dst, d0, n_pairs):
    """``dst[d0 + i] = sign * src[start + i*step]`` for the ``n_pairs`` pairs of a table row.

    ``step`` is 1 (``half``) or 2 (``interleaved``) for unit-stride tables: unsigned indices,
    vectorised; anything else (strided or reversed tables) takes the signed loop.
    """
    if step == 1 or step == 2:
        u0, ud, ustep = uint64(start), uint64(d0), uint64(step)
        for k in range(n_pairs):
            i = uint64(k)
            dst[ud + i] = sign * src[u0 + i * ustep]
    else:
        for i in range(n_pairs):
            dst[d0 + i] = sign * src[start + i * step]


@njit_kernel(fastmath=_FASTMATH)
def _rope_kernel(xb, x0, xp, xq, x_step,
                 ob, o0, op, oq, o_step,
                 cb, c0, cp, sb, s0, sp, c_step, s_step,
                 positions, inv_freq, factor, from_angles,
                 n_pairs, width, interleaved, inverse, in_place, p_block, q_block, q_inner):
    """Rotate every row of ``x`` into ``out`` (see the module docstring for the layout).

    Row ``(p, q)`` (table row ``p``, broadcast row ``q``) of ``x`` starts at
    ``xb[x0 + xp[p] + xq[q]]``, of ``out`` at ``ob[o0 + op[p] + oq[q]]``; its table row at
    ``cb[c0 + cp[p]]``/``sb[s0 + sp[p]]``, pair ``i`` at ``+ i * c_step``/``+ i * s_step``. With
    ``from_angles`` the table is ``factor * cos/sin(positions[p] * inv_freq[i])`` instead.
    Work items are blocks of ``p_block`` table rows x ``q_block`` broadcast rows.
    """
    n_p = xp.shape[0]
    n_q = xq.shape[0]
    p_items = (n_p + p_block - 1) // p_block
    q_items = (n_q + q_block - 1) // q_block
    one = ob.dtype.type(1)
    sign = -one if inverse else one  # backward: rotate by -t, i.e. negate sin
    for item in numba.prange(p_items * q_items):
        pi = item // q_items
        qi = item - pi * q_items
        p_lo = pi * p_block
        p_hi = min(n_p, p_lo + p_block)
        q_lo = qi * q_block
        q_hi = min(n_q, q_lo + q_block)
        # The block's per-pair cos and signed sin, contiguous, in x's dtype.
        ct = np.empty((p_hi - p_lo) * n_pairs, dtype=ob.dtype)
        st = np.empty((p_hi - p_lo) * n_pairs, dtype=ob.dtype)
        for p in range(p_lo, p_hi):
            t0 = (p - p_lo) * n_pairs
            if from_angles:
                for i in range(n_pairs):
                    angle = positions[p] * inv_freq[i]  # float64, as cos_sin computes it
                    ct[t0 + i] = factor * math.cos(angle)  # cast once to x's dtype
                    st[t0 + i] = factor * math.sin(angle)
                if inverse:
                    for i in range(n_pairs):
                        st[t0 + i] = -st[t0 + i]
            else:
                _gather_pairs(cb, c0 + cp[p], c_step, one, ct, t0, n_pairs)
                _gather_pairs(sb, s0 + sp[p], s_step, sign, st, t0, n_pairs)
        # Walk the block with the smaller x stride innermost (counters, no division per row).
        p = p_lo
        q = q_lo
        for _ in range((p_hi - p_lo) * (q_hi - q_lo)):
            t0 = (p - p_lo) * n_pairs
            y_row = o0 + op[p] + oq[q]
            if in_place:
                _rotate_row(ob, y_row, o_step, ob, y_row, o_step, ct, st, t0, n_pairs, width, interleaved, False)
            else:
                _rotate_row(xb, x0 + xp[p] + xq[q], x_step, ob, y_row, o_step, ct, st, t0,
                            n_pairs, width, interleaved, True)
            if q_inner:
                q += 1
                if q == q_hi:
                    q = q_lo
                    p += 1
            else:
                p += 1
                if p == p_hi:
                    p = p_lo
                    q += 1


# --------------------------------------------------------------------------- planning (Python)

def _check_x(x, name: str) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype.kind != "f" or x.dtype.itemsize not in (4, 8):
        raise TypeError(f"{name} must be a float32 or float64 array for the Numba kernel, got dtype {x.dtype} "
                        "(use backend='numpy' for other dtypes)")
    if x.ndim == 0:
        raise ValueError(f"{name} needs a channel axis, got a 0-d array")
    return x


def _check_out(out, x: np.ndarray, name: str):
    if out is None:
        return None
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a NumPy array or None, got {type(out).__name__}")
    if out.shape != x.shape:
        raise ValueError(f"out must have {name}'s shape {x.shape}, got {out.shape}")
    if out.dtype.newbyteorder("=") != x.dtype.newbyteorder("="):
        raise TypeError(f"out must have {name}'s dtype {x.dtype}, got {out.dtype}")
    if not out.flags.writeable:
        raise ValueError("out is read-only")
    if any(st == 0 and n > 1 for st, n in zip(out.strides, out.shape)):
        raise ValueError(f"out has overlapping elements (a zero stride, strides {out.strides}); "
                         "it cannot hold a result")
    return out


def _kernel_ready(a: np.ndarray) -> bool:
    """Can the kernel address ``a`` through a flat view of its memory?"""
    return (a.dtype.isnative and a.flags.aligned
            and all(st % a.dtype.itemsize == 0 for st in a.strides))


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
        return (_EMPTY_F32 if item == 4 else _EMPTY_F64), 0, strides
    low = sum((n - 1) * st for n, st in zip(a.shape, strides) if st < 0)
    high = sum((n - 1) * st for n, st in zip(a.shape, strides) if st > 0)
    # A view whose first element is the lowest address: flip the negative-stride axes.
    start = a[tuple(slice(None, None, -1) if st < 0 else slice(None) for st in strides)]
    buf = np.lib.stride_tricks.as_strided(start, shape=(high - low + 1,), strides=(item,),
                                          writeable=writeable)
    return buf, -low, strides


def _lead_strides(a: np.ndarray, strides, n_lead: int) -> list:
    """Element strides of ``a``'s leading axes aligned with ``n_lead`` leading axes of ``x``
    (missing axes and size-1 axes broadcast: stride 0)."""
    lead = [0] * (n_lead - (a.ndim - 1))
    lead += [0 if n == 1 else st for n, st in zip(a.shape[:-1], strides[:-1])]
    return lead


def _offsets(shape, strides) -> np.ndarray:
    """Element offsets of every index of ``shape`` (C order), for the given element strides."""
    off = np.zeros(1, dtype=np.int64)
    for n, st in zip(shape, strides):
        off = (off[:, None] + np.arange(0, n * st, st, dtype=np.int64) if st else
               np.repeat(off[:, None], n, axis=1)).reshape(-1)
    return off


def _same_view(a: np.ndarray, b: np.ndarray) -> bool:
    return (a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
            and a.strides == b.strides and a.shape == b.shape)


def _overlaps(a: np.ndarray, b: np.ndarray) -> bool:
    if not np.may_share_memory(a, b):
        return False
    try:
        return bool(np.shares_memory(a, b, max_work=10**6))
    except np.exceptions.TooHardError:
        return True


def _blocks(n_p: int, n_q: int) -> tuple[int, int]:
    """Rows per work item along the table and broadcast axes.

    Up to 64 table rows per item (the tile stays in L1/L2), at least ~8 items per thread when
    there are enough table rows; with few table rows (decode: one position, many heads) the
    broadcast rows are split too, at the price of recomputing the tile per item.
    """
    threads = numba.get_num_threads()
    p_block = max(1, min(64, -(-n_p // (8 * threads))))
    p_items = -(-n_p // p_block)
    q_items = min(n_q, max(1, -(-(4 * threads) // p_items)))
    return p_block, -(-n_q // q_items)


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


def _run(x, out, *, layout, inverse, tables=None, angles=None):
    """Plan the call (row offsets, flat views, blocks) and launch the kernel."""
    if out is None:
        result = target = np.empty_like(x, dtype=x.dtype.newbyteorder("="))
    else:
        result = out
        target = out if _kernel_ready(out) else np.empty_like(out, dtype=out.dtype.newbyteorder("="))
    if x.size == 0:
        return result
    if not _kernel_ready(x):
        x = np.ascontiguousarray(x, dtype=x.dtype.newbyteorder("="))
    in_place = _same_view(x, target)
    if not in_place and _overlaps(x, target):
        x = x.copy()
    lead = x.shape[:-1]
    n_lead = len(lead)

    xb, x0, xs = _flat(x, writeable=False)
    ob, o0, os_ = _flat(target, writeable=True)
    if tables is not None:
        cos, sin = (t.copy() if _overlaps(t, target) else t for t in tables)
        if not (_kernel_ready(cos) and _kernel_ready(sin)):
            cos, sin = np.ascontiguousarray(cos), np.ascontiguousarray(sin)
        n_pairs = cos.shape[-1] // 2
        cb, c0, cs = _flat(cos, writeable=False)
        sb, s0, ss = (cb, c0, cs) if sin is cos else _flat(sin, writeable=False)
        c_lead, s_lead = _lead_strides(cos, cs, n_lead), _lead_strides(sin, ss, n_lead)
        varies = [c != 0 or s != 0 for c, s in zip(c_lead, s_lead)]
    else:
        positions, freqs, factor = angles
        if not _kernel_ready(positions):
            positions = np.ascontiguousarray(positions, dtype=positions.dtype.newbyteorder("="))
        n_pairs = freqs.shape[0]
        pb, p0, ps = _flat(positions[..., None], writeable=False)
        p_lead = _lead_strides(positions[..., None], ps, n_lead)
        varies = [st != 0 for st in p_lead]
    # Table axes (cos/sin or positions vary) and broadcast axes (they repeat); size-1 axes drop.
    table_axes = [k for k in range(n_lead) if lead[k] > 1 and varies[k]]
    bcast_axes = [k for k in range(n_lead) if lead[k] > 1 and not varies[k]]
    p_shape = [lead[k] for k in table_axes]
    q_shape = [lead[k] for k in bcast_axes]

    def offsets(strides, axes, shape):
        return _offsets(shape, [strides[k] for k in axes])

    xp, xq = offsets(xs, table_axes, p_shape), offsets(xs, bcast_axes, q_shape)
    if os_ == xs:
        op, oq = xp, xq
    else:
        op, oq = offsets(os_, table_axes, p_shape), offsets(os_, bcast_axes, q_shape)
    pair_step = 2 if layout == "interleaved" else 1
    if tables is not None:
        cp = offsets(c_lead, table_axes, p_shape)
        sp = cp if s_lead == c_lead else offsets(s_lead, table_axes, p_shape)
        c_step, s_step = cs[-1] * pair_step, ss[-1] * pair_step
        pos_p = freqs = _EMPTY_F64
        factor, from_angles = 1.0, False
    else:
        cb = sb = _EMPTY_F32 if x.dtype.itemsize == 4 else _EMPTY_F64
        c0 = s0 = c_step = s_step = 0
        cp = sp = xp
        pos_p = _readonly(pb[p0 + offsets(p_lead, table_axes, p_shape)].astype(np.float64))
        freqs = _readonly(np.ascontiguousarray(freqs))
        from_angles = True

    n_p, n_q = xp.shape[0], xq.shape[0]
    p_block, q_block = _blocks(n_p, n_q)
    # Walk each block with the smaller x stride innermost (contiguous memory first).
    q_inner = n_q > 1 and (n_p == 1 or abs(int(xq[1] - xq[0])) <= abs(int(xp[1] - xp[0])))
    threads = numba.get_num_threads()
    use = max(1, min(threads, x.size // _ELEMENTS_PER_THREAD))
    with launch_guard(), _num_threads(use, threads):
        _rope_kernel(xb, x0, xp, xq, xs[-1],
                     ob, o0, op, oq, os_[-1],
                     cb, c0, cp, sb, s0, sp, c_step, s_step,
                     pos_p, freqs, float(factor), from_angles,
                     n_pairs, x.shape[-1], layout == "interleaved", bool(inverse), in_place,
                     p_block, q_block, q_inner)
    if target is not result:
        result[...] = target
    return result


def _readonly(a: np.ndarray) -> np.ndarray:
    """A read-only view (inputs reach the kernel read-only: one Numba specialisation)."""
    a = a.view()
    a.flags.writeable = False
    return a


_EMPTY_F32 = _readonly(np.zeros(1, np.float32))
_EMPTY_F64 = _readonly(np.zeros(1, np.float64))


# --------------------------------------------------------------------------- public API

def _check_lead(shape, x: np.ndarray, what: str, name: str):
    """``shape`` must broadcast to ``x``'s leading shape (NumPy rules, without growing it)."""
    lead = x.shape[:-1]
    if len(shape) > len(lead) or any(n != 1 and n != m for n, m in zip(shape[::-1], lead[::-1])):
        raise ValueError(f"{what} shape {shape} must broadcast to {name}'s leading shape {lead} "
                         f"({name} has shape {x.shape})")


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
        The first channel of each pair is used.
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
    cos, sin = as_float_array(cos, "cos", ndim_min=1), as_float_array(sin, "sin", ndim_min=1)
    if cos.shape != sin.shape:
        raise ValueError(f"cos and sin must have the same shape, got {cos.shape} and {sin.shape}")
    rotary = cos.shape[-1]
    if rotary == 0 or rotary % 2:
        raise ValueError(f"the rotary dim cos.shape[-1] must be even and positive, got {rotary}")
    if rotary > x.shape[-1]:
        raise ValueError(f"cos/sin are wider ({rotary} channels) than x ({x.shape[-1]} channels); "
                         "the rotary dim cannot exceed the head dim")
    _check_lead(cos.shape[:-1], x, "cos/sin leading", "x")
    out = _check_out(out, x, "x")
    cos = cos.astype(x.dtype.newbyteorder("="), copy=False)
    sin = sin.astype(x.dtype.newbyteorder("="), copy=False)
    return _run(x, out, layout=layout, inverse=bool(inverse), tables=(cos, sin))


def rope_apply_angles(x, positions, inv_freq, *, layout: str, attention_factor: float = 1.0,
                      inverse: bool = False, out=None) -> np.ndarray:
    r"""Rotate ``x`` by angles :math:`t = p\,\omega_i` computed on the fly (no tables in memory).

    Same result as ``rope_apply(x, *cos_sin(positions, inv_freq,
    attention_factor=attention_factor, layout=layout, dtype=x.dtype), layout=layout)`` up to
    the libm ``sin``/``cos``: angles, :math:`f\cos t` and :math:`f\sin t` are computed in
    float64 and cast once to ``x``'s dtype.

    Parameters
    ----------
    x : ndarray, float32 or float64, shape ``(..., D)``
    positions : array_like of int or float
        Shape broadcasting against ``x.shape[:-1]`` (``(T,)`` for ``(B, H, T, D)``,
        ``(T, 1)`` for ``(B, T, H, D)``); finite.
    inv_freq : array_like, shape ``(n,)``
        Finite frequencies :math:`\omega_i`; the rotary dim is ``2n <= D``.
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
    out = _check_out(out, x, "x")
    return _run(x, out, layout=layout, inverse=bool(inverse), angles=(positions, freqs, factor))
