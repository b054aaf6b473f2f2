"""Argument validation shared by every module: the checks at the doors.

Every public function validates its arguments with these helpers so that bad input fails
fast with a ``TypeError`` (wrong kind of thing) or ``ValueError`` (right kind, wrong value)
whose message names the argument, shows the value and says what was expected. Below the
door, the encoding modules compute with unchecked functions (``docs/architecture.md``).

The first part holds the generic checks (integers, reals, choices, dtypes, arrays, sizes,
``out=`` arrays); the second the argument groups that one family's public functions share,
or that a public function shares with its kernel (RoPE tables: :func:`check_rope_tables` is
used by :func:`posenc_np.rope.apply` and :func:`posenc_np.kernels.rope_apply` alike). This
module imports nothing from the package but NumPy, so every layer may use it.
"""

from __future__ import annotations

import math
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
    "check_float_dtype",
    "check_int",
    "check_lengths",
    "check_out",
    "check_real",
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


def check_out(out, like: np.ndarray, name: str, *others: np.ndarray):
    """``out=`` for a result shaped like ``like``: None, or a writeable ndarray of ``like``'s shape
    and dtype that may *be* ``like`` (the same view: in place) but shares no memory with it
    otherwise, nor with any of ``others`` (the other inputs), and has no overlapping elements."""
    if out is None:
        return None
    if not isinstance(out, np.ndarray):
        raise TypeError(f"{name} must be a NumPy array or None, got {type(out).__name__}")
    if out.shape != like.shape:
        raise ValueError(f"{name} must have the input's shape {like.shape}, got {out.shape}")
    if out.dtype != like.dtype:
        raise TypeError(f"{name} must have the input's dtype {like.dtype}, got {out.dtype}")
    if not out.flags.writeable:
        raise ValueError(f"{name} is read-only")
    if any(st == 0 and n > 1 for st, n in zip(out.strides, out.shape)):
        raise ValueError(f"{name} has overlapping elements (a zero stride, strides {out.strides}); "
                         "it cannot hold a result")
    same_view = (out.__array_interface__["data"][0] == like.__array_interface__["data"][0]
                 and out.strides == like.strides)
    for other, what in ((like, "the input"), *((o, "another input") for o in others)):
        if (other is not like or not same_view) and _shares_memory(out, other):
            raise ValueError(f"{name} partially overlaps {what}; pass the input itself (in place) or a "
                             "separate array")
    return out


def _shares_memory(a: np.ndarray, b: np.ndarray) -> bool:
    """Exact overlap test with a work bound; a problem too hard to decide counts as overlap."""
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


# --------------------------------------------------------------------------- RoPE
# (posenc_np.rope and posenc_np.kernels.rope both import these: neither imports the other)

#: Channel layouts of a RoPE table: which channels form a pair (see :mod:`posenc_np.rope`).
ROPE_LAYOUTS = ("half", "interleaved")
#: Implementations of the rotation.
ROPE_BACKENDS = ("auto", "numpy", "numba")


def check_inv_freq(inv_freq, name: str = "inv_freq") -> np.ndarray:
    """Frequencies: a non-empty, finite 1-D array, returned as float64."""
    arr = as_float_array(inv_freq, name).astype(np.float64, copy=False)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite (no NaN or inf)")
    return arr


def check_table_args(inv_freq, attention_factor, layout, dtype):
    """The arguments every cos/sin table builder shares: ``(freqs, factor, layout, dtype)``."""
    return (check_inv_freq(inv_freq), check_real(attention_factor, "attention_factor", positive=True),
            check_choice(layout, "layout", ROPE_LAYOUTS), check_float_dtype(dtype))


