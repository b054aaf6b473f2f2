r"""Scaled dot-product attention, forward and backward, with bias, mask and position hooks.

.. math::

    S = s\,QK^\top + B + \sum_h T_h(Q, K, M), \qquad
    P = \mathrm{softmax}_{\text{kept keys}}(S), \qquad
    O = PV + \sum_h U_h(P)

with :math:`s = 1/\sqrt{d}` unless ``scale`` is given (Vaswani et al. 2017, eq. 1). :math:`B`
is an additive bias on the *scaled* logits, :math:`T_h` are score hooks (terms that depend on
the queries, the keys or the mask :math:`M`: ALiBi, T5, Shaw, Transformer-XL, DeBERTa) and
:math:`U_h` value hooks (Shaw's relative values). See :class:`Hook`.

Shapes: ``q`` is ``(..., heads, q_len, d)``, ``k`` is ``(..., heads, k_len, d)``, ``v`` is
``(..., heads, k_len, d_v)``; leading axes must match exactly.

Masking and alignment: ``mask`` is boolean, broadcastable to ``(..., heads, q_len, k_len)``,
True = keep. ``causal=True`` keeps key ``j`` for query ``i`` iff
``j <= i + (k_len - q_len)``: the queries are the *last* ``q_len`` positions of the key
sequence (bottom-right alignment, :mod:`posenc_np.positions`, as when decoding with a KV cache).
The mask actually applied, :math:`M` = ``mask`` and/or the causal mask, is what hooks receive.
Logits equal to ``-inf`` (for example from a user bias) are treated as masked.

Fully masked rows: every probability is 0, the output row is 0 (plus whatever value hooks
add for zero probabilities, which is 0 for the hooks in this package) and every gradient
through that row is 0. No NaN is produced.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from ._checks import as_float_array, check_bool, check_grad, check_int, check_lengths, check_real, require
from ._util import sum_to_shape
from .positions import causal_keep

__all__ = ["Hook", "applied_mask", "attend", "attend_backward", "backward", "causal_mask", "check_hook_args",
           "forward", "from_heads", "logit_scale", "masked_softmax", "merge_heads", "softmax", "softmax_backward",
           "split_heads", "to_heads"]

#: The methods of an attention hook (:class:`Hook`).
HOOK_METHODS = ("logits", "logits_backward", "values", "values_backward")
#: The keys of :func:`attend`'s cache that :func:`backward` reads.
_CACHE_KEYS = {"q", "k", "v", "probs", "scale", "bias_shape", "hooks", "hook_caches"}


class Hook:
    """A position term that plugs into :func:`forward` / :func:`backward`.

    Subclasses override any of the four methods; the defaults contribute nothing. Hooks with
    parameters keep ``params``/``grads`` dicts and write their parameter gradients in the
    ``*_backward`` methods (overwriting, like every layer here).

    ``logits(q, k, scale, mask=None) -> (term, cache)``
        ``term`` is added to the scaled logits (broadcastable to ``(..., H, q_len, k_len)``);
        the hook applies whatever scale its formula asks for. ``mask`` is the boolean mask the
        softmax will apply (True = keep: the caller's ``mask`` and/or the causal mask),
        broadcastable to the logits. A hook called directly checks its arguments with
        :func:`check_hook_args`.
    ``logits_backward(dlogits, cache) -> (dq, dk)``
        Contributions to the query/key gradients (``None`` for none).
    ``values(probs) -> (term, cache)``
        ``term`` is added to the output (``(..., H, q_len, d_v)``).
    ``values_backward(dout, cache) -> dprobs``
        Contribution to the gradient of the probabilities (``None`` for none).

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import attention
    >>> class FirstKeyOnly(attention.Hook):   # a score term: -inf (masked) on every key but key 0
    ...     def logits(self, q, k, scale, mask=None):
    ...         return np.where(np.arange(k.shape[-2]) == 0, 0.0, -np.inf), None
    >>> q, k, v = np.random.default_rng(0).standard_normal((3, 1, 2, 3, 4))
    >>> out, cache = attention.forward(q, k, v, hooks=[FirstKeyOnly()])
    >>> bool(np.allclose(out, v[..., :1, :]))   # every query reads value 0 only
    True
    """

    def logits(self, q: ArrayLike, k: ArrayLike, scale: float,
               mask: ArrayLike | None = None) -> tuple[np.ndarray | None, Any]:
        return None, None

    def logits_backward(self, dlogits: np.ndarray, cache: Any) -> tuple[np.ndarray | None, np.ndarray | None]:
        return None, None

    def values(self, probs: ArrayLike) -> tuple[np.ndarray | None, Any]:
        return None, None

    def values_backward(self, dout: np.ndarray, cache: Any) -> np.ndarray | None:
        return None


def _broadcasts(shape: tuple, target: tuple) -> bool:
    """Whether an array of ``shape`` broadcasts to ``target`` without enlarging it."""
    return len(shape) <= len(target) and all(s in (1, t) for s, t in zip(reversed(shape), reversed(target)))


def _check_broadcast(arr, name: str, target: tuple, dtype):
    """A float ``bias`` (cast to ``dtype``) or a boolean ``mask``/``keep`` that broadcasts to
    ``target`` without enlarging it; None stays None. Shared by the doors of this module."""
    if arr is not None:
        arr = as_float_array(arr, name).astype(dtype, copy=False) if name == "bias" else np.asarray(arr)
        if name != "bias" and arr.dtype != bool:  # (hooks run this per call: messages are built only to raise)
            raise TypeError(f"{name} must be a boolean array (True = keep), got dtype {arr.dtype}")
        if not _broadcasts(arr.shape, target):
            raise ValueError(f"{name} of shape {arr.shape} must broadcast to {target} without enlarging it")
    return arr


def _add_term(total: np.ndarray, term, hook, method: str) -> np.ndarray:
    """``total + term`` for a hook's term (``None``: nothing), which must broadcast to ``total`` without
    enlarging it (checked: hooks may be the user's)."""
    if term is None:
        return total
    if not _broadcasts(np.shape(term), total.shape):
        raise ValueError(f"{type(hook).__name__}.{method} returned a term of shape {np.shape(term)}, which does not "
                         f"broadcast to {total.shape}")
    return total + term


def logit_scale(scale: float | None, d: int) -> float:
    r"""The logit scale: ``scale`` (finite, > 0) or the default :math:`1/\sqrt{d}`, which needs ``d >= 1``.

    Examples
    --------
    >>> from posenc_np import attention
    >>> attention.logit_scale(None, 16), attention.logit_scale(0.1, 16)   # 1/sqrt(16), or the given scale
    (0.25, 0.1)
    """
    require(scale is not None or d > 0, "q and k have head dim d = 0: the default scale 1/sqrt(d) is undefined; "
            "pass scale explicitly (every logit is then 0)")
    return 1.0 / math.sqrt(d) if scale is None else check_real(scale, "scale", positive=True)


def check_hook_args(q: ArrayLike, k: ArrayLike, scale: float, mask: ArrayLike | None,
                    num_heads: int | None = None, head_dim: int | None = None, *,
                    scale_name: str = "scale") -> tuple[np.ndarray, np.ndarray, float, np.ndarray | None]:
    """What a hook's ``logits(q, k, scale, mask)`` receives from :func:`attend`, checked for a direct
    call: float ``q``/``k`` ``(..., heads, len, d)`` with equal leading axes and ``d`` (``num_heads``
    heads and ``d = head_dim`` when given), a finite ``scale > 0`` (named ``scale_name`` in messages),
    and None or a boolean mask that broadcasts to the logits. Returns ``(q, k, scale, mask)`` (integers converted
    to float64).

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import attention
    >>> q, k = np.zeros((2, 3, 4), dtype=int), np.zeros((2, 5, 4))
    >>> q, k, scale, mask = attention.check_hook_args(q, k, 0.5, None, num_heads=2)
    >>> q.dtype, scale, mask   # integers converted to float64
    (dtype('float64'), 0.5, None)
    >>> attention.check_hook_args(np.zeros((2, 3, 4)), np.zeros((2, 5, 3)), 0.5, None)
    Traceback (most recent call last):
    ...
    ValueError: q and k must be (..., heads, len, d) with equal leading axes and d, got q (2, 3, 4) and k (2, 5, 3)
    """
    q = as_float_array(q, "q", ndim_min=3)
    k = as_float_array(k, "k", ndim_min=3)
    if (q.shape[:-2] != k.shape[:-2] or q.shape[-1] != k.shape[-1] or num_heads not in (None, q.shape[-3])
            or head_dim not in (None, q.shape[-1])):  # (per call of a hook: the message is built only to raise)
        raise ValueError(f"q and k must be (..., {'heads' if num_heads is None else f'num_heads={num_heads}'}, len, "
                         f"{'d' if head_dim is None else f'head_dim={head_dim}'}) with equal leading axes and d, got "
                         f"q {q.shape} and k {k.shape}")
    mask = _check_broadcast(mask, "mask", q.shape[:-1] + (k.shape[-2],), q.dtype)
    return q, k, check_real(scale, scale_name, positive=True), mask


def causal_mask(q_len: int, k_len: int) -> np.ndarray:
    """Boolean ``(q_len, k_len)``: True where key ``j <= i + (k_len - q_len)`` (bottom-right).

    Examples
    --------
    >>> from posenc_np import attention
    >>> attention.causal_mask(2, 3)   # queries at positions 1 and 2 (bottom-right)
    array([[ True,  True, False],
           [ True,  True,  True]])
    """
    q_len, k_len = check_lengths(q_len, k_len, "causal mask (q_len, k_len)", bool)
    return causal_keep(q_len, k_len)


def applied_mask(mask: np.ndarray | None, causal: bool, q_len: int, k_len: int) -> np.ndarray:
    """The mask the softmax applies: ``mask`` and/or the causal mask, broadcastable to the logits
    (all True: no mask). Core of :func:`forward`'s masking; arguments are not checked.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import attention
    >>> attention.applied_mask(np.array([True, False, True]), True, 2, 3)   # mask and causal
    array([[ True, False, False],
           [ True, False,  True]])
    >>> attention.applied_mask(None, False, 1, 2)   # no mask: all True
    array([[ True,  True]])
    """
    if causal:
        return causal_keep(q_len, k_len) if mask is None else mask & causal_keep(q_len, k_len)
    return np.ones((q_len, k_len), dtype=bool) if mask is None else mask


def softmax(logits: ArrayLike, keep: ArrayLike | None = None, axis: int = -1) -> np.ndarray:
    r"""Numerically stable softmax over ``axis`` restricted to ``keep`` (True = keep).

    :math:`p_j = e^{x_j - m} / \sum_{j' \in K} e^{x_{j'} - m}` with :math:`m = \max_{j \in K} x_j`;
    entries outside :math:`K` (and ``-inf`` logits) get probability 0; a row with empty
    :math:`K` (also a zero-length ``axis``) is all zeros. Integer logits are converted to
    float64; float dtypes are kept. ``keep`` is boolean and broadcasts to ``logits``.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import attention
    >>> attention.softmax([0.0, np.log(3.0)]).round(6).tolist()   # e^x / sum e^x: 1/4, 3/4
    [0.25, 0.75]
    >>> attention.softmax([1.0, 2.0, 3.0], keep=np.array([True, False, True])).round(6).tolist()   # 1 / (1 + e^2)
    [0.119203, 0.0, 0.880797]
    >>> attention.softmax([[1.0, 2.0]], keep=np.array([[False, False]])).tolist()   # no kept key: zeros
    [[0.0, 0.0]]
    """
    logits = as_float_array(logits, "logits")
    axis = check_int(axis, "axis")
    require(-logits.ndim <= axis < logits.ndim, f"axis {axis} is out of range for logits of shape {logits.shape}")
    return masked_softmax(logits, _check_broadcast(keep, "keep", logits.shape, logits.dtype), axis)


def masked_softmax(logits: np.ndarray, keep: np.ndarray | None, axis: int) -> np.ndarray:
    r"""Softmax of ``logits`` over ``axis``, over the kept entries (``keep`` True, logit not ``-inf``).

    Core of :func:`softmax`; arguments are not checked. ``keep`` is None or a boolean array that
    broadcasts to ``logits``; a row with no kept entry is 0; NaN logits stay kept (they propagate).

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import attention
    >>> attention.masked_softmax(np.array([0.0, 0.0, -np.inf]), None, -1).tolist()   # -inf counts as masked
    [0.5, 0.5, 0.0]
    >>> attention.masked_softmax(np.array([0.0, 5.0]), np.array([True, False]), -1).tolist()
    [1.0, 0.0]
    """
    not_neg_inf = logits != -np.inf  # NaN stays "kept" so that it propagates
    keep = not_neg_inf if keep is None else keep & not_neg_inf
    masked = np.where(keep, logits, -np.inf)
    m = np.max(masked, axis=axis, keepdims=True, initial=-np.inf)  # initial: zero-length axes too
    m = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(over="ignore"):  # -huge - huge overflows to -inf, whose exp is the correct 0
        e = np.where(keep, np.exp(masked - m), 0.0)
    s = e.sum(axis=axis, keepdims=True)
    return (e / np.where(s == 0, 1, s)).astype(logits.dtype, copy=False)


def softmax_backward(dprobs: np.ndarray, probs: np.ndarray, axis: int = -1) -> np.ndarray:
    r""":math:`\partial L/\partial x = p \odot (g - \langle g, p\rangle)` (zero where ``p`` is zero).

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import attention
    >>> p = np.array([0.5, 0.5])
    >>> attention.softmax_backward(np.array([1.0, 0.0]), p).tolist()   # p * (g - <g, p>) = 0.5 * (1 - 0.5, 0 - 0.5)
    [0.25, -0.25]
    """
    return probs * (dprobs - np.sum(dprobs * probs, axis=axis, keepdims=True))


def forward(q: ArrayLike, k: ArrayLike, v: ArrayLike, *, bias: ArrayLike | None = None, mask: ArrayLike | None = None,
            causal: bool = False, scale: float | None = None,
            hooks: Sequence[Hook] | None = ()) -> tuple[np.ndarray, dict]:
    r"""Attention forward pass.

    Parameters
    ----------
    q, k, v : ndarray
        ``(..., heads, q_len, d)``, ``(..., heads, k_len, d)``, ``(..., heads, k_len, d_v)``.
        Computation happens in their common float dtype.
    bias : ndarray, optional
        Added to the scaled logits; broadcastable to ``(..., heads, q_len, k_len)``.
    mask : ndarray of bool, optional
        True = keep; broadcastable to the logits.
    causal : bool
        Bottom-right causal mask (see module docstring).
    scale : float, optional
        Logit scale, default :math:`1/\sqrt{d}`.
    hooks : sequence of Hook, optional
        Position terms (see :class:`Hook`); ``None`` or ``()`` for none.

    Returns
    -------
    out : ndarray ``(..., heads, q_len, d_v)``
    cache : dict
        Everything :func:`backward` needs (including ``probs``).

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import attention
    >>> q, k, v = np.random.default_rng(0).standard_normal((3, 1, 2, 3, 4))   # (batch, heads, len, d)
    >>> out, cache = attention.forward(q, k, v, causal=True)
    >>> out.shape, bool(np.allclose(out[..., 0, :], v[..., 0, :]))   # causal: query 0 sees key 0 only
    ((1, 2, 3, 4), True)
    >>> cache["probs"].sum(axis=-1).round(6).tolist()   # each row of probabilities sums to 1
    [[[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]]
    """
    q = as_float_array(q, "q", ndim_min=3)
    k = as_float_array(k, "k", ndim_min=3)
    v = as_float_array(v, "v", ndim_min=3)
    require(q.shape[:-2] == k.shape[:-2] and k.shape[:-1] == v.shape[:-1] and q.shape[-1] == k.shape[-1],
            f"q, k, v must be (..., heads, len, d) with matching leading axes and k/v lengths, and q and k must share "
            f"the last axis d; got q {q.shape}, k {k.shape}, v {v.shape}")
    q, k, v = (a.astype(np.result_type(q, k, v), copy=False) for a in (q, k, v))
    causal = check_bool(causal, "causal")
    scale = logit_scale(scale, q.shape[-1])
    hooks = () if hooks is None else hooks
    require(isinstance(hooks, (list, tuple)), f"hooks must be a sequence of Hook objects (or None), got "
            f"{type(hooks).__name__}", TypeError)
    for i, hook in enumerate(hooks):
        require(all(callable(getattr(hook, m, None)) for m in HOOK_METHODS), f"hooks[{i}] ({type(hook).__name__}) "
                f"lacks the Hook methods {HOOK_METHODS}", TypeError)
    target = q.shape[:-1] + (k.shape[-2],)
    bias = _check_broadcast(bias, "bias", target, q.dtype)
    mask = _check_broadcast(mask, "mask", target, q.dtype)
    return attend(q, k, v, bias, applied_mask(mask, causal, q.shape[-2], k.shape[-2]), scale, tuple(hooks))


def attend(q: np.ndarray, k: np.ndarray, v: np.ndarray, bias: np.ndarray | None, keep: np.ndarray | None, scale: float,
           hooks: tuple, softmax: tuple[Callable, Callable] | None = None) -> tuple[np.ndarray, dict]:
    r"""Attention :math:`O = \mathrm{softmax}_{\text{keep}}(s\,QK^\top + B + \sum_h T_h) V + \sum_h U_h`
    and its cache: ``(out, cache)``.

    Core of :func:`forward`; arguments are not checked (``q``, ``k``, ``v`` in one float dtype with
    matching shapes, ``bias`` None or broadcasting to the logits, ``keep`` the boolean mask the
    softmax applies, e.g. :func:`applied_mask`, ``hooks`` a tuple of :class:`Hook`). Only the
    hooks' terms are checked: each must broadcast to the logits (or the output) without enlarging them.

    ``softmax``: None (the reference, :func:`masked_softmax` over the last axis and
    :func:`softmax_backward`), or a pair ``(forward(logits, keep) -> probs, backward(dprobs, probs)
    -> dlogits)`` computing the same functions another way (the model's fused row kernels); the
    cache keeps it for :func:`attend_backward`.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import attention
    >>> q, k, v = np.random.default_rng(0).standard_normal((3, 1, 2, 3, 4))
    >>> out, cache = attention.attend(q, k, v, None, attention.applied_mask(None, True, 3, 3), 0.5, ())
    >>> bool(np.allclose(out, attention.forward(q, k, v, causal=True)[0]))   # forward's core (scale 1/sqrt(4))
    True
    """
    logits = scale * (q @ np.swapaxes(k, -1, -2))
    if bias is not None:
        logits = logits + bias
    hook_caches = []
    for hook in hooks:
        term, hc = hook.logits(q, k, scale, mask=keep)
        hook_caches.append([hc, None])
        logits = _add_term(logits, term, hook, "logits")
    probs = masked_softmax(logits, keep, -1) if softmax is None else softmax[0](logits, keep)
    out = probs @ v
    for hook, hc in zip(hooks, hook_caches):
        term, hc[1] = hook.values(probs)
        out = _add_term(out, term, hook, "values")
    cache = {"q": q, "k": k, "v": v, "probs": probs, "scale": scale, "bias_shape": None if bias is None else bias.shape,
             "hooks": hooks, "hook_caches": hook_caches, "softmax": softmax}
    return out, cache


def backward(dout: ArrayLike, cache: dict) -> dict:
    r"""Attention backward pass.

    With :math:`G = \partial L/\partial O`:
    :math:`dV = P^\top G`, :math:`dP = G V^\top + \sum_h dP_h`,
    :math:`dS = P \odot (dP - \mathrm{rowsum}(dP \odot P))`,
    :math:`dQ = s\, dS\, K + \sum_h dQ_h`, :math:`dK = s\, dS^\top Q + \sum_h dK_h`,
    :math:`dB = dS` summed to the bias's shape.

    Returns
    -------
    dict
        ``q``, ``k``, ``v`` gradients and ``bias`` (``None`` when there was no bias). Hook
        parameter gradients are written into each hook's ``grads``.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import attention
    >>> q, k, v, w, d = np.random.default_rng(0).standard_normal((5, 1, 2, 3, 4))
    >>> loss = lambda q: float((attention.forward(q, k, v, causal=True)[0] * w).sum())   # L = sum(w * out)
    >>> dq = attention.backward(w, attention.forward(q, k, v, causal=True)[1])["q"]
    >>> bool(np.isclose((loss(q + 1e-6 * d) - loss(q - 1e-6 * d)) / 2e-6, (dq * d).sum()))   # along direction d
    True
    """
    require(isinstance(cache, dict) and _CACHE_KEYS <= cache.keys() and isinstance(cache["scale"], float)
            and all(isinstance(cache[n], np.ndarray) and cache[n].ndim >= 3 for n in ("q", "k", "v", "probs")),
            "cache must be the dict returned by posenc_np.attention.forward", TypeError)
    dout = check_grad(dout, "dout", cache["probs"].shape[:-1] + (cache["v"].shape[-1],))
    return attend_backward(dout, cache)


def attend_backward(dout: np.ndarray, cache: dict) -> dict:
    """Gradients ``{"q", "k", "v", "bias"}`` of :func:`attend` (see :func:`backward`).

    Core of :func:`backward`; arguments are not checked (``cache`` is :func:`attend`'s own).

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import attention
    >>> q, k, v, g = np.random.default_rng(0).standard_normal((4, 1, 2, 3, 4))
    >>> out, cache = attention.attend(q, k, v, None, None, 0.5, ())
    >>> grads = attention.attend_backward(g, cache)
    >>> bool(np.allclose(grads["v"], np.swapaxes(cache["probs"], -1, -2) @ g)), grads["bias"]   # dV = P^T G
    (True, None)
    """
    q, k, v, probs, scale = (cache[name] for name in ("q", "k", "v", "probs", "scale"))
    dv = np.swapaxes(probs, -1, -2) @ dout
    dprobs = dout @ np.swapaxes(v, -1, -2)
    for hook, (_, vc) in zip(cache["hooks"], cache["hook_caches"]):
        extra = hook.values_backward(dout, vc)
        if extra is not None:
            dprobs = dprobs + extra
    softmax = cache.get("softmax")
    dlogits = softmax_backward(dprobs, probs) if softmax is None else softmax[1](dprobs, probs)
    dq = scale * (dlogits @ k)
    dk = scale * (np.swapaxes(dlogits, -1, -2) @ q)
    for hook, (lc, _) in zip(cache["hooks"], cache["hook_caches"]):
        hq, hk = hook.logits_backward(dlogits, lc)
        if hq is not None:
            dq = dq + hq
        if hk is not None:
            dk = dk + hk
    dbias = None if cache["bias_shape"] is None else sum_to_shape(dlogits, cache["bias_shape"])
    return {"q": dq, "k": dk, "v": dv, "bias": dbias}


def split_heads(x: ArrayLike, num_heads: int) -> np.ndarray:
    """``(..., T, heads * d)`` to ``(..., heads, T, d)``. Its backward is :func:`merge_heads`.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import attention
    >>> x = np.arange(12.0).reshape(2, 6)   # (T, heads * d) with 3 heads of d = 2
    >>> h = attention.split_heads(x, 3)
    >>> h.shape, h[1].tolist()   # head 1 holds channels 2 and 3
    ((3, 2, 2), [[2.0, 3.0], [8.0, 9.0]])
    """
    x = np.asarray(x)
    num_heads = check_int(num_heads, "num_heads", minimum=1)
    require(x.ndim >= 2 and x.shape[-1] % num_heads == 0, f"x must be (..., T, heads*d) with last axis divisible by "
            f"num_heads={num_heads}, got shape {x.shape}")
    return to_heads(x, num_heads)


def to_heads(x: np.ndarray, num_heads: int) -> np.ndarray:
    """``(..., T, heads * d)`` to ``(..., heads, T, d)`` (a view). Core of :func:`split_heads`;
    arguments are not checked.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import attention
    >>> x = np.arange(12.0).reshape(2, 6)
    >>> h = attention.to_heads(x, 3)
    >>> h.shape, bool(np.shares_memory(h, x))   # a view
    ((3, 2, 2), True)
    """
    return np.swapaxes(x.reshape(x.shape[:-1] + (num_heads, x.shape[-1] // num_heads)), -2, -3)


def merge_heads(x: ArrayLike) -> np.ndarray:
    """``(..., heads, T, d)`` to ``(..., T, heads * d)``. Its backward is :func:`split_heads`.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import attention
    >>> x = np.arange(12.0).reshape(2, 6)
    >>> bool(np.array_equal(attention.merge_heads(attention.split_heads(x, 3)), x))   # the inverse of split_heads
    True
    """
    x = np.asarray(x)
    require(x.ndim >= 3, f"x must be (..., heads, T, d), got shape {x.shape}")
    return from_heads(x)


def from_heads(x: np.ndarray) -> np.ndarray:
    """``(..., heads, T, d)`` to ``(..., T, heads * d)``. Core of :func:`merge_heads`; arguments are
    not checked.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import attention
    >>> h = np.arange(12.0).reshape(3, 2, 2)   # (heads, T, d)
    >>> attention.from_heads(h).tolist()   # row t: head 0's d channels, then head 1's, then head 2's
    [[0.0, 1.0, 4.0, 5.0, 8.0, 9.0], [2.0, 3.0, 6.0, 7.0, 10.0, 11.0]]
    """
    y = np.swapaxes(x, -2, -3)
    return y.reshape(y.shape[:-2] + (y.shape[-2] * y.shape[-1],))
