"""RoPE Numba kernel (posenc_np.kernels.rope) against NumPy references.

Two references: ``ref_rotate`` below, written from the formula (pairs ``(i, i + d/2)`` or
``(2i, 2i+1)``, ``a' = a c - b s``, ``b' = a s + b c``, backward with ``-s``, channels past
``d`` copied), and ``posenc_np.rope.apply/apply_backward(..., backend="numpy")``.

Tolerances. The table path performs the reference's operations in the same order and dtype
and the kernel is compiled without ``contract`` (no FMA), so it is compared **bit for bit**
(``np.array_equal``; the sign of a zero result may differ under ``nsz``, which ``==`` ignores).

Compile time counts: every test shares the one kernel dispatcher, which compiles once per
dtype (float32, float64) for the whole file (and is cached on disk for later runs).
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import threading
import weakref

import numpy as np
import pytest

from posenc_np import rope
from posenc_np._backend import ROPE_NUMBA_MIN_ELEMENTS
from posenc_np.kernels import _numba, rope_apply
from posenc_np.kernels import rope as krope

LAYOUTS = ("half", "interleaved")
DTYPES = (np.float32, np.float64)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# --------------------------------------------------------------------------- references

def ref_rotate(x, cos, sin, layout, inverse=False):
    """The rotation from the formula, in x's dtype (tables cast to it first, as rope.apply does)."""
    x = np.asarray(x)
    d = cos.shape[-1]
    n = d // 2
    c = np.asarray(cos).astype(x.dtype)
    s = np.asarray(sin).astype(x.dtype)
    if layout == "half":
        first, second = slice(0, n), slice(n, d)
    else:
        first, second = slice(0, d, 2), slice(1, d, 2)
    c, s = c[..., first], s[..., first]  # per-pair values (both channels of a pair agree)
    if inverse:
        s = -s
    a, b = x[..., first], x[..., second]
    y = np.empty(x.shape, dtype=x.dtype)
    y[..., first] = a * c - b * s
    y[..., second] = a * s + b * c
    y[..., d:] = x[..., d:]
    return y


def lib_rotate(x, cos, sin, layout, inverse=False):
    """posenc_np.rope's NumPy reference (the documented fast path's contract)."""
    fn = rope.apply_backward if inverse else rope.apply
    return fn(x, cos, sin, layout=layout, backend="numpy")


def check_exact(got, x, cos, sin, layout, inverse=False):
    want = ref_rotate(x, cos, sin, layout, inverse)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, lib_rotate(x, cos, sin, layout, inverse))


def inv_freq(d, base=10000.0):
    return base ** (-np.arange(0, d, 2, dtype=np.float64) / d)


# --------------------------------------------------------------------------- random cases

