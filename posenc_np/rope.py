r"""Rotary position embedding (RoPE): frequencies, cos/sin tables, rotation and its backward,
layouts, partial rotary, p-RoPE, xPos, 2-D axial RoPE and M-RoPE.

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
here as :func:`inv_freq` and :func:`exact_inv_freq`. p-RoPE (Barbero et al. 2024, arXiv
2410.06205) keeps only the highest fraction :math:`p` of any set of frequencies
(:func:`p_rope_frequencies`). Tables are exact: every float64 entry is within one ulp of the exact
:math:`\cos`/:math:`\sin` of the angle :math:`p\,\omega_i` for positions :math:`|p| < 2^{53}`,
where :math:`\omega_i` are the given doubles, or the formula's unrounded values when given as an
:class:`ExactFrequencies` (:func:`exact_inv_freq`; :mod:`posenc_np._exact`, ``docs/precision.md``).

Each public function below is a *door*: it checks its arguments with one-line requirements
and calls a *core* that holds the formula and checks nothing (:func:`rotate_pairs`,
:func:`rotate`, :func:`rotate_qk`, :func:`cos_sin_tables`, :func:`xpos_factors`,
:func:`zero_low_frequencies`); the model and the kernels call the cores. See ``docs/rope.md``.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from . import _backend, _exact

from ._checks import (ROPE_LAYOUTS, as_float_array, as_positions, check_alloc, check_choice, check_even,
                      check_float_dtype, check_int, check_out, check_real, check_rope_tables, require)
from ._exact import ExactFrequencies
from .rope_scaling import (ROPE_TYPES, exact_inv_freq, inv_freq, llama3_bands, yarn_correction_dim,
                           yarn_correction_range, yarn_get_mscale)

__all__ = [
    "LAYOUTS",
    "MROPE_VARIANTS",
    "ROPE_TYPES",
    "XPOS_CENTRES",
    "ExactFrequencies",
    "apply",
    "apply_backward",
    "apply_qk",
    "apply_qk_backward",
    "axial_cos_sin",
    "convert_layout",
    "cos_sin",
    "cos_sin_tables",
    "exact_inv_freq",
    "inv_freq",
    "layout_tables",
    "llama3_bands",
    "long_term_decay",
    "mrope_cos_sin",
    "p_rope_frequencies",
    "patch_positions",
    "rerotate",
    "rotate",
    "rotate_pairs",
    "rotate_qk",
    "xpos_cos_sin",
    "xpos_factors",
    "xpos_scale",
    "yarn_correction_dim",
    "yarn_correction_range",
    "yarn_get_mscale",
    "zero_low_frequencies",
]

LAYOUTS = ROPE_LAYOUTS  # ("half", "interleaved"): defined with the table check the kernel shares
#: How :func:`cos_sin` builds its tables.
TABLE_METHODS = ("exact", "direct", "float32-split")
XPOS_CENTRES = ("none", "torchscale", "rotary-embedding-torch")
MROPE_VARIANTS = ("qwen2-vl", "qwen3-vl")


# --------------------------------------------------------------------------- the rotation: cores

def _pair_slices(n: int, layout: str) -> tuple[slice, slice]:
    """Channels holding the first and second member of each of the ``n`` pairs."""
    return (slice(0, n), slice(n, 2 * n)) if layout == "half" else (slice(0, 2 * n, 2), slice(1, 2 * n, 2))


def _pair_values(cos: np.ndarray, sin: np.ndarray, layout: str, dtype, inverse: bool):
    """The per-pair ``c``, ``s`` of layout tables, cast to ``dtype``; ``s = -sin t`` for the inverse."""
    first, _ = _pair_slices(cos.shape[-1] // 2, layout)
    c = cos[..., first].astype(dtype, copy=False)
    s = sin[..., first].astype(dtype, copy=False)
    return c, (-s if inverse else s)


def rotate_pairs(x: np.ndarray, c: np.ndarray, s: np.ndarray, layout: str, out: np.ndarray | None = None) -> np.ndarray:
    r"""Each pair :math:`(a, b)` of ``x`` to :math:`(a c - b s,\ a s + b c)`; channels past the pairs are copied.

    ``c``, ``s``: per-pair values ``(..., n)`` broadcasting against ``x[..., :2n]``'s pairs, in
    ``x``'s dtype. Both results are formed before either is stored, so ``out`` may be ``x`` (in
    place). The core of :func:`apply`; arguments are not checked.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import rope
    >>> x = np.array([1.0, 2.0, 3.0, 4.0, 5.0])     # pairs (0, 2), (1, 3) in "half"; channel 4 passes through
    >>> rope.rotate_pairs(x, np.array([0.0, 1.0]), np.array([1.0, 0.0]), "half").tolist()   # t = 90 deg, t = 0
    [-3.0, 2.0, 1.0, 4.0, 5.0]
    >>> rope.rotate_pairs(x, np.array([0.0, 1.0]), np.array([1.0, 0.0]), "interleaved").tolist()  # (0, 1), (2, 3)
    [-2.0, 1.0, 3.0, 4.0, 5.0]
    """
    n = c.shape[-1]
    first, second = _pair_slices(n, layout)
    a, b = x[..., first], x[..., second]
    ya, yb = a * c - b * s, a * s + b * c
    if out is None:
        out = np.empty_like(x)
    out[..., first] = ya
    out[..., second] = yb
    if out is not x:
        out[..., 2 * n:] = x[..., 2 * n:]
    return out


def _choose(backend: str, x: np.ndarray) -> str:
    """The one backend rule (:func:`posenc_np._backend.choose`) for rotating ``x``: the kernel takes
    float32/float64, and ``"auto"`` picks it from ``ROPE_NUMBA_MIN_ELEMENTS`` elements up."""
    takes = x.dtype in (np.float32, np.float64)
    return _backend.choose(backend, kernel_takes=takes, large=x.size >= _backend.ROPE_NUMBA_MIN_ELEMENTS,
                           kernel_needs="" if takes else f"float32 or float64 input, got {x.dtype}")


def rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, layout: str, inverse: bool = False, backend: str = "auto",
           out: np.ndarray | None = None) -> np.ndarray:
    r"""Rotate ``x`` by layout tables ``cos``, ``sin``: :math:`R_t x`, or :math:`R_{-t} x` for the ``inverse``.

    The core of :func:`apply` and :func:`apply_backward`; arguments are not checked (``backend`` is
    chosen by :func:`posenc_np._backend.choose`). The Numba kernel is bit-identical to the NumPy
    :func:`rotate_pairs` on layout tables.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import rope
    >>> cos, sin = rope.layout_tables(np.array([0.0, 1.0]), np.array([1.0, 0.0]), "half", np.float64)
    >>> y = rope.rotate(np.array([1.0, 2.0, 3.0, 4.0]), cos, sin, "half")    # pair (0, 2) by 90 deg, (1, 3) by 0
    >>> y.tolist(), rope.rotate(y, cos, sin, "half", inverse=True).tolist()
    ([-3.0, 2.0, 1.0, 4.0], [1.0, 2.0, 3.0, 4.0])
    """
    if _choose(backend, x) == "numba":
        return _backend.kernels("rope").rotate_tables(x, cos, sin, layout, inverse, out)
    return rotate_pairs(x, *_pair_values(cos, sin, layout, x.dtype, inverse), layout, out)


def rotate_qk(q: np.ndarray, k: np.ndarray, cos: np.ndarray, sin: np.ndarray, layout: str, inverse: bool = False,
              backend: str = "auto", out_q: np.ndarray | None = None,
              out_k: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`rotate` of ``q`` and ``k`` by the same tables (read once for both on the NumPy path).
    The core of :func:`apply_qk`; arguments are not checked.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import rope
    >>> cos, sin = rope.layout_tables(np.array([0.0, 1.0]), np.array([1.0, 0.0]), "half", np.float64)
    >>> q, k = rope.rotate_qk(np.ones((2, 4)), np.ones((1, 4)), cos, sin, "half")   # (1, 1) by 90 deg is (-1, 1)
    >>> q.tolist(), k.tolist()
    ([[-1.0, 1.0, 1.0, 1.0], [-1.0, 1.0, 1.0, 1.0]], [[-1.0, 1.0, 1.0, 1.0]])
    """
    if _choose(backend, q) == "numba" and _choose(backend, k) == "numba":
        kernel = _backend.kernels("rope")
        return (kernel.rotate_tables(q, cos, sin, layout, inverse, out_q),
                kernel.rotate_tables(k, cos, sin, layout, inverse, out_k))
    c, s = _pair_values(cos, sin, layout, np.result_type(q, k), inverse)
    return (rotate_pairs(q, c.astype(q.dtype, copy=False), s.astype(q.dtype, copy=False), layout, out_q),
            rotate_pairs(k, c.astype(k.dtype, copy=False), s.astype(k.dtype, copy=False), layout, out_k))


