"""T5 relative position buckets and bias: published points, the exact-floor decision at bucket
boundaries, sign and alignment conventions, hook vs. an explicit loop, gradchecks, errors,
golden cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from posenc_np import attention
from posenc_np.relative import T5RelativeBias, t5_bias, t5_bias_backward, t5_relative_position_bucket, \
    t5_relative_positions
from posenc_np.testing import gradcheck, gradcheck_hook

from _support import naive_attention

I64 = np.iinfo(np.int64)


# --------------------------------------------------------------------------- references written here

def bucket_by_integers(rel: int, bidirectional: bool, num_buckets: int, max_distance: int) -> int:
    """T5 bucket with the log term decided in integers, no logarithm at all.

    floor(ln(n/e)/ln(D/e) * L) >= m  <=>  (D/e)^m <= (n/e)^L  <=>  D^m e^L <= n^L e^m.
    """
    if bidirectional:
        half, offset, n = num_buckets // 2, (num_buckets // 2 if rel > 0 else 0), abs(rel)
    else:
        half, offset, n = num_buckets, 0, max(-rel, 0)
    e = half // 2
    if n < e:
        return offset + n
    steps = half - e
    m = 0
    while m < steps - 1 and max_distance ** (m + 1) * e**steps <= n**steps * e ** (m + 1):
        m += 1
    return offset + e + m  # e + m <= half - 1: the final clamp


def bucket_t5_expression(rel: int, bidirectional: bool, num_buckets: int, max_distance: int, dtype) -> int:
    """T5's expression evaluated literally in ``dtype`` (float32 = Mesh TF / HF, float64 = naive port)."""
    if bidirectional:
        half, offset, n = num_buckets // 2, (num_buckets // 2 if rel > 0 else 0), abs(rel)
    else:
        half, offset, n = num_buckets, 0, max(-rel, 0)
    e = half // 2
    if n < e:
        return offset + n
    f = np.dtype(dtype).type
    v = np.log(f(n) / f(e)) / f(math.log(max_distance / e)) * f(half - e)
    return offset + min(e + int(v), half - 1)


# --------------------------------------------------------------------------- published points

def test_published_bidirectional_table():
    rel = np.array([-200, -64, -9, -1, 0, 1, 8, 64, 128])
    expected = np.array([15, 14, 8, 1, 0, 17, 24, 30, 31])
    got = t5_relative_position_bucket(rel)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, expected)


def test_final_clamp_to_last_bucket():
    # Without min(., half - 1), |r| = 128 would give 8 + 8 = 16 (and 32 for r > 0), which is
    # the other direction's range (or out of the table).
    rel = np.array([-127, -128, -129, -10**6, 127, 128, 10**6])
    np.testing.assert_array_equal(t5_relative_position_bucket(rel), [15, 15, 15, 15, 31, 31, 31])
    # causal: n = 127 gives 16 + floor(15.94) = 31 before the clamp, 128 would give 32.
    np.testing.assert_array_equal(t5_relative_position_bucket(np.array([-127, -128, -5000]), bidirectional=False),
                                  [31, 31, 31])


def test_unidirectional_points_from_formula():
    # e = 16, L = 16, D/e = 8: n = 30 -> 16 + floor(16 ln(30/16)/ln 8) = 16 + floor(4.84);
    # n = 32 -> 16 + floor(16/3); n = 64 -> 16 + floor(32/3) = 26.
    rel = np.array([5, 1, 0, -1, -15, -16, -30, -32, -64, -128])
    np.testing.assert_array_equal(t5_relative_position_bucket(rel, bidirectional=False),
                                  [0, 0, 0, 1, 15, 16, 20, 21, 26, 31])


def test_bidirectional_exact_boundaries_default():
    # (n/8)^8 = 16^m at n = 16, 32, 64: the log term is exactly 2, 4, 6.
    n = np.array([15, 16, 31, 32, 63, 64])
    np.testing.assert_array_equal(t5_relative_position_bucket(-n), [9, 10, 11, 12, 13, 14])
    np.testing.assert_array_equal(t5_relative_position_bucket(n), [25, 26, 27, 28, 29, 30])


