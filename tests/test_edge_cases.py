"""Regression tests for bad input, overflow and degenerate shapes (issue 13).

Each test names the failure it guards against: a silently wrong result, an overflow to
inf/NaN with only a RuntimeWarning, an error that does not name the argument, or two
backends that disagree on an empty shape. Expected values come from the formulas.
"""

import math
import warnings
from pathlib import Path

import numpy as np
import pytest

from posenc_np import absolute, alibi, attention, layers, relative, rope
from posenc_np.kernels.alibi import alibi_attention_forward

# ------------------------------------------------------------------ attention core


def test_softmax_of_integers_is_float_not_truncated():
    """softmax([1, 2, 3]) was cast back to int: [0, 0, 0]."""
    e = [math.exp(v) for v in (1, 2, 3)]
    got = attention.softmax(np.array([1, 2, 3]))
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, [v / sum(e) for v in e], rtol=1e-15)


def test_softmax_rejects_bad_keep_and_axis():
    with pytest.raises(TypeError, match="keep must be a boolean"):
        attention.softmax(np.zeros(3), np.ones(3))
    with pytest.raises(ValueError, match="axis 2 is out of range"):
        attention.softmax(np.zeros((2, 3)), axis=2)
    assert attention.softmax(np.zeros((2, 0))).shape == (2, 0)  # zero-length axis: no reduction error


def test_forward_hooks_none_means_no_hooks_and_bad_hooks_are_named():
    q = np.random.default_rng(0).standard_normal((1, 2, 3, 4))
    ref, _ = attention.forward(q, q, q)
    np.testing.assert_array_equal(attention.forward(q, q, q, hooks=None)[0], ref)
    with pytest.raises(TypeError, match="hooks must be a sequence"):
        attention.forward(q, q, q, hooks=3)
    with pytest.raises(TypeError, match=r"hooks\[0\].*lacks the Hook methods"):
        attention.forward(q, q, q, hooks=[object()])
    with pytest.raises(TypeError, match="cache must be the dict"):
        attention.backward(np.zeros((1, 2, 3, 4)), {"q": q})


def test_head_dim_zero_needs_an_explicit_scale_on_both_paths():
    """d = 0: ZeroDivisionError (NumPy) vs 'scale must be finite' (Numba) before; now one ValueError."""
    q = np.zeros((1, 2, 3, 0))
    v = np.arange(2 * 3 * 5, dtype=np.float64).reshape(1, 2, 3, 5)
    for call in (lambda: attention.forward(q, q, v), lambda: alibi.attention(q, q, v, backend="numpy"),
                 lambda: alibi.attention(q, q, v, backend="numba")):
        with pytest.raises(ValueError, match=r"head dim d = 0.*pass scale"):
            call()
    # with a scale every logit is 0: plain attention averages the (non-causal) values
    out, _ = attention.forward(q, q, v, scale=1.0)
    np.testing.assert_allclose(out, np.broadcast_to(v.mean(axis=-2, keepdims=True), v.shape))


DEGENERATE = [  # q shape, k shape, v shape
    ((1, 0, 4, 8), (1, 0, 4, 8), (1, 0, 4, 8)),  # heads = 0
    ((1, 2, 4, 8), (1, 2, 0, 8), (1, 2, 0, 8)),  # k_len = 0: every row fully masked
    ((1, 2, 0, 8), (1, 2, 0, 8), (1, 2, 0, 8)),  # T = 0
    ((1, 2, 0, 8), (1, 2, 5, 8), (1, 2, 5, 8)),  # q_len = 0
    ((0, 2, 4, 8), (0, 2, 4, 8), (0, 2, 4, 8)),  # batch = 0
    ((1, 2, 4, 8), (1, 2, 4, 8), (1, 2, 4, 0)),  # d_v = 0
    ((1, 2, 4, 0), (1, 2, 4, 0), (1, 2, 4, 3)),  # d = 0 with an explicit scale
]


