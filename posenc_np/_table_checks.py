"""The argument checks of the table-building families: RoPE tables and rotations, xPos, the
multi-axis tables, a Hugging Face rope dict, and the absolute encodings.

A public function validates at its door with one call per argument group, then computes with
unchecked functions (``docs/architecture.md``). These are the groups a family's public
functions share, or that a public function shares with its kernel: :func:`check_rope_tables` is
used by :func:`posenc_np.rope.apply` and :func:`posenc_np.kernels.rope_apply` alike, so neither
imports the other. Messages name the argument, show the value and say what was expected
(``docs/errors.md``). Like :mod:`posenc_np._checks` (the generic checks), this module belongs
to the foundation layer: it imports nothing else from the package but :mod:`posenc_np._exact`.
"""

from __future__ import annotations

import numpy as np

from . import _exact
from ._checks import (as_float_array, as_int_array, as_positions, check_alloc, check_angles, check_bool, check_choice,
                      check_even, check_float_dtype, check_int, check_out, check_real)


# --------------------------------------------------------------------------- RoPE tables and rotations (posenc_np.rope and posenc_np.kernels.rope both import these: neither imports the other)

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


def check_table_positions(positions, n_pairs: int, name: str = "positions", what: str = "cos/sin tables"):
    """Positions of a table (:func:`posenc_np._exact.positions`: representable, split exactly) whose
    ``positions.shape + (2 * n_pairs,)`` float64 result fits :data:`MAX_ALLOC_BYTES`."""
    pos = _exact.positions(positions, name)
    check_alloc(pos.shape + (2 * n_pairs,), np.float64, f"{what} {name}.shape + (2 * len(inv_freq),)")
    return pos


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


def _check_table_values(table: np.ndarray, layout: str, name: str) -> None:
    """A cos/sin table's values: finite, and both members of each pair equal.

    A table built for the other layout fails the pair check (unless every angle is equal),
    which catches the classic half/interleaved mix-up instead of rotating the wrong channels.
    (The first members are checked for finiteness; equal pairs make the second ones finite too.)
    """
    n = table.shape[-1] // 2
    first, second = (table[..., :n], table[..., n:]) if layout == "half" else (table[..., 0::2], table[..., 1::2])
    if not np.isfinite(first).all():
        raise ValueError("cos and sin must be finite (no NaN or inf)")
    if not (first == second).all():
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
    _check_table_values(cos, layout, "cos")
    _check_table_values(sin, layout, "sin")
    if backend == "numba" and x.dtype not in (np.float32, np.float64):
        raise TypeError(f"backend='numba' needs float32 or float64 input, got {x.dtype}")
    return x, cos, sin


def check_apply(x, cos, sin, layout, backend, out, name: str):
    """The door of :func:`posenc_np.rope.apply` (and its backward): ``(x, cos, sin, out)``."""
    x, cos, sin = check_rotation(x, cos, sin, layout, backend, name)
    return x, cos, sin, check_out(out, x, "out", cos, sin)


def check_qk(q, k, cos, sin, layout, backend, out_q, out_k):
    """The door of :func:`posenc_np.rope.apply_qk`: both inputs fit the (once checked) tables;
    neither output overlaps the other input, the other output or the tables."""
    q, cos, sin = check_rotation(q, cos, sin, layout, backend, "q")
    k = check_rotation_input(k, cos, "k", backend)
    out_q = check_out(out_q, q, "out_q", k, cos, sin)
    return q, k, cos, sin, out_q, check_out(out_k, k, "out_k", q, cos, sin, *(() if out_q is None else (out_q,)))


def check_frequency_pair(old_inv_freq, new_inv_freq) -> tuple[np.ndarray, np.ndarray]:
    """Two frequency arrays of the same shape (a re-rotation from ``old`` to ``new``)."""
    old, new = check_inv_freq(old_inv_freq, "old_inv_freq"), check_inv_freq(new_inv_freq, "new_inv_freq")
    if old.shape != new.shape:
        raise ValueError(f"old_inv_freq and new_inv_freq must have the same shape, got {old.shape} and {new.shape}")
    return old, new


