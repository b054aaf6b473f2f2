"""Fused ALiBi attention kernel (posenc_np.kernels.alibi) against the NumPy references.

References: ``posenc_np.attention.forward/backward`` with an ALiBi bias built here from the
formula (slopes ``2^(-8h/n)``), and ``posenc_np.alibi.attention(..., backend="numpy")``.

Tolerances. float64: ``atol = rtol = 1e-12`` (measured worst ~6e-15 on these cases; the
kernel's exponential is a polynomial within 0.91 ulp (float32) or 2 ulp (float64), and the sums run in another order).
float32 (computed and accumulated in float32): errors are normalised by
``max(1, max |reference|)`` per output. The fused error must stay below ``F32_ATOL`` = 2e-6
and below ``F32_RATIO`` = 4 times the error of the NumPy reference evaluated in float32 plus
1e-6. Measured (H=8, d=64, T up to 1024): fused <= 7.5e-7, NumPy float32 <= 1.6e-6; the
worst fused case is T=1 where dQ, dK are exactly 0 and FlashAttention-2's
``D = rowsum(dO * O)`` cancels against ``dP`` only to float32 rounding.

Every kernel is compiled once per dtype (and cached on disk); shapes do not recompile.
"""

from __future__ import annotations

import math
import threading
import tracemalloc

import numpy as np
import pytest

from posenc_np import alibi, attention
from posenc_np.kernels import _numba
from posenc_np.kernels import alibi as kalibi
from posenc_np.testing import gradcheck

F64_TOL = 1e-12
F32_RATIO = 4.0
F32_ATOL = 2e-6


def paper_slopes(n):
    """``2^(-8h/n)``, h = 1..n (power-of-two n)."""
    return 2.0 ** (-8.0 * np.arange(1, n + 1) / n)


def reference(q, k, v, m, causal, dout, scale=None):
    """NumPy attention core with the ALiBi bias written from the formula (bottom-right)."""
    q_len, k_len = q.shape[-2], k.shape[-2]
    qpos = np.arange(q_len)[:, None] + (k_len - q_len)
    dist = qpos - np.arange(k_len)[None, :]  # q - k
    m = np.asarray(m, dtype=np.float64)[:, None, None]
    b = -m * dist if causal else -m * np.abs(dist)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    out, cache = attention.forward(q, k, v, bias=b.astype(q.dtype), causal=causal, scale=scale)
    g = attention.backward(dout, cache)
    return out, g["q"], g["k"], g["v"]


def fused(q, k, v, m, causal, dout, scale=None):
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    out, lse = kalibi.alibi_attention_forward(q, k, v, m, causal=causal, scale=scale)
    dq, dk, dv = kalibi.alibi_attention_backward(dout, q, k, v, out, lse, m, causal=causal, scale=scale)
    return out, dq, dk, dv


def make(rng, lead, heads, q_len, k_len, d, d_v=None, dtype=np.float64):
    d_v = d if d_v is None else d_v
    shapes = [lead + (heads, q_len, d), lead + (heads, k_len, d), lead + (heads, k_len, d_v),
              lead + (heads, q_len, d_v)]
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


def assert_f64_close(got, want):
    for name, g, w in zip(("out", "dq", "dk", "dv"), got, want):
        assert g.shape == w.shape and g.dtype == np.float64, name
        np.testing.assert_allclose(g, w, rtol=F64_TOL, atol=F64_TOL, err_msg=name)


# --------------------------------------------------------------------------- float64, exact shapes

LENGTHS = [(1, 1), (7, 7), (33, 33), (130, 130), (7, 33), (33, 7), (1, 130), (130, 1), (65, 200), (200, 65)]


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "symmetric"])
@pytest.mark.parametrize("q_len,k_len", LENGTHS)
def test_float64_matches_reference(q_len, k_len, causal):
    rng = np.random.default_rng(q_len * 1000 + k_len)
    q, k, v, do = make(rng, (2,), 4, q_len, k_len, 16, d_v=12)
    m = paper_slopes(4)
    got = fused(q, k, v, m, causal, do)
    assert_f64_close(got, reference(q, k, v, m, causal, do))
    if causal and q_len > k_len:  # the first q_len - k_len queries see no key at all
        out, lse = kalibi.alibi_attention_forward(q, k, v, m, causal=True, scale=0.25)
        dead = q_len - k_len
        assert np.all(out[..., :dead, :] == 0) and np.all(lse[..., :dead] == -np.inf)
        assert np.all(np.isfinite(lse[..., dead:]))
        assert np.all(got[1][..., :dead, :] == 0)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "symmetric"])
