"""Argument validation shared by every module: the checks at the doors.

Bad input fails fast with a ``TypeError`` (wrong kind of thing) or ``ValueError`` (right kind,
wrong value) whose message names the argument, shows the value and says what was expected.
This module holds the generic checks (integers, reals, choices, dtypes, arrays, sizes, ``out=``
arrays) and the few a door shares with its Numba kernel (the kernels import only this
foundation): the RoPE tables and ALiBi's slopes, grouped heads and exact distances. Every other
check stands in the module whose door makes it. This module imports nothing from the package.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Collection, Iterable

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

__all__ = [
    "MAX_ALLOC_BYTES",
    "ROPE_LAYOUTS",
    "as_float_array",
    "as_int_array",
    "as_positions",
    "check_alloc",
    "check_bool",
    "check_choice",
    "check_even",
    "check_exact_distances",
    "check_float_dtype",
    "check_grad",
    "check_grouped_heads",
    "check_int",
    "check_lengths",
    "check_out",
    "check_real",
    "check_rope_tables",
    "check_slopes",
    "require",
    "shares_memory",
]

#: Largest array (in bytes) a function builds from integer size arguments alone (a table of
#: ``positions.size x dim``, a ``(q_len, k_len)`` index matrix, a layer's weights). Larger
#: requests raise ``ValueError`` naming the sizes instead of a ``MemoryError`` or an
#: ``OverflowError`` from deep inside NumPy. 4 GiB: far past any encoding table or layer this
#: library is meant for, small enough that a typo (``dim=10**12``) fails at once.
MAX_ALLOC_BYTES = 1 << 32


def _show(value, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def require(ok: object, message: str, error: type = ValueError) -> None:
    """The one-line requirement of a door: raise ``error(message)`` unless ``ok``.

    ``message`` names the argument, shows the value and says what was expected, e.g.
    ``require(d % 2 == 0, f"dim must be even, got {d}")``.
    """
    if not ok:
        raise error(message)


def _kind(value, name: str, kind: type, what: str) -> None:
    """``TypeError`` unless ``value`` is a ``kind`` (bools are never numbers)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, kind):
        raise TypeError(f"{name} must be {what}, got {type(value).__name__} {_show(value)}")


