"""ALiBi attention: formula, causal == bloom after softmax, decoding, gradients, backends, goldens."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

from posenc_np import alibi, attention
from posenc_np.testing import gradcheck

from _support import naive_attention



def _qkv(rng, lead, heads, q_len, k_len, d, d_v=None, dtype=np.float64):
    d_v = d if d_v is None else d_v
    return (rng.standard_normal(lead + (heads, q_len, d)).astype(dtype),
            rng.standard_normal(lead + (heads, k_len, d)).astype(dtype),
            rng.standard_normal(lead + (heads, k_len, d_v)).astype(dtype))


def _reference(q, k, v, m, causal):
    """The loop-by-loop attention with the ALiBi bias written out: -m_h (q - k) (causal) or -m_h |k - q|."""
    q_len, k_len = q.shape[-2], k.shape[-2]
    dist = (np.arange(q_len)[:, None] + k_len - q_len) - np.arange(k_len)[None, :]  # query - key
    bias = -np.asarray(m)[:, None, None] * (dist if causal else np.abs(dist))
    return naive_attention(q, k, v, bias=bias, causal=causal)


@given(st.integers(0, 2**32 - 1), st.sampled_from([(), (2,)]), st.integers(1, 5), st.integers(1, 5),
       st.integers(0, 4), st.integers(1, 6), st.booleans())
def test_attention_matches_explicit_formula(seed, lead, heads, q_len, extra, d, causal):
    rng = np.random.default_rng(seed)
    q, k, v = _qkv(rng, lead, heads, q_len, q_len + extra, d, d_v=3)
    out, cache = alibi.attention(q, k, v, causal=causal)
    assert out.shape == lead + (heads, q_len, 3) and cache["backend"] == "numpy"
    np.testing.assert_allclose(out, _reference(q, k, v, alibi.slopes(heads), causal), rtol=1e-12, atol=1e-12)


@given(st.integers(0, 2**32 - 1), st.integers(1, 6), st.integers(1, 6), st.integers(0, 5))
def test_causal_and_bloom_forms_give_same_attention(seed, heads, q_len, extra):
    rng = np.random.default_rng(seed)
    k_len = q_len + extra
    q, k, v = _qkv(rng, (2,), heads, q_len, k_len, 4)
    # Large slopes make the forms differ by large per-row shifts (m*q up to 4*10).
    m = rng.uniform(0.0, 4.0, heads)
    outs = {}
    for form in ("causal", "bloom"):
        b = alibi.bias(heads, q_len, k_len, form=form, slopes=m, query_offset=k_len - q_len)
        outs[form], cache = attention.forward(q, k, v, bias=b, causal=True)
        outs[form + "_p"] = cache["probs"]
    np.testing.assert_allclose(outs["bloom_p"], outs["causal_p"], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(outs["bloom"], outs["causal"], rtol=1e-12, atol=1e-12)
    # ... and the causal form is what alibi.attention uses.
    out, _ = alibi.attention(q, k, v, slopes=m, causal=True)
    np.testing.assert_allclose(out, outs["bloom"], rtol=1e-12, atol=1e-12)


def test_bloom_without_mask_differs_from_symmetric():
    # The equivalence needs the causal mask: bidirectionally, m*k and -m|k-q| are different.
    rng = np.random.default_rng(1)
    q, k, v = _qkv(rng, (), 2, 4, 4, 4)
    b = alibi.bias(2, 4, form="bloom")
    out_bloom, _ = attention.forward(q, k, v, bias=b)
    out_sym, _ = alibi.attention(q, k, v, causal=False)
    assert np.max(np.abs(out_bloom - out_sym)) > 1e-3


@given(st.integers(0, 2**32 - 1), st.integers(1, 4), st.integers(1, 4), st.integers(1, 6), st.booleans())
def test_decoding_block_equals_last_rows_of_full(seed, heads, chunk, extra, causal):
    rng = np.random.default_rng(seed)
    k_len = chunk + extra
    q, k, v = _qkv(rng, (1,), heads, k_len, k_len, 4)
    full, _ = alibi.attention(q, k, v, causal=causal)
    step, _ = alibi.attention(q[..., -chunk:, :], k, v, causal=causal)
    np.testing.assert_allclose(step, full[..., -chunk:, :], rtol=1e-13, atol=1e-14)


def test_attention_slopes_zero_is_plain_attention():
    rng = np.random.default_rng(2)
    q, k, v = _qkv(rng, (2,), 3, 5, 5, 4)
    for causal in (True, False):
        out, _ = alibi.attention(q, k, v, slopes=np.zeros(3), causal=causal)
        plain, _ = attention.forward(q, k, v, causal=causal)
        np.testing.assert_allclose(out, plain, rtol=1e-14, atol=1e-14)


def test_attention_scale_is_applied_before_bias():
    rng = np.random.default_rng(3)
    q, k, v = _qkv(rng, (), 2, 3, 3, 4)
    out, _ = alibi.attention(q, k, v, scale=0.1)
    # The bias is not scaled: 0.1 * q.k + B equals the default 1/sqrt(4) = 0.5 on 0.2 * q.
    ref, _ = alibi.attention(q * 0.2, k, v)
    np.testing.assert_allclose(out, ref, rtol=1e-13, atol=1e-14)


# --------------------------------------------------------------------------- gradients

@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("shape", [((), 3, 4, 4, 3), ((2,), 2, 2, 5, 4)])
def test_attention_backward_gradcheck(causal, shape):
    lead, heads, q_len, k_len, d = shape
    rng = np.random.default_rng(7)
    q, k, v = _qkv(rng, lead, heads, q_len, k_len, d, d_v=2)

    def fun(q, k, v):
        return alibi.attention(q, k, v, causal=causal)[0]

    def backward(g, q, k, v):
        return alibi.attention_backward(g, alibi.attention(q, k, v, causal=causal)[1])

    res = gradcheck(fun, backward, {"q": q, "k": k, "v": v}, max_entries=None, tol=1e-7)
    assert res.checked == q.size + k.size + v.size


def test_attention_backward_returns_only_qkv():
    rng = np.random.default_rng(4)
    q, k, v = _qkv(rng, (), 2, 3, 3, 4)
    out, cache = alibi.attention(q, k, v)
    grads = alibi.attention_backward(np.ones_like(out), cache)
    assert set(grads) == {"q", "k", "v"}
    assert grads["q"].shape == q.shape and grads["k"].shape == k.shape and grads["v"].shape == v.shape


# --------------------------------------------------------------------------- dtypes, backends, errors

def test_float32_in_float32_out():
    rng = np.random.default_rng(5)
    q, k, v = _qkv(rng, (2,), 4, 6, 6, 8)
    for causal in (True, False):
        out64, _ = alibi.attention(q, k, v, causal=causal)
        out32, cache = alibi.attention(q.astype(np.float32), k.astype(np.float32), v.astype(np.float32),
                                       causal=causal)
        assert out32.dtype == np.float32
        np.testing.assert_allclose(out32, out64, rtol=0, atol=2e-6)
        grads = alibi.attention_backward(np.ones_like(out32), cache)
        assert all(g.dtype == np.float32 for g in grads.values())


def test_backend_choice():
    from posenc_np._backend import ALIBI_NUMBA_MIN_T

    rng = np.random.default_rng(6)
    q, k, v = _qkv(rng, (), 2, 3, 3, 4)
    auto, c1 = alibi.attention(q, k, v, backend="auto")
    ref, c2 = alibi.attention(q, k, v, backend="numpy")
    assert c1["backend"] == c2["backend"] == "numpy"  # below the kernel's threshold
    np.testing.assert_array_equal(auto, ref)
    fused, c3 = alibi.attention(q, k, v, backend="numba")
    assert c3["backend"] == "numba"
    np.testing.assert_allclose(fused, ref, rtol=1e-12, atol=1e-13)
    with pytest.raises(ValueError, match="backend must be one of .*got 'cuda'"):
        alibi.attention(q, k, v, backend="cuda")
    ld = np.longdouble
    with pytest.raises(TypeError, match="float16, bfloat16, float32 or float64 inputs, got float128"):
        alibi.attention(q.astype(ld), k.astype(ld), v.astype(ld), backend="numba")
    half, c4 = alibi.attention(q.astype(np.float16), k.astype(np.float16), v.astype(np.float16))
    assert c4["backend"] == "numpy" and half.dtype == np.float16  # short: NumPy in float16
    half, c5 = alibi.attention(q.astype(np.float16), k.astype(np.float16), v.astype(np.float16), backend="numba")
    assert c5["backend"] == "numba" and half.dtype == np.float16  # the kernel, float32 inside
    long_q, long_k, long_v = _qkv(rng, (), 2, ALIBI_NUMBA_MIN_T, ALIBI_NUMBA_MIN_T, 4)
    assert alibi.attention(long_q, long_k, long_v)[1]["backend"] == "numba"


@pytest.mark.parametrize("causal", [True, False])
def test_numba_backend_matches_numpy_forward_and_backward(causal):
    rng = np.random.default_rng(11)
    q, k, v = _qkv(rng, (2,), 3, 70, 75, 8)
    dout = rng.standard_normal((2, 3, 70, 8))
    out_np, c_np = alibi.attention(q, k, v, causal=causal, backend="numpy")
    out_nb, c_nb = alibi.attention(q, k, v, causal=causal, backend="numba")
    np.testing.assert_allclose(out_nb, out_np, rtol=1e-11, atol=1e-12)
    g_np, g_nb = alibi.attention_backward(dout, c_np), alibi.attention_backward(dout, c_nb)
    for key in ("q", "k", "v"):
        np.testing.assert_allclose(g_nb[key], g_np[key], rtol=1e-10, atol=1e-11)


def test_backward_rejects_foreign_cache():
    rng = np.random.default_rng(8)
    q, k, v = _qkv(rng, (), 2, 3, 3, 4)
    out, cache = alibi.attention(q, k, v)
    with pytest.raises(TypeError, match="cache must be the dict returned by posenc_np.alibi.attention"):
        alibi.attention_backward(out, {"probs": 1})
    with pytest.raises(ValueError, match="backend 'tpu'"):
        alibi.attention_backward(out, {**cache, "backend": "tpu"})


def test_attention_rejects_bad_input():
    rng = np.random.default_rng(9)
    q, k, v = _qkv(rng, (), 3, 3, 3, 4)
    with pytest.raises(ValueError, match=r"slopes must have shape \(num_heads,\) = \(3,\), got shape \(2,\)"):
        alibi.attention(q, k, v, slopes=[0.5, 0.25])
    with pytest.raises(ValueError, match="slopes must be >= 0"):
        alibi.attention(q, k, v, slopes=[0.5, -0.25, 1.0])
    with pytest.raises(TypeError, match="causal must be a bool"):
        alibi.attention(q, k, v, causal="yes")
    with pytest.raises(ValueError, match="q, k, v must be"):
        alibi.attention(q, k[:2], v)
    with pytest.raises(ValueError, match="q must have at least 3 dimensions"):
        alibi.attention(q[0, 0], k, v)


# --------------------------------------------------------------------------- golden cases

def test_golden_alibi_cases_generate_and_verify(tmp_path):
    from posenc_np.golden import catalogue, runner

    rows = runner.generate(tmp_path, formats=("json",), only=["alibi.*"])
    assert len(rows) >= 14
    assert all(r.ok for r in rows), runner.format_table(rows)
    names = {r.case for r in rows}
    assert {"alibi.slopes.n8", "alibi.slopes.n12", "alibi.bias.causal.h4_q5_k7"} <= names
    assert any(n.startswith("alibi.attention.causal") for n in names)
    assert any(n.startswith("alibi.attention.symmetric") for n in names)
    assert all(r.ok for r in runner.verify(tmp_path))
    for spec in catalogue.cases(["alibi.bias.*", "alibi.attention.*"]):
        conv = spec.conventions
        assert "m" in conv["sign"] and "1/sqrt(d)" in conv["scale_placement"] and conv["semantics"] != "n/a"


def test_golden_oracle_published_points():
    # The oracle is independent of the library: check it against the published values directly.
    import mpmath as mp

    from posenc_np.golden import oracle_alibi

    with mp.workdps(60):
        s12 = oracle_alibi.slopes({"num_heads": 12, "max_bias": 8.0}, {})["slopes"]
        s8 = oracle_alibi.slopes({"num_heads": 8, "max_bias": 8.0}, {})["slopes"]
    assert [float(x) for x in s8] == [2.0 ** -h for h in range(1, 9)]
    assert [round(float(x), 4) for x in s12[-4:]] == [0.7071, 0.3536, 0.1768, 0.0884]
    assert float(s12[8]) == 2 ** -0.5


def test_golden_detects_wrong_sign(tmp_path):
    # A library with the sign flipped must fail the bias goldens (the comparison can fail).
    from posenc_np.golden import catalogue, runner

    spec = catalogue.cases(["alibi.bias.causal.h4_q5_k7"])[0]
    expected = runner.oracle_outputs(spec)
    wrong = {"bias": -alibi.bias(4, 5, 7, query_offset=2)}
    _, _, _, problems = runner.compare(wrong, expected, spec.tolerance)
    assert problems


@pytest.mark.parametrize("causal", [True, False])
def test_alibi_hook_is_the_bias_on_the_reference_path(causal):
    """ALiBiBias adds alibi.bias (bottom-right aligned) to the logits: attention with the hook equals
    attention with the explicit bias, and alibi.attention on both backends."""
    rng = np.random.default_rng(2)
    q = rng.standard_normal((2, 4, 3, 8))
    k, v = rng.standard_normal((2, 4, 7, 8)), rng.standard_normal((2, 4, 7, 8))
    form = "causal" if causal else "symmetric"
    hook = alibi.ALiBiBias(4, form=form)
    term, _ = hook.logits(q, k, 0.25)
    np.testing.assert_array_equal(term, alibi.bias(4, 3, 7, form=form, query_offset=4))
    out, cache = attention.forward(q, k, v, causal=causal, hooks=[hook])
    want, _ = attention.forward(q, k, v, causal=causal, bias=alibi.bias(4, 3, 7, form=form, query_offset=4))
    np.testing.assert_allclose(out, want, rtol=1e-13, atol=1e-15)
    for backend in ("numpy", "numba"):
        np.testing.assert_allclose(alibi.attention(q, k, v, causal=causal, backend=backend)[0], out, rtol=1e-12,
                                   atol=1e-13)
    assert hook.params == {} and attention.backward(out, cache)["q"].shape == q.shape
    with pytest.raises(ValueError, match="num_heads=4"):
        hook.logits(q[:, :2], k[:, :2], 0.25)
    with pytest.raises(ValueError, match="slopes must be >= 0"):
        alibi.ALiBiBias(2, slopes=[0.5, -1.0])