def test_matches_alibi_numpy_backend(causal):
    rng = np.random.default_rng(5)
    q, k, v, do = make(rng, (), 12, 70, 90, 8)
    m = alibi.slopes(12)  # non-power-of-two head count: the paper's interleaved rule
    out_ref, cache = alibi.attention(q, k, v, causal=causal, backend="numpy")
    g_ref = alibi.attention_backward(do, cache)
    got = fused(q, k, v, m, causal, do)
    assert_f64_close(got, (out_ref, g_ref["q"], g_ref["k"], g_ref["v"]))


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "symmetric"])
def test_layouts_leading_axes_and_explicit_slopes(causal):
    rng = np.random.default_rng(11)
    # several leading axes, one head, explicit non-paper slopes (including 0 = no bias)
    for lead, heads, m in [((2, 3), 1, np.array([0.3])), ((), 5, np.array([0.0, 0.01, 1.5, 0.25, 0.7])),
                           ((3,), 3, np.array([1.0, 0.5, 0.0]))]:
        q, k, v, do = make(rng, lead, heads, 37, 45, 8, d_v=5)
        assert_f64_close(fused(q, k, v, m, causal, do), reference(q, k, v, m, causal, do))
    # explicit scale
    q, k, v, do = make(rng, (), 2, 20, 20, 4)
    m = paper_slopes(2)
    assert_f64_close(fused(q, k, v, m, causal, do, scale=0.9), reference(q, k, v, m, causal, do, scale=0.9))


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "symmetric"])
def test_non_contiguous_strided_and_offset_inputs(causal):
    rng = np.random.default_rng(12)
    batch, t, heads, d = 2, 41, 4, 8
    # (batch, T, heads, d) projections viewed as (batch, heads, T, d): transposed strides
    qt, kt, vt, dot = (rng.standard_normal((batch, t, heads, d)) for _ in range(4))
    q, k, v, do = (x.swapaxes(1, 2) for x in (qt, kt, vt, dot))
    # a strided view (every other key) and an offset view (skipping the first query)
    big = rng.standard_normal((batch, heads, 2 * t, d))
    k2 = big[:, :, ::2, :]
    q3 = rng.standard_normal((batch, heads, t + 1, d))[:, :, 1:, :]
    m = paper_slopes(heads)
    for args in [(q, k, v, do), (q, k2, v, do), (q3, k2, v, do), (q3[..., ::-1, :], k, v[..., ::-1], do)]:
        assert not all(a.flags.c_contiguous for a in args)
        want = reference(*(np.ascontiguousarray(a) for a in args[:3]), m, causal, np.ascontiguousarray(args[3]))
        assert_f64_close(fused(*args[:3], m, causal, args[3]), want)


# --------------------------------------------------------------------------- float32

def _max_err(got, want):
    return max(float(np.max(np.abs(g.astype(np.float64) - w))) / max(1.0, float(np.max(np.abs(w))))
               for g, w in zip(got, want))


@pytest.mark.slow
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "symmetric"])
@pytest.mark.parametrize("q_len,k_len", [(1, 1), (33, 33), (130, 130), (257, 300), (300, 257)])
def test_float32_error_bound(q_len, k_len, causal):
    rng = np.random.default_rng(q_len + 7 * k_len)
    q, k, v, do = make(rng, (), 8, q_len, k_len, 64)
    m = paper_slopes(8)
    want = reference(q, k, v, m, causal, do)
    f32 = [x.astype(np.float32) for x in (q, k, v, do)]
    got = fused(*f32[:3], m, causal, f32[3])
    assert all(g.dtype == np.float32 for g in got)
    numpy32 = reference(*f32[:3], m, causal, f32[3])
    err, err_np = _max_err(got, want), _max_err(numpy32, want)
    assert err <= F32_RATIO * err_np + 1e-6, (err, err_np)
    assert err <= F32_ATOL, err


