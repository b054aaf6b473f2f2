"""posenc_np.precision: the emulated recipes against hand-derived cases and their defining float32
arithmetic step by step, the published failures they reproduce, the measurement functions, and
the HF config reader."""

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from posenc_np import precision as P
from posenc_np import rope, rope_scaling


def _setup(head_dim, base=10000.0, scaling=None, max_position_embeddings=None, seq_len=None):
    """A RoPE configuration (the one type, :class:`posenc_np.rope_scaling.Scaling`)."""
    return rope_scaling.parse_scaling(head_dim, base=base, scaling=scaling,
                                      max_position_embeddings=max_position_embeddings, seq_len=seq_len)

F32 = np.float32


def test_bfloat16_rounding_is_nearest_even_on_the_bit_pattern():
    x = np.array([1.0, 257.0, 259.0, 15962.0, 0.1, -2.5, np.nan, np.inf, -np.inf, -0.0, 3.4028235e38,
                  1.00390625, 1.01171875], dtype=F32)
    got = P.to_bfloat16(x)
    # 257 = 256 + 1 is a tie between 256 and 258 -> even 256; 259 -> 260; bfloat16 has 8 significant
    # bits, so 15962 (spacing 64 in [8192, 16384)) -> 15936; 1 + 2^-8 ties to 1, 1 + 3*2^-8 to 1 + 2^-6
    want = [1.0, 256.0, 260.0, 15936.0, 0.10009765625, -2.5, np.nan, np.inf, -np.inf, -0.0, np.inf,
            1.0, 1.015625]
    np.testing.assert_array_equal(got, np.array(want, dtype=F32))
    assert np.signbit(got[9]) and got.dtype == F32
    assert (got.view(np.uint32) & 0xFFFF)[np.isfinite(got)].max() == 0  # low 16 bits cleared
    # float64 input is rounded directly (correctly) and agrees with the float32 path away from ties
    r = np.random.default_rng(0).standard_normal(10000) * 1e3
    np.testing.assert_array_equal(P.to_bfloat16(r), P.to_bfloat16(r.astype(F32)))
    assert P.round_to(np.array([2049.0]), "float16")[0] == 2048 and P.round_to([1 / 3], "float32").dtype == F32


def test_hf_inv_freq_hand_case_and_float32_steps():
    inv, emulated = P.hf_inv_freq(_setup(8, 10000.0))
    # 10000 ** (f32(2)/8) = 10 exactly, ** 0.5 = 100, ** 0.75 = 1000: 1/x in float32
    np.testing.assert_array_equal(inv, np.array([1.0, 0.1, 0.01, 0.001], dtype=F32))
    assert emulated and inv.dtype == F32
    # d=128: transformers' expression, one float32 operation at a time
    inv, _ = P.hf_inv_freq(_setup(128, 500000.0))
    expo = np.arange(0, 128, 2, dtype=np.int64).astype(F32) / F32(128)
    powed = (np.float64(F32(500000.0)) ** expo.astype(np.float64)).astype(F32)  # float32 pow, correctly rounded
    np.testing.assert_array_equal(inv, F32(1.0) / powed)
    # and it differs from the exact frequencies by float32 rounding only
    exact = np.asarray(rope.inv_freq(128, base=500000.0)[0])
    assert np.abs(inv / exact - 1).max() < 2 * 2.0 ** -24


def test_hf_inv_freq_llama3_steps_and_bands():
    sc = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}
    inv, emulated = P.hf_inv_freq(_setup(128, 500000.0, sc))
    plain, _ = P.hf_inv_freq(_setup(128, 500000.0))
    wavelen = F32(2 * math.pi) / plain
    kept, divided = wavelen < F32(8192 / 4.0), wavelen > F32(8192 / 1.0)
    assert (kept.sum(), divided.sum()) == (29, 29) and emulated  # LLaMA-3.1: 29 kept, 6 blended, 29 divided
    np.testing.assert_array_equal(inv[kept], plain[kept])
    np.testing.assert_array_equal(inv[divided], plain[divided] / F32(8.0))
    mid = ~kept & ~divided
    smooth = (F32(8192) / wavelen[mid] - F32(1.0)) / F32(3.0)
    np.testing.assert_array_equal(inv[mid], (F32(1) - smooth) * plain[mid] / F32(8.0) + smooth * plain[mid])
    exact = np.asarray(rope.inv_freq(128, base=500000.0, scaling=sc)[0])
    assert np.abs(inv / exact - 1).max() < 1e-6


