"""xPos, 2-D axial RoPE and M-RoPE: tables checked against the published recipes, relative
properties, and their backward (apply_backward on the same tables) by gradient check."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from posenc_np import rope
from posenc_np.testing import gradcheck

EPS = np.finfo(np.float64).eps


# --------------------------------------------------------------------------- xPos

def _xpos(x, pos, role, centre, seq_len, layout="interleaved", dim=8):
    cos, sin = rope.xpos_cos_sin(pos, rope.inv_freq(dim)[0], role=role, centre=centre, seq_len=seq_len,
                                 layout=layout)
    return rope.apply(x, cos, sin, layout=layout)


def test_xpos_scale_formula_and_centres():
    pos = np.arange(5)
    zeta = (np.arange(0, 8, 2) + 3.2) / 11.2
    # torchscale: min_pos = -(5 + 0) // 2 = -3, so position p gets exponent p - 3
    np.testing.assert_allclose(rope.xpos_scale(pos, 8, role="query", centre="torchscale", seq_len=5),
                               zeta ** ((pos[:, None] - 3) / 512), rtol=2 * EPS)
    # rotary-embedding-torch: power = (t - len(t) // 2) / scale_base, centre 2
    np.testing.assert_allclose(rope.xpos_scale(pos, 8, role="key", centre="rotary-embedding-torch", seq_len=5),
                               zeta ** (-(pos[:, None] - 2) / 512), rtol=2 * EPS)
    np.testing.assert_allclose(rope.xpos_scale(pos, 8, role="query", centre=1.5, scale_base=64.0),
                               zeta ** ((pos[:, None] - 1.5) / 64), rtol=2 * EPS)


@given(st.integers(1, 40), st.sampled_from(rope.LAYOUTS), st.integers(0, 2**32 - 1))
def test_xpos_scores_do_not_depend_on_centre(L, layout, seed):
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal((2, L, 8))
    pos = np.arange(L)
    scores = {}
    for centre in rope.XPOS_CENTRES:
        seq_len = None if centre == "none" else L
        scores[centre] = (_xpos(q, pos, "query", centre, seq_len, layout)
                          @ _xpos(k, pos, "key", centre, seq_len, layout).T)
    # closed form: <q'_m, k'_n> = sum_i zeta_i^((m-n)/B) Re(h_i e^{i(m-n) w_i})
    zeta = (np.arange(0, 8, 2) + 3.2) / 11.2
    w = rope.inv_freq(8)[0]
    qa, qb = (q[..., :4], q[..., 4:]) if layout == "half" else (q[..., 0::2], q[..., 1::2])
    ka, kb = (k[..., :4], k[..., 4:]) if layout == "half" else (k[..., 0::2], k[..., 1::2])
    h = (qa + 1j * qb)[:, None, :] * np.conj(ka + 1j * kb)[None, :, :]
    r = (pos[:, None] - pos[None, :])[..., None]
    expected = np.sum(zeta ** (r / 512) * np.real(h * np.exp(1j * r * w)), axis=-1)
    for got in scores.values():
        np.testing.assert_allclose(got, expected, atol=1e-12 * max(1.0, np.abs(expected).max()))


def test_xpos_centre_must_be_shared_by_q_and_k():
    """rotary-embedding-torch 0.9.1's rotate_queries_with_cached_keys centres q on len(q) // 2 and
    k on len(k) // 2; with different centres the scores are no longer relative-only."""
    rng = np.random.default_rng(3)
    q, k = rng.standard_normal((2, 9, 8))
    pos = np.arange(9)
    same = _xpos(q, pos, "query", "torchscale", 9) @ _xpos(k, pos, "key", "torchscale", 9).T
    mixed = _xpos(q, pos, "query", "torchscale", 3) @ _xpos(k, pos, "key", "torchscale", 9).T
    assert np.abs(same - mixed).max() > 1e-4