@pytest.mark.slow
@pytest.mark.parametrize("shapes", DEGENERATE, ids=lambda s: "x".join(map(str, s[0])) + "-k" + str(s[1][2]))
@pytest.mark.parametrize("causal", [True, False])
def test_alibi_backends_agree_on_degenerate_shapes(shapes, causal):
    """heads = 0 raised 'negative shift count'; k_len = 0 / T = 0 raised on NumPy and gave zeros on Numba."""
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal(s) for s in shapes)
    scale = 1.0 if q.shape[-1] == 0 else None
    results = {}
    for backend in ("numpy", "numba"):
        out, cache = alibi.attention(q, k, v, causal=causal, scale=scale, backend=backend)
        grads = alibi.attention_backward(np.ones_like(out), cache)
        assert out.shape == q.shape[:-1] + v.shape[-1:]
        assert all(grads[n].shape == x.shape for n, x in zip("qkv", (q, k, v)))
        results[backend] = (out, grads)
    np.testing.assert_allclose(results["numpy"][0], results["numba"][0], atol=1e-12)
    for n in "qkv":
        np.testing.assert_allclose(results["numpy"][1][n], results["numba"][1][n], atol=1e-12)
    if k.shape[-2] == 0:  # no keys: fully masked rows are 0 (the documented convention), not NaN
        assert np.all(results["numpy"][0] == 0)


def test_plain_attention_with_no_keys_is_zero():
    q = np.ones((1, 1, 3, 4))
    out, cache = attention.forward(q, np.ones((1, 1, 0, 4)), np.ones((1, 1, 0, 2)))
    assert out.shape == (1, 1, 3, 2) and np.all(out == 0)
    g = attention.backward(np.ones_like(out), cache)
    assert np.all(g["q"] == 0) and g["k"].shape == (1, 1, 0, 4)


# ------------------------------------------------------------------ ALiBi limits


def test_kernel_refuses_negative_slopes_and_non_exact_offsets():
    q = np.zeros((1, 2, 4, 8))
    with pytest.raises(ValueError, match="slopes must be >= 0"):
        alibi_attention_forward(q, q, q, np.array([-1.0, 1.0]), causal=True, scale=1.0)
    with pytest.raises(ValueError, match=r"query_offset=1180591620717411303424 .*float64 represents exactly"):
        alibi_attention_forward(q, q, q, np.ones(2), causal=True, scale=1.0, query_offset=2**70)
    # float32 positions are exact up to 2^24: a query 2^24 + 3 positions from key 0 is refused ...
    q32 = np.zeros((1, 2, 4, 8), np.float32)
    with pytest.raises(ValueError, match="float32 represents exactly"):
        alibi_attention_forward(q32, q32, q32, np.ones(2), causal=False, scale=1.0, query_offset=2**24)
    # ... and accepted at the limit: the largest distance is exactly 2^24
    alibi_attention_forward(q32, q32, q32, np.ones(2), causal=False, scale=1.0, query_offset=2**24 - 3)


def test_bias_refuses_offsets_past_float64_exactness():
    with pytest.raises(ValueError, match="float64 represents exactly"):
        alibi.bias(1, 1, 1, query_offset=2**53 + 1)
    b = alibi.bias(1, 1, 1, query_offset=2**53, slopes=np.array([1.0]))  # distance 2^53 is exact
    assert b[0, 0, 0] == -(2.0**53)


@pytest.mark.slow
def test_float16_numpy_path_refuses_scores_over_the_byte_budget(monkeypatch):
    """float16 on the materialising path: T = 40 000 tried to allocate 11.9 GiB. (``auto`` now
    sends float16 this long to the fused kernel, which needs no such budget.)"""
    T = 20_000  # 4 heads: 4 * T^2 * 2 bytes = 3.2 GB > MAX_BIAS_BYTES; the check runs before any allocation
    q = np.zeros((1, 4, T, 8), np.float16)
    for backend in ("numpy",):
        with pytest.raises(ValueError, match=r"\(1, 4, 20000, 20000\).*3200000000 bytes.*MAX_BIAS_BYTES"):
            alibi.attention(q, q, q, backend=backend)
    with pytest.raises(ValueError, match=r"MAX_BIAS_BYTES"):
        alibi.bias(8, 8192, 8192, dtype=np.float32)  # 2 GiB
    # the limit is inclusive: shown with a 64 KiB budget (the 1 GiB one took 11 s to fill)
    monkeypatch.setattr(alibi, "MAX_BIAS_BYTES", 8 * 64 * 32 * 4)
    assert alibi.bias(8, 64, 32, dtype=np.float32).nbytes == alibi.MAX_BIAS_BYTES  # exactly the budget
    with pytest.raises(ValueError, match=r"MAX_BIAS_BYTES"):
        alibi.bias(8, 64, 33, dtype=np.float32)


