r"""Scaled dot-product attention, forward and backward, with bias, mask and position hooks.

.. math::

    S = s\,QK^\top + B + \sum_h T_h(Q, K), \qquad
    P = \mathrm{softmax}_{\text{kept keys}}(S), \qquad
    O = PV + \sum_h U_h(P)

with :math:`s = 1/\sqrt{d}` unless ``scale`` is given (Vaswani et al. 2017, eq. 1). :math:`B`
is an additive bias on the *scaled* logits (ALiBi, T5), :math:`T_h` are score hooks (terms
that depend on the queries or keys, e.g. Shaw, Transformer-XL, DeBERTa) and :math:`U_h`
value hooks (Shaw's relative values). See :class:`Hook`.

Shapes: ``q`` is ``(..., heads, q_len, d)``, ``k`` is ``(..., heads, k_len, d)``, ``v`` is
``(..., heads, k_len, d_v)``; leading axes must match exactly.

Masking and alignment: ``mask`` is boolean, broadcastable to ``(..., heads, q_len, k_len)``,
True = keep. ``causal=True`` keeps key ``j`` for query ``i`` iff
``j <= i + (k_len - q_len)``: the queries are the *last* ``q_len`` positions of the key
sequence (bottom-right alignment, as when decoding with a KV cache). Logits equal to
``-inf`` (for example from a user bias) are treated as masked.

Fully masked rows: every probability is 0, the output row is 0 (plus whatever value hooks
add for zero probabilities, which is 0 for the hooks in this package) and every gradient
through that row is 0. No NaN is produced.
"""

from __future__ import annotations

import math

import numpy as np

from ._checks import as_float_array, check_bool, check_int, check_lengths, check_real
from ._util import sum_to_shape

__all__ = ["Hook", "backward", "causal_mask", "forward", "merge_heads", "softmax", "split_heads"]


class Hook:
    """A position term that plugs into :func:`forward` / :func:`backward`.

    Subclasses override any of the four methods; the defaults contribute nothing. Hooks with
    parameters keep ``params``/``grads`` dicts and write their parameter gradients in the
    ``*_backward`` methods (overwriting, like every layer here).

    ``logits(q, k, scale) -> (term, cache)``
        ``term`` is added to the scaled logits (broadcastable to ``(..., H, q_len, k_len)``);
        the hook applies whatever scale its formula asks for.
    ``logits_backward(dlogits, cache) -> (dq, dk)``
        Contributions to the query/key gradients (``None`` for none).
    ``values(probs) -> (term, cache)``
        ``term`` is added to the output (``(..., H, q_len, d_v)``).
    ``values_backward(dout, cache) -> dprobs``
        Contribution to the gradient of the probabilities (``None`` for none).
    """

    def logits(self, q, k, scale):
        return None, None

    def logits_backward(self, dlogits, cache):
        return None, None

    def values(self, probs):
        return None, None

    def values_backward(self, dout, cache):
        return None


def causal_mask(q_len: int, k_len: int) -> np.ndarray:
    """Boolean ``(q_len, k_len)``: True where key ``j <= i + (k_len - q_len)`` (bottom-right)."""
    q_len, k_len = check_lengths(q_len, k_len, "causal mask (q_len, k_len)", bool)
    return np.arange(k_len)[None, :] <= np.arange(q_len)[:, None] + (k_len - q_len)


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
    if keep is not None:
        keep = _check_broadcast(keep, "keep", logits.shape, logits.dtype)
    return _softmax(logits, keep, axis)


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


def _check_qkv(q, k, v):
    q = as_float_array(q, "q", ndim_min=3)
    k = as_float_array(k, "k", ndim_min=3)
    v = as_float_array(v, "v", ndim_min=3)
    if q.shape[:-2] != k.shape[:-2] or k.shape[:-1] != v.shape[:-1]:
        raise ValueError(
            f"q, k, v must be (..., heads, len, d) with matching leading axes and k/v lengths; got "
            f"q {q.shape}, k {k.shape}, v {v.shape}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share the last axis d; got q {q.shape}, k {k.shape}")
    dtype = np.result_type(q, k, v)
    return q.astype(dtype, copy=False), k.astype(dtype, copy=False), v.astype(dtype, copy=False)


def _check_broadcast(arr, name, target, dtype):
    if arr is None:
        return None
    if name in ("mask", "keep"):
        arr = np.asarray(arr)
        if arr.dtype != bool:
            raise TypeError(f"{name} must be a boolean array (True = keep), got dtype {arr.dtype}")
    else:
        arr = as_float_array(arr, name).astype(dtype, copy=False)
    try:
        shape = np.broadcast_shapes(arr.shape, target)
    except ValueError as exc:
        raise ValueError(f"{name} of shape {arr.shape} does not broadcast to {target}") from exc
    if shape != target:
        raise ValueError(f"{name} of shape {arr.shape} would enlarge the logits {target} to {shape}")
    return arr


def _check_scale(scale, d: int) -> float:
    """The logit scale: ``scale`` (finite, > 0) or the default ``1/sqrt(d)`` (needs ``d >= 1``)."""
    if scale is not None:
        return check_real(scale, "scale", positive=True)
    if d == 0:
        raise ValueError("q and k have head dim d = 0: the default scale 1/sqrt(d) is undefined; pass scale "
                         "explicitly (every logit is then 0)")
    return 1.0 / math.sqrt(d)