def test_float32_matches_alibi_numpy_backend():
    rng = np.random.default_rng(3)
    q, k, v, do = (x.astype(np.float32) for x in make(rng, (2,), 4, 100, 100, 32))
    out_ref, cache = alibi.attention(q, k, v, causal=True, backend="numpy")
    g_ref = alibi.attention_backward(do, cache)
    got = fused(q, k, v, alibi.slopes(4), True, do)
    for g, w in zip(got, (out_ref, g_ref["q"], g_ref["k"], g_ref["v"])):
        np.testing.assert_allclose(g, w, rtol=0, atol=F32_ATOL * max(1.0, float(np.abs(w).max())))


def test_mixed_dtypes_promote_and_bad_dtypes_raise():
    rng = np.random.default_rng(4)
    q, k, v, _ = make(rng, (), 2, 5, 5, 4)
    out, lse = kalibi.alibi_attention_forward(q.astype(np.float32), k, v, paper_slopes(2), causal=True, scale=0.5)
    assert out.dtype == np.float64 and lse.dtype == np.float64
    out, lse = kalibi.alibi_attention_forward(q.astype(np.float16), k.astype(np.float32), v.astype(np.float16),
                                              paper_slopes(2), causal=True, scale=0.5)
    assert out.dtype == np.float32 and lse.dtype == np.float32  # float16 with float32: computed and returned in float32
    with pytest.raises(TypeError, match="float16, bfloat16, float32 or float64"):
        kalibi.alibi_attention_forward(q.astype(int), k.astype(int), v.astype(int), paper_slopes(2),
                                       causal=True, scale=0.5)


def test_argument_errors_name_the_argument():
    rng = np.random.default_rng(4)
    q, k, v, do = make(rng, (), 2, 5, 6, 4)
    m = paper_slopes(2)
    with pytest.raises(ValueError, match="q, k, v"):
        kalibi.alibi_attention_forward(q, k[..., :3], v, m, causal=True, scale=0.5)
    with pytest.raises(ValueError, match="slopes"):
        kalibi.alibi_attention_forward(q, k, v, paper_slopes(3), causal=True, scale=0.5)
    with pytest.raises(TypeError, match="causal"):
        kalibi.alibi_attention_forward(q, k, v, m, causal="yes", scale=0.5)
    with pytest.raises(TypeError, match="query_offset"):
        kalibi.alibi_attention_forward(q, k, v, m, causal=True, scale=0.5, query_offset=1.5)
    with pytest.raises(ValueError, match="scale"):
        kalibi.alibi_attention_forward(q, k, v, m, causal=True, scale=-1.0)
    with pytest.raises(ValueError, match="slopes"):
        kalibi.alibi_attention_forward(q, k, v, np.array([0.5, np.nan]), causal=True, scale=0.5)
    out, lse = kalibi.alibi_attention_forward(q, k, v, m, causal=True, scale=0.5)
    with pytest.raises(ValueError, match="lse"):
        kalibi.alibi_attention_backward(do, q, k, v, out, lse[..., :2], m, causal=True, scale=0.5)
    with pytest.raises(ValueError, match="dout"):
        kalibi.alibi_attention_backward(do[..., :2, :], q, k, v, out, lse, m, causal=True, scale=0.5)


def test_query_offset_places_queries():
    # queries at positions 3..7 of a 12-key sequence (causal keeps keys <= position)
    rng = np.random.default_rng(8)
    q, k, v, _ = make(rng, (), 2, 5, 12, 4)
    m = paper_slopes(2)
    out, lse = kalibi.alibi_attention_forward(q, k, v, m, causal=True, scale=0.5, query_offset=3)
    b = alibi.bias(2, 5, 12, form="causal", slopes=m, query_offset=3)
    keep = np.arange(12)[None, :] <= np.arange(5)[:, None] + 3
    want, _ = attention.forward(q, k, v, bias=b, mask=keep, scale=0.5)
    np.testing.assert_allclose(out, want, rtol=F64_TOL, atol=F64_TOL)


