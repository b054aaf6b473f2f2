"""Transformer-XL: rel_shift against its explicit gather, the relative score against a naive
per-pair loop, gradchecks (rel_shift_backward, the hook alone, the hook through attention),
errors, and the golden cases against the mpmath oracle."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from posenc_np import attention
from posenc_np.golden import catalogue, runner
from posenc_np.relative import TransformerXLRelative, rel_shift, rel_shift_backward, txl_relative_sinusoid
from posenc_np.testing import gradcheck, gradcheck_hook

from _support import naive_attention


def gather_reference(x):
    """The pad/reshape/drop-first-row sequence as an index formula on the flat padded buffer.

    P = [0 | x] is (Q, K+1) in row order; out[i, j] is its flat slot Q + i*K + j.
    """
    q_len, k_len = x.shape[-2:]
    out = np.empty(x.shape)
    for lead in np.ndindex(*x.shape[:-2]):
        for i in range(q_len):
            for j in range(k_len):
                r, c = divmod(q_len + i * k_len + j, k_len + 1)
                out[lead + (i, j)] = 0.0 if c == 0 else x[lead + (r, c - 1)]
    return out


shapes = st.tuples(st.lists(st.integers(1, 2), max_size=2), st.integers(1, 6), st.integers(1, 7))


# --------------------------------------------------------------------------- rel_shift

def test_rel_shift_hand_worked_example():
    # x = [[0 1 2 3] [4 5 6 7] [8 9 10 11]]; padded rows [0 0 1 2 3] [0 4 5 6 7] [0 8 9 10 11];
    # flat buffer without its first Q=3 entries: 2 3 | 0 4 5 6 7 0 8 9 10 11, read as (3, 4).
    expected = np.array([[2, 3, 0, 4], [5, 6, 7, 0], [8, 9, 10, 11]], dtype=float)
    np.testing.assert_array_equal(rel_shift(np.arange(12.0).reshape(3, 4)), expected)


@given(shapes, st.integers(0, 2**31))
def test_rel_shift_equals_explicit_gather(shape, seed):
    lead, q_len, k_len = shape
    x = np.random.default_rng(seed).standard_normal(tuple(lead) + (q_len, k_len))
    np.testing.assert_array_equal(rel_shift(x), gather_reference(x))


@given(shapes, st.integers(0, 2**31))
def test_rel_shift_regions(shape, seed):
    """Lower region: out[i, j] = x[i, j + Q - 1 - i]; first superdiagonal: the zero pad; beyond: row i+1."""
    lead, q_len, k_len = shape
    x = np.random.default_rng(seed).standard_normal(tuple(lead) + (q_len, k_len)) + 10.0  # no zeros in x
    out = rel_shift(x)
    off = k_len - q_len
    for i in range(q_len):
        for j in range(k_len):
            if j <= i + off:
                np.testing.assert_array_equal(out[..., i, j], x[..., i, j + q_len - 1 - i])
            elif j == i + off + 1:
                assert np.all(out[..., i, j] == 0.0)
            elif k_len >= q_len:
                np.testing.assert_array_equal(out[..., i, j], x[..., i + 1, j - i - off - 2])


def test_rel_shift_aligns_descending_distances():
    """Column m of x holds distance K-1-m; after the shift, (i, j) holds p_i - p_j = i + K - Q - j."""
    q_len, k_len = 3, 7
    x = np.tile(np.arange(k_len - 1, -1, -1, dtype=float), (q_len, 1))   # x[i, m] = distance of column m
    out = rel_shift(x)
    keep = attention.causal_mask(q_len, k_len)
    i, j = np.indices((q_len, k_len))
    np.testing.assert_array_equal(out[keep], (i + k_len - q_len - j)[keep])


@given(shapes, st.integers(0, 2**31))
def test_rel_shift_backward_is_adjoint(shape, seed):
    lead, q_len, k_len = shape
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(tuple(lead) + (q_len, k_len))
    y = rng.standard_normal(x.shape)
    assert math.isclose(np.sum(rel_shift(x) * y), np.sum(x * rel_shift_backward(y)), rel_tol=1e-12, abs_tol=1e-12)


def test_rel_shift_backward_gradcheck():
    x = np.random.default_rng(1).standard_normal((2, 4, 6))
    gradcheck(rel_shift, lambda g, x: {"x": rel_shift_backward(g)}, {"x": x}, max_entries=None)


def test_rel_shift_preserves_float32():
    x = np.ones((2, 3), dtype=np.float32)
    assert rel_shift(x).dtype == np.float32 and rel_shift_backward(x).dtype == np.float32


# --------------------------------------------------------------------------- sinusoid

def test_txl_sinusoid_is_concat_with_paper_frequencies():
    """kimiyoung/transformer-xl: inv_freq = 1 / 10000 ** (arange(0, d, 2) / d); cat([sin, cos]); pos_seq k_len-1..0."""
    k_len, d = 6, 8
    big_r = txl_relative_sinusoid(k_len, d)
    for m in range(k_len):
        t = k_len - 1 - m
        w = [10000.0 ** (-(2 * c) / d) for c in range(d // 2)]
        np.testing.assert_allclose(big_r[m], [math.sin(t * x) for x in w] + [math.cos(t * x) for x in w],
                                   rtol=0, atol=1e-15)
    clamped = txl_relative_sinusoid(k_len, d, clamp_len=2)
    np.testing.assert_array_equal(clamped[:3], np.tile(big_r[k_len - 3], (3, 1)))  # distances 5, 4, 3 -> 2
    np.testing.assert_array_equal(clamped[3:], big_r[3:])


# --------------------------------------------------------------------------- the hook

def naive_txl_scores(q, k, u, v, w_r, d_r, scale, base=10000.0):
    """S_ij = s [(q_i + u).k_j + (q_i + v).r_(i + K - Q - j)] per pair; NaN where j is a future key."""
    B, H, Q, d = q.shape
    K = k.shape[-2]
    s = np.full((B, H, Q, K), np.nan)
    for b in range(B):
        for h in range(H):
            for i in range(Q):
                for j in range(K):
                    t = i + K - Q - j
                    if t < 0:
                        continue
                    freqs = [base ** (-(2 * c) / d_r) for c in range(d_r // 2)]
                    big_r = np.array([math.sin(t * f) for f in freqs] + [math.cos(t * f) for f in freqs])
                    r = big_r @ w_r[:, h * d:(h + 1) * d]
                    s[b, h, i, j] = scale * (np.dot(q[b, h, i] + u[h], k[b, h, j]) + np.dot(q[b, h, i] + v[h], r))
    return s


@pytest.mark.parametrize("q_len,k_len", [(3, 5), (4, 4), (1, 6)])
def test_hook_matches_naive_loop(q_len, k_len):
    rng = np.random.default_rng(q_len * 10 + k_len)
    H, d, d_r = 2, 3, 6
    hook = TransformerXLRelative(H, d, d_r, seed=3, init_std=0.7)
    q, k = rng.standard_normal((2, H, q_len, d)), rng.standard_normal((2, H, k_len, d))
    value = rng.standard_normal((2, H, k_len, 4))
    scale = 1 / math.sqrt(d)
    expected = naive_txl_scores(q, k, hook.params["u"], hook.params["v"], hook.params["W_r"], d_r, scale)
    term, _ = hook.logits(q, k, scale)
    got = scale * (q @ np.swapaxes(k, -1, -2)) + term
    keep = ~np.isnan(expected)
    np.testing.assert_allclose(got[keep], expected[keep], rtol=1e-12, atol=1e-12)
    out, _ = attention.forward(q, k, value, causal=True, hooks=[hook])
    np.testing.assert_allclose(out, naive_attention(q, k, value, logits=expected), rtol=1e-12, atol=1e-12)


def test_hook_is_translation_invariant():
    """Prepending memory keys leaves the scores of the original keys unchanged: S_ij depends on p_i - p_j only."""
    rng = np.random.default_rng(5)
    hook = TransformerXLRelative(1, 4, 8, seed=0, init_std=0.5)
    q, k = rng.standard_normal((1, 1, 2, 4)), rng.standard_normal((1, 1, 3, 4))
    extra = rng.standard_normal((1, 1, 4, 4))
    short, _ = hook.logits(q, k, 0.5)
    long, _ = hook.logits(q, np.concatenate([extra, k], axis=-2), 0.5)
    keep = attention.causal_mask(2, 3)
    np.testing.assert_allclose(long[..., 4:][..., keep], short[..., keep], rtol=1e-13, atol=1e-14)


def test_hook_gradcheck_alone_including_masked_region():
    """The hook's term (garbage upper triangle included) is linear in u, v, W_r, k and affine in q."""
    rng = np.random.default_rng(11)
    hook = TransformerXLRelative(2, 3, 4, seed=1, init_std=0.6)

    def fun(q, k, u, vv, W_r):
        hook.params = {"u": u, "v": vv, "W_r": W_r}
        return hook.logits(q, k, 0.7)[0]

    def bwd(g, q, k, u, vv, W_r):
        hook.params = {"u": u, "v": vv, "W_r": W_r}
        _, cache = hook.logits(q, k, 0.7)
        dq, dk = hook.logits_backward(g, cache)
        return {"q": dq, "k": dk, "u": hook.grads["u"], "vv": hook.grads["v"], "W_r": hook.grads["W_r"]}

    gradcheck(fun, bwd, {"q": rng.standard_normal((2, 2, 3, 3)), "k": rng.standard_normal((2, 2, 5, 3)),
                         "u": rng.standard_normal((2, 3)), "vv": rng.standard_normal((2, 3)),
                         "W_r": rng.standard_normal((4, 6))}, max_entries=None)