def check_rope_tables(x: np.ndarray, cos, sin, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Shapes of a rotation's tables: equal shapes, an even rotary dim no wider than ``x``, leading
    axes that broadcast to ``x``'s. Returns the tables as float arrays."""
    cos, sin = as_float_array(cos, "cos"), as_float_array(sin, "sin")
    if cos.shape != sin.shape:
        raise ValueError(f"cos and sin must have the same shape, got {cos.shape} and {sin.shape}")
    if cos.ndim == 0 or x.ndim == 0:
        raise ValueError(f"cos and {name} need a channel axis, got shapes {cos.shape} and {x.shape}")
    d = cos.shape[-1]
    if d == 0 or d % 2:
        raise ValueError(f"the rotary dim cos.shape[-1] must be even and positive, got {d}")
    if d > x.shape[-1]:
        raise ValueError(f"cos/sin are wider ({d} channels) than {name} ({x.shape[-1]} channels); "
                         f"the rotary dim cannot exceed the head dim")
    try:
        lead = np.broadcast_shapes(cos.shape[:-1], x.shape[:-1])
    except ValueError:
        lead = None
    if lead != x.shape[:-1]:
        raise ValueError(f"cos/sin leading shape {cos.shape[:-1]} must broadcast to {name}'s leading shape "
                         f"{x.shape[:-1]} (shapes {cos.shape} and {x.shape})")
    return cos, sin


def _check_rope_pairs(table: np.ndarray, layout: str, name: str) -> None:
    """Both members of each pair of a cos/sin table must hold the same value.

    A table built for the other layout fails this check (unless every angle is equal), which
    catches the classic half/interleaved mix-up instead of rotating the wrong channels.
    """
    n = table.shape[-1] // 2
    first, second = (table[..., :n], table[..., n:]) if layout == "half" else (table[..., 0::2], table[..., 1::2])
    if not np.array_equal(first, second):
        raise ValueError(f"{name} is not a {layout!r}-layout table: the two channels of each pair differ "
                         f"(expected {'[c | c]' if layout == 'half' else '[c0, c0, c1, c1, ...]'}; "
                         "was it built for the other layout?)")


def check_rotation_input(x, cos: np.ndarray, name: str, backend: str) -> np.ndarray:
    """What is rotated: a float array the (already checked) tables fit; float32/float64 for Numba."""
    x = np.asarray(x)
    check_float_dtype(x.dtype, f"{name}.dtype")
    if backend == "numba" and x.dtype not in (np.float32, np.float64):
        raise TypeError(f"backend='numba' needs float32 or float64 input, got {x.dtype}")
    check_rope_tables(x, cos, cos, name)
    return x


def check_rotation(x, cos, sin, layout, backend, name: str):
    """The door of a rotation (:func:`posenc_np.rope.apply` and friends): ``(x, cos, sin)``.

    ``layout`` and ``backend`` are valid choices, ``x`` a float array (float32/float64 for
    ``backend="numba"``), the tables fit it (:func:`check_rope_tables`), hold finite values, and
    are laid out for ``layout`` (both channels of each pair equal).
    """
    layout = check_choice(layout, "layout", ROPE_LAYOUTS)
    backend = check_choice(backend, "backend", ROPE_BACKENDS)
    x = np.asarray(x)
    check_float_dtype(x.dtype, f"{name}.dtype")
    cos, sin = check_rope_tables(x, cos, sin, name)
    if not (np.all(np.isfinite(cos)) and np.all(np.isfinite(sin))):
        raise ValueError("cos and sin must be finite (no NaN or inf)")
    _check_rope_pairs(cos, layout, "cos")
    _check_rope_pairs(sin, layout, "sin")
    if backend == "numba" and x.dtype not in (np.float32, np.float64):
        raise TypeError(f"backend='numba' needs float32 or float64 input, got {x.dtype}")
    return x, cos, sin


def check_mrope_section(section, n: int, variant: str) -> list[int]:
    """M-RoPE's ``mrope_section``: non-empty ints >= 0 summing to ``n`` frequencies; three of them
    (t, h, w) for ``variant="qwen3-vl"``."""
    if not isinstance(section, (list, tuple, np.ndarray)) or len(section) == 0:
        raise TypeError(f"mrope_section must be a non-empty list of ints, got {section!r}")
    section = [check_int(v, "mrope_section entry", minimum=0) for v in section]
    if sum(section) != n:
        raise ValueError(f"mrope_section {section} must sum to len(inv_freq) = {n}")
    if variant == "qwen3-vl" and len(section) != 3:
        raise ValueError(f"variant 'qwen3-vl' needs 3 sections (t, h, w), got {section}")
    return section


# --------------------------------------------------------------------------- attention core and hooks

#: The methods of an attention hook (:class:`posenc_np.attention.Hook`).
HOOK_METHODS = ("logits", "logits_backward", "values", "values_backward")


def check_qkv(q, k, v):
    """``q, k, v`` of attention: float, ``(..., heads, len, d)`` with matching leading axes, key
    lengths and ``d``; returned in their common dtype."""
    q = as_float_array(q, "q", ndim_min=3)
    k = as_float_array(k, "k", ndim_min=3)
    v = as_float_array(v, "v", ndim_min=3)
    if q.shape[:-2] != k.shape[:-2] or k.shape[:-1] != v.shape[:-1]:
        raise ValueError(
            f"q, k, v must be (..., heads, len, d) with matching leading axes and k/v lengths; got "
            f"q {q.shape}, k {k.shape}, v {v.shape}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share the last axis d; got q {q.shape}, k {k.shape}")
    dtype = np.result_type(q, k, v)
    return q.astype(dtype, copy=False), k.astype(dtype, copy=False), v.astype(dtype, copy=False)


def check_broadcast(arr, name: str, target: tuple, dtype):
    """A ``bias`` (float, cast to ``dtype``) or boolean ``mask``/``keep`` that broadcasts to
    ``target`` without enlarging it; None stays None."""
    if arr is None:
        return None
    if name in ("mask", "keep"):
        arr = np.asarray(arr)
        if arr.dtype != bool:
            raise TypeError(f"{name} must be a boolean array (True = keep), got dtype {arr.dtype}")
    else:
        arr = as_float_array(arr, name).astype(dtype, copy=False)
    try:
        shape = np.broadcast_shapes(arr.shape, target)
    except ValueError as exc:
        raise ValueError(f"{name} of shape {arr.shape} does not broadcast to {target}") from exc
    if shape != target:
        raise ValueError(f"{name} of shape {arr.shape} would enlarge the logits {target} to {shape}")
    return arr


def check_scale(scale, d: int) -> float:
    """The logit scale: ``scale`` (finite, > 0) or the default ``1/sqrt(d)`` (needs ``d >= 1``)."""
    if scale is not None:
        return check_real(scale, "scale", positive=True)
    if d == 0:
        raise ValueError("q and k have head dim d = 0: the default scale 1/sqrt(d) is undefined; pass scale "
                         "explicitly (every logit is then 0)")
    return 1.0 / math.sqrt(d)


def check_hooks(hooks) -> tuple:
    """``hooks`` as a tuple of objects with the four hook methods (``None`` = no hooks; one hook
    object alone is accepted)."""
    if hooks is None:
        return ()
    if all(callable(getattr(hooks, m, None)) for m in HOOK_METHODS):
        hooks = (hooks,)
    try:
        hooks = tuple(hooks)
    except TypeError as exc:
        raise TypeError(f"hooks must be a sequence of Hook objects (or None), got {type(hooks).__name__}") from exc
    for i, hook in enumerate(hooks):
        missing = [m for m in HOOK_METHODS if not callable(getattr(hook, m, None))]
        if missing:
            raise TypeError(f"hooks[{i}] ({type(hook).__name__}) lacks the Hook methods {missing}")
    return hooks


def check_hook_term(term, target: tuple, hook, method: str):
    """A hook's term must broadcast to ``target`` without enlarging it."""
    try:
        ok = np.broadcast_shapes(np.shape(term), target) == target
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"{type(hook).__name__}.{method} returned a term of shape {np.shape(term)}, which does "
                         f"not broadcast to {target}")
    return term