def test_empty_inputs():
    m = paper_slopes(2)
    q = np.zeros((2, 0, 4))
    k = np.zeros((2, 3, 4))
    out, lse = kalibi.alibi_attention_forward(q, k, k, m, causal=True, scale=0.5)
    assert out.shape == (2, 0, 4) and lse.shape == (2, 0)
    q = np.ones((2, 3, 4))
    out, lse = kalibi.alibi_attention_forward(q, np.zeros((2, 0, 4)), np.zeros((2, 0, 5)), m, causal=False, scale=0.5)
    assert out.shape == (2, 3, 5) and np.all(out == 0) and np.all(lse == -np.inf)


# --------------------------------------------------------------------------- NaN / inf
#
# Rule: an output entry that depends on a NaN/inf input through a kept (unmasked) position is
# non-finite exactly as in the reference. Entries that touch a non-finite input only through a
# masked position (probability 0) are unspecified: the reference leaks NaN into all of them
# through ``0 * nan`` in its full-size products; the kernel never reads skipped tiles, so it
# leaks into a subset (rows/keys of the same 64-row tile) and everything else stays exact.

def _check_nonfinite(got, want, exact):
    for name, g, w in zip(("out", "dq", "dk", "dv"), got, want):
        if name in exact:
            np.testing.assert_array_equal(np.isnan(g), np.isnan(w), err_msg=f"NaN pattern of {name}")
            np.testing.assert_array_equal(np.isinf(g), np.isinf(w), err_msg=f"inf pattern of {name}")
        else:  # non-finite only where the reference is non-finite too
            assert not np.any(~np.isfinite(g) & np.isfinite(w)), name
        both = np.isfinite(g) & np.isfinite(w)
        np.testing.assert_allclose(g[both], w[both], rtol=1e-12, atol=1e-12, err_msg=name)


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # inf - inf in the reference
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_nonfinite_inputs_symmetric_propagate_exactly_like_reference(value):
    rng = np.random.default_rng(9)
    q, k, v, do = make(rng, (), 3, 70, 75, 8)
    m = paper_slopes(4)[:3]
    q[0, 5, 3] = value  # one query row
    k[1, 20, 0] = value  # one key
    v[2, 66, 1] = value  # one value
    got, want = fused(q, k, v, m, False, do), reference(q, k, v, m, False, do)
    _check_nonfinite(got, want, exact=("out", "dq", "dk", "dv"))
    assert np.all(np.isnan(got[0][0, 5])) and np.all(np.isnan(got[1][0, 5]))


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # inf - inf in the reference
@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_nonfinite_inputs_causal_propagate_like_reference(value):
    rng = np.random.default_rng(9)
    q, k, v, do = make(rng, (), 2, 150, 150, 8)
    m = paper_slopes(2)
    q[0, 5, 3] = value  # query 5: its output row and dq row
    k[1, 100, 0] = value  # key 100: every query >= 100 keeps it
    got, want = fused(q, k, v, m, True, do), reference(q, k, v, m, True, do)
    _check_nonfinite(got, want, exact=("out",))
    out, dq, dk, dv = got
    assert np.all(np.isnan(out[0, 5])) and np.all(np.isfinite(out[0, 6:])) and np.all(np.isfinite(out[1, :100]))
    if np.isnan(value):  # (an infinite key gives -inf logits, i.e. masked, for some queries)
        assert np.all(np.isnan(out[1, 100:])) and np.all(np.isnan(dq[1, 100:]))
    assert np.all(np.isnan(dq[0, 5])) and np.all(np.isnan(dk[1, 100]))
    # keys in tiles after the one holding query 5 never meet it (exact values, no NaN)
    assert np.all(np.isfinite(dk[0, 64:])) and np.all(np.isfinite(dv[0, 64:]))


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # inf - inf in the reference
def test_nonfinite_values_causal():
    rng = np.random.default_rng(10)
    q, k, v, do = make(rng, (), 2, 150, 150, 8)
    m = paper_slopes(2)
    v[0, 100, 2] = np.nan
    v[1, 70, 1] = np.inf
    got, want = fused(q, k, v, m, True, do), reference(q, k, v, m, True, do)
    _check_nonfinite(got, want, exact=())
    out = got[0]
    # queries that keep the key are non-finite in that channel in both
    assert np.all(np.isnan(out[0, 100:, 2])) and np.all(np.isnan(want[0][0, 100:, 2]))
    assert np.all(~np.isfinite(out[1, 70:, 1]))
    # queries in earlier tiles do not depend on it: finite and equal to the clean reference
    clean = v.copy()
    clean[0, 100, 2] = 0.0
    clean[1, 70, 1] = 0.0
    want_clean = reference(q, k, clean, m, True, do)[0]
    np.testing.assert_allclose(out[:, :64], want_clean[:, :64], rtol=1e-12, atol=1e-12)


