"""Small array helpers shared by forward/backward pairs."""

from __future__ import annotations

import numpy as np


def sum_to_shape(grad: np.ndarray, shape: tuple) -> np.ndarray:
    """Reduce a broadcast gradient back to ``shape`` (the adjoint of ``np.broadcast_to``).

    Leading axes that broadcasting added are summed away, and axes where ``shape`` has size
    1 but ``grad`` does not are summed with ``keepdims``.
    """
    shape = tuple(shape)
    extra = grad.ndim - len(shape)
    if extra < 0:
        raise ValueError(f"cannot reduce gradient of shape {grad.shape} to larger rank shape {shape}")
    if extra:
        grad = grad.sum(axis=tuple(range(extra)))
    axes = tuple(i for i, (g, s) in enumerate(zip(grad.shape, shape)) if s == 1 and g != 1)
    if axes:
        grad = grad.sum(axis=axes, keepdims=True)
    if grad.shape != shape:
        raise ValueError(f"gradient of shape {grad.shape} does not broadcast to {shape}")
    return grad


def scatter_add_rows(index: np.ndarray, values: np.ndarray, num_rows: int) -> np.ndarray:
    """Adjoint of the gather ``table[index]``: add ``values`` into the rows ``index`` selects.

    ``index`` is an integer array of any shape; ``values`` has shape
    ``index.shape + row_shape``. Returns ``(num_rows,) + row_shape``; repeated indices
    accumulate (``np.add.at``).
    """
    index = np.asarray(index)
    row_shape = values.shape[index.ndim:]
    if values.shape[: index.ndim] != index.shape:
        raise ValueError(f"values of shape {values.shape} do not start with index shape {index.shape}")
    out = np.zeros((num_rows,) + row_shape, dtype=values.dtype)
    np.add.at(out, index.reshape(-1), values.reshape((-1,) + row_shape))
    return out
