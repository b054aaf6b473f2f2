"""ALiBi slopes and bias forms: published points, formulas, MPT/BLOOM rules, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from posenc_np import alibi



# --------------------------------------------------------------------------- slopes

def test_slopes_n8_published():
    # Press et al. 2022, sec. 3: for 8 heads the slopes are 1/2, 1/4, ..., 1/256.
    expected = np.array([1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64, 1 / 128, 1 / 256])
    s = alibi.slopes(8)
    assert s.dtype == np.float64 and s.shape == (8,)
    np.testing.assert_array_equal(s, expected)


def test_slopes_n12_published_non_monotone():
    # slopes(8) followed by every other slope of 16 heads: 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5.
    expected = np.array([2.0 ** -h for h in range(1, 9)] + [2 ** -0.5, 2 ** -1.5, 2 ** -2.5, 2 ** -3.5])
    s = alibi.slopes(12)
    np.testing.assert_allclose(s, expected, rtol=2 ** -52, atol=0)
    np.testing.assert_array_equal(np.round(s[-4:], 4), [0.7071, 0.3536, 0.1768, 0.0884])
    assert np.any(np.diff(s) > 0), "the n=12 slopes are deliberately not monotone"


def test_slopes_one_head():
    np.testing.assert_array_equal(alibi.slopes(1), [2.0 ** -8])


@given(st.integers(0, 8))
def test_slopes_power_of_two_geometric(a):
    n = 2 ** a
    s = alibi.slopes(n)
    start = 2.0 ** (-8.0 / n)
    np.testing.assert_allclose(s[0], start, rtol=2 ** -52)
    np.testing.assert_allclose(s[1:] / s[:-1], start, rtol=4 * 2 ** -52)
    assert np.all(np.diff(s) < 0)


def _paper_rule(n, b=8.0):
    """The paper's recursion in plain Python floats (Press et al., get_slopes)."""
    if n & (n - 1) == 0:
        return [2.0 ** (-b * h / n) for h in range(1, n + 1)]
    p = 2 ** int(math.floor(math.log2(n)))
    return _paper_rule(p, b) + _paper_rule(2 * p, b)[0::2][: n - p]


def _mpt_rule(n, b=8.0):
    """MPT gen_slopes: slopes of N = next power of two heads, then concat(s[1::2], s[::2])[:n]."""
    big = 2 ** math.ceil(math.log2(n))
    s = [1.0 / 2.0 ** (h * (b / big)) for h in range(1, big + 1)]
    return (s[1::2] + s[::2])[:n] if big != n else s


def _bloom_rule(n):
    """BLOOM build_alibi_tensor: base^(1..p) with base 2^(-8/p), then extra_base^(1, 3, 5, ...)."""
    p = 2 ** int(math.floor(math.log2(n)))
    base, extra = 2.0 ** (-8.0 / p), 2.0 ** (-8.0 / (2 * p))
    return [base ** h for h in range(1, p + 1)] + [extra ** e for e in range(1, 2 * (n - p), 2)]


@given(st.integers(1, 300))
def test_slopes_any_count_follows_paper_rule(n):
    s = alibi.slopes(n)
    assert s.shape == (n,) and s.dtype == np.float64
    assert np.all((s > 0) & (s < 1))
    np.testing.assert_allclose(s, _paper_rule(n), rtol=2 ** -51, atol=0)


@given(st.integers(1, 130), st.sampled_from([8.0, 4.0, 16.0, 1.5]))
def test_slopes_max_bias_matches_mpt_gen_slopes(n, b):
    # MPT's next-power-of-two-then-interleave rule gives the same values as the paper's rule.
    np.testing.assert_allclose(alibi.slopes(n, max_bias=b), _mpt_rule(n, b), rtol=2 ** -51, atol=0)


def test_slopes_max_bias_formula_point():
    # MPT with alibi_bias_max=16 and 4 heads: 2^(-16h/4) = 2^-4, 2^-8, 2^-12, 2^-16.
    np.testing.assert_array_equal(alibi.slopes(4, max_bias=16), [2.0 ** -4, 2.0 ** -8, 2.0 ** -12, 2.0 ** -16])