# --------------------------------------------------------------------------- determinism, threads

def test_bit_identical_run_to_run():
    rng = np.random.default_rng(13)
    for dtype in (np.float32, np.float64):
        q, k, v, do = (x.astype(dtype) for x in make(rng, (2,), 3, 300, 300, 32))
        m = paper_slopes(4)[:3]
        first = fused(q, k, v, m, True, do)
        for _ in range(2):
            again = fused(q, k, v, m, True, do)
            for a, b in zip(first, again):
                assert np.array_equal(a, b, equal_nan=True)


def test_two_python_threads_at_once():
    rng = np.random.default_rng(14)
    jobs = [(x.astype(np.float32) for x in make(rng, (), 4, 400, 400, 32)) for _ in range(2)]
    jobs = [tuple(j) for j in jobs]
    m = paper_slopes(4)
    expected = [fused(q, k, v, m, causal, do) for (q, k, v, do), causal in zip(jobs, (True, False))]
    before = _blas_threads()
    barrier = threading.Barrier(2)
    results, errors = [None, None], []

    def work(i):
        try:
            barrier.wait()
            q, k, v, do = jobs[i]
            for _ in range(3):
                results[i] = fused(q, k, v, m, i == 0, do)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "kernel calls from two threads hung"
    assert not errors, errors
    for got, want in zip(results, expected):
        for a, b in zip(got, want):
            assert np.array_equal(a, b)
    assert _blas_threads() == before, "BLAS thread limits were not restored"


def _blas_threads():
    from threadpoolctl import threadpool_info
    return sorted((i["filepath"], i["num_threads"]) for i in threadpool_info() if i["user_api"] == "blas")


@pytest.mark.slow
def test_blas_is_single_threaded_inside_kernels_and_restored_after():
    rng = np.random.default_rng(15)
    q, k, v, do = (x.astype(np.float32) for x in make(rng, (), 2, 256, 256, 64))
    fused(q, k, v, paper_slopes(2), True, do)
    before = _blas_threads()
    with kalibi.blas_single_thread():
        with kalibi.blas_single_thread():  # re-entrant
            inside = _blas_threads()
        assert _blas_threads() == inside
    # every loaded BLAS, including scipy's (the one Numba's np.dot calls), is at one thread
    assert inside and all(n == 1 for _, n in inside)
    assert _blas_threads() == before


@pytest.mark.slow
@pytest.mark.parametrize("method,splits", [("two-pass", 1), ("one-pass", 3)])
def test_result_does_not_depend_on_thread_count(method, splits):
    """For a given backward method and key split, results are bit-identical on any thread count
    (each output row is computed by one work item in a fixed order). ``"auto"`` picks both from
    the thread count, so across thread counts auto results may differ by rounding."""
    import numba
    rng = np.random.default_rng(18)
    q, k, v, do = (x.astype(np.float32) for x in make(rng, (), 3, 200, 200, 16))
    m = paper_slopes(4)[:3]

    def run():
        out, lse = kalibi.alibi_attention_forward(q, k, v, m, causal=True, scale=0.25, key_splits=splits)
        return (out,) + kalibi.alibi_attention_backward(do, q, k, v, out, lse, m, causal=True, scale=0.25,
                                                        method=method)
    many = run()
    saved = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        one = run()
    finally:
        numba.set_num_threads(saved)
    for a, b in zip(many, one):
        assert np.array_equal(a, b)


