"""Layers: forward against independent formulas, backward against float64 central differences."""

import math

import numpy as np
import pytest

from posenc_np import fused, layers
from posenc_np.testing import gradcheck


def layer_gradcheck(layer, x, *, int_input=False, tol=1e-6):
    """Gradcheck a layer's input (unless integer) and every parameter, all in float64."""
    names = list(layer.params)

    def load(p):
        for n in names:
            layer.params[n] = p[n]

    def fun(x, **p):
        load(p)
        return layer.forward(x)

    def bwd(g, x, **p):
        load(p)
        layer.forward(x)
        dx = layer.backward(g)
        out = {n: layer.grads[n] for n in names}
        if not int_input:
            out["x"] = dx
        return out

    inputs = {"x": x, **{n: layer.params[n].astype(np.float64) for n in names}}
    return gradcheck(fun, bwd, inputs, tol=tol, max_entries=None)


def test_linear_forward_matches_loops_and_gradcheck():
    rng = np.random.default_rng(0)
    lin = layers.Linear(3, 4, rng=1, init_std=0.5, dtype=np.float64)
    lin.params["bias"] = rng.standard_normal(4)
    x = rng.standard_normal((2, 5, 3))
    y = lin.forward(x)
    W, b = lin.params["weight"], lin.params["bias"]
    for i in range(2):
        for t in range(5):
            for o in range(4):
                assert y[i, t, o] == pytest.approx(sum(x[i, t, c] * W[c, o] for c in range(3)) + b[o], abs=1e-12)
    layer_gradcheck(lin, x)
    layer_gradcheck(layers.Linear(3, 2, bias=False, rng=2, init_std=0.5, dtype=np.float64), x)


def test_linear_seeded_init_and_dtype():
    a = layers.Linear(8, 16, rng=7)
    b = layers.Linear(8, 16, rng=np.random.default_rng(7))
    assert a.params["weight"].dtype == np.float32
    np.testing.assert_array_equal(a.params["weight"], b.params["weight"])
    assert abs(a.params["weight"].std() - 0.02) < 0.005
    np.testing.assert_array_equal(a.params["bias"], 0)


@pytest.mark.parametrize("ops", [fused.NUMPY, fused.NUMBA], ids=lambda o: o.backend)
def test_layernorm_forward_and_gradcheck(ops):
    rng = np.random.default_rng(1)
    ln = ops.LayerNorm(6, eps=1e-5, dtype=np.float64)
    ln.params["gamma"] = rng.standard_normal(6)
    ln.params["beta"] = rng.standard_normal(6)
    x = 3.0 + 2.0 * rng.standard_normal((4, 6))
    y = ln.forward(x)
    for row, yrow in zip(x, y):
        m = sum(row) / 6
        var = sum((v - m) ** 2 for v in row) / 6
        want = [(v - m) / math.sqrt(var + 1e-5) * g + b for v, g, b in zip(row, ln.params["gamma"], ln.params["beta"])]
        np.testing.assert_allclose(yrow, want, rtol=1e-12, atol=1e-12)
    layer_gradcheck(ln, x)


def test_layernorm_unit_gain_normalises():
    x = np.random.default_rng(2).normal(5.0, 3.0, size=(3, 64)).astype(np.float32)
    y = layers.LayerNorm(64).forward(x)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y.mean(-1), 0, atol=1e-5)
    np.testing.assert_allclose(y.var(-1), 1, atol=1e-3)


@pytest.mark.parametrize("ops", [fused.NUMPY, fused.NUMBA], ids=lambda o: o.backend)
@pytest.mark.parametrize("approximate", ["tanh", "none"])
def test_gelu_forward_formula_and_gradcheck(approximate, ops):
    x = np.linspace(-6, 6, 61)
    y = layers.gelu(x, approximate=approximate)
    if approximate == "none":
        want = [v * 0.5 * (1 + math.erf(v / math.sqrt(2))) for v in x]
    else:
        want = [0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3))) for v in x]
    np.testing.assert_allclose(y, want, rtol=1e-13, atol=1e-15)
    g = ops.GELU(approximate=approximate)
    np.testing.assert_allclose(g.forward(x), want, rtol=1e-13, atol=1e-15)
    layer_gradcheck(ops.GELU(approximate=approximate), x.reshape(61, 1) * 0.9 + 0.01)
    # the stateless pair agrees with the layer (the kernel with the NumPy pair where 1 + tanh(u)
    # has not cancelled yet: tests/test_kernels_layers.py compares it with mpmath everywhere)
    dy = np.cos(x)
    tol = 1e-15 if ops is fused.NUMPY or approximate == "none" else 1e-13
    keep = np.abs(x) <= (6 if ops is fused.NUMPY else 3)
    np.testing.assert_allclose(layers.gelu_backward(dy, x, approximate=approximate)[keep], g.backward(dy)[keep],
                               rtol=tol)


def test_gelu_tanh_is_close_to_exact_and_dtype_preserved():
    x = np.linspace(-8, 8, 4001)
    diff = np.abs(layers.gelu(x, approximate="tanh") - layers.gelu(x, approximate="none"))
    assert 1e-4 < diff.max() < 1e-3  # the approximation is good but not exact
    assert layers.gelu(x.astype(np.float32), approximate="none").dtype == np.float32
    np.testing.assert_array_equal(layers.gelu(np.array([-1, 0, 2]), approximate="none"),
                                  layers.gelu(np.array([-1.0, 0.0, 2.0]), approximate="none"))  # ints work
    with pytest.raises(ValueError, match="approximate"):
        layers.GELU(approximate="erf")


