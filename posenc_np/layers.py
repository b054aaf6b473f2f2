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

Each formula is a plain NumPy function (``layer_norm``, ``gelu_with_slope``, ``cross_entropy_rows``,
...) that its layer calls; :mod:`posenc_np.fused` computes the same functions with fused Numba
kernels, for the model and its training.

Parameters are created in the requested ``dtype`` (float32 for training, float64 for
gradient checks); initialisation draws from a ``numpy.random.Generator`` (or a seed) passed
in, never from NumPy's global state.

What a forward keeps for its backward: integer ids (:class:`Embedding`) are copied, so a
caller may reuse its array; float activations are kept by reference, as in every autodiff
framework (:class:`Linear` keeps ``x``): do not modify an input in place between a layer's
forward and its backward.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from ._checks import (as_float_array, as_int_array, check_alloc, check_choice, check_float_dtype, check_int, check_real,
                      require)
from ._util import normal_init, scatter_add_rows

__all__ = [
    "GELU",
    "Embedding",
    "LayerNorm",
    "Linear",
    "check_cross_entropy",
    "cross_entropy_loss",
    "cross_entropy_rows",
    "gelu",
    "gelu_backward",
    "gelu_with_slope",
    "layer_norm",
    "layer_norm_backward",
    "softmax_cross_entropy",
    "softmax_cross_entropy_backward",
]

GELU_APPROXIMATIONS = ("tanh", "none")


def _rng(rng) -> np.random.Generator:
    """A Generator from a Generator, an int seed or None (fresh entropy)."""
    return rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)


# The checks that run on every forward and backward of a layer (about a hundred a training step)
# test first and format their message only when they fail: a ``require(ok, f"...")`` formats it
# on every call, which cost ~4 % of a step.

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

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.layers import Linear
    >>> lin = Linear(2, 3, rng=0, dtype=np.float64)
    >>> lin.params["weight"][...] = [[1.0, 0.0, 2.0], [0.0, 1.0, 3.0]]
    >>> lin.forward(np.array([[1.0, 2.0]])).tolist()                 # x W + b, b = 0 at init
    [[1.0, 2.0, 8.0]]
    >>> lin.backward(np.ones((1, 3))).tolist(), lin.grads["weight"].tolist()   # G W^T and X^T G
    ([[3.0, 4.0]], [[1.0, 1.0, 1.0], [2.0, 2.0, 2.0]])
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

    def forward(self, x: ArrayLike) -> np.ndarray:
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

    def backward(self, dy: ArrayLike) -> np.ndarray:
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

def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray,
               eps: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""LayerNorm over the last axis: ``(y, xhat, rstd)``. Core of :class:`LayerNorm`; arguments are not checked.

    :math:`\hat x = (x - \mu)\,r`, :math:`r = (\sigma^2 + \epsilon)^{-1/2}` (biased variance),
    :math:`y = \gamma \odot \hat x + \beta`; ``x`` is ``(..., d)``, ``gamma`` and ``beta`` ``(d,)``,
    ``rstd`` is :math:`r` of shape ``(..., 1)``.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.layers import layer_norm
    >>> y, xhat, rstd = layer_norm(np.array([[1.0, 3.0]]), np.array([2.0, 2.0]), np.array([0.5, 0.5]), 0.0)
    >>> xhat.tolist(), y.tolist(), rstd.tolist()     # mean 2, variance 1: r = 1; y = 2 xhat + 0.5
    ([[-1.0, 1.0]], [[-1.5, 2.5]], [[1.0]])
    """
    xc = x - _mean_last(x)
    rstd = _mean_last(xc * xc)
    rstd += eps
    np.sqrt(rstd, out=rstd)
    np.reciprocal(rstd, out=rstd)  # r = (var + eps)^(-1/2)
    xhat = xc
    xhat *= rstd  # in place: xc is not needed any more
    y = xhat * gamma
    y += beta
    return y, xhat, rstd


def layer_norm_backward(dy: np.ndarray, xhat: np.ndarray, rstd: np.ndarray,
                        gamma: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""Backward of :func:`layer_norm`: ``(dx, dgamma, dbeta)``. Arguments are not checked.

    With :math:`g = \gamma \odot \partial L/\partial y` and means over the last axis:
    :math:`\partial L/\partial x = r\,(g - \overline{g} - \hat x\,\overline{g \odot \hat x})`,
    :math:`\partial L/\partial\gamma = \sum \partial L/\partial y \odot \hat x`,
    :math:`\partial L/\partial\beta = \sum \partial L/\partial y`.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.layers import layer_norm, layer_norm_backward
    >>> gamma = np.ones(3)
    >>> y, xhat, rstd = layer_norm(np.array([[1.0, 2.0, 3.0]]), gamma, np.zeros(3), 0.0)
    >>> dx, dgamma, dbeta = layer_norm_backward(np.array([[1.0, 0.0, 0.0]]), xhat, rstd, gamma)
    >>> dx.round(6).tolist(), dbeta.tolist()   # r = sqrt(3/2), xhat = r (-1, 0, 1): dx = r (1/6, -1/3, 1/6)
    ([[0.204124, -0.408248, 0.204124]], [1.0, 0.0, 0.0])
    """
    dy_xhat = dy * xhat
    # g = gamma * dy;  dx = r (g - mean(g) - xhat mean(g xhat)), with g xhat = gamma * dy_xhat
    g = dy * gamma
    dx = xhat * _mean_last(dy_xhat * gamma)
    dx += _mean_last(g)
    np.subtract(g, dx, out=dx)
    dx *= rstd
    return dx, _sum_rows(dy_xhat), _sum_rows(dy)