def check_int(value: object, name: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """``value`` as a Python int (``bool`` rejected: ``True`` is not a head count); bounds inclusive."""
    _kind(value, name, numbers.Integral, "an integer")
    value = int(value)
    low = minimum is not None and value < minimum
    if low or (maximum is not None and value > maximum):  # (messages are built only on failure)
        raise ValueError(f"{name} must be an integer {f'>= {minimum}' if low else f'<= {maximum}'}, got {_show(value)}")
    return value


def check_even(value: object, name: str, *, minimum: int = 2, maximum: int | None = None) -> int:
    """An even integer ``>= minimum`` (a channel count that is split into pairs)."""
    value = check_int(value, name, minimum=minimum, maximum=maximum)
    require(value % 2 == 0, f"{name} must be even, got {value}")
    return value


def check_bool(value: object, name: str) -> bool:
    """``value`` as a Python bool (``bool`` or ``np.bool_`` only; ``0``/``1`` are not flags)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {_show(value)}")
    return bool(value)


def check_real(value: object, name: str, *, positive: bool = False, nonnegative: bool = False,
               maximum: float | None = None, allow_none: bool = False) -> float | None:
    """``value`` as a finite Python float (NaN and infinities always rejected); ``positive``: ``> 0``,
    ``nonnegative``: ``>= 0``, ``maximum``: at most that; ``allow_none``: None passes."""
    if value is None and allow_none:
        return None
    _kind(value, name, numbers.Real, "a real number")
    value = float(value)
    bad = ("finite" if not math.isfinite(value)
           else "> 0" if positive and not value > 0
           else ">= 0" if nonnegative and not value >= 0
           else f"<= {maximum}" if maximum is not None and value > maximum else "")
    if bad:
        raise ValueError(f"{name} must be {bad}, got {value}")
    return value


def check_choice(value: object, name: str, choices: Collection[str]) -> str:
    """``value`` if it is one of ``choices`` (strings), else raise (messages built only on failure)."""
    if not isinstance(value, str) or value not in choices:
        error = ValueError if isinstance(value, str) else TypeError
        raise error(f"{name} must be one of {sorted(choices)}, got "
                    + (repr(value) if error is ValueError else f"{type(value).__name__} {_show(value)}"))
    return value


def check_float_dtype(dtype: DTypeLike, name: str = "dtype") -> np.dtype:
    """``np.dtype(dtype)`` if it is float16/32/64, else ``TypeError``."""
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"{name} must be a NumPy floating dtype, got {_show(dtype)}") from exc
    if dt.kind != "f":
        raise TypeError(f"{name} must be a NumPy floating dtype (float16/32/64), got {dt}")
    return dt


def check_alloc(shape: Iterable[int], dtype: DTypeLike, what: str, *, limit: int = MAX_ALLOC_BYTES,
                limit_name: str = "MAX_ALLOC_BYTES", hint: str = "") -> tuple:
    """Raise ``ValueError`` when an array of ``shape`` (non-negative ints, possibly huge) and ``dtype``
    would exceed ``limit`` bytes; ``what`` names the array and the arguments that sized it, ``hint``
    what to do instead. Returns the shape as a tuple of ints."""
    shape = tuple(int(n) for n in shape)
    nbytes = np.dtype(dtype).itemsize * math.prod(shape)
    if nbytes > limit:
        raise ValueError(f"{what} of shape {shape} ({np.dtype(dtype)}) would need {nbytes} bytes, more than "
                         f"{limit_name} = {limit} bytes{'; ' + hint if hint else ''}")
    return shape


def check_lengths(q_len: object, k_len: object, what: str, itemsize_dtype: DTypeLike = np.int64) -> tuple[int, int]:
    """``q_len``, ``k_len`` as ints >= 0 whose ``(q_len, k_len)`` matrix, and the two position ranges
    it is built from, fit :data:`MAX_ALLOC_BYTES` (a zero-size matrix cannot hide a huge ``arange``)."""
    q_len, k_len = check_int(q_len, "q_len", minimum=0), check_int(k_len, "k_len", minimum=0)
    check_alloc((q_len,), np.int64, "query positions (q_len,)")
    check_alloc((k_len,), np.int64, "key positions (k_len,)")
    check_alloc((q_len, k_len), itemsize_dtype, what)
    return q_len, k_len


# --------------------------------------------------------------------------- arrays

def _numeric_array(x, name: str) -> np.ndarray:
    try:
        arr = np.asarray(x)
    except Exception as exc:  # ragged lists and the like
        raise TypeError(f"{name} must be array-like of numbers: {exc}") from exc
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"{name} must hold integers or floats, got dtype {arr.dtype} (booleans, strings, "
                        "complex numbers and objects are not positions or values)")
    return arr


def as_positions(x: ArrayLike, name: str = "positions") -> np.ndarray:
    """Positions: any-shape integer or float array; finite. Returned without copying."""
    arr = _numeric_array(x, name)
    require(arr.dtype.kind != "f" or bool(np.all(np.isfinite(arr))), f"{name} must be finite (no NaN or inf)")
    return arr


def as_int_array(x: ArrayLike, name: str) -> np.ndarray:
    """An int64 array. Floats holding whole numbers are *not* accepted; unsigned values past the
    int64 range raise instead of wrapping to negative numbers."""
    arr = _numeric_array(x, name)
    require(arr.dtype.kind in "iu", f"{name} must be an integer array, got dtype {arr.dtype}", TypeError)
    if arr.dtype == np.uint64 and arr.size and arr.max() > np.iinfo(np.int64).max:
        raise ValueError(f"{name} must fit in int64, got {int(arr.max())}")
    return arr.astype(np.int64, copy=False)


def as_float_array(x: ArrayLike, name: str, *, ndim_min: int = 0) -> np.ndarray:
    """A floating array (dtype preserved; integers are converted to float64)."""
    arr = _numeric_array(x, name)
    if arr.dtype.kind != "f":
        arr = arr.astype(np.float64)
    if arr.ndim < ndim_min:
        raise ValueError(f"{name} must have at least {ndim_min} dimensions, got shape {arr.shape}")
    return arr


def check_grad(grad: ArrayLike, name: str, shape: tuple) -> np.ndarray:
    """An upstream gradient: a float array of exactly ``shape`` (the forward output's)."""
    grad = as_float_array(grad, name)
    require(grad.shape == shape, f"{name} must have shape {shape}, got {grad.shape}")
    return grad


def check_out(out: object, like: np.ndarray, name: str, *others: np.ndarray, like_name: str = "the input",
              overlap: bool = False) -> np.ndarray | None:
    """``out=`` for a result shaped like ``like``: None, or a writeable ndarray of ``like``'s shape and
    dtype (either byte order) without overlapping elements. Unless ``overlap`` (a kernel that copies
    overlapping inputs first), it may *be* ``like`` (the same view: in place) but shares no memory
    with it otherwise, nor with any of ``others`` (the other inputs). Returns ``out``."""
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
        raise ValueError(f"{name} has overlapping elements (a zero stride, strides {out.strides}); it cannot hold a "
                         "result")
    same_view = (out.__array_interface__["data"][0] == like.__array_interface__["data"][0]
                 and out.strides == like.strides)
    for other in () if overlap else (like, *others):
        if (other is not like or not same_view) and shares_memory(out, other):
            raise ValueError(f"{name} partially overlaps {'the input' if other is like else 'another input'}; "
                             "pass the input itself (in place) or a separate array")
    return out


def shares_memory(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``a`` and ``b`` share an element: exact, with a work bound (a problem too hard to
    decide counts as sharing). The kernels use it too."""
    try:
        return np.may_share_memory(a, b) and bool(np.shares_memory(a, b, max_work=10**6))
    except np.exceptions.TooHardError:
        return True


# --------------------------------------------------------------------------- shared with the RoPE kernel

#: Channel layouts of a RoPE table: which channels form a pair (see :mod:`posenc_np.rope`).
ROPE_LAYOUTS = ("half", "interleaved")


def check_rope_tables(x: np.ndarray, cos: ArrayLike, sin: ArrayLike, name: str) -> tuple[np.ndarray, np.ndarray]:
    """RoPE tables that fit ``x`` (:func:`posenc_np.rope.apply` and the kernel's ``rope_apply``): float
    arrays of one shape ``(..., d)``, ``d`` even and ``0 < d <= x.shape[-1]``, leading axes that
    broadcast to ``x``'s. Returns the tables. (It runs on every rotation: messages only on failure.)"""
    cos, sin = as_float_array(cos, "cos", ndim_min=1), as_float_array(sin, "sin")
    if cos.shape != sin.shape:
        raise ValueError(f"cos and sin must have the same shape, got {cos.shape} and {sin.shape}")
    if not (x.ndim > 0 and 0 < cos.shape[-1] <= x.shape[-1] and cos.shape[-1] % 2 == 0):
        raise ValueError(f"the rotary dim cos.shape[-1] must be even, positive and no wider than {name}, got cos "
                         f"{cos.shape} and {name} {x.shape}")
    lead, own = x.shape[:-1], cos.shape[:-1]
    if len(own) > len(lead) or any(n not in (1, m) for n, m in zip(own[::-1], lead[::-1])):
        raise ValueError(f"cos/sin leading shape {own} must broadcast to {name}'s leading shape {lead} (shapes "
                         f"{cos.shape} and {x.shape})")
    return cos, sin


# --------------------------------------------------------------------------- shared by ALiBi and its kernel

def check_slopes(slopes: ArrayLike, num_heads: int) -> np.ndarray:
    """ALiBi slopes: ``(num_heads,)``, finite, ``>= 0`` (dtype kept; integers become float64)."""
    m = as_float_array(slopes, "slopes")
    require(m.shape == (num_heads,), f"slopes must have shape (num_heads,) = ({num_heads},), got shape {m.shape}")
    if not np.all(m >= 0) or not np.all(np.isfinite(m)):  # (the message, with the array, only when raised)
        raise ValueError(f"slopes must be >= 0 and finite (a negative slope flips the sign convention), got {m}")
    return m


def check_grouped_heads(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> int:
    """ALiBi attention's shapes ``(..., heads, q_len, d)``, ``(..., kv_heads, k_len, d)``,
    ``(..., kv_heads, k_len, d_v)`` with ``kv_heads`` dividing ``heads`` (grouped-query attention,
    1 = multi-query); returns ``heads // kv_heads``."""
    heads, kv = (q.shape[-3], k.shape[-3]) if min(q.ndim, k.ndim, v.ndim) >= 3 else (-1, -1)
    if not (heads >= 0 and q.shape[:-3] == k.shape[:-3] and k.shape[:-1] == v.shape[:-1]
            and q.shape[-1] == k.shape[-1] and (kv == 0) == (heads == 0) and (kv == 0 or heads % kv == 0)):
        raise ValueError(f"q, k, v must be (..., heads, q_len, d), (..., kv_heads, k_len, d), (..., kv_heads, k_len, "
                         f"d_v) with matching leading axes, k/v lengths and d, and heads a multiple of kv_heads "
                         f"(grouped-query attention); got q {q.shape}, k {k.shape}, v {v.shape}")
    return heads // kv if kv else 1


#: Largest query-key distance whose float value is exact, by the dtype the positions are computed in.
_EXACT_DISTANCE = {np.dtype(np.float16): 2**11, np.dtype(np.float32): 2**24, np.dtype(np.float64): 2**53}


def check_exact_distances(q_len: int, k_len: int, query_offset: int, dtype: DTypeLike) -> None:
    """Every query-key distance (query ``i`` at ``i + query_offset``, key ``j`` at ``j``) must be an
    exact integer in ``dtype``, where the positions are computed. Past that, neighbouring positions
    round to the same value and the bias silently loses them (float32 beyond 2^24: a float32 ALiBi
    at query_offset 2^24 differed from float64 by 0.58)."""
    limit = _EXACT_DISTANCE[np.dtype(dtype)]
    dist = 0 if q_len == 0 or k_len == 0 else max(abs(query_offset + q_len - 1), abs(query_offset - (k_len - 1)))
    if dist > limit:  # (kernel doors call this on every launch: the message is built only here)
        raise ValueError(f"query_offset={query_offset} with q_len={q_len}, k_len={k_len} puts a query {dist} "
                         f"positions from a key, more than {np.dtype(dtype)} represents exactly ({limit}); positions "
                         "would round together. Use float64, or shift query_offset and the keys together (the causal "
                         "and symmetric forms depend only on the distance)")
