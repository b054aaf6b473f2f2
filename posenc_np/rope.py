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
here as :func:`inv_freq`. p-RoPE (Barbero et al. 2024, arXiv 2410.06205) keeps only the highest
fraction :math:`p` of any set of frequencies (:func:`p_rope_frequencies`). Tables are exact by default: every float64 entry is within one ulp of
the exact :math:`\cos`/:math:`\sin` for positions :math:`|p| < 2^{53}` (:mod:`posenc_np._exact`;
``docs/precision.md``). See ``docs/rope.md``.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from . import _exact
from .kernels import ROPE_NUMBA_MIN_ELEMENTS  # (the package alone: no Numba)
from ._checks import check_alloc, check_angles, check_choice, check_int
from ._table_checks import (ROPE_BACKENDS, ROPE_LAYOUTS, check_apply, check_distances, check_frequency_pair,
                            check_layout_conversion, check_mrope_section, check_p_rope, check_qk, check_streams,
                            check_table_args, check_table_positions, check_xpos)
from .rope_scaling import (ROPE_TYPES, inv_freq, llama3_bands, yarn_correction_dim, yarn_correction_range,
                           yarn_get_mscale)

__all__ = [
    "LAYOUTS",
    "MROPE_VARIANTS",
    "ROPE_TYPES",
    "XPOS_CENTRES",
    "apply",
    "apply_backward",
    "apply_qk",
    "apply_qk_backward",
    "axial_cos_sin",
    "convert_layout",
    "cos_sin",
    "inv_freq",
    "llama3_bands",
    "long_term_decay",
    "mrope_cos_sin",
    "p_rope_frequencies",
    "patch_positions",
    "rerotate",
    "xpos_cos_sin",
    "xpos_scale",
    "yarn_correction_dim",
    "yarn_correction_range",
    "yarn_get_mscale",
]

LAYOUTS = ROPE_LAYOUTS  # ("half", "interleaved"): defined with the checks the kernel shares
BACKENDS = ROPE_BACKENDS
#: How :func:`cos_sin` builds its tables.
TABLE_METHODS = ("exact", "direct", "float32-split")
XPOS_CENTRES = ("none", "torchscale", "rotary-embedding-torch")
MROPE_VARIANTS = ("qwen2-vl", "qwen3-vl")


# --------------------------------------------------------------------------- the rotation (unchecked)

def _pair_slices(n: int, layout: str) -> tuple[slice, slice]:
    """Channels holding the first and second member of each of the ``n`` pairs."""
    return (slice(0, n), slice(n, 2 * n)) if layout == "half" else (slice(0, 2 * n, 2), slice(1, 2 * n, 2))