# ------------------------------------------------------------------ overflow guards


def _no_warnings(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return fn()


def test_gelu_at_infinity():
    """gelu(-inf) was NaN (inf * 0); the derivative at +-inf was NaN too."""
    x = np.array([-np.inf, -1e300, np.inf, 1e300])
    x32 = np.array([-np.inf, -3e38, np.inf, 3e38], np.float32)
    for approx in ("tanh", "none"):
        y = _no_warnings(lambda a=approx: layers.gelu(x, approximate=a))
        np.testing.assert_array_equal(y, [0.0, 0.0, np.inf, 1e300])
        d = _no_warnings(lambda a=approx: layers.gelu_backward(np.ones(4), x, approximate=a))
        np.testing.assert_array_equal(d, [0.0, 0.0, 1.0, 1.0])
        layer = layers.GELU(approximate=approx)
        np.testing.assert_array_equal(_no_warnings(lambda g=layer: g.forward(x32)), [0, 0, np.inf, x32[3]])
        np.testing.assert_array_equal(layer.backward(np.ones(4, np.float32)), [0, 0, 1, 1])


def test_gelu_clip_changes_no_finite_value():
    """The gate is evaluated on x clipped to +-40: both approximations are saturated there."""
    x = np.linspace(-60, 60, 2401)
    for approx in ("tanh", "none"):
        y = layers.gelu(x, approximate=approx)
        if approx == "tanh":
            u = math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)
            ref = 0.5 * x * (1 + np.tanh(u))
        else:
            ref = np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in x])
        np.testing.assert_allclose(y, ref, rtol=1e-13, atol=0)  # (operation order differs by an ulp)
        far = np.abs(x) > 40
        np.testing.assert_array_equal(y[far], ref[far])  # saturated: exactly x or (-)0


def test_xpos_overflow_is_a_named_error():
    """xpos_cos_sin past ~3e5 positions with centre='none' gave inf with a RuntimeWarning."""
    freqs = rope.inv_freq(64)[0]
    # the largest key scale is zeta_0^(-p/B), zeta_0 = 0.4 / 1.4: overflow iff p/B * ln(3.5) > ln(DBL_MAX)
    limit = 512 * math.log(np.finfo(np.float64).max) / math.log(3.5)
    ok = _no_warnings(lambda: rope.xpos_cos_sin(np.array([math.floor(limit)]), freqs, role="key"))
    assert np.all(np.isfinite(ok[0]))
    with pytest.raises(ValueError, match=r"xPos key scale overflows float64.*centre"):
        rope.xpos_cos_sin(np.array([math.ceil(limit)]), freqs, role="key")
    # centred, the same positions are fine
    n = 400_000
    c, s = _no_warnings(lambda: rope.xpos_cos_sin(np.array([0, n - 1]), freqs, role="key", centre="torchscale",
                                                  seq_len=n))
    assert np.all(np.isfinite(c)) and np.all(np.isfinite(s))


def test_narrow_table_dtypes_refuse_values_they_cannot_hold():
    """float16 tables with a large attention factor overflowed in the cast."""
    freqs = np.array([1.0, 0.1])
    with pytest.raises(ValueError, match="attention_factor makes the cos/sin tables exceed float16"):
        rope.cos_sin(np.arange(3), freqs, attention_factor=1e6, dtype=np.float16)
    c, _ = rope.cos_sin(np.zeros(1), freqs, attention_factor=60000.0, dtype=np.float16)  # cos 0 = 1: 60000 fits
    assert c[0, 0] == np.float16(60000.0)
    with pytest.raises(ValueError, match="xPos scale.*exceed float16"):
        rope.xpos_cos_sin(np.array([0, 1e5]), rope.inv_freq(8)[0], role="key", dtype=np.float16)