# --------------------------------------------------------------------------- tables: cores

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


def layout_tables(c: np.ndarray, s: np.ndarray, layout: str, dtype: DTypeLike) -> tuple[np.ndarray, np.ndarray]:
    r"""Per-pair values ``c``, ``s`` ``(..., n)`` laid out as ``(..., 2n)`` tables for ``layout``, cast
    once to ``dtype``: ``half`` :math:`[c_0 \dots c_{n-1} \mid c_0 \dots c_{n-1}]`, ``interleaved``
    :math:`[c_0, c_0, c_1, c_1, \dots]`. Arguments are not checked.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import rope
    >>> c, s = np.array([0.5, 1.0]), np.array([0.25, 0.0])
    >>> [t.tolist() for t in rope.layout_tables(c, s, "half", np.float64)]
    [[0.5, 1.0, 0.5, 1.0], [0.25, 0.0, 0.25, 0.0]]
    >>> [t.tolist() for t in rope.layout_tables(c, s, "interleaved", np.float32)]
    [[0.5, 0.5, 1.0, 1.0], [0.25, 0.25, 0.0, 0.0]]
    """
    if layout == "half":
        c, s = np.concatenate([c, c], axis=-1), np.concatenate([s, s], axis=-1)
    else:
        c, s = np.repeat(c, 2, axis=-1), np.repeat(s, 2, axis=-1)
    return c.astype(dtype, copy=False), s.astype(dtype, copy=False)


