"""The fused ALiBi kernel's second-wave paths against the NumPy reference: grouped-query and
multi-query heads, the one-pass backward, flash-decoding key splits, float16 and bfloat16 inputs.

Reference: ``posenc_np.attention.forward/backward`` on ``k``/``v`` repeated over each group of
query heads (``np.repeat``), with the ALiBi bias written from the formula, and the key/value
gradients summed over each group (the chain rule of the repeat). Tolerances as in
``tests/test_kernels_alibi.py``: float64 ``1e-12``; float32 ``F32_ATOL`` = 2e-6 of
``max(1, max|ref|)``. float16/bfloat16 inputs are converted to float32 exactly and the outputs
rounded once, so they must equal the float32 kernel on the converted inputs, rounded once
(and lie within half an ulp of the dtype plus the float32 bound from the float64 reference).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from posenc_np import alibi, attention
from posenc_np.kernels import alibi as kalibi
from posenc_np.testing import gradcheck
from _support import require_module

F64_TOL = 1e-12
F32_ATOL = 2e-6
METHODS = ("one-pass", "two-pass")


def slopes_of(n):
    return 2.0 ** (-8.0 * np.arange(1, n + 1) / n)


def reference(q, k, v, m, causal, dout, scale, query_offset=None):
    """Grouped-query ALiBi attention from the formula: repeat k/v per group, sum their grads."""
    heads, kv_heads = q.shape[-3], k.shape[-3]
    group = heads // kv_heads
    q_len, k_len = q.shape[-2], k.shape[-2]
    off = k_len - q_len if query_offset is None else query_offset
    dist = (np.arange(q_len)[:, None] + off) - np.arange(k_len)[None, :]  # q - k
    m = np.asarray(m, dtype=np.float64)[:, None, None]
    b = (-m * dist if causal else -m * np.abs(dist)).astype(q.dtype)
    keep = (dist >= 0) if causal else None
    kr, vr = np.repeat(k, group, axis=-3), np.repeat(v, group, axis=-3)
    out, cache = attention.forward(q, kr, vr, bias=b, mask=keep, scale=scale)
    g = attention.backward(dout, cache)

    def fold(x):
        return x.reshape(x.shape[:-3] + (kv_heads, group) + x.shape[-2:]).sum(axis=-3)
    return out, g["q"], fold(g["k"]), fold(g["v"])


def fused(q, k, v, m, causal, dout, scale, method="auto", key_splits=None, query_offset=None):
    out, lse = kalibi.alibi_attention_forward(q, k, v, m, causal=causal, scale=scale, query_offset=query_offset,
                                              key_splits=key_splits)
    return (out,) + kalibi.alibi_attention_backward(dout, q, k, v, out, lse, m, causal=causal, scale=scale,
                                                    query_offset=query_offset, method=method)


def make(rng, batch, heads, kv_heads, q_len, k_len, d, d_v, dtype=np.float64):
    shapes = [batch + (heads, q_len, d), batch + (kv_heads, k_len, d), batch + (kv_heads, k_len, d_v),
              batch + (heads, q_len, d_v)]
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


def assert_close(got, want, tol=F64_TOL):
    for name, g, w in zip(("out", "dq", "dk", "dv"), got, want):
        assert g.shape == w.shape, name
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=name)


def random_case(seed):
    rng = np.random.default_rng(seed)
    kv_heads = int(rng.integers(1, 4))
    group = int(rng.choice([1, 2, 3, 4]))
    q_len = int(rng.choice([1, 3, 16, 64, 65, 150]))
    k_len = int(rng.choice([1, 40, 64, 129, 300]))
    query_offset = None if rng.random() < 0.5 else int(rng.integers(-5, k_len + 5))
    batch = () if rng.random() < 0.5 else (2,)
    d, d_v = int(rng.integers(1, 9)), int(rng.integers(1, 9))
    causal = bool(rng.random() < 0.6)
    arrays = make(rng, batch, kv_heads * group, kv_heads, q_len, k_len, d, d_v)
    return arrays, slopes_of(kv_heads * group), causal, 1.0 / math.sqrt(d), query_offset


# --------------------------------------------------------------------------- differential, float64

@pytest.mark.slow
@pytest.mark.parametrize("seed", range(16))
def test_random_shapes_every_method_and_split(seed):
    """GQA groups, causal/symmetric, offsets: both backward methods and 1-4 key splits agree
    with the reference (forward and backward)."""
    (q, k, v, do), m, causal, scale, query_offset = random_case(seed)
    want = reference(q, k, v, m, causal, do, scale, query_offset)
    for method, splits in (("one-pass", 1), ("two-pass", 2), ("one-pass", 4), ("auto", None)):
        assert_close(fused(q, k, v, m, causal, do, scale, method, splits, query_offset), want)


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "symmetric"])
def test_multi_query_and_leading_axes(causal):
    rng = np.random.default_rng(5)
    q, k, v, do = make(rng, (2, 3), 6, 1, 70, 90, 8, 5)  # one key/value head for six query heads
    m = alibi.slopes(6)
    want = reference(q, k, v, m, causal, do, 0.4)
    for method in METHODS:
        assert_close(fused(q, k, v, m, causal, do, 0.4, method), want)


@pytest.mark.parametrize("q_len", [1, 16])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "symmetric"])
def test_decoding_splits_match_reference(q_len, causal):
    """Few queries against a long cache: splitting keys changes nothing but the summation order."""
    rng = np.random.default_rng(q_len)
    q, k, v, do = make(rng, (), 2, 1, q_len, 3000, 16, 16)
    m = slopes_of(2)
    want = reference(q, k, v, m, causal, do, 0.25)
    for splits in (1, 2, 5, 47, 100):  # more splits than key tiles: the empty ranges contribute nothing
        out, lse = kalibi.alibi_attention_forward(q, k, v, m, causal=causal, scale=0.25, key_splits=splits)
        np.testing.assert_allclose(out, want[0], rtol=F64_TOL, atol=F64_TOL)
        assert np.all(np.isfinite(lse))


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "symmetric"])
def test_splits_over_several_query_tiles_match_reference(causal):
    """Key ranges on a call of several query tiles (taken in zigzag order, each tile's ranges
    combined into its own rows) give the reference's output."""
    rng = np.random.default_rng(41)
    q, k, v, do = make(rng, (), 2, 1, 200, 450, 16, 16)  # 4 query tiles, the last one partial
    m = slopes_of(2)
    want = reference(q, k, v, m, causal, do, 0.25)
    for splits in (1, 3, 8):
        out, lse = kalibi.alibi_attention_forward(q, k, v, m, causal=causal, scale=0.25, key_splits=splits)
        np.testing.assert_allclose(out, want[0], rtol=F64_TOL, atol=F64_TOL)
        assert np.all(np.isfinite(lse))


