"""Exact float64 tables (posenc_np._exact) against mpmath: frequencies of every rope_type correctly
rounded, cos/sin within one ulp at positions up to 2**52 (integer and float), the argument checks,
the float32-split construction, and equal frequencies giving equal tables (the exact values travel
only as an explicit ExactFrequencies)."""

import pickle

import mpmath
import numpy as np
import pytest

from posenc_np import _exact, absolute, rope
from posenc_np.golden import cases_rope, oracle_rope

MP_BITS = 420  # enough for p * w at p ~ 2^52 with ~300 correct bits left


def _ulp_errors(values, exact) -> np.ndarray:
    """|value - exact| in ulps of the correctly rounded exact value (exact: array of mpf)."""
    out = np.empty(values.size)
    for j, (v, e) in enumerate(zip(values.reshape(-1), exact.reshape(-1))):
        rounded = float(e)
        if rounded == 0:  # an exact zero (position 0, frequency 0) must come out as zero
            out[j] = 0.0 if v == 0 else np.inf
        else:
            out[j] = float(abs(mpmath.mpf(float(v)) - e)) / np.spacing(abs(rounded))
    return out


def _mp_freqs(params):
    """The oracle's frequencies; its parameters name the head dim and the rotary dim (``dim`` here is
    the rotary dim, the head dim for ``proportional``, as ``rope.inv_freq`` reads it)."""
    case = cases_rope.rope_params(params["dim"], params["base"], params.get("scaling"), seq_len=params.get("seq_len"),
                                  max_pos=params.get("max_position_embeddings"))
    with mpmath.workprec(MP_BITS):
        inv, af, _ = oracle_rope.frequencies(case)
    return inv, af


def _mpf(x):
    """``mpmath.mpf`` of a Python or NumPy number (mpmath 1.3 rejects NumPy integers)."""
    return mpmath.mpf(x.item() if isinstance(x, np.generic) else x)


def _mp_tables(positions, inv, amplitude=1):
    """Exact amplitude*cos / amplitude*sin of positions[:, None] * inv (lists of mpf)."""
    with mpmath.workprec(MP_BITS):
        shape = (len(positions), len(inv))
        c, s = np.empty(shape, dtype=object), np.empty(shape, dtype=object)
        for a, p in enumerate(positions):
            for i, w in enumerate(inv):
                t = _mpf(p) * w
                c[a, i], s[a, i] = amplitude * mpmath.cos(t), amplitude * mpmath.sin(t)
    return c, s


SCALINGS = [
    ({"dim": 128, "base": 10000.0}, None),
    ({"dim": 96, "base": 500000.0}, None),
    ({"dim": 64, "base": 10000.0}, {"rope_type": "linear", "factor": 3.0}),
    ({"dim": 64, "base": 10000.0}, {"rope_type": "ntk", "alpha": 2.5}),
    ({"dim": 64, "base": 10000.0, "seq_len": 7000, "max_position_embeddings": 4096},
     {"rope_type": "dynamic", "factor": 2.0}),
    ({"dim": 128, "base": 10000.0},
     {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}),
    ({"dim": 64, "base": 150000.0},
     {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096, "truncate": False,
      "mscale": 0.707, "mscale_all_dim": 1.0}),
    ({"dim": 16, "base": 10000.0, "seq_len": 5000, "max_position_embeddings": 131072},
     {"rope_type": "longrope", "original_max_position_embeddings": 4096,
      "short_factor": [1.0, 1.1, 1.3, 1.7, 2.0, 2.9, 3.3, 4.1], "long_factor": [1.2, 1.5, 2.0, 3.1, 5.0, 8.3, 13.0, 21.0]}),
    ({"dim": 128, "base": 500000.0},
     {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 8192}),
    ({"dim": 64, "base": 10000.0}, {"rope_type": "proportional", "partial_rotary_factor": 0.5, "factor": 2.0}),
]


def _lib_freqs(params, scaling):
    return rope.exact_inv_freq(params["dim"], base=params["base"], scaling=scaling, seq_len=params.get("seq_len"),
                               max_position_embeddings=params.get("max_position_embeddings"))