@pytest.mark.parametrize("role", ["query", "key"])
@pytest.mark.parametrize("layout", rope.LAYOUTS)
def test_xpos_backward_gradcheck(role, layout):
    cos, sin = rope.xpos_cos_sin(np.arange(6) * 300, rope.inv_freq(8)[0], role=role, centre="torchscale",
                                 seq_len=1800, scale_base=64.0, layout=layout)
    assert not np.allclose(cos**2 + sin**2, 1.0)  # the tables really carry a scale
    x = np.random.default_rng(4).standard_normal((6, 10))
    gradcheck(lambda x: rope.apply(x, cos, sin, layout=layout),
              lambda g, x: {"x": rope.apply_backward(g, cos, sin, layout=layout)}, {"x": x}, max_entries=None)


def test_xpos_bad_input():
    with pytest.raises(ValueError, match="needs seq_len"):
        rope.xpos_scale([0, 1], 8, role="query", centre="torchscale")
    with pytest.raises(ValueError, match="centre must be one of"):
        rope.xpos_scale([0, 1], 8, role="query", centre="middle")
    with pytest.raises(ValueError, match="role must be one of"):
        rope.xpos_scale([0, 1], 8, role="value")
    with pytest.raises(ValueError, match="scale_base must be > 0"):
        rope.xpos_scale([0, 1], 8, role="key", scale_base=0.0)


# --------------------------------------------------------------------------- 2-D axial

def test_patch_positions_row_major():
    np.testing.assert_array_equal(rope.patch_positions(2, 3), [[0, 0, 0, 1, 1, 1], [0, 1, 2, 0, 1, 2]])