def _pair_values(cos: np.ndarray, sin: np.ndarray, layout: str, dtype, inverse: bool):
    """The per-pair ``c``, ``s`` of valid tables, cast to ``dtype``; ``s = -sin t`` for the inverse."""
    first, _ = _pair_slices(cos.shape[-1] // 2, layout)
    c = cos[..., first].astype(dtype, copy=False)
    s = sin[..., first].astype(dtype, copy=False)
    return c, (-s if inverse else s)


def _rotate_pairs(x: np.ndarray, c: np.ndarray, s: np.ndarray, layout: str, out=None) -> np.ndarray:
    """Each pair ``(a, b)`` of ``x`` to ``(a c - b s, a s + b c)``; channels past the pairs copy.

    Both results are formed before either is stored, so ``out`` may be ``x`` (in place).
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


def _rotate_numpy(x, cos, sin, layout, inverse, out=None):
    """The reference rotation of valid ``x``, tables (computed in ``x``'s dtype)."""
    return _rotate_pairs(x, *_pair_values(cos, sin, layout, x.dtype, inverse), layout, out)


def _rotate_numba(x, cos, sin, layout, inverse, out=None):
    """The same rotation by the Numba kernel (bit-identical to :func:`_rotate_numpy` on valid tables)."""
    return _kernel().rotate_tables(x, cos, sin, layout, inverse, out)


@functools.cache
def _kernel():
    """:mod:`posenc_np.kernels.rope`, imported (with Numba) on first use."""
    from .kernels import rope

    return rope


def _resolve(backend: str, x: np.ndarray) -> str:
    """The implementation of a valid ``backend`` choice: ``"auto"`` takes the kernel from
    ``ROPE_NUMBA_MIN_ELEMENTS`` elements of float32/float64 ``x`` up (the measured crossover;
    reading it does not import Numba), NumPy below."""
    if backend != "auto":
        return backend
    fits = x.dtype in (np.float32, np.float64)
    return "numba" if fits and x.size >= ROPE_NUMBA_MIN_ELEMENTS else "numpy"


def _rotate(x, cos, sin, layout: str, inverse: bool, backend: str = "auto", out=None) -> np.ndarray:
    """Rotate ``x`` by valid tables (the unchecked body of :func:`apply` / :func:`apply_backward`)."""
    rotate = _rotate_numba if _resolve(backend, x) == "numba" else _rotate_numpy
    return rotate(x, cos, sin, layout, inverse, out)


def _rotate_qk(q, k, cos, sin, layout: str, inverse: bool, backend: str = "auto", out_q=None, out_k=None):
    """Rotate ``q`` and ``k`` by the same valid tables, read once (the body of :func:`apply_qk`)."""
    if _resolve(backend, q) == "numba" and _resolve(backend, k) == "numba":
        if q.dtype.newbyteorder("=") == k.dtype.newbyteorder("="):  # both in one kernel launch
            return _kernel().rotate_tables_qk(q, k, cos, sin, layout, inverse, out_q, out_k)
        return _rotate_numba(q, cos, sin, layout, inverse, out_q), _rotate_numba(k, cos, sin, layout, inverse, out_k)
    c, s = _pair_values(cos, sin, layout, np.result_type(q, k), inverse)
    return _rotate_pairs(q, c.astype(q.dtype, copy=False), s.astype(q.dtype, copy=False), layout, out_q), \
        _rotate_pairs(k, c.astype(k.dtype, copy=False), s.astype(k.dtype, copy=False), layout, out_k)


# --------------------------------------------------------------------------- tables (unchecked)

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


def _cos_sin(pos, inv_freq, factor: float, layout: str, dtype, method: str = "exact"):
    r"""Tables :math:`f\cos(p\,\omega_i)`, :math:`f\sin(p\,\omega_i)` for valid arguments
    (``pos`` from :func:`posenc_np._exact.positions`; the body of :func:`cos_sin`)."""
    if method == "direct":
        p = pos.whole.astype(np.float64) + (0.0 if pos.frac is None else pos.frac)
        check_angles(p, np.asarray(inv_freq, dtype=np.float64))
        angles = p[..., None] * np.asarray(inv_freq, dtype=np.float64)
        return _tables(factor * np.cos(angles), factor * np.sin(angles), layout, dtype)
    consts = _exact.turn_constants(inv_freq)
    if method == "float32-split":
        c, s = _exact.float32_split(pos, consts)
        f32 = np.float32(factor)
        return _tables(c * f32, s * f32, layout, dtype) if factor != 1.0 else _tables(c, s, layout, dtype)
    return _tables(*_exact_cos_sin(pos, consts, factor), layout, dtype)


# --------------------------------------------------------------------------- p-RoPE

def _kept_pairs(n: int, p: float) -> int:
    r"""p-RoPE's rotating pairs out of ``n``: ``int(p * d // 2)`` with ``d = 2n`` in float64, as Gemma's
    ``apply_rope`` and Hugging Face ``proportional`` compute it (:math:`\lfloor p n \rfloor` for the
    float64 value of ``p``)."""
    return int(p * (2 * n) // 2)


def _p_rope(inv_freq: np.ndarray, p: float) -> np.ndarray:
    """``inv_freq`` with every entry from index ``_kept_pairs`` on set to 0 (a copy)."""
    out = np.array(inv_freq, dtype=np.float64)
    out[_kept_pairs(len(out), p):] = 0.0
    return out


def p_rope_frequencies(inv_freq, p: float) -> np.ndarray:
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
    """
    inv, p = check_p_rope(inv_freq, p)
    return _p_rope(inv, p)


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
    """
    freqs, factor, layout, dtype = check_table_args(inv_freq, attention_factor, layout, dtype)
    method = check_choice(method, "method", TABLE_METHODS)
    return _cos_sin(check_table_positions(positions, freqs.size), inv_freq, factor, layout, dtype, method)


def apply(x, cos, sin, *, layout: str = "half", backend: str = "auto", out=None) -> np.ndarray:
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
    out : ndarray, optional
        Where to write the result: ``x``'s shape and dtype, writeable. ``out=x`` rotates in
        place; any other overlap with ``x``, ``cos`` or ``sin`` is a ``ValueError``.

    Returns
    -------
    ndarray, shape and dtype of ``x``
        ``out`` if given. Computed in ``x``'s dtype (``cos``/``sin`` are cast to it first).
    """
    x, cos, sin, out = check_apply(x, cos, sin, layout, backend, out, "x")
    return _rotate(x, cos, sin, layout, False, backend, out)


def apply_backward(dy, cos, sin, *, layout: str = "half", backend: str = "auto", out=None) -> np.ndarray:
    r"""Gradient of :func:`apply` with respect to ``x``: :math:`dx = R_t^\top dy = R_{-t}\,dy`.

    The transpose of the pairwise map :math:`\begin{pmatrix}c & -s\\ s & c\end{pmatrix}` is the
    same map with :math:`-s`, so this is :func:`apply`'s rotation with ``-sin``; pass-through
    channels get ``dy`` unchanged. It is the exact vector-Jacobian product for any tables
    (also xPos-scaled or with an attention factor); it is the *inverse* of :func:`apply` only
    when :math:`c^2 + s^2 = 1` (attention factor 1, no xPos scale). ``out`` as in :func:`apply`
    (``out=dy`` in place).
    """
    dy, cos, sin, out = check_apply(dy, cos, sin, layout, backend, out, "dy")
    return _rotate(dy, cos, sin, layout, True, backend, out)


def apply_qk(q, k, cos, sin, *, layout: str = "half", backend: str = "auto", out_q=None, out_k=None):
    r"""Rotate queries and keys by the same tables: ``(apply(q, ...), apply(k, ...))`` in one call.

    The tables are checked and read once for both. ``q`` and ``k`` may differ in shape (grouped
    or multi-query attention, a KV cache) as long as the tables fit both. ``out_q``/``out_k`` as
    ``out`` in :func:`apply`: ``out_q=q, out_k=k`` rotates both in place; neither output may
    overlap the other input or the tables.

    Returns
    -------
    q_rot, k_rot : ndarray
        Shapes and dtypes of ``q`` and ``k`` (``out_q``/``out_k`` if given).
    """
    q, k, cos, sin, out_q, out_k = check_qk(q, k, cos, sin, layout, backend, out_q, out_k)
    return _rotate_qk(q, k, cos, sin, layout, False, backend, out_q, out_k)


def apply_qk_backward(dq, dk, cos, sin, *, layout: str = "half", backend: str = "auto", out_q=None, out_k=None):
    r"""Gradient of :func:`apply_qk`: :math:`(R_{-t}\,dq, R_{-t}\,dk)` (see :func:`apply_backward`)."""
    dq, dk, cos, sin, out_q, out_k = check_qk(dq, dk, cos, sin, layout, backend, out_q, out_k)
    return _rotate_qk(dq, dk, cos, sin, layout, True, backend, out_q, out_k)


def rerotate(x, positions, old_inv_freq, new_inv_freq, *, layout: str = "half",
             backend: str = "auto") -> np.ndarray:
    r"""Move keys rotated with ``old_inv_freq`` to ``new_inv_freq``: rotate by :math:`p(\omega' - \omega)`.

    Rotations of a pair compose additively, so :math:`R_{p\omega'} = R_{p(\omega' - \omega)} R_{p\omega}`.
    Use it on a KV cache built before dynamic NTK or LongRoPE changed the frequencies (see
    ``docs/rope.md``); the attention factor is unchanged by both, so it is not involved.
    """
    old, new = check_frequency_pair(old_inv_freq, new_inv_freq)
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
    w, num_heads, head_dim, r, src, dst = check_layout_conversion(w, num_heads, src, dst, rotary_dim)
    # half row j takes interleaved row int_of_half[j]
    int_of_half = np.concatenate([np.arange(0, r, 2), np.arange(1, r, 2), np.arange(r, head_dim)])
    within = {("interleaved", "half"): int_of_half, ("half", "interleaved"): np.argsort(int_of_half)}.get(
        (src, dst), np.arange(head_dim))
    rows = (np.arange(num_heads)[:, None] * head_dim + within).reshape(-1)
    return w[rows]


# --------------------------------------------------------------------------- xPos

def _xpos_centre(centre, n_total: int | None) -> float:
    """The centre :math:`c` of a centre convention for total length ``n_total`` (see
    :func:`xpos_scale`), or a given number."""
    if not isinstance(centre, str):
        return centre
    if centre == "none":
        return 0.0
    return float(-(-n_total // 2) if centre == "torchscale" else n_total // 2)


def _xpos_scale(pos: np.ndarray, dim: int, sign: float, c: float, scale_base: float) -> np.ndarray:
    r""":math:`\zeta_i^{\pm(p - c)/B}` for valid arguments (``sign`` +1 for queries, -1 for keys).

    Raises ``ValueError`` when :math:`(p - c)/B` or the scale itself overflows float64.
    """
    zeta = (np.arange(0, dim, 2, dtype=np.float64) + 0.4 * dim) / (1.4 * dim)
    with np.errstate(over="ignore", invalid="ignore"):
        power = sign * (pos.astype(np.float64) - c) / scale_base
    if not np.all(np.isfinite(power)):
        raise ValueError(f"(positions - centre) / scale_base overflows float64 (centre {c}, scale_base {scale_base})")
    # zeta_i < 1, so the largest scale is zeta_0 ** min(power): it overflows iff -min(power) ln(1/zeta_0) > ln(max)
    worst = -float(np.min(power)) if power.size else 0.0
    if worst * -np.log(zeta[0]) > np.log(np.finfo(np.float64).max):
        raise ValueError(f"the xPos {'query' if sign > 0 else 'key'} scale overflows float64: |p - c| / scale_base "
                         f"reaches {worst:.6g} (centre {c}, scale_base {scale_base}); centre the positions "
                         "(centre='torchscale' or a number) or raise scale_base")
    return zeta ** power[..., None]


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
    pos, dim, sign, centre, n_total, scale_base = check_xpos(positions, dim, role, centre, seq_len, scale_base,
                                                             XPOS_CENTRES)
    return _xpos_scale(pos, dim, sign, _xpos_centre(centre, n_total), scale_base)


def xpos_cos_sin(positions, inv_freq, *, role: str, centre="none", seq_len: int | None = None,
                 scale_base: float = 512.0, layout: str = "half", dtype=np.float64):
    r"""RoPE tables multiplied by the xPos scale: :math:`\zeta_i^{\pm(p-c)/B}\cos(p\,\omega_i)`, same for sin.

    Feed them to :func:`apply` / :func:`apply_backward` (the backward is the transposed,
    equally scaled map). Rotation angles use the uncentred positions, as in torchscale.
    Parameters as in :func:`xpos_scale` and :func:`cos_sin`; ``dim = 2 * len(inv_freq)``.
    """
    freqs, _, layout, dtype = check_table_args(inv_freq, 1.0, layout, dtype)
    scale = xpos_scale(positions, 2 * freqs.size, role=role, centre=centre, seq_len=seq_len, scale_base=scale_base)
    return _xpos_tables(_exact.positions(positions), inv_freq, scale, layout, dtype)


def _xpos_tables(pos, inv_freq, scale: np.ndarray, layout: str, dtype):
    """The body of :func:`xpos_cos_sin`: exact cos/sin times the scale, laid out and cast."""
    c, s = _exact.cos_sin(pos, _exact.turn_constants(inv_freq))
    return _tables(scale * c, scale * s, layout, dtype, "the xPos scale (positions, centre, scale_base)")


# --------------------------------------------------------------------------- multi-axis: 2-D axial, M-RoPE

def _stream_cos_sin(positions, consts, stream: np.ndarray, name: str, amplitude: float):
    """Exact per-pair ``amplitude * cos/sin`` ``(..., n)`` with pair ``j`` driven by position stream
    ``stream[j]``: angle ``positions[stream[j], ...] * freqs[j]`` (``consts`` already per pair)."""
    pos = check_streams(positions, int(stream.max()) + 1, name, stream.size)
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
    freqs, factor, layout, dtype = check_table_args(inv_freq, attention_factor, layout, dtype)
    axes = np.shape(positions)[0] if np.ndim(positions) else 0
    if axes < 1:
        raise ValueError(f"positions must have shape (axes, ...), got {np.shape(positions)}")
    stream = np.repeat(np.arange(axes), freqs.size)
    consts = _exact.turn_constants(inv_freq).take(np.tile(np.arange(freqs.size), axes))
    return _tables(*_stream_cos_sin(positions, consts, stream, "positions", factor), layout, dtype)


def patch_positions(height: int, width: int) -> np.ndarray:
    """``(row, col)`` of each patch of a ``height x width`` grid in row-major order: shape ``(2, height*width)``."""
    height, width = check_int(height, "height", minimum=1), check_int(width, "width", minimum=1)
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
    freqs, factor, layout, dtype = check_table_args(inv_freq, attention_factor, layout, dtype)
    variant = check_choice(variant, "variant", MROPE_VARIANTS)
    if np.ndim(positions) < 2 or np.shape(positions)[0] != 3:
        raise ValueError(f"positions must have shape (3, ..., L) (temporal, height, width), got {np.shape(positions)}")
    stream = _mrope_streams(check_mrope_section(mrope_section, freqs.size, variant), freqs.size, variant)
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
    r, freqs = check_distances(distances, inv_freq)
    partial_sums = np.cumsum(np.exp(1j * r[..., None] * freqs), axis=-1)
    return np.abs(partial_sums).mean(axis=-1)
