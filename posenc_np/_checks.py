"""Argument validation shared by every module: the checks at the doors.

Every public function validates its arguments with these helpers so that bad input fails
fast with a ``TypeError`` (wrong kind of thing) or ``ValueError`` (right kind, wrong value)
whose message names the argument, shows the value and says what was expected. Below the
door, the encoding modules compute with unchecked functions (``docs/architecture.md``).

These are the generic checks (integers, reals, choices, dtypes, arrays, sizes, ``out=``
arrays); the argument groups of one family live in :mod:`posenc_np._family_checks`. This
module imports nothing from the package, so every layer may use it.
"""

from __future__ import annotations

import numbers

import numpy as np

__all__ = [
    "MAX_ALLOC_BYTES",
    "as_float_array",
    "as_int_array",
    "as_positions",
    "check_alloc",
    "check_angles",
    "check_bool",
    "check_choice",
    "check_even",
    "check_float_dtype",
    "check_grad",
    "check_int",
    "check_lengths",
    "check_out",
    "check_real",
    "shares_memory",
]

#: Largest array (in bytes) a function builds from integer size arguments alone (a table of
#: ``positions.size x dim``, a ``(q_len, k_len)`` index matrix, a layer's weights). Larger
#: requests raise ``ValueError`` naming the sizes instead of a ``MemoryError`` or an
#: ``OverflowError`` from deep inside NumPy. 4 GiB: far past any encoding table or layer this
#: library is meant for (a float64 table of 2^29 entries), small enough that a typo
#: (``dim=10**12``) fails at once instead of exhausting the machine's memory.
MAX_ALLOC_BYTES = 1 << 32


