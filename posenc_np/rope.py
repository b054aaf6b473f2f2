r"""Rotary position embedding (RoPE): frequencies, cos/sin tables, rotation and its backward,
layouts, partial rotary, xPos, 2-D axial RoPE and M-RoPE.

Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary Position Embedding", eq. 13-15.
Channel pairs :math:`(a, b)` are rotated by :math:`t = p\,\omega_i`:

.. math::

    a' = a\cos t - b\sin t, \qquad b' = a\sin t + b\cos t, \qquad
    \omega_i = \mathrm{base}^{-2i/d},\ i = 0 \dots d/2 - 1,

so that :math:`\langle R_m q, R_n k\rangle` depends on :math:`m - n` only. Which channels
form a pair is the *layout*:

``half`` (GPT-NeoX, Hugging Face ``rotate_half``)
    pair :math:`(i, i + d/2)`; the cos/sin tables are :math:`[\cos t_0 \dots \cos t_{d/2-1} \mid
    \cos t_0 \dots \cos t_{d/2-1}]`.
``interleaved`` (GPT-J, Meta LLaMA ``freqs_cis``, llm.c)
    pair :math:`(2i, 2i + 1)`; tables :math:`[\cos t_0, \cos t_0, \cos t_1, \cos t_1, \dots]`.
    Equivalently, pairs are complex numbers :math:`a + ib` multiplied by :math:`e^{i t}`.

The rotation uses the first ``cos.shape[-1]`` channels of ``x`` (partial rotary: the rest pass
through). Its backward is the transpose, a rotation by :math:`-t` (:func:`apply_backward`).
Frequency scaling (``linear``, ``dynamic``, ``yarn``, ``longrope``, ``llama3``,
``proportional``, static ``ntk``) lives in :mod:`posenc_np.rope_scaling` and is re-exported
here as :func:`inv_freq`. Tables are exact by default: every float64 entry is within one ulp of
the exact :math:`\cos`/:math:`\sin` for positions :math:`|p| < 2^{53}` (:mod:`posenc_np._exact`;
``docs/precision.md``). See ``docs/rope.md``.
"""

from __future__ import annotations

import math

import numpy as np

from . import _exact
from ._checks import (as_float_array, as_positions, check_alloc, check_angles, check_choice, check_float_dtype, check_int,
                      check_real)
from .rope_scaling import (ROPE_TYPES, inv_freq, llama3_bands, yarn_correction_dim, yarn_correction_range,
                           yarn_get_mscale)

__all__ = [
    "LAYOUTS",
    "MROPE_VARIANTS",
    "ROPE_TYPES",
    "XPOS_CENTRES",
    "apply",
    "apply_backward",
    "axial_cos_sin",
    "convert_layout",
    "cos_sin",
    "inv_freq",
    "llama3_bands",
    "long_term_decay",
    "mrope_cos_sin",
    "patch_positions",
    "rerotate",
    "xpos_cos_sin",
    "xpos_scale",
    "yarn_correction_dim",
    "yarn_correction_range",
    "yarn_get_mscale",
]

LAYOUTS = ("half", "interleaved")
BACKENDS = ("auto", "numpy", "numba")
#: How :func:`cos_sin` builds its tables.
TABLE_METHODS = ("exact", "direct", "float32-split")
XPOS_CENTRES = ("none", "torchscale", "rotary-embedding-torch")
MROPE_VARIANTS = ("qwen2-vl", "qwen3-vl")


# --------------------------------------------------------------------------- helpers

def _resolve_backend(backend, x) -> str:
    """The one place that picks the implementation of the rotation.

    ``"numpy"``: :func:`_rotate_numpy`. ``"numba"``: the kernel :func:`posenc_np.kernels.rope_apply`
    (float32/float64 only). ``"auto"``: the kernel from ``ROPE_NUMBA_MIN_ELEMENTS`` elements of
    ``x`` up (the measured crossover; reading it does not import Numba), NumPy below.
    """
    backend = check_choice(backend, "backend", BACKENDS)
    fits = x.dtype in (np.float32, np.float64)
    if backend == "numba":
        if not fits:
            raise TypeError(f"backend='numba' needs float32 or float64 input, got {x.dtype}")
        return "numba"
    if backend == "auto" and fits:
        from .kernels import ROPE_NUMBA_MIN_ELEMENTS

        if x.size >= ROPE_NUMBA_MIN_ELEMENTS:
            return "numba"
    return "numpy"


