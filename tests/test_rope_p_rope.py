"""p-RoPE (Barbero et al. 2024): which frequencies are kept (Gemma's rule), equality with the
proportional scaling, the model option, extreme fractions, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from posenc_np import rope
from posenc_np.model import ModelConfig, Transformer


def paper_p_rope(n, base, p):
    """omega_i = base^(-2i/d) for i < floor(p n) (float64 p, exactly), else 0; d = 2n."""
    from fractions import Fraction

    kept = math.floor(Fraction(p) * n)
    return [base ** (-2 * i / (2 * n)) if i < kept else 0.0 for i in range(n)]


@pytest.mark.parametrize("n,p", [(8, 0.25), (8, 0.3), (5, 0.5), (100, 0.29), (32, 1.0), (32, 0.0), (3, 0.999)])
def test_keeps_the_highest_floor_p_n_frequencies(n, p):
    got = rope.p_rope_frequencies(rope.inv_freq(2 * n)[0], p)
    np.testing.assert_allclose(got, paper_p_rope(n, 10000.0, p), rtol=1e-15)
    assert np.count_nonzero(got) == sum(w > 0 for w in paper_p_rope(n, 10000.0, p))


def test_decimal_fraction_is_read_as_its_float64_value():
    # 0.29 is stored as 0.28999999999999998: 28 of 100 pairs, as Gemma's int(p * d // 2) gives
    assert np.count_nonzero(rope.p_rope_frequencies(rope.inv_freq(200)[0], 0.29)) == 28 == int(0.29 * 200 // 2)


def test_equals_the_proportional_scaling_without_factor():
    for d, p in ((64, 0.25), (16, 0.5), (24, 0.4)):
        prop = rope.inv_freq(d, scaling={"rope_type": "proportional", "partial_rotary_factor": p})[0]
        np.testing.assert_array_equal(rope.p_rope_frequencies(rope.inv_freq(d)[0], p), prop)


def test_applies_after_any_scaling():
    lin = rope.inv_freq(16, scaling={"rope_type": "linear", "factor": 4.0})[0]
    np.testing.assert_array_equal(rope.p_rope_frequencies(lin, 0.5)[:4], lin[:4])
    np.testing.assert_array_equal(rope.p_rope_frequencies(lin, 0.5)[4:], 0.0)


def _model(position, **options):
    return Transformer(ModelConfig(vocab_size=7, d_model=16, n_heads=2, n_layers=1, position=position,
                                   position_options=options, dtype="float64", seed=1))


def test_model_option_and_entry():
    tokens = np.array([[1, 2, 3, 4, 5, 6]])
    m = _model("p_rope")
    assert m.pos.options["p"] == 0.25
    np.testing.assert_array_equal(m.pos.rotary.frequencies(6)[0], rope.p_rope_frequencies(rope.inv_freq(8)[0], 0.25))
    same = _model("rope", p=0.25)
    np.testing.assert_array_equal(m.forward(tokens), same.forward(tokens))
    np.testing.assert_array_equal(_model("rope", p=1.0).forward(tokens), _model("rope").forward(tokens))


def test_p_zero_is_nope_and_decoding_with_a_cache_matches():
    tokens = np.array([[1, 2, 3, 4, 5]])
    zero, none = _model("rope", p=0.0), _model("none")
    none.load_params(zero.params)
    np.testing.assert_allclose(zero.forward(tokens), none.forward(tokens), rtol=1e-13, atol=1e-15)
    m = _model("p_rope", p=0.5)
    cache = m.init_cache()
    steps = [m.forward(tokens[:, :2], cache=cache)] + [m.forward(tokens[:, t:t + 1], cache=cache) for t in range(2, 5)]
    np.testing.assert_allclose(np.concatenate(steps, axis=1), m.forward(tokens), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("args,exc,match", [
    ((np.ones(4), 1.5), ValueError, r"p must be <= 1.0"),
    ((np.ones(4), -0.1), ValueError, "p must be >= 0"),
    ((np.ones(4), "half"), TypeError, "p must be a real number"),
    ((np.ones((2, 2)), 0.5), ValueError, "1-D"),
    ((np.array([1.0, -1.0]), 0.5), ValueError, ">= 0"),
])
def test_errors(args, exc, match):
    with pytest.raises(exc, match=match):
        rope.p_rope_frequencies(*args)
    if isinstance(args[1], float) and args[0].ndim == 1 and np.all(args[0] >= 0):
        with pytest.raises(exc, match=r"position_options\['p'\]"):
            _model("rope", p=args[1])