def _show(value, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_int(value, name: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """Return ``value`` as a Python int, or raise.

    ``bool`` is rejected (``True`` is not a head count). ``minimum`` and ``maximum`` are inclusive.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {_show(value)}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {_show(value)}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be an integer <= {maximum}, got {_show(value)}")
    return value


def check_bool(value, name: str) -> bool:
    """Return ``value`` as a Python bool (``bool`` or ``np.bool_`` only; ``0``/``1`` are not flags)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {_show(value)}")
    return bool(value)


def check_alloc(shape, dtype, what: str, *, limit: int = MAX_ALLOC_BYTES, limit_name: str = "MAX_ALLOC_BYTES",
                hint: str = "") -> tuple:
    """Raise ``ValueError`` when an array of ``shape`` and ``dtype`` would exceed ``limit`` bytes.

    ``shape`` holds non-negative Python ints (possibly huge); ``what`` names the array and the
    arguments that sized it, e.g. ``"sinusoidal table positions.shape + (dim,)"``; ``hint``
    (optional) says what to do instead. Returns the shape as a tuple of ints.
    """
    shape = tuple(int(n) for n in shape)
    nbytes = np.dtype(dtype).itemsize
    for n in shape:
        nbytes *= n
    if nbytes > limit:
        raise ValueError(f"{what} of shape {shape} ({np.dtype(dtype)}) would need {nbytes} bytes, more than "
                         f"{limit_name} = {limit} bytes{'; ' + hint if hint else ''}")
    return shape


def check_real(
    value,
    name: str,
    *,
    positive: bool = False,
    nonnegative: bool = False,
    allow_none: bool = False,
):
    """Return ``value`` as a finite Python float, or raise.

    NaN and infinities are always rejected; ``positive`` requires ``> 0``,
    ``nonnegative`` requires ``>= 0``.
    """
    if value is None and allow_none:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {_show(value)}")
    value = float(value)
    if not np.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if positive and not value > 0:
        raise ValueError(f"{name} must be > 0, got {value}")
    if nonnegative and not value >= 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return value


def check_choice(value, name: str, choices) -> str:
    """Return ``value`` if it is one of ``choices`` (strings), else raise."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be one of {sorted(choices)}, got {type(value).__name__} {_show(value)}")
    if value not in choices:
        raise ValueError(f"{name} must be one of {sorted(choices)}, got {value!r}")
    return value


def check_float_dtype(dtype, name: str = "dtype") -> np.dtype:
    """Return ``np.dtype(dtype)`` if it is float16/32/64, else raise."""
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"{name} must be a NumPy floating dtype, got {_show(dtype)}") from exc
    if dt.kind != "f":
        raise TypeError(f"{name} must be a NumPy floating dtype (float16/32/64), got {dt}")
    return dt


def _numeric_array(x, name: str) -> np.ndarray:
    try:
        arr = np.asarray(x)
    except Exception as exc:  # ragged lists and the like
        raise TypeError(f"{name} must be array-like of numbers: {exc}") from exc
    if arr.dtype.kind not in "iuf":
        raise TypeError(
            f"{name} must hold integers or floats, got dtype {arr.dtype} "
            f"(booleans, strings and objects are not positions or values)"
        )
    return arr


def as_positions(x, name: str = "positions") -> np.ndarray:
    """Positions: any-shape integer or float array; finite. Returned without copying."""
    arr = _numeric_array(x, name)
    if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite (no NaN or inf)")
    return arr


def as_int_array(x, name: str) -> np.ndarray:
    """Integer array (int64). Floats holding whole numbers are *not* accepted; unsigned values
    past the int64 range raise instead of wrapping to negative numbers."""
    arr = _numeric_array(x, name)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an integer array, got dtype {arr.dtype}")
    if arr.dtype == np.uint64 and arr.size and arr.max() > np.iinfo(np.int64).max:
        raise ValueError(f"{name} must fit in int64, got {int(arr.max())}")
    return arr.astype(np.int64, copy=False)


def as_float_array(x, name: str, *, ndim_min: int = 0) -> np.ndarray:
    """Floating array (dtype preserved; integers are converted to float64)."""
    arr = _numeric_array(x, name)
    if arr.dtype.kind != "f":
        arr = arr.astype(np.float64)
    if arr.ndim < ndim_min:
        raise ValueError(f"{name} must have at least {ndim_min} dimensions, got shape {arr.shape}")
    return arr


def check_angles(positions: np.ndarray, freqs: np.ndarray, what: str = "positions * inv_freq") -> None:
    """Raise ``ValueError`` when some angle ``p * omega`` would overflow float64 (its sin/cos
    would be NaN). ``positions`` and ``freqs`` are float64 arrays with finite values."""
    if positions.size == 0 or freqs.size == 0:
        return
    p, w = float(np.max(np.abs(positions))), float(np.max(np.abs(freqs)))
    if not np.isfinite(p * w):
        raise ValueError(f"{what} overflows float64 (|position| up to {p:.6g}, frequency up to {w:.6g}); the "
                         "angles, and their sin and cos, would not be finite")


def check_lengths(q_len, k_len, what: str, itemsize_dtype=np.int64) -> tuple[int, int]:
    """``q_len``, ``k_len`` as ints >= 0 whose ``(q_len, k_len)`` matrix, and the two position
    ranges it is built from, fit :data:`MAX_ALLOC_BYTES` (so a zero-size matrix with a huge
    other side cannot allocate a huge ``arange`` either)."""
    q_len = check_int(q_len, "q_len", minimum=0)
    k_len = check_int(k_len, "k_len", minimum=0)
    check_alloc((q_len,), np.int64, "query positions (q_len,)")
    check_alloc((k_len,), np.int64, "key positions (k_len,)")
    check_alloc((q_len, k_len), itemsize_dtype, what)
    return q_len, k_len


def check_out_form(out, like: np.ndarray, name: str, like_name: str = "the input"):
    """``out=`` for a result shaped like ``like``: None, or a writeable ndarray of ``like``'s shape
    and dtype (either byte order) without overlapping elements. Returns ``out``."""
    if out is None:
        return None
    if not isinstance(out, np.ndarray):
        raise TypeError(f"{name} must be a NumPy array or None, got {type(out).__name__}")
    if out.shape != like.shape:
        raise ValueError(f"{name} must have {like_name}'s shape {like.shape}, got {out.shape}")
    if out.dtype.newbyteorder("=") != like.dtype.newbyteorder("="):
        raise TypeError(f"{name} must have {like_name}'s dtype {like.dtype}, got {out.dtype}")
    if not out.flags.writeable:
        raise ValueError(f"{name} is read-only")
    if any(st == 0 and n > 1 for st, n in zip(out.strides, out.shape)):
        raise ValueError(f"{name} has overlapping elements (a zero stride, strides {out.strides}); "
                         "it cannot hold a result")
    return out


def check_out(out, like: np.ndarray, name: str, *others: np.ndarray):
    """:func:`check_out_form`, and ``out`` may *be* ``like`` (the same view: in place) but shares
    no memory with it otherwise, nor with any of ``others`` (the other inputs)."""
    if check_out_form(out, like, name) is None:
        return None
    same_view = (out.__array_interface__["data"][0] == like.__array_interface__["data"][0]
                 and out.strides == like.strides)
    for other, what in ((like, "the input"), *((o, "another input") for o in others)):
        if (other is not like or not same_view) and shares_memory(out, other):
            raise ValueError(f"{name} partially overlaps {what}; pass the input itself (in place) or a "
                             "separate array")
    return out


def shares_memory(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``a`` and ``b`` share an element: exact, with a work bound (a problem too hard to
    decide counts as sharing). The kernels use it too."""
    if not np.may_share_memory(a, b):
        return False
    try:
        return bool(np.shares_memory(a, b, max_work=10**6))
    except np.exceptions.TooHardError:
        return True


def check_even(value, name: str, *, minimum: int = 2, maximum: int | None = None) -> int:
    """An even integer ``>= minimum`` (a channel count that is split into pairs)."""
    value = check_int(value, name, minimum=minimum, maximum=maximum)
    if value % 2:
        raise ValueError(f"{name} must be even, got {value}")
    return value


def check_grad(grad, name: str, shape: tuple) -> np.ndarray:
    """An upstream gradient: a float array of exactly ``shape`` (the forward output's)."""
    grad = as_float_array(grad, name)
    if grad.shape != shape:
        raise ValueError(f"{name} must have shape {shape}, got {grad.shape}")
    return grad
