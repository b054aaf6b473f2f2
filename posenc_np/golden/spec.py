"""What a family contributes to the golden suite: encodings (oracle + library) and cases.

A family module ``posenc_np/golden/cases_<family>.py`` defines

``ENCODINGS``
    a list of :class:`Encoding`: for each encoding name, the mpmath oracle and the library
    evaluator, both taking ``(params, inputs)`` and returning a dict of named outputs;
``cases()``
    a function returning a list of :class:`CaseSpec`.

The oracle lives in ``oracle_<family>.py``, imports mpmath and never the implementation it
checks. Oracle outputs are NumPy *object* arrays of :class:`mpmath.mpf` (rounded once to
float64 by the generator), Python ``int`` (stored as int64) or ``bool``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

#: Significant decimal digits the oracle works at.
ORACLE_DIGITS = 60
ORACLE = {"name": "mpmath", "precision_digits": ORACLE_DIGITS}
#: float64 unit roundoff, the unit in which case tolerances are written.
EPS = float(np.finfo(np.float64).eps)

Evaluator = Callable[[dict, dict], dict]


@dataclass(frozen=True)
class Encoding:
    """An encoding name with its two independent evaluators."""

    name: str
    oracle: Evaluator
    library: Evaluator


@dataclass(frozen=True)
class CaseSpec:
    """One golden case before evaluation.

    ``conventions`` must give ``layout``, ``sign``, ``scale_placement`` and ``semantics``
    (``"n/a"`` where a convention does not apply); ``tolerance`` is the bound the float64
    library path must meet: ``|actual - expected| <= abs + rel * |expected|``.
    """

    name: str
    encoding: str
    params: dict
    conventions: dict
    inputs: dict
    tolerance: dict
    description: str = ""


def conventions(layout="n/a", sign="n/a", scale_placement="n/a", semantics="n/a") -> dict:
    """Build a conventions record (every key present; "n/a" where it does not apply)."""
    return {"layout": layout, "sign": sign, "scale_placement": scale_placement, "semantics": semantics}


def tolerance(abs_eps: float = 0.0, rel_eps: float = 0.0) -> dict:
    """A tolerance written in units of float64 eps (``abs_eps * eps``, ``rel_eps * eps``)."""
    return {"abs": abs_eps * EPS, "rel": rel_eps * EPS}


def exact() -> dict:
    """Tolerance for integer/boolean outputs that must match exactly."""
    return {"abs": 0.0, "rel": 0.0}


def to_float64(obj_array) -> np.ndarray:
    """Round an array of mpmath numbers once to float64 (round-to-nearest)."""
    arr = np.asarray(obj_array, dtype=object)
    out = np.empty(arr.shape, dtype=np.float64)
    flat = out.reshape(-1)
    for i, v in enumerate(arr.reshape(-1)):
        flat[i] = float(v)  # mpf -> float is correctly rounded
    return out


def finish_oracle_output(value) -> np.ndarray:
    """Convert one oracle output to its stored dtype (float64, int64 or bool)."""
    arr = np.asarray(value, dtype=object) if not isinstance(value, np.ndarray) else value
    if arr.dtype == object:
        sample = next(iter(arr.reshape(-1)), 0.0)
        if isinstance(sample, (bool, np.bool_)):
            return arr.astype(bool)
        if isinstance(sample, (int, np.integer)):
            return arr.astype(np.int64)
        return to_float64(arr)
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64)
    if arr.dtype.kind == "b":
        return arr
    raise TypeError(f"oracle outputs must be object arrays of mpf/int/bool, got dtype {arr.dtype}")
