r"""The model's fast path: its LayerNorm, GELU, attention softmax, cross-entropy, gradient norms
and AdamW update computed by the fused Numba kernels of :mod:`posenc_np.kernels.layers`.

At a training step's sizes (rows of 64 to 256 float32) a NumPy call costs a few microseconds
of dispatch and a pass over memory, so the references of :mod:`posenc_np.layers`,
:mod:`posenc_np.optim` and :mod:`posenc_np.attention` spend most of their time between calls;
each kernel replaces a dozen of them by one pass. Every name here computes what its reference
computes, with the same signature, through the kernel when the arrays share the dtype float32
or float64 (:func:`posenc_np._backend.kernel_dtype`), and through the reference otherwise:

=========================================  ===========================================
reference                                  fused
=========================================  ===========================================
``layers.LayerNorm``                       :class:`FusedLayerNorm` (statistics in float64)
``layers.GELU`` (``"tanh"``)               :class:`FusedGELU` (the gate as a logistic function)
attention's softmax and its backward       :data:`SOFTMAX` (the pair ``attention`` takes)
``layers.softmax_cross_entropy``           :func:`softmax_cross_entropy`
``optim.global_norm``, ``clip_grad_norm``  :func:`global_norm`, :func:`clip_grad_norm`
``optim.Adam``                             :class:`FusedAdam` (bit-identical)
=========================================  ===========================================

The kernels' numerics are in :mod:`posenc_np.kernels.layers`. :func:`ops` is the one choice a
model and its training make (:class:`posenc_np.model.Transformer` holds it as ``model.ops``;
:func:`posenc_np.train.train` and :func:`~posenc_np.train.evaluate` use the model's): an
:class:`Ops` of the references or of these, by the backend rule of :mod:`posenc_np._backend`.
The kernels win from one row, so ``"auto"`` has no size threshold.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from . import attention, layers, optim
from ._backend import KERNEL_DTYPES, choose, kernel_dtype, kernels
from ._checks import check_real

__all__ = ["NUMBA", "NUMPY", "SOFTMAX", "FusedAdam", "FusedGELU", "FusedLayerNorm", "Ops", "clip_grad_norm",
           "global_norm", "ops", "softmax_cross_entropy"]


# --------------------------------------------------------------------------- layers

def layer_norm(x, gamma, beta, eps):
    """:func:`posenc_np.layers.layer_norm` in one kernel pass per row; ``rstd`` float64 ``x.shape[:-1]``."""
    if kernel_dtype(x, gamma, beta):
        return kernels("layers").layer_norm_forward(x, gamma, beta, eps, check=False)
    return layers.layer_norm(x, gamma, beta, eps)


def layer_norm_backward(dy, xhat, rstd, gamma):
    """:func:`posenc_np.layers.layer_norm_backward` for either forward's cache (the kernel's ``rstd``
    has one axis less), by the kernel when the dtypes allow."""
    if rstd.ndim == xhat.ndim:  # the reference's forward
        return layers.layer_norm_backward(dy, xhat, rstd, gamma)
    if kernel_dtype(dy, xhat, gamma):
        return kernels("layers").layer_norm_backward(dy, xhat, rstd, gamma, check=False)
    return layers.layer_norm_backward(dy, xhat, rstd.astype(xhat.dtype)[..., None], gamma)


def gelu_with_slope(x, approximate):
    """:func:`posenc_np.layers.gelu_with_slope`; ``"tanh"`` in one kernel pass."""
    if approximate == "tanh" and kernel_dtype(x):
        return kernels("layers").gelu_tanh(x, layers.GELU_CLIP, check=False)
    return layers.gelu_with_slope(x, approximate)


class FusedLayerNorm(layers.LayerNorm):
    """:class:`posenc_np.layers.LayerNorm` by the fused kernels (2.5-5x faster at training sizes).

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.fused import FusedLayerNorm
    >>> from posenc_np.layers import LayerNorm
    >>> x, dy = np.random.default_rng(0).standard_normal((2, 3, 8))
    >>> fused, ref = FusedLayerNorm(8, dtype=np.float64), LayerNorm(8, dtype=np.float64)
    >>> bool(np.allclose(fused.forward(x), ref.forward(x), rtol=1e-13, atol=1e-13))     # the same formula
    True
    >>> bool(np.allclose(fused.backward(dy), ref.backward(dy), rtol=1e-12, atol=1e-12))
    True
    """

    layer_norm, layer_norm_backward = staticmethod(layer_norm), staticmethod(layer_norm_backward)


class FusedGELU(layers.GELU):
    """:class:`posenc_np.layers.GELU`, ``"tanh"`` by the fused kernel (2-5x faster at training sizes).

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.fused import FusedGELU
    >>> act = FusedGELU()
    >>> act.forward(np.array([0.0, 1.0])).round(6).tolist()     # as layers.GELU: x Phi(x), tanh form
    [0.0, 0.841192]
    >>> act.backward(np.array([1.0, 1.0])).round(6).tolist()    # Phi(x) + x Phi'(x)
    [0.5, 1.082964]
    """

    gelu_with_slope = staticmethod(gelu_with_slope)


# --------------------------------------------------------------------------- attention softmax

def softmax(logits, keep):
    """Attention's masked softmax over the last axis by the kernel; the rows it flags (a kept ``+inf``,
    rare) by the reference."""
    if not kernel_dtype(logits):
        return attention.masked_softmax(logits, keep, -1)
    probs, inf_rows = kernels("layers").softmax_rows(logits, keep, check=False)
    if inf_rows.any():
        width = logits.shape[-1]
        rows = np.flatnonzero(inf_rows)
        mask = np.broadcast_to(True if keep is None else keep, logits.shape).reshape(-1, width)
        probs.reshape(-1, width)[rows] = attention.masked_softmax(logits.reshape(-1, width)[rows], mask[rows], -1)
    return probs


def softmax_backward(dprobs, probs):
    """:func:`posenc_np.attention.softmax_backward` over the last axis, one kernel pass per row."""
    if kernel_dtype(dprobs, probs):
        return kernels("layers").softmax_rows_backward(dprobs, probs, check=False)
    return attention.softmax_backward(dprobs, probs)


#: The softmax pair the attention core takes (``softmax=``).
SOFTMAX = (softmax, softmax_backward)


# --------------------------------------------------------------------------- cross-entropy

def cross_entropy_rows(logits, targets):
    """:func:`posenc_np.layers.cross_entropy_rows`, one kernel pass per row; rows with a NaN or
    infinite logit by the reference."""
    if not (kernel_dtype(logits) and logits.size):
        return layers.cross_entropy_rows(logits, targets)
    width = logits.shape[-1]
    rows, flat_t = np.ascontiguousarray(logits).reshape(-1, width), targets.reshape(-1)
    probs, logp_t, bad = kernels("layers").cross_entropy_rows(rows, flat_t, check=False)
    if bad.any():
        idx = np.flatnonzero(bad)
        probs[idx], logp_t[idx] = layers.cross_entropy_rows(rows[idx], flat_t[idx])
    return probs.reshape(logits.shape), logp_t.reshape(targets.shape)


def softmax_cross_entropy(logits: ArrayLike, targets: ArrayLike, *, ignore_index: int = -100) -> tuple[float, dict]:
    """:func:`posenc_np.layers.softmax_cross_entropy` with :func:`cross_entropy_rows` (its exp within
    0.91 ulp in float32, 2 in float64); the cache is the reference's, for its backward.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import fused
    >>> logits = np.array([[0.0, 0.0, np.log(2.0)], [5.0, 1.0, 2.0]])
    >>> loss, cache = fused.softmax_cross_entropy(logits, np.array([2, -100]))   # the second row is ignored
    >>> round(loss, 6), cache["count"]       # -log(2 / 4)
    (0.693147, 1)
    """
    logits, targets, keep = layers.check_cross_entropy(logits, targets, ignore_index)
    return layers.cross_entropy_loss(*cross_entropy_rows(logits, targets), targets, keep)


# --------------------------------------------------------------------------- optimizer

def sum_of_squares(g) -> float:
    """:func:`posenc_np.optim.sum_of_squares`, one kernel pass for a C-contiguous float32/float64 array
    (the same sum in another order: within a few ulps)."""
    if g.flags.c_contiguous and kernel_dtype(g):
        return kernels("layers").sum_squares(g, check=False)
    return optim.sum_of_squares(g)


def sums_of_squares(grads: dict) -> list:
    """:func:`sum_of_squares` of every array."""
    return [sum_of_squares(g) for g in grads.values()]


def global_norm(grads: dict) -> float:
    """:func:`posenc_np.optim.global_norm` with :func:`sums_of_squares`.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import fused
    >>> fused.global_norm({"w": np.array([3.0, 4.0]), "b": np.array([12.0])})    # sqrt(9 + 16 + 144)
    13.0
    """
    optim.check_gradients(grads)
    return optim.norm_from_sums(grads, sums_of_squares(grads))


def clip_grad_norm(grads: dict, max_norm: float) -> float:
    """:func:`posenc_np.optim.clip_grad_norm` with :func:`sums_of_squares` (one pass per array serves
    the norm and the finiteness test).

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import fused
    >>> grads = {"w": np.array([3.0, 4.0])}
    >>> fused.clip_grad_norm(grads, 1.0)      # the norm before clipping
    5.0
    >>> grads["w"].round(6).tolist()           # scaled in place by 1 / (5 + 1e-6)
    [0.6, 0.8]
    """
    max_norm = check_real(max_norm, "max_norm", positive=True)
    optim.check_gradients(grads)
    return optim.clip_to_norm(grads, max_norm, sums_of_squares(grads))


def adamw_update(p, g, m, v, b1, b2, decay, step_size, root_bc2, eps):
    """:func:`posenc_np.optim.adamw_update` by the kernel (the same operations in the same order and
    dtype: bit-identical, ~3x faster) when ``p``, ``g``, ``m``, ``v`` are C-contiguous arrays of one
    float32/float64 dtype and ``p``, ``m``, ``v`` writeable."""
    if (kernel_dtype(p, g, m, v) and p.flags.c_contiguous and g.flags.c_contiguous and m.flags.c_contiguous
            and v.flags.c_contiguous and p.flags.writeable and m.flags.writeable and v.flags.writeable):
        kernels("layers").adamw_update(p, g, m, v, b1=b1, b2=b2, decay=decay, step_size=step_size,
                                       root_bc2=root_bc2, eps=eps, check=False)
    else:
        optim.adamw_update(p, g, m, v, b1, b2, decay, step_size, root_bc2, eps)


class FusedAdam(optim.Adam):
    """:class:`posenc_np.optim.Adam` with each parameter's update, and the finiteness test of its
    gradient, by the fused kernels.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.fused import FusedAdam
    >>> params = {"w": np.ones((2, 2))}
    >>> FusedAdam(params, lr=0.1).step({"w": np.array([[0.5, -2.0], [1.0, 0.0]])})
    >>> params["w"].round(6).tolist()          # step 1 moves a weight by lr against its gradient's sign
    [[0.9, 1.1], [0.9, 1.0]]
    """

    adamw_update, sum_of_squares = staticmethod(adamw_update), staticmethod(sum_of_squares)


# --------------------------------------------------------------------------- the choice

@dataclass(frozen=True)
class Ops:
    """The operations a model and its training run where a fused kernel exists: :data:`NUMPY`
    (the references) or :data:`NUMBA` (this module).

    Examples
    --------
    >>> from posenc_np import fused, layers
    >>> fused.NUMPY.LayerNorm is layers.LayerNorm, fused.NUMBA.LayerNorm is fused.FusedLayerNorm
    (True, True)
    >>> fused.NUMBA.backend, fused.NUMPY.softmax is None     # None: the attention core's own softmax
    ('numba', True)
    """

    backend: str
    LayerNorm: type
    GELU: type
    softmax: tuple | None  #: the attention core's ``softmax=`` (None: its reference)
    softmax_cross_entropy: Callable
    global_norm: Callable
    clip_grad_norm: Callable
    Adam: type


NUMPY = Ops("numpy", layers.LayerNorm, layers.GELU, None, layers.softmax_cross_entropy, optim.global_norm,
            optim.clip_grad_norm, optim.Adam)
NUMBA = Ops("numba", FusedLayerNorm, FusedGELU, SOFTMAX, softmax_cross_entropy, global_norm, clip_grad_norm,
            FusedAdam)


def ops(backend: str, dtype: DTypeLike) -> Ops:
    """The :class:`Ops` of a model of ``dtype`` for ``backend`` (``"auto"``, ``"numpy"``, ``"numba"``): the
    fused kernels take float32 and float64 and win at every size, so ``"auto"`` is :data:`NUMBA` for
    those dtypes and :data:`NUMPY` for float16.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import fused
    >>> fused.ops("auto", "float32") is fused.NUMBA, fused.ops("numpy", "float32") is fused.NUMPY
    (True, True)
    >>> fused.ops("auto", np.float16).backend       # the kernels take float32 and float64 only
    'numpy'
    >>> fused.ops("numba", np.float16)
    Traceback (most recent call last):
        ...
    TypeError: backend='numba' needs a float32 or float64 model
    """
    takes = np.dtype(dtype) in KERNEL_DTYPES
    return NUMBA if choose(backend, kernel_takes=takes, kernel_needs="a float32 or float64 model") == "numba" else NUMPY