@pytest.mark.parametrize("q_len,k_len,clamp_len", [(3, 5, None), (4, 4, 2)])
def test_gradcheck_through_attention(q_len, k_len, clamp_len):
    rng = np.random.default_rng(7)
    hook = TransformerXLRelative(2, 3, 6, clamp_len=clamp_len, seed=2, init_std=1.0)
    q, k, v = (rng.standard_normal((2, 2, n, d)) for n, d in ((q_len, 3), (k_len, 3), (k_len, 2)))
    gradcheck_hook(hook, q, k, v, causal=True)
    # backward overwrites: a second backward with a zero upstream gives zero parameter gradients
    _, cache = attention.forward(q, k, v, causal=True, hooks=[hook])
    attention.backward(np.zeros((2, 2, q_len, 2)), cache)
    assert all(not np.any(g) for g in hook.grads.values())


def test_hook_float32_and_seeded_init():
    a, b = TransformerXLRelative(2, 4, 8, seed=9), TransformerXLRelative(2, 4, 8, seed=9)
    for key in ("u", "v", "W_r"):
        np.testing.assert_array_equal(a.params[key], b.params[key])
    assert a.params["W_r"].shape == (8, 8) and a.params["u"].shape == (2, 4)
    q = np.ones((1, 2, 3, 4), dtype=np.float32)
    out, cache = attention.forward(q, q, q, causal=True, hooks=[a])
    assert out.dtype == np.float32
    grads = attention.backward(np.ones_like(out), cache)
    assert grads["q"].dtype == np.float32 and a.grads["W_r"].dtype == np.float64


