r"""The small per-head MLP of FIRE and the dynamic position bias, forward and backward side by side.

A stack of affine layers :math:`z_l = h_{l-1} W_l + b_l`, :math:`h_l = \sigma(z_l)` for every
layer but the last, which stays linear: :math:`y = z_L`. The input is a scalar per entry (a
normalised or log-scaled distance), shape ``(n, 1)``; the output has one column per head.
Parameters are ``w1, b1, w2, b2, ...`` with ``w_l`` of shape ``(in, out)`` (``x @ w``: the
transpose of ``torch.nn.Linear.weight``).

Activations: ``relu`` (FIRE's reference MLP) and ``silu`` (:math:`z\,\mathrm{sigmoid}(z)`,
x-transformers' ``DynamicPositionBias``). The derivative of ``relu`` at 0 is taken as 0, as
PyTorch's autograd does.
"""

from __future__ import annotations

import numpy as np

#: The hidden activations the MLPs use.
ACTIVATIONS = ("relu", "silu")


def _sigmoid(z: np.ndarray) -> np.ndarray:
    """:math:`1/(1 + e^{-z})` without overflow (``tanh`` form)."""
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def _act(z: np.ndarray, activation: str) -> np.ndarray:
    return np.maximum(z, 0.0) if activation == "relu" else z * _sigmoid(z)


def _act_backward(dh: np.ndarray, z: np.ndarray, activation: str) -> np.ndarray:
    r""":math:`\partial L/\partial z = \partial L/\partial h \cdot \sigma'(z)`; ``silu'`` is
    :math:`s + z s (1 - s)` with :math:`s = \mathrm{sigmoid}(z)`."""
    if activation == "relu":
        return dh * (z > 0)
    s = _sigmoid(z)
    return dh * (s + z * s * (1.0 - s))


def layer_count(params: dict) -> int:
    """How many affine layers ``params`` holds (``w1, b1, ..., wL, bL``)."""
    n = 0
    while f"w{n + 1}" in params:
        n += 1
    return n


def init_mlp(rng: np.random.Generator, sizes: tuple) -> dict:
    r"""``{"w1": (sizes[0], sizes[1]), "b1": (sizes[1],), ...}`` drawn from ``U(-a, a)``,
    :math:`a = 1/\sqrt{n_{in}}` (the default initialisation of ``torch.nn.Linear``, which the
    reference implementations of FIRE and the dynamic position bias use)."""
    params = {}
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:]), start=1):
        a = 1.0 / np.sqrt(n_in)
        params[f"w{i}"] = rng.uniform(-a, a, (n_in, n_out))
        params[f"b{i}"] = rng.uniform(-a, a, n_out)
    return params


def mlp(x: np.ndarray, params: dict, activation: str):
    """Forward: ``y`` of shape ``(n, out)`` for ``x`` of shape ``(n, 1)``, and the cache of the backward."""
    n_layers = layer_count(params)
    hs, zs = [x], []
    h = x
    for i in range(1, n_layers + 1):
        w = params[f"w{i}"]
        z = (h * w if w.shape[0] == 1 else h @ w) + params[f"b{i}"]  # one input: the product, without a matmul
        zs.append(z)
        h = z if i == n_layers else _act(z, activation)
        hs.append(h)
    return h, (hs, zs)


def mlp_backward(dy: np.ndarray, params: dict, cache, activation: str):
    r"""Backward of :func:`mlp`: ``(dx, grads)``, ``grads`` with the keys of ``params``.

    :math:`dW_l = h_{l-1}^\top dz_l`, :math:`db_l = \sum_n dz_l`, :math:`dh_{l-1} = dz_l W_l^\top`,
    :math:`dz_{l-1} = dh_{l-1}\,\sigma'(z_{l-1})`.
    """
    hs, zs = cache
    n_layers = len(zs)
    grads = {}
    dz = dy
    for i in range(n_layers, 0, -1):
        grads[f"w{i}"] = hs[i - 1].T @ dz
        grads[f"b{i}"] = dz.sum(axis=0)
        dh = dz @ params[f"w{i}"].T
        dz = dh if i == 1 else _act_backward(dh, zs[i - 2], activation)
    return dz, grads
