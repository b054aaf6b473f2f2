"""RoPE frequency scaling: published test points, each formula, dict handling, bad input, and
what a KV cache holds across the dynamic-NTK / LongRoPE switch-over."""

import inspect
import math

import mpmath
import numpy as np
import pytest

from posenc_np import rope, rope_scaling

EPS = np.finfo(np.float64).eps


def plain(d, base=10000.0):
    """base^(-2i/d), each correctly rounded (mpmath at 40 digits): NumPy's ``**`` is not
    correctly rounded, and its last bit can change between NumPy releases (NumPy 2.4.6 broke a bit-exact comparison)."""
    with mpmath.workdps(40):
        return np.array([float(mpmath.mpf(base) ** (-mpmath.mpf(i) / d)) for i in range(0, d, 2)])


LLAMA31 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
           "original_max_position_embeddings": 8192}
SHORT = [1.0, 1.0, 1.05, 1.1, 1.2, 1.3, 1.5, 2.0]
LONG = [1.0, 1.25, 1.5, 2.0, 3.0, 5.0, 8.0, 12.0]
LONGROPE = {"rope_type": "longrope", "short_factor": SHORT, "long_factor": LONG,
            "original_max_position_embeddings": 4096}


# --------------------------------------------------------------------------- published test points

def test_yarn_correction_range_published_points():
    assert rope.yarn_correction_dim(32, 64, 1.5e5, 4096) == pytest.approx(8.0928, abs=5e-5)
    assert rope.yarn_correction_dim(1, 64, 1.5e5, 4096) == pytest.approx(17.3980, abs=5e-5)
    assert rope.yarn_correction_range(64, 1.5e5, 4096) == (8, 18)
    assert rope.yarn_correction_dim(32, 128, 1e4, 4096) == pytest.approx(20.94, abs=5e-3)
    assert rope.yarn_correction_dim(1, 128, 1e4, 4096) == pytest.approx(45.03, abs=5e-3)
    assert rope.yarn_correction_range(128, 1e4, 4096) == (20, 46)
    assert rope.yarn_correction_range(64, 1.5e5, 4096, truncate=False) == pytest.approx((8.0928, 17.3980), abs=5e-5)


def test_yarn_g32_and_attention_factor():
    assert rope.yarn_get_mscale(32) == pytest.approx(1.346574, abs=5e-7)
    assert rope.yarn_get_mscale(1.0) == 1.0 and rope.yarn_get_mscale(0.5) == 1.0
    sc = {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096}
    assert rope.inv_freq(64, base=1.5e5, scaling=sc)[1] == pytest.approx(1.346574, abs=5e-7)


def test_llama31_split_29_6_29():
    bands = rope.llama3_bands(128, 5e5, LLAMA31)
    assert np.bincount(bands, minlength=3).tolist() == [29, 6, 29]
    assert bands[:29].tolist() == [0] * 29 and bands[-29:].tolist() == [2] * 29
    inv, af = rope.inv_freq(128, base=5e5, scaling=LLAMA31)
    w = plain(128, 5e5)
    np.testing.assert_array_equal(inv[:29], w[:29])
    np.testing.assert_allclose(inv[35:], w[35:] / 8, rtol=4 * EPS)
    lam = 2 * math.pi / w[29:35]
    smooth = (8192 / lam - 1) / 3
    np.testing.assert_allclose(inv[29:35], (1 - smooth) * w[29:35] / 8 + smooth * w[29:35], rtol=8 * EPS)
    assert af == 1.0


def test_longrope_exactly_l0_uses_short_factor():
    w = plain(16)
    for seq_len, factors in ((None, SHORT), (1, SHORT), (4096, SHORT), (4097, LONG), (100000, LONG)):
        inv, af = rope.inv_freq(16, scaling=LONGROPE, seq_len=seq_len, max_position_embeddings=131072)
        np.testing.assert_allclose(inv, w / np.array(factors), rtol=2 * EPS)
        assert af == pytest.approx(math.sqrt(1 + math.log(32) / math.log(4096)), rel=1e-15)


# --------------------------------------------------------------------------- each formula