def test_huge_attention_factor_stays_finite_on_the_exact_path():
    """attention_factor=1e308 overflowed inside the exact kernel's double-double split (NaN tables)."""
    p, freqs = np.arange(3), np.array([1.0, 0.1])
    c, s = _no_warnings(lambda: rope.cos_sin(p, freqs, attention_factor=1e308))
    angles = p[:, None] * freqs
    np.testing.assert_allclose(c[:, :2], 1e308 * np.cos(angles), rtol=1e-15)
    np.testing.assert_allclose(s[:, :2], 1e308 * np.sin(angles), rtol=1e-15, atol=0)
    c2, _ = rope.axial_cos_sin(rope.patch_positions(2, 2), freqs, attention_factor=1e308)
    assert np.all(np.isfinite(c2))


def test_angle_overflow_is_a_named_error():
    # positions are exact only below 2^53 (posenc_np._exact): beyond, a named error, not a rounded angle
    with pytest.raises(ValueError, match=r"2\*\*53"):
        rope.cos_sin(np.array([1e300]), np.array([1.0]))
    with pytest.raises(ValueError, match=r"2\*\*53"):
        absolute.sinusoidal(np.array([1e308]), 4, base=1e-300)
    # the float64 "direct" method forms p * omega, which overflows for a huge frequency
    with pytest.raises(ValueError, match="overflows float64"):
        rope.cos_sin(np.array([2.0**52]), np.array([1e300]), method="direct")


def test_timing_signal_extreme_timescales():
    """ln(max/min) overflowed for max/min = 1e600 (RuntimeWarning, NaN table)."""
    got = _no_warnings(lambda: absolute.timing_signal(np.arange(3), 4, min_timescale=1e-300, max_timescale=1e300))
    # n = 2 timescales: omega = [min, min * exp(-ln(max/min))] = [1e-300, 1e-600 -> 0]
    p = np.arange(3.0)
    ref = np.stack([np.sin(p * 1e-300), np.zeros(3), np.cos(p * 1e-300), np.ones(3)], axis=-1)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-290)  # (sin of 1e-300 comes out as 0 on the exact path)


def test_integer_overflow_in_bucket_functions():
    """deberta: np.abs(int64 min) wrapped, so the 2^53 guard passed and returned bucket int64.min;
    t5: uint64 2**63 + 5 wrapped to a negative distance."""
    with pytest.raises(ValueError, match=r"\|relative_pos\| <= 2\*\*53, got -9223372036854775808"):
        relative.deberta_log_bucket_position(np.array([np.iinfo(np.int64).min]), 256, 512)
    with pytest.raises(ValueError, match="relative_position must fit in int64"):
        relative.t5_relative_position_bucket(np.array([2**63 + 5], dtype=np.uint64))
    # uint64 values that fit are fine: +128 is the last bidirectional bucket (31)
    assert relative.t5_relative_position_bucket(np.array([128], dtype=np.uint64))[0] == 31


def test_size_arguments_past_the_allocation_limit_are_value_errors():
    with pytest.raises(ValueError, match="MAX_ALLOC_BYTES"):
        absolute.sinusoidal(np.arange(4), 2**40)
    with pytest.raises(ValueError, match="MAX_ALLOC_BYTES"):
        layers.Linear(2**20, 2**20)
    with pytest.raises(ValueError, match="MAX_ALLOC_BYTES"):
        absolute.LearnedPositionalEmbedding(2**62, 4)


# ------------------------------------------------------------------ RoPE scaling dicts


