r"""Transformer building blocks with hand-written backward passes (llm.c / CS231n style).

Every layer is an object with two dicts sharing their keys, ``params`` and ``grads``;
``y = layer.forward(x)`` keeps what the backward pass needs on the object and
``dx = layer.backward(dy)`` returns the input gradient and **overwrites** ``grads`` (it never
accumulates; a model that uses a parameter twice adds the two gradients itself). The forward
and the backward of each layer sit next to each other, with the formula in the docstring.

==================  =====================================================================
``Linear``          :math:`y = xW + b`, ``W`` is ``(in, out)``
``LayerNorm``       :math:`y = \gamma \odot (x - \mu)/\sqrt{\sigma^2 + \epsilon} + \beta` over the last axis
``GELU``            :math:`y = x\,\Phi(x)`; exact (``erf``) or the tanh approximation (GPT-2)
``Embedding``       :math:`y = W[\text{ids}]`, gradient a scatter-add into rows
cross-entropy       ``softmax_cross_entropy(logits, targets)`` / ``..._backward(cache)``
==================  =====================================================================

Parameters are created in the requested ``dtype`` (float32 for training, float64 for
gradient checks); initialisation draws from a ``numpy.random.Generator`` (or a seed) passed
in, never from NumPy's global state.

What a forward keeps for its backward: integer ids (:class:`Embedding`) are copied, so a
caller may reuse its array; float activations are kept by reference, as in every autodiff
framework (:class:`Linear` keeps ``x``): do not modify an input in place between a layer's
forward and its backward.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ._checks import as_float_array, as_int_array, check_alloc, check_choice, check_float_dtype, check_int, check_real
from ._util import kernel_dtype, normal_init, scatter_add_rows

__all__ = [
    "GELU",
    "Embedding",
    "LayerNorm",
    "Linear",
    "gelu",
    "gelu_backward",
    "softmax_cross_entropy",
    "softmax_cross_entropy_backward",
]

GELU_APPROXIMATIONS = ("tanh", "none")
LAYER_BACKENDS = ("auto", "numpy", "numba")


@functools.cache
def _kernels():
    """:mod:`posenc_np.kernels.layers`, imported on first use (`import posenc_np.layers` stays
    free of Numba) and then remembered: a function-level import costs ~0.8 us a call, and a
    training step makes ~100 of them."""
    from .kernels import layers

    return layers


def _rng(rng) -> np.random.Generator:
    """A Generator from a Generator, an int seed or None (fresh entropy)."""
    return rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)


def _need_forward(cache, name):
    if cache is None:
        raise RuntimeError(f"{name}.backward called before forward")


def _check_dy(dy, shape, name):
    dy = as_float_array(dy, f"{name}.backward: dy")
    if dy.shape != shape:
        raise ValueError(f"{name}.backward: dy must have shape {shape} (the forward output), got {dy.shape}")
    return dy


def _mean_last(a: np.ndarray) -> np.ndarray:
    """Mean over the last axis, keepdims: ``a @ (1/d, ..., 1/d)``.

    A matrix-vector product (BLAS gemv) instead of ``a.mean(-1)``: same value, faster for the
    short rows of a transformer (``docs/benchmarks.md``, "Small choices")."""
    d = a.shape[-1]
    return (a @ np.full(d, 1.0 / d, dtype=a.dtype))[..., None]


def _sum_rows(a: np.ndarray) -> np.ndarray:
    """Column sums of ``a`` viewed as ``(rows, d)``: ``(1, ..., 1) @ a`` (gemv, as above)."""
    a = a.reshape(-1, a.shape[-1])
    return np.ones(a.shape[0], dtype=a.dtype) @ a


# --------------------------------------------------------------------------- Linear

class Linear:
    r"""Affine map :math:`y = xW + b` over the last axis.

    Backward, with :math:`X` the inputs flattened to rows and :math:`G = \partial L/\partial y`:
    :math:`\partial L/\partial W = X^\top G`, :math:`\partial L/\partial b = \sum_{\text{rows}} G`,
    :math:`\partial L/\partial x = G W^\top`.

    Initialisation: :math:`W \sim \mathcal N(0, \mathrm{std}^2)` (GPT-2 uses 0.02), :math:`b = 0`.
    """

    def __init__(self, in_features: int, out_features: int, *, bias: bool = True, rng=None,
                 init_std: float = 0.02, dtype=np.float32):
        self.in_features = check_int(in_features, "in_features", minimum=1)
        self.out_features = check_int(out_features, "out_features", minimum=1)
        init_std = check_real(init_std, "init_std", nonnegative=True)
        dtype = check_float_dtype(dtype)
        check_alloc((self.in_features, self.out_features), np.float64, "Linear weight (in_features, out_features)")
        w = normal_init(_rng(rng), init_std, (self.in_features, self.out_features), dtype)
        self.params = {"weight": w}
        if bias:
            self.params["bias"] = np.zeros(self.out_features, dtype=dtype)
        self.grads = {k: np.zeros_like(v) for k, v in self.params.items()}
        self._x = None

    def forward(self, x) -> np.ndarray:
        x = np.asarray(x)
        if x.shape[-1:] != (self.in_features,):
            raise ValueError(f"Linear.forward: x must end with {self.in_features} features, got shape {x.shape}")
        self._x = x
        # one 2-D product over all rows: NumPy's matmul of a 3-D x loops over its leading axis
        # with one small BLAS call per slice ((16, 32, 64) @ (64, 256) float32: 234 -> 151 us)
        y = (x.reshape(-1, self.in_features) @ self.params["weight"]).reshape(x.shape[:-1] + (self.out_features,))
        if "bias" in self.params:
            y += self.params["bias"]
        return y

    def backward(self, dy) -> np.ndarray:
        _need_forward(self._x, "Linear")
        x = self._x
        dy = _check_dy(dy, x.shape[:-1] + (self.out_features,), "Linear")
        g = dy.reshape(-1, self.out_features)
        self.grads["weight"] = x.reshape(-1, self.in_features).T @ g
        if "bias" in self.params:
            self.grads["bias"] = _sum_rows(g)
        # a 2-D product over all rows (faster than a batched 3-D matmul: docs/benchmarks.md, "Small choices")
        return (g @ self.params["weight"].T).reshape(x.shape)


# --------------------------------------------------------------------------- LayerNorm

class LayerNorm:
    r"""Layer normalisation over the last axis (Ba et al. 2016).

    Forward: :math:`\hat x = (x - \mu)\,r`, :math:`r = (\sigma^2 + \epsilon)^{-1/2}` with the
    biased variance, :math:`y = \gamma \odot \hat x + \beta`.

    Backward, with :math:`g = \gamma \odot \partial L/\partial y` and means over the last axis:
    :math:`\partial L/\partial x = r\,\big(g - \overline{g} - \hat x\,\overline{g \odot \hat x}\big)`,
    :math:`\partial L/\partial\gamma = \sum \partial L/\partial y \odot \hat x`,
    :math:`\partial L/\partial\beta = \sum \partial L/\partial y`.

    ``backend``: ``"numpy"`` runs the NumPy code below; ``"numba"`` and ``"auto"`` run the
    fused kernels :func:`posenc_np.kernels.layers.layer_norm_forward` / ``_backward`` (one pass
    per row, statistics in float64; 2.5-5x faster at training sizes) when ``x``, ``dy`` and the
    parameters share the dtype float32 or float64, and the NumPy code otherwise.
    """

    def __init__(self, dim: int, *, eps: float = 1e-5, dtype=np.float32, backend: str = "auto"):
        self.dim = check_int(dim, "dim", minimum=1)
        self.eps = check_real(eps, "eps", positive=True)
        self.backend = check_choice(backend, "backend", LAYER_BACKENDS)
        dtype = check_float_dtype(dtype)
        check_alloc((self.dim,), dtype, "LayerNorm gain (dim,)")
        self.params = {"gamma": np.ones(self.dim, dtype=dtype), "beta": np.zeros(self.dim, dtype=dtype)}
        self.grads = {k: np.zeros_like(v) for k, v in self.params.items()}
        self._cache = None

    def forward(self, x) -> np.ndarray:
        x = np.asarray(x)
        if x.shape[-1:] != (self.dim,):
            raise ValueError(f"LayerNorm.forward: x must end with {self.dim} features, got shape {x.shape}")
        gamma, beta = self.params["gamma"], self.params["beta"]
        if self.backend != "numpy" and kernel_dtype(x, gamma, beta):
            y, xhat, rstd = _kernels().layer_norm_forward(x, gamma, beta, self.eps, check=False)
            self._cache = (xhat, rstd)  # rstd: float64, x.shape[:-1]
            return y
        xc = x - _mean_last(x)
        rstd = _mean_last(xc * xc)
        rstd += self.eps
        np.sqrt(rstd, out=rstd)
        np.reciprocal(rstd, out=rstd)  # r = (var + eps)^(-1/2)
        xhat = xc
        xhat *= rstd  # in place: xc is not needed any more
        self._cache = (xhat, rstd)
        y = xhat * self.params["gamma"]
        y += self.params["beta"]
        return y

    def backward(self, dy) -> np.ndarray:
        _need_forward(self._cache, "LayerNorm")
        xhat, rstd = self._cache
        dy = _check_dy(dy, xhat.shape, "LayerNorm")
        gamma = self.params["gamma"]
        if rstd.ndim < xhat.ndim:  # the kernel's forward
            if kernel_dtype(dy, xhat, gamma):
                kernels = _kernels()
                dx, self.grads["gamma"], self.grads["beta"] = kernels.layer_norm_backward(dy, xhat, rstd, gamma, check=False)
                return dx
            rstd = rstd.astype(xhat.dtype)[..., None]
        dy_xhat = dy * xhat
        self.grads["gamma"] = _sum_rows(dy_xhat)
        self.grads["beta"] = _sum_rows(dy)
        # g = gamma * dy;  dx = r (g - mean(g) - xhat mean(g xhat)), with g xhat = gamma * dy_xhat
        g = dy * gamma
        dx = xhat * _mean_last(dy_xhat * gamma)
        dx += _mean_last(g)
        np.subtract(g, dx, out=dx)
        dx *= rstd
        return dx


# --------------------------------------------------------------------------- GELU

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_C = 0.044715


#: The gate is evaluated on ``x`` clipped to ``[-GELU_CLIP, GELU_CLIP]``: beyond it both
#: approximations have saturated exactly (``Phi = 0`` or ``1``, ``Phi' = 0`` in float64 and
#: float32), so the clip changes no finite result, and ``x**2``, ``x**3`` cannot overflow to
#: give ``0 * inf = NaN`` (``gelu(-inf) = 0``, ``gelu(inf) = inf``, derivatives 0 and 1).
GELU_CLIP = 40.0


def _gelu_cdf(x: np.ndarray, approximate: str):
    r"""The gate :math:`\Phi(x)` and its derivative :math:`\Phi'(x)`, shared by forward and backward.

    ``"none"``: the standard normal CDF :math:`\Phi(x) = \tfrac12(1 + \mathrm{erf}(x/\sqrt2))`,
    :math:`\Phi'(x) = e^{-x^2/2}/\sqrt{2\pi}`.
    ``"tanh"`` (Hendrycks & Gimpel 2016, GPT-2):
    :math:`\Phi(x) \approx \tfrac12(1 + \tanh u)`, :math:`u = \sqrt{2/\pi}\,(x + 0.044715x^3)`,
    :math:`\Phi'(x) \approx \tfrac12(1 - \tanh^2 u)\sqrt{2/\pi}\,(1 + 3 \cdot 0.044715x^2)`.
    ``x`` is the clipped input (see :data:`GELU_CLIP`).
    """
    # In-place arithmetic on few temporaries: at training sizes the cost of GELU is memory
    # traffic and fresh allocations, not the tanh itself.
    x2 = x * x
    if approximate == "tanh":
        t = x2 * _GELU_C
        t += 1.0
        t *= x
        t *= _SQRT_2_OVER_PI
        np.tanh(t, out=t)  # t = tanh(u)
        dcdf = t * t
        np.subtract(1.0, dcdf, out=dcdf)
        dcdf *= 0.5 * _SQRT_2_OVER_PI
        x2 *= 3.0 * _GELU_C
        x2 += 1.0
        dcdf *= x2
        t += 1.0
        t *= 0.5
        return t, dcdf
    from scipy.special import erf  # imported on first use: keeps `import posenc_np.layers` light

    cdf = erf(x * (1.0 / math.sqrt(2.0))).astype(x.dtype, copy=False)
    cdf += 1.0
    cdf *= 0.5
    x2 *= -0.5
    dcdf = np.exp(x2, out=x2)
    dcdf *= 1.0 / math.sqrt(2.0 * math.pi)
    return cdf, dcdf


def _gelu(x: np.ndarray, approximate: str):
    """``(y, dy/dx)`` of GELU for a float array ``x`` (see :data:`GELU_CLIP` for +-inf and huge inputs)."""
    xc = np.clip(x, -GELU_CLIP, GELU_CLIP)
    cdf, dcdf = _gelu_cdf(xc, approximate)
    dcdf *= xc
    dcdf += cdf  # dy/dx = Phi(x) + x Phi'(x)
    y = np.maximum(x, -GELU_CLIP, out=xc)  # y = x Phi(x), with Phi = 0 exactly below -GELU_CLIP
    y *= cdf
    return y, dcdf


def gelu(x, *, approximate: str = "tanh") -> np.ndarray:
    r"""GELU :math:`y = x\,\Phi(x)` (Hendrycks & Gimpel 2016); see :func:`_gelu_cdf` for ``approximate``.

    Integer input is converted to float64; ``gelu(-inf) = 0``, ``gelu(inf) = inf``.
    """
    approximate = check_choice(approximate, "approximate", GELU_APPROXIMATIONS)
    x = as_float_array(x, "x")
    return _gelu(x, approximate)[0]


def gelu_backward(dy, x, *, approximate: str = "tanh") -> np.ndarray:
    r""":math:`\partial L/\partial x = \partial L/\partial y \odot (\Phi(x) + x\,\Phi'(x))`."""
    approximate = check_choice(approximate, "approximate", GELU_APPROXIMATIONS)
    x = as_float_array(x, "x")
    dy = as_float_array(dy, "dy")
    if dy.shape != x.shape:
        raise ValueError(f"dy must have x's shape {x.shape}, got {dy.shape}")
    return dy * _gelu(x, approximate)[1]


class GELU:
    """GELU as a layer (no parameters). ``approximate="tanh"`` (default, GPT-2 / torch's
    ``approximate="tanh"``) or ``"none"`` (exact, ``scipy.special.erf``).

    ``backend``: ``"numpy"`` runs :func:`_gelu`; ``"numba"`` and ``"auto"`` run the fused
    :func:`posenc_np.kernels.layers.gelu_tanh` (one pass, 2-5x faster at training sizes) for
    ``"tanh"`` on float32/float64 input, and :func:`_gelu` otherwise."""

    def __init__(self, *, approximate: str = "tanh", backend: str = "auto"):
        self.approximate = check_choice(approximate, "approximate", GELU_APPROXIMATIONS)
        self.backend = check_choice(backend, "backend", LAYER_BACKENDS)
        self.params: dict = {}
        self.grads: dict = {}
        self._dydx = None

    def forward(self, x) -> np.ndarray:
        x = as_float_array(x, "x")
        if self.backend != "numpy" and self.approximate == "tanh" and kernel_dtype(x):
            y, self._dydx = _kernels().gelu_tanh(x, GELU_CLIP, check=False)
        else:
            y, self._dydx = _gelu(x, self.approximate)  # keep only dy/dx: the backward is one multiply
        return y

    def backward(self, dy) -> np.ndarray:
        _need_forward(self._dydx, "GELU")
        return _check_dy(dy, self._dydx.shape, "GELU") * self._dydx


# --------------------------------------------------------------------------- Embedding

class Embedding:
    r"""Token embedding :math:`y = W[\text{ids}]`, ``W`` is ``(num_embeddings, dim)``.

    Backward: :math:`\partial L/\partial W[r] = \sum_{j:\,\text{ids}_j = r} \partial L/\partial y_j`
    (a scatter-add; repeated ids accumulate). Integer ids have no gradient, so
    :meth:`backward` returns ``None``. Ids outside ``[0, num_embeddings)`` raise ``ValueError``.
    """

    def __init__(self, num_embeddings: int, dim: int, *, rng=None, init_std: float = 0.02, dtype=np.float32):
        self.num_embeddings = check_int(num_embeddings, "num_embeddings", minimum=1)
        self.dim = check_int(dim, "dim", minimum=1)
        init_std = check_real(init_std, "init_std", nonnegative=True)
        dtype = check_float_dtype(dtype)
        check_alloc((self.num_embeddings, self.dim), np.float64, "Embedding weight (num_embeddings, dim)")
        self.params = {"weight": normal_init(_rng(rng), init_std, (self.num_embeddings, self.dim), dtype)}
        self.grads = {"weight": np.zeros_like(self.params["weight"])}
        self._ids = None

    def forward(self, ids) -> np.ndarray:
        ids = as_int_array(ids, "ids")
        if ids.size and (ids.min() < 0 or ids.max() >= self.num_embeddings):
            raise ValueError(f"ids must lie in [0, {self.num_embeddings}), got values in "
                             f"[{int(ids.min())}, {int(ids.max())}]")
        self._ids = ids = ids.copy()  # a caller reusing its array must not redirect the gradient
        return self.params["weight"][ids]

    def backward(self, dy) -> None:
        _need_forward(self._ids, "Embedding")
        dy = _check_dy(dy, self._ids.shape + (self.dim,), "Embedding")
        self.grads["weight"] = scatter_add_rows(self._ids, dy.astype(self.params["weight"].dtype, copy=False),
                                                 self.num_embeddings)
        return None


# --------------------------------------------------------------------------- cross-entropy

def _cross_entropy_numpy(logits: np.ndarray, safe: np.ndarray):
    """``(probs, log p of the target)`` per row (any leading shape; ``safe``: valid class indices)."""
    shifted = logits - logits.max(axis=-1, keepdims=True)
    e = np.exp(shifted)
    s = e.sum(axis=-1, keepdims=True)
    logp_t = np.take_along_axis(shifted, safe[..., None], axis=-1)[..., 0] - np.log(s[..., 0])
    return e / s, logp_t


def softmax_cross_entropy(logits, targets, *, ignore_index: int = -100, backend: str = "auto"):
    r"""Mean softmax cross-entropy over the targets that are not ``ignore_index``.

    .. math::

        \mathcal L = \frac{1}{N} \sum_{j:\, t_j \ne \text{ignore}}
        \Big(\log \sum_c e^{z_{jc}} - z_{j t_j}\Big)

    with :math:`N` the number of counted targets (:math:`\mathcal L = 0` when :math:`N = 0`).
    The log-sum-exp subtracts the row maximum first.

    Parameters
    ----------
    logits : ndarray ``(..., C)``, floating
    targets : integer ndarray ``logits.shape[:-1]``
        Class indices in ``[0, C)`` or ``ignore_index``.
    backend : {"auto", "numpy", "numba"}
        ``"numpy"``: the NumPy code (:func:`_cross_entropy_numpy`). ``"auto"``/``"numba"``: for
        float32/float64 logits, one pass per row with
        :func:`posenc_np.kernels.layers.cross_entropy_rows` (its exp within 0.6 ulp in float32, 2
        in float64); rows with a NaN or infinite logit by the NumPy code.

    Returns
    -------
    loss : float
    cache : dict
        For :func:`softmax_cross_entropy_backward`.
    """
    logits = np.asarray(logits)
    if logits.dtype.kind != "f" or logits.ndim < 1:
        raise TypeError(f"logits must be a floating array (..., C), got dtype {logits.dtype} shape {logits.shape}")
    targets = as_int_array(targets, "targets")
    if targets.shape != logits.shape[:-1]:
        raise ValueError(f"targets must have shape {logits.shape[:-1]} (logits without the class axis), "
                         f"got {targets.shape}")
    num_classes = logits.shape[-1]
    keep = targets != ignore_index
    bad = keep & ((targets < 0) | (targets >= num_classes))
    if bad.any():
        raise ValueError(f"targets must lie in [0, {num_classes}) or equal ignore_index={ignore_index}, "
                         f"got {int(targets[bad].reshape(-1)[0])}")
    backend = check_choice(backend, "backend", LAYER_BACKENDS)
    safe = np.where(keep, targets, 0)
    if backend != "numpy" and kernel_dtype(logits) and logits.size:
        rows = np.ascontiguousarray(logits).reshape(-1, num_classes)
        flat_t = safe.reshape(-1).astype(np.int64, copy=False)
        probs, logp_t, bad = _kernels().cross_entropy_rows(rows, flat_t, check=False)
        if bad.any():  # NaN or infinite logits: the NumPy code's values for those rows
            idx = np.flatnonzero(bad)
            probs[idx], logp_t[idx] = _cross_entropy_numpy(rows[idx], flat_t[idx])
        probs, logp_t = probs.reshape(logits.shape), logp_t.reshape(safe.shape)
    else:
        probs, logp_t = _cross_entropy_numpy(logits, safe)
    count = int(keep.sum())
    loss = -float(np.sum(logp_t, where=keep, dtype=np.float64)) / max(count, 1)
    cache = {"probs": probs, "targets": safe, "keep": keep, "count": count}
    return loss, cache


def softmax_cross_entropy_backward(cache, dloss: float = 1.0, *, backend: str = "auto") -> np.ndarray:
    r""":math:`\partial\mathcal L/\partial z_{jc} = (p_{jc} - [c = t_j])\,[t_j \ne \text{ignore}]/N`,
    times ``dloss``. ``backend``: ``"auto"``/``"numba"`` compute it in one pass per row
    (:func:`posenc_np.kernels.layers.cross_entropy_backward`, the same operations) for C-contiguous
    float32/float64 probabilities; ``"numpy"`` with the NumPy code."""
    ok = isinstance(cache, dict) and set(cache) == {"probs", "targets", "keep", "count"}
    if ok:
        probs, targets, keep = cache["probs"], cache["targets"], cache["keep"]
        ok = (all(isinstance(a, np.ndarray) for a in (probs, targets, keep)) and probs.ndim >= 1
              and targets.shape == keep.shape == probs.shape[:-1] and isinstance(cache["count"], int))
    if not ok:
        raise TypeError("cache must be the dict returned by softmax_cross_entropy")
    dloss = check_real(dloss, "dloss")
    backend = check_choice(backend, "backend", LAYER_BACKENDS)
    probs, targets, keep, count = cache["probs"], cache["targets"], cache["keep"], cache["count"]
    weights = (keep * (dloss / max(count, 1))).astype(probs.dtype)
    if backend != "numpy" and kernel_dtype(probs) and probs.size and probs.flags.c_contiguous:
        width = probs.shape[-1]
        d = _kernels().cross_entropy_backward(probs.reshape(-1, width), targets.reshape(-1).astype(np.int64, copy=False),
                                              weights.reshape(-1), check=False)
        return d.reshape(probs.shape)
    d = probs.copy()
    np.put_along_axis(d, targets[..., None], np.take_along_axis(d, targets[..., None], axis=-1) - 1, axis=-1)
    d *= weights[..., None]
    return d
