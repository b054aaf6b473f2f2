"""Sandwich (Chi et al. 2023): the bias against a loop over sinusoid inner products, the per-head
compression, its properties, the hook in attention and the model, errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from posenc_np import absolute, attention
from posenc_np.model import ModelConfig, Transformer
from posenc_np.relative import SandwichBias, sandwich_bias, sandwich_ratios
from posenc_np.testing import gradcheck_hook


def paper_bias(num_heads, q_len, k_len, dim, compression):
    """(sum_{k=1}^{d'/2} cos((m - n) / 10000^(2k/d')) - d'/2) / rho_h, query i at i + k_len - q_len."""
    out = np.zeros((num_heads, q_len, k_len))
    for h in range(num_heads):
        rho = 8 * (h + 1) / num_heads if compression == "alibi" else 1.0
        for i in range(q_len):
            for j in range(k_len):
                r = (i + k_len - q_len) - j
                s = math.fsum(math.cos(r / 10000 ** (2 * k / dim)) for k in range(1, dim // 2 + 1))
                out[h, i, j] = (s - dim / 2) / rho
    return out


@pytest.mark.parametrize("h,q_len,k_len,dim,comp", [(4, 5, 5, 128, "alibi"), (3, 2, 7, 16, "alibi"),
                                                     (2, 6, 3, 8, "none"), (8, 1, 40, 128, "alibi")])
def test_bias_is_the_paper_formula(h, q_len, k_len, dim, comp):
    np.testing.assert_allclose(sandwich_bias(h, q_len, k_len, dim=dim, compression=comp),
                               paper_bias(h, q_len, k_len, dim, comp), rtol=1e-12, atol=1e-12)


def test_bias_is_the_inner_product_of_sinusoids_shifted_by_half_the_width():
    # with k = 1..d'/2 the sinusoid frequencies are 10000^(-2k/d'): Vaswani's shifted by one index
    dim, pos = 16, np.arange(9)
    freqs = 10000.0 ** (-2.0 * np.arange(1, dim // 2 + 1) / dim)
    p = np.concatenate([np.sin(np.outer(pos, freqs)), np.cos(np.outer(pos, freqs))], axis=1)
    np.testing.assert_allclose(sandwich_bias(1, 9, 9, dim=dim, compression="none")[0], p @ p.T - dim / 2, atol=1e-12)
    assert absolute.sinusoidal_frequencies(dim)[0] == 1.0  # Vaswani starts at k = 0


def test_properties_zero_diagonal_nonpositive_even_and_ratios():
    b = sandwich_bias(4, 12, 12)
    np.testing.assert_array_equal(np.diagonal(b, axis1=1, axis2=2), 0.0)
    assert np.all(b <= 0)
    np.testing.assert_allclose(b, np.swapaxes(b, 1, 2), atol=0)
    np.testing.assert_array_equal(sandwich_ratios(4), [2.0, 4.0, 6.0, 8.0])
    np.testing.assert_allclose(b[0], 4 * b[3])


def test_hook_in_attention_and_gradcheck():
    rng = np.random.default_rng(0)
    q, k, v = rng.standard_normal((2, 2, 3, 4)), rng.standard_normal((2, 2, 5, 4)), rng.standard_normal((2, 2, 5, 4))
    hook = SandwichBias(2, dim=8)
    out, _ = attention.forward(q, k, v, causal=True, hooks=[hook])
    ref, _ = attention.forward(q, k, v, causal=True, bias=sandwich_bias(2, 3, 5, dim=8))
    np.testing.assert_allclose(out, ref, rtol=1e-13)
    gradcheck_hook(hook, q, k, v, causal=True)


def test_model_has_no_position_parameters_and_decodes_with_a_cache():
    cfg = ModelConfig(vocab_size=7, d_model=8, n_heads=2, n_layers=1, position="sandwich", dtype="float64",
                      position_options={"dim": 16})
    m = Transformer(cfg)
    assert not [k for k in m.params if ".pos." in k]
    tokens = np.array([[1, 2, 3, 4, 5]])
    full = m.forward(tokens)
    cache = m.init_cache()
    steps = [m.forward(tokens[:, :2], cache=cache)] + [m.forward(tokens[:, t:t + 1], cache=cache) for t in range(2, 5)]
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kw,match", [({"dim": 7}, "dim must be even"), ({"dim": 0}, "dim"),
                                      ({"compression": "linear"}, "compression"), ({"num_heads": 0}, "num_heads"),
                                      ({"k_len": -2}, "k_len")])
def test_errors_name_the_argument(kw, match):
    args = {"num_heads": 2, "q_len": 2, "k_len": 3, "dim": 8, "compression": "alibi", **kw}
    with pytest.raises(ValueError, match=match):
        sandwich_bias(**args)


def test_dim_has_the_allocation_bound():
    # issue 26: sandwich_bias(dim=2**40) ran out of memory for empty lengths; the hook accepted it
    for call in (lambda: sandwich_bias(2, 0, 0, dim=2**40), lambda: sandwich_bias(2, 4, 4, dim=2**40),
                 lambda: SandwichBias(2, dim=2**40)):
        with pytest.raises(ValueError, match=r"dim must be an integer <= 1073741824"):
            call()
