"""RoPE core: apply / apply_backward / cos_sin / convert_layout, properties and bad input.

Expected values come from closed forms (the complex-number form, the relative-position
formula, RoFormer's Abel bound), never from the code's own output.
"""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from posenc_np import rope
from posenc_np.testing import gradcheck

EPS = np.finfo(np.float64).eps

dims = st.integers(1, 16).map(lambda n: 2 * n)
layouts = st.sampled_from(rope.LAYOUTS)
positions = st.one_of(st.integers(-5000, 5000), st.floats(-5000, 5000, allow_nan=False, allow_infinity=False))
seeds = st.integers(0, 2**32 - 1)


def _rot(x, p, dim, layout, base=10000.0):
    cos, sin = rope.cos_sin(np.asarray(p), rope.inv_freq(dim, base=base)[0], layout=layout)
    return rope.apply(x, cos, sin, layout=layout)


def _pairs(v, layout):
    n = v.shape[-1] // 2
    return (v[..., :n], v[..., n:]) if layout == "half" else (v[..., 0::2], v[..., 1::2])


def _relative_score(q, k, r, dim, layout):
    """<R_m q, R_n k> = sum_i Re(h_i) cos(r w_i) - Im(h_i) sin(r w_i), h_i = (qa + i qb) conj(ka + i kb)."""
    w = 10000.0 ** (-np.arange(0, dim, 2) / dim)
    (qa, qb), (ka, kb) = _pairs(q, layout), _pairs(k, layout)
    return np.sum((qa * ka + qb * kb) * np.cos(r * w) - (qb * ka - qa * kb) * np.sin(r * w))


@given(dims, layouts, positions, positions, seeds)
def test_score_depends_only_on_relative_position(dim, layout, m, n, seed):
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal(dim), rng.standard_normal(dim)
    got = _rot(q, m, dim, layout) @ _rot(k, n, dim, layout)
    expected = _relative_score(q, k, m - n, dim, layout)
    # each rotated entry carries ~|p| eps of angle error; the closed form ~|m-n| eps
    tol = 8 * EPS * np.linalg.norm(q) * np.linalg.norm(k) * (abs(m) + abs(n) + dim)
    assert abs(got - expected) <= tol


@given(dims, layouts, st.lists(positions, min_size=1, max_size=6), seeds)
def test_norm_preserved(dim, layout, pos, seed):
    x = np.random.default_rng(seed).standard_normal((3, len(pos), dim + 2))  # 2 pass-through channels
    y = _rot(x, pos, dim, layout)
    np.testing.assert_allclose(np.linalg.norm(y, axis=-1), np.linalg.norm(x, axis=-1), rtol=8 * dim * EPS)


@given(dims, layouts, st.lists(positions, min_size=1, max_size=5), seeds)
def test_backward_is_inverse_rotation(dim, layout, pos, seed):
    x = np.random.default_rng(seed).standard_normal((len(pos), dim))
    cos, sin = rope.cos_sin(np.asarray(pos), rope.inv_freq(dim)[0], layout=layout)
    y = rope.apply(x, cos, sin, layout=layout)
    np.testing.assert_allclose(rope.apply_backward(y, cos, sin, layout=layout), x, atol=16 * EPS * np.abs(x).max())


@pytest.mark.parametrize("layout", rope.LAYOUTS)
@pytest.mark.parametrize("width,dim,factor", [(8, 8, 1.0), (12, 8, 1.0), (10, 6, 1.3)])
def test_backward_is_exact_vjp(layout, width, dim, factor):
    cos, sin = rope.cos_sin(np.array([0, 3, 17, 250]), rope.inv_freq(dim)[0], attention_factor=factor,
                            layout=layout)
    x = np.random.default_rng(1).standard_normal((2, 4, width))
    gradcheck(lambda x: rope.apply(x, cos, sin, layout=layout),
              lambda g, x: {"x": rope.apply_backward(g, cos, sin, layout=layout)}, {"x": x}, max_entries=None)