def _check_inv_freq(inv_freq) -> np.ndarray:
    arr = as_float_array(inv_freq, "inv_freq").astype(np.float64, copy=False)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"inv_freq must be a non-empty 1-D array, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError("inv_freq must be finite (no NaN or inf)")
    return arr


def _check_attention_factor(attention_factor) -> float:
    return check_real(attention_factor, "attention_factor", positive=True)


#: Largest amplitude handed to the exact kernel as is: its Veltkamp split multiplies by 2^27 + 1,
#: which overflows past about 2^997. A larger factor is applied afterwards as an exact power of two.
_EXACT_AMPLITUDE_MAX = 2.0**900


def _exact_cos_sin(pos, consts, amplitude: float):
    """``_exact.cos_sin`` with ``amplitude`` (finite, > 0) of any size; see :data:`_EXACT_AMPLITUDE_MAX`."""
    if amplitude <= _EXACT_AMPLITUDE_MAX:
        return _exact.cos_sin(pos, consts, amplitude=amplitude)
    mantissa, exponent = math.frexp(amplitude)
    c, s = _exact.cos_sin(pos, consts, amplitude=mantissa)
    return np.ldexp(c, exponent), np.ldexp(s, exponent)


def _tables(c: np.ndarray, s: np.ndarray, layout: str, dtype, amplitude_name: str = "attention_factor"):
    """Lay per-pair values ``c``, ``s`` (``(..., n)``) out as ``(..., 2n)`` for ``layout``, cast once to ``dtype``.

    A narrower ``dtype`` that cannot hold the values raises ``ValueError`` naming
    ``amplitude_name`` (what scaled them) instead of casting them to inf.
    """
    if np.dtype(dtype) != np.float64 and c.size:
        big = np.finfo(dtype).max
        if max(np.max(np.abs(c)), np.max(np.abs(s))) > big:
            raise ValueError(f"{amplitude_name} makes the cos/sin tables exceed {np.dtype(dtype)}'s largest value "
                             f"{big}; use a wider dtype")
    if layout == "half":
        c, s = np.concatenate([c, c], axis=-1), np.concatenate([s, s], axis=-1)
    else:
        c, s = np.repeat(c, 2, axis=-1), np.repeat(s, 2, axis=-1)
    return c.astype(dtype, copy=False), s.astype(dtype, copy=False)


def _pair_slices(n: int, layout: str) -> tuple[slice, slice]:
    """Channels holding the first and second member of each of the ``n`` pairs."""
    return (slice(0, n), slice(n, 2 * n)) if layout == "half" else (slice(0, 2 * n, 2), slice(1, 2 * n, 2))


