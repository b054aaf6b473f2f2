r"""Fused layer kernels (posenc_np.kernels.layers, reached through posenc_np.fused) against an mpmath
oracle, the float64 formula and the NumPy references (posenc_np.layers, posenc_np.optim).

Tolerances:

* tanh-GELU: the oracle evaluates :math:`x\,\tfrac12(1 + \tanh u)` at 50 digits from the
  float64 value of ``x`` (as :math:`x / (1 + e^{-2u})`, the same function without the
  cancellation). The kernel's error is bounded by ``(6|u| + 16)`` units of its dtype's epsilon,
  relative to ``|y|`` and, for ``dy/dx``, to ``Phi(x) + |x Phi'(x)|`` (its two terms cancel
  near ``x = -0.75``, where ``dy/dx = 0``). The gate behaves like :math:`e^{2u}` for negative
  :math:`u`: :math:`u` carries about five roundings and two rounded constants (relative error
  below :math:`3\epsilon`), which :math:`e^{2u}` turns into :math:`6|u|\epsilon`; the
  remaining steps add a few roundings (exp within 2 ulp). Absolutely, errors up to ``2^15``
  times the smallest normal number pass: the kernel's exp returns 0 below :math:`e^{-87}`
  (float32) or :math:`e^{-708}` (float64), where ``y`` and ``dy/dx`` are below
  :math:`40\,e^{-87}` and :math:`1.4 \cdot 10^4\,e^{-87}` (:math:`< 2^{14}` smallest
  normals; float64 alike).
* LayerNorm: float32 kernel against the formula in float64, within a few float32 ulps of the
  output scale (statistics in float64, each output rounded once); float64 against the NumPy
  reference within 1e-13.
* AdamW: bit for bit against the NumPy update (the same operations in the same order).
* Masked softmax: against the reference (the attention core's softmax) and its float64
  evaluation within 8 eps (the exp within 0.91 / 2 ulp, sums in another order); special values
  (NaN, +-inf, masked rows) entry for entry equal; the backward within 16 eps, and float64
  gradient-checked through the attention path that uses it.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

from posenc_np import attention, fused, layers, optim
from posenc_np.kernels import layers as kl
from posenc_np.model import ModelConfig, Transformer
from posenc_np.testing import gradcheck

DTYPES = (np.float32, np.float64)


def gelu_oracle(x: float) -> tuple[float, float, float]:
    """``(y, dy/dx, Phi + |x Phi'|)`` of tanh-GELU at ``x`` (a float), at 50 digits, rounded to float64."""
    with mpmath.workdps(50):
        v = mpmath.mpf(x)
        c0, c1 = mpmath.sqrt(2 / mpmath.pi), mpmath.mpf("0.044715")
        u = c0 * (v + c1 * v ** 3)
        cdf = 1 / (1 + mpmath.exp(-2 * u))  # (1 + tanh u) / 2 without its cancellation at u << 0
        dcdf = mpmath.sech(u) ** 2 / 2 * c0 * (1 + 3 * c1 * v * v)  # 1 - tanh^2 u = sech^2 u
        return float(v * cdf), float(cdf + v * dcdf), float(cdf + abs(v * dcdf))


def gelu_points(dtype):
    rng = np.random.default_rng(5)
    x = np.concatenate([np.linspace(-12, 6, 181), rng.standard_normal(200) * 3, [0.0, -0.0, 1e-30, -1e-30, 39.9, -39.9]])
    return x.astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gelu_tanh_within_its_bound_of_the_oracle(dtype):
    x = gelu_points(dtype)
    y, dydx = kl.gelu_tanh(x, layers.GELU_CLIP)
    assert y.dtype == dtype and dydx.dtype == dtype and y.shape == x.shape
    eps, tiny = np.finfo(dtype).eps, np.finfo(dtype).tiny
    want = np.array([gelu_oracle(float(v)) for v in x])
    u = np.abs(np.sqrt(2 / np.pi) * (x.astype(np.float64) + 0.044715 * x.astype(np.float64) ** 3))
    bound = (6 * u + 16) * eps
    for got, ref, scale in ((y, want[:, 0], np.abs(want[:, 0])), (dydx, want[:, 1], want[:, 2])):
        err = np.abs(got.astype(np.float64) - ref)
        ok = (err <= bound * scale) | (err <= 2.0 ** 15 * tiny)
        assert ok.all(), (x[~ok], got[~ok], ref[~ok])


@pytest.mark.parametrize("dtype", DTYPES)
def test_gelu_tanh_matches_the_reference_where_it_is_accurate(dtype):
    """On [-3, 3] the reference's 1 + tanh(u) has not cancelled: both agree to a few ulps.
    (Below about -4 the reference loses digits: at x = -7 its float64 result is 0.7 % off the
    oracle, the kernel's 5e-15.)"""
    x = np.linspace(-3, 3, 1201).astype(dtype)
    y, dydx = kl.gelu_tanh(x, layers.GELU_CLIP)
    y_ref, dydx_ref = layers.gelu_with_slope(x, "tanh")
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(y, y_ref, rtol=16 * eps, atol=16 * eps)
    np.testing.assert_allclose(dydx, dydx_ref, rtol=16 * eps, atol=16 * eps)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gelu_tanh_special_values_like_the_reference(dtype):
    x = np.array([-np.inf, np.inf, np.nan, -1e30, 1e30, -40.0, 40.0, -45.0, 45.0], dtype=dtype)
    y, dydx = kl.gelu_tanh(x, layers.GELU_CLIP)
    y_ref, dydx_ref = layers.gelu_with_slope(x, "tanh")
    np.testing.assert_array_equal(y, y_ref)
    np.testing.assert_array_equal(dydx, dydx_ref)
    assert y[0] == 0 and y[1] == np.inf and np.isnan(y[2]) and dydx[0] == 0 and dydx[1] == 1


def test_gelu_tanh_derivative_is_the_forward_slope():
    """float64 gradient check of the kernel against itself: central differences of its y."""
    x = np.linspace(-8, 8, 321)
    h = 1e-6
    y_plus, _ = kl.gelu_tanh(x + h, layers.GELU_CLIP)
    y_minus, _ = kl.gelu_tanh(x - h, layers.GELU_CLIP)
    _, dydx = kl.gelu_tanh(x, layers.GELU_CLIP)
    np.testing.assert_allclose(dydx, (y_plus - y_minus) / (2 * h), rtol=1e-6, atol=1e-9)


def test_gelu_layer_shapes_and_strided_input():
    x = np.random.default_rng(6).standard_normal((3, 5, 8))[:, ::2, ::-1]
    g = fused.FusedGELU()
    y = g.forward(x)
    assert y.shape == x.shape
    y_ref, dydx_ref = layers.gelu_with_slope(np.ascontiguousarray(x), "tanh")
    np.testing.assert_allclose(y, y_ref, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(g.backward(np.ones_like(x)), dydx_ref, rtol=1e-14, atol=1e-15)


def layer_norm_f64(x, gamma, beta, eps):
    x = x.astype(np.float64)
    mu = x.mean(-1, keepdims=True)
    r = 1 / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps)
    xhat = (x - mu) * r
    return xhat * gamma.astype(np.float64) + beta.astype(np.float64), xhat, r[..., 0]


@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm_forward_against_the_float64_formula(dtype):
    rng = np.random.default_rng(7)
    x = (4.0 + 3.0 * rng.standard_normal((5, 7, 48))).astype(dtype)
    gamma, beta = (rng.standard_normal(48).astype(dtype) for _ in range(2))
    y, xhat, rstd = kl.layer_norm_forward(x, gamma, beta, 1e-5)
    want_y, want_xhat, want_r = layer_norm_f64(x, gamma, beta, 1e-5)
    assert y.dtype == dtype and xhat.dtype == dtype and rstd.dtype == np.float64 and rstd.shape == (5, 7)
    eps = np.finfo(dtype).eps
    scale = np.abs(want_y).max()
    np.testing.assert_allclose(y, want_y, rtol=0, atol=4 * eps * scale)
    np.testing.assert_allclose(xhat, want_xhat, rtol=0, atol=4 * eps * np.abs(want_xhat).max())
    np.testing.assert_allclose(rstd, want_r, rtol=1e-13)


@pytest.mark.parametrize("dtype", DTYPES)
def test_layer_norm_backward_against_the_float64_formula(dtype):
    rng = np.random.default_rng(8)
    x = rng.standard_normal((6, 40)).astype(dtype)
    gamma, beta = (rng.standard_normal(40).astype(dtype) for _ in range(2))
    dy = rng.standard_normal((6, 40)).astype(dtype)
    _, xhat, rstd = kl.layer_norm_forward(x, gamma, beta, 1e-5)
    dx, dgamma, dbeta = kl.layer_norm_backward(dy, xhat, rstd, gamma)
    # the backward formula in float64 from the same (rounded) xhat the kernel keeps
    h, g = xhat.astype(np.float64), dy.astype(np.float64) * gamma.astype(np.float64)
    want_dx = rstd[:, None] * (g - g.mean(-1, keepdims=True) - h * (g * h).mean(-1, keepdims=True))
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(dx, want_dx, rtol=0, atol=8 * eps * np.abs(want_dx).max())
    np.testing.assert_allclose(dgamma, (dy.astype(np.float64) * h).sum(0), rtol=0, atol=8 * eps * 6 * 4)
    np.testing.assert_allclose(dbeta, dy.astype(np.float64).sum(0), rtol=0, atol=8 * eps * 6 * 4)


def test_layer_norm_kernel_equals_numpy_layer_in_float64():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((3, 4, 32))
    dy = rng.standard_normal((3, 4, 32))
    a, b = fused.FusedLayerNorm(32, dtype=np.float64), layers.LayerNorm(32, dtype=np.float64)
    for ln in (a, b):
        ln.params["gamma"][:] = np.linspace(0.5, 1.5, 32)
        ln.params["beta"][:] = np.linspace(-1, 1, 32)
    np.testing.assert_allclose(a.forward(x), b.forward(x), rtol=1e-13, atol=1e-14)
    np.testing.assert_allclose(a.backward(dy), b.backward(dy), rtol=1e-12, atol=1e-13)
    for k in ("gamma", "beta"):
        np.testing.assert_allclose(a.grads[k], b.grads[k], rtol=1e-12, atol=1e-13)


def test_layer_norm_mixed_dtypes_take_the_numpy_path():
    """float64 input to a float32 layer, or a float64 dy after a float32 forward: the NumPy code
    (which promotes) runs, with the kernel's cache converted for the backward."""
    rng = np.random.default_rng(10)
    x64, x32 = rng.standard_normal((4, 16)), rng.standard_normal((4, 16)).astype(np.float32)
    a, b = fused.FusedLayerNorm(16), layers.LayerNorm(16)
    np.testing.assert_array_equal(a.forward(x64), b.forward(x64))
    a.forward(x32)
    b.forward(x32)
    dy = rng.standard_normal((4, 16))
    got, want = a.backward(dy), b.backward(dy)
    assert got.dtype == want.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_adamw_kernel_is_bit_identical_to_the_numpy_update(dtype, weight_decay):
    rng = np.random.default_rng(11)
    params = {"w": rng.standard_normal((8, 5)).astype(dtype), "b": rng.standard_normal(5).astype(dtype)}
    twins = {k: v.copy() for k, v in params.items()}
    fast = fused.FusedAdam(params, lr=3e-3, weight_decay=weight_decay)
    slow = optim.Adam(twins, lr=3e-3, weight_decay=weight_decay)
    for step in range(5):
        grads = {k: rng.standard_normal(v.shape).astype(dtype) for k, v in params.items()}
        lr = None if step < 3 else 1e-3 * step  # a schedule's own rate too
        fast.step(grads, lr=lr)
        slow.step({k: g.copy() for k, g in grads.items()}, lr=lr)
        for k in params:
            np.testing.assert_array_equal(params[k], twins[k])
            np.testing.assert_array_equal(fast.m[k], slow.m[k])
            np.testing.assert_array_equal(fast.v[k], slow.v[k])


@pytest.mark.parametrize("dtype", DTYPES)
def test_adamw_update_entry_is_the_numpy_update(dtype):
    """The checked entry point (posenc_np.fused calls it with ``check=False``)."""
    rng = np.random.default_rng(14)
    p = rng.standard_normal((6, 4)).astype(dtype)
    twin = p.copy()
    ref = optim.Adam({"w": twin}, lr=2e-3, weight_decay=0.05)
    m, v = np.zeros_like(p), np.zeros_like(p)
    for t in (1, 2, 3):
        g = rng.standard_normal(p.shape).astype(dtype)
        ref.step({"w": g.copy()})
        kl.adamw_update(p, g, m, v, b1=0.9, b2=0.999, decay=1.0 - 2e-3 * 0.05, step_size=2e-3 / (1.0 - 0.9 ** t),
                        root_bc2=math.sqrt(1.0 - 0.999 ** t), eps=1e-8)
        np.testing.assert_array_equal(p, twin)
        np.testing.assert_array_equal(m, ref.m["w"])
        np.testing.assert_array_equal(v, ref.v["w"])


def test_adamw_strided_gradient_takes_the_numpy_update():
    rng = np.random.default_rng(12)
    p, q = rng.standard_normal((6, 4)), None
    q = p.copy()
    g = rng.standard_normal((4, 6)).T  # not C-contiguous
    a, b = fused.FusedAdam({"w": p}), optim.Adam({"w": q})
    a.step({"w": g})
    b.step({"w": g})
    np.testing.assert_array_equal(p, q)


def test_adamw_follows_arrays_replaced_between_steps():
    """A parameter or moment array replaced in the dicts must be the one the fused update writes
    (the old one left alone), bit-identically to the NumPy update doing the same."""
    rng = np.random.default_rng(13)
    runs = []
    for adam in (fused.FusedAdam, optim.Adam):
        w = np.arange(12, dtype=np.float32).reshape(3, 4) / 7
        opt = adam({"w": w}, lr=1e-2, weight_decay=0.1)
        grads = [rng.standard_normal((3, 4)).astype(np.float32) for _ in range(3)]
        opt.step({"w": grads[0]})
        after_one = w.copy()
        opt.params["w"] = w2 = w.copy() * 2  # a new parameter array
        opt.step({"w": grads[1]})
        np.testing.assert_array_equal(w, after_one)  # the old array is not touched
        opt.m["w"] = opt.m["w"].copy()  # new moment arrays
        opt.v["w"] = opt.v["w"].copy()
        opt.step({"w": grads[2]})
        runs.append((w2, opt.m["w"], opt.v["w"]))
        rng = np.random.default_rng(13)
    for got, want in zip(*runs):
        np.testing.assert_array_equal(got, want)


def test_adam_refuses_a_read_only_parameter_by_name():
    """A read-only parameter reached the fused update, where Numba raised a TypingError."""
    w = np.ones((2, 3), np.float32)
    w.flags.writeable = False
    with pytest.raises(ValueError, match=r"params\['w'\] must be writeable"):
        optim.Adam({"w": w})
    ok = np.ones((2, 3), np.float32)
    opt = optim.Adam({"w": ok})
    ok.flags.writeable = False  # made read-only after construction: NumPy's own error, not Numba's
    with pytest.raises(ValueError, match="read-only"):
        opt.step({"w": np.ones((2, 3), np.float32)})


def test_the_backend_rule_chooses_the_ops():
    """One choice per model (posenc_np.fused.ops through posenc_np._backend.choose): "auto" takes the
    kernels for float32/float64 and the references for float16; "numba" refuses float16."""
    assert fused.ops("auto", "float32") is fused.ops("numba", np.float64) is fused.NUMBA
    assert fused.ops("numpy", "float32") is fused.ops("auto", "float16") is fused.NUMPY
    with pytest.raises(TypeError, match="backend='numba' needs a float32 or float64 model"):
        fused.ops("numba", "float16")
    cfg = ModelConfig(vocab_size=5, d_model=8, n_heads=2, n_layers=1, d_ff=8, max_len=8)
    with pytest.raises(ValueError, match="backend must be one of"):
        Transformer(cfg, backend="torch")
    model = Transformer(cfg, backend="numpy")
    assert model.ops is fused.NUMPY and type(model.blocks[0].ln1) is layers.LayerNorm
    assert type(Transformer(cfg).blocks[0].act) is fused.FusedGELU


# --------------------------------------------------------------------------- masked softmax (attention)

@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_rows_matches_the_reference_and_float64(dtype):
    rng = np.random.default_rng(13)
    logits = (rng.standard_normal((2, 3, 17, 29)) * 8).astype(dtype)
    for keep in (None, attention.applied_mask(None, True, 17, 29), rng.random((3, 1, 29)) < 0.7):
        got, inf_rows = kl.softmax_rows(logits, keep)
        assert not inf_rows.any()
        want = attention.masked_softmax(logits, keep, -1)
        want64 = attention.masked_softmax(logits.astype(np.float64), keep, -1)
        assert got.dtype == dtype and got.shape == logits.shape
        eps = np.finfo(dtype).eps
        np.testing.assert_allclose(got, want, rtol=8 * eps, atol=8 * eps)
        np.testing.assert_allclose(got, want64, rtol=8 * eps, atol=8 * eps)
        np.testing.assert_array_equal(got == 0, want == 0)  # masked entries exactly 0


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_rows_special_values_like_the_reference(dtype):
    """NaN rows, +inf (alone, twice, with values past exp's overflow), -inf, fully masked rows:
    the kernel flags exactly the rows with a kept +inf, and with those given to the reference
    (fused.softmax) NaN and zero entries are where the reference has them, the rest
    within 8 eps."""
    inf, nan = np.inf, np.nan
    logits = np.array([[0.0, 1.0, nan, 2.0, -inf],
                       [inf, 1.0, 2.0, -inf, 3.0],
                       [inf, inf, 100.0, 1000.0, 0.0],
                       [-inf, -inf, -inf, -inf, -inf],
                       [1e30, -1e30, 0.0, 5.0, -5.0],
                       [3.0, 1.0, 2.0, 4.0, 0.0],
                       [nan, inf, 1.0, 2.0, 0.0]], dtype=dtype)
    keep = np.ones(logits.shape, bool)
    keep[5] = False  # a fully masked row
    keep[1, 0] = False  # a masked +inf
    keep[0, 2] = False  # a masked NaN does not poison its row
    eps = np.finfo(dtype).eps
    for k in (keep, None):
        with np.errstate(all="ignore"):  # inf / inf in the reference (the kernel's +inf rows too)
            want = attention.masked_softmax(logits, k, -1)
            got = fused.softmax(logits, k)  # the kernel, its flagged rows by the reference
        kept = np.ones(logits.shape, bool) if k is None else k
        np.testing.assert_array_equal(kl.softmax_rows(logits, k)[1], ((logits == np.inf) & kept).any(-1))
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_array_equal(got == 0, want == 0)
        np.testing.assert_allclose(got, want, rtol=8 * eps, atol=0)  # (NaN positions compare equal)


@pytest.mark.parametrize("dtype", DTYPES)
def test_softmax_rows_backward_matches_the_reference(dtype):
    rng = np.random.default_rng(14)
    probs = attention.masked_softmax(rng.standard_normal((4, 9, 11)).astype(dtype), None, -1)
    dprobs = rng.standard_normal((4, 9, 11)).astype(dtype)
    eps = np.finfo(dtype).eps
    np.testing.assert_allclose(kl.softmax_rows_backward(dprobs, probs), attention.softmax_backward(dprobs, probs),
                               rtol=16 * eps, atol=16 * eps)


def test_attention_with_fused_softmax_equals_the_reference_and_gradchecks():
    """The model's path (softmax=fused.SOFTMAX) against attention's NumPy path, forward and
    backward, and its backward against float64 central differences."""
    rng = np.random.default_rng(15)
    q, k, v = (rng.standard_normal((2, 3, 6, 4)) for _ in range(3))
    keep = attention.applied_mask(None, True, 6, 6)
    out_f, cache_f = attention.attend(q, k, v, None, keep, 0.5, (), fused.SOFTMAX)
    out_r, cache_r = attention.attend(q, k, v, None, keep, 0.5, ())
    assert cache_f["softmax"] is fused.SOFTMAX and cache_r["softmax"] is None
    np.testing.assert_allclose(out_f, out_r, rtol=1e-13, atol=1e-14)
    dout = rng.standard_normal(out_f.shape)
    g_f, g_r = attention.attend_backward(dout, cache_f), attention.attend_backward(dout, cache_r)
    for name in ("q", "k", "v"):
        np.testing.assert_allclose(g_f[name], g_r[name], rtol=1e-12, atol=1e-13)

    def fun(q, k, v):
        return attention.attend(q, k, v, None, keep, 0.5, (), fused.SOFTMAX)[0]

    def bwd(g, q, k, v):
        grads = attention.attend_backward(g, attention.attend(q, k, v, None, keep, 0.5, (), fused.SOFTMAX)[1])
        return {"q": grads["q"], "k": grads["k"], "v": grads["v"]}

    gradcheck(fun, bwd, {"q": q, "k": k, "v": v}, tol=1e-6, max_entries=None)


# --------------------------------------------------------------------------- gradient norms

@pytest.mark.parametrize("dtype", DTYPES)
def test_sum_squares_against_float64_dot(dtype):
    a = np.random.default_rng(16).standard_normal((37, 29)).astype(dtype)
    x = a.ravel().astype(np.float64)
    assert kl.sum_squares(a) == pytest.approx(float(np.dot(x, x)), rel=1e-14)
    assert np.isnan(kl.sum_squares(np.array([1.0, np.nan], dtype))) and kl.sum_squares(np.array([np.inf], dtype)) == np.inf


def test_global_norm_and_clipping_agree_across_backends():
    rng = np.random.default_rng(17)
    grads = {"w": rng.standard_normal((6, 5)).astype(np.float32), "b": rng.standard_normal(5),
             "t": rng.standard_normal((5, 6)).T}  # float32, float64 and a strided array (NumPy sum)
    want = optim.global_norm(grads)
    assert fused.global_norm(grads) == pytest.approx(want, rel=1e-14)
    a, b = ({k: g.copy() for k, g in grads.items()} for _ in range(2))
    assert fused.clip_grad_norm(a, 0.5) == pytest.approx(optim.clip_grad_norm(b, 0.5), rel=1e-14)
    for k in grads:
        np.testing.assert_allclose(a[k], b[k], rtol=1e-6)


@pytest.mark.parametrize("ops", [fused.NUMPY, fused.NUMBA], ids=lambda o: o.backend)
def test_clipping_refuses_nan_and_inf_but_not_overflowing_squares(ops):
    huge = {"w": np.full(4, 1e200), "b": np.ones(3)}  # finite, but the squares overflow float64
    assert ops.global_norm(huge) == pytest.approx(2e200, rel=1e-12)
    assert ops.clip_grad_norm(huge, 1.0) == pytest.approx(2e200, rel=1e-12)
    for bad in (np.nan, np.inf):
        grads = {"w": np.ones((2, 2), np.float32), "b": np.array([1.0, bad], np.float32)}
        before = {k: g.copy() for k, g in grads.items()}
        with pytest.raises(ValueError, match=r"grads\['b'\] holds NaN or inf"):
            ops.clip_grad_norm(grads, 1.0)
        for k in grads:
            np.testing.assert_array_equal(grads[k], before[k])  # nothing was scaled
        opt = ops.Adam({"w": np.ones((2, 2), np.float32), "b": np.ones(2, np.float32)})
        with pytest.raises(ValueError, match=r"grads\['b'\] holds NaN or inf"):
            opt.step(grads)


# --------------------------------------------------------------------------- cross-entropy

@pytest.mark.parametrize("dtype", DTYPES)
def test_cross_entropy_kernel_matches_the_numpy_code(dtype):
    rng = np.random.default_rng(18)
    logits = (rng.standard_normal((3, 7, 11)) * 6).astype(dtype)
    targets = rng.integers(0, 11, size=(3, 7))
    targets[1, 2] = targets[2, 6] = -100  # ignored
    eps = float(np.finfo(dtype).eps)  # a Python float: pytest.approx takes no NumPy scalars as tolerances
    loss_k, cache_k = fused.softmax_cross_entropy(logits, targets)
    loss_n, cache_n = layers.softmax_cross_entropy(logits, targets)
    assert loss_k == pytest.approx(loss_n, rel=16 * eps)
    assert cache_k["probs"].dtype == dtype and cache_k["count"] == cache_n["count"] == 19
    np.testing.assert_allclose(cache_k["probs"], cache_n["probs"], rtol=8 * eps, atol=8 * eps)
    for dloss in (1.0, 0.3):  # the backward takes either cache: (p - onehot) * w, bit for bit
        got = layers.softmax_cross_entropy_backward(cache_k, dloss)
        want = cache_k["probs"].copy()
        t = cache_k["targets"][..., None]
        np.put_along_axis(want, t, np.take_along_axis(want, t, axis=-1) - 1, axis=-1)
        want *= (cache_k["keep"] * (dloss / 19)).astype(dtype)[..., None]
        np.testing.assert_array_equal(got, want)
    assert np.all(got[1, 2] == 0) and np.all(got[2, 6] == 0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_cross_entropy_kernel_rows_with_nan_or_inf_are_the_numpy_code(dtype):
    logits = np.array([[0.0, 1.0, 2.0], [np.nan, 1.0, 0.0], [np.inf, 0.0, 1.0], [-np.inf, 0.0, 1.0],
                       [-np.inf, -np.inf, -np.inf], [1e30, -1e30, 0.0]], dtype=dtype)
    targets = np.array([2, 1, 0, 2, 0, 0])
    with np.errstate(all="ignore"):
        loss_k, cache_k = fused.softmax_cross_entropy(logits, targets)
        loss_n, cache_n = layers.softmax_cross_entropy(logits, targets)
    assert np.isnan(loss_k) and np.isnan(loss_n)
    got, want = cache_k["probs"], cache_n["probs"]
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=8 * np.finfo(dtype).eps, atol=0)


def test_cross_entropy_kernel_gradcheck():
    rng = np.random.default_rng(19)
    z = rng.standard_normal((4, 5)) * 2
    t = np.array([0, 4, -100, 2])

    def fun(z):
        return np.array(fused.softmax_cross_entropy(z, t)[0])

    def bwd(g, z):
        return {"z": layers.softmax_cross_entropy_backward(fused.softmax_cross_entropy(z, t)[1], float(g))}

    gradcheck(fun, bwd, {"z": z}, tol=1e-6, max_entries=None)


def test_kernel_entry_points_refuse_bad_input_by_name():
    f32, f64 = np.zeros((4, 3), np.float32), np.zeros((4, 3))
    g3 = np.ones(3, np.float32)
    cases = [
        (TypeError, r"^x must be a float32", lambda: kl.gelu_tanh(np.zeros(3, int), 40.0)),
        (TypeError, r"gamma must have x's dtype", lambda: kl.layer_norm_forward(f64, g3, g3, 1e-5)),
        (ValueError, r"beta must have shape \(3,\)", lambda: kl.layer_norm_forward(f32, g3, np.ones(4, np.float32), 1e-5)),
        (ValueError, r"dy must have shape \(4, 3\)", lambda: kl.layer_norm_backward(f32[:2], f32, np.ones(4), g3)),
        (ValueError, r"rstd must be", lambda: kl.layer_norm_backward(f32, f32, np.ones(3), g3)),
        (TypeError, r"keep must be a boolean", lambda: kl.softmax_rows(f32, np.ones((4, 3)))),
        (TypeError, r"dprobs must have probs's dtype|probs must have dprobs's dtype",
         lambda: kl.softmax_rows_backward(f64, f32)),
        (ValueError, r"targets must lie in \[0, 3\)", lambda: kl.cross_entropy_rows(f32, np.array([0, 1, 2, 3]))),
        (TypeError, r"targets must be an integer array of shape \(4,\)", lambda: kl.cross_entropy_rows(f32, np.zeros(4))),
        (ValueError, r"logits must be \(rows, C\)", lambda: kl.cross_entropy_rows(np.zeros(3, np.float32), np.zeros(3, int))),
        (TypeError, r"a must be a float32", lambda: kl.sum_squares([1.0, 2.0])),
        (ValueError, r"p must be a C-contiguous, writeable",
         lambda: kl.adamw_update(np.zeros((3, 4)).T, f64, f64.copy(), f64.copy(), b1=0.9, b2=0.999, decay=1.0,
                                 step_size=1e-3, root_bc2=1.0, eps=1e-8)),
        (ValueError, r"m must have shape \(4, 3\)",
         lambda: kl.adamw_update(f64.copy(), f64, np.zeros(3), f64.copy(), b1=0.9, b2=0.999, decay=1.0,
                                 step_size=1e-3, root_bc2=1.0, eps=1e-8)),
    ]
    for exc, match, call in cases:
        with pytest.raises(exc, match=match):
            call()