def test_int64_extremes_do_not_overflow():
    rel = np.array([I64.min, I64.min + 1, I64.max])
    np.testing.assert_array_equal(t5_relative_position_bucket(rel), [15, 15, 31])
    np.testing.assert_array_equal(t5_relative_position_bucket(rel, bidirectional=False), [31, 31, 0])


def test_shape_scalar_and_dtype():
    assert t5_relative_position_bucket(-9) == 8
    assert t5_relative_position_bucket(np.int32(1)) == 17
    rel = np.arange(-6, 6, dtype=np.int16).reshape(3, 4)
    got = t5_relative_position_bucket(rel)
    assert got.shape == (3, 4) and got.dtype == np.int64
    assert t5_relative_position_bucket(np.zeros((0, 2), dtype=np.int64)).shape == (0, 2)


# --------------------------------------------------------------------------- exact floor vs. float arithmetic

@pytest.mark.parametrize("bidirectional", [True, False])
def test_default_config_all_distances_exact_float32_float64_agree(bidirectional):
    # For the published configuration the exact value, T5's float32 and a float64 port agree everywhere.
    rel = np.arange(-300, 301)
    got = t5_relative_position_bucket(rel, bidirectional=bidirectional)
    exact = [bucket_by_integers(int(r), bidirectional, 32, 128) for r in rel]
    f32 = [bucket_t5_expression(int(r), bidirectional, 32, 128, np.float32) for r in rel]
    f64 = [bucket_t5_expression(int(r), bidirectional, 32, 128, np.float64) for r in rel]
    np.testing.assert_array_equal(got, exact)
    assert exact == f32 == f64


def test_float64_boundary_error_is_corrected():
    # bidirectional, 20 buckets, distance 160: e = 5, D/e = 32, (n/5)^5 = 32^m at n = 10, 20, 80.
    # In float64, ln(2)/ln(32)*5 = 0.9999999999999999, so the literal expression is one bucket low.
    n = [10, 20, 80]
    exact = [6, 7, 9]
    assert [bucket_by_integers(-x, True, 20, 160) for x in n] == exact
    assert [bucket_t5_expression(-x, True, 20, 160, np.float64) for x in n] == [5, 6, 8]
    np.testing.assert_array_equal(t5_relative_position_bucket(-np.array(n), num_buckets=20, max_distance=160), exact)
    np.testing.assert_array_equal(t5_relative_position_bucket(np.array(n), num_buckets=20, max_distance=160),
                                  np.array(exact) + 10)


def test_float32_boundary_differs_from_exact():
    # causal, 32 buckets, distance 939, n = 728: 16 ln(728/16)/ln(939/16) = 14.99999997...; T5's float32
    # arithmetic rounds it to 15.0 (bucket 31); the library returns the exact floor (bucket 30).
    assert bucket_by_integers(-728, False, 32, 939) == 30
    assert bucket_t5_expression(-728, False, 32, 939, np.float32) == 31
    assert t5_relative_position_bucket(-728, bidirectional=False, max_distance=939) == 30


@given(bidirectional=st.booleans(), half=st.integers(2, 40), extra=st.integers(1, 400), data=st.data())
def test_matches_integer_characterisation(bidirectional, half, extra, data):
    num_buckets = 2 * half if bidirectional else half
    e = half // 2
    max_distance = e + extra
    rel = data.draw(st.lists(st.integers(-2 * max_distance - 5, 2 * max_distance + 5), min_size=1, max_size=60))
    got = t5_relative_position_bucket(np.array(rel), bidirectional=bidirectional, num_buckets=num_buckets,
                                      max_distance=max_distance)
    expected = [bucket_by_integers(r, bidirectional, num_buckets, max_distance) for r in rel]
    np.testing.assert_array_equal(got, expected)