@pytest.mark.parametrize("params,scaling", SCALINGS,
                         ids=["default-d128", "default-d96", "linear", "ntk", "dynamic", "yarn", "yarn-mscale",
                              "longrope", "llama3", "proportional"])
def test_inv_freq_of_every_rope_type_is_correctly_rounded(params, scaling):
    inv, af = _lib_freqs(params, scaling)
    exact, exact_af = _mp_freqs({**params, "scaling": scaling})
    assert isinstance(inv, rope.ExactFrequencies) and inv.rounded.dtype == np.float64
    assert [float(e) for e in exact] == inv.rounded.tolist()  # each the correctly rounded value
    plain, plain_af = rope.inv_freq(params["dim"], base=params["base"], scaling=scaling, seq_len=params.get("seq_len"),
                                    max_position_embeddings=params.get("max_position_embeddings"))
    assert type(plain) is np.ndarray and plain.tolist() == inv.rounded.tolist() and plain_af == af
    assert af == float(exact_af)
    with mpmath.workprec(MP_BITS):  # and the values cos_sin uses are the formula's to ~250 bits
        for (m, e), x in zip(inv.exact, exact):
            assert abs(_mpf(m) * mpmath.mpf(2) ** e - x) <= abs(x) * mpmath.mpf(2) ** -240


def test_sinusoidal_frequencies_and_timing_signal_timescales_are_correctly_rounded():
    with mpmath.workprec(MP_BITS):
        want = [float(mpmath.power(10000, -mpmath.mpf(2 * i) / 100)) for i in range(50)]
        lo, hi, n = 1.0, 1.0e4, 9
        ts = [float(lo * mpmath.exp(-i * mpmath.log(mpmath.mpf(hi) / lo) / (n - 1))) for i in range(n)]
    assert absolute.sinusoidal_frequencies(100).tolist() == want
    # timing_signal at position 1 is [sin(w) | cos(w)]: recover w = atan2 exactly enough to compare
    sig = absolute.timing_signal(np.array([1]), 2 * n)[0]
    np.testing.assert_allclose(np.arctan2(sig[:n], sig[n:]), ts, rtol=2e-16)


def _positions(rng):
    ints = np.r_[rng.integers(-2 ** 52, 2 ** 52, 24), [0, 1, 2 ** 53 - 1, -(2 ** 53 - 1), 10 ** 7, 131071]]
    floats = np.r_[rng.uniform(-1e7, 1e7, 6), rng.uniform(-1, 1, 4) * 2.0 ** rng.integers(-60, 52, 4), 0.5, -3.75]
    return ints, floats


@pytest.mark.parametrize("case", [0, 5, 8], ids=["default-d128", "yarn", "llama3"])
def test_cos_sin_within_one_ulp_at_positions_up_to_2_52(case):
    """The issue's target: every float64 entry within 1 ulp of mpmath (and nearly all correctly rounded)."""
    params, scaling = SCALINGS[case]
    inv, af = _lib_freqs(params, scaling)
    exact_inv, exact_af = _mp_freqs({**params, "scaling": scaling})
    rng = np.random.default_rng(case)
    for pos in _positions(rng):
        cols = np.arange(0, inv.rounded.size, 5)  # a spread of frequencies keeps mpmath quick
        cos, sin = rope.cos_sin(pos, inv, attention_factor=af, layout="half")
        want_c, want_s = _mp_tables(pos, [exact_inv[i] for i in cols], exact_af)
        errs = np.r_[_ulp_errors(cos[:, cols], want_c), _ulp_errors(sin[:, cols], want_s)]
        assert errs.max() <= 1.0, errs.max()
        # against the attention factor actually passed (a double), nearly every entry is correctly rounded
        want_c, want_s = _mp_tables(pos, [exact_inv[i] for i in cols], mpmath.mpf(af))
        errs = np.r_[_ulp_errors(cos[:, cols], want_c), _ulp_errors(sin[:, cols], want_s)]
        assert np.mean(errs <= 0.5) >= 0.99