def test_explicit_splits_with_many_items_combine_in_parallel():
    """key_splits on a call whose (head, query tile) items already fill the threads: the
    combination then runs as a parallel loop too (the auto path combines on one thread)."""
    import numba

    rng = np.random.default_rng(31)
    heads = 4 * max(2, numba.get_num_threads())
    q, k, v, do = make(rng, (), heads, 1, 3, 700, 8, 8)
    m = slopes_of(heads)
    for causal in (True, False):
        want = reference(q, k, v, m, causal, do, 0.3)
        out, lse = kalibi.alibi_attention_forward(q, k, v, m, causal=causal, scale=0.3, key_splits=4)
        np.testing.assert_allclose(out, want[0], rtol=F64_TOL, atol=F64_TOL)
        assert np.all(np.isfinite(lse))


def test_auto_splits_only_when_items_are_few(monkeypatch):
    import numba

    if numba.get_num_threads() < 2:
        pytest.skip("needs two Numba threads")
    assert kalibi._key_splits(None, 1, 65536, 1) > 1  # one head, one query, long cache
    assert kalibi._key_splits(None, 1, 200, 1) == 1  # too few keys to split
    assert kalibi._key_splits(None, 1, 4096, 1) == 1  # one query: 4096 keys are too little work
    # 16 queries over the same keys: 16 times the work per key, enough to split
    assert kalibi._key_splits(None, 1, 4096, 16) == -(-2 * numba.get_num_threads() // 1)
    assert kalibi._key_splits(None, 64, 65536, 1) == 1  # the heads already occupy the threads
    assert kalibi._key_splits(3, 64, 65536, 1) == 3
    q = np.zeros((1, 1, 2, 4))
    with pytest.raises(ValueError, match="key_splits"):  # the door refuses what the split rule never sees
        kalibi.alibi_attention_forward(q, q, q, np.ones(1), causal=True, scale=1.0, key_splits=0)


def test_splits_with_fully_masked_rows_and_nonfinite_inputs():
    rng = np.random.default_rng(7)
    q, k, v, do = make(rng, (), 1, 1, 8, 500, 4, 4)
    m = slopes_of(1)
    # causal with query_offset -3: the first three queries see no key at all
    out, lse = kalibi.alibi_attention_forward(q, k, v, m, causal=True, scale=0.5, query_offset=-3, key_splits=4)
    want = reference(q, k, v, m, True, do, 0.5, query_offset=-3)[0]
    assert np.all(out[..., :3, :] == 0) and np.all(lse[..., :3] == -np.inf)
    np.testing.assert_allclose(out, want, rtol=F64_TOL, atol=F64_TOL)
    for value in (np.nan, np.inf):
        k2 = k.copy()
        k2[0, 400, 1] = value  # a key in the last range: every query that sees it becomes NaN
        one, _ = kalibi.alibi_attention_forward(q, k2, v, m, causal=False, scale=0.5, key_splits=1)
        many, lse_many = kalibi.alibi_attention_forward(q, k2, v, m, causal=False, scale=0.5, key_splits=4)
        np.testing.assert_array_equal(np.isnan(one), np.isnan(many))
        np.testing.assert_allclose(many[~np.isnan(many)], one[~np.isnan(one)], rtol=F64_TOL, atol=F64_TOL)
        if value != value:
            assert np.all(np.isnan(many))
        else:  # +inf logits make their rows NaN, -inf logits count as masked (as in the reference)
            assert np.array_equal(np.all(np.isnan(many), axis=-1)[0], q[0, :, 1] * 0.5 > 0)


def test_degenerate_shapes():
    m0 = np.zeros(0)
    for method in METHODS:
        for splits in (1, 3):
            # no heads at all
            q = np.zeros((2, 0, 5, 4))
            out, lse = kalibi.alibi_attention_forward(q, q, q, m0, causal=True, scale=0.5, key_splits=splits)
            assert out.shape == (2, 0, 5, 4) and lse.shape == (2, 0, 5)
            g = kalibi.alibi_attention_backward(out, q, q, q, out, lse, m0, causal=True, scale=0.5, method=method)
            assert all(x.shape == q.shape for x in g)
            # no keys (GQA): outputs 0, lse -inf, gradients 0
            q = np.ones((1, 4, 3, 4))
            k = np.zeros((1, 2, 0, 4))
            out, lse = kalibi.alibi_attention_forward(q, k, k, slopes_of(4), causal=False, scale=0.5,
                                                      key_splits=splits)
            assert np.all(out == 0) and np.all(lse == -np.inf)
            g = kalibi.alibi_attention_backward(out, q, k, k, out, lse, slopes_of(4), causal=False, scale=0.5,
                                                method=method)
            assert np.all(g[0] == 0) and g[1].shape == k.shape and g[2].shape == k.shape
            # no queries
            q = np.zeros((1, 4, 0, 4))
            k = np.ones((1, 1, 6, 4))
            out, lse = kalibi.alibi_attention_forward(q, k, k, slopes_of(4), causal=True, scale=0.5,
                                                      key_splits=splits)
            g = kalibi.alibi_attention_backward(out, q, k, k, out, lse, slopes_of(4), causal=True, scale=0.5,
                                                method=method)
            assert out.shape == (1, 4, 0, 4) and np.all(g[1] == 0) and np.all(g[2] == 0)


def test_grouped_heads_errors_name_the_shapes():
    rng = np.random.default_rng(2)
    q, k, v, _ = make(rng, (), 6, 4, 5, 5, 4, 4)  # 6 query heads, 4 key/value heads: not a multiple
    with pytest.raises(ValueError, match="heads a multiple of kv_heads"):
        kalibi.alibi_attention_forward(q, k, v, slopes_of(6), causal=True, scale=0.5)
    with pytest.raises(ValueError, match="heads a multiple of kv_heads"):
        kalibi.alibi_attention_forward(q[:, :0], k, v, slopes_of(0), causal=True, scale=0.5)
    with pytest.raises(ValueError, match="heads a multiple of kv_heads"):
        alibi.attention(q, k, v, backend="numba")
    out, lse = kalibi.alibi_attention_forward(q, k[:2], v[:2], slopes_of(6), causal=True, scale=0.5)
    with pytest.raises(ValueError, match="method must be one of"):
        kalibi.alibi_attention_backward(out, q, k[:2], v[:2], out, lse, slopes_of(6), causal=True, scale=0.5,
                                        method="three-pass")


# --------------------------------------------------------------------------- gradchecks (new backwards)

@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "symmetric"])
def test_gradcheck_grouped_heads_float64(method, causal):
    rng = np.random.default_rng(17)
    q, k, v, _ = make(rng, (), 4, 2, 5, 7, 3, 2)
    m = slopes_of(4)

    def fun(q, k, v):
        return kalibi.alibi_attention_forward(q, k, v, m, causal=causal, scale=0.6)[0]

    def bwd(g, q, k, v):
        out, lse = kalibi.alibi_attention_forward(q, k, v, m, causal=causal, scale=0.6)
        dq, dk, dv = kalibi.alibi_attention_backward(g, q, k, v, out, lse, m, causal=causal, scale=0.6,
                                                     method=method)
        return {"q": dq, "k": dk, "v": dv}

    gradcheck(fun, bwd, {"q": q, "k": k, "v": v}, tol=1e-6, max_entries=None)


