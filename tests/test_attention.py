"""Attention core: forward against a naive loop, gradients, masks, hooks, bad input."""

import numpy as np
import pytest
from hypothesis import given, strategies as st

from posenc_np import attention as A
from posenc_np import relative
from posenc_np.testing import gradcheck

from _support import naive_attention


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def test_matches_naive_loop_with_bias_mask_and_causal():
    q, k, v = rand(2, 3, 4, 5, seed=1), rand(2, 3, 6, 5, seed=2), rand(2, 3, 6, 7, seed=3)
    bias = rand(3, 1, 6, seed=4)
    mask = np.random.default_rng(5).random((4, 6)) > 0.3
    out, _ = A.forward(q, k, v, bias=bias, mask=mask, causal=True)
    keep = mask & (np.arange(6)[None] <= np.arange(4)[:, None] + 2)
    np.testing.assert_allclose(out, naive_attention(q, k, v, bias=bias, keep=keep), rtol=1e-12, atol=1e-12)


def test_causal_alignment_is_bottom_right():
    m = A.causal_mask(2, 5)
    assert m.tolist() == [[True, True, True, True, False], [True, True, True, True, True]]
    assert A.causal_mask(3, 3).tolist() == np.tril(np.ones((3, 3), bool)).tolist()
    # decoding the last query alone equals the last row of the full causal pass
    q, k, v = rand(1, 2, 5, 4, seed=7), rand(1, 2, 5, 4, seed=8), rand(1, 2, 5, 3, seed=9)
    full, _ = A.forward(q, k, v, causal=True)
    last, _ = A.forward(q[..., -1:, :], k, v, causal=True)
    np.testing.assert_allclose(last[..., 0, :], full[..., -1, :], rtol=1e-13, atol=1e-14)


def test_fully_masked_row_is_zero_and_nan_free():
    q, k, v = rand(1, 3, 4, seed=1), rand(1, 5, 4, seed=2), rand(1, 5, 2, seed=3)
    mask = np.ones((3, 5), bool)
    mask[1] = False
    out, cache = A.forward(q, k, v, mask=mask)
    assert np.all(out[0, 1] == 0) and np.all(np.isfinite(out))
    assert np.all(cache["probs"][0, 1] == 0)
    grads = A.backward(np.ones_like(out), cache)
    assert all(np.all(np.isfinite(g)) for g in grads.values() if g is not None)
    assert np.all(grads["q"][0, 1] == 0)
    # q_len > k_len with causal: the first rows see no key
    out, _ = A.forward(rand(1, 4, 2, seed=4), rand(1, 2, 2, seed=5), rand(1, 2, 2, seed=6), causal=True)
    assert np.all(out[0, :2] == 0) and np.all(out[0, 2:] != 0)


def test_minus_inf_bias_masks_and_nan_propagates():
    q, k, v = rand(1, 2, 3, seed=1), rand(1, 3, 3, seed=2), rand(1, 3, 2, seed=3)
    bias = np.zeros((2, 3))
    bias[:, 0] = -np.inf
    out, _ = A.forward(q, k, v, bias=bias)
    ref = naive_attention(q, k, v, keep=np.array([[False, True, True]] * 2))
    np.testing.assert_allclose(out, ref, rtol=1e-13)
    q2 = q.copy()
    q2[0, 0, 0] = np.nan
    out, _ = A.forward(q2, k, v)
    assert np.all(np.isnan(out[0, 0])) and np.all(np.isfinite(out[0, 1]))


