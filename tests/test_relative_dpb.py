"""Dynamic position bias: the bias against a loop transcription of the MLP of the log-scaled
signed distance, the MLP's gradients, the variants, the doors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from posenc_np import relative
from posenc_np.relative import _mlp
from posenc_np.testing import gradcheck, gradcheck_hook

RNG = np.random.default_rng(13)


def _params(heads=3, width=4, depth=2):
    sizes = (1,) + (width,) * depth + (heads,)
    out = {}
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:]), start=1):
        out[f"w{i}"], out[f"b{i}"] = RNG.standard_normal((a, b)), RNG.standard_normal(b)
    return out


def _loop(params, q_len, k_len, offset, log_distance):
    """b_h(i, j) = MLP(sign(r) log(|r| + 1))_h, r = (i + offset) - j, SiLU hidden layers, written per entry."""
    n = len(params) // 2
    heads = params[f"w{n}"].shape[1]
    out = np.zeros((heads, q_len, k_len))
    for i in range(q_len):
        for j in range(k_len):
            r = i + offset - j
            h = [math.copysign(math.log(abs(r) + 1), r) if log_distance else float(r)]
            for layer in range(1, n + 1):
                w, b = params[f"w{layer}"], params[f"b{layer}"]
                z = [sum(h[a] * w[a, o] for a in range(len(h))) + b[o] for o in range(w.shape[1])]
                h = z if layer == n else [v / (1 + math.exp(-v)) for v in z]
            out[:, i, j] = h
    return out


@pytest.mark.parametrize("q_len,k_len,offset,log_distance,depth", [(5, 5, None, True, 2), (2, 6, None, False, 1),
                                                                    (3, 3, 0, True, 3)])
def test_bias_matches_the_mlp_of_the_distance(q_len, k_len, offset, log_distance, depth):
    params = _params(depth=depth)
    got = relative.dpb_bias(params, q_len, k_len, log_distance=log_distance, query_offset=offset)
    want = _loop(params, q_len, k_len, k_len - q_len if offset is None else offset, log_distance)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_inputs_are_signed_log_distances_query_minus_key():
    u = relative.dpb_inputs(2, 4)
    np.testing.assert_allclose(u, [[math.log(3), math.log(2), 0.0, -math.log(2)],
                                   [math.log(4), math.log(3), math.log(2), 0.0]])
    np.testing.assert_array_equal(relative.dpb_inputs(2, 4, log_distance=False), [[2, 1, 0, -1], [3, 2, 1, 0]])


@pytest.mark.parametrize("log_distance", [True, False])
def test_bias_backward_gradcheck(log_distance):
    params = _params(depth=2)

    def fun(**p):
        return relative.dpb_bias(p, 4, 5, log_distance=log_distance)

    def backward(g, **p):
        return relative.dpb_bias_backward(g, p, log_distance=log_distance)

    gradcheck(fun, backward, params, max_entries=None)


@pytest.mark.parametrize("activation", _mlp.ACTIVATIONS)
def test_shared_mlp_backward_gradcheck_including_the_input(activation):
    params = {k: v for k, v in _params(depth=2).items()}

    def fun(x, **p):
        return _mlp.mlp(x, p, activation)[0]

    def backward(g, x, **p):
        dx, grads = _mlp.mlp_backward(g, p, _mlp.mlp(x, p, activation)[1], activation)
        return {"x": dx, **grads}

    gradcheck(fun, backward, {"x": RNG.standard_normal((7, 1)), **params}, max_entries=None)


@pytest.mark.parametrize("causal", [True, False])
def test_hook_gradcheck_through_attention(causal):
    hook = relative.DynamicPositionBias(2, width=5, depth=2, seed=2)
    q, k, v = (RNG.standard_normal((1, 2, 4, 3)) for _ in range(3))
    gradcheck_hook(hook, q, k, v, causal=causal, max_entries=60)


def test_doors():
    with pytest.raises(ValueError, match="depth must be an integer >= 1"):
        relative.DynamicPositionBias(2, depth=0)
    with pytest.raises(TypeError, match="log_distance must be a bool"):
        relative.dpb_bias(_params(), 2, 2, log_distance=1)
    hook = relative.DynamicPositionBias(3, width=4, depth=2, seed=0)
    hook.params = _params(depth=1)
    with pytest.raises(ValueError, match=r"params must hold 3 layers"):
        hook.logits(np.zeros((1, 3, 2, 4)), np.zeros((1, 3, 2, 4)), 0.5)
    with pytest.raises(ValueError, match="dbias must be"):
        relative.dpb_bias_backward(np.zeros((2, 2, 2)), _params())
