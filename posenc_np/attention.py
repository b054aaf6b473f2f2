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

import functools
import inspect

import numpy as np

from ._checks import as_float_array, check_bool, check_int, check_lengths
from ._attention_checks import (check_attention_cache, check_broadcast, check_hook_term, check_hooks, check_qkv,
                                check_scale)
from ._util import kernel_dtype, sum_to_shape
from .layers import _kernels
from .positions import _causal

__all__ = ["Hook", "backward", "causal_mask", "forward", "merge_heads", "softmax", "split_heads"]


class Hook:
    """A position term that plugs into :func:`forward` / :func:`backward`.

    Subclasses override any of the four methods; the defaults contribute nothing. Hooks with
    parameters keep ``params``/``grads`` dicts and write their parameter gradients in the
    ``*_backward`` methods (overwriting, like every layer here).

    ``logits(q, k, scale, mask=None) -> (term, cache)``
        ``term`` is added to the scaled logits (broadcastable to ``(..., H, q_len, k_len)``);
        the hook applies whatever scale its formula asks for. ``mask`` is the boolean mask the
        softmax will apply (True = keep: the caller's ``mask`` and/or the causal mask),
        broadcastable to the logits; a hook whose ``logits`` has no ``mask`` parameter is called
        without it.
    ``logits_backward(dlogits, cache) -> (dq, dk)``
        Contributions to the query/key gradients (``None`` for none).
    ``values(probs) -> (term, cache)``
        ``term`` is added to the output (``(..., H, q_len, d_v)``).
    ``values_backward(dout, cache) -> dprobs``
        Contribution to the gradient of the probabilities (``None`` for none).
    """

    def logits(self, q, k, scale, mask=None):
        return None, None

    def logits_backward(self, dlogits, cache):
        return None, None

    def values(self, probs):
        return None, None

    def values_backward(self, dout, cache):
        return None


@functools.lru_cache(maxsize=256)
def _takes_mask(logits_fn) -> bool:
    """Whether a hook's ``logits`` accepts the ``mask`` keyword (hooks written before it did not)."""
    try:
        params = inspect.signature(logits_fn).parameters
    except (TypeError, ValueError):
        return False
    return "mask" in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def _hook_logits(hook, q, k, scale, keep):
    fn = hook.logits
    return fn(q, k, scale, mask=keep) if _takes_mask(getattr(fn, "__func__", fn)) else fn(q, k, scale)


def causal_mask(q_len: int, k_len: int) -> np.ndarray:
    """Boolean ``(q_len, k_len)``: True where key ``j <= i + (k_len - q_len)`` (bottom-right)."""
    q_len, k_len = check_lengths(q_len, k_len, "causal mask (q_len, k_len)", bool)
    return _causal(q_len, k_len)


def _keep(mask, causal: bool, q_len: int, k_len: int) -> np.ndarray:
    """The mask applied: ``mask`` and/or the causal mask, broadcastable to the logits (all True: no mask)."""
    if causal:
        return _causal(q_len, k_len) if mask is None else mask & _causal(q_len, k_len)
    return np.ones((q_len, k_len), dtype=bool) if mask is None else mask


def softmax(logits, keep=None, axis: int = -1) -> np.ndarray:
    r"""Numerically stable softmax over ``axis`` restricted to ``keep`` (True = keep).

    :math:`p_j = e^{x_j - m} / \sum_{j' \in K} e^{x_{j'} - m}` with :math:`m = \max_{j \in K} x_j`;
    entries outside :math:`K` (and ``-inf`` logits) get probability 0; a row with empty
    :math:`K` (also a zero-length ``axis``) is all zeros. Integer logits are converted to
    float64; float dtypes are kept. ``keep`` is boolean and broadcasts to ``logits``.
    """
    logits = as_float_array(logits, "logits")
    axis = check_int(axis, "axis")
    if not -logits.ndim <= axis < logits.ndim:
        raise ValueError(f"axis {axis} is out of range for logits of shape {logits.shape}")
    return _softmax(logits, check_broadcast(keep, "keep", logits.shape, logits.dtype), axis)


def _softmax(logits: np.ndarray, keep, axis: int) -> np.ndarray:
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
    r""":math:`\partial L/\partial x = p \odot (g - \langle g, p\rangle)` (zero where ``p`` is zero)."""
    return probs * (dprobs - np.sum(dprobs * probs, axis=axis, keepdims=True))