def test_axial_matches_qwen2_vl_vision_recipe():
    """HF Qwen2-VL vision: inv_freq over head_dim // 2, freqs = cat(h * inv, w * inv), table cat(f, f)."""
    head_dim = 16
    inv = 10000.0 ** (-np.arange(0, head_dim // 2, 2) / (head_dim // 2))
    hw = rope.patch_positions(3, 4)
    f = np.concatenate([hw[0][:, None] * inv, hw[1][:, None] * inv], axis=-1)
    cos, sin = rope.axial_cos_sin(hw, rope.inv_freq(head_dim // 2)[0])
    np.testing.assert_allclose(cos, np.cos(np.concatenate([f, f], -1)), atol=4 * EPS)
    np.testing.assert_allclose(sin, np.sin(np.concatenate([f, f], -1)), atol=4 * EPS)


@pytest.mark.parametrize("layout", rope.LAYOUTS)
def test_axial_channels_and_2d_relative_scores(layout):
    inv = rope.inv_freq(8, base=100.0)[0]
    grid = rope.patch_positions(4, 5)
    x = np.random.default_rng(5).standard_normal((20, 16))
    y = rope.apply(x, *rope.axial_cos_sin(grid, inv, layout=layout), layout=layout)
    # pairs 0-3 follow the row only: moving the columns leaves them unchanged
    moved = grid.copy()
    moved[1] += 7
    y2 = rope.apply(x, *rope.axial_cos_sin(moved, inv, layout=layout), layout=layout)
    row_channels = np.r_[0:4, 8:12] if layout == "half" else np.r_[0:8]
    np.testing.assert_array_equal(y[:, row_channels], y2[:, row_channels])
    assert not np.allclose(y, y2)
    # scores depend on (d_row, d_col) only: shifting both patches' coordinates changes nothing
    shift = grid + np.array([[3], [-2]])
    y3 = rope.apply(x, *rope.axial_cos_sin(shift, inv, layout=layout), layout=layout)
    np.testing.assert_allclose(y3 @ y3.T, y @ y.T, atol=1e-12)


def test_axial_backward_gradcheck():
    cos, sin = rope.axial_cos_sin(rope.patch_positions(2, 3), rope.inv_freq(4)[0], layout="interleaved")
    x = np.random.default_rng(6).standard_normal((6, 8))
    gradcheck(lambda x: rope.apply(x, cos, sin, layout="interleaved"),
              lambda g, x: {"x": rope.apply_backward(g, cos, sin, layout="interleaved")}, {"x": x}, max_entries=None)


# --------------------------------------------------------------------------- M-RoPE

MPOS = np.array([[0, 1, 2, 2, 2, 2, 4], [0, 1, 2, 2, 3, 3, 4], [0, 1, 2, 3, 2, 3, 4]])


def test_mrope_matches_qwen2_vl_recipe():
    """HF Qwen2-VL: freqs (3, L, d/2) split by mrope_section, chunk i from stream i % 3, then cat(f, f)."""
    inv = rope.inv_freq(16)[0]
    freqs = MPOS[..., None] * inv
    f = np.concatenate([chunk[i % 3] for i, chunk in enumerate(np.split(freqs, np.cumsum([2, 3])[:2], axis=-1))],
                       axis=-1)
    cos, sin = rope.mrope_cos_sin(MPOS, inv, [2, 3, 3])
    np.testing.assert_allclose(cos, np.cos(np.concatenate([f, f], -1)), atol=4 * EPS)
    np.testing.assert_allclose(sin, np.sin(np.concatenate([f, f], -1)), atol=4 * EPS)


def test_mrope_matches_qwen3_vl_recipe():
    """HF Qwen3-VL: start from the t frequencies, overwrite indices 1::3 below 3*sec[1] with h, 2::3 below 3*sec[2] with w."""
    inv = rope.inv_freq(24)[0]
    freqs = (MPOS[..., None] * inv).astype(float)
    f = freqs[0].copy()
    for stream, offset in ((1, 1), (2, 2)):
        idx = slice(offset, [6, 3, 3][stream] * 3, 3)
        f[..., idx] = freqs[stream][..., idx]
    cos, _ = rope.mrope_cos_sin(MPOS, inv, [6, 3, 3], variant="qwen3-vl")
    np.testing.assert_allclose(cos, np.cos(np.concatenate([f, f], -1)), atol=4 * EPS)


@pytest.mark.parametrize("variant,section", [("qwen2-vl", [2, 3, 3]), ("qwen3-vl", [2, 3, 3])])
def test_mrope_text_tokens_reduce_to_1d_rope(variant, section):
    pos = np.arange(9)
    inv = rope.inv_freq(16)[0]
    for layout in rope.LAYOUTS:
        got = rope.mrope_cos_sin(np.stack([pos] * 3), inv, section, variant=variant, layout=layout)
        want = rope.cos_sin(pos, inv, layout=layout)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])


def test_mrope_backward_gradcheck_and_batch_shape():
    pos = np.stack([MPOS, MPOS + 1])  # (batch 2, 3, L) -> move the stream axis first
    cos, sin = rope.mrope_cos_sin(np.moveaxis(pos, 1, 0), rope.inv_freq(16)[0], [2, 3, 3])
    assert cos.shape == (2, 7, 16)
    x = np.random.default_rng(8).standard_normal((2, 3, 7, 16))  # (batch, heads, L, head_dim)
    cos_b, sin_b = cos[:, None], sin[:, None]
    gradcheck(lambda x: rope.apply(x, cos_b, sin_b), lambda g, x: {"x": rope.apply_backward(g, cos_b, sin_b)},
              {"x": x}, max_entries=100)


def test_mrope_bad_input():
    inv = rope.inv_freq(16)[0]
    with pytest.raises(ValueError, match="must sum to len"):
        rope.mrope_cos_sin(MPOS, inv, [2, 2, 2])
    with pytest.raises(ValueError, match="shape"):
        rope.mrope_cos_sin(MPOS[:2], inv, [2, 3, 3])
    with pytest.raises(ValueError, match="variant must be one of"):
        rope.mrope_cos_sin(MPOS, inv, [2, 3, 3], variant="qwen2.5")
    with pytest.raises(TypeError, match="mrope_section"):
        rope.mrope_cos_sin(MPOS, inv, 8)
    with pytest.raises(ValueError, match="qwen3-vl"):
        rope.mrope_cos_sin(MPOS, inv, [2, 2, 2, 2], variant="qwen3-vl")
