"""Fused kernels for the model's elementwise work: LayerNorm, tanh-GELU, the attention softmax,
the cross-entropy, the AdamW update and the sums of squares of gradient clipping.

Each replaces a dozen NumPy calls (and their temporaries) of a reference by one pass over its
arrays. The references stay the definition and are what the tests compare against:
:func:`posenc_np.layers.layer_norm` and its backward, :func:`posenc_np.layers.gelu_with_slope`
(``"tanh"``), :func:`posenc_np.attention.masked_softmax` and :func:`~posenc_np.attention.softmax_backward`,
:func:`posenc_np.layers.cross_entropy_rows`, :func:`posenc_np.optim.adamw_update` and
:func:`posenc_np.optim.sum_of_squares`. The model and its training reach them through
:mod:`posenc_np.fused` (the kernel whenever the arrays share the dtype float32 or float64, the
reference otherwise). Each entry point checks its arrays' dtypes, shapes and (where it indexes
with them) class indices, unless called with ``check=False`` by a caller that has checked them
already (:mod:`posenc_np.fused` does: the checks cost 2-4 % of a training step).

At a training step's sizes ((512, 64) to (512, 256) float32) each NumPy call costs a few
microseconds of dispatch and a pass over memory, so the references spend most of their time
between calls. Measured on the 2-core Xeon (float32, median of 101 interleaved calls, reference
-> kernel): LayerNorm forward (512, 64) 72 -> 29 us, (512, 256) 463 -> 181 us; backward
102 -> 50 us and 658 -> 180 us; tanh-GELU with its derivative 104 -> 52 us and 835 -> 316 us;
one AdamW update of a (64, 256) parameter 49 -> 15 us. The kernels win from one row
((1, 64): 11-15 us -> 2.5-3.5 us), so ``auto`` has no size threshold.

The kernels run on the calling thread (``parallel=False``): at these sizes a parallel launch
costs more than it saves, and the column sums of the LayerNorm backward would need a
reduction across threads.

Numerics
--------
``layer_norm_forward`` / ``layer_norm_backward``
    Row statistics and every intermediate in float64, whatever the input dtype (two passes,
    mean then centred variance, as the reference); outputs rounded once to the input dtype.
    The float32 reference rounds each of its ~10 steps to float32, so the two differ by a few
    float32 ulps; both are compared with the float64 formula in the tests.
``gelu_tanh``
    :math:`\\Phi(x) \\approx \\tfrac12(1 + \\tanh u)` is evaluated as the logistic function
    :math:`\\sigma(2u) = 1/(1 + e^{-2u})` (the same function), and
    :math:`1 - \\tanh^2 u = 4e/(1 + e)^2` with :math:`e = e^{-2|u|} \\in (0, 1]`: no
    cancellation for large negative :math:`u`, where ``1 + tanh(u)`` loses every digit.
    :math:`e^x` is :func:`posenc_np.kernels._numba.exp` (vectorised; measured max error 0.91
    ulp in float32, 2.0 ulp in float64), in the input dtype. Clipping at
    :data:`posenc_np.layers.GELU_CLIP` as the reference (``gelu(-inf) = 0``, ``gelu(inf) =
    inf``, NaN propagates).
``softmax_rows`` / ``cross_entropy_rows``
    Per row: the maximum, :math:`e^{x - m}` with :func:`~posenc_np.kernels._numba.exp` and its sum, a division (and the
    target's log-probability), in the input dtype. Rows the reference gives special values
    (a kept ``+inf`` in the softmax; a NaN or infinite logit in the cross-entropy) are flagged
    for the caller to compute with the reference. The softmax backward is the reference's
    operations per row, summed in another order.
``sum_squares``
    float64 accumulation, summed in another order than ``np.dot``: within a few ulps.
``adamw_update``
    The reference's operations in its order and dtype (scalars rounded to the parameter dtype
    first, as NumPy does with Python floats), compiled without fast-math: bit-identical to
    :func:`posenc_np.optim.adamw_update`.
"""