def test_gradcheck_public_grouped_attention_both_backends():
    rng = np.random.default_rng(19)
    q, k, v, _ = make(rng, (1,), 6, 3, 4, 6, 3, 3)
    for backend in ("numpy", "numba"):
        def fun(q, k, v):
            return alibi.attention(q, k, v, backend=backend)[0]

        def bwd(g, q, k, v):
            return alibi.attention_backward(g, alibi.attention(q, k, v, backend=backend)[1])

        gradcheck(fun, bwd, {"q": q, "k": k, "v": v}, tol=1e-6, max_entries=None)


def test_public_attention_grouped_heads_backends_agree():
    rng = np.random.default_rng(23)
    q, k, v, do = make(rng, (2,), 8, 2, 80, 80, 8, 8)
    got = {}
    for backend in ("numpy", "numba"):
        out, cache = alibi.attention(q, k, v, backend=backend)
        g = alibi.attention_backward(do, cache)
        got[backend] = (out, g["q"], g["k"], g["v"])
    assert_close(got["numba"], got["numpy"], tol=1e-11)
    assert_close(got["numpy"], reference(q, k, v, alibi.slopes(8), True, do, 1 / math.sqrt(8)), tol=1e-11)


# --------------------------------------------------------------------------- float32, float16, bfloat16