def test_scaling_dict_edge_cases_name_the_key():
    with pytest.raises(TypeError, match=r"scaling\['rope_type'\] must be a string"):
        rope.inv_freq(8, scaling={"rope_type": ["linear"], "factor": 2})
    longrope = {"rope_type": "longrope", "short_factor": [1, 1], "long_factor": [1, 1],
                "original_max_position_embeddings": 1}
    with pytest.raises(ValueError, match="original_max_position_embeddings L0 = 1"):
        rope.inv_freq(4, scaling=longrope, max_position_embeddings=8)
    # with an explicit attention factor L0 = 1 is fine
    _, factor = rope.inv_freq(4, scaling={**longrope, "attention_factor": 1.5}, max_position_embeddings=8)
    assert factor == 1.5
    with pytest.raises(ValueError, match="seq_len must be an integer <= 9007199254740992"):
        rope.inv_freq(8, scaling={"rope_type": "dynamic", "factor": 2}, seq_len=10**300, max_position_embeddings=10)
    # dynamic's rescaled base is evaluated in extended precision: huge but representable frequencies
    inv, _ = rope.inv_freq(8, scaling={"rope_type": "dynamic", "factor": 1e300}, seq_len=2**53, max_position_embeddings=1)
    assert inv[0] == 1.0 and np.all(np.isfinite(inv)) and np.all(inv[1:] < 1e-100)
    with pytest.raises(ValueError, match=r"rope_type 'ntk': scaling\['alpha'\] makes .* overflow"):
        rope.inv_freq(8, scaling={"rope_type": "ntk", "alpha": 1e300})


def test_yarn_correction_helpers_validate():
    with pytest.raises(ValueError, match="base must differ from 1"):
        rope.yarn_correction_dim(1, 64, 1, 4096)
    with pytest.raises(ValueError, match="original_max_position_embeddings must be an integer >= 1, got 0"):
        rope.yarn_correction_dim(1, 64, 1e4, 0)
    with pytest.raises(ValueError, match="dim must be an integer >= 2, got 0"):
        rope.yarn_correction_range(0, 1e4, 4096)  # returned (0, -1)
    with pytest.raises(ValueError, match=r"beta_fast'\] \(1.0\) must be >= scaling\['beta_slow'\] \(32.0\)"):
        rope.yarn_correction_range(64, 1e4, 4096, beta_fast=1, beta_slow=32)
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096, "beta_fast": 1,
            "beta_slow": 32}
    with pytest.raises(ValueError, match=r"scaling\['beta_fast'\] \(1.0\) must be >= scaling\['beta_slow'\]"):
        rope.inv_freq(64, scaling=yarn)
    # c(r) = d ln(L0 / (2 pi r)) / (2 ln base), floored / ceiled
    low, high = rope.yarn_correction_range(64, 1.5e5, 4096)
    assert (low, high) == (math.floor(64 * math.log(4096 / (2 * math.pi * 32)) / (2 * math.log(1.5e5))),
                           math.ceil(64 * math.log(4096 / (2 * math.pi)) / (2 * math.log(1.5e5))))


# ------------------------------------------------------------------ layers keep their own copies


def test_learned_table_and_embedding_copy_their_positions():
    """A caller reusing its positions array between forward and backward sent the gradient to the
    wrong rows."""
    table = absolute.LearnedPositionalEmbedding(6, 2, seed=0)
    pos = np.array([0, 1])
    table.forward(pos)
    pos[:] = [4, 5]  # reused buffer
    table.backward(np.ones((2, 2)))
    np.testing.assert_array_equal(table.grads["weight"][:2], np.ones((2, 2)))
    assert not table.grads["weight"][2:].any()
    emb = layers.Embedding(6, 2, rng=0)
    ids = np.array([[3, 3]])
    emb.forward(ids)
    ids[:] = 0
    emb.backward(np.ones((1, 2, 2)))
    np.testing.assert_array_equal(emb.grads["weight"][3], [2.0, 2.0])


# ------------------------------------------------------------------ testing helpers, optimizer