def cos_sin_tables(pos: _exact.Positions, inv_freq: ArrayLike | ExactFrequencies, factor: float, layout: str,
                   dtype: DTypeLike, method: str = "exact") -> tuple[np.ndarray, np.ndarray]:
    r"""Tables :math:`f\cos(p\,\omega_i)`, :math:`f\sin(p\,\omega_i)` for ``layout`` (see :func:`cos_sin`).

    ``pos``: :func:`posenc_np._exact.positions` of the positions; ``inv_freq``: an array (its doubles
    are the frequencies) or :class:`ExactFrequencies`. The core of :func:`cos_sin`; arguments are
    not checked.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import _exact, rope
    >>> pos = _exact.positions(np.array([0, 1]))
    >>> cos, sin = rope.cos_sin_tables(pos, np.array([1.0, 0.5]), 1.0, "half", np.float64)
    >>> cos.round(6).tolist()                      # cos(0) = 1; cos(1), cos(0.5)
    [[1.0, 1.0, 1.0, 1.0], [0.540302, 0.877583, 0.540302, 0.877583]]
    >>> sin.round(6).tolist()
    [[0.0, 0.0, 0.0, 0.0], [0.841471, 0.479426, 0.841471, 0.479426]]
    """
    if method == "direct":
        w = inv_freq.rounded if isinstance(inv_freq, ExactFrequencies) else np.asarray(inv_freq, dtype=np.float64)
        angles = (pos.whole.astype(np.float64) + (0.0 if pos.frac is None else pos.frac))[..., None] * w
        return layout_tables(factor * np.cos(angles), factor * np.sin(angles), layout, dtype)
    consts = _exact.turn_constants(inv_freq)
    if method == "float32-split":
        c, s = _exact.float32_split(pos, consts)
        f32 = np.float32(factor)
        return layout_tables(c * f32, s * f32, layout, dtype) if factor != 1.0 else layout_tables(c, s, layout, dtype)
    return layout_tables(*_exact_cos_sin(pos, consts, factor), layout, dtype)


# --------------------------------------------------------------------------- the doors' shared checks

def _check_frequencies(inv_freq, name: str = "inv_freq") -> np.ndarray:
    """Frequencies as float64 doubles: an :class:`ExactFrequencies`, or a finite, non-empty 1-D array."""
    freqs = as_float_array(inv_freq.rounded if isinstance(inv_freq, ExactFrequencies) else inv_freq,
                           name).astype(np.float64, copy=False)
    require(freqs.ndim == 1 and freqs.size > 0 and bool(np.all(np.isfinite(freqs))),
            f"{name} must be finite (no NaN or inf), in a non-empty 1-D array; got shape {freqs.shape}")
    return freqs


def _check_table_args(inv_freq, attention_factor, layout, dtype):
    """``(freqs, factor, layout, dtype)`` of a table builder; ``dtype`` must hold the factor (|cos| <= 1)."""
    freqs = _check_frequencies(inv_freq)
    factor = check_real(attention_factor, "attention_factor", positive=True)
    dtype = check_float_dtype(dtype)
    require(dtype == np.float64 or factor <= float(np.finfo(dtype).max), f"attention_factor makes the cos/sin tables "
            f"exceed {dtype}'s largest value {np.finfo(dtype).max}; use a wider dtype")
    return freqs, factor, check_choice(layout, "layout", LAYOUTS), dtype