def test_no_blas_warning_or_hang_under_openmp_layer():
    # a fresh process with Numba's OpenMP threading layer and a threaded BLAS: a forward and
    # backward must finish (timeout = hang) without OpenBLAS printing anything
    import os
    import subprocess
    import sys
    code = ("import numpy as np; from posenc_np.kernels import alibi as a; import numba\n"
            "r = np.random.default_rng(0); q, k, v, g = (r.standard_normal((2, 4, 300, 64), dtype=np.float32) "
            "for _ in range(4))\n"
            "m = 2.0 ** -np.arange(1, 5)\n"
            "for c in (True, False):\n"
            "    o, l = a.alibi_attention_forward(q, k, v, m, causal=c, scale=0.125)\n"
            "    a.alibi_attention_backward(g, q, k, v, o, l, m, causal=c, scale=0.125)\n"
            "print(numba.threading_layer())\n")
    env = dict(os.environ, NUMBA_THREADING_LAYER="omp")
    env.pop("OPENBLAS_NUM_THREADS", None)
    env.pop("OMP_NUM_THREADS", None)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "omp"
    assert "openblas" not in res.stderr.lower() and "hang" not in res.stderr.lower(), res.stderr


# --------------------------------------------------------------------------- memory, gradcheck, import

def test_never_allocates_a_score_matrix():
    # tracemalloc sees NumPy's and Numba's (NRT) allocations, including those in prange threads
    t, heads, d = 1024, 2, 16
    rng = np.random.default_rng(16)
    q, k, v, do = (x.astype(np.float32) for x in make(rng, (), heads, t, t, d))
    m = paper_slopes(heads)
    fused(q[..., :70, :], k[..., :70, :], v[..., :70, :], m, True, do[..., :70, :])  # compile outside
    one_matrix = 4 * t * t  # a single (q_len, k_len) float32 matrix: 4 MiB
    outputs = q.nbytes  # 128 KiB: out (forward: it copies no input); dq, dk, dv and, since two heads
    #                     take the two-pass backward, the transposed q, dO, k and v (backward)
    slack = 256 * 1024  # 64x64 tiles (16 KiB each) per thread, lse, small arrays
    for causal in (True, False):
        tracemalloc.start()
        try:
            out, lse = kalibi.alibi_attention_forward(q, k, v, m, causal=causal, scale=0.2)
            _, fwd_peak = tracemalloc.get_traced_memory()
            tracemalloc.reset_peak()
            start, _ = tracemalloc.get_traced_memory()
            kalibi.alibi_attention_backward(do, q, k, v, out, lse, m, causal=causal, scale=0.2)
            _, bwd_peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert fwd_peak <= outputs + slack <= one_matrix / 8, fwd_peak
        assert bwd_peak - start <= 7 * outputs + slack < one_matrix / 2, bwd_peak - start
    # the one-pass backward copies no input either: dq, dk, dv and tile buffers (its copies of q and
    # dO, 2 * outputs, would not fit)
    small = (x[..., :70, :] for x in (do, q, k, v, out))
    kalibi.alibi_attention_backward(*small, lse[..., :70], m, causal=True, scale=0.2, method="one-pass")  # compile
    tracemalloc.start()
    try:
        start, _ = tracemalloc.get_traced_memory()
        kalibi.alibi_attention_backward(do, q, k, v, out, lse, m, causal=True, scale=0.2, method="one-pass")
        _, one_pass_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert one_pass_peak - start <= 3 * outputs + slack // 2, one_pass_peak - start


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "symmetric"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_transposed_score_step_matches_the_row_form(causal, dtype):
    # the BLAS path's score step (_fwd_scores_t, on S^T) against the decoding path's (_fwd_scores, on S):
    # the same masks and non-finite rows, and the same values up to a rounding of the logits (the kernel
    # flags allow fused multiply-adds, and LLVM contracts the two loops differently)
    rng = np.random.default_rng(21)
    ft = dtype
    eps = np.finfo(ft).eps
    ninf, m, scale = ft(-np.inf), ft(-0.0625), ft(0.37)
    for pos0, j0, first in ((500, 0, False), (40, 64, True), (10, 0, True), (-30, 0, True)):
        s = (rng.standard_normal((48, 64)) * 4).astype(ft)
        s[3, 5], s[7, 9], s[11, 2] = np.nan, np.inf, -np.inf
        row_max = np.full(48, ninf, ft) if first else (rng.standard_normal(48) * 3).astype(ft)
        row_max[20] = np.nan
        srow, mrow, lrow, arow = s.copy(), row_max.copy(), np.ones(48, ft), np.empty(48, ft)
        kalibi._fwd_scores(srow, pos0, j0, causal, m, scale, ninf, mrow, lrow, arow)
        st, mcol, lcol, acol = s.T.copy(), row_max.copy(), np.ones(48, ft), np.empty(48, ft)
        kalibi._fwd_scores_t(st, pos0, j0, causal, m, scale, ninf, mcol, lcol, acol, np.empty(48, ft),
                             np.empty(48, np.bool_), np.arange(48).astype(ft))
        nan_rows = np.isnan(mrow)
        np.testing.assert_array_equal(np.isnan(mcol), nan_rows)
        assert nan_rows[20] and nan_rows[3] == (not causal or pos0 + 3 >= j0 + 5)  # NaN kept: the row is NaN
        assert np.isnan(lcol[nan_rows]).all() and np.isnan(lrow[nan_rows]).all()
        # the other rows: P~ (0 where masked), maxima, rescale factors and sums agree
        tol = dict(rtol=64 * 64 * eps, atol=4 * np.finfo(ft).tiny, equal_nan=True)  # |logit| < 64: 64 ulp of 1
        np.testing.assert_allclose(st.T[~nan_rows], srow[~nan_rows], **tol)
        np.testing.assert_array_equal(st.T[~nan_rows] == 0, srow[~nan_rows] == 0)
        np.testing.assert_allclose(mcol[~nan_rows], mrow[~nan_rows], **tol)
        np.testing.assert_allclose(acol[~nan_rows], arow[~nan_rows], **tol)
        np.testing.assert_allclose(lcol[~nan_rows], lrow[~nan_rows], **tol)