class LayerNorm:
    r"""Layer normalisation over the last axis (Ba et al. 2016): :func:`layer_norm`, :func:`layer_norm_backward`.

    Forward: :math:`\hat x = (x - \mu)\,r`, :math:`r = (\sigma^2 + \epsilon)^{-1/2}` with the
    biased variance, :math:`y = \gamma \odot \hat x + \beta`.

    Backward, with :math:`g = \gamma \odot \partial L/\partial y` and means over the last axis:
    :math:`\partial L/\partial x = r\,\big(g - \overline{g} - \hat x\,\overline{g \odot \hat x}\big)`,
    :math:`\partial L/\partial\gamma = \sum \partial L/\partial y \odot \hat x`,
    :math:`\partial L/\partial\beta = \sum \partial L/\partial y`.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.layers import LayerNorm
    >>> ln = LayerNorm(2, dtype=np.float64)
    >>> ln.forward(np.array([[1.0, 3.0]])).round(4).tolist()     # (x - 2) / sqrt(1 + 1e-5), gamma = 1, beta = 0
    [[-1.0, 1.0]]
    >>> dx = ln.backward(np.array([[1.0, 0.0]]))
    >>> ln.grads["gamma"].round(6).tolist(), ln.grads["beta"].tolist()   # sum dy xhat, sum dy
    ([-0.999995, 0.0], [1.0, 0.0])
    """

    #: The formula, forward and backward (:class:`posenc_np.fused.FusedLayerNorm` computes it with a fused kernel).
    layer_norm, layer_norm_backward = staticmethod(layer_norm), staticmethod(layer_norm_backward)

    def __init__(self, dim: int, *, eps: float = 1e-5, dtype=np.float32):
        self.dim = check_int(dim, "dim", minimum=1)
        self.eps = check_real(eps, "eps", positive=True)
        dtype = check_float_dtype(dtype)
        check_alloc((self.dim,), dtype, "LayerNorm gain (dim,)")
        self.params = {"gamma": np.ones(self.dim, dtype=dtype), "beta": np.zeros(self.dim, dtype=dtype)}
        self.grads = {k: np.zeros_like(v) for k, v in self.params.items()}
        self._cache = None

    def forward(self, x: ArrayLike) -> np.ndarray:
        x = np.asarray(x)
        if x.shape[-1:] != (self.dim,):
            raise ValueError(f"LayerNorm.forward: x must end with {self.dim} features, got shape {x.shape}")
        y, *self._cache = self.layer_norm(x, self.params["gamma"], self.params["beta"], self.eps)
        return y

    def backward(self, dy: ArrayLike) -> np.ndarray:
        _need_forward(self._cache, "LayerNorm")
        xhat, rstd = self._cache
        dy = _check_dy(dy, xhat.shape, "LayerNorm")
        dx, self.grads["gamma"], self.grads["beta"] = self.layer_norm_backward(dy, xhat, rstd, self.params["gamma"])
        return dx


# --------------------------------------------------------------------------- GELU

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_C = 0.044715


#: The gate is evaluated on ``x`` clipped to ``[-GELU_CLIP, GELU_CLIP]``: beyond it both
#: approximations have saturated exactly (``Phi = 0`` or ``1``, ``Phi' = 0`` in float64 and
#: float32), so the clip changes no finite result, and ``x**2``, ``x**3`` cannot overflow to
#: give ``0 * inf = NaN`` (``gelu(-inf) = 0``, ``gelu(inf) = inf``, derivatives 0 and 1).
GELU_CLIP = 40.0