def check_hook_args(q, k, scale, mask=None):
    """What a hook's ``logits(q, k, scale, mask)`` receives from the attention core, checked for a
    direct call: float ``q``/``k`` of shape ``(..., heads, len, d)`` with equal leading axes and
    ``d``, a finite ``scale > 0``, and None or a boolean mask that broadcasts to the logits.
    Returns ``(q, k, scale, mask)`` (integers converted to float64)."""
    q = as_float_array(q, "q", ndim_min=3)
    k = as_float_array(k, "k", ndim_min=3)
    if q.shape[:-2] != k.shape[:-2] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must be (..., heads, len, d) with equal leading axes and d, got {q.shape} "
                         f"and {k.shape}")
    mask = check_broadcast(mask, "mask", q.shape[:-1] + (k.shape[-2],), q.dtype)
    return q, k, check_real(scale, "scale", positive=True), mask


_ATTENTION_CACHE_KEYS = {"q", "k", "v", "probs", "scale", "bias_shape", "hooks", "hook_caches"}


def check_attention_cache(cache):
    """``(q, k, v, probs, scale)`` of an attention forward cache, or ``TypeError`` for anything else."""
    ok = isinstance(cache, dict) and _ATTENTION_CACHE_KEYS <= set(cache)
    if ok:
        q, k, v, probs, scale = (cache[name] for name in ("q", "k", "v", "probs", "scale"))
        ok = (all(isinstance(a, np.ndarray) and a.ndim >= 3 for a in (q, k, v, probs))
              and probs.shape == q.shape[:-1] + (k.shape[-2],) and isinstance(scale, float)
              and len(cache["hooks"]) == len(cache["hook_caches"]))
    if not ok:
        raise TypeError("cache must be the dict returned by posenc_np.attention.forward")
    return q, k, v, probs, scale