def test_sinusoidal_and_timing_signal_within_one_ulp():
    rng = np.random.default_rng(3)
    pos = np.r_[rng.integers(0, 2 ** 52, 12), 10 ** 7 + 3]
    enc = absolute.sinusoidal(pos, 32, layout="interleaved")
    with mpmath.workprec(MP_BITS):
        w = [mpmath.power(10000, -mpmath.mpf(2 * i) / 32) for i in range(16)]
    want_c, want_s = _mp_tables(pos, w)
    assert _ulp_errors(enc[:, 0::2], want_s).max() <= 1 and _ulp_errors(enc[:, 1::2], want_c).max() <= 1
    sig = absolute.timing_signal(pos, 16, start_index=5)
    with mpmath.workprec(MP_BITS):
        ts = [mpmath.exp(-i * mpmath.log(mpmath.mpf(10000)) / 7) for i in range(8)]
    want_c, want_s = _mp_tables(pos + 5, ts)
    assert _ulp_errors(sig[:, :8], want_s).max() <= 1 and _ulp_errors(sig[:, 8:], want_c).max() <= 1


def test_double_double_reference_is_within_2_to_minus_60():
    inv, _ = rope.exact_inv_freq(64)
    pos = np.array([3, 99991, 2 ** 40 + 17, 2 ** 52 - 5])
    c_hi, c_lo, s_hi, s_lo = _exact.dd_cos_sin(_exact.positions(pos), _exact.turn_constants(inv))
    with mpmath.workprec(MP_BITS):
        w = [_mpf(m) * mpmath.mpf(2) ** e for m, e in inv.exact]
    want_c, want_s = _mp_tables(pos, w)
    with mpmath.workprec(MP_BITS):
        for hi, lo, want in ((c_hi, c_lo, want_c), (s_hi, s_lo, want_s)):
            for h, lo_, w in zip(hi.ravel(), lo.ravel(), want.ravel()):
                assert abs(mpmath.mpf(float(h)) + mpmath.mpf(float(lo_)) - w) <= mpmath.mpf(2) ** -60 * max(abs(w), 1e-3)


def test_attention_factor_and_other_table_builders_are_exact():
    inv, _ = rope.exact_inv_freq(16)
    with mpmath.workprec(MP_BITS):
        w = [_mpf(m) * mpmath.mpf(2) ** e for m, e in inv.exact]
    pos = np.array([7, 123456789, 2 ** 45 + 1])
    cos, _ = rope.cos_sin(pos, inv, attention_factor=1.3467, layout="interleaved")
    want_c, _ = _mp_tables(pos, w, mpmath.mpf(1.3467))
    assert _ulp_errors(cos[:, 0::2], want_c).max() <= 1
    # axial and M-RoPE tables go through the same kernel: each stream's angles are exact too
    grid = np.stack([pos, pos[::-1]])
    c_ax, _ = rope.axial_cos_sin(grid, inv)
    want_row, _ = _mp_tables(pos, w)
    want_col, _ = _mp_tables(pos[::-1], w)
    assert _ulp_errors(c_ax[:, :8], want_row).max() <= 1 and _ulp_errors(c_ax[:, 8:16], want_col).max() <= 1
    c_m, _ = rope.mrope_cos_sin(np.stack([pos, pos, pos]), inv, [2, 3, 3])
    np.testing.assert_array_equal(c_m, rope.cos_sin(pos, inv)[0])  # text tokens: M-RoPE equals 1-D RoPE


def test_representable_positions_only():
    inv, _ = rope.inv_freq(8)
    for bad in ([2 ** 53], [-(2 ** 53)], np.array([2 ** 63], dtype=np.uint64), np.array([2.0 ** 53]),
                np.array([2.0 ** 24], dtype=np.float32), np.array([2048], dtype=np.float16)):
        with pytest.raises(ValueError, match=r"2\*\*(53|24|11)"):
            rope.cos_sin(bad, inv)
        with pytest.raises(ValueError, match=r"2\*\*(53|24|11)"):
            absolute.sinusoidal(bad, 8)
    with pytest.raises(ValueError, match="after adding the offset"):
        absolute.timing_signal([2 ** 53 - 10], 8, start_index=20)
    # the largest representable ones work, and equal their int64 twins
    edge = np.array([2 ** 24 - 1], dtype=np.float32)
    np.testing.assert_array_equal(rope.cos_sin(edge, inv)[0], rope.cos_sin([2 ** 24 - 1], inv)[0])
    assert np.isfinite(rope.cos_sin([2 ** 53 - 1, -(2 ** 53 - 1)], inv)[0]).all()