def _gelu_gate(x: np.ndarray, approximate: str):
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


def gelu_with_slope(x: np.ndarray, approximate: str) -> tuple[np.ndarray, np.ndarray]:
    r"""GELU and its derivative, ``(y, dy/dx)`` with :math:`y = x\,\Phi(x)`, :math:`dy/dx = \Phi(x) + x\,\Phi'(x)`.

    Core of :func:`gelu`, :func:`gelu_backward` and :class:`GELU`; arguments are not checked. ``x``
    is a float array; see :func:`_gelu_gate` for ``approximate`` and :data:`GELU_CLIP` for +-inf
    and huge inputs.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.layers import gelu_with_slope
    >>> y, dydx = gelu_with_slope(np.array([0.0, 1.0]), "none")
    >>> y.round(6).tolist(), dydx.round(6).tolist()   # Phi(1) = 0.841345; Phi(1) + phi(1) = 0.841345 + 0.241971
    ([0.0, 0.841345], [0.5, 1.083315])
    """
    if np.ndim(x) == 0:  # 0-d results are NumPy scalars, which take no out=: compute on a (1,) view
        return tuple(a.reshape(()) for a in gelu_with_slope(np.reshape(x, 1), approximate))
    xc = np.clip(x, -GELU_CLIP, GELU_CLIP)
    cdf, dcdf = _gelu_gate(xc, approximate)
    dcdf *= xc
    dcdf += cdf  # dy/dx = Phi(x) + x Phi'(x)
    y = np.maximum(x, -GELU_CLIP, out=xc)  # y = x Phi(x), with Phi = 0 exactly below -GELU_CLIP
    y *= cdf
    return y, dcdf


def gelu(x: ArrayLike, *, approximate: str = "tanh") -> np.ndarray:
    r"""GELU :math:`y = x\,\Phi(x)` (Hendrycks & Gimpel 2016); see :func:`_gelu_gate` for ``approximate``.

    Integer input is converted to float64; ``gelu(-inf) = 0``, ``gelu(inf) = inf``.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.layers import gelu
    >>> gelu(np.array([0.0, 1.0, np.inf])).round(6).tolist()     # tanh form: (1 + tanh(0.833563)) / 2 at 1
    [0.0, 0.841192, inf]
    >>> gelu(np.array([1.0]), approximate="none").round(6).tolist()   # exact: Phi(1)
    [0.841345]
    """
    approximate = check_choice(approximate, "approximate", GELU_APPROXIMATIONS)
    return gelu_with_slope(as_float_array(x, "x"), approximate)[0]


def gelu_backward(dy: ArrayLike, x: ArrayLike, *, approximate: str = "tanh") -> np.ndarray:
    r""":math:`\partial L/\partial x = \partial L/\partial y \odot (\Phi(x) + x\,\Phi'(x))`.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.layers import gelu_backward
    >>> gelu_backward(np.array([1.0, 2.0]), np.array([0.0, 1.0])).round(6).tolist()   # dy (Phi + x Phi'): 1/2 at 0
    [0.5, 2.165928]
    """
    approximate = check_choice(approximate, "approximate", GELU_APPROXIMATIONS)
    x = as_float_array(x, "x")
    dy = as_float_array(dy, "dy")
    require(dy.shape == x.shape, f"dy must have x's shape {x.shape}, got {dy.shape}")
    return dy * gelu_with_slope(x, approximate)[1]


class GELU:
    """GELU as a layer (no parameters): :func:`gelu_with_slope`. ``approximate="tanh"`` (default,
    GPT-2 / torch's ``approximate="tanh"``) or ``"none"`` (exact, ``scipy.special.erf``).

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.layers import GELU
    >>> act = GELU()
    >>> act.forward(np.array([0.0, 1.0])).round(6).tolist()
    [0.0, 0.841192]
    >>> act.backward(np.array([1.0, 1.0])).round(6).tolist()    # Phi(x) + x Phi'(x)
    [0.5, 1.082964]
    """

    #: The formula (:class:`posenc_np.fused.FusedGELU` computes ``"tanh"`` with a fused kernel).
    gelu_with_slope = staticmethod(gelu_with_slope)

    def __init__(self, *, approximate: str = "tanh"):
        self.approximate = check_choice(approximate, "approximate", GELU_APPROXIMATIONS)
        self.params: dict = {}
        self.grads: dict = {}
        self._dydx = None

    def forward(self, x: ArrayLike) -> np.ndarray:
        # keep only dy/dx: the backward is one multiply
        y, self._dydx = self.gelu_with_slope(as_float_array(x, "x"), self.approximate)
        return y

    def backward(self, dy: ArrayLike) -> np.ndarray:
        _need_forward(self._dydx, "GELU")
        return _check_dy(dy, self._dydx.shape, "GELU") * self._dydx


