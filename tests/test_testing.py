"""posenc_np.testing.gradcheck must pass correct backward passes and catch wrong ones."""

import numpy as np
import pytest

from posenc_np.testing import gradcheck


def _inputs():
    rng = np.random.default_rng(1)
    return {"a": rng.standard_normal((3, 4)), "b": rng.standard_normal((4, 2))}


def test_passes_exact_gradient_of_matmul_tanh():
    def f(a, b):
        return np.tanh(a @ b)

    def bw(g, a, b):
        dz = g * (1 - np.tanh(a @ b) ** 2)
        return {"a": dz @ b.T, "b": a.T @ dz}

    res = gradcheck(f, bw, _inputs(), max_entries=None)
    assert res.ok and res.checked == 12 + 8 and res.max_rel_error < 1e-8


def test_catches_a_wrong_gradient_and_names_the_entry():
    def f(a, b):
        return np.tanh(a @ b)

    def bw(g, a, b):
        dz = g * (1 - np.tanh(a @ b) ** 2)
        da = dz @ b.T
        da[1, 2] *= 1.001  # a 0.1% error in one entry
        return {"a": da, "b": a.T @ dz}

    with pytest.raises(AssertionError, match=r"a\[1, 2\]"):
        gradcheck(f, bw, _inputs(), max_entries=None)


def test_tuple_outputs_and_missing_gradient_keys():
    def f(a, b):
        return a * 2.0, (a * b.T[:3, :4].sum()).sum(axis=0)

    def bw(g, a, b):
        g0, g1 = g
        return {"a": 2.0 * g0 + np.broadcast_to(g1, a.shape) * b.T[:3, :4].sum()}

    res = gradcheck(f, bw, _inputs())
    assert res.where[0] == "a"


def test_shape_mismatch_is_reported():
    with pytest.raises(AssertionError, match="shape"):
        gradcheck(lambda a, b: a.sum(), lambda g, a, b: {"a": np.zeros(3)}, _inputs())


def test_unknown_gradient_name():
    with pytest.raises(ValueError, match="not an input"):
        gradcheck(lambda a, b: a.sum(), lambda g, a, b: {"c": 0.0}, _inputs())


class _ScaledKeyBias:
    """A toy hook: logits += scale * (k . u); its backward can be made wrong on purpose."""

    def __init__(self, u, wrong=False):
        self.params, self.grads, self.wrong = {"u": u}, {}, wrong

    def logits(self, q, k, scale, mask=None):
        return scale * (k @ self.params["u"])[..., None, :], (k, scale)

    def logits_backward(self, dlogits, cache):
        k, scale = cache
        col = dlogits.sum(axis=-2)
        grad = scale * (col[..., None] * k).reshape(-1, k.shape[-1]).sum(axis=0)
        self.grads["u"] = grad * (1.01 if self.wrong else 1.0)
        return None, scale * col[..., None] * self.params["u"]

    def values(self, probs):
        return None, None

    def values_backward(self, dout, cache):
        return None


def test_gradcheck_hook_checks_inputs_and_parameters():
    from posenc_np.testing import gradcheck_hook

    rng = np.random.default_rng(2)
    q, k, v = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 5, 4)), rng.standard_normal((2, 5, 3))
    hook = _ScaledKeyBias(rng.standard_normal(4))
    res = gradcheck_hook(hook, q, k, v, causal=True, max_entries=None)
    assert res.checked == q.size + k.size + v.size + 4
    with pytest.raises(AssertionError, match=r"hook\.u"):
        gradcheck_hook(_ScaledKeyBias(hook.params["u"], wrong=True), q, k, v, max_entries=None)


@pytest.mark.parametrize("hook", [None, object(), {"params": {}}], ids=["None", "object", "dict"])
def test_gradcheck_hook_refuses_what_is_not_a_hook(hook):
    """gradcheck_hook(None, ...) was an AttributeError."""
    from posenc_np.testing import gradcheck_hook

    q = np.ones((1, 2, 4))
    message = f"hook must be a position hook with a params dict .* got {type(hook).__name__}"
    with pytest.raises(TypeError, match=message):
        gradcheck_hook(hook, q, q, q)