def check_layout_conversion(w, num_heads, src, dst, rotary_dim):
    """``(w, num_heads, head_dim, rotary_dim, src, dst)`` of a q/k weight to permute between layouts."""
    src, dst = check_choice(src, "src", ROPE_LAYOUTS), check_choice(dst, "dst", ROPE_LAYOUTS)
    w = np.asarray(w)
    num_heads = check_int(num_heads, "num_heads", minimum=1)
    if w.ndim == 0 or w.shape[0] % num_heads:
        raise ValueError(f"w's first axis ({w.shape[:1]}) must be num_heads * head_dim with num_heads={num_heads}")
    head_dim = w.shape[0] // num_heads
    r = head_dim if rotary_dim is None else check_even(rotary_dim, "rotary_dim", maximum=head_dim)
    return w, num_heads, head_dim, r, src, dst


# --------------------------------------------------------------------------- xPos, multi-axis tables, long-term decay

def check_xpos(positions, dim, role, centre, seq_len, scale_base, centres):
    """xPos arguments: ``(positions, dim, sign, centre, n_total, scale_base)``, with the role as a sign
    (+1 query, -1 key), ``centre`` a real number or one of ``centres`` (which need ``seq_len`` unless
    ``"none"``), and the ``positions.shape + (dim // 2,)`` scale within :data:`MAX_ALLOC_BYTES`."""
    sign = 1.0 if check_choice(role, "role", ("query", "key")) == "query" else -1.0
    dim = check_even(dim, "dim")
    scale_base = check_real(scale_base, "scale_base", positive=True)
    n_total = None
    if not isinstance(centre, str):
        centre = check_real(centre, "centre")
    elif check_choice(centre, "centre", centres) != "none":
        if seq_len is None:
            raise ValueError(f"centre={centre!r} needs seq_len (the total length N shared by q and k)")
        n_total = check_int(seq_len, "seq_len", minimum=1, maximum=2**53)
    pos = as_positions(positions)
    check_alloc(pos.shape + (dim // 2,), np.float64, "xPos scale positions.shape + (dim // 2,)")
    return pos, dim, sign, centre, n_total, scale_base


def check_streams(positions, streams: int, name: str, n_pairs: int):
    """Multi-axis positions ``(streams, ...)`` (one row per position stream) whose tables
    ``positions.shape[1:] + (2 * n_pairs,)`` fit :data:`MAX_ALLOC_BYTES`."""
    pos = as_positions(positions, name)
    if pos.ndim < 1 or pos.shape[0] < streams:
        raise ValueError(f"{name} must have shape ({streams}, ...) (one row per position stream), got {pos.shape}")
    check_alloc(pos.shape[1:] + (2 * n_pairs,), np.float64, f"cos/sin tables {name}.shape[1:] + (rotary dim,)")
    return pos


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


def check_distances(distances, inv_freq) -> tuple[np.ndarray, np.ndarray]:
    """``(distances as float64, frequencies)`` whose angles and ``(..., n)`` partial sums are finite and fit."""
    freqs = check_inv_freq(inv_freq)
    r = as_positions(distances, "distances").astype(np.float64)
    check_alloc(r.shape + freqs.shape, np.complex128, "partial sums distances.shape + (len(inv_freq),)")
    check_angles(r, freqs, "distances * inv_freq")
    return r, freqs


# --------------------------------------------------------------------------- a Hugging Face rope dict (posenc_np.rope_scaling)

#: Largest length (``seq_len``, ``max_position_embeddings``, ``original_max_position_embeddings``)
#: accepted: positions past 2^53 are not exact in the float64 angles.
MAX_LENGTH = 2**53


def _require(params: dict, key: str, rope_type: str):
    if params.get(key) is None:
        raise ValueError(f"scaling for rope_type {rope_type!r} needs key {key!r} "
                         f"(got keys {sorted(params)})")
    return params[key]


def _factor(params: dict, key: str, rope_type: str, *, default=None):
    """A finite real scaling parameter ``> 0`` (``default`` when absent or None)."""
    value = params.get(key)
    if value is None:
        return _require(params, key, rope_type) if default is None else default
    value = check_real(value, f"scaling[{key!r}]")
    if not value > 0:
        raise ValueError(f"scaling[{key!r}] must be > 0 for rope_type {rope_type!r}, got {value}")
    return value


def read_positive(default=None):
    """Reader: a real ``> 0``; required when ``default`` is None."""
    return lambda params, key, ctx: _factor(params, key, ctx["rope_type"], default=default)


def read_optional_positive(params, key, ctx):
    """Reader: a real ``> 0`` or None when absent."""
    return None if params.get(key) is None else _factor(params, key, ctx["rope_type"])


def read_nonnegative(params, key, ctx):
    """Reader: a real ``>= 0``, 0 when absent (Hugging Face tests the mscales for truthiness)."""
    return 0.0 if params.get(key) is None else check_real(params[key], f"scaling[{key!r}]", nonnegative=True)


def read_flag(default: bool):
    """Reader: a bool."""
    return lambda params, key, ctx: check_bool(params.get(key, default), f"scaling[{key!r}]")


def read_original_max(params, key, ctx):
    """Reader of ``L0``: the dict's ``original_max_position_embeddings``, else ``max_position_embeddings``.

    Hugging Face's ``standardize_rope_params`` fills the key from ``max_position_embeddings``
    the same way for yarn/longrope/llama3.
    """
    value = params.get(key)
    if value is None:
        value = ctx["max_pos"]
    if value is None:
        raise ValueError(f"rope_type {ctx['rope_type']!r} needs scaling['original_max_position_embeddings'] "
                         "or the max_position_embeddings argument")
    return check_int(value, "original_max_position_embeddings", minimum=1, maximum=MAX_LENGTH)


def read_implied_factor(params, key, ctx):
    """Reader: ``factor`` if given, else ``max_position_embeddings / L0`` (yarn, longrope)."""
    if params.get(key) is not None:
        return _factor(params, key, ctx["rope_type"])
    if ctx["max_pos"] is None:
        raise ValueError(f"rope_type {ctx['rope_type']!r} needs scaling['factor'] or the max_position_embeddings "
                         "argument (factor defaults to max_position_embeddings / original_max_position_embeddings)")
    return ctx["max_pos"] / ctx["original_max_position_embeddings"]


def read_per_pair(params, key, ctx):
    """Reader: ``dim // 2`` finite factors ``> 0`` (LongRoPE's lists), float64."""
    arr = as_float_array(_require(params, key, ctx["rope_type"]), f"scaling[{key!r}]")
    if arr.shape != (ctx["dim"] // 2,):
        raise ValueError(f"scaling[{key!r}] must have length dim // 2 = {ctx['dim'] // 2}, got shape {arr.shape}")
    if not (np.all(np.isfinite(arr)) and np.all(arr > 0)):
        raise ValueError(f"scaling[{key!r}] must hold finite values > 0, got {arr.tolist()}")
    return arr.astype(np.float64)


def read_fraction(params, key, ctx):
    """Reader: a fraction in ``[0, 1]``, 1 when absent (``proportional``'s ``partial_rotary_factor``)."""
    p = params.get(key, 1.0)
    p = check_real(1.0 if p is None else p, f"scaling[{key!r}]", nonnegative=True)
    if p > 1.0:
        raise ValueError(f"scaling[{key!r}] must lie in [0, 1], got {p}")
    return p


def ordered(fast: str, slow: str):
    """Entry check: ``v[fast] >= v[slow]`` (YaRN's ramp runs from the fast to the slow rotation count)."""
    return lambda v, rope_type: check_betas(v[fast], v[slow], f"scaling[{fast!r}]", f"scaling[{slow!r}]")


def check_betas(beta_fast, beta_slow, fast_name: str, slow_name: str) -> tuple[float, float]:
    beta_fast = check_real(beta_fast, fast_name, positive=True)
    beta_slow = check_real(beta_slow, slow_name, positive=True)
    if beta_fast < beta_slow:
        raise ValueError(f"{fast_name} ({beta_fast}) must be >= {slow_name} ({beta_slow}): the YaRN ramp runs from "
                         "the fast to the slow rotation count, and swapping them inverts it")
    return beta_fast, beta_slow


def check_dim_base(dim, base):
    """A rotary ``dim`` (even, >= 2) and ``base`` (> 0, not 1)."""
    dim = check_int(dim, "dim", minimum=2)
    if dim % 2:
        raise ValueError(f"dim (the rotary dim) must be even, got {dim}")
    base = check_real(base, "base", positive=True)
    if base == 1.0:
        raise ValueError("base must differ from 1 (every frequency would be 1)")
    return dim, base


def read_rope_type(scaling, type_keys: dict, common_keys: set) -> tuple[str, dict]:
    """``(rope_type, params)`` from a HF dict (``rope_type`` or legacy ``type``): a known type
    (a key of ``type_keys``) and no key that it does not read (``type_keys[type]``, ``common_keys``)."""
    if scaling is None:
        return "default", {}
    if not isinstance(scaling, dict):
        raise TypeError(f"scaling must be a dict (a Hugging Face rope_parameters / rope_scaling) or None, "
                        f"got {type(scaling).__name__}")
    new, old = scaling.get("rope_type"), scaling.get("type")
    for key, value in (("rope_type", new), ("type", old)):
        if value is not None and not isinstance(value, str):
            raise TypeError(f"scaling[{key!r}] must be a string, one of {sorted(type_keys)}; got {value!r}")
    if new is not None and old is not None and new != old:
        raise ValueError(f"scaling has rope_type={new!r} and type={old!r}; they must agree")
    rope_type = new if new is not None else (old if old is not None else "default")
    if rope_type not in type_keys:
        raise ValueError(f"unknown rope_type {rope_type!r}; expected one of {sorted(type_keys)}")
    allowed = set(common_keys) | set(type_keys[rope_type])
    unknown = set(scaling) - allowed
    if unknown:
        raise ValueError(f"scaling has keys {sorted(unknown)} that rope_type {rope_type!r} does not use; "
                         f"allowed: {sorted(allowed)}")
    return rope_type, dict(scaling)


def resolve_dim_base(dim, base, params: dict, rope_type: str, default_base) -> tuple[int, float]:
    """The rotary dim and base after the dict's ``rope_theta`` (which may replace ``base`` only when
    ``base is default_base``, i.e. not passed) and ``partial_rotary_factor``."""
    theta = params.get("rope_theta")
    if theta is not None:
        theta = check_real(theta, "scaling['rope_theta']", positive=True)
        if base is not default_base and float(base) != theta:
            raise ValueError(f"base={base} disagrees with scaling['rope_theta']={theta}; pass one of them")
        base = theta
    prf = params.get("partial_rotary_factor")
    if rope_type != "proportional" and prf is not None:
        # HF's rule for every other type: rotary dim = int(head_dim * partial_rotary_factor)
        prf = check_real(prf, "scaling['partial_rotary_factor']", positive=True)
        if prf > 1.0:
            raise ValueError(f"scaling['partial_rotary_factor'] must lie in (0, 1], got {prf}")
        head_dim = check_int(dim, "dim", minimum=2)
        dim = int(head_dim * prf)
        if dim < 2 or dim % 2:
            raise ValueError(f"rotary dim int(dim * partial_rotary_factor) = int({head_dim} * {prf}) = {dim} "
                             "must be even and >= 2")
    return check_dim_base(dim, float(base))


def read_keys(params: dict, readers: dict, ctx: dict) -> dict:
    """The values of ``params`` read by ``readers`` (key -> reader, in order; see above)."""
    values = {}
    for key, read in readers.items():
        values[key] = ctx[key] = read(params, key, ctx)
    return values


def check_length(value, name: str):
    """None, or a length in ``[1, MAX_LENGTH]``."""
    return None if value is None else check_int(value, name, minimum=1, maximum=MAX_LENGTH)


# --------------------------------------------------------------------------- absolute encodings

def check_sinusoid(dim, base) -> tuple[int, float]:
    """A sinusoid's even width ``dim`` (its ``dim // 2`` frequencies within :data:`MAX_ALLOC_BYTES`)
    and ``base > 0``, not 1."""
    dim = check_int(dim, "dim", minimum=1)
    if dim % 2:
        raise ValueError(f"dim must be even for the sinusoidal encoding, got {dim} "
                         "(timing_signal zero-pads odd widths)")
    check_alloc((dim // 2,), np.float64, "frequencies (dim // 2,)")
    base = check_real(base, "base", positive=True)
    if base == 1.0:
        raise ValueError("base must differ from 1 (every frequency would be 1)")
    return dim, base


def check_sinusoid_table(positions, dim, base, layout, layouts, dtype):
    """``(positions, dim, base, layout, dtype)`` of a sinusoidal table that fits :data:`MAX_ALLOC_BYTES`."""
    layout, dtype = check_choice(layout, "layout", layouts), check_float_dtype(dtype)
    pos = as_positions(positions)
    dim = check_int(dim, "dim", minimum=1)
    check_alloc(pos.shape + (dim,), np.float64, "sinusoidal table positions.shape + (dim,)")
    return (pos, *check_sinusoid(dim, base), layout, dtype)


def check_timing_signal(positions, dim, min_timescale, max_timescale, start_index, dtype):
    """tensor2tensor's arguments: ``(positions, dim, lo, hi, start_index, dtype)`` with
    ``0 < lo <= hi`` and ``|start_index| <= 2**53`` (exact in float64)."""
    dim = check_int(dim, "dim", minimum=1)
    lo = check_real(min_timescale, "min_timescale", positive=True)
    hi = check_real(max_timescale, "max_timescale", positive=True)
    if hi < lo:
        raise ValueError(f"max_timescale ({hi}) must be >= min_timescale ({lo})")
    start_index = check_int(start_index, "start_index", minimum=-2**53, maximum=2**53)
    dtype = check_float_dtype(dtype)
    pos = as_positions(positions)
    check_alloc(pos.shape + (max(dim, 1),), np.float64, "timing signal positions.shape + (dim,)")
    check_alloc((dim // 2,), np.float64, "timescales (dim // 2,)")
    return pos, dim, lo, hi, start_index, dtype


def check_learned_table(num_positions, dim, init_std) -> tuple[int, int, float]:
    """A learned table's ``(num_positions, dim)`` (within :data:`MAX_ALLOC_BYTES`) and ``init_std >= 0``."""
    num_positions, dim = check_int(num_positions, "num_positions", minimum=1), check_int(dim, "dim", minimum=1)
    init_std = check_real(init_std, "init_std", nonnegative=True)
    check_alloc((num_positions, dim), np.float64, "learned table (num_positions, dim)")
    return num_positions, dim, init_std


def check_table_rows(positions, num_positions: int) -> np.ndarray:
    """Integer positions inside a learned table of ``num_positions`` rows (it cannot extrapolate)."""
    pos = as_int_array(positions, "positions")
    if pos.size and (pos.min() < 0 or pos.max() >= num_positions):
        bad = pos[(pos < 0) | (pos >= num_positions)].reshape(-1)[0]
        raise ValueError(f"positions must lie in [0, {num_positions}) for a learned table of {num_positions} rows, "
                         f"got {int(bad)}; a learned table cannot extrapolate")
    return pos


def check_fusion(x, p, mode, modes, dy=None):
    """``(x, p, mode)`` of a fusion: ``p`` broadcasts to ``x`` (``add``/``multiply``) or to its leading
    axes (``concat``) without enlarging it; with ``dy`` also ``(x, p, mode, dy)``, ``dy`` of the
    fusion's output shape."""
    mode = check_choice(mode, "mode", modes)
    x = as_float_array(x, "x", ndim_min=1)
    p = as_float_array(p, "p", ndim_min=1)
    # add/multiply: p broadcasts to x's whole shape; concat: to x's leading axes only
    x_part, p_part = (x.shape, p.shape) if mode != "concat" else (x.shape[:-1], p.shape[:-1])
    what = "x's shape" if mode != "concat" else "x's leading axes"
    try:
        shape = np.broadcast_shapes(x_part, p_part)
    except ValueError:
        shape = None
    if shape != x_part or p.ndim > x.ndim or p.ndim == 0:
        raise ValueError(f"p of shape {p.shape} must broadcast to {what} {x_part} (mode {mode!r})")
    if dy is None:
        return x, p, mode
    dy = as_float_array(dy, "dy")
    out_shape = x.shape[:-1] + (x.shape[-1] + p.shape[-1],) if mode == "concat" else x.shape
    if dy.shape != out_shape:
        raise ValueError(f"dy must have the shape of fuse's output {out_shape}, got {dy.shape}")
    return x, p, mode, dy


def check_p_rope(inv_freq, p):
    """:func:`posenc_np.rope.p_rope_frequencies`'s arguments: finite ``inv_freq >= 0`` of shape
    ``(n,)`` and a fraction ``p`` in ``[0, 1]``."""
    inv = as_float_array(inv_freq, "inv_freq")
    if inv.ndim != 1 or not np.all(np.isfinite(inv)) or np.any(inv < 0):
        raise ValueError(f"inv_freq must be a 1-D array of finite frequencies >= 0, got shape {inv.shape}")
    return inv, check_fraction(p, "p")


def check_fraction(p, name: str) -> float:
    """A real number in ``[0, 1]`` (p-RoPE's kept fraction)."""
    p = check_real(p, name, nonnegative=True)
    if p > 1.0:
        raise ValueError(f"{name} must lie in [0, 1] (the fraction of frequencies kept), got {p}")
    return p