@given(st.integers(1, 8).map(lambda n: 2 * n), st.integers(1, 3), seeds)
def test_half_and_interleaved_scores_agree_after_convert_layout(head_dim, heads, seed):
    rng = np.random.default_rng(seed)
    in_dim, L = 5, 6
    wq, wk = rng.standard_normal((2, heads * head_dim, in_dim))
    h = rng.standard_normal((L, in_dim))
    pos = np.arange(L) * 37

    def scores(wq, wk, layout):
        q = (h @ wq.T).reshape(L, heads, head_dim).transpose(1, 0, 2)
        k = (h @ wk.T).reshape(L, heads, head_dim).transpose(1, 0, 2)
        return _rot(q, pos, head_dim, layout) @ _rot(k, pos, head_dim, layout).transpose(0, 2, 1)

    s_int = scores(wq, wk, "interleaved")
    conv = [rope.convert_layout(w, heads, src="interleaved", dst="half") for w in (wq, wk)]
    np.testing.assert_allclose(scores(*conv, "half"), s_int, atol=1e-11 * np.abs(s_int).max())
    back = [rope.convert_layout(w, heads, src="half", dst="interleaved") for w in conv]
    np.testing.assert_array_equal(back[0], wq)
    if head_dim >= 4:  # without the permutation the layouts disagree
        assert not np.allclose(scores(wq, wk, "half"), s_int)


def test_convert_layout_matches_hf_permute_rows():
    # HF permute: w.view(heads, hd/2, 2, in).transpose(1, 2): per head rows [0, 2, 4, ..., 1, 3, 5, ...]
    w = np.arange(2 * 6)[:, None] * np.ones((1, 3))
    out = rope.convert_layout(w, 2, src="interleaved", dst="half")
    np.testing.assert_array_equal(out[:, 0], [0, 2, 4, 1, 3, 5, 6, 8, 10, 7, 9, 11])
    part = rope.convert_layout(w, 2, src="interleaved", dst="half", rotary_dim=4)
    np.testing.assert_array_equal(part[:, 0], [0, 2, 1, 3, 4, 5, 6, 8, 7, 9, 10, 11])


@given(dims, st.lists(positions, min_size=1, max_size=5), seeds)
def test_interleaved_equals_complex_form(dim, pos, seed):
    x = np.random.default_rng(seed).standard_normal((len(pos), dim))
    w = 10000.0 ** (-np.arange(0, dim, 2) / dim)
    z = (x[:, 0::2] + 1j * x[:, 1::2]) * np.exp(1j * np.asarray(pos, dtype=float)[:, None] * w)
    expected = np.stack([z.real, z.imag], axis=-1).reshape(x.shape)
    got = _rot(x, pos, dim, "interleaved")
    np.testing.assert_allclose(got, expected, atol=8 * EPS * (np.abs(pos).max() + 1) * np.abs(x).max())


@given(st.sampled_from([16, 64, 128]), st.floats(-20000, 20000), seeds)
def test_roformer_abel_bound(dim, r, seed):
    """|sum_i h_i e^{i r theta_i}| <= max_i |h_{i+1} - h_i| * sum_j |S_j| (h_n = 0)."""
    rng = np.random.default_rng(seed)
    n = dim // 2
    h = rng.standard_normal(n) + 1j * rng.standard_normal(n)
    theta = rope.inv_freq(dim)[0]
    lhs = abs(np.sum(h * np.exp(1j * r * theta)))
    dh = np.abs(np.diff(np.append(h, 0)))
    assert lhs <= dh.max() * n * rope.long_term_decay(r, theta) * (1 + 1e-12)


def test_long_term_decay_decays():
    theta = rope.inv_freq(128)[0]
    assert rope.long_term_decay(0, theta) == pytest.approx(65 / 2)  # (1/n) sum_j j = (n+1)/2
    windows = [np.arange(a, a + 10) for a in (0, 10, 100, 1000, 10000)]
    means = [rope.long_term_decay(w, theta).mean() for w in windows]
    assert all(a > b for a, b in zip(means, means[1:])), means


def test_partial_rotary_passes_tail_through():
    x = np.random.default_rng(2).standard_normal((3, 4, 10))
    for layout in rope.LAYOUTS:
        cos, sin = rope.cos_sin(np.arange(4) * 5, rope.inv_freq(6)[0], layout=layout)
        y = rope.apply(x, cos, sin, layout=layout)
        np.testing.assert_array_equal(y[..., 6:], x[..., 6:])
        np.testing.assert_array_equal(y[..., :6], rope.apply(x[..., :6].copy(), cos, sin, layout=layout))