def test_direct_method_is_the_ordinary_float64_table():
    inv, _ = rope.inv_freq(32)
    pos = np.array([0, 5, 77777, 10 ** 7])
    cos, sin = rope.cos_sin(pos, inv, attention_factor=1.25, method="direct")
    angles = pos[:, None].astype(np.float64) * np.asarray(inv)
    np.testing.assert_array_equal(cos[:, :16], 1.25 * np.cos(angles))
    np.testing.assert_array_equal(sin[:, 16:], 1.25 * np.sin(angles))
    exact, _ = rope.cos_sin(pos, inv, attention_factor=1.25)
    assert 1e-11 < np.abs(cos - exact).max() < 1e-8  # the product rounding the exact tables remove


def test_float32_split_construction():
    inv, _ = rope.inv_freq(128)
    rng = np.random.default_rng(4)
    pos = np.r_[np.arange(0, 4096, 97), rng.integers(0, 2 ** 40, 300), 10 ** 7, 2 ** 53 - 1, -12345]
    cos, sin = rope.cos_sin(pos, inv, method="float32-split", dtype=np.float32)
    assert cos.dtype == np.float32
    exact_c, exact_s = rope.cos_sin(pos, inv)
    err = max(np.abs(cos - exact_c).max(), np.abs(sin - exact_s).max())
    assert err <= 4.83 * 2.0 ** -25  # five roundings of values <= 1 (docstring bound 1.44e-7)
    # below 4096 the high table is cos 0 = 1, sin 0 = 0: the exact values rounded once
    low = (pos >= 0) & (pos < 4096)
    np.testing.assert_array_equal(cos[low], exact_c[low].astype(np.float32))
    # step by step: two small tables of exact values rounded to float32, one float32 angle addition
    a, b = pos - (pos & 4095), pos & 4095
    ca, sa = (t.astype(np.float32)[:, :64] for t in rope.cos_sin(a, inv))
    cb, sb = (t.astype(np.float32)[:, :64] for t in rope.cos_sin(b, inv))
    np.testing.assert_array_equal(cos[:, :64], ca * cb - sa * sb)
    np.testing.assert_array_equal(sin[:, :64], sa * cb + ca * sb)
    with pytest.raises(ValueError, match="integer positions"):
        rope.cos_sin([1.5], inv, method="float32-split")


def test_equal_frequencies_give_equal_tables():
    """No hidden state: an array of frequencies is taken at its doubles, whatever made it, so equal
    arrays give equal tables (the issue's example differed by 3.8e-5); the formula's unrounded values
    travel only as an explicit ExactFrequencies, and equal ones give equal tables too."""
    inv, _ = rope.inv_freq(128)
    pos = [10 ** 7 + 3, 2 ** 40 + 1]
    assert type(inv) is np.ndarray
    want = rope.cos_sin(pos, inv)
    for twin in (np.array(inv), inv.copy(), pickle.loads(pickle.dumps(inv)), rope.inv_freq(128)[0], list(inv),
                 absolute.sinusoidal_frequencies(128)):
        for got, expected in zip(rope.cos_sin(pos, twin), want):
            np.testing.assert_array_equal(got, expected)
    exact, _ = rope.exact_inv_freq(128)
    np.testing.assert_array_equal(exact.rounded, inv)
    with_exact = rope.cos_sin(pos, exact)
    for got, expected in zip(rope.cos_sin(pos, rope.exact_inv_freq(128)[0]), with_exact):
        np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(rope.cos_sin(pos, exact.rounded)[0], want[0])  # its doubles: an ordinary array
    assert 1e-6 < np.abs(with_exact[0] - want[0]).max() < 1e-3  # the frequencies' own rounding, made visible
    for other in (lambda f: rope.xpos_cos_sin(pos, f, role="query")[0],
                  lambda f: rope.axial_cos_sin(np.stack([pos, pos]), f)[0],
                  lambda f: rope.mrope_cos_sin(np.stack([pos] * 3), f, [64, 0, 0])[0]):
        np.testing.assert_array_equal(other(inv), other(np.array(inv)))
        np.testing.assert_array_equal(other(exact), other(rope.exact_inv_freq(128)[0]))
    with pytest.raises(ValueError, match="read-only"):
        exact.rounded[0] = 2.0