def test_softmax_is_stable_for_huge_logits():
    p = A.softmax(np.array([[1e308, 1e308 - 1e292, -1e308]]))
    assert np.all(np.isfinite(p)) and abs(p.sum() - 1) < 1e-15


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("with_mask", [False, True])
def test_gradcheck_every_input(causal, with_bias, with_mask):
    q, k, v = rand(2, 2, 3, 4, seed=1), rand(2, 2, 5, 4, seed=2), rand(2, 2, 5, 3, seed=3)
    mask = (np.random.default_rng(4).random((3, 5)) > 0.25) if with_mask else None
    inputs = {"q": q, "k": k, "v": v}
    if with_bias:
        inputs["bias"] = rand(2, 1, 5, seed=5)

    def f(q, k, v, bias=None):
        return A.forward(q, k, v, bias=bias, mask=mask, causal=causal, scale=0.7)[0]

    def bw(g, q, k, v, bias=None):
        return A.backward(g, A.forward(q, k, v, bias=bias, mask=mask, causal=causal, scale=0.7)[1])

    res = gradcheck(f, bw, inputs, max_entries=None)
    assert res.ok


class _KeyBiasHook(A.Hook):
    """Test hook: logits += scale * (u . k_j) and out += c * sum_j p_ij (a linear value term)."""

    def __init__(self, u, c):
        self.u, self.c = u, c

    def logits(self, q, k, scale, mask=None):
        return scale * (k @ self.u)[..., None, :], (k, scale)

    def logits_backward(self, dlogits, cache):
        k, scale = cache
        return None, scale * dlogits.sum(axis=-2)[..., None] * self.u

    def values(self, probs):
        return self.c * probs.sum(axis=-1, keepdims=True), None

    def values_backward(self, dout, cache):
        return np.broadcast_to((self.c * dout).sum(axis=-1, keepdims=True), dout.shape[:-1] + (self.n_keys,))


def test_hooks_add_terms_and_their_gradients():
    q, k, v = rand(2, 3, 4, seed=1), rand(2, 5, 4, seed=2), rand(2, 5, 3, seed=3)
    u, c = rand(4, seed=4), 0.3
    hook = _KeyBiasHook(u, c)
    hook.n_keys = 5
    out, _ = A.forward(q, k, v, hooks=[hook], causal=True)
    bias = 0.5 * (k @ u)[..., None, :]
    ref = naive_attention(q, k, v, bias=bias, keep=A.causal_mask(3, 5)) + c  # rows of p sum to 1
    np.testing.assert_allclose(out, ref, rtol=1e-12, atol=1e-12)

    def f(q, k, v):
        return A.forward(q, k, v, hooks=[hook], causal=True)[0]

    def bw(g, q, k, v):
        return A.backward(g, A.forward(q, k, v, hooks=[hook], causal=True)[1])

    gradcheck(f, bw, {"q": q, "k": k, "v": v}, max_entries=None)


@given(tq=st.integers(1, 5), tk=st.integers(1, 6), d=st.integers(1, 4), heads=st.integers(1, 3),
       seed=st.integers(0, 10_000))
def test_float32_in_float32_out_and_close_to_float64(tq, tk, d, heads, seed):
    q, k, v = rand(heads, tq, d, seed=seed), rand(heads, tk, d, seed=seed + 1), rand(heads, tk, d, seed=seed + 2)
    out32, _ = A.forward(q.astype(np.float32), k.astype(np.float32), v.astype(np.float32), causal=True)
    out64, _ = A.forward(q, k, v, causal=True)
    assert out32.dtype == np.float32
    np.testing.assert_allclose(out32, out64, rtol=1e-4, atol=1e-5)


def test_split_merge_heads_roundtrip_and_layout():
    x = np.arange(2 * 3 * 6).reshape(2, 3, 6).astype(float)
    h = A.split_heads(x, 2)
    assert h.shape == (2, 2, 3, 3)
    assert np.array_equal(h[1, 1, 2], x[1, 2, 3:6])  # head 1 = channels 3..5
    assert np.array_equal(A.merge_heads(h), x)