from __future__ import annotations

import math

import numpy as np

from .._backend import KERNEL_DTYPES
from ._numba import exp, njit_kernel

__all__ = ["adamw_update", "cross_entropy_rows", "gelu_tanh", "layer_norm_backward", "layer_norm_forward",
           "softmax_rows", "softmax_rows_backward", "sum_squares"]

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_C = 0.044715

_serial = njit_kernel(parallel=False)


# --------------------------------------------------------------------------- LayerNorm

@_serial
def _layer_norm_forward(x, gamma, beta, eps, y, xhat, rstd):
    n, d = x.shape
    for i in range(n):
        total = 0.0
        for j in range(d):
            total += np.float64(x[i, j])
        mean = total / d
        squares = 0.0
        for j in range(d):
            c = np.float64(x[i, j]) - mean
            squares += c * c
        r = 1.0 / math.sqrt(squares / d + eps)
        rstd[i] = r
        for j in range(d):
            h = (np.float64(x[i, j]) - mean) * r
            xhat[i, j] = h
            y[i, j] = h * np.float64(gamma[j]) + np.float64(beta[j])


@_serial
def _layer_norm_backward(dy, xhat, rstd, gamma, dx, dgamma, dbeta):
    n, d = dy.shape
    sum_g = np.zeros(d)
    sum_b = np.zeros(d)
    for i in range(n):
        mean_g = 0.0
        mean_gx = 0.0
        for j in range(d):
            g = np.float64(dy[i, j]) * np.float64(gamma[j])
            h = np.float64(xhat[i, j])
            mean_g += g
            mean_gx += g * h
            sum_g[j] += np.float64(dy[i, j]) * h
            sum_b[j] += np.float64(dy[i, j])
        mean_g /= d
        mean_gx /= d
        r = rstd[i]
        for j in range(d):
            g = np.float64(dy[i, j]) * np.float64(gamma[j])
            dx[i, j] = r * (g - mean_g - np.float64(xhat[i, j]) * mean_gx)
    for j in range(d):
        dgamma[j] = sum_g[j]
        dbeta[j] = sum_b[j]


def _rows(a: np.ndarray, d: int) -> np.ndarray:
    return np.ascontiguousarray(a).reshape(-1, d)


def _check(shape=None, **arrays) -> None:
    """The arrays of one call: ndarrays of one dtype, float32 or float64 (``TypeError`` naming
    the first that is not), of ``shape`` when given (``ValueError``). The public classes that
    select these kernels check their own arguments; this keeps a direct call from reaching
    Numba's typing errors or indexing out of bounds."""
    first = None
    for name, a in arrays.items():
        if not isinstance(a, np.ndarray) or a.dtype not in KERNEL_DTYPES:
            raise TypeError(f"{name} must be a float32 or float64 ndarray, got {type(a).__name__} "
                            f"{getattr(a, 'dtype', '')}")
        if first is None:
            first = name, a.dtype
        elif a.dtype != first[1]:
            raise TypeError(f"{name} must have {first[0]}'s dtype {first[1]}, got {a.dtype}")
        if shape is not None and a.shape != shape:
            raise ValueError(f"{name} must have shape {shape}, got {a.shape}")


def _check_targets(targets, rows: int, classes: int) -> np.ndarray:
    """Class indices: int64 ``(rows,)`` in ``[0, classes)`` (the kernels index with them)."""
    t = np.asarray(targets)
    if t.dtype.kind not in "iu" or t.shape != (rows,):
        raise TypeError(f"targets must be an integer array of shape ({rows},), got {t.dtype} {t.shape}")
    if rows and (t.min() < 0 or t.max() >= classes):
        raise ValueError(f"targets must lie in [0, {classes}), got values in [{t.min()}, {t.max()}]")
    return t.astype(np.int64, copy=False)