@pytest.mark.parametrize("method", METHODS)
def test_float32_grouped_error_bound(method):
    rng = np.random.default_rng(31)
    q, k, v, do = make(rng, (), 8, 2, 130, 130, 32, 32)
    m = slopes_of(8)
    want = reference(q, k, v, m, True, do, 0.2)
    got = fused(*(x.astype(np.float32) for x in (q, k, v)), m, True, do.astype(np.float32), 0.2, method)
    for g, w in zip(got, want):
        assert g.dtype == np.float32
        assert np.max(np.abs(g - w)) <= F32_ATOL * max(1.0, float(np.abs(w).max()))


def _half_ulp(values, dtype_name):
    """Half the spacing of ``dtype_name`` at ``|values|`` (float16 by NumPy, bfloat16: 8 bits)."""
    a = np.abs(values).astype(np.float32)
    if dtype_name == "float16":
        return 0.5 * np.spacing(a.astype(np.float16)).astype(np.float64)
    exponent = np.floor(np.log2(np.maximum(a, np.float32(2.0**-126))))
    return 0.5 * 2.0 ** (exponent - 7)


def _low_precision_case(make_dtype):
    rng = np.random.default_rng(41)
    q, k, v, do = make(rng, (2,), 4, 2, 96, 96, 16, 16)
    return [make_dtype(x) for x in (q, k, v, do)]