def _check_pairs(table: np.ndarray, layout: str, name: str) -> None:
    """Both members of each pair of a cos/sin table must hold the same value.

    A table built for the other layout fails this check (unless every angle is equal), which
    catches the classic half/interleaved mix-up instead of rotating the wrong channels.
    """
    first, second = _pair_slices(table.shape[-1] // 2, layout)
    if not np.array_equal(table[..., first], table[..., second]):
        raise ValueError(f"{name} is not a {layout!r}-layout table: the two channels of each pair differ "
                         f"(expected {'[c | c]' if layout == 'half' else '[c0, c0, c1, c1, ...]'}; "
                         "was it built for the other layout?)")


def _check_tables(x: np.ndarray, cos, sin, name: str) -> tuple[np.ndarray, np.ndarray]:
    """Shape checks shared by :func:`apply` and the kernel :func:`posenc_np.kernels.rope_apply`:
    equal shapes, an even rotary dim no wider than ``x``, leading axes that broadcast to ``x``'s."""
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


def _prepare(x, cos, sin, layout, backend, name):
    """Validate a rotation call; return ``(x, cos, sin, layout, backend)``."""
    layout = check_choice(layout, "layout", LAYOUTS)
    x = np.asarray(x)
    check_float_dtype(x.dtype, f"{name}.dtype")
    cos, sin = _check_tables(x, cos, sin, name)
    if not (np.all(np.isfinite(cos)) and np.all(np.isfinite(sin))):
        raise ValueError("cos and sin must be finite (no NaN or inf)")
    _check_pairs(cos, layout, "cos")
    _check_pairs(sin, layout, "sin")
    return x, cos, sin, layout, _resolve_backend(backend, x)


def _rotate_numpy(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, layout: str, inverse: bool) -> np.ndarray:
    """Rotate each pair ``(a, b)`` of ``x`` to ``(a c - b s, a s + b c)``; channels past the pairs copy.

    ``c``/``s`` are the per-pair values of the tables, cast to ``x``'s dtype. The forward
    rotation uses ``s = sin t``, the inverse (the backward) ``s = -sin t``.
    """
    n = cos.shape[-1] // 2
    first, second = _pair_slices(n, layout)
    c = cos[..., first].astype(x.dtype, copy=False)
    s = sin[..., first].astype(x.dtype, copy=False)
    if inverse:
        s = -s
    a, b = x[..., first], x[..., second]
    out = np.empty_like(x)
    out[..., first] = a * c - b * s
    out[..., second] = a * s + b * c
    out[..., 2 * n:] = x[..., 2 * n:]
    return out


def _rotate_numba(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, layout: str, inverse: bool) -> np.ndarray:
    """The same rotation by the Numba kernel (bit-identical to :func:`_rotate_numpy` on valid tables)."""
    from .kernels import rope_apply

    return rope_apply(x, cos, sin, layout=layout, inverse=inverse)


#: Rotation implementations by backend name (what _resolve_backend returns).
_ROTATE = {"numpy": _rotate_numpy, "numba": _rotate_numba}


# --------------------------------------------------------------------------- cos/sin, apply, backward

def cos_sin(positions, inv_freq, *, attention_factor: float = 1.0, layout: str = "half",
            dtype=np.float64, method: str = "exact") -> tuple[np.ndarray, np.ndarray]:
    r"""Tables :math:`f\cos(p\,\omega_i)` and :math:`f\sin(p\,\omega_i)` laid out for ``layout``.

    Parameters
    ----------
    positions : array_like of int or float, any shape
        :math:`|p| < 2^{53}`; float positions also below :math:`2^{24}` (float32) or
        :math:`2^{11}` (float16), where their dtype still holds every integer.
    inv_freq : array_like, shape ``(n,)``
        From :func:`inv_freq` (or any finite frequencies, e.g. rotary-embedding-torch ``pixel``).
        An array from :func:`inv_freq` carries its unrounded values, which ``"exact"`` uses;
        any other array's doubles are taken as the exact frequencies.
    attention_factor : float
        :math:`f > 0`, multiplies both tables (YaRN, LongRoPE): logits scale by :math:`f^2`.
    layout : {"half", "interleaved"}
        ``half``: :math:`[c_0 \dots c_{n-1} \mid c_0 \dots c_{n-1}]`; ``interleaved``:
        :math:`[c_0, c_0, c_1, c_1, \dots]`.
    dtype : floating dtype
        The tables are cast once at the end.
    method : {"exact", "direct", "float32-split"}
        ``"exact"``: every float64 value within one ulp of the exact :math:`f\cos(p\,\omega_i)`
        (nearly always correctly rounded), at any position (:mod:`posenc_np._exact`).
        ``"direct"``: the ordinary float64 implementation, :math:`p\,\omega_i` rounded to float64
        and libm cos/sin; error about :math:`|p\,\omega_i| \cdot 2^{-53}` (8.8e-10 at
        :math:`10^7`). ``"float32-split"``: float32 arithmetic only, integer positions: with
        :math:`p = a\,2^{12} + b`, two small tables of exact values rounded to float32 combined
        by the angle-addition formulas (error at most 1.44e-7 at any position, measured 1.43e-7;
        see :func:`posenc_np._exact.float32_split`). Measured costs: ``docs/benchmarks.md``.

    Returns
    -------
    cos, sin : ndarray, shape ``positions.shape + (2n,)``

    Raises
    ------
    ValueError
        For positions that cannot be represented (see ``positions``), rather than rounding them.
    """
    layout = check_choice(layout, "layout", LAYOUTS)
    dtype = check_float_dtype(dtype)
    method = check_choice(method, "method", TABLE_METHODS)
    freqs = _check_inv_freq(inv_freq)
    factor = _check_attention_factor(attention_factor)
    pos = _exact.positions(positions)
    check_alloc(pos.shape + (2 * freqs.size,), np.float64, "cos/sin tables positions.shape + (2 * len(inv_freq),)")
    if method == "direct":
        p = pos.whole.astype(np.float64) + (0.0 if pos.frac is None else pos.frac)
        check_angles(p, freqs)
        angles = p[..., None] * freqs
        return _tables(factor * np.cos(angles), factor * np.sin(angles), layout, dtype)
    consts = _exact.turn_constants(inv_freq)
    if method == "float32-split":
        c, s = _exact.float32_split(pos, consts)
        f32 = np.float32(factor)
        return _tables(c * f32, s * f32, layout, dtype) if factor != 1.0 else _tables(c, s, layout, dtype)
    return _tables(*_exact_cos_sin(pos, consts, factor), layout, dtype)


def apply(x, cos, sin, *, layout: str = "half", backend: str = "auto") -> np.ndarray:
    r"""Rotate the first ``cos.shape[-1]`` channels of ``x``: :math:`y = R_t x` per channel pair.

    ``half``: :math:`y_{:h} = x_{:h} c - x_{h:2h} s`, :math:`y_{h:2h} = x_{:h} s + x_{h:2h} c`;
    ``interleaved``: the same on pairs :math:`(2i, 2i+1)`. Channels past ``cos.shape[-1]`` are
    copied (partial rotary, GPT-NeoX ``rotary_pct``). This equals Hugging Face's
    ``x * cos + rotate_half(x) * sin``.

    Parameters
    ----------
    x : ndarray, floating, shape ``(..., D)``
        Queries or keys, e.g. ``(batch, heads, seq, head_dim)``.
    cos, sin : ndarray, shape ``(..., d)``, ``d <= D`` even
        From :func:`cos_sin` (or :func:`xpos_cos_sin`, :func:`axial_cos_sin`,
        :func:`mrope_cos_sin`). Leading axes broadcast against ``x``'s (``(seq, d)`` serves
        ``(batch, heads, seq, D)``). Both channels of each pair must hold the same value (the
        layout check).
    layout : {"half", "interleaved"}
    backend : {"auto", "numpy", "numba"}
        ``"numba"``: the parallel kernel (float32/float64; bit-identical results);
        ``"auto"``: the kernel for ``x.size >= ROPE_NUMBA_MIN_ELEMENTS``, NumPy below.

    Returns
    -------
    ndarray, shape and dtype of ``x``
        Computed in ``x``'s dtype (``cos``/``sin`` are cast to it first).
    """
    x, cos, sin, layout, backend = _prepare(x, cos, sin, layout, backend, "x")
    return _ROTATE[backend](x, cos, sin, layout, False)


def apply_backward(dy, cos, sin, *, layout: str = "half", backend: str = "auto") -> np.ndarray:
    r"""Gradient of :func:`apply` with respect to ``x``: :math:`dx = R_t^\top dy = R_{-t}\,dy`.

    The transpose of the pairwise map :math:`\begin{pmatrix}c & -s\\ s & c\end{pmatrix}` is the
    same map with :math:`-s`, so this is :func:`apply`'s rotation with ``-sin``; pass-through
    channels get ``dy`` unchanged. It is the exact vector-Jacobian product for any tables
    (also xPos-scaled or with an attention factor); it is the *inverse* of :func:`apply` only
    when :math:`c^2 + s^2 = 1` (attention factor 1, no xPos scale).
    """
    dy, cos, sin, layout, backend = _prepare(dy, cos, sin, layout, backend, "dy")
    return _ROTATE[backend](dy, cos, sin, layout, True)


def rerotate(x, positions, old_inv_freq, new_inv_freq, *, layout: str = "half",
             backend: str = "auto") -> np.ndarray:
    r"""Move keys rotated with ``old_inv_freq`` to ``new_inv_freq``: rotate by :math:`p(\omega' - \omega)`.

    Rotations of a pair compose additively, so :math:`R_{p\omega'} = R_{p(\omega' - \omega)} R_{p\omega}`.
    Use it on a KV cache built before dynamic NTK or LongRoPE changed the frequencies (see
    ``docs/rope.md``); the attention factor is unchanged by both, so it is not involved.
    """
    old, new = _check_inv_freq(old_inv_freq), _check_inv_freq(new_inv_freq)
    if old.shape != new.shape:
        raise ValueError(f"old_inv_freq and new_inv_freq must have the same shape, got {old.shape} and {new.shape}")
    cos, sin = cos_sin(positions, new - old, layout=layout)
    return apply(x, cos, sin, layout=layout, backend=backend)


def convert_layout(w, num_heads: int, *, src: str, dst: str, rotary_dim: int | None = None) -> np.ndarray:
    r"""Permute the rows of a q/k projection weight (or bias) between ``interleaved`` and ``half``.

    Within each head, ``interleaved`` row :math:`2i` moves to ``half`` row :math:`i` and row
    :math:`2i+1` to row :math:`i + r/2` (:math:`r` = ``rotary_dim``, default the head dim);
    rows past :math:`r` stay. This is the permutation of Hugging Face's
    ``convert_llama_weights_to_hf.py`` (``permute``: view ``(heads, r/2, 2, in)``, swap axes
    1 and 2). With :math:`W_{half} = P\,W_{int}`, :math:`q_{half} = P q_{int}` and RoPE commutes
    with :math:`P`, so attention scores are identical. ``dst -> src`` undoes it.

    Parameters
    ----------
    w : ndarray, shape ``(num_heads * head_dim, ...)``
    num_heads : int
    src, dst : {"half", "interleaved"}
    rotary_dim : int, optional
        Even, at most the head dim (partial rotary); default the head dim.

    Returns
    -------
    ndarray, same shape and dtype as ``w`` (a new array)
    """
    src = check_choice(src, "src", LAYOUTS)
    dst = check_choice(dst, "dst", LAYOUTS)
    w = np.asarray(w)
    num_heads = check_int(num_heads, "num_heads", minimum=1)
    if w.ndim == 0 or w.shape[0] % num_heads:
        raise ValueError(f"w's first axis ({w.shape[:1]}) must be num_heads * head_dim with num_heads={num_heads}")
    head_dim = w.shape[0] // num_heads
    r = head_dim if rotary_dim is None else check_int(rotary_dim, "rotary_dim", minimum=2)
    if r % 2 or r > head_dim:
        raise ValueError(f"rotary_dim must be even and <= head_dim={head_dim}, got {r}")
    # half row j takes interleaved row int_of_half[j]
    int_of_half = np.concatenate([np.arange(0, r, 2), np.arange(1, r, 2), np.arange(r, head_dim)])
    within = {("interleaved", "half"): int_of_half, ("half", "interleaved"): np.argsort(int_of_half)}.get(
        (src, dst), np.arange(head_dim))
    rows = (np.arange(num_heads)[:, None] * head_dim + within).reshape(-1)
    return w[rows]


# --------------------------------------------------------------------------- xPos

def xpos_scale(positions, dim: int, *, role: str, centre="none", seq_len: int | None = None,
               scale_base: float = 512.0) -> np.ndarray:
    r"""xPos per-pair scale :math:`\zeta_i^{\pm (p - c)/B}`, :math:`\zeta_i = (2i + 0.4d)/(1.4d)`.

    Sun et al. 2022, "A Length-Extrapolatable Transformer". Queries get the ``+`` sign, keys
    the ``-`` sign, so :math:`\langle q_m, k_n \rangle` carries :math:`\zeta^{(m-n)/B}` and the
    centre :math:`c` cancels: it only keeps the scales near 1 (:math:`\zeta^{-p/B}` overflows
    for long sequences). Centre conventions, with :math:`N` = ``seq_len`` (total length,
    positions :math:`0 \dots N-1`; q and k must use the same :math:`N`):

    ``"none"``
        :math:`c = 0`.
    ``"torchscale"``
        :math:`c = \lceil N/2 \rceil` (``min_pos = -(length + offset) // 2``).
    ``"rotary-embedding-torch"``
        :math:`c = \lfloor N/2 \rfloor` (``t - len(t) // 2``).
    a real number
        that :math:`c`.

    Returns
    -------
    ndarray, float64, shape ``positions.shape + (dim // 2,)``
    """
    role = check_choice(role, "role", ("query", "key"))
    dim = check_int(dim, "dim", minimum=2)
    if dim % 2:
        raise ValueError(f"dim must be even, got {dim}")
    scale_base = check_real(scale_base, "scale_base", positive=True)
    if isinstance(centre, str):
        centre = check_choice(centre, "centre", XPOS_CENTRES)
        if centre == "none":
            c = 0.0
        else:
            if seq_len is None:
                raise ValueError(f"centre={centre!r} needs seq_len (the total length N shared by q and k)")
            n_total = check_int(seq_len, "seq_len", minimum=1, maximum=2**53)
            c = float(-(-n_total // 2) if centre == "torchscale" else n_total // 2)
    else:
        c = check_real(centre, "centre")
    pos = as_positions(positions)
    check_alloc(pos.shape + (dim // 2,), np.float64, "xPos scale positions.shape + (dim // 2,)")
    zeta = (np.arange(0, dim, 2, dtype=np.float64) + 0.4 * dim) / (1.4 * dim)
    with np.errstate(over="ignore", invalid="ignore"):
        power = (pos.astype(np.float64) - c) / scale_base
    if not np.all(np.isfinite(power)):
        raise ValueError(f"(positions - centre) / scale_base overflows float64 (centre {c}, scale_base {scale_base})")
    if role == "key":
        power = -power
    # zeta_i < 1, so the largest scale is zeta_0 ** min(power): it overflows iff -min(power) ln(1/zeta_0) > ln(max)
    worst = -float(np.min(power)) if power.size else 0.0
    if worst * -np.log(zeta[0]) > np.log(np.finfo(np.float64).max):
        raise ValueError(f"the xPos {role} scale overflows float64: |p - c| / scale_base reaches {worst:.6g} "
                         f"(centre {c}, scale_base {scale_base}); centre the positions (centre='torchscale' or a "
                         "number) or raise scale_base")
    return zeta ** power[..., None]


def xpos_cos_sin(positions, inv_freq, *, role: str, centre="none", seq_len: int | None = None,
                 scale_base: float = 512.0, layout: str = "half", dtype=np.float64):
    r"""RoPE tables multiplied by the xPos scale: :math:`\zeta_i^{\pm(p-c)/B}\cos(p\,\omega_i)`, same for sin.

    Feed them to :func:`apply` / :func:`apply_backward` (the backward is the transposed,
    equally scaled map). Rotation angles use the uncentred positions, as in torchscale.
    Parameters as in :func:`xpos_scale` and :func:`cos_sin`; ``dim = 2 * len(inv_freq)``.
    """
    layout = check_choice(layout, "layout", LAYOUTS)
    dtype = check_float_dtype(dtype)
    freqs = _check_inv_freq(inv_freq)
    scale = xpos_scale(positions, 2 * freqs.size, role=role, centre=centre, seq_len=seq_len, scale_base=scale_base)
    c, s = _exact.cos_sin(_exact.positions(positions), _exact.turn_constants(inv_freq))
    return _tables(scale * c, scale * s, layout, dtype, "the xPos scale (positions, centre, scale_base)")


# --------------------------------------------------------------------------- multi-axis: 2-D axial, M-RoPE

def _stream_cos_sin(positions, consts, stream: np.ndarray, name: str, amplitude: float):
    """Exact per-pair ``amplitude * cos/sin`` ``(..., n)`` with pair ``j`` driven by position stream
    ``stream[j]``: angle ``positions[stream[j], ...] * freqs[j]`` (``consts`` already per pair)."""
    pos = as_positions(positions, name)
    if pos.ndim < 1 or pos.shape[0] <= int(stream.max()):
        raise ValueError(f"{name} must have shape ({int(stream.max()) + 1}, ...) (one row per position "
                         f"stream), got {pos.shape}")
    check_alloc(pos.shape[1:] + (2 * stream.size,), np.float64, f"cos/sin tables {name}.shape[1:] + (rotary dim,)")
    c, s = np.empty(pos.shape[1:] + stream.shape), np.empty(pos.shape[1:] + stream.shape)
    for a in np.unique(stream):
        cols = np.flatnonzero(stream == a)
        c[..., cols], s[..., cols] = _exact_cos_sin(_exact.positions(pos[a], name), consts.take(cols), amplitude)
    return c, s


def axial_cos_sin(positions, inv_freq, *, attention_factor: float = 1.0, layout: str = "half",
                  dtype=np.float64):
    r"""Axial RoPE tables for :math:`A`-dimensional positions (2-D for image patches).

    ``positions`` has shape ``(A, ...)``; ``inv_freq`` (:math:`m` values) is used by every
    axis. Pair :math:`j = a\,m + k` rotates by :math:`p_a\,\omega_k`: the first :math:`m` pairs
    follow axis 0, the next :math:`m` axis 1, and so on; the rotary dim is :math:`2Am`. In the
    ``half`` layout the channels are :math:`[\text{axis 0} \mid \text{axis 1} \mid \text{axis 0}
    \mid \text{axis 1}]`, exactly Qwen2-VL's vision RoPE with positions ``(h, w)`` and
    ``inv_freq(head_dim // 2)``; RoPE-ViT (Heo et al. 2024, axial) uses the ``interleaved``
    layout with positions ``(x, y)`` = (column, row). See :func:`patch_positions`.

    Returns
    -------
    cos, sin : ndarray, shape ``positions.shape[1:] + (2 * A * m,)``
    """
    layout = check_choice(layout, "layout", LAYOUTS)
    dtype = check_float_dtype(dtype)
    freqs = _check_inv_freq(inv_freq)
    factor = _check_attention_factor(attention_factor)
    axes = np.shape(positions)[0] if np.ndim(positions) else 0
    if axes < 1:
        raise ValueError(f"positions must have shape (axes, ...), got {np.shape(positions)}")
    stream = np.repeat(np.arange(axes), freqs.size)
    consts = _exact.turn_constants(inv_freq).take(np.tile(np.arange(freqs.size), axes))
    return _tables(*_stream_cos_sin(positions, consts, stream, "positions", factor), layout, dtype)


def patch_positions(height: int, width: int) -> np.ndarray:
    """``(row, col)`` of each patch of a ``height x width`` grid in row-major order: shape ``(2, height*width)``."""
    height = check_int(height, "height", minimum=1)
    width = check_int(width, "width", minimum=1)
    check_alloc((2, height, width), np.int64, "patch positions (2, height * width)")
    rows, cols = np.meshgrid(np.arange(height), np.arange(width), indexing="ij")
    return np.stack([rows.reshape(-1), cols.reshape(-1)]).astype(np.int64)


def _mrope_streams(section, n: int, variant: str) -> np.ndarray:
    """Which of the 3 position streams (t, h, w) drives each of the ``n`` frequencies."""
    if not isinstance(section, (list, tuple, np.ndarray)) or len(section) == 0:
        raise TypeError(f"mrope_section must be a non-empty list of ints, got {section!r}")
    section = [check_int(v, "mrope_section entry", minimum=0) for v in section]
    if sum(section) != n:
        raise ValueError(f"mrope_section {section} must sum to len(inv_freq) = {n}")
    if variant == "qwen2-vl":  # contiguous chunks; chunk k follows stream k % 3 (HF: m[i % 3])
        return np.repeat(np.arange(len(section)) % 3, section)
    if len(section) != 3:
        raise ValueError(f"variant 'qwen3-vl' needs 3 sections (t, h, w), got {section}")
    j = np.arange(n)
    out = np.zeros(n, dtype=np.int64)  # interleaved t, h, w, t, h, w, ...; t fills the rest
    for stream in (1, 2):
        out[(j % 3 == stream) & (j < 3 * section[stream])] = stream
    return out


def mrope_cos_sin(positions, inv_freq, mrope_section, *, variant: str = "qwen2-vl",
                  attention_factor: float = 1.0, layout: str = "half", dtype=np.float64):
    r"""Multimodal RoPE tables (Qwen2-VL, Wang et al. 2024): frequency chunks follow t, h or w.

    ``positions`` has shape ``(3, ..., L)`` (temporal, height, width ids; a text token has all
    three equal, and then M-RoPE equals 1-D RoPE). ``mrope_section`` (e.g. ``[16, 24, 24]``)
    sums to ``len(inv_freq)``. Frequency :math:`j` uses stream

    ``variant="qwen2-vl"`` (contiguous)
        :math:`k \bmod 3` where :math:`j` lies in the :math:`k`-th chunk of ``mrope_section``
        (frequencies 0-15 t, 16-39 h, 40-63 w for ``[16, 24, 24]``);
    ``variant="qwen3-vl"`` (interleaved sections)
        h if :math:`j \bmod 3 = 1` and :math:`j < 3\,\mathrm{sec}_1`, w if :math:`j \bmod 3 = 2`
        and :math:`j < 3\,\mathrm{sec}_2`, else t.

    The per-frequency angles are then laid out for ``layout`` like :func:`cos_sin` (Qwen uses
    ``half``: the chunk pattern repeats in both halves).

    Returns
    -------
    cos, sin : ndarray, shape ``positions.shape[1:] + (2 * len(inv_freq),)``
    """
    layout = check_choice(layout, "layout", LAYOUTS)
    variant = check_choice(variant, "variant", MROPE_VARIANTS)
    dtype = check_float_dtype(dtype)
    freqs = _check_inv_freq(inv_freq)
    factor = _check_attention_factor(attention_factor)
    if np.ndim(positions) < 2 or np.shape(positions)[0] != 3:
        raise ValueError(f"positions must have shape (3, ..., L) (temporal, height, width), got {np.shape(positions)}")
    stream = _mrope_streams(mrope_section, freqs.size, variant)
    return _tables(*_stream_cos_sin(positions, _exact.turn_constants(inv_freq), stream, "positions", factor),
                   layout, dtype)


# --------------------------------------------------------------------------- long-term decay

def long_term_decay(distances, inv_freq) -> np.ndarray:
    r"""RoFormer's relative upper bound :math:`\frac{1}{n}\sum_{j=1}^{n} |S_j|` (Su et al. 2021, sec. 3.4.3).

    With :math:`h_i` the complex products of query and key pairs and
    :math:`S_j = \sum_{k=0}^{j-1} e^{i r \theta_k}` (:math:`r = m - n`), Abel summation gives

    .. math:: \Big|\sum_{i=0}^{n-1} h_i e^{i r\theta_i}\Big| \le \Big(\max_i |h_{i+1} - h_i|\Big) \sum_{j=1}^{n} |S_j|,
        \qquad h_n = 0,

    and the average :math:`\frac1n \sum_j |S_j|` decays as :math:`|r|` grows (their figure 2).

    Returns
    -------
    ndarray, float64, shape ``distances.shape``
    """
    freqs = _check_inv_freq(inv_freq)
    r = as_positions(distances, "distances").astype(np.float64)
    check_alloc(r.shape + freqs.shape, np.complex128, "partial sums distances.shape + (len(inv_freq),)")
    check_angles(r, freqs, "distances * inv_freq")
    partial_sums = np.cumsum(np.exp(1j * r[..., None] * freqs), axis=-1)
    return np.abs(partial_sums).mean(axis=-1)