def test_hf_inv_freq_yarn_and_unemulated_types():
    sc = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}
    inv, emulated = P.hf_inv_freq(_setup(128, 10000.0, sc))
    exact = np.asarray(rope.inv_freq(128, scaling=sc)[0])
    assert emulated and np.abs(inv / exact - 1).max() < 1e-6
    assert inv[0] == F32(1.0) and inv[-1] == F32(1.0) / (F32(4.0) * (np.float64(10000) ** (F32(126) / F32(128))).astype(F32))
    inv, emulated = P.hf_inv_freq(_setup(64, 10000.0, {"rope_type": "ntk", "alpha": 2.0}))
    assert not emulated
    np.testing.assert_array_equal(inv, np.asarray(rope.inv_freq(64, scaling={"rope_type": "ntk", "alpha": 2.0})[0],
                                                  dtype=np.float64).astype(F32))


def test_hf_cos_sin_float32_steps_and_position_rounding():
    inv, _ = P.hf_inv_freq(_setup(8, 10000.0))
    pos = np.array([0, 3, 2 ** 24 + 1])
    c, s = P.hf_cos_sin(pos, inv)
    angles = pos.astype(F32)[:, None] * inv  # position_ids.float(), then the one-term matmul
    assert angles[2, 0] == 2 ** 24  # 16777217 is stored as 16777216
    np.testing.assert_array_equal(c, np.cos(angles.astype(np.float64)).astype(F32))
    np.testing.assert_array_equal(s, np.sin(angles.astype(np.float64)).astype(F32))
    assert c[0].tolist() == [1.0] * 4 and c[2, 0] == F32(math.cos(16777216.0))
    # the attention factor multiplies in float32; tables cast to bfloat16 / float16 are those values rounded
    c2, _ = P.hf_cos_sin(pos, inv, attention_factor=1.5)
    np.testing.assert_array_equal(c2, c * F32(1.5))
    cb, _ = P.hf_cos_sin(pos, inv, table_dtype="bfloat16")
    np.testing.assert_array_equal(cb, P.to_bfloat16(c))
    ch, _ = P.hf_cos_sin(pos, inv, table_dtype="float16")
    np.testing.assert_array_equal(ch, c.astype(np.float16))
    # bfloat16 positions: 257 is stored as 256, so its row equals position 256's
    cp, _ = P.hf_cos_sin(np.array([256, 257]), inv, position_dtype="bfloat16")
    np.testing.assert_array_equal(cp[0], cp[1])


def test_gpt_neox_float16_cache_reproduces_the_published_0_78():
    """EleutherAI/gpt-neox#1003: dim 32, 2048 positions, cache built in float16; emb[1857, 1] is 1045
    instead of 1044.2678 and the largest cos difference to the float32 cache is 0.7819."""
    inv, _ = P.hf_inv_freq(_setup(32, 10000.0))
    pos = np.arange(2048)
    cf, _ = P.hf_cos_sin(pos, inv)
    ch, _ = P.hf_cos_sin(pos, inv, inv_freq_dtype="float16", position_dtype="float16", angle_dtype="float16",
                         table_dtype="float16")
    assert F32(1857) * inv[1] == pytest.approx(1044.2678, abs=5e-5)
    assert np.float16(1857) * np.float16(inv[1]) == 1045
    assert np.abs(ch.astype(np.float64) - cf).max() == pytest.approx(0.7819, abs=1e-4)