def check_low_precision(low, dtype_name, method):
    """``low`` (q, k, v, dout in a 2-byte dtype) must give exactly the float32 kernel's results on
    the same values, rounded once; ``out`` within half an ulp of the dtype plus the float32
    bound from the float64 reference. (The backward reads ``out`` as the forward returned it,
    rounded: the float32 comparison is given the same rounded ``out``.)"""
    m = slopes_of(4)
    q, k, v, do = low
    q32, k32, v32, do32 = (x.astype(np.float32) for x in low)
    out, lse = kalibi.alibi_attention_forward(q, k, v, m, causal=True, scale=0.25)
    out32, lse32 = kalibi.alibi_attention_forward(q32, k32, v32, m, causal=True, scale=0.25)
    assert out.dtype == q.dtype and lse.dtype == np.float32
    np.testing.assert_array_equal(lse, lse32)
    np.testing.assert_array_equal(out.astype(np.float32), out32.astype(q.dtype).astype(np.float32))
    grads = kalibi.alibi_attention_backward(do, q, k, v, out, lse, m, causal=True, scale=0.25, method=method)
    grads32 = kalibi.alibi_attention_backward(do32, q32, k32, v32, out.astype(np.float32), lse, m, causal=True,
                                              scale=0.25, method=method)
    for g, g32 in zip(grads, grads32):
        assert g.dtype == q.dtype
        np.testing.assert_array_equal(g.astype(np.float32), g32.astype(q.dtype).astype(np.float32))
    want = reference(*(x.astype(np.float64) for x in (q32, k32, v32)), m, True, do32.astype(np.float64), 0.25)[0]
    bound = F32_ATOL * max(1.0, float(np.abs(want).max())) + _half_ulp(want, dtype_name) * 1.01
    assert np.all(np.abs(out.astype(np.float64) - want) <= bound)


@pytest.mark.parametrize("method", METHODS)
def test_float16_inputs_computed_in_float32_rounded_once(method):
    check_low_precision(_low_precision_case(lambda x: x.astype(np.float16)), "float16", method)