@given(bidirectional=st.booleans(), half=st.integers(2, 64), extra=st.integers(1, 300))
def test_range_monotone_and_direction(bidirectional, half, extra):
    num_buckets = 2 * half if bidirectional else half
    max_distance = half // 2 + extra
    n = np.arange(0, max_distance + 20)
    before = t5_relative_position_bucket(-n, bidirectional=bidirectional, num_buckets=num_buckets,
                                         max_distance=max_distance)
    assert before.min() >= 0 and before.max() <= half - 1
    assert np.all(np.diff(before) >= 0) and before[-1] == half - 1  # saturates at the last bucket
    after = t5_relative_position_bucket(n[1:], bidirectional=bidirectional, num_buckets=num_buckets,
                                        max_distance=max_distance)
    if bidirectional:  # keys after the query: the same map shifted to the upper half
        np.testing.assert_array_equal(after, before[1:] + half)
    else:  # causal: every future key in bucket 0
        assert np.all(after == 0)


# --------------------------------------------------------------------------- sign and alignment

def test_relative_positions_key_minus_query_bottom_right():
    np.testing.assert_array_equal(t5_relative_positions(3, 3), [[0, 1, 2], [-1, 0, 1], [-2, -1, 0]])
    # q_len < k_len: queries are the last positions (query i at i + 3).
    np.testing.assert_array_equal(t5_relative_positions(2, 5), [[-3, -2, -1, 0, 1], [-4, -3, -2, -1, 0]])
    for q_len, k_len in [(1, 4), (3, 3), (2, 7), (4, 2)]:
        np.testing.assert_array_equal(t5_relative_positions(q_len, k_len) <= 0, attention.causal_mask(q_len, k_len))


def test_sign_t5_key_minus_query_vs_deberta_query_minus_key():
    layer = T5RelativeBias(2, seed=0)
    w = layer.params["weight"]
    b = layer.bias(3, 3)
    # key 1 is one step *after* query 0: T5 r = +1 -> bucket 17; the DeBERTa sign (query - key = -1)
    # would give bucket 1.
    np.testing.assert_array_equal(b[:, 0, 1], w[17])
    np.testing.assert_array_equal(b[:, 1, 0], w[1])
    assert not np.array_equal(w[17], w[1])
    r = np.arange(1, 200)
    assert np.all(t5_relative_position_bucket(r) != t5_relative_position_bucket(-r))


# --------------------------------------------------------------------------- bias and its gradient

def test_bias_matches_loop_and_keeps_dtype():
    rng = np.random.default_rng(1)
    table = rng.standard_normal((8, 3)).astype(np.float32)
    q_len, k_len = 4, 15
    got = t5_bias(table, q_len, k_len, bidirectional=True, max_distance=12)
    assert got.shape == (3, q_len, k_len) and got.dtype == np.float32
    for h in range(3):
        for i in range(q_len):
            for j in range(k_len):
                r = j - (i + k_len - q_len)
                assert got[h, i, j] == table[bucket_by_integers(r, True, 8, 12), h]


def test_bias_backward_is_scatter_add():
    rng = np.random.default_rng(2)
    dbias = rng.standard_normal((2, 3, 5, 9))  # batch, heads, q, k
    got = t5_bias_backward(dbias, 8, bidirectional=False, max_distance=6)
    expected = np.zeros((8, 3))
    for i in range(5):
        for j in range(9):
            b = bucket_by_integers(j - (i + 4), False, 8, 6)
            expected[b] += dbias[:, :, i, j].sum(axis=0)
    np.testing.assert_allclose(got, expected, rtol=1e-13, atol=1e-13)
    assert np.all(got[[0]] != 0) and got.shape == (8, 3)


