r"""The small per-head MLP of FIRE and the dynamic position bias, forward and backward side by side.

A stack of affine layers :math:`z_l = h_{l-1} W_l + b_l`, :math:`h_l = \sigma(z_l)` for every
layer but the last, which stays linear: :math:`y = z_L`. The input is a scalar per entry (a
normalised or log-scaled distance), shape ``(n, 1)``; the output has one column per head.
Parameters are ``w1, b1, w2, b2, ...`` with ``w_l`` of shape ``(in, out)`` (``x @ w``: the
transpose of ``torch.nn.Linear.weight``).

Activations: ``relu`` (FIRE's reference MLP) and ``silu`` (:math:`z\,\mathrm{sigmoid}(z)`,
x-transformers' ``DynamicPositionBias``). The derivative of ``relu`` at 0 is taken as 0, as
PyTorch's autograd does.

The doors of FIRE and the dynamic position bias check a parameter dict with
:func:`check_mlp_params` and the grid of MLP inputs with :func:`check_mlp_grid`.
"""

from __future__ import annotations

import numpy as np

from .._checks import as_float_array, check_alloc, check_int, check_lengths, require

#: The hidden activations the MLPs use.
ACTIVATIONS = ("relu", "silu")


def sigmoid(z: np.ndarray) -> np.ndarray:
    """:math:`1/(1 + e^{-z})` without overflow (``tanh`` form)."""
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def _act(z: np.ndarray, activation: str) -> np.ndarray:
    return np.maximum(z, 0.0) if activation == "relu" else z * sigmoid(z)


def _act_backward(dh: np.ndarray, z: np.ndarray, activation: str) -> np.ndarray:
    r""":math:`\partial L/\partial z = \partial L/\partial h \cdot \sigma'(z)`; ``silu'`` is
    :math:`s + z s (1 - s)` with :math:`s = \mathrm{sigmoid}(z)`."""
    if activation == "relu":
        return dh * (z > 0)
    s = sigmoid(z)
    return dh * (s + z * s * (1.0 - s))


def layer_count(params: dict) -> int:
    """How many affine layers ``params`` holds (``w1, b1, ..., wL, bL``)."""
    n = 0
    while f"w{n + 1}" in params:
        n += 1
    return n


def check_mlp_params(params, num_heads=None, *, extra=(), layers=None) -> dict:
    """An MLP's ``params``: a dict with ``w1, b1, ..., wL, bL`` (``L >= 1``, ``layers`` when given),
    float arrays, ``w1`` of shape ``(1, width)``, each ``b`` matching its ``w``'s columns, each ``w``
    taking the previous width, and ``num_heads`` outputs when given; ``extra`` names further keys,
    each a float array of shape ``(1,)``. Returned as a dict of float arrays in one dtype."""
    require(isinstance(params, dict), f"params must be a dict of arrays (w1, b1, ..., wL, bL), got "
            f"{type(params).__name__}", TypeError)
    n = layer_count(params)
    require(n >= 1 and set(params) == {f"{p}{i}" for i in range(1, n + 1) for p in "wb"} | set(extra),
            f"params must have the keys w1, b1, ..., wL, bL (L >= 1){' and ' if extra else ''}{', '.join(extra)}; "
            f"got {sorted(map(str, params))}")
    require(layers in (None, n), f"params must hold {layers} layers (w1 .. w{layers}), got {sorted(params)}")
    out = {key: as_float_array(value, f"params[{key!r}]") for key, value in params.items()}
    for i in range(1, n + 1):
        w, b, width = out[f"w{i}"], out[f"b{i}"], 1 if i == 1 else out[f"w{i - 1}"].shape[1]
        require(w.ndim == 2 and w.shape[0] == width and w.shape[1] >= 1 and b.shape == (w.shape[1],),
                f"params['w{i}'] must be ({width}, out) and params['b{i}'] (out,), got {w.shape} and {b.shape}")
    require(num_heads in (None, out[f"w{n}"].shape[1]), f"params['w{n}'] must have num_heads = {num_heads} columns, "
            f"got {out[f'w{n}'].shape[1]}")
    for key in extra:
        require(out[key].shape == (1,), f"params[{key!r}] must have shape (1,), got {out[key].shape}")
    dtype = np.result_type(*out.values())
    return {key: value.astype(dtype, copy=False) for key, value in out.items()}


def check_mlp_grid(q_len, k_len, query_offset, width: int) -> tuple[int, int, int]:
    """``(q_len, k_len, query_offset)`` of an MLP bias over the grid (the offset defaults to
    ``k_len - q_len``, bottom-right), whose hidden activations ``(q_len * k_len, width)`` fit
    :data:`MAX_ALLOC_BYTES`."""
    q_len, k_len = check_lengths(q_len, k_len, "relative positions (q_len, k_len)")
    check_alloc((q_len * k_len, width), np.float64, "MLP hidden activations (q_len * k_len, width)")
    return q_len, k_len, (k_len - q_len if query_offset is None
                          else check_int(query_offset, "query_offset", minimum=-2**53, maximum=2**53))


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
