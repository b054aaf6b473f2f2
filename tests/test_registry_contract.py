"""The contract every entry of posenc_np.registry.REGISTRY keeps, whatever the encoding: a tiny model's
loss has the gradient its backward says (float64 central differences), a float32 model stays float32
end to end, and KV-cache decoding equals the full forward (or the entry says why it is undefined)."""

import numpy as np
import pytest

from posenc_np import absolute, fused
from posenc_np.layers import softmax_cross_entropy_backward
from posenc_np.model import KVCache, ModelConfig, Transformer
from posenc_np.registry import REGISTRY
from posenc_np.testing import gradcheck

NAMES = list(REGISTRY)
#: Every entry, and every fusion of the absolute ones.
CASES = [(n, f) for n in NAMES for f in (absolute.FUSIONS if REGISTRY[n].absolute else ("add",))]


def tiny(position, fusion="add", *, dtype="float64", n_layers=1, backend="auto"):
    cfg = ModelConfig(vocab_size=7, d_model=8, n_heads=2, n_layers=n_layers, d_ff=12, max_len=16, position=position,
                      fusion=fusion, tied=fusion != "multiply", dtype=dtype, seed=3)
    model = Transformer(cfg, backend=backend)
    rng = np.random.default_rng(11)  # away from the (zero / one / tiny) initial values: every path carries a gradient
    for v in model.params.values():
        v += rng.normal(0.0, 0.4, size=v.shape).astype(v.dtype)
    return model


def batch(seed=1, shape=(2, 5)):
    rng = np.random.default_rng(seed)
    tokens, targets = rng.integers(0, 7, size=shape), rng.integers(0, 7, size=shape)
    targets[0, 0] = -100  # an ignored position
    return tokens, targets


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("name", NAMES)
def test_loss_gradient_is_the_central_difference(name, backend):
    """float64: d(loss)/d(every parameter tensor), through the references and the fused kernels."""
    model = tiny(name, backend=backend)
    tokens, targets = batch()

    def fun(**p):
        model.load_params(p)
        return np.array(model.loss(tokens, targets))

    def bwd(g, **p):
        model.load_params(p)
        model.loss(tokens, targets, backward=True)
        return {n: float(g) * model.grads[n] for n in p}

    res = gradcheck(fun, bwd, {n: v.copy() for n, v in model.params.items()}, max_entries=3, tol=1e-6, seed=5)
    assert res.checked >= len(model.params)  # every tensor was probed


@pytest.mark.parametrize("name", NAMES)
def test_float32_model_keeps_float32(name):
    model = tiny(name, dtype="float32")
    tokens, targets = batch()
    logits = model.forward(tokens)
    assert logits.dtype == np.float32
    _, cache = model.ops.softmax_cross_entropy(logits, targets)
    dlogits = softmax_cross_entropy_backward(cache)
    assert dlogits.dtype == np.float32
    model.backward(dlogits)
    assert set(model.grads) == set(model.params)
    wrong = {k: (v.dtype, model.grads[k].dtype) for k, v in model.params.items()
             if v.dtype != np.float32 or model.grads[k].dtype != np.float32}
    assert not wrong


@pytest.mark.parametrize("name,fusion", CASES, ids=[f"{n}-{f}" for n, f in CASES])
def test_kv_cache_decoding_equals_the_full_forward(name, fusion):
    """Step by step, and a 4-token prefill then single steps, equal the full forward (float64, two
    layers); an entry whose cached decoding is undefined says why, and both doors refuse it."""
    model = tiny(name, fusion, n_layers=2)
    tokens = np.random.default_rng(4).integers(0, 7, size=(2, 7))
    reason = REGISTRY[name].kv_cache_unsupported
    if reason is not None:
        assert isinstance(reason, str) and reason
        with pytest.raises(ValueError, match="KV-cache decoding is not defined"):
            model.init_cache()
        with pytest.raises(ValueError, match="KV-cache decoding is not defined"):
            model.forward(tokens, cache=KVCache())
        return
    full = model.forward(tokens)
    cache = model.init_cache()
    steps = [model.decode_step(tokens[:, t], cache) for t in range(7)]
    np.testing.assert_allclose(np.stack(steps, axis=1), full, rtol=1e-10, atol=1e-11)
    assert cache.length == 7 and cache.keys[0].shape == (2, 2, 7, 4)
    cache = model.init_cache()
    pre = model.forward(tokens[:, :4], cache=cache)
    rest = [model.decode_step(tokens[:, t], cache) for t in range(4, 7)]
    np.testing.assert_allclose(np.concatenate([pre, np.stack(rest, 1)], axis=1), full, rtol=1e-10, atol=1e-11)


def test_the_references_and_the_fused_kernels_agree_on_a_forward():
    """The two backends of one float64 model: the same logits to rounding (the kernels keep the
    statistics in float64 and sum in another order)."""
    for name in NAMES:
        a, b = tiny(name, backend="numpy"), tiny(name, backend="numba")
        assert a.ops is fused.NUMPY and b.ops is fused.NUMBA
        tokens, _ = batch()
        np.testing.assert_allclose(a.forward(tokens), b.forward(tokens), rtol=1e-12, atol=1e-12, err_msg=name)