def test_gradcheck_and_assert_golden_validate_their_arguments():
    from posenc_np.optim import Adam
    from posenc_np.testing import assert_golden, gradcheck, load_case

    x = {"x": np.ones(3)}
    with pytest.raises(ValueError, match="eps must be > 0"):  # was ZeroDivisionError
        gradcheck(lambda x: 2 * x, lambda g, x: {"x": 2 * g}, x, eps=0)
    with pytest.raises(ValueError, match="tol must be finite"):
        gradcheck(lambda x: 2 * x, lambda g, x: {"x": 2 * g}, x, tol=float("nan"))
    case = load_case(Path(__file__).parent.parent / "vectors" / "v1" / "alibi.slopes.n8.json")
    exact = case.outputs[next(iter(case.outputs))]
    wrong = exact + 1.0
    with pytest.raises(ValueError, match=r"tolerance\['abs'\] must be finite"):  # a NaN bound passed anything
        assert_golden(wrong, case, tolerance={"abs": float("nan"), "rel": 0})
    with pytest.raises(ValueError, match=r"tolerance\['rel'\] must be >= 0"):  # was an AssertionError
        assert_golden(exact, case, tolerance={"abs": 0, "rel": -1})
    with pytest.raises(TypeError, match="tolerance must be a dict"):
        assert_golden(exact, case, tolerance={"abs": 0})
    with pytest.raises(AssertionError):
        assert_golden(wrong, case, tolerance={"abs": 0.5, "rel": 0})
    assert_golden(exact, case)
    with pytest.raises(TypeError, match=r"betas must be a pair \(beta1, beta2\), got 0.9"):  # was 'has no len()'
        Adam({"w": np.zeros(2)}, betas=0.9)


# ------------------------------------------------------------------ found by the hypothesis sweep


def test_sweep_findings_stay_fixed():
    """Each of these escaped as a non-ValueError/TypeError, a warning, or a silently wrong result."""
    from posenc_np import optim
    from posenc_np.study import LagTask

    table = absolute.LearnedPositionalEmbedding(4, 2, seed=0)
    table.forward(np.array([0, 1]))
    with pytest.raises(TypeError, match="dout must hold integers or floats"):  # imaginary part was discarded
        table.backward(np.ones((2, 2), complex))
    with pytest.raises(ValueError, match=r"dy must have shape \(2, 3\)"):  # dy=1.0 broadcast silently
        absolute.fuse_backward(1.0, np.ones((2, 3)), np.ones(3), "add")
    with pytest.raises(ValueError, match="init_std=1e\\+308 gives"):  # inf weights after a cast warning
        layers.Linear(2, 2, init_std=1e308)
    with pytest.raises(ValueError, match="query positions"):  # a (2^31, 0) matrix allocated a 16 GiB arange
        relative.t5_relative_positions(2**40, 0)
    with pytest.raises(ValueError, match="max_relative_position must be an integer <= "):  # OverflowError
        relative.shaw_relative_index(2, 2, 2**63)
    with pytest.raises(ValueError, match="mscale"):  # inf attention factor
        rope.yarn_get_mscale(2.0**31, 1e308)
    assert math.isfinite(rope.yarn_correction_dim(1e-320, 64, 1e4, 4096))  # ratio overflowed to inf
    with pytest.raises(ValueError, match="scale_base overflows"):  # RuntimeWarning overflow in divide
        rope.xpos_scale(np.arange(3), 8, role="key", scale_base=1e-320)
    with pytest.raises(TypeError, match=r"grads\['w'\] must be a float ndarray"):  # AttributeError
        optim.clip_grad_norm({"w": 1}, 1.0)
    with pytest.raises(TypeError, match="cache must be the dict"):  # AttributeError on a tampered cache
        attention.backward(np.ones((1, 1, 2, 2)), {**_cache(), "q": None})
    with pytest.raises(ValueError, match="task batch"):  # MemoryError
        LagTask(3).sample(np.random.default_rng(0), 2**31)
    with pytest.raises(ValueError, match="block parameters"):  # ran for minutes building 2^31 blocks
        __import__("posenc_np.model", fromlist=["ModelConfig"]).ModelConfig(vocab_size=4, d_model=8, n_heads=2,
                                                                               n_layers=2**31).validate()


def _cache():
    q = np.ones((1, 1, 2, 2))
    return attention.forward(q, q, q)[1]