def _check_rotation(cos, sin, layout, **inputs):
    """``(cos, sin, *inputs)`` of a rotation: each input (by name) a float array the tables fit
    (:func:`posenc_np._checks.check_rope_tables`, shared with the kernel); the tables finite and laid
    out for ``layout`` (both channels of each pair equal, which catches the half/interleaved mix-up)."""
    check_choice(layout, "layout", LAYOUTS)
    arrays = [np.asarray(x) for x in inputs.values()]
    for name, x in zip(inputs, arrays):
        check_float_dtype(x.dtype, f"{name}.dtype")
        cos, sin = check_rope_tables(x, cos, sin, name)
    first, second = _pair_slices(cos.shape[-1] // 2, layout)
    require(all(bool(np.isfinite(t[..., first]).all() and (t[..., first] == t[..., second]).all()) for t in (cos, sin)),
            f"cos/sin is not a {layout!r}-layout table of finite values: both channels of each pair must hold the "
            f"same finite value ({'[c | c]' if layout == 'half' else '[c0, c0, c1, c1, ...]'}; was it built for the "
            "other layout?)")
    return (cos, sin, *arrays)


def _largest(a: np.ndarray) -> float:
    return float(np.max(np.abs(a), initial=0.0))


def _overflow_message(what: str, p: float, w: float) -> str:
    return (f"{what} overflows float64 (|position| up to {p:.6g}, frequency up to {w:.6g}); the angles, and their "
            "sin and cos, would not be finite")


# --------------------------------------------------------------------------- p-RoPE

def zero_low_frequencies(inv_freq: np.ndarray, p: float) -> np.ndarray:
    r"""A float64 copy of ``inv_freq`` (``(n,)``) with :math:`\omega_i = 0` for :math:`i \ge k`,
    :math:`k` = ``int(p * 2n // 2)`` (see :func:`p_rope_frequencies`). The core of
    :func:`p_rope_frequencies`; arguments are not checked.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import rope
    >>> rope.zero_low_frequencies(np.array([1.0, 0.1, 0.01, 0.001]), 0.5).tolist()   # k = int(0.5 * 8 // 2) = 2
    [1.0, 0.1, 0.0, 0.0]
    """
    out = np.array(inv_freq, dtype=np.float64)
    out[int(p * (2 * len(out)) // 2):] = 0.0
    return out


def p_rope_frequencies(inv_freq: ArrayLike, p: float) -> np.ndarray:
    r"""p-RoPE (Barbero et al. 2024): keep the highest fraction ``p`` of the frequencies, set the rest to 0.

    With :math:`n` = ``len(inv_freq)`` pairs, the first :math:`k = \lfloor p\,n \rfloor` frequencies
    are kept and :math:`\omega_i = 0` for :math:`i \ge k` (frequency 0 is the identity rotation, so
    those pairs pass through). RoPE's frequencies decrease with :math:`i`
    (:math:`\omega_i = \mathrm{base}^{-2i/d}`, and every scaling keeps that order), so the kept ones
    are the highest. :math:`k` is computed as Gemma's ``apply_rope`` and Hugging Face's
    ``proportional`` do, ``int(p * d // 2)`` in float64 with :math:`d = 2n`: the floor of :math:`p n`
    for the float64 value of ``p`` (``p = 0.29, n = 100`` keeps 28 pairs, since 0.29 is stored as
    0.28999...). ``p = 1`` is RoPE, ``p = 0`` is NoPE. Applied to the unscaled frequencies of the
    head dim it equals ``rope_type="proportional"`` with ``factor`` 1.

    Parameters
    ----------
    inv_freq : array_like ``(n,)``
        Frequencies, finite and ``>= 0`` (from :func:`inv_freq`, any scaling).
    p : float
        The kept fraction, in ``[0, 1]``.

    Returns
    -------
    ndarray ``(n,)`` float64

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import rope
    >>> rope.p_rope_frequencies([1.0, 0.1, 0.01, 0.001], 0.5).tolist()    # floor(0.5 * 4) = 2 pairs kept
    [1.0, 0.1, 0.0, 0.0]
    >>> int(np.count_nonzero(rope.p_rope_frequencies(np.ones(100), 0.29)))   # 0.29 is stored as 0.28999...
    28
    """
    inv = as_float_array(inv_freq, "inv_freq")
    require(inv.ndim == 1 and bool(np.all(np.isfinite(inv) & (inv >= 0))),
            f"inv_freq must be a 1-D array of finite frequencies >= 0, got shape {inv.shape}")
    p = check_real(p, "p", nonnegative=True, maximum=1.0)
    return zero_low_frequencies(inv, p)


# --------------------------------------------------------------------------- cos/sin, apply, backward

def cos_sin(positions: ArrayLike, inv_freq: ArrayLike | ExactFrequencies, *, attention_factor: float = 1.0,
            layout: str = "half", dtype: DTypeLike = np.float64,
            method: str = "exact") -> tuple[np.ndarray, np.ndarray]:
    r"""Tables :math:`f\cos(p\,\omega_i)` and :math:`f\sin(p\,\omega_i)` laid out for ``layout``.

    Parameters
    ----------
    positions : array_like of int or float, any shape
        :math:`|p| < 2^{53}`; float positions also below :math:`2^{24}` (float32) or
        :math:`2^{11}` (float16), where their dtype still holds every integer.
    inv_freq : array_like, shape ``(n,)``, or ExactFrequencies
        An array's doubles are taken as the frequencies (from :func:`inv_freq`, or any finite
        frequencies, e.g. rotary-embedding-torch ``pixel``); :func:`exact_inv_freq`'s
        :class:`ExactFrequencies` gives the formula's unrounded values.
    attention_factor : float
        :math:`f > 0`, multiplies both tables (YaRN, LongRoPE): logits scale by :math:`f^2`.
    layout : {"half", "interleaved"}
        ``half``: :math:`[c_0 \dots c_{n-1} \mid c_0 \dots c_{n-1}]`; ``interleaved``:
        :math:`[c_0, c_0, c_1, c_1, \dots]`.
    dtype : floating dtype
        The tables are cast once at the end; it must hold ``attention_factor``.
    method : {"exact", "direct", "float32-split"}
        ``"exact"``: every float64 value within one ulp of the exact :math:`f\cos(p\,\omega_i)`
        (nearly always correctly rounded), at any position (:mod:`posenc_np._exact`).
        ``"direct"``: the ordinary float64 implementation, :math:`p\,\omega_i` rounded to float64
        and libm cos/sin; error about :math:`|p\,\omega_i| \cdot 2^{-53}`. ``"float32-split"``:
        float32 arithmetic only, integer positions: with :math:`p = a\,2^{12} + b`, two small
        tables of exact values rounded to float32 combined by the angle-addition formulas (see
        :func:`posenc_np._exact.float32_split`). Measured errors and costs: ``docs/precision.md``
        and ``docs/benchmarks.md``.

    Returns
    -------
    cos, sin : ndarray, shape ``positions.shape + (2n,)``

    Raises
    ------
    ValueError
        For positions that cannot be represented (see ``positions``), rather than rounding them.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import rope
    >>> inv, attention_factor = rope.inv_freq(4)             # [1, 10000**-0.5] = [1, 0.01]
    >>> cos, sin = rope.cos_sin(np.arange(2), inv)
    >>> cos.round(6).tolist()                                 # position 0: cos 1; position 1: cos(1), cos(0.01)
    [[1.0, 1.0, 1.0, 1.0], [0.540302, 0.99995, 0.540302, 0.99995]]
    >>> rope.cos_sin([0, 1], inv, layout="interleaved")[0].round(6).tolist()
    [[1.0, 1.0, 1.0, 1.0], [0.540302, 0.540302, 0.99995, 0.99995]]
    """
    freqs, factor, layout, dtype = _check_table_args(inv_freq, attention_factor, layout, dtype)
    method = check_choice(method, "method", TABLE_METHODS)
    pos = _exact.positions(positions)
    check_alloc(pos.shape + (2 * freqs.size,), np.float64, "cos/sin tables positions.shape + (2 * len(inv_freq),)")
    if method == "direct":  # the angles p * w are formed: they must be finite
        p, w = _largest(pos.whole.astype(np.float64) + (0.0 if pos.frac is None else pos.frac)), _largest(freqs)
        require(math.isfinite(p * w), _overflow_message("positions * inv_freq", p, w))
    return cos_sin_tables(pos, inv_freq, factor, layout, dtype, method)


def apply(x: ArrayLike, cos: ArrayLike, sin: ArrayLike, *, layout: str = "half", backend: str = "auto",
          out: np.ndarray | None = None) -> np.ndarray:
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
        ``"auto"``: the kernel for ``x.size >= ROPE_NUMBA_MIN_ELEMENTS``, NumPy below
        (:mod:`posenc_np._backend`).
    out : ndarray, optional
        Where to write the result: ``x``'s shape and dtype, writeable. ``out=x`` rotates in
        place; any other overlap with ``x``, ``cos`` or ``sin`` is a ``ValueError``.

    Returns
    -------
    ndarray, shape and dtype of ``x``
        ``out`` if given. Computed in ``x``'s dtype (``cos``/``sin`` are cast to it first).

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import rope
    >>> cos, sin = rope.cos_sin([1], np.array([np.pi / 2, 0.0]))  # pair 0 turns by 90 degrees, pair 1 by 0
    >>> x = np.array([[1.0, 2.0, 3.0, 4.0, 5.0]])                # channel 4 is past the rotary dim 4
    >>> rope.apply(x, cos, sin).round(6).tolist()                # half: (x0, x2) = (1, 3) -> (-3, 1)
    [[-3.0, 2.0, 1.0, 4.0, 5.0]]
    >>> rope.apply(x, *rope.cos_sin([1], np.array([np.pi / 2, 0.0]), layout="interleaved"),
    ...            layout="interleaved").round(6).tolist()       # interleaved: (x0, x1) = (1, 2) -> (-2, 1)
    [[-2.0, 1.0, 3.0, 4.0, 5.0]]
    """
    return _apply(x, cos, sin, layout, backend, out, False, "x")


def apply_backward(dy: ArrayLike, cos: ArrayLike, sin: ArrayLike, *, layout: str = "half", backend: str = "auto",
                   out: np.ndarray | None = None) -> np.ndarray:
    r"""Gradient of :func:`apply` with respect to ``x``: :math:`dx = R_t^\top dy = R_{-t}\,dy`.

    The transpose of the pairwise map :math:`\begin{pmatrix}c & -s\\ s & c\end{pmatrix}` is the
    same map with :math:`-s`, so this is :func:`apply`'s rotation with ``-sin``; pass-through
    channels get ``dy`` unchanged. It is the exact vector-Jacobian product for any tables
    (also xPos-scaled or with an attention factor); it is the *inverse* of :func:`apply` only
    when :math:`c^2 + s^2 = 1` (attention factor 1, no xPos scale). ``out`` as in :func:`apply`
    (``out=dy`` in place).

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import rope
    >>> x = np.random.default_rng(0).standard_normal((3, 8))
    >>> cos, sin = rope.cos_sin(np.arange(3), rope.inv_freq(8)[0])
    >>> bool(np.allclose(rope.apply_backward(rope.apply(x, cos, sin), cos, sin), x))   # R_t^T R_t = I
    True
    """
    return _apply(dy, cos, sin, layout, backend, out, True, "dy")


def _apply(x, cos, sin, layout, backend, out, inverse: bool, name: str):
    """The door of :func:`apply` and :func:`apply_backward` (``inverse``), ``x`` named ``name``."""
    cos, sin, x = _check_rotation(cos, sin, layout, **{name: x})
    out = check_out(out, x, "out", cos, sin)
    return rotate(x, cos, sin, layout, inverse, backend, out)


def apply_qk(q: ArrayLike, k: ArrayLike, cos: ArrayLike, sin: ArrayLike, *, layout: str = "half",
             backend: str = "auto", out_q: np.ndarray | None = None,
             out_k: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    r"""Rotate queries and keys by the same tables: ``(apply(q, ...), apply(k, ...))`` in one call.

    The tables are checked and read once for both. ``q`` and ``k`` may differ in shape (grouped
    or multi-query attention, a KV cache) as long as the tables fit both. ``out_q``/``out_k`` as
    ``out`` in :func:`apply`: ``out_q=q, out_k=k`` rotates both in place; neither output may
    overlap the other input or the tables.

    Returns
    -------
    q_rot, k_rot : ndarray
        Shapes and dtypes of ``q`` and ``k`` (``out_q``/``out_k`` if given).

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import rope
    >>> rng = np.random.default_rng(0)
    >>> q, k = rng.standard_normal((2, 3, 8)), rng.standard_normal((1, 3, 8))    # 2 query heads, 1 key head
    >>> q_rot, k_rot = rope.apply_qk(q, k, *rope.cos_sin(np.arange(3), rope.inv_freq(8)[0]))
    >>> q_rot.shape, k_rot.shape, bool(np.array_equal(q_rot[:, 0], q[:, 0]))     # position 0 is not rotated
    ((2, 3, 8), (1, 3, 8), True)
    """
    return _apply_qk(q, k, cos, sin, layout, backend, out_q, out_k, False, ("q", "k"))


def apply_qk_backward(dq: ArrayLike, dk: ArrayLike, cos: ArrayLike, sin: ArrayLike, *, layout: str = "half",
                      backend: str = "auto", out_q: np.ndarray | None = None,
                      out_k: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    r"""Gradient of :func:`apply_qk`: :math:`(R_{-t}\,dq, R_{-t}\,dk)` (see :func:`apply_backward`).

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import rope
    >>> dq, dk = (np.random.default_rng(0).standard_normal(shape) for shape in [(2, 3, 8), (1, 3, 8)])
    >>> cos, sin = rope.cos_sin(np.arange(3), rope.inv_freq(8)[0])
    >>> gq, gk = rope.apply_qk_backward(dq, dk, cos, sin)
    >>> bool(np.allclose(gq, rope.apply_backward(dq, cos, sin)) and np.allclose(gk, rope.apply_backward(dk, cos, sin)))
    True
    """
    return _apply_qk(dq, dk, cos, sin, layout, backend, out_q, out_k, True, ("dq", "dk"))


def _apply_qk(q, k, cos, sin, layout, backend, out_q, out_k, inverse: bool, names: tuple):
    """The door of :func:`apply_qk` and :func:`apply_qk_backward` (``inverse``): the tables checked
    once for both inputs; neither output overlaps the other input, the other output or the tables."""
    cos, sin, q, k = _check_rotation(cos, sin, layout, **dict(zip(names, (q, k))))
    out_q = check_out(out_q, q, "out_q", k, cos, sin)
    out_k = check_out(out_k, k, "out_k", q, cos, sin, *(() if out_q is None else (out_q,)))
    return rotate_qk(q, k, cos, sin, layout, inverse, backend, out_q, out_k)


def rerotate(x: ArrayLike, positions: ArrayLike, old_inv_freq: ArrayLike | ExactFrequencies,
             new_inv_freq: ArrayLike | ExactFrequencies, *, layout: str = "half", backend: str = "auto") -> np.ndarray:
    r"""Move keys rotated with ``old_inv_freq`` to ``new_inv_freq``: rotate by :math:`p(\omega' - \omega)`.

    Rotations of a pair compose additively, so :math:`R_{p\omega'} = R_{p(\omega' - \omega)} R_{p\omega}`.
    Use it on a KV cache built before dynamic NTK or LongRoPE changed the frequencies (see
    ``docs/rope.md``); the attention factor is unchanged by both, so it is not involved.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import rope
    >>> (old, _), (new, _) = rope.inv_freq(8), rope.inv_freq(8, base=20000.0)   # e.g. dynamic NTK raised the base
    >>> k, pos = np.random.default_rng(0).standard_normal((3, 8)), np.arange(3)
    >>> cached = rope.apply(k, *rope.cos_sin(pos, old))        # a KV cache rotated with the old frequencies
    >>> bool(np.allclose(rope.rerotate(cached, pos, old, new), rope.apply(k, *rope.cos_sin(pos, new))))
    True
    """
    old = _check_frequencies(old_inv_freq, "old_inv_freq")
    new = _check_frequencies(new_inv_freq, "new_inv_freq")
    require(old.shape == new.shape, f"old_inv_freq and new_inv_freq must have the same shape, got {old.shape} and "
            f"{new.shape}")
    cos, sin = cos_sin(positions, new - old, layout=layout)
    return apply(x, cos, sin, layout=layout, backend=backend)


def convert_layout(w: ArrayLike, num_heads: int, *, src: str, dst: str, rotary_dim: int | None = None) -> np.ndarray:
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

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import rope
    >>> rope.convert_layout(np.arange(8), 2, src="interleaved", dst="half").tolist()   # 2 heads of 4 rows
    [0, 2, 1, 3, 4, 6, 5, 7]
    >>> rope.convert_layout(np.arange(6), 1, src="interleaved", dst="half", rotary_dim=4).tolist()  # rows 4, 5 stay
    [0, 2, 1, 3, 4, 5]
    """
    src, dst = check_choice(src, "src", LAYOUTS), check_choice(dst, "dst", LAYOUTS)
    w = np.asarray(w)
    num_heads = check_int(num_heads, "num_heads", minimum=1)
    require(w.ndim > 0 and w.shape[0] % num_heads == 0,
            f"w's first axis ({w.shape[:1]}) must be num_heads * head_dim with num_heads={num_heads}")
    head_dim = w.shape[0] // num_heads
    r = head_dim if rotary_dim is None else check_even(rotary_dim, "rotary_dim", maximum=head_dim)
    # half row j takes interleaved row int_of_half[j]
    int_of_half = np.concatenate([np.arange(0, r, 2), np.arange(1, r, 2), np.arange(r, head_dim)])
    within = {("interleaved", "half"): int_of_half, ("half", "interleaved"): np.argsort(int_of_half)}.get(
        (src, dst), np.arange(head_dim))
    rows = (np.arange(num_heads)[:, None] * head_dim + within).reshape(-1)
    return w[rows]


# --------------------------------------------------------------------------- xPos

def xpos_factors(pos: np.ndarray, dim: int, sign: float, centre: float, scale_base: float) -> np.ndarray:
    r""":math:`\zeta_i^{\pm(p - c)/B}`, :math:`\zeta_i = (2i + 0.4d)/(1.4d)` (``sign`` +1 for queries,
    -1 for keys), shape ``pos.shape + (dim // 2,)``. The core of :func:`xpos_scale`; arguments are
    not checked.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import rope
    >>> rope.xpos_factors(np.array([0, 512]), 4, 1.0, 0.0, 512.0).round(6).tolist()  # zeta = 1.6/5.6, 3.6/5.6
    [[1.0, 1.0], [0.285714, 0.642857]]
    """
    zeta = (np.arange(0, dim, 2, dtype=np.float64) + 0.4 * dim) / (1.4 * dim)
    return zeta ** (sign * (pos.astype(np.float64) - centre) / scale_base)[..., None]


def xpos_scale(positions: ArrayLike, dim: int, *, role: str, centre: str | float = "none", seq_len: int | None = None,
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

    Examples
    --------
    >>> from posenc_np import rope
    >>> rope.xpos_scale([0, 512], 4, role="query").round(6).tolist()   # zeta**(p/512), zeta = (0.285714, 0.642857)
    [[1.0, 1.0], [0.285714, 0.642857]]
    >>> rope.xpos_scale([0, 512], 4, role="key").round(6).tolist()     # the inverse: 1/zeta
    [[1.0, 1.0], [3.5, 1.555556]]
    >>> rope.xpos_scale([0, 1, 2, 3], 4, role="query", centre="torchscale", seq_len=4, scale_base=1).round(6).tolist()
    [[12.25, 2.419753], [3.5, 1.555556], [1.0, 1.0], [0.285714, 0.642857]]
    """
    sign = 1.0 if check_choice(role, "role", ("query", "key")) == "query" else -1.0
    dim = check_even(dim, "dim")
    scale_base = check_real(scale_base, "scale_base", positive=True)
    if isinstance(centre, str) and check_choice(centre, "centre", XPOS_CENTRES) != "none":
        require(seq_len is not None, f"centre={centre!r} needs seq_len (the total length N shared by q and k)")
        n = check_int(seq_len, "seq_len", minimum=1, maximum=2**53)
        centre = float(-(-n // 2) if centre == "torchscale" else n // 2)
    c = 0.0 if isinstance(centre, str) else check_real(centre, "centre")
    pos = as_positions(positions)
    check_alloc(pos.shape + (dim // 2,), np.float64, "xPos scale positions.shape + (dim // 2,)")
    lo, hi = (float(pos.min()), float(pos.max())) if pos.size else (c, c)
    worst = (c - lo if sign > 0 else hi - c) / scale_base  # zeta_i < 1: the largest scale is zeta_0 ** -worst
    require(math.isfinite(max(hi - c, c - lo) / scale_base)
            and worst * -math.log(0.4 * dim / (1.4 * dim)) <= math.log(np.finfo(np.float64).max),
            f"the xPos {role} scale overflows float64: (positions - centre) / scale_base overflows or reaches "
            f"{worst:.6g} (centre {c}, scale_base {scale_base}); centre the positions (centre='torchscale' or a "
            "number) or raise scale_base")
    return xpos_factors(pos, dim, sign, c, scale_base)


def xpos_cos_sin(positions: ArrayLike, inv_freq: ArrayLike | ExactFrequencies, *, role: str,
                 centre: str | float = "none", seq_len: int | None = None, scale_base: float = 512.0,
                 layout: str = "half", dtype: DTypeLike = np.float64) -> tuple[np.ndarray, np.ndarray]:
    r"""RoPE tables multiplied by the xPos scale: :math:`\zeta_i^{\pm(p-c)/B}\cos(p\,\omega_i)`, same for sin.

    Feed them to :func:`apply` / :func:`apply_backward` (the backward is the transposed,
    equally scaled map). Rotation angles use the uncentred positions, as in torchscale.
    Parameters as in :func:`xpos_scale` and :func:`cos_sin`; ``dim = 2 * len(inv_freq)``.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import rope
    >>> cos, sin = rope.xpos_cos_sin([0, 512], np.zeros(2), role="query")   # frequency 0: cos is the scale alone
    >>> cos.round(6).tolist()
    [[1.0, 1.0, 1.0, 1.0], [0.285714, 0.642857, 0.285714, 0.642857]]
    >>> sin.tolist()
    [[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]
    """
    freqs, _, layout, dtype = _check_table_args(inv_freq, 1.0, layout, dtype)
    scale = xpos_scale(positions, 2 * freqs.size, role=role, centre=centre, seq_len=seq_len, scale_base=scale_base)
    require(dtype == np.float64 or scale.max(initial=0.0) <= np.finfo(dtype).max, "the xPos scale (positions, "
            f"centre, scale_base) makes the cos/sin tables exceed {dtype}'s largest value; use a wider dtype")
    c, s = _exact.cos_sin(_exact.positions(positions), _exact.turn_constants(inv_freq))
    return layout_tables(scale * c, scale * s, layout, dtype)


# --------------------------------------------------------------------------- multi-axis: 2-D axial, M-RoPE

def _stream_cos_sin(pos: np.ndarray, consts, stream: np.ndarray, amplitude: float):
    """Exact per-pair ``amplitude * cos/sin`` ``(..., n)`` with pair ``j`` driven by position stream
    ``stream[j]``: angle ``pos[stream[j], ...] * freqs[j]`` (``consts`` already per pair)."""
    c, s = np.empty(pos.shape[1:] + stream.shape), np.empty(pos.shape[1:] + stream.shape)
    for a in np.unique(stream):
        cols = np.flatnonzero(stream == a)
        c[..., cols], s[..., cols] = _exact_cos_sin(_exact.positions(pos[a]), consts.take(cols), amplitude)
    return c, s


def axial_cos_sin(positions: ArrayLike, inv_freq: ArrayLike | ExactFrequencies, *, attention_factor: float = 1.0,
                  layout: str = "half", dtype: DTypeLike = np.float64) -> tuple[np.ndarray, np.ndarray]:
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

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import rope
    >>> pos = rope.patch_positions(2, 2)                     # (row, col) of patches (0,0), (0,1), (1,0), (1,1)
    >>> cos, sin = rope.axial_cos_sin(pos, np.array([np.pi / 2]))
    >>> cos.shape                                            # 2 axes x 1 frequency = 2 pairs, rotary dim 4
    (4, 4)
    >>> sin.round(6).tolist()                                # half: [row | col | row | col]; sin(pi/2) = 1
    [[0.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 1.0], [1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]]
    """
    freqs, factor, layout, dtype = _check_table_args(inv_freq, attention_factor, layout, dtype)
    pos = as_positions(positions)
    require(pos.ndim >= 1 and pos.shape[0] >= 1, f"positions must have shape (axes, ...), got {pos.shape}")
    check_alloc(pos.shape[1:] + (2 * pos.shape[0] * freqs.size,), np.float64, "cos/sin tables "
                "positions.shape[1:] + (rotary dim,)")
    axes = pos.shape[0]
    consts = _exact.turn_constants(inv_freq).take(np.tile(np.arange(freqs.size), axes))
    return layout_tables(*_stream_cos_sin(pos, consts, np.repeat(np.arange(axes), freqs.size), factor), layout, dtype)


def patch_positions(height: int, width: int) -> np.ndarray:
    """``(row, col)`` of each patch of a ``height x width`` grid in row-major order: shape ``(2, height*width)``.

    Examples
    --------
    >>> from posenc_np import rope
    >>> rope.patch_positions(2, 3).tolist()
    [[0, 0, 0, 1, 1, 1], [0, 1, 2, 0, 1, 2]]
    """
    height = check_int(height, "height", minimum=1)
    width = check_int(width, "width", minimum=1)
    check_alloc((2, height, width), np.int64, "patch positions (2, height * width)")
    rows, cols = np.meshgrid(np.arange(height), np.arange(width), indexing="ij")
    return np.stack([rows.reshape(-1), cols.reshape(-1)]).astype(np.int64)


def _mrope_streams(section: list, n: int, variant: str) -> np.ndarray:
    """Which of the 3 position streams (t, h, w) drives each of the ``n`` frequencies."""
    if variant == "qwen2-vl":  # contiguous chunks; chunk k follows stream k % 3 (HF: m[i % 3])
        return np.repeat(np.arange(len(section)) % 3, section)
    j = np.arange(n)
    out = np.zeros(n, dtype=np.int64)  # interleaved t, h, w, t, h, w, ...; t fills the rest
    for stream in (1, 2):
        out[(j % 3 == stream) & (j < 3 * section[stream])] = stream
    return out


def mrope_cos_sin(positions: ArrayLike, inv_freq: ArrayLike | ExactFrequencies, mrope_section: ArrayLike, *,
                  variant: str = "qwen2-vl", attention_factor: float = 1.0, layout: str = "half",
                  dtype: DTypeLike = np.float64) -> tuple[np.ndarray, np.ndarray]:
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

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import rope
    >>> inv, text = rope.inv_freq(8)[0], np.tile(np.arange(3), (3, 1))    # t = h = w: M-RoPE is 1-D RoPE
    >>> bool(np.array_equal(rope.mrope_cos_sin(text, inv, [2, 1, 1])[0], rope.cos_sin(np.arange(3), inv)[0]))
    True
    >>> cos, sin = rope.mrope_cos_sin(np.array([[0], [1], [2]]), np.full(4, np.pi / 2), [2, 1, 1])  # t=0, h=1, w=2
    >>> cos.round(6).tolist()                                 # frequencies 0-1 follow t, 2 follows h, 3 follows w
    [[1.0, 1.0, 0.0, -1.0, 1.0, 1.0, 0.0, -1.0]]
    """
    freqs, factor, layout, dtype = _check_table_args(inv_freq, attention_factor, layout, dtype)
    variant = check_choice(variant, "variant", MROPE_VARIANTS)
    pos = as_positions(positions)
    require(pos.ndim >= 2 and pos.shape[0] == 3, f"positions must have shape (3, ..., L) (temporal, height, width), "
            f"got {pos.shape}")
    check_alloc(pos.shape[1:] + (2 * freqs.size,), np.float64, "cos/sin tables positions.shape[1:] + (rotary dim,)")
    require(isinstance(mrope_section, (list, tuple, np.ndarray)) and len(mrope_section) > 0,
            f"mrope_section must be a non-empty list of ints, got {mrope_section!r}", TypeError)
    section = [check_int(v, "mrope_section entry", minimum=0) for v in mrope_section]
    require(sum(section) == freqs.size and (variant == "qwen2-vl" or len(section) == 3),
            f"mrope_section {section} must sum to len(inv_freq) = {freqs.size}"
            + (" in 3 sections (t, h, w) for variant 'qwen3-vl'" if variant == "qwen3-vl" else ""))
    stream = _mrope_streams(section, freqs.size, variant)
    return layout_tables(*_stream_cos_sin(pos, _exact.turn_constants(inv_freq), stream, factor), layout, dtype)


# --------------------------------------------------------------------------- long-term decay

def long_term_decay(distances: ArrayLike, inv_freq: ArrayLike | ExactFrequencies) -> np.ndarray:
    r"""RoFormer's relative upper bound :math:`\frac{1}{n}\sum_{j=1}^{n} |S_j|` (Su et al. 2021, sec. 3.4.3).

    With :math:`h_i` the complex products of query and key pairs and
    :math:`S_j = \sum_{k=0}^{j-1} e^{i r \theta_k}` (:math:`r = m - n`), Abel summation gives

    .. math:: \Big|\sum_{i=0}^{n-1} h_i e^{i r\theta_i}\Big| \le \Big(\max_i |h_{i+1} - h_i|\Big) \sum_{j=1}^{n} |S_j|,
        \qquad h_n = 0,

    and the average :math:`\frac1n \sum_j |S_j|` decays as :math:`|r|` grows (their figure 2).

    Returns
    -------
    ndarray, float64, shape ``distances.shape``

    Examples
    --------
    >>> from posenc_np import rope
    >>> inv, _ = rope.inv_freq(8)                              # n = 4 frequencies
    >>> rope.long_term_decay([0, 1, 10], inv).round(6).tolist()   # distance 0: mean of |S_j| = j is (n + 1) / 2
    [2.5, 2.292507, 0.9919]
    """
    freqs = _check_frequencies(inv_freq)
    r = as_positions(distances, "distances").astype(np.float64)
    check_alloc(r.shape + freqs.shape, np.complex128, "partial sums distances.shape + (len(inv_freq),)")
    p, w = _largest(r), _largest(freqs)
    require(math.isfinite(p * w), _overflow_message("distances * inv_freq", p, w))
    partial_sums = np.cumsum(np.exp(1j * r[..., None] * freqs), axis=-1)
    return np.abs(partial_sums).mean(axis=-1)