def forward(q, k, v, *, bias=None, mask=None, causal: bool = False, scale=None, hooks=()):
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
    """
    q, k, v = check_qkv(q, k, v)
    causal = check_bool(causal, "causal")
    scale = check_scale(scale, q.shape[-1])
    hooks = check_hooks(hooks)
    target = q.shape[:-1] + (k.shape[-2],)
    bias = check_broadcast(bias, "bias", target, q.dtype)
    mask = check_broadcast(mask, "mask", target, q.dtype)
    return _forward(q, k, v, bias, _keep(mask, causal, q.shape[-2], k.shape[-2]), scale, hooks)


def _softmax_fused(logits: np.ndarray, keep) -> np.ndarray:
    """:func:`_softmax` over the last axis by the kernel; the rows it flags (a kept ``+inf``,
    rare) by :func:`_softmax` itself."""
    probs, inf_rows = _kernels().softmax_rows(logits, keep, check=False)
    if inf_rows.any():
        width = logits.shape[-1]
        rows = np.flatnonzero(inf_rows)
        mask = np.broadcast_to(True if keep is None else keep, logits.shape).reshape(-1, width)
        probs.reshape(-1, width)[rows] = _softmax(logits.reshape(-1, width)[rows], mask[rows], -1)
    return probs


def _forward(q, k, v, bias, keep, scale: float, hooks: tuple, fused_softmax: bool = False):
    """The body of :func:`forward` for checked arguments; ``keep`` is the mask applied.

    ``fused_softmax`` (the model's attention): the softmax and its backward run as the Numba
    kernels :func:`posenc_np.kernels.layers.softmax_rows` / ``softmax_rows_backward`` when the
    logits are float32/float64 (one pass per row instead of ~10 array passes; the same
    function, its exp within 0.6 ulp in float32 and 2 ulp in float64). :func:`forward` keeps
    the NumPy reference."""
    target = q.shape[:-1] + (k.shape[-2],)
    logits = scale * (q @ np.swapaxes(k, -1, -2))
    if bias is not None:
        logits = logits + bias
    hook_caches = []
    for hook in hooks:
        term, hc = _hook_logits(hook, q, k, scale, keep)
        hook_caches.append([hc, None])
        if term is not None:
            logits = logits + check_hook_term(term, target, hook, "logits")
    fused_softmax = fused_softmax and kernel_dtype(logits)
    probs = _softmax_fused(logits, keep) if fused_softmax else _softmax(logits, keep, -1)
    out = probs @ v
    for hook, hc in zip(hooks, hook_caches):
        term, hc[1] = hook.values(probs)
        if term is not None:
            out = out + check_hook_term(term, out.shape, hook, "values")
    cache = {"q": q, "k": k, "v": v, "probs": probs, "scale": scale, "bias_shape": None if bias is None else bias.shape,
             "hooks": tuple(hooks), "hook_caches": hook_caches, "fused_softmax": fused_softmax}
    return out, cache


def backward(dout, cache) -> dict:
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
    """
    _, _, v, probs, _ = check_attention_cache(cache)
    dout = as_float_array(dout, "dout")
    if dout.shape != probs.shape[:-1] + (v.shape[-1],):
        raise ValueError(f"dout must have shape {probs.shape[:-1] + (v.shape[-1],)}, got {dout.shape}")
    return _backward(dout, cache)


def _backward(dout, cache) -> dict:
    """The body of :func:`backward` for a checked ``dout`` and :func:`forward`'s own cache."""
    q, k, v, probs, scale = (cache[name] for name in ("q", "k", "v", "probs", "scale"))
    dv = np.swapaxes(probs, -1, -2) @ dout
    dprobs = dout @ np.swapaxes(v, -1, -2)
    for hook, (_, vc) in zip(cache["hooks"], cache["hook_caches"]):
        extra = hook.values_backward(dout, vc)
        if extra is not None:
            dprobs = dprobs + extra
    if cache.get("fused_softmax") and kernel_dtype(probs, dprobs):
        dlogits = _kernels().softmax_rows_backward(dprobs, probs, check=False)
    else:
        dlogits = softmax_backward(dprobs, probs)
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


def split_heads(x, num_heads: int) -> np.ndarray:
    """``(..., T, heads * d)`` to ``(..., heads, T, d)``. Its backward is :func:`merge_heads`."""
    x = np.asarray(x)
    num_heads = check_int(num_heads, "num_heads", minimum=1)
    if x.ndim < 2 or x.shape[-1] % num_heads:
        raise ValueError(f"x must be (..., T, heads*d) with last axis divisible by num_heads={num_heads}, "
                         f"got shape {x.shape}")
    return _split_heads(x, num_heads)


def _split_heads(x: np.ndarray, num_heads: int) -> np.ndarray:
    return np.swapaxes(x.reshape(x.shape[:-1] + (num_heads, x.shape[-1] // num_heads)), -2, -3)


def merge_heads(x) -> np.ndarray:
    """``(..., heads, T, d)`` to ``(..., T, heads * d)``. Its backward is :func:`split_heads`."""
    x = np.asarray(x)
    if x.ndim < 3:
        raise ValueError(f"x must be (..., heads, T, d), got shape {x.shape}")
    return _merge_heads(x)


def _merge_heads(x: np.ndarray) -> np.ndarray:
    y = np.swapaxes(x, -2, -3)
    return y.reshape(y.shape[:-2] + (y.shape[-2] * y.shape[-1],))