def test_default_linear_ntk_dynamic_formulas():
    np.testing.assert_allclose(rope.inv_freq(64)[0], plain(64), rtol=2 * EPS)
    assert rope.inv_freq(64)[1] == 1.0
    np.testing.assert_allclose(rope.inv_freq(32, scaling={"type": "linear", "factor": 4.0})[0], plain(32) / 4,
                               rtol=2 * EPS)
    ntk = rope.inv_freq(64, scaling={"rope_type": "ntk", "alpha": 8.0})[0]
    np.testing.assert_allclose(ntk, plain(64, 1e4 * 8.0 ** (64 / 62)), rtol=8 * EPS)
    dyn = {"rope_type": "dynamic", "factor": 2.0}
    for seq_len in (None, 1, 2048):  # at or below max_position_embeddings: unscaled
        np.testing.assert_allclose(rope.inv_freq(64, scaling=dyn, seq_len=seq_len, max_position_embeddings=2048)[0],
                                   plain(64), rtol=2 * EPS)
    got = rope.inv_freq(64, scaling=dyn, seq_len=6144, max_position_embeddings=2048)[0]
    np.testing.assert_allclose(got, plain(64, 1e4 * (2 * 6144 / 2048 - 1) ** (64 / 62)), rtol=8 * EPS)


def test_yarn_ramp_regions_and_factor_defaults():
    sc = {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 4096}
    inv, af = rope.inv_freq(128, scaling=sc)
    w = plain(128)
    np.testing.assert_array_equal(inv[:20], w[:20])  # below low = 20: extrapolate (unchanged)
    np.testing.assert_allclose(inv[46:], w[46:] / 16, rtol=2 * EPS)  # from high = 46: interpolate
    r = (np.arange(20, 46) - 20) / 26
    np.testing.assert_allclose(inv[20:46], w[20:46] / 16 * r + w[20:46] * (1 - r), rtol=16 * EPS)
    assert af == pytest.approx(0.1 * math.log(16) + 1)
    # factor absent/None -> max_position_embeddings / L0; mscale ratio; explicit attention_factor wins
    no_factor = {**sc, "factor": None, "mscale": 0.707, "mscale_all_dim": 0.5}
    inv2, af2 = rope.inv_freq(128, scaling=no_factor, max_position_embeddings=65536)
    np.testing.assert_array_equal(inv2, inv)
    assert af2 == pytest.approx((0.0707 * math.log(16) + 1) / (0.05 * math.log(16) + 1))
    assert rope.inv_freq(128, scaling={**sc, "mscale": 1.0})[1] == af  # only one mscale: g(s)
    assert rope.inv_freq(128, scaling={**sc, "attention_factor": 0.5, "mscale": 1.0, "mscale_all_dim": 2.0})[1] == 0.5
    # L0 missing from the dict: HF's standardize_rope_params uses max_position_embeddings
    only_factor = {"rope_type": "yarn", "factor": 16.0}
    np.testing.assert_array_equal(rope.inv_freq(128, scaling=only_factor, max_position_embeddings=4096)[0], inv)


def test_yarn_zero_width_ramp():
    sc = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 8, "beta_slow": 2.0}
    assert rope.yarn_correction_range(16, 1e4, 8, beta_slow=2.0) == (0, 0)
    inv = rope.inv_freq(16, scaling=sc)[0]
    w = plain(16)
    assert inv[0] == w[0]  # ramp 0 at j = 0 (high moved to 0.001)
    np.testing.assert_allclose(inv[1:], w[1:] / 8, rtol=2 * EPS)


def test_proportional():
    inv = rope.inv_freq(64, scaling={"rope_type": "proportional", "partial_rotary_factor": 0.25})[0]
    np.testing.assert_allclose(inv[:8], plain(64)[:8], rtol=2 * EPS)
    assert np.all(inv[8:] == 0) and inv.shape == (32,)
    half = rope.inv_freq(32, scaling={"rope_type": "proportional", "partial_rotary_factor": 0.5, "factor": 2.0})[0]
    np.testing.assert_allclose(half[:8], plain(32)[:8] / 2, rtol=2 * EPS)
    assert np.all(half[8:] == 0)
    # zero frequencies leave their pairs unrotated: cos 1, sin 0
    cos, sin = rope.cos_sin(np.array([1000]), inv)
    assert np.all(cos[0, 8:32] == 1) and np.all(sin[0, 8:32] == 0)