# --------------------------------------------------------------------------- errors

def test_errors():
    with pytest.raises(ValueError, match="x must have at least 2 dimensions"):
        rel_shift(np.zeros(4))
    with pytest.raises(TypeError, match="x must hold integers or floats"):
        rel_shift(np.array([["a"]]))
    with pytest.raises(ValueError, match="d_model_r must be even.*got 5"):
        TransformerXLRelative(2, 4, 5)
    with pytest.raises(ValueError, match="num_heads must be an integer >= 1, got 0"):
        TransformerXLRelative(0, 4, 4)
    with pytest.raises(TypeError, match="head_dim must be an integer"):
        TransformerXLRelative(2, 4.0, 4)
    with pytest.raises(ValueError, match="clamp_len must be an integer >= 1, got 0"):
        TransformerXLRelative(2, 4, 4, clamp_len=0)
    with pytest.raises(ValueError, match="base must be > 0"):
        TransformerXLRelative(2, 4, 4, base=-1.0)
    hook = TransformerXLRelative(2, 4, 4)
    q = np.zeros((1, 3, 2, 4))
    with pytest.raises(ValueError, match=r"q and k must be \(\.\.\., num_heads=2, len, head_dim=4\) .*got q \(1, 3, 2, 4\)"):
        attention.forward(q, q, q, causal=True, hooks=[hook])


# --------------------------------------------------------------------------- golden

def test_golden_cases_against_oracle():
    specs = catalogue.cases(["relative.txl.*"])
    assert len(specs) == 6
    for spec in specs:
        expected = runner.oracle_outputs(spec)
        actual = runner.evaluate_library(spec.encoding, spec.params, spec.inputs)
        _, _, _, problems = runner.compare(actual, expected, spec.tolerance)
        assert not problems, (spec.name, problems)