_HOOK_METHODS = ("logits", "logits_backward", "values", "values_backward")


def check_hook_args(q, k, scale):
    """What a hook's ``logits(q, k, scale)`` receives from :func:`forward`, checked for a direct call:
    float ``q``/``k`` of shape ``(..., heads, len, d)`` with equal leading axes and ``d``, a finite
    ``scale > 0``. Returns them (integers converted to float64)."""
    q = as_float_array(q, "q", ndim_min=3)
    k = as_float_array(k, "k", ndim_min=3)
    if q.shape[:-2] != k.shape[:-2] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must be (..., heads, len, d) with equal leading axes and d, got {q.shape} "
                         f"and {k.shape}")
    return q, k, check_real(scale, "scale", positive=True)


def _check_hooks(hooks) -> tuple:
    """``hooks`` as a tuple of objects with the four :class:`Hook` methods (``None`` = no hooks)."""
    if hooks is None:
        return ()
    if isinstance(hooks, Hook):
        hooks = (hooks,)
    try:
        hooks = tuple(hooks)
    except TypeError as exc:
        raise TypeError(f"hooks must be a sequence of Hook objects (or None), got {type(hooks).__name__}") from exc
    for i, hook in enumerate(hooks):
        missing = [m for m in _HOOK_METHODS if not callable(getattr(hook, m, None))]
        if missing:
            raise TypeError(f"hooks[{i}] ({type(hook).__name__}) lacks the Hook methods {missing}")
    return hooks


def _check_term(term, target, hook, method):
    """A hook's term must broadcast to ``target`` without enlarging it."""
    try:
        ok = np.broadcast_shapes(np.shape(term), target) == target
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"{type(hook).__name__}.{method} returned a term of shape {np.shape(term)}, which does "
                         f"not broadcast to {target}")
    return term


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
    q, k, v = _check_qkv(q, k, v)
    causal = check_bool(causal, "causal")
    scale = _check_scale(scale, q.shape[-1])
    hooks = _check_hooks(hooks)
    target = q.shape[:-1] + (k.shape[-2],)
    bias = _check_broadcast(bias, "bias", target, q.dtype)
    mask = _check_broadcast(mask, "mask", target, q.dtype)
    logits = scale * (q @ np.swapaxes(k, -1, -2))
    if bias is not None:
        logits = logits + bias
    hook_caches = []
    for hook in hooks:
        term, hc = hook.logits(q, k, scale)
        hook_caches.append([hc, None])
        if term is not None:
            logits = logits + _check_term(term, target, hook, "logits")
    keep = np.ones(target, dtype=bool)
    if mask is not None:
        keep = keep & mask
    if causal:
        keep = keep & causal_mask(q.shape[-2], k.shape[-2])
    probs = _softmax(logits, keep, -1)
    out = probs @ v
    for hook, hc in zip(hooks, hook_caches):
        term, hc[1] = hook.values(probs)
        if term is not None:
            out = out + _check_term(term, out.shape, hook, "values")
    cache = {"q": q, "k": k, "v": v, "probs": probs, "scale": scale, "bias_shape": None if bias is None else bias.shape,
             "hooks": tuple(hooks), "hook_caches": hook_caches}
    return out, cache


_CACHE_KEYS = {"q", "k", "v", "probs", "scale", "bias_shape", "hooks", "hook_caches"}


def _check_cache(cache):
    """``(q, k, v, probs, scale)`` of a :func:`forward` cache, or ``TypeError`` for anything else."""
    ok = isinstance(cache, dict) and _CACHE_KEYS <= set(cache)
    if ok:
        q, k, v, probs, scale = (cache[name] for name in ("q", "k", "v", "probs", "scale"))
        ok = (all(isinstance(a, np.ndarray) and a.ndim >= 3 for a in (q, k, v, probs))
              and probs.shape == q.shape[:-1] + (k.shape[-2],) and isinstance(scale, float)
              and len(cache["hooks"]) == len(cache["hook_caches"]))
    if not ok:
        raise TypeError("cache must be the dict returned by posenc_np.attention.forward")
    return q, k, v, probs, scale


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
    q, k, v, probs, scale = _check_cache(cache)
    dout = as_float_array(dout, "dout")
    if dout.shape != probs.shape[:-1] + (v.shape[-1],):
        raise ValueError(f"dout must have shape {probs.shape[:-1] + (v.shape[-1],)}, got {dout.shape}")
    dv = np.swapaxes(probs, -1, -2) @ dout
    dprobs = dout @ np.swapaxes(v, -1, -2)
    for hook, (_, vc) in zip(cache["hooks"], cache["hook_caches"]):
        extra = hook.values_backward(dout, vc)
        if extra is not None:
            dprobs = dprobs + extra
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
    return np.swapaxes(x.reshape(x.shape[:-1] + (num_heads, x.shape[-1] // num_heads)), -2, -3)


def merge_heads(x) -> np.ndarray:
    """``(..., heads, T, d)`` to ``(..., T, heads * d)``. Its backward is :func:`split_heads`."""
    x = np.asarray(x)
    if x.ndim < 3:
        raise ValueError(f"x must be (..., heads, T, d), got shape {x.shape}")
    y = np.swapaxes(x, -2, -3)
    return y.reshape(y.shape[:-2] + (y.shape[-2] * y.shape[-1],))
