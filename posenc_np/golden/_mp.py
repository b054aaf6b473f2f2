"""Plumbing shared by the mpmath oracles (no formulas here, and no import of the library's
implementations): exact conversion of float64 inputs and filling object arrays."""

from __future__ import annotations

import mpmath as mp
import numpy as np


def mpf(x) -> mp.mpf:
    """The exact value of a float64 (or integer) input as an mpf."""
    return mp.mpf(float(x))


def grid(shape, fn) -> np.ndarray:
    """Object array of ``shape`` with ``out[idx] = fn(*idx)``."""
    out = np.empty(shape, dtype=object)
    for idx in np.ndindex(*shape):
        out[idx] = fn(*idx)
    return out