def test_half_layout_matches_rotate_half_formula():
    x = np.random.default_rng(3).standard_normal((5, 8))
    cos, sin = rope.cos_sin(np.arange(5), rope.inv_freq(8)[0])
    rotate_half = np.concatenate([-x[:, 4:], x[:, :4]], axis=-1)
    np.testing.assert_allclose(rope.apply(x, cos, sin), x * cos + rotate_half * sin, rtol=0, atol=4 * EPS)


def test_broadcast_leading_axes():
    x = np.random.default_rng(4).standard_normal((2, 3, 5, 8))  # (batch, heads, seq, head_dim)
    cos, sin = rope.cos_sin(np.arange(5) + 10, rope.inv_freq(8)[0])
    y = rope.apply(x, cos, sin)
    for b in range(2):
        for h in range(3):
            np.testing.assert_array_equal(y[b, h], rope.apply(x[b, h].copy(), cos, sin))


def test_attention_factor_scales_logits_by_its_square():
    rng = np.random.default_rng(5)
    q, k = rng.standard_normal((2, 8))
    inv = rope.inv_freq(8)[0]
    plain = [rope.apply(v, *rope.cos_sin(p, inv)) for v, p in ((q, 9), (k, 4))]
    scaled = [rope.apply(v, *rope.cos_sin(p, inv, attention_factor=1.5)) for v, p in ((q, 9), (k, 4))]
    assert scaled[0] @ scaled[1] == pytest.approx(2.25 * (plain[0] @ plain[1]), rel=1e-13)