@pytest.mark.parametrize("bidirectional", [True, False])
def test_gradcheck_plain_bias(bidirectional):
    rng = np.random.default_rng(3)
    kw = {"bidirectional": bidirectional, "max_distance": 9}
    gradcheck(lambda table: t5_bias(table, 4, 13, **kw),
              lambda g, table: {"table": t5_bias_backward(g, table.shape[0], **kw)},
              {"table": rng.standard_normal((8, 2))})


def test_gradcheck_layer_bias_with_batch_axes():
    layer = T5RelativeBias(2, num_buckets=6, max_distance=5, seed=4)

    def fun(weight):
        layer.params["weight"] = weight
        return np.broadcast_to(layer.bias(3, 8), (2, 2, 3, 8)) * np.arange(1, 3)[:, None, None, None]

    def bwd(g, weight):
        layer.params["weight"] = weight
        layer.bias_backward(g * np.arange(1, 3)[:, None, None, None])
        return {"weight": layer.grads["weight"]}

    gradcheck(fun, bwd, {"weight": layer.params["weight"]})


# --------------------------------------------------------------------------- the attention hook

@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("scale", [None, 1.0])
def test_hook_matches_naive_attention(causal, scale):
    rng = np.random.default_rng(5)
    q, k, v = rng.standard_normal((2, 3, 4, 5)), rng.standard_normal((2, 3, 11, 5)), rng.standard_normal((2, 3, 11, 2))
    layer = T5RelativeBias(3, num_buckets=8, max_distance=6, bidirectional=not causal, init_std=1.0, seed=6)
    out, _ = attention.forward(q, k, v, causal=causal, scale=scale, hooks=[layer])
    s = 1 / math.sqrt(5) if scale is None else scale  # the bias is never multiplied by the scale
    np.testing.assert_allclose(out, naive_attention(q, k, v, scale=s, bias=layer.bias(4, 11), causal=causal), rtol=1e-12, atol=1e-12)


def test_hook_equals_explicit_bias_argument():
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal((2, 6, 4)) for _ in range(3))
    layer = T5RelativeBias(2, num_buckets=8, max_distance=4, init_std=1.0, seed=8)
    out_h, cache_h = attention.forward(q, k, v, scale=1.0, hooks=[layer])
    out_b, cache_b = attention.forward(q, k, v, scale=1.0, bias=layer.bias(6, 6))
    np.testing.assert_array_equal(out_h, out_b)
    g = rng.standard_normal(out_h.shape)
    attention.backward(g, cache_h)
    dbias = attention.backward(g, cache_b)["bias"]
    np.testing.assert_allclose(layer.grads["weight"], t5_bias_backward(dbias, 8, max_distance=4), rtol=1e-14,
                               atol=1e-15)


@pytest.mark.parametrize("causal,q_len", [(False, 5), (True, 5), (True, 3)])
def test_gradcheck_through_attention(causal, q_len):
    rng = np.random.default_rng(9)
    layer = T5RelativeBias(2, num_buckets=8, max_distance=6, bidirectional=not causal, init_std=0.5, seed=10)
    gradcheck_hook(layer, rng.standard_normal((2, 2, q_len, 3)), rng.standard_normal((2, 2, 7, 3)),
                   rng.standard_normal((2, 2, 7, 3)), causal=causal, max_entries=40)


def test_grads_overwritten_and_float32():
    rng = np.random.default_rng(11)
    layer = T5RelativeBias(2, num_buckets=8, max_distance=4, seed=12)
    q, k, v = (rng.standard_normal((2, 5, 3)).astype(np.float32) for _ in range(3))
    out, cache = attention.forward(q, k, v, hooks=[layer])
    assert out.dtype == np.float32
    g = np.ones_like(out)
    attention.backward(g, cache)
    first = layer.grads["weight"].copy()
    attention.backward(g, cache)
    np.testing.assert_array_equal(layer.grads["weight"], first)
    assert layer.grads["weight"].dtype == np.float64


# --------------------------------------------------------------------------- errors