# --------------------------------------------------------------------------- Embedding

class Embedding:
    r"""Token embedding :math:`y = W[\text{ids}]`, ``W`` is ``(num_embeddings, dim)``.

    Backward: :math:`\partial L/\partial W[r] = \sum_{j:\,\text{ids}_j = r} \partial L/\partial y_j`
    (a scatter-add; repeated ids accumulate). Integer ids have no gradient, so
    :meth:`backward` returns ``None``. Ids outside ``[0, num_embeddings)`` raise ``ValueError``.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.layers import Embedding
    >>> emb = Embedding(4, 2, rng=0, dtype=np.float64)
    >>> emb.forward(np.array([[1, 1, 3]])).shape
    (1, 3, 2)
    >>> emb.backward(np.ones((1, 3, 2)))                # returns None: ids have no gradient
    >>> emb.grads["weight"].tolist()                    # the repeated id 1 accumulates
    [[0.0, 0.0], [2.0, 2.0], [0.0, 0.0], [1.0, 1.0]]
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

    def forward(self, ids: ArrayLike) -> np.ndarray:
        ids = as_int_array(ids, "ids")
        lo, hi = (int(ids.min()), int(ids.max())) if ids.size else (0, -1)
        if lo < 0 or hi >= self.num_embeddings:
            raise ValueError(f"ids must lie in [0, {self.num_embeddings}), got values in [{lo}, {hi}]")
        self._ids = ids = ids.copy()  # a caller reusing its array must not redirect the gradient
        return self.params["weight"][ids]

    def backward(self, dy: ArrayLike) -> None:
        _need_forward(self._ids, "Embedding")
        dy = _check_dy(dy, self._ids.shape + (self.dim,), "Embedding")
        self.grads["weight"] = scatter_add_rows(self._ids, dy.astype(self.params["weight"].dtype, copy=False),
                                                 self.num_embeddings)
        return None


# --------------------------------------------------------------------------- cross-entropy

def cross_entropy_rows(logits: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r"""Softmax and target log-probability per row: ``(probs, logp_t)``. Arguments are not checked.

    :math:`p_{jc} = e^{z_{jc} - m_j} / s_j`, :math:`\log p_{j t_j} = z_{j t_j} - m_j - \log s_j` with
    :math:`m_j = \max_c z_{jc}`, :math:`s_j = \sum_c e^{z_{jc} - m_j}`; ``logits`` is ``(..., C)``,
    ``targets`` valid class indices of shape ``logits.shape[:-1]``.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.layers import cross_entropy_rows
    >>> probs, logp_t = cross_entropy_rows(np.array([[0.0, 0.0, np.log(2.0)]]), np.array([2]))
    >>> probs.round(6).tolist(), logp_t.round(6).tolist()    # (1, 1, 2) / 4 and log(1/2)
    ([[0.25, 0.25, 0.5]], [-0.693147])
    """
    shifted = logits - logits.max(axis=-1, keepdims=True)
    e = np.exp(shifted)
    s = e.sum(axis=-1, keepdims=True)
    logp_t = np.take_along_axis(shifted, targets[..., None], axis=-1)[..., 0] - np.log(s[..., 0])
    return e / s, logp_t


def cross_entropy_loss(probs: np.ndarray, logp_t: np.ndarray, targets: np.ndarray,
                       keep: np.ndarray) -> tuple[float, dict]:
    """The mean of ``-logp_t`` over the rows ``keep`` (in float64; 0 without a kept row) and the cache of
    :func:`softmax_cross_entropy_backward`: ``(loss, cache)``. Arguments are not checked.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.layers import cross_entropy_loss, cross_entropy_rows
    >>> targets, keep = np.array([0, 1]), np.array([True, False])
    >>> probs, logp_t = cross_entropy_rows(np.log([[0.5, 0.5], [0.25, 0.75]]), targets)   # logp_t = log(1/2), log(3/4)
    >>> loss, cache = cross_entropy_loss(probs, logp_t, targets, keep)
    >>> round(loss, 6), cache["count"]      # -log(1/2) over the one kept row
    (0.693147, 1)
    """
    count = int(keep.sum())
    loss = -float(np.sum(logp_t, where=keep, dtype=np.float64)) / max(count, 1)
    return loss, {"probs": probs, "targets": targets, "keep": keep, "count": count}


def check_cross_entropy(logits: ArrayLike, targets: ArrayLike,
                        ignore_index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The arguments of :func:`softmax_cross_entropy` (and of :func:`posenc_np.fused.softmax_cross_entropy`):
    ``(logits, targets, keep)`` with ``keep = targets != ignore_index`` and the ignored targets set to 0.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.layers import check_cross_entropy
    >>> logits, targets, keep = check_cross_entropy(np.zeros((3, 4)), [1, -100, 3], -100)
    >>> targets.tolist(), keep.tolist()     # the ignored target set to 0
    ([1, 0, 3], [True, False, True])
    >>> check_cross_entropy(np.zeros((3, 4)), [1, 4, 3], -100)
    Traceback (most recent call last):
        ...
    ValueError: targets must lie in [0, 4) or equal ignore_index=-100, got 4
    """
    logits = np.asarray(logits)
    if logits.dtype.kind != "f" or logits.ndim < 1:
        raise TypeError(f"logits must be a floating array (..., C), got dtype {logits.dtype} shape {logits.shape}")
    targets = as_int_array(targets, "targets")
    if targets.shape != logits.shape[:-1]:
        raise ValueError(f"targets must have shape {logits.shape[:-1]} (logits without the class axis), "
                         f"got {targets.shape}")
    keep = targets != ignore_index
    bad = targets[keep & ((targets < 0) | (targets >= logits.shape[-1]))]
    if bad.size:
        raise ValueError(f"targets must lie in [0, {logits.shape[-1]}) or equal ignore_index={ignore_index}, "
                         f"got {int(bad[0])}")
    return logits, np.where(keep, targets, 0), keep