def test_embedding_forward_backward_scatter_add():
    emb = layers.Embedding(5, 3, rng=0, init_std=1.0, dtype=np.float64)
    ids = np.array([[0, 2, 2], [4, 2, 1]])
    y = emb.forward(ids)
    np.testing.assert_array_equal(y, np.eye(5)[ids] @ emb.params["weight"])
    dy = np.arange(18, dtype=np.float64).reshape(2, 3, 3)
    assert emb.backward(dy) is None
    want = np.zeros((5, 3))
    for i in range(2):
        for t in range(3):
            want[ids[i, t]] += dy[i, t]
    np.testing.assert_array_equal(emb.grads["weight"], want)
    layer_gradcheck(emb, ids, int_input=True)
    with pytest.raises(ValueError, match=r"ids must lie in \[0, 5\)"):
        emb.forward(np.array([5]))
    with pytest.raises(TypeError):
        emb.forward(np.array([1.0]))


def test_cross_entropy_value_ignore_and_gradcheck():
    rng = np.random.default_rng(3)
    logits = rng.standard_normal((2, 4, 6))
    targets = np.array([[1, -100, 5, 0], [2, 2, -100, 3]])
    loss, cache = layers.softmax_cross_entropy(logits, targets)
    terms = []
    for i in range(2):
        for t in range(4):
            if targets[i, t] != -100:
                row = logits[i, t]
                terms.append(math.log(sum(math.exp(v) for v in row)) - row[targets[i, t]])
    assert loss == pytest.approx(sum(terms) / len(terms), rel=1e-13)

    def fun(logits):
        return np.array(layers.softmax_cross_entropy(logits, targets)[0])

    def bwd(g, logits):
        _, c = layers.softmax_cross_entropy(logits, targets)
        return {"logits": layers.softmax_cross_entropy_backward(c, float(g))}

    gradcheck(fun, bwd, {"logits": logits}, max_entries=None)
    d = layers.softmax_cross_entropy_backward(cache)
    np.testing.assert_array_equal(d[0, 1], 0)  # ignored position has no gradient
    np.testing.assert_allclose(d.sum(-1), 0, atol=1e-15)


def test_cross_entropy_stable_and_all_ignored():
    logits = np.array([[1000.0, 0.0, -1000.0]], dtype=np.float32)
    loss, cache = layers.softmax_cross_entropy(logits, np.array([1]))
    assert loss == pytest.approx(1000.0, rel=1e-6)
    loss, cache = layers.softmax_cross_entropy(logits, np.array([-1]), ignore_index=-1)
    assert loss == 0.0
    np.testing.assert_array_equal(layers.softmax_cross_entropy_backward(cache), 0)
    with pytest.raises(ValueError, match="targets must lie"):
        layers.softmax_cross_entropy(logits, np.array([3]))
    with pytest.raises(ValueError, match="targets must have shape"):
        layers.softmax_cross_entropy(logits, np.array([1, 2]))


def test_backward_before_forward_and_shape_errors():
    with pytest.raises(RuntimeError, match="before forward"):
        layers.LayerNorm(3).backward(np.zeros(3))
    lin = layers.Linear(3, 2)
    lin.forward(np.zeros((4, 3), dtype=np.float32))
    with pytest.raises(ValueError, match="dy must have shape"):
        lin.backward(np.zeros((4, 3)))
    with pytest.raises(ValueError, match="must end with 3 features"):
        lin.forward(np.zeros((4, 2)))


def test_embedding_gradient_matches_add_at_for_many_ids():
    from posenc_np._util import scatter_add_rows

    rng = np.random.default_rng(5)
    emb = layers.Embedding(40, 6, rng=0, dtype=np.float64)
    ids = rng.integers(0, 40, size=(7, 50))
    dy = rng.standard_normal((7, 50, 6))
    emb.forward(ids)
    emb.backward(dy)
    np.testing.assert_allclose(emb.grads["weight"], scatter_add_rows(ids, dy, 40), rtol=1e-13, atol=1e-13)
    emb.forward(np.zeros((0, 3), dtype=int))
    emb.backward(np.zeros((0, 3, 6)))
    np.testing.assert_array_equal(emb.grads["weight"], 0)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_takes_a_number_and_a_0d_array(approximate):
    """A scalar was a TypeError ("return arrays must be of ArrayType") from the in-place arithmetic."""
    x = 1.25
    phi = 0.5 * (1 + math.erf(x / math.sqrt(2))) if approximate == "none" else \
        0.5 * (1 + math.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    for arg in (x, np.array(x)):
        y = layers.gelu(arg, approximate=approximate)
        assert np.shape(y) == () and float(y) == pytest.approx(x * phi, rel=1e-15)
        dx = layers.gelu_backward(2.0, arg, approximate=approximate)  # (dy, x)
        assert np.shape(dx) == () and float(dx) == float(layers.gelu_backward(np.array([2.0]), np.array([x]),
                                                                              approximate=approximate)[0])