def _nested(depth: int):
    d = 1.0
    for _ in range(depth):
        d = {"a": d}
    return d


def test_sizes_factors_and_nesting_of_rope_and_sinusoid_doors():
    """Sizes go through the allocation rule (extended frequencies cost FREQUENCY_BYTES each, not 8),
    a tiny linear factor and a deeply nested scaling dict are ValueErrors naming the argument."""
    from posenc_np import rope_scaling

    with pytest.raises(ValueError, match="extended frequencies .* MAX_ALLOC_BYTES"):
        rope.inv_freq(10**9)
    with pytest.raises(ValueError, match="extended frequencies .* MAX_ALLOC_BYTES"):
        absolute.sinusoidal_frequencies(10**9)
    with pytest.raises(ValueError, match="scaling for rope_type 'linear' gives a frequency past float64"):
        rope.inv_freq(8, scaling={"rope_type": "linear", "factor": 1e-320})  # was OverflowError
    for scaling in (_nested(50_000), {"rope_type": "linear", "factor": _nested(50_000)}):  # was RecursionError
        with pytest.raises(ValueError, match="scaling nests containers more than MAX_SCALING_DEPTH"):
            rope_scaling.parse_scaling(8, scaling=scaling)
    longrope = {"rope_type": "longrope", "short_factor": [1.0] * 4, "long_factor": [2.0] * 4,
                "original_max_position_embeddings": 4}
    assert rope.inv_freq(8, scaling=longrope, max_position_embeddings=8)[0].shape == (4,)  # lists are fine


def test_sinusoidal_encoder_refuses_what_sinusoidal_refuses():
    pytest.importorskip("sklearn")
    from posenc_np.sklearn import SinusoidalEncoder

    with pytest.raises(ValueError, match=r"\|p\| < 2\*\*53"):
        absolute.sinusoidal(np.array([1e300]), 8)
    with pytest.raises(ValueError, match=r"times \(X - offset\) / scale .* \|p\| < 2\*\*53"):
        SinusoidalEncoder().fit([[1e300]]).transform([[1e300]])  # was rounding noise
    with pytest.raises(ValueError, match="extended frequencies .* MAX_ALLOC_BYTES"):
        SinusoidalEncoder(dim=10**9).fit([[1.0]])
    enc = SinusoidalEncoder(dim=8).fit([[3.0]])
    np.testing.assert_allclose(enc.transform([[3.0]])[0], absolute.sinusoidal(np.array([3.0]), 8)[0], atol=1e-15)


def test_precision_emulations_refuse_bad_arguments():
    from posenc_np import precision as P

    pos = np.arange(3)
    with pytest.raises(ValueError, match="dim must be even"):  # was a (3, 31) table
        P.llama_cpp_cos_sin(pos, 63, 1e4)
    for kw, match in [({"attention_factor": float("nan")}, "attention_factor must be finite"),
                      ({"attention_factor": 1e300}, "attention_factor must be at most float32's largest"),
                      ({"base": 1e300}, "base must be at most float32's largest"),
                      ({"base": float("nan")}, "base must be finite"),
                      ({"freq_factors": [1.0, 0.0]}, "freq_factors must hold dim // 2")]:
        with pytest.raises(ValueError, match=match):  # were NaN tables
            P.llama_cpp_cos_sin(pos, 4, **{"base": 1e4, **kw})
    with pytest.raises(ValueError, match="llama.cpp tables .* MAX_ALLOC_BYTES"):
        P.llama_cpp_cos_sin(pos, 10**9, 1e4)
    c, s = P.llama_cpp_cos_sin(pos, 64, 1e4, attention_factor=2.0)
    assert c.shape == s.shape == (3, 32) and np.all(np.isfinite(c))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(TypeError, match="complex"):  # the imaginary part was dropped with a warning
            P.to_bfloat16(1j)
        with pytest.raises(TypeError, match="complex"):
            P.round_to(np.array([1 + 2j]), "float32")
    assert P.to_bfloat16(3).tolist() == 3.0 and P.round_to(1.5, "float16").tolist() == 1.5
