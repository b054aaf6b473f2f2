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


def value(x) -> mp.mpf:
    """An mpf as it is, anything else (a float64 or integer input) converted exactly."""
    return x if isinstance(x, mp.mpf) else mpf(x)


def position_digits(positions) -> int:
    """Decimal digits an angle ``p * w`` needs beyond the working precision at the largest ``|p|``.

    An angle of size ``10^k`` keeps its relative precision but its *absolute* error, which is
    what survives reduction modulo ``2 pi``, grows by ``k`` digits; working ``k`` digits higher
    (from the frequencies on) keeps every table value at the full working precision
    (``p = 10^7``: 8 more digits than at ``p = 1``).
    """
    flat = np.asarray(positions, dtype=np.float64).ravel()
    largest = float(np.max(np.abs(flat), initial=0.0))
    return max(0, int(np.ceil(np.log10(largest + 1.0))))


def extra_digits_for(positions):
    """Context: the working precision raised by :func:`position_digits` of ``positions``."""
    return mp.extradps(position_digits(positions))
