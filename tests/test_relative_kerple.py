"""KERPLE (Chi et al. 2022): both variants against a loop over the paper's formula, the
projection of the parameters, gradchecks of the bias and through attention, errors."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from posenc_np import attention
from posenc_np.model import ModelConfig, Transformer
from posenc_np.relative import KerpleBias, kerple_bias, kerple_bias_backward
from posenc_np.testing import gradcheck, gradcheck_hook

from _support import naive_attention

R1, R2 = np.array([0.7, 1.9, 0.05]), np.array([0.3, 1.2, 2.0])


def paper_bias(r1, r2, q_len, k_len, variant):
    """b_h(m, n) = -r1 log(1 + r2 |m - n|) or -r1 |m - n|^r2, query i at i + k_len - q_len."""
    out = np.zeros((len(r1), q_len, k_len))
    for h in range(len(r1)):
        for i in range(q_len):
            for j in range(k_len):
                d = abs((i + k_len - q_len) - j)
                out[h, i, j] = -r1[h] * (math.log(1 + r2[h] * d) if variant == "log" else d ** r2[h])
    return out


@pytest.mark.parametrize("variant", ["log", "power"])
@pytest.mark.parametrize("q_len,k_len", [(5, 5), (2, 6), (1, 9), (4, 3)])
def test_bias_is_the_paper_formula(variant, q_len, k_len):
    np.testing.assert_allclose(kerple_bias(R1, R2, q_len, k_len, variant=variant),
                               paper_bias(R1, R2, q_len, k_len, variant), rtol=1e-14, atol=1e-15)


def test_power_variant_at_r2_one_is_alibi_with_slopes_r1():
    from posenc_np import alibi

    np.testing.assert_allclose(kerple_bias(R1, np.ones(3), 4, 6, variant="power"),
                               alibi.bias(3, 4, 6, form="symmetric", slopes=R1, query_offset=2), rtol=1e-15)


@pytest.mark.parametrize("variant", ["log", "power"])
def test_gradcheck_bias(variant):
    gradcheck(lambda r1, r2: kerple_bias(r1, r2, 4, 7, variant=variant),
              lambda g, r1, r2: dict(zip(("r1", "r2"), kerple_bias_backward(g, r1, r2, variant=variant))),
              {"r1": R1, "r2": np.minimum(R2, 1.9)})


@pytest.mark.parametrize("variant", ["log", "power"])
@pytest.mark.parametrize("causal", [True, False])
def test_gradcheck_through_attention(variant, causal):
    rng = np.random.default_rng(3)
    hook = KerpleBias(3, variant=variant, seed=1)
    gradcheck_hook(hook, rng.standard_normal((2, 3, 4, 5)), rng.standard_normal((2, 3, 6, 5)),
                   rng.standard_normal((2, 3, 6, 5)), causal=causal)


def test_backward_sums_batch_axes_and_is_zero_at_distance_zero_for_the_exponent():
    g = np.zeros((2, 3, 3, 3))
    g[..., 1, 1] = 1.0  # only the diagonal entry (distance 0)
    dr1, dr2 = kerple_bias_backward(g, R1, R2, variant="power")
    np.testing.assert_array_equal(dr2, 0.0)  # d^r ln d -> 0 at d = 0
    np.testing.assert_array_equal(dr1, 0.0)  # 0^r = 0


@pytest.mark.parametrize("variant,hi", [("log", np.inf), ("power", 2.0)])
def test_hook_clips_parameters_like_the_reference_clamp_and_differentiates_the_clip(variant, hi):
    hook = KerpleBias(3, variant=variant, seed=0)
    hook.params["r1"] = np.array([-1.0, 0.01, 5.0])
    hook.params["r2"] = np.array([0.001, 3.0, 1.0])
    rng = np.random.default_rng(0)
    q = rng.standard_normal((1, 3, 2, 4))
    term, cache = hook.logits(q, q, 0.5)
    np.testing.assert_array_equal(hook.params["r1"], [-1.0, 0.01, 5.0])  # stored values are left alone
    np.testing.assert_allclose(term, kerple_bias([0.01, 0.01, 5.0], [0.01, min(3.0, hi), 1.0], 2, 2, variant=variant))
    hook.logits_backward(rng.standard_normal((1, 3, 2, 2)), cache)
    assert hook.grads["r1"][0] == 0 and hook.grads["r1"][1] != 0  # outside: 0; on the boundary: the derivative
    assert hook.grads["r2"][0] == 0 and (hook.grads["r2"][1] == 0) == (variant == "power")
    hook.params["r1"][1] = 0.5  # away from the kinks the clip's derivative is exact
    hook.params["r2"][1] = 1.5
    q = rng.standard_normal((1, 3, 3, 4))
    gradcheck_hook(hook, q, q + 1, q - 1, causal=True)


def test_initialisation_follows_the_reference_ranges():
    log, power = KerpleBias(4000, variant="log", seed=0), KerpleBias(4000, variant="power", seed=0)
    for hook, (hi1, hi2) in ((log, (2, 1)), (power, (1, 2))):
        assert 0.01 <= hook.params["r1"].min() and hook.params["r1"].max() <= hi1
        assert 0.01 <= hook.params["r2"].min() and hook.params["r2"].max() <= hi2
        assert hook.params["r1"].max() > 0.9 * hi1 and hook.params["r2"].max() > 0.9 * hi2


def test_hook_adds_the_bias_in_attention():
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 3, 4, 5)) for _ in range(3))
    hook = KerpleBias(3, variant="power", seed=2)
    out, _ = attention.forward(q, k, v, causal=True, hooks=[hook])
    ref, _ = attention.forward(q, k, v, causal=True, bias=hook.bias(4, 4))
    np.testing.assert_allclose(out, ref, rtol=1e-13)
    np.testing.assert_allclose(out, naive_attention(q, k, v, bias=hook.bias(4, 4), causal=True), rtol=1e-12, atol=1e-13)


def test_model_trains_the_per_layer_parameters():
    m = Transformer(ModelConfig(vocab_size=7, d_model=8, n_heads=2, n_layers=2, position="kerple",
                                position_options={"variant": "power"}, dtype="float64"))
    assert {"blocks.0.pos.r1", "blocks.1.pos.r2"} <= set(m.params)
    m.loss(np.array([[1, 2, 3, 4]]), np.array([[2, 3, 4, 5]]), backward=True)
    assert np.all(m.grads["blocks.1.pos.r2"] != 0)


@pytest.mark.parametrize("kw,match", [
    ({"r1": [1.0, -1.0]}, "r1 must be finite and > 0"),
    ({"r2": [1.0, 0.0]}, "r2 must be finite and > 0"),
    ({"r2": [1.0, 2.5], "variant": "power"}, "r2 must be <= 2"),
    ({"r1": [1.0]}, "one shape"),
    ({"variant": "exp"}, "variant"),
    ({"q_len": -1}, "q_len"),
])
def test_errors_name_the_argument(kw, match):
    args = {"r1": [1.0, 0.5], "r2": [1.0, 0.5], "q_len": 2, "k_len": 3, "variant": "log", **kw}
    with pytest.raises(ValueError, match=match):
        kerple_bias(**args)


def test_backward_errors():
    with pytest.raises(ValueError, match="num_heads=2"):
        kerple_bias_backward(np.zeros((3, 2, 2)), [1.0, 1.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="variant"):
        KerpleBias(2, variant="linear")
    hook = KerpleBias(2)
    hook.params["r1"] = np.zeros(3)
    with pytest.raises(ValueError, match="shape"):
        hook.bias(2, 2)
    hook.params["r1"] = np.array([1.0, np.nan])
    with pytest.raises(ValueError, match="finite"):
        hook.bias(2, 2)


@pytest.mark.parametrize("variant, r1, r2, dtype", [("log", 1e308, 1.0, np.float64), ("log", 1.0, 1e308, np.float64),
                                                    ("power", 1e30, 2.0, np.float32)])
def test_overflowing_parameters_are_refused(variant, r1, r2, dtype):
    # issue 26: kerple_bias(r1=1e308) returned -inf with a NumPy RuntimeWarning
    r1, r2 = np.array([r1], dtype), np.array([r2], dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match=rf"r1 and r2 make the KERPLE bias overflow {np.dtype(dtype)}"):
            kerple_bias(r1, r2, 16, 10**5 if dtype == np.float32 else 16, variant=variant)
        with pytest.raises(ValueError, match="overflow"):
            kerple_bias_backward(np.ones((1, 16, 10**5 if dtype == np.float32 else 16)), r1, r2, variant=variant)
    assert np.isfinite(kerple_bias(np.array([1e307]), np.array([1.0]), 2, 2)).all()  # large but finite: computed