def test_special_frequencies():
    pos = np.array([0, 3, -7, 2 ** 50 + 3])
    c, s = rope.cos_sin(pos, [0.0, -0.3, 1e300], layout="half")
    assert (c[:, 0] == 1).all() and (s[:, 0] == 0).all()
    with mpmath.workprec(MP_BITS + 1100):  # 1e300 * p needs ~1000 more bits to reduce
        want_c, want_s = _mp_tables(pos, [mpmath.mpf(-0.3), mpmath.mpf(1e300)])
    assert _ulp_errors(c[:, 1:3], want_c).max() <= 1 and _ulp_errors(s[:, 1:3], want_s).max() <= 1
    with pytest.raises(ValueError, match="2\\*\\*60"):
        rope.cos_sin([0.5], [2.0 ** 70])


def test_fixed_point_constants_against_mpmath():
    with mpmath.workprec(1700):
        want = int(mpmath.floor(mpmath.mpf(2) ** 1600 / (2 * mpmath.pi)))
    assert abs(_exact._inv_two_pi_fixed() - want) <= 1
    tab = _exact._turn_table()
    with mpmath.workprec(200):
        for j in (0, 1, 64, 127, 128, 200, 384, 511):
            t = 2 * mpmath.pi * j / 512
            for hi, lo, want in ((tab["ch"][j], tab["cl"][j], mpmath.cos(t)), (tab["sh"][j], tab["sl"][j], mpmath.sin(t))):
                assert abs(mpmath.mpf(hi) + mpmath.mpf(lo) - want) <= mpmath.mpf(2) ** -104
    assert tab["ch"][128] == 0 and tab["sh"][256] == 0  # exact zeros keep relative accuracy near them
    rng = np.random.default_rng(9)
    for _ in range(200):  # _words: each word the correctly rounded remainder
        num, shift = int(rng.integers(1, 2 ** 62)) << 70 | int(rng.integers(0, 2 ** 62)), int(rng.integers(0, 300))
        hi, lo = _exact._words(num, shift, 2)
        with mpmath.workprec(400):
            x = mpmath.mpf(num) / mpmath.mpf(2) ** shift
            assert hi == float(x) and lo == float(x - hi)


@pytest.mark.parametrize("pos", [np.array([0, 1, 3, -5, 2 ** 40, 2 ** 52 - 1]),
                                 np.array([0.0, 0.5, -0.75, 1.25, 3.0e6 + 0.5])], ids=["int", "float"])
def test_tiny_and_subnormal_angles_within_one_ulp(pos):
    """sin of a tiny angle is the angle (sin(1e-300) = 1e-300, not 0), subnormal results included,
    cos is 1; zero angles stay exact. Checked against mpmath at 420 bits."""
    freqs = [1e-300, 5e-324, 1e-310, 2.0 ** -1060, 0.0, 1e-20, 2.0 ** -80, 2.0 ** -62]
    c, s = rope.cos_sin(pos, freqs, layout="half")
    n = len(freqs)
    want_c, want_s = _mp_tables(pos, [mpmath.mpf(w) for w in freqs])
    assert _ulp_errors(s[:, :n], want_s).max() <= 1 and _ulp_errors(c[:, :n], want_c).max() <= 1
    assert (s[pos == 0] == 0).all() and (c[pos == 0] == 1).all()


def test_timing_signal_with_tiny_timescales_keeps_the_angle():
    sig = absolute.timing_signal([1, 2, 3], 2, min_timescale=1e-300, max_timescale=1e-300)
    np.testing.assert_array_equal(sig[:, 0], [1e-300, 2e-300, 3e-300])
    np.testing.assert_array_equal(sig[:, 1], [1.0, 1.0, 1.0])
