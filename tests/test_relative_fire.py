"""FIRE (Li et al. 2023): the bias against a loop transcription of the paper's formula, the
gradients of the MLP, c and L, the query position under KV-cache decoding, the doors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from posenc_np import relative
from posenc_np.testing import gradcheck, gradcheck_hook

RNG = np.random.default_rng(11)


def _params(heads=3, width=5, c=0.3, lmult=0.8):
    return {"w1": RNG.standard_normal((1, width)), "b1": RNG.standard_normal(width),
            "w2": RNG.standard_normal((width, heads)), "b2": RNG.standard_normal(heads),
            "c": np.array([c]), "L_multiplier": np.array([lmult])}


def _paper_loop(params, q_len, k_len, offset, init_L, eps):
    """b_h(i, j) = f(psi(i - j) / psi(max(L, i))), psi(x) = log(|c| |x| + 1), L = |L_mult| L0, entry by entry."""
    c, L = abs(params["c"][0]), abs(params["L_multiplier"][0]) * init_L
    heads = params["w2"].shape[1]
    out = np.zeros((heads, q_len, k_len))
    for i in range(q_len):
        qi = i + offset
        for j in range(k_len):
            x = math.log(c * abs(qi - j) + 1) / (math.log(c * max(L, qi) + 1) + eps)
            hidden = [max(0.0, params["w1"][0, u] * x + params["b1"][u]) for u in range(params["w1"].shape[1])]
            for h in range(heads):
                out[h, i, j] = sum(hidden[u] * params["w2"][u, h] for u in range(len(hidden))) + params["b2"][h]
    return out


@pytest.mark.parametrize("q_len,k_len,offset,init_L", [(5, 5, None, 3.0), (2, 7, None, 2.5), (3, 4, 10, 4.0)])
def test_bias_matches_the_papers_formula(q_len, k_len, offset, init_L):
    params = _params()
    got = relative.fire_bias(params, q_len, k_len, init_L=init_L, eps=1e-6, query_offset=offset)
    want = _paper_loop(params, q_len, k_len, k_len - q_len if offset is None else offset, init_L, 1e-6)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_normalized_distance_is_progressive_interpolation():
    x = relative.fire_normalized_distance(6, 6, c=1.0, L=2.0, eps=0.0)
    np.testing.assert_allclose(np.diag(x), 0.0)
    # beyond the threshold the farthest key of query i (j = 0) is at distance i: x = psi(i)/psi(i) = 1
    np.testing.assert_allclose(x[2:, 0], 1.0)
    assert x[1, 0] == pytest.approx(math.log(2) / math.log(3))  # query 1 < L: normalised by psi(L)
    assert np.tril(x).max() <= 1.0 + 1e-15  # every key a causal query sees maps into [0, 1]


@pytest.mark.parametrize("offset", [None, 3])
def test_bias_backward_gradcheck(offset):
    params = _params(c=-0.4, lmult=1.3)  # negative c: the sign of |c| enters the gradient
    dims = (4, 6)

    def fun(**p):
        return relative.fire_bias(p, *dims, init_L=2.5, query_offset=offset)

    def backward(g, **p):
        return relative.fire_bias_backward(g, p, init_L=2.5, query_offset=offset)

    gradcheck(fun, backward, params, max_entries=None)


@pytest.mark.parametrize("causal", [True, False])
def test_hook_gradcheck_through_attention(causal):
    hook = relative.FIREBias(2, width=6, init_c=0.5, init_L=2.5, seed=3)
    q, k, v = (RNG.standard_normal((1, 2, 5, 4)) for _ in range(3))
    gradcheck_hook(hook, q, k, v, causal=causal, max_entries=60)


def test_a_decoding_step_sees_its_absolute_query_position():
    hook = relative.FIREBias(2, width=4, init_L=2.0, seed=0)
    full, _ = hook.logits(np.zeros((1, 2, 6, 3)), np.zeros((1, 2, 6, 3)), 1.0)
    step, _ = hook.logits(np.zeros((1, 2, 1, 3)), np.zeros((1, 2, 6, 3)), 1.0)
    np.testing.assert_array_equal(step[:, 0], full[:, 5])


def test_doors():
    with pytest.raises(ValueError, match=r"keys w1, b1, \.\.\., wL, bL \(L >= 1\) and c, L_multiplier"):
        relative.fire_bias({"w1": np.ones((1, 2)), "b1": np.ones(2)}, 3, 3)
    bad = _params()
    bad["w2"] = np.ones((4, 3))
    with pytest.raises(ValueError, match=r"params\['w2'\] must be \(5, out\)"):
        relative.fire_bias(bad, 3, 3)
    bad = _params()
    bad["c"] = np.ones(2)
    with pytest.raises(ValueError, match=r"params\['c'\] must have shape \(1,\)"):
        relative.fire_bias(bad, 3, 3)
    with pytest.raises(ValueError, match="init_L must be > 0"):
        relative.fire_bias(_params(), 3, 3, init_L=0.0)
    with pytest.raises(ValueError, match="eps must be >= 0"):
        relative.FIREBias(2, eps=-1.0)
    with pytest.raises(ValueError, match="num_heads=3"):
        relative.fire_bias_backward(np.zeros((2, 3, 3)), _params())
    with pytest.raises(TypeError, match="params must be a dict"):
        relative.fire_bias([1, 2], 3, 3)