def layer_norm_forward(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float, *,
                       check: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""LayerNorm over the last axis in one pass per row: ``(y, xhat, rstd)``.

    :math:`\hat x = (x - \mu)\,r`, :math:`r = (\sigma^2 + \epsilon)^{-1/2}` (biased variance),
    :math:`y = \gamma \odot \hat x + \beta` (Ba et al. 2016), as
    :meth:`posenc_np.layers.LayerNorm.forward`.

    Parameters
    ----------
    x : ndarray, float32 or float64, shape ``(..., d)``
    gamma, beta : ndarray, shape ``(d,)``, x's dtype
    eps : float
    check : bool
        Check the arguments (``False``: the caller has; see the module docstring).

    Returns
    -------
    y, xhat : ndarray
        x's shape and dtype.
    rstd : ndarray, float64, shape ``x.shape[:-1]``
        :math:`r` per row (kept unrounded for the backward).

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.kernels import layers as kl
    >>> x, gamma, beta = np.array([[1.0, 3.0]]), np.array([2.0, 2.0]), np.array([0.5, 0.5])
    >>> y, xhat, rstd = kl.layer_norm_forward(x, gamma, beta, 0.0)   # mean 2, variance 1: r = 1
    >>> xhat.tolist(), y.tolist(), rstd.tolist()                     # y = 2 xhat + 0.5
    ([[-1.0, 1.0]], [[-1.5, 2.5]], [1.0])
    """
    d = x.shape[-1]
    if check:
        _check(x=x, gamma=gamma)
        _check((d,), gamma=gamma, beta=beta)
    x2 = _rows(x, d)
    y, xhat = np.empty_like(x2), np.empty_like(x2)
    rstd = np.empty(x2.shape[0])
    _layer_norm_forward(x2, gamma, beta, float(eps), y, xhat, rstd)
    return y.reshape(x.shape), xhat.reshape(x.shape), rstd.reshape(x.shape[:-1])


def layer_norm_backward(dy: np.ndarray, xhat: np.ndarray, rstd: np.ndarray, gamma: np.ndarray, *,
                        check: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""Backward of :func:`layer_norm_forward`: ``(dx, dgamma, dbeta)``.

    With :math:`g = \gamma \odot \partial L/\partial y` and means over the last axis:
    :math:`\partial L/\partial x = r\,(g - \overline{g} - \hat x\,\overline{g \odot \hat x})`,
    :math:`\partial L/\partial \gamma = \sum_{\text{rows}} \partial L/\partial y \odot \hat x`,
    :math:`\partial L/\partial \beta = \sum_{\text{rows}} \partial L/\partial y`.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.kernels import layers as kl
    >>> gamma, beta = np.ones(3), np.zeros(3)
    >>> y, xhat, rstd = kl.layer_norm_forward(np.array([[1.0, 2.0, 3.0]]), gamma, beta, 0.0)
    >>> dx, dgamma, dbeta = kl.layer_norm_backward(np.array([[1.0, 0.0, 0.0]]), xhat, rstd, gamma)
    >>> dx.round(6).tolist()        # r = sqrt(3/2), xhat = r (-1, 0, 1): dx = r (1/6, -1/3, 1/6)
    [[0.204124, -0.408248, 0.204124]]
    """
    d = xhat.shape[-1]
    if check:
        _check(xhat.shape, dy=dy, xhat=xhat)
        _check((d,), gamma=gamma)
        _check(xhat=xhat, gamma=gamma)
        if not isinstance(rstd, np.ndarray) or rstd.shape != xhat.shape[:-1]:
            raise ValueError(f"rstd must be layer_norm_forward's (float64) rstd of shape {xhat.shape[:-1]}")
    dy2, xhat2 = _rows(dy, d), _rows(xhat, d)
    dx = np.empty_like(xhat2)
    dgamma, dbeta = np.empty(d, gamma.dtype), np.empty(d, gamma.dtype)
    _layer_norm_backward(dy2, xhat2, rstd.reshape(-1), gamma, dx, dgamma, dbeta)
    return dx.reshape(xhat.shape), dgamma, dbeta


# --------------------------------------------------------------------------- GELU (tanh)

@_serial
def _gelu_tanh(x, clip, y, dydx):
    ft = x.dtype.type
    one, half = ft(1), ft(0.5)
    c0, c1 = ft(_SQRT_2_OVER_PI), ft(_GELU_C)
    lo, hi = ft(-clip), ft(clip)
    for i in range(x.shape[0]):
        v = x[i]
        xc = lo if v < lo else (hi if v > hi else v)  # NaN stays NaN
        x2 = xc * xc
        u = c0 * xc * (one + c1 * x2)
        e = exp(ft(-2) * abs(u))  # in (0, 1]
        s = one / (one + e)  # sigma(2|u|)
        cdf = s if u >= 0 else e * s  # sigma(2u) = (1 + tanh u) / 2
        dcdf = half * c0 * (ft(4) * e * s * s) * (one + ft(3) * c1 * x2)  # 1 - tanh^2 u = 4e/(1+e)^2
        dydx[i] = cdf + xc * dcdf
        y[i] = (lo if v < lo else v) * cdf


def gelu_tanh(x: np.ndarray, clip: float, *, check: bool = True) -> tuple[np.ndarray, np.ndarray]:
    r"""tanh-GELU and its derivative in one pass: ``(y, dy/dx)``.

    :math:`y = x\,\Phi(x)`, :math:`\Phi(x) = \tfrac12(1 + \tanh u)`,
    :math:`u = \sqrt{2/\pi}\,(x + 0.044715x^3)` (Hendrycks & Gimpel 2016, GPT-2), and
    :math:`dy/dx = \Phi(x) + x\,\Phi'(x)`, with the gate evaluated on ``x`` clipped to
    ``[-clip, clip]`` (see :data:`posenc_np.layers.GELU_CLIP`). Evaluated through the logistic
    form (module docstring, "Numerics").

    Parameters
    ----------
    x : ndarray, float32 or float64
    clip : float
    check : bool
        Check the arguments (``False``: the caller has; see the module docstring).

    Returns
    -------
    y, dydx : ndarray
        x's shape and dtype.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.kernels import layers as kl
    >>> y, dydx = kl.gelu_tanh(np.array([0.0, 1.0, 50.0]), 40.0)
    >>> y.round(6).tolist()         # x Phi(x): 0 at 0, (1 + tanh(0.833563)) / 2 at 1, x beyond the clip
    [0.0, 0.841192, 50.0]
    >>> dydx.round(6).tolist()      # Phi(0) = 1/2; slope 1 where the gate has saturated
    [0.5, 1.082964, 1.0]
    """
    if check:
        _check(x=x)
    flat = np.ascontiguousarray(x).reshape(-1)
    y, dydx = np.empty_like(flat), np.empty_like(flat)
    _gelu_tanh(flat, float(clip), y, dydx)
    return y.reshape(x.shape), dydx.reshape(x.shape)


# --------------------------------------------------------------------------- masked softmax (attention)

@_serial
def _softmax_rows(x, keep, out, inf_rows):
    ft = x.dtype.type
    ninf, inf, zero = ft(-np.inf), ft(np.inf), ft(0)
    for i in range(x.shape[0]):
        xr, kr, yr = x[i], keep[i], out[i]  # 1-D rows: plain loops that vectorise
        m = ninf
        for j in range(xr.shape[0]):
            m = max(m, xr[j] if kr[j] else ninf)
        # A kept NaN needs no test: its exp makes the row's total NaN, and with it every entry
        # (the reference's row is all NaN too). A kept +inf is left to the caller (rare; any
        # code for it in these loops, even a call, cost a third of the time).
        inf_rows[i] = m == inf
        shift = m if m > ninf else zero  # the kept maximum, or 0 without a kept entry
        total = zero
        for j in range(xr.shape[0]):
            e = exp(xr[j] - shift)  # argument <= 0 (but with +inf: ignored)
            e = e if kr[j] else zero
            yr[j] = e
            total += e
        total = ft(1) if total == zero else total
        for j in range(xr.shape[0]):
            yr[j] = yr[j] / total


@_serial
def _softmax_rows_backward(dp, p, dx):
    rows, width = p.shape
    for i in range(rows):
        dot = p.dtype.type(0)
        for j in range(width):
            dot += dp[i, j] * p[i, j]
        for j in range(width):
            dx[i, j] = p[i, j] * (dp[i, j] - dot)


def softmax_rows(logits: np.ndarray, keep: np.ndarray | None, *,
                 check: bool = True) -> tuple[np.ndarray, np.ndarray]:
    r"""Masked softmax over the last axis, as :func:`posenc_np.attention.softmax` (``axis=-1``).

    :math:`p_j = e^{x_j - m} / \sum_{j' \in K} e^{x_{j'} - m}`, :math:`m = \max_{j \in K} x_j`,
    over the kept entries :math:`K` (``keep`` and not ``-inf``); a row without kept entries
    is 0 and a kept NaN makes its row NaN. Rows with a kept ``+inf`` are flagged, not
    computed: the caller gives them to the reference (``posenc_np.attention`` does; NaN at the
    infinities, 0 elsewhere). Three short loops per row (max, exp with :func:`~posenc_np.kernels._numba.exp` and sum,
    divide) instead of the reference's ~10 array passes.

    Parameters
    ----------
    logits : ndarray, float32 or float64, shape ``(..., k)``
    keep : ndarray of bool broadcastable to ``logits``, or None (keep all)
    check : bool
        Check the arguments (``False``: the caller has; see the module docstring).

    Returns
    -------
    probs : ndarray
        ``logits``' shape and dtype; the flagged rows hold no meaningful values.
    inf_rows : ndarray of bool, shape ``(logits.size // k,)``
        The rows (``logits`` flattened to ``(-1, k)``) with a kept ``+inf``.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.kernels import layers as kl
    >>> logits = np.array([[0.0, 0.0, np.log(2.0)], [np.inf, 0.0, 0.0]])
    >>> probs, inf_rows = kl.softmax_rows(logits, None)
    >>> probs[0].round(6).tolist(), inf_rows.tolist()   # e^0, e^0, e^log 2 over 4; row 1 is left to the caller
    ([0.25, 0.25, 0.5], [False, True])
    >>> kl.softmax_rows(logits[:1], np.array([True, True, False]))[0].round(6).tolist()   # the last entry masked
    [[0.5, 0.5, 0.0]]
    """
    if check:
        _check(logits=logits)
        if keep is not None and np.asarray(keep).dtype != np.bool_:
            raise TypeError(f"keep must be a boolean array or None, got {np.asarray(keep).dtype}")
    width = logits.shape[-1]
    x = _rows(logits, width)
    mask = np.broadcast_to(np.True_ if keep is None else keep, logits.shape).reshape(-1, width)
    out = np.empty_like(x)
    inf_rows = np.empty(x.shape[0], dtype=np.bool_)
    _softmax_rows(x, mask, out, inf_rows)
    return out.reshape(logits.shape), inf_rows


def softmax_rows_backward(dprobs: np.ndarray, probs: np.ndarray, *, check: bool = True) -> np.ndarray:
    r"""Backward of :func:`softmax_rows`: :math:`\partial L/\partial x = p \odot (g - \langle g, p\rangle)`
    per row (``dprobs`` and ``probs`` of one shape and dtype).

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.kernels import layers as kl
    >>> p = np.array([[0.25, 0.25, 0.5]])
    >>> kl.softmax_rows_backward(np.array([[1.0, 0.0, 0.0]]), p).tolist()   # <g, p> = 0.25: p (g - 0.25)
    [[0.1875, -0.0625, -0.125]]
    """
    if check:
        _check(probs.shape, dprobs=dprobs, probs=probs)
    width = probs.shape[-1]
    p, g = _rows(probs, width), _rows(dprobs, width)
    dx = np.empty_like(p)
    _softmax_rows_backward(g, p, dx)
    return dx.reshape(probs.shape)


# --------------------------------------------------------------------------- cross-entropy

@_serial
def _cross_entropy_rows(x, targets, probs, logp_t, bad_rows):
    ft = x.dtype.type
    for i in range(x.shape[0]):
        xr, pr = x[i], probs[i]
        m = ft(-np.inf)
        for j in range(xr.shape[0]):
            m = max(m, xr[j])
        total = ft(0)
        for j in range(xr.shape[0]):
            e = exp(xr[j] - m)
            pr[j] = e
            total += e
        # NaN or +-inf logits make m or the total non-finite: those rows go to the reference
        bad_rows[i] = not (m - m == 0 and total - total == 0)
        for j in range(xr.shape[0]):
            pr[j] = pr[j] / total
        logp_t[i] = (xr[targets[i]] - m) - math.log(total)


def cross_entropy_rows(logits: np.ndarray, targets: np.ndarray, *,
                       check: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""Softmax and target log-probability per row, one pass each: ``(probs, logp_t, bad_rows)``.

    :math:`p_{jc} = e^{z_{jc} - m_j} / s_j`, :math:`\log p_{j t_j} = z_{j t_j} - m_j - \log s_j`
    with :math:`m_j = \max_c z_{jc}`, :math:`s_j = \sum_c e^{z_{jc} - m_j}`, as
    :func:`posenc_np.layers.softmax_cross_entropy`. Rows with a NaN or infinite logit are
    flagged in ``bad_rows`` and hold no meaningful values: the caller computes them with the
    reference.

    Parameters
    ----------
    logits : ndarray, float32 or float64, shape ``(rows, C)``
    targets : integer ndarray, shape ``(rows,)``, each in ``[0, C)``
    check : bool
        Check the arguments (``False``: the caller has; see the module docstring).

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.kernels import layers as kl
    >>> logits = np.array([[0.0, 0.0, np.log(2.0)], [0.0, np.nan, 0.0]])
    >>> probs, logp_t, bad_rows = kl.cross_entropy_rows(logits, np.array([2, 0]))
    >>> probs[0].round(6).tolist(), round(float(logp_t[0]), 6), bad_rows.tolist()   # log(1/2); row 1 has a NaN
    ([0.25, 0.25, 0.5], -0.693147, [False, True])
    """
    if check:
        _check(logits=logits)
        if logits.ndim != 2:
            raise ValueError(f"logits must be (rows, C), got shape {logits.shape}")
        targets = _check_targets(targets, logits.shape[0], logits.shape[1])
    logits = np.ascontiguousarray(logits)
    probs = np.empty_like(logits)
    logp_t = np.empty(logits.shape[0], dtype=logits.dtype)
    bad_rows = np.empty(logits.shape[0], dtype=np.bool_)
    _cross_entropy_rows(logits, targets, probs, logp_t, bad_rows)
    return probs, logp_t, bad_rows


# --------------------------------------------------------------------------- gradient norms

@_serial
def _sum_squares(x):
    total = 0.0
    for i in range(x.shape[0]):
        v = np.float64(x[i])
        total += v * v
    return total


def sum_squares(a: np.ndarray, *, check: bool = True) -> float:
    r""":math:`\sum_i a_i^2` of a C-contiguous float32/float64 array, accumulated in float64, in
    one pass (gradient clipping's norm and its finiteness test: a NaN or inf element makes the
    sum NaN or inf; so can float64 elements beyond ~1e154, whose squares overflow).

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.kernels import layers as kl
    >>> kl.sum_squares(np.array([[3.0, 4.0], [0.0, 12.0]]))    # 9 + 16 + 144
    169.0
    >>> kl.sum_squares(np.array([1.0, np.inf], dtype=np.float32))   # a non-finite element shows in the sum
    inf
    """
    if check:
        _check(a=a)
    return _sum_squares(a.reshape(-1))


# --------------------------------------------------------------------------- AdamW

@njit_kernel(parallel=False, fastmath=False)
def _adamw(p, g, m, v, b1, c1, b2, c2, decay, step_size, root_bc2, eps):
    for i in range(p.shape[0]):
        gi = g[i]
        mi = m[i] * b1 + c1 * gi
        vi = v[i] * b2 + c2 * (gi * gi)
        m[i] = mi
        v[i] = vi
        denom = math.sqrt(vi) / root_bc2 + eps
        p[i] = p[i] * decay - step_size * (mi / denom)


def adamw_update(p: np.ndarray, g: np.ndarray, m: np.ndarray, v: np.ndarray, *, b1: float, b2: float, decay: float,
                 step_size: float, root_bc2: float, eps: float, check: bool = True) -> None:
    r"""One AdamW update of one parameter, in place on ``p``, ``m``, ``v``.

    :math:`m \leftarrow \beta_1 m + (1 - \beta_1) g`, :math:`v \leftarrow \beta_2 v + (1 - \beta_2) g^2`,
    :math:`p \leftarrow p\,(1 - \eta\lambda) - s\,m / (\sqrt v / \sqrt{1 - \beta_2^t} + \epsilon)`
    with :math:`s = \eta / (1 - \beta_1^t)` (Loshchilov & Hutter 2019), exactly as
    :func:`posenc_np.optim.adamw_update` computes it.

    Parameters
    ----------
    p, g, m, v : ndarray
        C-contiguous, one shape and dtype (float32 or float64).
    b1, b2 : float
        :math:`\beta_1, \beta_2`.
    decay : float
        :math:`1 - \eta\lambda` (1 for a parameter without weight decay: ``p * 1`` is ``p``).
    step_size, root_bc2, eps : float
        :math:`s`, :math:`\sqrt{1 - \beta_2^t}`, :math:`\epsilon`.
    check : bool
        Check the arguments (``False``: the caller has; see the module docstring).

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.kernels import layers as kl
    >>> p, g, m, v = np.ones(2), np.array([0.5, -2.0]), np.zeros(2), np.zeros(2)
    >>> kl.adamw_update(p, g, m, v, b1=0.9, b2=0.999, decay=1.0, step_size=0.1 / (1 - 0.9),
    ...                 root_bc2=(1 - 0.999) ** 0.5, eps=1e-8)
    >>> p.round(6).tolist(), m.round(6).tolist()   # step 1 moves each weight by lr = 0.1 against its gradient's sign
    ([0.9, 1.1], [0.05, -0.2])
    """
    if check:
        _check(p.shape, p=p, g=g, m=m, v=v)
        for name, a in (("p", p), ("g", g), ("m", m), ("v", v)):
            if not a.flags.c_contiguous or (name != "g" and not a.flags.writeable):
                raise ValueError(f"{name} must be a C-contiguous{'' if name == 'g' else ', writeable'} array "
                                 "(it is updated through a flat view)")
    ft = p.dtype.type  # each scalar rounded once to the parameters' dtype, as NumPy rounds a Python float
    _adamw(p.reshape(-1), g.reshape(-1), m.reshape(-1), v.reshape(-1), ft(b1), ft(1.0 - b1), ft(b2), ft(1.0 - b2),
           ft(decay), ft(step_size), ft(root_bc2), ft(eps))
