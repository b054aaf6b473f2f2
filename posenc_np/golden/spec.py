"""What a family contributes to the golden suite: encodings (oracle + library) and cases.

A family module ``posenc_np/golden/cases_<family>.py`` defines

``ENCODINGS``
    a list of :class:`GoldenEncoding`: for each encoding name a case may give, the mpmath oracle
    and the library evaluator, both taking ``(params, inputs)`` and returning a dict of named
    outputs;
``cases()``
    a function returning a list of :class:`CaseSpec`.

The oracle lives in ``oracle_<family>.py``, imports mpmath and never the implementation it
checks. Oracle outputs are NumPy *object* arrays of :class:`mpmath.mpf` (rounded once to
float64 by the generator), Python ``int`` (stored as int64) or ``bool``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

#: Significant decimal digits the oracle works at.
ORACLE_DIGITS = 60
ORACLE = {"name": "mpmath", "precision_digits": ORACLE_DIGITS}

Evaluator = Callable[[dict, dict], dict]


@dataclass(frozen=True)
class GoldenEncoding:
    """An encoding as golden cases name it (a case's ``encoding`` field), with its two independent
    evaluators: the mpmath ``oracle`` and the ``library`` evaluator."""

    name: str
    oracle: Evaluator
    library: Evaluator


@dataclass(frozen=True)
class CaseSpec:
    """One golden case before evaluation.

    ``conventions`` must give ``layout``, ``sign``, ``scale_placement`` and ``semantics``
    (``"n/a"`` where a convention does not apply). ``tolerances`` maps dtype names
    (:data:`.tolerance.DTYPES`, ``"float64"`` always present) to ``{"abs", "rel"}``: the bound
    ``|actual - expected| <= abs + rel * |expected|`` a correct implementation in that dtype
    meets, derived from ``error_model`` (one sentence naming the model of
    :mod:`.tolerance` and its inputs). ``reference_call`` names the usual third-party
    function the case corresponds to (``"n/a"`` when there is none). ``known_divergences``
    lists named third-party behaviours that legitimately differ from the outputs: dicts with
    ``implementation``, ``description``, ``inputs`` and ``outputs`` (arrays).
    """

    name: str
    encoding: str
    params: dict
    conventions: dict
    inputs: dict
    tolerances: dict
    error_model: str
    reference_call: str
    description: str = ""
    known_divergences: tuple = ()

    @property
    def tolerance(self) -> dict:
        """The float64 tolerance: the bound the library's float64 path is checked against."""
        return self.tolerances["float64"]


def divergence(implementation: str, description: str, inputs: dict, outputs: dict) -> dict:
    """One known divergence: what ``implementation`` returns for ``inputs`` where it differs."""
    return {"implementation": implementation, "description": description,
            "inputs": {k: np.asarray(v) for k, v in inputs.items()},
            "outputs": {k: np.asarray(v) for k, v in outputs.items()}}


def conventions(layout="n/a", sign="n/a", scale_placement="n/a", semantics="n/a") -> dict:
    """Build a conventions record (every key present; "n/a" where it does not apply)."""
    return {"layout": layout, "sign": sign, "scale_placement": scale_placement, "semantics": semantics}


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


def bucket_divergences(key: str, inputs: np.ndarray, exact: np.ndarray, ports: dict, why: str) -> tuple:
    """Known divergences of integer-bucket ports: for each ``implementation -> buckets it returns for
    inputs``, the inputs (named ``key``) where it differs from ``exact``, and its buckets there."""
    out = []
    for who, got in ports.items():
        where = np.flatnonzero(got != exact)
        if where.size:
            out.append(divergence(who, why, {key: inputs[where]}, {"bucket": got[where]}))
    return tuple(out)


def exact_normals(rng: np.random.Generator, shape) -> np.ndarray:
    """Normal-looking inputs ``k/32`` with ``|k| <= 127``: exactly representable in float64,
    float32, bfloat16 and float16, so that no rounding of the inputs enters a dtype's tolerance."""
    return np.clip(np.round(rng.standard_normal(shape) * 32), -127, 127) / 32


#: Positions of the long-context cases: 0..3, the 4k/8k/32k/128k/1M boundaries and their
#: neighbours, 2^23 and 10^7 (all exact in float32 as well).
LONG_POSITIONS = (0, 1, 2, 3, 4095, 4096, 4097, 8191, 8192, 8193, 32767, 32768, 32769, 131071, 131072, 131073,
                  999_999, 1_000_000, 1_000_001, 8_388_608, 9_999_999, 10_000_000)


def positions_up_to(limit: int) -> np.ndarray:
    """:data:`LONG_POSITIONS` up to ``limit``, plus ``limit - 1``, ``limit`` and ``limit + 1``."""
    return np.array(sorted({p for p in LONG_POSITIONS if p <= limit} | {limit - 1, limit, limit + 1}), dtype=np.int64)


def log_in(x, dtype) -> np.ndarray:
    """Correctly rounded natural log of values held in ``dtype`` (float32: evaluated in float64, rounded
    once), for emulating third-party arithmetic in a known-divergence entry."""
    return np.log(np.asarray(x, dtype=np.float64)).astype(dtype)
