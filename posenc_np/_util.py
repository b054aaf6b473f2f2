"""Small array helpers shared by forward/backward pairs."""

from __future__ import annotations

import collections
import functools
import threading

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
    r"""Adjoint of the gather ``table[index]``: :math:`G[r] = \sum_{j:\,index_j = r} v_j`.

    ``index`` is an integer array of any shape; ``values`` has shape
    ``index.shape + row_shape``. Returns ``(num_rows,) + row_shape``; repeated indices
    accumulate and rows never indexed are 0.

    Implementation: stable-sort the indices, sum each run of equal indices with
    ``np.add.reduceat`` (in their original order, like ``np.add.at``) and write the sums to
    their rows, which is faster than ``np.add.at`` (``docs/benchmarks.md``, "Small choices").
    """
    index = np.asarray(index)
    if values.shape[: index.ndim] != index.shape:
        raise ValueError(f"values of shape {values.shape} do not start with index shape {index.shape}")
    flat = index.reshape(-1)
    rows = values.reshape((flat.size,) + values.shape[index.ndim:])
    out = np.zeros((num_rows,) + rows.shape[1:], dtype=values.dtype)
    if flat.size == 0:
        return out
    order = np.argsort(flat, kind="stable")
    sorted_ids = flat[order]
    starts = np.flatnonzero(np.concatenate([[True], sorted_ids[1:] != sorted_ids[:-1]]))
    out[sorted_ids[starts]] = np.add.reduceat(rows[order], starts, axis=0)
    return out


def normal_init(rng: np.random.Generator, std: float, shape, dtype=np.float64, what: str = "weights") -> np.ndarray:
    """``rng.normal(0, std, shape)`` cast to ``dtype``; ``ValueError`` if a draw is not finite there.

    ``std`` is a checked finite float >= 0; only an absurd one (1e308, or past float32's range for
    a float32 layer) can overflow, and then the error names ``init_std`` instead of leaving inf
    weights behind a ``RuntimeWarning``.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        w = rng.normal(0.0, std, size=shape).astype(dtype, copy=False)
    if not np.all(np.isfinite(w)):
        raise ValueError(f"init_std={std} gives {what} beyond {np.dtype(dtype)}'s range")
    return w


def memo_table(fn=None, *, maxsize: int = 32, max_bytes: int = 1 << 24):
    """Decorator: keep the arrays ``fn`` returns for its (hashable) arguments, read-only.

    For the static tables of an encoding that depend only on its configuration and the lengths
    (bucket maps, relative indices, sinusoids): a model computes each once per (config, length)
    instead of once per forward and layer. A small LRU of ``maxsize`` entries; results larger
    than ``max_bytes`` are returned but not kept. Thread-safe. Results are marked read-only, so
    a caller that modifies one gets an error instead of corrupting the cache.
    """
    if fn is None:
        return functools.partial(memo_table, maxsize=maxsize, max_bytes=max_bytes)
    cache: collections.OrderedDict = collections.OrderedDict()
    lock = threading.Lock()

    @functools.wraps(fn)
    def cached(*args):
        key = tuple((type(a), a) for a in args)  # 3 and np.uint64(3) are equal but compute differently
        with lock:
            hit = cache.get(key)
            if hit is not None:
                cache.move_to_end(key)
                return hit
        value = fn(*args)
        arrays = value if isinstance(value, tuple) else (value,)
        for a in arrays:
            a.flags.writeable = False
        if sum(a.nbytes for a in arrays) <= max_bytes:
            with lock:
                cache[key] = value
                if len(cache) > maxsize:
                    cache.popitem(last=False)
        return value

    cached.cache_clear = cache.clear
    return cached