@given(st.integers(1, 130))
def test_slopes_match_bloom_build_alibi_tensor(n):
    # BLOOM raises a rounded base to integer powers, so it drifts by up to ~p ulps.
    np.testing.assert_allclose(alibi.slopes(n), _bloom_rule(n), rtol=200 * 2 ** -52, atol=0)


@pytest.mark.parametrize("bad", [0, -1, -8])
def test_slopes_rejects_non_positive_heads(bad):
    with pytest.raises(ValueError, match=rf"num_heads must be an integer >= 1, got {bad}"):
        alibi.slopes(bad)


@pytest.mark.parametrize("bad", [2.0, True, "8", None])
def test_slopes_rejects_non_integer_heads(bad):
    with pytest.raises(TypeError, match="num_heads must be an integer"):
        alibi.slopes(bad)


@pytest.mark.parametrize("bad", [0.0, -8.0, float("nan"), float("inf")])
def test_slopes_rejects_bad_max_bias(bad):
    with pytest.raises(ValueError, match="max_bias must be"):
        alibi.slopes(8, max_bias=bad)


# --------------------------------------------------------------------------- bias

def _bias_formula(m, q_len, k_len, query_offset, form):
    out = np.empty((len(m), q_len, k_len))
    for h in range(len(m)):
        for i in range(q_len):
            for j in range(k_len):
                q, k = i + query_offset, j
                out[h, i, j] = {"causal": -m[h] * (q - k), "symmetric": -m[h] * abs(k - q),
                                "bloom": m[h] * k}[form]
    return out


@given(st.integers(1, 13), st.integers(0, 6), st.integers(0, 9), st.integers(-3, 6),
       st.sampled_from(alibi.FORMS))
def test_bias_matches_formula(h, q_len, k_len, query_offset, form):
    m = _paper_rule(h)
    b = alibi.bias(h, q_len, k_len, form=form, query_offset=query_offset)
    assert b.shape == (h, q_len, k_len) and b.dtype == np.float64
    assert np.all(np.isfinite(b))
    np.testing.assert_allclose(b, _bias_formula(m, q_len, k_len, query_offset, form), rtol=4 * 2 ** -52, atol=0)


def test_bias_published_figure():
    # Paper fig. 3: query 4 (0-based) sees -(4, 3, 2, 1, 0) times m on keys 0..4.
    b = alibi.bias(8, 5, 5)
    np.testing.assert_array_equal(b[0, 4], [-2.0, -1.5, -1.0, -0.5, 0.0])  # m = 1/2
    np.testing.assert_array_equal(b[7, 4], np.array([-4, -3, -2, -1, 0]) / 256)


def test_bias_default_k_len_covers_offset():
    assert alibi.bias(2, 3).shape == (2, 3, 3)
    assert alibi.bias(2, 1, query_offset=9).shape == (2, 1, 10)
    with pytest.raises(ValueError, match="k_len"):
        alibi.bias(2, 1, query_offset=-5)


@given(st.integers(1, 9), st.integers(1, 10))
def test_symmetric_is_symmetric(h, length):
    b = alibi.bias(h, length, form="symmetric")
    np.testing.assert_array_equal(b, np.swapaxes(b, -1, -2))
    assert np.all(b <= 0) and np.all(np.diagonal(b, axis1=-2, axis2=-1) == 0)


@given(st.integers(1, 9), st.integers(1, 8), st.integers(0, 6), st.sampled_from(alibi.FORMS))
def test_query_offset_decoding_equals_last_rows(h, chunk, extra, form):
    k_len = chunk + extra
    full = alibi.bias(h, k_len, k_len, form=form)
    block = alibi.bias(h, chunk, k_len, form=form, query_offset=k_len - chunk)
    np.testing.assert_array_equal(block, full[:, -chunk:, :])
    step = alibi.bias(h, 1, form=form, query_offset=k_len - 1)
    np.testing.assert_array_equal(step, full[:, -1:, :])