def test_bfloat16_inputs_through_the_kernel():
    ml_dtypes = require_module("ml_dtypes", "bfloat16")
    bf16 = ml_dtypes.bfloat16
    low = _low_precision_case(lambda x: x.astype(bf16))
    for method in METHODS:
        check_low_precision(low, "bfloat16", method)
    # the public entry: bfloat16 always goes to the kernel; NumPy cannot compute in it
    q, k, v = low[:3]
    out, cache = alibi.attention(q[:, :, :8], k[:, :, :8], v[:, :, :8])
    assert cache["backend"] == "numba" and out.dtype == bf16
    with pytest.raises(TypeError, match="bfloat16"):
        alibi.attention(q, k, v, backend="numpy")
    with pytest.raises(TypeError, match="must all be bfloat16"):
        alibi.attention(q, k.astype(np.float32), v)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_kernel_exponential_error(dtype):
    """The kernels' vectorisable e^x (``kernels._numba.exp``) against exact values: float32 within
    1 ulp (measured 0.91) wherever e^x is a normal float32 below the 2^128 overflow of its
    scaling (x < 88.03), float64 within 3 ulp (measured 2.0; the two-part ln2 reduction must
    not be reassociated, which cost ~200 ulp at |x| ~ 700); 0 below the cut-off, NaN for NaN."""
    import mpmath
    import numba

    from posenc_np.kernels._numba import exp as body

    @numba.njit(cache=False)
    def evaluate(xs, out):
        for i in range(xs.size):
            out[i] = body(xs[i])

    rng = np.random.default_rng(5)
    if dtype == np.float32:
        xs = np.concatenate([np.linspace(-86.9, 88.0, 200001), rng.uniform(-20, 0, 10000)]).astype(np.float32)
        ref = np.exp(xs.astype(np.float64))  # float64 is exact enough to judge float32 ulps
        out = np.empty_like(xs)
        evaluate(xs, out)
        ulps = np.abs(out.astype(np.float64) - ref) / np.spacing(ref.astype(np.float32)).astype(np.float64)
        assert ulps.max() <= 1.0, ulps.max()
    else:
        xs = np.concatenate([rng.uniform(-707, 709, 1500), rng.uniform(-30, 0, 500)])
        out = np.empty_like(xs)
        evaluate(xs, out)
        with mpmath.workprec(120):
            exact = [mpmath.exp(mpmath.mpf(float(v))) for v in xs]
            ulps = [abs(mpmath.mpf(float(o)) - e) / mpmath.mpf(float(np.spacing(float(e)))) for o, e in zip(out, exact)]
        assert max(ulps) <= 3, float(max(ulps))
    special = np.array([-np.inf, np.nan, -1000.0, 0.0], dtype=dtype)
    got = np.empty_like(special)
    evaluate(special, got)
    assert got[0] == 0 and np.isnan(got[1]) and got[2] == 0 and got[3] == 1


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_order_keys_order_like_the_floats_and_invert_bit_for_bit(dtype):
    """``order_key`` (the forward's vectorisable row maximum) maps floats to integers of the same order
    (-inf < negatives < -0 < +0 < positives < +inf, subnormals included), and ``from_order_key`` gives
    back every bit pattern, NaNs too; so the integer maximum of the keys is the float maximum."""
    import numba

    from posenc_np.kernels._numba import from_order_key, order_key

    @numba.njit(cache=False)
    def keys(xs, out, back):
        for i in range(xs.size):
            out[i] = order_key(xs[i])
            back[i] = from_order_key(out[i])

    info = np.finfo(dtype)
    rng = np.random.default_rng(7)
    special = np.array([-np.inf, -info.max, -1.0, -info.tiny, -info.smallest_subnormal, -0.0, 0.0,
                        info.smallest_subnormal, info.tiny, 1.0, info.max, np.inf], dtype=dtype)
    xs = np.concatenate([special, (rng.standard_normal(20000) * 10.0 ** rng.integers(-44, 38, 20000)).astype(dtype)])
    out = np.empty(xs.size, np.int32 if dtype == np.float32 else np.int64)
    back = np.empty_like(xs)
    keys(xs, out, back)
    np.testing.assert_array_equal(back.view(out.dtype), xs.view(out.dtype))
    lo, hi = out[:special.size - 1], out[1:special.size]
    assert np.all(hi > lo)  # strictly increasing, -0 below +0 (compared, not subtracted: no wrap-around)
    order = np.argsort(xs[special.size:], kind="stable")
    ranked, values = out[special.size:][order], xs[special.size:][order]
    assert np.all((ranked[1:] > ranked[:-1]) | (values[1:] == values[:-1]))  # (-0 == +0 may come either way)
    assert xs[np.argmax(out)] == xs.max()
    nans = np.array([np.nan, -np.nan], dtype=dtype)
    out2, back2 = np.empty(2, out.dtype), np.empty_like(nans)
    keys(nans, out2, back2)
    np.testing.assert_array_equal(back2.view(out.dtype), nans.view(out.dtype))


def test_half_conversions_match_numpy_bit_for_bit():
    """The kernel's float16 <-> float32 conversions at the door give NumPy's casts exactly: every
    half bit pattern up (NaNs stay NaN), and down from random floats of every magnitude, the
    exact halves, the midpoints between neighbouring halves (ties to even) and the overflow,
    subnormal and signed-zero edges."""
    halves = np.arange(1 << 16, dtype=np.uint16)
    wide = np.empty(halves.size, np.float32)
    kalibi._half_to_float(halves, wide)
    ref = halves.view(np.float16).astype(np.float32)
    nan = np.isnan(ref)
    np.testing.assert_array_equal(wide.view(np.uint32)[~nan], ref.view(np.uint32)[~nan])
    assert np.isnan(wide[nan]).all()

    rng = np.random.default_rng(6)
    finite = ref[~nan & np.isfinite(ref)].astype(np.float64)
    finite.sort()
    mids = (finite[:-1] + finite[1:]) / 2
    edges = np.array([np.inf, -np.inf, 0.0, -0.0, 65504, 65519.99, 65520, 1e6, 2.98e-8, 2.99e-8, 5.96e-8, 1e-45])
    x = np.concatenate([rng.standard_normal(200_000) * 10.0 ** rng.integers(-9, 6, 200_000), finite, mids, edges])
    x = x.astype(np.float32)
    bits = np.empty(x.size, np.uint16)
    kalibi._float_to_half(x, bits)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(bits, x.astype(np.float16).view(np.uint16))
    nan_bits = np.empty(1, np.uint16)
    kalibi._float_to_half(np.array([np.nan], np.float32), nan_bits)
    assert np.isnan(nan_bits.view(np.float16)[0])