def test_dtype_float32_in_float32_out_angles_in_float64():
    pos = np.array([0, 1, 100003, 2**24 + 1])
    inv = rope.inv_freq(8)[0]
    c32, s32 = rope.cos_sin(pos, inv, dtype=np.float32)
    c64, s64 = rope.cos_sin(pos, inv)
    assert c32.dtype == np.float32
    np.testing.assert_array_equal(c32, c64.astype(np.float32))
    # float32 angles would be visibly wrong at p = 2^24 + 1 (not representable in float32)
    wrong = np.cos((pos[:, None].astype(np.float32) * inv.astype(np.float32)))
    assert np.abs(wrong - c64[:, :4]).max() > 0.1
    x = np.ones((4, 8), dtype=np.float32)
    assert rope.apply(x, c64, s64).dtype == np.float32
    assert rope.apply_backward(x, c32, s32).dtype == np.float32


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_backends(layout):
    from posenc_np._backend import ROPE_NUMBA_MIN_ELEMENTS

    rng = np.random.default_rng(6)
    x = rng.standard_normal((3, 10))
    cos, sin = rope.cos_sin(np.arange(3), rope.inv_freq(8)[0], layout=layout)
    ref = rope.apply(x, cos, sin, layout=layout, backend="numpy")
    np.testing.assert_array_equal(ref, rope.apply(x, cos, sin, layout=layout, backend="auto"))
    # the kernel is bit-identical to the reference, forward and backward, partial rotary included
    np.testing.assert_array_equal(ref, rope.apply(x, cos, sin, layout=layout, backend="numba"))
    np.testing.assert_array_equal(rope.apply_backward(x, cos, sin, layout=layout, backend="numpy"),
                                  rope.apply_backward(x, cos, sin, layout=layout, backend="numba"))
    big = rng.standard_normal((ROPE_NUMBA_MIN_ELEMENTS // 10 + 1, 10)).astype(np.float32)
    cos, sin = rope.cos_sin(np.arange(len(big)), rope.inv_freq(8)[0], layout=layout)
    np.testing.assert_array_equal(rope.apply(big, cos, sin, layout=layout),  # auto -> numba here
                                  rope.apply(big, cos, sin, layout=layout, backend="numpy"))
    with pytest.raises(TypeError, match="float32 or float64 input, got float16"):
        rope.apply(x.astype(np.float16), cos[:3], sin[:3], layout=layout, backend="numba")
    with pytest.raises(ValueError, match="backend must be one of"):
        rope.apply_backward(x, cos[:3], sin[:3], layout=layout, backend="cuda")


@pytest.mark.parametrize("call,match", [
    (lambda x, c, s: rope.apply(x[..., :7], c[..., :7], s[..., :7]), "must be even"),
    (lambda x, c, s: rope.apply(x[..., :6], c, s), "wider"),
    (lambda x, c, s: rope.apply(x, c, s[:2]), "same shape"),
    (lambda x, c, s: rope.apply(x[:2], c, s), "leading shape"),
    (lambda x, c, s: rope.apply(x, c, s, layout="neox"), "layout must be one of"),
    (lambda x, c, s: rope.apply(x, *rope.cos_sin(np.arange(4), rope.inv_freq(8)[0], layout="interleaved")),
     "not a 'half'-layout table"),
    (lambda x, c, s: rope.apply(x, c * np.nan, s), "finite"),
    (lambda x, c, s: rope.cos_sin([1, 2], [1.0, np.nan]), "inv_freq must be finite"),
    (lambda x, c, s: rope.cos_sin([1, np.nan], [1.0]), "positions must be finite"),
    (lambda x, c, s: rope.cos_sin([1, 2], [1.0], attention_factor=-1.0), "attention_factor must be > 0"),
    (lambda x, c, s: rope.cos_sin([1, 2], [1.0], attention_factor=float("nan")), "attention_factor must be finite"),
    (lambda x, c, s: rope.cos_sin([1, 2], [[1.0]]), "1-D"),
    (lambda x, c, s: rope.convert_layout(np.ones((10, 2)), 3, src="half", dst="interleaved"), "num_heads"),
    (lambda x, c, s: rope.convert_layout(np.ones((8, 2)), 1, src="half", dst="interleaved", rotary_dim=5),
     "rotary_dim must be even"),
    (lambda x, c, s: rope.convert_layout(np.ones((8, 2)), 1, src="half", dst="gptj"), "dst must be one of"),
])
def test_bad_input_value_errors(call, match):
    x = np.zeros((4, 8))
    cos, sin = rope.cos_sin(np.arange(4), rope.inv_freq(8)[0])
    with pytest.raises(ValueError, match=match):
        call(x, cos, sin)


def test_bad_input_type_errors():
    cos, sin = rope.cos_sin(np.arange(4), rope.inv_freq(8)[0])
    with pytest.raises(TypeError, match="x.dtype must be a NumPy floating dtype"):
        rope.apply(np.zeros((4, 8), dtype=np.int64), cos, sin)
    with pytest.raises(TypeError, match="dtype"):
        rope.cos_sin([1], [1.0], dtype=np.int32)


# --------------------------------------------------------------------------- out= and apply_qk

def _reference_rotation(x, positions, freqs, layout):
    """The rotation written out pair by pair (independent of the library's slicing)."""
    n = len(freqs)
    t = positions[:, None] * np.asarray(freqs)[None, :]
    y = x.copy()
    for i in range(n):
        a_idx, b_idx = (i, i + n) if layout == "half" else (2 * i, 2 * i + 1)
        a, b = x[..., a_idx], x[..., b_idx]
        y[..., a_idx] = a * np.cos(t[:, i]) - b * np.sin(t[:, i])
        y[..., b_idx] = a * np.sin(t[:, i]) + b * np.cos(t[:, i])
    return y


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_apply_out_and_in_place(layout, backend):
    rng = np.random.default_rng(7)
    freqs = rope.inv_freq(6)[0]
    cos, sin = rope.cos_sin(np.arange(5), freqs, layout=layout)
    x = rng.standard_normal((2, 3, 5, 8))
    want = _reference_rotation(x, np.arange(5.0), freqs, layout)
    out = np.empty_like(x)
    got = rope.apply(x, cos, sin, layout=layout, backend=backend, out=out)
    assert got is out
    np.testing.assert_allclose(out, want, rtol=1e-13, atol=1e-14)
    # in place, also on a strided view (queries sliced out of a fused qkv buffer)
    buf = rng.standard_normal((2, 5, 3, 3, 8))
    q = buf[:, :, 0].swapaxes(1, 2)
    before = q.copy()
    assert rope.apply(q, cos, sin, layout=layout, backend=backend, out=q) is q
    np.testing.assert_allclose(q, _reference_rotation(before, np.arange(5.0), freqs, layout), rtol=1e-13, atol=1e-14)
    # the backward in place undoes the forward (attention factor 1)
    rope.apply_backward(q, cos, sin, layout=layout, backend=backend, out=q)
    np.testing.assert_allclose(q, before, rtol=1e-12, atol=1e-13)


def test_out_is_checked():
    cos, sin = rope.cos_sin(np.arange(4), rope.inv_freq(8)[0])
    x = np.zeros((2, 4, 8))
    with pytest.raises(ValueError, match="out must have the input's shape"):
        rope.apply(x, cos, sin, out=np.zeros((2, 4, 7)))
    with pytest.raises(TypeError, match="out must have the input's dtype"):
        rope.apply(x, cos, sin, out=np.zeros((2, 4, 8), np.float32))
    with pytest.raises(TypeError, match="out must be a NumPy array"):
        rope.apply(x, cos, sin, out=[0.0])
    read_only = np.zeros_like(x)
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        rope.apply(x, cos, sin, out=read_only)
    with pytest.raises(ValueError, match="zero stride"):
        rope.apply(x, cos, sin, out=np.lib.stride_tricks.as_strided(np.zeros(8), shape=x.shape, strides=(0, 0, 8)))
    big = np.zeros((3, 4, 8))
    with pytest.raises(ValueError, match="out partially overlaps the input"):
        rope.apply(big[:2], cos, sin, out=big[1:])
    with pytest.raises(ValueError, match="out partially overlaps another input"):
        table = np.zeros((2, 4, 8))
        rope.apply(np.ones((2, 4, 8)), table[0] + 1, table[0], out=table)
    with pytest.raises(ValueError, match="out_k partially overlaps another input"):
        rope.apply_qk(x, x.copy(), cos, sin, out_k=x)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_apply_qk_equals_two_applies(backend):
    rng = np.random.default_rng(3)
    inv, factor = rope.inv_freq(8, scaling={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8})
    cos, sin = rope.cos_sin(np.arange(6), inv, attention_factor=factor, dtype=np.float32)
    q = rng.standard_normal((2, 4, 6, 8)).astype(np.float32)
    k = rng.standard_normal((2, 1, 6, 8)).astype(np.float32)  # one key head (multi-query)
    q_rot, k_rot = rope.apply_qk(q, k, cos, sin, backend=backend)
    np.testing.assert_array_equal(q_rot, rope.apply(q, cos, sin, backend="numpy"))
    np.testing.assert_array_equal(k_rot, rope.apply(k, cos, sin, backend="numpy"))
    dq, dk = rope.apply_qk_backward(q_rot, k_rot, cos, sin, backend=backend)
    np.testing.assert_array_equal(dq, rope.apply_backward(q_rot, cos, sin, backend="numpy"))
    np.testing.assert_array_equal(dk, rope.apply_backward(k_rot, cos, sin, backend="numpy"))
    qc, kc = q.copy(), k.copy()
    got_q, got_k = rope.apply_qk(qc, kc, cos, sin, backend=backend, out_q=qc, out_k=kc)
    assert got_q is qc and got_k is kc
    np.testing.assert_array_equal(qc, q_rot)
    np.testing.assert_array_equal(kc, k_rot)


def test_apply_qk_checks_both_inputs():
    cos, sin = rope.cos_sin(np.arange(4), rope.inv_freq(8)[0])
    with pytest.raises(ValueError, match="wider"):
        rope.apply_qk(np.zeros((4, 8)), np.zeros((4, 6)), cos, sin)
    with pytest.raises(TypeError, match="k.dtype"):
        rope.apply_qk(np.zeros((4, 8)), np.zeros((4, 8), dtype=int), cos, sin)
    with pytest.raises(ValueError, match="not a 'interleaved'-layout table"):
        rope.apply_qk(np.zeros((4, 8)), np.zeros((4, 8)), cos, sin, layout="interleaved")