# --------------------------------------------------------------------------- ALiBi
# (posenc_np.alibi and posenc_np.kernels.alibi)

#: Largest query-key distance whose float value is exact, by dtype the positions are computed in.
_EXACT_DISTANCE = {np.dtype(np.float16): 2**11, np.dtype(np.float32): 2**24, np.dtype(np.float64): 2**53}


def check_slopes(slopes, num_heads: int) -> np.ndarray:
    """ALiBi slopes: ``(num_heads,)``, finite, ``>= 0`` (dtype kept; integers become float64)."""
    arr = as_float_array(slopes, "slopes")
    if arr.shape != (num_heads,):
        raise ValueError(f"slopes must have shape (num_heads,) = ({num_heads},), got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError("slopes must be finite (no NaN or inf)")
    if np.any(arr < 0):
        raise ValueError(f"slopes must be >= 0 (a negative slope flips the sign convention), "
                         f"got {float(arr[arr < 0][0])}")
    return arr


def check_exact_distances(q_len: int, k_len: int, q_offset: int, dtype) -> None:
    """Every query-key distance (query ``i`` at ``i + q_offset``, key ``j`` at ``j``) must be an
    exact integer in ``dtype``, where the positions are computed.

    Past that, neighbouring positions round to the same value and the bias silently loses
    them (float32 beyond 2^24; a float32 ALiBi at q_offset 2^24 differed from float64 by 0.58).
    """
    limit = _EXACT_DISTANCE[np.dtype(dtype)]
    dist = 0 if q_len == 0 or k_len == 0 else max(abs(q_offset + q_len - 1), abs(q_offset - (k_len - 1)))
    if dist > limit:
        raise ValueError(f"q_offset={q_offset} with q_len={q_len}, k_len={k_len} puts a query {dist} positions from a "
                         f"key, more than {np.dtype(dtype)} represents exactly ({limit}); positions would round "
                         f"together. Use float64, or shift q_offset and the keys together (the causal and symmetric "
                         f"forms depend only on the distance)")


# --------------------------------------------------------------------------- relative encodings

def check_heads(x: np.ndarray, name: str, num_heads: int, head_dim: int | None = None, *,
                axes: str = "len, d") -> None:
    """``x`` must be ``(..., num_heads, <axes>)`` with a last axis of ``head_dim`` (any when None)."""
    if x.ndim < 3 or x.shape[-3] != num_heads or (head_dim is not None and x.shape[-1] != head_dim):
        want = f"(..., num_heads={num_heads}, {axes if head_dim is None else f'len, head_dim={head_dim}'})"
        raise ValueError(f"{name} must be {want}, got shape {x.shape}")


def check_param(params: dict, name: str, shape: tuple) -> np.ndarray:
    """A layer's parameter ``params[name]`` (replaceable by the user) must still have ``shape``."""
    w = np.asarray(params[name])
    if w.shape != shape:
        raise ValueError(f"params[{name!r}] must have shape {shape}, got {w.shape}")
    return w


def check_t5_buckets(num_buckets, max_distance, bidirectional) -> tuple[int, int, bool]:
    """T5's bucket parameters as ``(num_buckets, max_distance, bidirectional)``.

    Requirements (derived from the formula): the exact range ``e`` must be at least 1
    (otherwise ``ln(n/e)`` is undefined), so ``num_buckets >= 2`` unidirectional and
    ``>= 4`` bidirectional; bidirectional counts must be even (an odd count leaves the last
    bucket unreachable: each half has ``num_buckets // 2`` buckets); ``max_distance > e``
    (otherwise ``ln(max_distance / e) <= 0``).
    """
    bidirectional = check_bool(bidirectional, "bidirectional")
    num_buckets = check_int(num_buckets, "num_buckets")
    minimum = 4 if bidirectional else 2
    if num_buckets < minimum:
        raise ValueError(
            f"num_buckets must be >= {minimum} when bidirectional={bidirectional} (each direction needs "
            f"at least one exact bucket), got {num_buckets}")
    if bidirectional and num_buckets % 2:
        raise ValueError(
            f"num_buckets must be even when bidirectional=True (the two directions get num_buckets // 2 "
            f"buckets each, so bucket {num_buckets - 1} could never be used), got {num_buckets}")
    max_distance = check_int(max_distance, "max_distance", maximum=2**62)
    exact = (num_buckets // 2 if bidirectional else num_buckets) // 2
    if max_distance <= exact:
        rule = "num_buckets // 4" if bidirectional else "num_buckets // 2"
        raise ValueError(
            f"max_distance must exceed the exact range {rule} = {exact} for num_buckets={num_buckets}, "
            f"bidirectional={bidirectional}, got {max_distance}")
    return num_buckets, max_distance, bidirectional


def check_table(table, name: str, *, odd_rows: bool = False, width=None, what: str = "") -> np.ndarray:
    """A non-empty 2-D float table; with ``odd_rows`` an odd row count (``2K + 1`` rows), with
    ``width`` that many columns. ``what`` describes the expected form in the message."""
    table = as_float_array(table, name)
    ok = table.ndim == 2 and table.shape[0] >= 1 and table.shape[1] >= 1 and not (odd_rows and table.shape[0] % 2 == 0)
    if not ok:
        raise ValueError(f"{name} must be a non-empty 2-D {what} table{' (odd row count)' if odd_rows else ''}, "
                         f"got shape {table.shape}")
    if width is not None and table.shape[1] != width:
        raise ValueError(f"{name} rows have width {table.shape[1]}, expected {width} to match the last axis "
                         "of the attention input")
    return table


def check_deberta_buckets(bucket_size, max_position) -> tuple[int, int]:
    """DeBERTa's log-bucket parameters: ``bucket_size >= 2``, ``max_position > bucket_size // 2 + 1``."""
    bucket_size = check_int(bucket_size, "bucket_size", minimum=2)
    max_position = check_int(max_position, "max_position", minimum=1)
    mid = bucket_size // 2
    if max_position - 1 <= mid:
        raise ValueError(
            f"max_position must be > bucket_size // 2 + 1 = {mid + 1} so that ln((max_position - 1) / mid) > 0, "
            f"got max_position={max_position} with bucket_size={bucket_size}")
    return bucket_size, max_position


def check_pos_att_type(value, choices=("c2p", "p2c")) -> tuple[str, ...]:
    """DeBERTa's ``pos_att_type``: ``"c2p|p2c"`` (Hugging Face's string) or a sequence, no repeats."""
    if isinstance(value, str):
        items = [p.strip().lower() for p in value.split("|") if p.strip()]
    else:
        try:
            items = list(value)
        except TypeError as exc:
            raise TypeError(f"pos_att_type must be a string like 'c2p|p2c' or a sequence of strings, "
                            f"got {type(value).__name__}") from exc
    for item in items:
        if item == "p2p":
            raise ValueError("pos_att_type 'p2p' is not supported: it is not part of the paper's score "
                             "(eq. 4) and Hugging Face DeBERTa-v2 does not add it to the scores")
        check_choice(item, "pos_att_type entry", choices)
    if len(set(items)) != len(items):
        raise ValueError(f"pos_att_type lists a term twice: {items}")
    return tuple(items)