def test_meta_freqs_cis_is_the_float32_angle_as_complex64():
    inv, _ = P.hf_inv_freq(_setup(16, 10000.0))
    pos = np.array([0, 1, 5000, 123457])
    z = P.meta_freqs_cis(pos, inv)
    c, s = P.hf_cos_sin(pos, inv)
    assert z.dtype == np.complex64 and z[0].tolist() == [1 + 0j] * 8
    np.testing.assert_array_equal(z.real, c)
    np.testing.assert_array_equal(z.imag, s)


def test_llama_cpp_recurrence_steps():
    pos = np.array([0, 3, 70001])
    c, s = P.llama_cpp_cos_sin(pos, 8, 10000.0)
    theta_scale = F32(0.1)  # powf(10000, -2.0f/8) = 10000^-0.25 = 0.1 rounded to float32
    assert (np.float64(F32(10000.0)) ** np.float64(F32(-2.0) / F32(8))).astype(F32) == theta_scale
    theta = pos.astype(F32)
    for i in range(4):  # theta = (float) p, then theta *= theta_scale after each pair
        np.testing.assert_array_equal(c[:, i], np.cos(theta.astype(np.float64)).astype(F32))
        np.testing.assert_array_equal(s[:, i], np.sin(theta.astype(np.float64)).astype(F32))
        theta = theta * theta_scale
    # the recurrence is not HF's product: pair 2 of position 3 is (3 * 0.1f) * 0.1f, not 3 * 0.01f
    assert F32(F32(3) * F32(0.1)) * F32(0.1) != F32(3) * F32(0.01)
    hf, _ = P.hf_cos_sin(pos, P.hf_inv_freq(_setup(8, 10000.0))[0])
    assert not np.array_equal(c, hf)


def test_rotation_rounds_every_operation():
    a, b, c, s = (np.array([v], dtype=F32) for v in (1.0 + 2 ** -7, 3.0, 0.75 + 2 ** -8, 0.5))
    y1, y2 = P.rotate(a, b, c, s, "bfloat16")
    r = P.to_bfloat16
    assert y1[0] == r(r(a * c) - r(b * s))[0] and y2[0] == r(r(a * s) + r(b * c))[0]
    y1, _ = P.rotate(a, b, c, s, "float32")
    assert y1[0] == F32(a[0] * c[0]) - F32(b[0] * s[0])


def test_published_failure_and_library_float32_bound():
    """HF float32 recipe: table error above 1e-2 past 128k positions (base 1e4); this library's
    float32 tables stay below 6e-8 at 10^7."""
    setup = _setup(128, 10000.0)
    rng = np.random.default_rng(1)
    past = np.r_[131072, rng.integers(131072, 262144, 64)]
    assert P.table_error("hf-float32>float32", setup, past).max() > 1e-2
    assert P.table_error("hf-float32>float32", setup, np.arange(0, 4096, 7)).max() < 1e-3
    near = np.r_[10 ** 7, rng.integers(10 ** 7 - 4096, 10 ** 7 + 4096, 64)]
    assert P.table_error("exact-float32", setup, near).max() < 6e-8
    assert P.table_error("float32-split", setup, near).max() < 1.5e-7
    assert P.table_error("exact-float64", setup, near).max() < 1.2e-16


def test_apply_logit_and_invariance_measurements():
    setup = _setup(64, 10000.0)
    rng = np.random.default_rng(2)
    pos = np.array([5, 70000, 9_000_000])
    x = rng.standard_normal((3, 64))
    assert P.apply_error("exact-float64", setup, x, pos).max() < 1e-15
    hf = P.apply_error("hf-float32>float32", setup, x, pos)
    assert hf[0] < 1e-5 < hf[2]
    q, k = rng.standard_normal((2, 3, 64))
    assert P.logit_error("exact-float32", setup, q, k, pos, pos - 3).max() < 1e-5
    assert P.logit_error("hf-float32>float32", setup, q, k, pos, pos - 3)[2] > 1e-3
    shifts = [0, 10 ** 5, 9 * 10 ** 6]
    lib = P.invariance_breakage("exact-float32", setup, shifts)
    assert lib.max() < 1e-6  # flat in the shift
    hf = P.invariance_breakage("hf-float32>float32", setup, shifts)
    assert hf[0] < 1e-5 and hf[2] > 0.05
    floor = P.invariance_breakage("exact-bfloat16", setup, shifts)
    assert 1e-3 < floor.min() and floor.max() < 0.1  # a constant floor when the angle is right
    with pytest.raises(ValueError, match="unknown recipe"):
        P.table_error("hf-float64", setup, pos)
    assert P.invariance_breakage("exact-float32", setup, []).shape == (0,)  # no shifts: none measured