def test_rope_theta_in_dict():
    sc = {"rope_type": "default", "rope_theta": 5e5}
    np.testing.assert_array_equal(rope.inv_freq(16, scaling=sc)[0], rope.inv_freq(16, base=5e5)[0])
    np.testing.assert_array_equal(rope.inv_freq(16, base=5e5, scaling=sc)[0], rope.inv_freq(16, base=5e5)[0])
    with pytest.raises(ValueError, match="disagrees"):
        rope.inv_freq(16, base=10000.0, scaling=sc)  # passed explicitly, even at the default value
    # not passed (None): 10000, unless the dict carries rope_theta
    assert inspect.signature(rope.inv_freq).parameters["base"].default is None
    np.testing.assert_array_equal(rope.inv_freq(16, base=None)[0], rope.inv_freq(16, base=rope_scaling.DEFAULT_BASE)[0])
    assert rope_scaling.parse_scaling(16, scaling=sc).base == 5e5 and rope_scaling.parse_scaling(16).base == 1e4


def test_partial_rotary_factor_makes_dim_the_head_dim():
    """HF: rotary dim = int(head_dim * partial_rotary_factor) (GPT-NeoX rotary_pct 0.25, Phi-2 0.4)."""
    neox = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25}
    np.testing.assert_array_equal(rope.inv_freq(128, scaling=neox)[0], plain(32))
    phi2 = {"rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 0.4}
    np.testing.assert_allclose(rope.inv_freq(80, scaling=phi2)[0], plain(32) / 2, rtol=2 * EPS)


def test_mrope_legacy_type_is_default_frequencies():
    sc = {"type": "mrope", "mrope_section": [16, 24, 24]}
    np.testing.assert_array_equal(rope.inv_freq(128, scaling=sc)[0], rope.inv_freq(128)[0])


@pytest.mark.parametrize("kwargs,match", [
    ({"dim": 7}, "must be even"),
    ({"dim": 8, "base": 1.0}, "base must differ from 1"),
    ({"dim": 8, "base": -2.0}, "base must be > 0"),
    ({"dim": 8, "scaling": {"rope_type": "ntk-by-parts"}}, "unknown rope_type"),
    ({"dim": 8, "scaling": {"rope_type": "linear"}}, "needs key 'factor'"),
    ({"dim": 8, "scaling": {"rope_type": "linear", "factor": -2.0}}, r"factor'\] must be > 0"),
    ({"dim": 8, "scaling": {"rope_type": "linear", "factor": float("nan")}}, "must be finite"),
    ({"dim": 8, "scaling": {"rope_type": "linear", "factor": 2.0, "facter": 3}}, "does not use"),
    ({"dim": 8, "scaling": {"rope_type": "linear", "type": "dynamic", "factor": 2.0}}, "must agree"),
    ({"dim": 10, "scaling": {"rope_type": "linear", "factor": 2.0, "partial_rotary_factor": 0.5}},
     r"int\(10 \* 0.5\) = 5 must be even"),
    ({"dim": 8, "scaling": {"rope_type": "default", "partial_rotary_factor": 1.5}}, r"factor.\] must be <= 1.0"),
    ({"dim": 8, "scaling": {"rope_type": "dynamic", "factor": 2.0}}, "needs the max_position_embeddings"),
    ({"dim": 2, "scaling": {"rope_type": "ntk", "alpha": 2.0}}, "dim must be > 2"),
    ({"dim": 8, "scaling": {"rope_type": "ntk", "alpha": 0.0}}, "must be > 0"),
    ({"dim": 8, "scaling": {"rope_type": "yarn", "factor": 2.0}}, "original_max_position_embeddings"),
    ({"dim": 8, "scaling": {"rope_type": "yarn", "original_max_position_embeddings": 64}}, "needs scaling\\['factor'\\]"),
    ({"dim": 8, "scaling": {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 64,
                            "mscale": -1.0, "mscale_all_dim": 1.0}}, "must be >= 0"),
    ({"dim": 8, "scaling": {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 64,
                            "beta_fast": -32.0}}, "beta_fast"),
    ({"dim": 8, "scaling": {**LONGROPE}, "max_position_embeddings": 8192}, r"dim // 2 = 4 finite values > 0, got shape \(8,\)"),
    ({"dim": 16, "scaling": {**LONGROPE, "short_factor": [1.0] * 7 + [-1.0]}, "max_position_embeddings": 8192},
     "finite values > 0"),
    ({"dim": 128, "scaling": {**LLAMA31, "high_freq_factor": 1.0}}, "high_freq_factor > low_freq_factor"),
    ({"dim": 8, "scaling": {"rope_type": "proportional", "partial_rotary_factor": 1.5}}, r"factor.\] must be <= 1.0"),
    ({"dim": 8, "seq_len": 0}, "seq_len must be an integer >= 1"),
])
def test_bad_scaling_value_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        rope.inv_freq(**kwargs)


def test_bad_scaling_type_errors():
    with pytest.raises(TypeError, match="scaling must be a dict"):
        rope.inv_freq(8, scaling="yarn")
    with pytest.raises(TypeError, match="truncate"):
        rope.inv_freq(8, scaling={"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 64,
                                  "truncate": "yes"})
    with pytest.raises(TypeError, match="dim must be an integer"):
        rope.inv_freq(8.0)


# --------------------------------------------------------------------------- KV cache across the switch-over

def _rotate(x, pos, inv):
    return rope.apply(x, *rope.cos_sin(pos, inv))


def _check_cache_story(old_inv, new_inv, switch_pos):
    """Keys cached before the switch hold rotations by the OLD frequencies; a full recompute uses
    the new ones for every key. With complex pairs z = a + ib (half layout), a query at P after
    the switch scores key n as Re(q e^{iPw'} conj(k e^{inw})) against the cache and
    Re(q e^{iPw'} conj(k e^{inw'})) against the recompute; `rerotate` turns one into the other."""
    rng = np.random.default_rng(7)
    dim, n = 2 * old_inv.size, old_inv.size
    keys, q = rng.standard_normal((switch_pos, dim)), rng.standard_normal(dim)
    pos = np.arange(switch_pos)
    cached = _rotate(keys, pos, old_inv)        # built token by token before the switch
    recomputed = _rotate(keys, pos, new_inv)    # full recompute after the switch
    q_rot = _rotate(q, switch_pos, new_inv)
    qc = (q[:n] + 1j * q[n:]) * np.exp(1j * switch_pos * new_inv)
    kc = keys[:, :n] + 1j * keys[:, n:]
    for held, inv in ((cached, old_inv), (recomputed, new_inv)):
        expected = np.real(qc * np.conj(kc * np.exp(1j * pos[:, None] * inv))).sum(axis=-1)
        np.testing.assert_allclose(held @ q_rot, expected, atol=1e-10)
    assert np.abs(cached @ q_rot - recomputed @ q_rot).max() > 1e-3  # a stale cache is visibly different
    np.testing.assert_allclose(rope.rerotate(cached, pos, old_inv, new_inv), recomputed, atol=1e-10)


def test_dynamic_ntk_cache_before_switch_vs_recompute():
    dyn = {"rope_type": "dynamic", "factor": 4.0}
    max_pos = 64
    # HF passes seq_len = max(position_ids) + 1: positions 0..63 keep the original base
    before = rope.inv_freq(16, scaling=dyn, seq_len=64, max_position_embeddings=max_pos)[0]
    np.testing.assert_array_equal(before, rope.inv_freq(16)[0])
    after = rope.inv_freq(16, scaling=dyn, seq_len=101, max_position_embeddings=max_pos)[0]
    assert np.all(after[1:] < before[1:])
    _check_cache_story(before, after, 100)


def test_longrope_cache_before_switch_vs_recompute():
    L0 = 40
    sc = {**LONGROPE, "original_max_position_embeddings": L0}
    short = rope.inv_freq(16, scaling=sc, seq_len=L0, max_position_embeddings=32 * L0)[0]
    long_ = rope.inv_freq(16, scaling=sc, seq_len=L0 + 1, max_position_embeddings=32 * L0)[0]
    np.testing.assert_allclose(short, plain(16) / np.array(SHORT), rtol=2 * EPS)
    np.testing.assert_allclose(long_, plain(16) / np.array(LONG), rtol=2 * EPS)
    _check_cache_story(short, long_, L0)