def softmax_cross_entropy(logits: ArrayLike, targets: ArrayLike, *, ignore_index: int = -100) -> tuple[float, dict]:
    r"""Mean softmax cross-entropy over the targets that are not ``ignore_index``.

    .. math::

        \mathcal L = \frac{1}{N} \sum_{j:\, t_j \ne \text{ignore}}
        \Big(\log \sum_c e^{z_{jc}} - z_{j t_j}\Big)

    with :math:`N` the number of counted targets (:math:`\mathcal L = 0` when :math:`N = 0`).
    The log-sum-exp subtracts the row maximum first (:func:`cross_entropy_rows`).

    Parameters
    ----------
    logits : ndarray ``(..., C)``, floating
    targets : integer ndarray ``logits.shape[:-1]``
        Class indices in ``[0, C)`` or ``ignore_index``.

    Returns
    -------
    loss : float
    cache : dict
        For :func:`softmax_cross_entropy_backward`.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.layers import softmax_cross_entropy
    >>> loss, cache = softmax_cross_entropy(np.zeros((2, 3, 4)), np.array([[0, 1, 2], [3, -100, -100]]))
    >>> round(loss, 6), cache["count"]      # uniform over C = 4 classes: log 4, over the 4 counted targets
    (1.386294, 4)
    """
    logits, targets, keep = check_cross_entropy(logits, targets, ignore_index)
    return cross_entropy_loss(*cross_entropy_rows(logits, targets), targets, keep)


def softmax_cross_entropy_backward(cache: dict, dloss: float = 1.0) -> np.ndarray:
    r""":math:`\partial\mathcal L/\partial z_{jc} = (p_{jc} - [c = t_j])\,[t_j \ne \text{ignore}]/N`,
    times ``dloss``.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.layers import softmax_cross_entropy, softmax_cross_entropy_backward
    >>> loss, cache = softmax_cross_entropy(np.zeros((1, 4)), np.array([2]))
    >>> softmax_cross_entropy_backward(cache).tolist()      # (p - onehot(t)) / N with p = 1/4, N = 1
    [[0.25, 0.25, -0.75, 0.25]]
    """
    ok = isinstance(cache, dict) and set(cache) == {"probs", "targets", "keep", "count"}
    if ok:
        probs, targets, keep = cache["probs"], cache["targets"], cache["keep"]
        ok = (all(isinstance(a, np.ndarray) for a in (probs, targets, keep)) and probs.ndim >= 1
              and targets.shape == keep.shape == probs.shape[:-1] and isinstance(cache["count"], int))
    require(ok, "cache must be the dict returned by softmax_cross_entropy", TypeError)
    dloss = check_real(dloss, "dloss")
    probs, targets, keep, count = cache["probs"], cache["targets"], cache["keep"], cache["count"]
    weights = (keep * (dloss / max(count, 1))).astype(probs.dtype)[..., None]
    d = probs * weights
    t = targets[..., None]
    np.put_along_axis(d, t, (np.take_along_axis(probs, t, axis=-1) - 1) * weights, axis=-1)
    return d