def test_a_report_below_the_first_shift_has_no_invariance_rows():
    """max_position < 31 leaves no shift to measure: it was a TypeError (an empty list is float64)."""
    from posenc_np.precision_report import report

    doc = report(_setup(8), "float32", 8)
    assert doc["max_position"] == 8 and doc["recipes"] and all(r["invariance"] == [] for r in doc["recipes"])


def test_every_recipe_runs_for_every_dtype():
    setup = _setup(16, 10000.0, {"rope_type": "linear", "factor": 2.0})
    pos = np.array([0, 1, 40000])
    for dtype in P.DTYPES:
        for name in P.recipe_names(dtype, setup):
            err = P.table_error(name, setup, pos)
            assert err.shape == (3,) and err[0] < 2e-2, (dtype, name)
    yarn = _setup(16, 10000.0, {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64})
    assert not any(n.startswith("llama.cpp") for n in P.recipe_names("float32", yarn))
    # float16 positions overflow to inf above 65504: an infinite error, not a crash or a NaN
    assert P.table_error("angles-float16", setup, np.array([70000]))[0] == np.inf


LLAMA31 = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_attention_heads": 32,
           "max_position_embeddings": 131072, "rope_theta": 500000.0,
           "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 8192, "rope_type": "llama3"}}


def test_read_hf_config(tmp_path):
    setup = P.read_hf_config(LLAMA31)
    assert (setup.head_dim, setup.base, setup.rope_type, setup.max_position_embeddings) == (128, 5e5, "llama3", 131072)
    neox = P.read_hf_config({"hidden_size": 512, "num_attention_heads": 8, "rope_theta": 10000,
                             "partial_rotary_factor": 0.25, "max_position_embeddings": 2048})
    assert P.describe(neox)["rotary_dim"] == 16
    v5 = P.read_hf_config({"head_dim": 64, "hidden_size": 1, "num_attention_heads": 1,
                           "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}})
    assert (v5.base, v5.scaling, v5.rotary_dim // 2) == (1e6, None, 32)
    phi3 = P.read_hf_config({"hidden_size": 3072, "num_attention_heads": 32, "rope_theta": 10000.0,
                             "max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
                             "rope_scaling": {"type": "longrope", "short_factor": [1.0] * 48,
                                              "long_factor": [2.0] * 48}})
    assert phi3.scaling["original_max_position_embeddings"] == 4096
    assert P.describe(phi3)["attention_factor"] == pytest.approx(math.sqrt(1 + math.log(32) / math.log(4096)))
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA31))
    assert P.read_hf_config(path).rope_type == "llama3"
    for bad, match in ((tmp_path / "missing.json", "cannot read"), ("{not json", "not valid JSON"),
                       ("[1, 2]", "JSON object"), (json.dumps({"hidden_size": 8}), "rope_theta"),
                       (json.dumps({"rope_theta": 1e4, "hidden_size": 8}), "head_dim"),
                       (json.dumps({**LLAMA31, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}),
                        "low_freq_factor")):
        if isinstance(bad, str):
            path.write_text(bad)
            bad = path
        with pytest.raises(ValueError, match=match):
            P.read_hf_config(bad)
    path.write_bytes(b" " * (4 << 20) + b"{}")
    with pytest.raises(ValueError, match="more than the limit"):
        P.read_hf_config(path)


def test_import_is_light():
    code = ("import sys, posenc_np.precision, posenc_np.precision_report; "
            "print([m for m in ('numba', 'mpmath', 'matplotlib') if m in sys.modules])")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"