@pytest.mark.parametrize("kwargs, exc, msg", [
    (dict(q=np.zeros((2, 3, 4)), k=np.zeros((2, 5, 3)), v=np.zeros((2, 5, 4))), ValueError, "share the last axis"),
    (dict(q=np.zeros((2, 3, 4)), k=np.zeros((2, 5, 4)), v=np.zeros((2, 4, 4))), ValueError, "matching leading"),
    (dict(q=np.zeros((3, 4)), k=np.zeros((5, 4)), v=np.zeros((5, 4))), ValueError, "at least 3"),
    (dict(mask=np.ones((3, 5))), TypeError, "mask must be a boolean"),
    (dict(bias=np.ones((4, 5))), ValueError, "bias of shape"),
    (dict(bias=np.ones((7, 2, 3, 5))), ValueError, "without enlarging"),
    (dict(scale=-1.0), ValueError, "scale must be > 0"),
    (dict(causal="yes"), TypeError, "causal must be a bool"),
    (dict(q=np.array([["a"]])), TypeError, "q must hold"),
])
def test_bad_input(kwargs, exc, msg):
    args = dict(q=np.zeros((2, 3, 4)), k=np.zeros((2, 5, 4)), v=np.zeros((2, 5, 4)))
    args.update(kwargs)
    q, k, v = args.pop("q"), args.pop("k"), args.pop("v")
    with pytest.raises(exc, match=msg):
        A.forward(q, k, v, **args)


def test_split_heads_bad_input():
    with pytest.raises(ValueError, match="divisible by num_heads=4"):
        A.split_heads(np.zeros((3, 6)), 4)
    with pytest.raises(ValueError, match="num_heads must be an integer >= 1"):
        A.split_heads(np.zeros((3, 6)), 0)


def test_hook_terms_of_the_wrong_shape_are_rejected():
    class Wide(A.Hook):
        def values(self, probs):
            return np.zeros(probs.shape[:-1] + (3,)), None

    class Big(A.Hook):
        def logits(self, q, k, scale, mask=None):
            return np.zeros((2,) + q.shape[:-1] + (k.shape[-2],)), None

    q, k, v = rand(2, 3, 4, seed=1), rand(2, 5, 4, seed=2), rand(2, 5, 1, seed=3)
    with pytest.raises(ValueError, match=r"Wide.values returned a term of shape \(2, 3, 3\)"):
        A.forward(q, k, v, hooks=[Wide()])
    with pytest.raises(ValueError, match="Big.logits returned"):
        A.forward(q, k, v, hooks=[Big()])


class _MaskRecorder(A.Hook):
    """Test hook: records the mask it receives and adds -1 wherever it keeps a key (a visible term)."""

    def logits(self, q, k, scale, mask=None):
        self.mask = mask
        return np.where(mask, -1.0, 0.0), None


def test_hooks_receive_the_mask_applied():
    q, k, v = rand(2, 3, 4, seed=1), rand(2, 5, 4, seed=2), rand(2, 5, 3, seed=3)
    user = np.array([[True, True, False, True, True]])  # padding: key 2 is hidden from every query
    hook = _MaskRecorder()
    out, _ = A.forward(q, k, v, mask=user, causal=True, hooks=[hook])
    causal = np.arange(5)[None, :] <= np.arange(3)[:, None] + 2
    np.testing.assert_array_equal(np.broadcast_to(hook.mask, (3, 5)), user & causal)
    # the term depends on the mask only through kept keys, where it is a constant -1 per row:
    # softmax is shift-invariant, so the output equals attention without the hook
    np.testing.assert_allclose(out, A.forward(q, k, v, mask=user, causal=True)[0], rtol=1e-12, atol=1e-14)
    A.forward(q, k, v, hooks=[hook])
    np.testing.assert_array_equal(np.broadcast_to(hook.mask, (3, 5)), np.ones((3, 5), bool))  # nothing masked
    with pytest.raises(TypeError, match="mask must be a boolean"):  # in-package hooks check a mask given directly
        relative.T5RelativeBias(2).logits(q, k, 0.5, mask=np.ones((3, 5)))