@pytest.mark.parametrize("bad", [np.array([1.0, 2.0]), np.array([True]), 3.0, ["a"]])
def test_bucket_rejects_non_integer_positions(bad):
    with pytest.raises(TypeError, match="relative_position"):
        t5_relative_position_bucket(bad)


@pytest.mark.parametrize("kwargs,match", [
    ({"num_buckets": 0}, "num_buckets must be >= 4"),
    ({"num_buckets": -8}, "num_buckets must be >= 4"),
    ({"num_buckets": 3}, "num_buckets must be >= 4"),
    ({"num_buckets": 33}, "even"),
    ({"num_buckets": 1, "bidirectional": False}, "num_buckets must be >= 2"),
    ({"max_distance": 8}, r"exact range num_buckets // 4 = 8"),
    ({"max_distance": -1}, "max_distance"),
    ({"max_distance": 16, "bidirectional": False}, r"exact range num_buckets // 2 = 16"),
])
def test_bucket_config_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        t5_relative_position_bucket(np.arange(3), **kwargs)


def test_smallest_valid_configs():
    np.testing.assert_array_equal(t5_relative_position_bucket(np.arange(-3, 4), max_distance=9)[[0, 3, 6]], [3, 0, 19])
    np.testing.assert_array_equal(t5_relative_position_bucket(np.array([-1, 0, -5]), num_buckets=4, max_distance=2),
                                  [1, 0, 1])
    np.testing.assert_array_equal(t5_relative_position_bucket(np.array([-1, 0, -5]), num_buckets=2,
                                                              bidirectional=False, max_distance=2), [1, 0, 1])
    t5_relative_position_bucket(0, num_buckets=33, bidirectional=False)  # odd is fine one-way


@pytest.mark.parametrize("kwargs,exc,match", [
    ({"max_distance": 128.0}, TypeError, "max_distance"),
    ({"num_buckets": 32.0}, TypeError, "num_buckets"),
    ({"bidirectional": 1}, TypeError, "bidirectional"),
])
def test_bucket_type_errors(kwargs, exc, match):
    with pytest.raises(exc, match=match):
        t5_relative_position_bucket(np.arange(3), **kwargs)


def test_layer_errors():
    for heads in (0, -1):
        with pytest.raises(ValueError, match="num_heads"):
            T5RelativeBias(heads)
    with pytest.raises(ValueError, match="num_buckets"):
        T5RelativeBias(2, num_buckets=0)
    with pytest.raises(ValueError, match="max_distance"):
        T5RelativeBias(2, num_buckets=32, max_distance=4)
    layer = T5RelativeBias(2)
    q = np.zeros((3, 4, 5))
    with pytest.raises(ValueError, match="num_heads=2"):
        attention.forward(q, q, q, hooks=[layer])
    with pytest.raises(ValueError, match="table"):
        t5_bias(np.zeros(4), 2, 2)
    layer.params["weight"] = np.zeros((31, 2))
    with pytest.raises(ValueError, match=r"\(32, 2\)"):
        layer.bias(2, 2)


# --------------------------------------------------------------------------- golden cases

def test_golden_t5_cases_pass(tmp_path):
    from posenc_np.golden import runner
    from posenc_np.testing import load_case

    rows = runner.generate(tmp_path, formats=("npz",), only=["relative.t5*"])
    assert len(rows) >= 7 and all(r.ok for r in rows), runner.format_table(rows)
    case = load_case(tmp_path / "relative.t5.bucket.bidirectional.nb32_md128.npz")
    rel, bucket = case.inputs["relative_position"], case.outputs["bucket"]
    published = {-200: 15, -64: 14, -9: 8, -1: 1, 0: 0, 1: 17, 8: 24, 64: 30, 128: 31}
    assert {r: int(bucket[rel == r][0]) for r in published} == published
    assert case.conventions["sign"] == "key - query"
    # the oracle (mpmath + integer tie-break) agrees with the logarithm-free characterisation
    assert list(bucket) == [bucket_by_integers(int(r), True, 32, 128) for r in rel]