@given(st.integers(1, 9), st.integers(1, 8), st.integers(0, 5))
def test_bloom_minus_causal_is_constant_per_row(h, q_len, extra):
    # bloom - causal = m*k + m*(q - k) = m*q: a per-row shift that softmax removes.
    k_len, off = q_len + extra, extra
    diff = alibi.bias(h, q_len, k_len, form="bloom", query_offset=off) - alibi.bias(h, q_len, k_len, query_offset=off)
    m = np.array(_paper_rule(h))
    expected = m[:, None, None] * (np.arange(q_len) + off)[None, :, None]
    np.testing.assert_allclose(diff, np.broadcast_to(expected, diff.shape), rtol=1e-15, atol=1e-15)


def test_bias_custom_slopes_and_dtype():
    m = np.array([0.5, 0.0, 2.0], dtype=np.float32)
    b = alibi.bias(3, 2, 4, form="causal", slopes=m, query_offset=2)
    assert b.dtype == np.float32
    np.testing.assert_array_equal(b, _bias_formula([0.5, 0.0, 2.0], 2, 4, 2, "causal").astype(np.float32))
    assert alibi.bias(3, 2, 4, slopes=[0.5, 0.0, 2.0]).dtype == np.float64
    assert alibi.bias(3, 2, 4, dtype=np.float32).dtype == np.float32


@pytest.mark.parametrize("bad, exc, msg", [
    ([0.5, 0.25], ValueError, r"slopes must have shape \(num_heads,\) = \(3,\), got shape \(2,\)"),
    ([0.5, np.nan, 0.1], ValueError, "slopes must be >= 0 and finite"),
    ([0.5, -0.1, 0.1], ValueError, "slopes must be >= 0"),
    (["a", "b", "c"], TypeError, "slopes must hold integers or floats"),
])
def test_bias_rejects_bad_slopes(bad, exc, msg):
    with pytest.raises(exc, match=msg):
        alibi.bias(3, 2, 2, slopes=bad)


def test_bias_rejects_bad_arguments():
    with pytest.raises(ValueError, match="num_heads must be an integer >= 1, got 0"):
        alibi.bias(0, 2)
    with pytest.raises(ValueError, match="num_heads must be an integer >= 1, got -2"):
        alibi.bias(-2, 2)
    with pytest.raises(ValueError, match="form must be one of .*got 'alibi'"):
        alibi.bias(2, 2, form="alibi")
    with pytest.raises(ValueError, match="q_len must be an integer >= 0, got -1"):
        alibi.bias(2, -1)
    with pytest.raises(TypeError, match="query_offset must be an integer"):
        alibi.bias(2, 2, query_offset=1.5)


def test_bias_memory_guard_names_sizes():
    with pytest.raises(ValueError, match=r"\(4, 32768, 32768\).*34359738368 bytes.*MAX_BIAS_BYTES"):
        alibi.bias(4, 32768, 32768)
    assert alibi.bias(1, 0, 10**6).shape == (1, 0, 10**6)  # empty is fine whatever k_len


@pytest.mark.parametrize("dtype, offset, ok", [(np.float32, 10**9, False), (np.float32, 2**24 - 4, True),
                                               (np.float16, 2**11, False), (np.float64, 10**9, True)])
def test_bias_refuses_distances_not_exact_in_its_dtype(dtype, offset, ok):
    # issue 26: a float32 bias at query_offset 1e9 collapsed to a few distinct values (the kernel refuses it)
    if ok:
        b = alibi.bias(2, 4, 64, query_offset=offset, dtype=dtype)
        assert np.unique(b[0]).size == 4 + 64 - 1  # every distance keeps its own value
    else:
        with pytest.raises(ValueError, match=rf"query_offset={offset} .*more than {np.dtype(dtype)} represents exactly"):
            alibi.bias(2, 4, 64, query_offset=offset, dtype=dtype)