def random_case(seed):
    """A random geometry: shape, order, rotary dim, table broadcast, strides, offsets."""
    rng = np.random.default_rng(seed)
    dtype = DTYPES[seed % 2]
    layout = LAYOUTS[(seed // 2) % 2]
    inverse = bool((seed // 4) % 2)
    order = ("bhtd", "bthd", "td")[seed % 3]
    b, h = int(rng.integers(1, 4)), int(rng.integers(1, 6))
    t = int(rng.choice([1, 2, 7, 31, 64, 129]))
    head = int(rng.integers(1, 20)) * 2 + int(rng.integers(0, 2))  # odd head dims too
    rotary = 2 * int(rng.integers(1, head // 2 + 1))
    pos = rng.integers(0, 5000, size=t)
    if rng.random() < 0.3:  # tables with negative row strides (same values per position)
        cos, sin = (a[::-1] for a in rope.cos_sin(pos[::-1], inv_freq(rotary), layout=layout))
    else:
        cos, sin = rope.cos_sin(pos, inv_freq(rotary), layout=layout, dtype=np.float64)
    if order == "bhtd":
        shape = (b, h, t, head)
    elif order == "bthd":
        shape = (b, t, h, head)
        cos, sin = cos[:, None, :], sin[:, None, :]
    else:
        shape = (t, head)
    # Strides and offsets: a bigger parent, sliced (offset, step, reversal) and maybe transposed.
    parent_shape = tuple(n + 2 for n in shape)
    parent = rng.standard_normal(parent_shape).astype(dtype)
    index = []
    for n in shape:
        kind = rng.integers(0, 3)
        index.append(slice(1, 1 + n) if kind == 0 else slice(n, 0, -1) if kind == 1 else slice(0, n))
    x = parent[tuple(index)]
    if rng.random() < 0.3 and x.ndim >= 3:
        perm = list(range(x.ndim - 1))
        rng.shuffle(perm)
        x = np.ascontiguousarray(x.transpose(perm + [x.ndim - 1])).transpose(np.argsort(perm).tolist() + [x.ndim - 1])
    assert x.shape == shape
    return x, cos, sin, layout, inverse


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(48))
def test_random_geometries_match_references_bit_for_bit(seed):
    x, cos, sin, layout, inverse = random_case(seed)
    got = rope_apply(x, cos, sin, layout=layout, inverse=inverse)
    check_exact(got, x, cos, sin, layout, inverse)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("inverse", [False, True])
def test_bhtd_and_bthd_orders_partial_rotary(layout, dtype, inverse):
    rng = np.random.default_rng(1)
    b, h, t, head, rotary = 2, 3, 17, 12, 8
    cos, sin = rope.cos_sin(np.arange(t), inv_freq(rotary), layout=layout, dtype=dtype)
    x = rng.standard_normal((b, h, t, head)).astype(dtype)
    y = rope_apply(x, cos, sin, layout=layout, inverse=inverse)
    check_exact(y, x, cos, sin, layout, inverse)
    np.testing.assert_array_equal(y[..., rotary:], x[..., rotary:])  # pass-through
    xt = np.ascontiguousarray(x.transpose(0, 2, 1, 3))  # (B, T, H, D)
    yt = rope_apply(xt, cos[:, None], sin[:, None], layout=layout, inverse=inverse)
    np.testing.assert_array_equal(yt, y.transpose(0, 2, 1, 3))
    # the transposed view itself (non-contiguous), tables (T, 1, d)
    yv = rope_apply(x.transpose(0, 2, 1, 3), cos[:, None], sin[:, None], layout=layout, inverse=inverse)
    np.testing.assert_array_equal(yv, y.transpose(0, 2, 1, 3))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_tables_with_batch_axes_and_full_shape(layout):
    rng = np.random.default_rng(2)
    b, h, t, head = 2, 4, 9, 16
    pos = rng.integers(0, 100, size=(b, t))  # per-sequence positions (left padding, packing)
    cos, sin = rope.cos_sin(pos, inv_freq(head), layout=layout, dtype=np.float32)
    x = rng.standard_normal((b, h, t, head)).astype(np.float32)
    got = rope_apply(x, cos[:, None], sin[:, None], layout=layout)
    check_exact(got, x, cos[:, None], sin[:, None], layout)
    full_c = np.ascontiguousarray(np.broadcast_to(cos[:, None], x.shape))
    full_s = np.ascontiguousarray(np.broadcast_to(sin[:, None], x.shape))
    np.testing.assert_array_equal(rope_apply(x, full_c, full_s, layout=layout), got)


def test_one_row_decode_step_and_odd_sizes():
    rng = np.random.default_rng(3)
    for shape in [(1, 2), (1, 1, 1, 2), (3, 5, 1, 7), (1, 1, 1, 255), (2, 13, 1, 64)]:
        rotary = 2 * max(1, shape[-1] // 2)
        cos, sin = rope.cos_sin(np.array([4097]), inv_freq(rotary), layout="half")
        x = rng.standard_normal(shape)
        check_exact(rope_apply(x, cos, sin, layout="half"), x, cos, sin, "half")


@pytest.mark.slow
@pytest.mark.parametrize("layout", LAYOUTS)
def test_large_parallel_case(layout):
    """Big enough for both threads and many work items: the memory-order path's parallel kernel on
    (B, H, T, D) and (B, T, H, D) (a table row repeated over heads, across item boundaries), out of
    place and in place, and the planned path's on a strided view."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 8, 1031, 64)).astype(np.float32)
    cos, sin = rope.cos_sin(np.arange(1031), inv_freq(64), layout=layout, dtype=np.float32)
    x_bthd = np.ascontiguousarray(x.transpose(0, 2, 1, 3))
    assert krope._rows_geometry(x_bthd, x_bthd, cos[:, None], sin[:, None], fresh=False) == (1031, 8)
    for inverse in (False, True):
        check_exact(rope_apply(x, cos, sin, layout=layout, inverse=inverse), x, cos, sin, layout, inverse)
        for xc, c, s in ((x, cos, sin), (x_bthd, cos[:, None], sin[:, None])):
            y = xc.copy()
            assert rope_apply(y, c, s, layout=layout, inverse=inverse, out=y) is y
            np.testing.assert_array_equal(y, ref_rotate(xc, c, s, layout, inverse))
        view = x_bthd.transpose(0, 2, 1, 3)  # (B, H, T, D) strides over a (B, T, H, D) buffer
        assert krope._rows_geometry(view, np.empty_like(view), cos, sin, fresh=True) is None
        check_exact(rope_apply(view, cos, sin, layout=layout, inverse=inverse), view, cos, sin, layout, inverse)


def test_float64_tables_with_float32_x_are_cast_first():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 11, 8)).astype(np.float32)
    cos, sin = rope.cos_sin(np.arange(11), inv_freq(8), layout="half", dtype=np.float64)
    got = rope_apply(x, cos, sin, layout="half")
    assert got.dtype == np.float32
    check_exact(got, x, cos, sin, "half")


# --------------------------------------------------------------------------- strides, out=, in place

@pytest.mark.parametrize("layout", LAYOUTS)
def test_negative_and_channel_strides(layout):
    rng = np.random.default_rng(6)
    parent = rng.standard_normal((4, 10, 24))
    cos, sin = rope.cos_sin(np.arange(10), inv_freq(8), layout=layout)
    cases = {
        "reversed rows": parent[:, ::-1, :12],
        "reversed channels": parent[:, :, 11::-1],
        "strided channels": parent[:, :, ::2],
        "channel axis not last in memory": np.asfortranarray(parent[:, :, :12]),
        "everything reversed": parent[::-1, ::-1, ::-2],
    }
    for name, x in cases.items():
        got = rope_apply(x, cos, sin, layout=layout)
        np.testing.assert_array_equal(got, ref_rotate(x, cos, sin, layout), err_msg=name)
    # tables with reversed rows, reversed channels (still a valid table) and column-major memory
    x = parent[:, :, :12]
    tables = {
        "reversed rows": (cos[::-1], sin[::-1]),
        "reversed channels": (cos[:, ::-1], sin[:, ::-1]),
        "column-major": (np.asfortranarray(cos), np.asfortranarray(sin)),
        "cos and sin with different strides": (np.asfortranarray(cos), sin[::-1][::-1].copy()),
    }
    for name, (c, s) in tables.items():
        got = rope_apply(x[:, ::-1], c, s, layout=layout)
        np.testing.assert_array_equal(got, ref_rotate(x[:, ::-1], c, s, layout), err_msg=name)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_in_place_and_out(layout, dtype):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 3, 33, 20)).astype(dtype)
    cos, sin = rope.cos_sin(np.arange(33), inv_freq(16), layout=layout, dtype=dtype)
    want = ref_rotate(x, cos, sin, layout)
    y = x.copy()
    assert rope_apply(y, cos, sin, layout=layout, out=y) is y
    np.testing.assert_array_equal(y, want)
    # in place on a non-contiguous view; the parent outside the view is untouched
    parent = rng.standard_normal((2, 33, 3, 24)).astype(dtype)
    before = parent.copy()
    view = parent[..., 2:22].transpose(0, 2, 1, 3)
    expect = ref_rotate(view, cos, sin, layout)
    rope_apply(view, cos, sin, layout=layout, out=view)
    np.testing.assert_array_equal(view, expect)
    np.testing.assert_array_equal(parent[..., :2], before[..., :2])
    np.testing.assert_array_equal(parent[..., 22:], before[..., 22:])
    # backward in place undoes forward (attention factor 1) up to rounding
    rope_apply(y, cos, sin, layout=layout, inverse=True, out=y)
    np.testing.assert_allclose(y, x, atol=10 * np.finfo(dtype).eps * np.abs(x).max())
    # a separate out array with its own (Fortran) layout
    out = np.empty(x.shape, dtype=dtype, order="F")
    assert rope_apply(x, cos, sin, layout=layout, out=out) is out
    np.testing.assert_array_equal(out, want)


def test_out_partially_overlapping_x_is_safe():
    rng = np.random.default_rng(8)
    buf = rng.standard_normal((12, 8))
    x, out = buf[:-1], buf[1:]
    cos, sin = rope.cos_sin(np.arange(11), inv_freq(8), layout="half")
    want = ref_rotate(x.copy(), cos, sin, "half")
    rope_apply(x, cos, sin, layout="half", out=out)
    np.testing.assert_array_equal(buf[1:], want)


def test_byteswapped_and_misaligned_inputs_copy():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((5, 8))
    cos, sin = rope.cos_sin(np.arange(5), inv_freq(8), layout="interleaved")
    want = ref_rotate(x, cos, sin, "interleaved")
    swapped = x.astype(">f8")
    np.testing.assert_array_equal(rope_apply(swapped, cos, sin, layout="interleaved"), want)
    raw = np.zeros(x.nbytes + 1, dtype=np.uint8)
    misaligned = np.frombuffer(raw.data, dtype=np.float64, count=x.size, offset=1).reshape(x.shape)
    assert not misaligned.flags.aligned
    misaligned[...] = x
    np.testing.assert_array_equal(rope_apply(misaligned, cos, sin, layout="interleaved"), want)
    out = np.empty(x.shape, dtype=">f8")
    rope_apply(x, cos, sin, layout="interleaved", out=out)
    np.testing.assert_array_equal(out, want)


def test_zero_size():
    cos, sin = rope.cos_sin(np.arange(0), inv_freq(4), layout="half")
    x = np.zeros((2, 0, 4))
    assert rope_apply(x, cos, sin, layout="half").shape == (2, 0, 4)


# --------------------------------------------------------------------------- q and k (rope.apply_qk on the kernel)

@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("inverse", [False, True])
def test_qk_equals_two_single_calls(layout, dtype, inverse):
    """Grouped-query shapes (k has fewer heads), both orders, partial rotary, strided k."""
    rng = np.random.default_rng(21)
    t, d = 37, 24
    cos, sin = rope.cos_sin(rng.integers(0, 9000, t), inv_freq(16), layout=layout, dtype=dtype)
    apply_qk = rope.apply_qk_backward if inverse else rope.apply_qk
    for q_shape, k_shape, tables in [((2, 8, t, d), (2, 2, t, d), (cos, sin)),
                                     ((2, t, 6, d), (2, t, 1, d), (cos[:, None], sin[:, None])),
                                     ((t, d), (t, d), (cos, sin))]:
        q = rng.standard_normal(q_shape).astype(dtype)
        k = rng.standard_normal(k_shape[:-1] + (2 * d,)).astype(dtype)[..., ::2]  # channel stride 2
        want_q = ref_rotate(q, *tables, layout, inverse)
        want_k = ref_rotate(k, *tables, layout, inverse)
        got_q, got_k = apply_qk(q, k, *tables, layout=layout, backend="numba")
        np.testing.assert_array_equal(got_q, want_q)
        np.testing.assert_array_equal(got_k, want_k)
        # in place (q) and into a given array (k)
        out_k = np.empty(k.shape, dtype)
        q2 = q.copy()
        res_q, res_k = apply_qk(q2, k, *tables, layout=layout, backend="numba", out_q=q2, out_k=out_k)
        assert res_q is q2 and res_k is out_k
        np.testing.assert_array_equal(q2, want_q)
        np.testing.assert_array_equal(out_k, want_k)


def test_qk_large_parallel_and_empty():
    rng = np.random.default_rng(22)
    q = rng.standard_normal((2, 8, 256, 64)).astype(np.float32)
    k = rng.standard_normal((2, 4, 256, 64)).astype(np.float32)
    cos, sin = rope.cos_sin(np.arange(256), inv_freq(64), dtype=np.float32)
    got_q, got_k = rope.apply_qk(q, k, cos, sin, backend="numba")
    np.testing.assert_array_equal(got_q, ref_rotate(q, cos, sin, "half"))
    np.testing.assert_array_equal(got_k, ref_rotate(k, cos, sin, "half"))
    for q_heads, k_heads in ((0, 4), (8, 0), (0, 0)):  # degenerate head counts
        gq, gk = rope.apply_qk(q[:, :q_heads], k[:, :k_heads], cos, sin, backend="numba")
        assert gq.shape == (2, q_heads, 256, 64) and gk.shape == (2, k_heads, 256, 64)
        np.testing.assert_array_equal(gk, ref_rotate(k[:, :k_heads], cos, sin, "half"))
        np.testing.assert_array_equal(gq, ref_rotate(q[:, :q_heads], cos, sin, "half"))


def test_tables_with_different_strides():
    """cos contiguous, sin a strided view (and the reverse): the kernel lays both out alike."""
    rng = np.random.default_rng(24)
    x = rng.standard_normal((3, 40, 16))
    cos, sin = rope.cos_sin(np.arange(40), inv_freq(16), layout="half")
    sin_t = np.asfortranarray(sin)
    cos_r = np.ascontiguousarray(cos[::-1])[::-1]
    want = ref_rotate(x, cos, sin, "half")
    for c, s in ((cos, sin_t), (cos_r, sin), (cos_r, sin_t)):
        np.testing.assert_array_equal(rope_apply(x, c, s, layout="half"), want)


# --------------------------------------------------------------------------- NaN, inf, determinism, threads

@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_nan_and_inf_propagate_like_numpy(layout, dtype):
    rng = np.random.default_rng(12)
    x = rng.standard_normal((2, 3, 19, 12)).astype(dtype)
    flat = x.reshape(-1)
    idx = rng.choice(flat.size, size=40, replace=False)
    flat[idx[:15]] = np.nan
    flat[idx[15:28]] = np.inf
    flat[idx[28:]] = -np.inf
    cos, sin = rope.cos_sin(np.arange(19), inv_freq(8), layout=layout, dtype=dtype)
    for inverse in (False, True):
        got = rope_apply(x, cos, sin, layout=layout, inverse=inverse)
        want = lib_rotate(x, cos, sin, layout, inverse)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(got, want)  # inf values and signs, finite values


# --------------------------------------------------------------------------- the two paths

def _rng_tables(rng, lead, d, layout, dtype):
    """Tables of shape ``lead + (d,)`` at random positions (a valid layout table per row)."""
    positions = rng.integers(0, 9000, size=lead)
    return rope.cos_sin(positions, inv_freq(d), layout=layout, dtype=dtype)


#: (x shape, table leading shape, rotary dim, (table_rows, rep) of the memory-order path)
ROW_GEOMETRIES = [
    ((2, 3, 17, 12), (17,), 8, (17, 1)),            # (B, H, T, D) with (T, d) tables
    ((2, 17, 3, 12), (17, 1), 12, (17, 3)),         # (B, T, H, D) with (T, 1, d)
    ((2, 3, 17, 12), (2, 3, 17), 8, (102, 1)),      # a table row per row
    ((2, 3, 17, 12), (3, 1), 8, (3, 17)),           # tables per head
    ((2, 1, 17, 12), (2, 1, 17), 8, (34, 1)),       # size-1 axes of x are skipped
    ((4, 12), (1,), 8, (1, 1)),                     # one table row for every row
    ((5, 12), (), 12, (1, 1)),                      # 1-d tables
    # the kernel's items: 64 rows of a period in 8 periods at once, or all rows of a shorter one in as
    # many periods as make 64 rows; the last item of a period or of x may be partial
    ((3, 70, 4), (70,), 4, (70, 1)),                # 3 periods of 70 rows: blocks of 64 + 6
    ((11, 70, 4), (70,), 4, (70, 1)),               # 11 periods of 70 rows: groups of 8 + 3
    ((5, 7, 3, 4), (7, 1), 4, (7, 3)),              # 5 periods of 21 rows, 4 to an item
    ((130, 4), (1,), 4, (1, 1)),                    # 130 periods of one row, 64 to an item
]


@pytest.mark.parametrize("threads", ["serial", "parallel"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,t_lead,d,rows", ROW_GEOMETRIES, ids=lambda v: str(v).replace(" ", ""))
def test_memory_order_path_takes_the_right_table_row(shape, t_lead, d, rows, layout, dtype, threads, monkeypatch):
    """C-contiguous calls rotate in memory order, row ``r`` with table row ``(r // rep) % table_rows``:
    the geometry is the one the shapes imply, and the result is the formula's bit for bit, out of
    place, into ``out=``, in place and backward; in the serial copies these small calls take, and
    in the parallel kernels (which also prefetch rows ahead), here made to take them."""
    if threads == "parallel":
        monkeypatch.setattr(krope, "_ELEMENTS_PER_THREAD", 1)
    rng = np.random.default_rng(21)
    x = rng.standard_normal(shape).astype(dtype)
    cos, sin = _rng_tables(rng, t_lead, d, layout, dtype)
    assert krope._rows_geometry(x, np.empty_like(x), cos, sin, fresh=True) == rows
    for inverse in (False, True):
        want = ref_rotate(x, cos, sin, layout, inverse)
        np.testing.assert_array_equal(rope_apply(x, cos, sin, layout=layout, inverse=inverse), want)
        out = np.empty_like(x)
        assert rope_apply(x, cos, sin, layout=layout, inverse=inverse, out=out) is out
        np.testing.assert_array_equal(out, want)
        y = x.copy()
        assert rope_apply(y, cos, sin, layout=layout, inverse=inverse, out=y) is y
        np.testing.assert_array_equal(y, want)


def test_calls_outside_the_memory_order_form_take_the_planned_path():
    """Strided or broadcast arrays, tables varying along axes that are not one run of x's, and an
    output overlapping x (other than exactly) or the tables take the planned path; a read-only
    table or an ``out`` that is a new view of x (in place) does not need it. Results stay the formula's."""
    rng = np.random.default_rng(23)
    x = rng.standard_normal((3, 10, 8))
    cos, sin = rope.cos_sin(np.arange(10), inv_freq(8), layout="half")
    frozen_cos = cos.copy()
    frozen_cos.flags.writeable = False
    buf = np.zeros(x.size + 1)
    x4 = rng.standard_normal((2, 3, 10, 8))
    c4, s4 = _rng_tables(rng, (2, 1, 10), 8, "half", np.float64)
    cases = {  # name: (x, out, cos, sin, memory order?)
        "strided x": (rng.standard_normal((3, 10, 16))[..., ::2], None, cos, sin, False),
        "broadcast tables": (x, None, np.broadcast_to(cos, (3,) + cos.shape),
                             np.broadcast_to(sin, (3,) + cos.shape), False),
        "tables per batch and position, x (B, H, T, D)": (x4, None, c4, s4, False),
        "out one element past x": (buf[:-1].reshape(x.shape), "shifted", cos, sin, False),
        "out over the tables": (x, "cos", cos.copy(), sin, False),
        "read-only tables": (x, None, frozen_cos, sin, True),
        "out a new view of x": (x.copy(), "view", cos, sin, True),
    }
    for name, (xc, how, c, s, memory_order) in cases.items():
        if how == "shifted":
            xc[...] = x
        out = {"view": xc[...], "shifted": buf[1:].reshape(x.shape)}.get(how) if how else None
        if how == "cos":  # out shares the tables' memory: (10, 8) tables inside a (3, 10, 8) out
            big = np.empty(x.shape)
            big[0] = c
            c, out = big[0], big
        expect = ref_rotate(xc, np.array(c), np.array(s), "half")
        target = np.empty_like(xc) if out is None else out
        assert (krope._rows_geometry(xc, target, c, s, fresh=out is None) is not None) == memory_order, name
        got = rope_apply(xc, c, s, layout="half", out=out)
        np.testing.assert_array_equal(got, expect, err_msg=name)


def test_plan_cache_keeps_no_array_alive():
    """The planned path keeps the offsets of small geometries (strided q, k views of a training
    loop), never an array of a call."""
    base = np.random.default_rng(22).standard_normal((2, 9, 4, 16)).astype(np.float32)
    x = base[..., :8].transpose(0, 2, 1, 3)  # (B, H, T, D) view of a (B, T, H, 2D) buffer
    cos, sin = rope.cos_sin(np.arange(9), inv_freq(8), layout="half", dtype=np.float32)
    out = np.empty(x.shape, np.float32)
    for _ in range(2):
        rope_apply(x, cos, sin, layout="half", out=out)
    assert krope._cached_plan.cache_info().hits >= 1
    refs = [weakref.ref(a) for a in (base, cos, sin, out)]
    del base, x, cos, sin, out
    gc.collect()
    assert all(r() is None for r in refs)


def test_deterministic_run_to_run():
    rng = np.random.default_rng(13)
    x = rng.standard_normal((4, 8, 257, 64)).astype(np.float32)
    cos, sin = rope.cos_sin(np.arange(257), inv_freq(64), layout="interleaved", dtype=np.float32)
    first = rope_apply(x, cos, sin, layout="interleaved").tobytes()
    for _ in range(3):
        assert rope_apply(x, cos, sin, layout="interleaved").tobytes() == first


def test_two_python_threads_at_once():
    rng = np.random.default_rng(14)
    jobs = []
    for k in range(2):  # big enough for both Numba threads in each call
        x = rng.standard_normal((2, 4, 1100 + k, 64)).astype(np.float32)
        cos, sin = rope.cos_sin(np.arange(1100 + k), inv_freq(64), layout="half", dtype=np.float32)
        jobs.append((x, cos, sin, ref_rotate(x, cos, sin, "half")))
    errors = []
    barrier = threading.Barrier(2)

    def work(x, cos, sin, want):
        try:
            barrier.wait()
            for i in range(20):
                got = rope_apply(x, cos, sin, layout="half") if i % 2 else \
                    rope_apply(x, cos, sin, layout="half", out=np.empty_like(x))
                if not np.array_equal(got, want):
                    errors.append("mismatch")
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(repr(exc))

    threads = [threading.Thread(target=work, args=job) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "kernel call hung"
    assert errors == []


# --------------------------------------------------------------------------- errors

def test_bad_input_raises_clear_errors():
    x = np.zeros((2, 5, 8), dtype=np.float32)
    cos, sin = rope.cos_sin(np.arange(5), inv_freq(8), layout="half")
    with pytest.raises(TypeError, match="x must be a float32 or float64"):
        rope_apply(x.astype(np.int32), cos, sin, layout="half")
    with pytest.raises(TypeError, match="float16"):
        rope_apply(x.astype(np.float16), cos, sin, layout="half")
    with pytest.raises(ValueError, match="layout"):
        rope_apply(x, cos, sin, layout="neox")
    with pytest.raises(ValueError, match="must broadcast to x's leading shape"):
        rope_apply(x, cos[:4], sin[:4], layout="half")
    with pytest.raises(ValueError, match="same shape"):
        rope_apply(x, cos, sin[:, :6], layout="half")
    with pytest.raises(ValueError, match="even, positive"):
        rope_apply(x, cos[:, :7], sin[:, :7], layout="half")
    with pytest.raises(ValueError, match="wider"):
        rope_apply(x[..., :6], cos, sin, layout="half")
    with pytest.raises(ValueError, match="out must have x's shape"):
        rope_apply(x, cos, sin, layout="half", out=np.zeros((2, 5, 9), np.float32))
    with pytest.raises(TypeError, match="out must have x's dtype"):
        rope_apply(x, cos, sin, layout="half", out=np.zeros_like(x, dtype=np.float64))
    ro = np.zeros_like(x)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        rope_apply(x, cos, sin, layout="half", out=ro)
    with pytest.raises(ValueError, match="zero stride"):
        rope_apply(x[:1], cos, sin, layout="half",
                   out=np.lib.stride_tricks.as_strided(np.zeros(8, np.float32), (1, 5, 8), (0, 0, 4)))
    with pytest.raises(TypeError, match="out must be a NumPy array"):
        rope_apply(x, cos, sin, layout="half", out=[0.0])
    with pytest.raises(ValueError, match="channel axis"):
        rope_apply(np.float32(1.0), cos, sin, layout="half")


def test_threshold_constant():
    assert isinstance(ROPE_NUMBA_MIN_ELEMENTS, int) and ROPE_NUMBA_MIN_ELEMENTS > 0


# --------------------------------------------------------------------------- import, cache

def run_python(code, env=None, timeout=300):
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = ROOT + os.pathsep + full_env.get("PYTHONPATH", "")
    full_env.update(env or {})
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=full_env, timeout=timeout, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_import_posenc_np_does_not_import_numba():
    proc = run_python("""
        import sys
        import posenc_np
        import posenc_np.kernels
        import posenc_np._backend
        assert posenc_np._backend.ROPE_NUMBA_MIN_ELEMENTS > 0  # the auto switch needs no Numba
        assert "numba" not in sys.modules, "import posenc_np imported numba"
        posenc_np.kernels.rope_apply  # first access imports the kernel module (and numba) ...
        assert "numba" in sys.modules
        from posenc_np.kernels import rope as k
        assert k._rope_kernel.signatures == [], "... but compiles nothing"
        print("ok")
    """)
    assert proc.stdout.strip() == "ok"


def test_resolve_cache_dir_falls_back(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    bad = str(blocker / "cache")  # cannot be created, even by root
    good = str(tmp_path / "cache")
    assert _numba._resolve_cache_dir([(bad, False), (good, False)]) == good
    assert _numba._resolve_cache_dir([(bad, False)]) is None
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    os.chmod(shared, 0o777)  # group/world-writable: not trusted as a private cache
    assert _numba._resolve_cache_dir([(str(shared), True)]) is None


def test_unwritable_cache_dir_still_works(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    unwritable = str(blocker / "numba_cache")
    code = f"""
        import numpy as np
        from posenc_np.kernels import _numba, rope_apply
        from posenc_np import rope
        assert _numba.cache_dir() != {unwritable!r}, _numba.cache_dir()
        x = np.ones((3, 4, 8))
        c, s = rope.cos_sin(np.arange(4), 10000.0 ** (-np.arange(0, 8, 2) / 8), layout="half")
        assert np.array_equal(rope_apply(x, c, s, layout="half"), rope.apply(x, c, s, layout="half", backend="numpy"))
        print(_numba.cache_dir())
    """
    # NUMBA_CACHE_DIR, HOME and TMPDIR all unusable: falls back to the package cache.
    proc = run_python(code, env={"NUMBA_CACHE_DIR": unwritable, "HOME": unwritable, "TMPDIR": unwritable})
    assert proc.stdout.strip() == _numba._PACKAGE_CACHE or os.access(proc.stdout.strip(), os.W_OK)


@pytest.mark.slow
def test_nothing_writable_compiles_without_cache(tmp_path):
    """No writable cache anywhere: no caching, no failure (this subprocess compiles cold)."""
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    code = """
        import numpy as np
        from posenc_np.kernels import _numba
        _numba._candidate_dirs = lambda: iter([({bad!r}, False), ({bad!r}, True)])
        from posenc_np.kernels import rope_apply
        from posenc_np import rope
        assert _numba.cache_dir() is None
        x = np.ones((2, 3, 6))
        c, s = rope.cos_sin(np.arange(3), 10000.0 ** (-np.arange(0, 4, 2) / 4), layout="interleaved")
        y = rope_apply(x, c, s, layout="interleaved")
        assert np.array_equal(y, rope.apply(x, c, s, layout="interleaved", backend="numpy"))
        print("ok")
    """.format(bad=str(blocker / "cache"))
    assert run_python(code).stdout.strip() == "ok"


def test_shared_blas_limit_is_reentrant_and_restored():
    from threadpoolctl import threadpool_info

    def blas_threads():
        return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]

    with _numba.blas_single_thread():
        before_inner = blas_threads()
        with _numba.blas_single_thread():
            assert set(blas_threads()) == {1}
        assert blas_threads() == before_inner  # an inner exit does not lift the limit
        assert set(blas_threads()) == {1}
    outside = blas_threads()
    with _numba.blas_single_thread():
        pass
    assert blas_threads() == outside
    assert _numba.FASTMATH.isdisjoint({"nnan", "ninf", "fast"})


@pytest.mark.parametrize("preset, expected", [(None, "PASSIVE"), ("ACTIVE", "ACTIVE")])
def test_openmp_threads_wait_passively_unless_the_user_chose(preset, expected):
    """Kernels set OMP_WAIT_POLICY=PASSIVE before Numba loads OpenMP (see kernels/_numba.py),
    and leave a user's own setting alone."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if preset:
        env["OMP_WAIT_POLICY"] = preset
    code = "import os, posenc_np.kernels._numba; print(os.environ['OMP_WAIT_POLICY'])"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == expected