def _address(a):
    return a.__array_interface__["data"][0]


@pytest.mark.parametrize("zero", [False, True])
def test_new_array_puts_large_outputs_on_huge_page_boundaries(zero):
    big = _numba.new_array((3, 1 << 19), np.float32, zero=zero)  # 6 MiB
    assert big.shape == (3, 1 << 19) and big.dtype == np.float32 and big.flags.c_contiguous and big.flags.writeable
    assert _address(big) % _numba.HUGE_PAGE == 0
    assert big.base.nbytes <= big.nbytes + _numba.HUGE_PAGE  # at most one huge page more
    if zero:
        assert not big.any()
    small = _numba.new_array((500, 500), np.float64, zero=zero)  # under 4 MiB: a plain array
    assert small.base is None and small.shape == (500, 500)
    assert _numba.new_array((0, 5), np.float32).shape == (0, 5)


def test_alibi_kernels_allocate_large_outputs_on_huge_page_boundaries():
    q = np.zeros((1, 8, 2048, 64), np.float32)  # 4 MiB
    out, lse = kalibi.alibi_attention_forward(q, q, q, np.full(8, 0.5), causal=True, scale=0.125)
    grads = kalibi.alibi_attention_backward(out, q, q, q, out, lse, np.full(8, 0.5), causal=True, scale=0.125)
    assert all(_address(a) % _numba.HUGE_PAGE == 0 for a in (out, *grads))
    assert not any(g.any() for g in grads) and not out.any()  # zero-initialised where nothing was added


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "symmetric"])
def test_gradcheck_fused_float64(causal):
    rng = np.random.default_rng(17)
    q, k, v, _ = make(rng, (), 2, 5, 7, 3, d_v=2)
    m = paper_slopes(2)

    def fun(q, k, v):
        return kalibi.alibi_attention_forward(q, k, v, m, causal=causal, scale=0.6)[0]

    def bwd(g, q, k, v):
        out, lse = kalibi.alibi_attention_forward(q, k, v, m, causal=causal, scale=0.6)
        dq, dk, dv = kalibi.alibi_attention_backward(g, q, k, v, out, lse, m, causal=causal, scale=0.6)
        return {"q": dq, "k": dk, "v": dv}

    gradcheck(fun, bwd, {"q": q, "k": k, "v": v}, tol=1e-6, max_entries=None)


def test_import_compiles_nothing():
    import subprocess
    import sys
    code = ("import posenc_np, sys; assert 'numba' not in sys.modules; "
            "from posenc_np.kernels import alibi as a; "
            "assert all(not f.signatures for f in (a._forward_kernel, a._backward_dq_kernel, "
            "a._backward_dkdv_kernel)); from posenc_np._backend import ALIBI_NUMBA_MIN_T; print(ALIBI_NUMBA_MIN_T)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert int(res.stdout.strip()) >= 1
