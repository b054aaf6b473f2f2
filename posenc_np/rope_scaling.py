r"""RoPE frequencies and every frequency-scaling variant (Hugging Face ``rope_type`` registry).

The public entry point is :func:`posenc_np.rope.inv_freq` (re-exported from here); this
module holds one small function per ``rope_type`` behind the registry ``_SCALINGS``, in the
shape of Hugging Face ``modeling_rope_utils.py`` (semantics of transformers 5.24.0, the
release read for this module). Every function returns ``(inv_freq, attention_factor)``:
the float64 inverse frequencies :math:`\omega_i`, and the factor that multiplies both
``cos`` and ``sin`` (so attention logits scale by its square).

Notation: :math:`d` rotary dim, :math:`i = 0 \dots d/2-1`,
:math:`\omega_i = \mathrm{base}^{-2i/d}`, :math:`L_0` the pre-training context
(``original_max_position_embeddings``), :math:`s` the scale ``factor``.

Hugging Face computes these tables in float32; this module is the float64 reference. Every
formula runs on extended-precision values (:func:`posenc_np._exact.omega`, mpmath at 256 bits)
and is rounded once at the end, so each returned frequency is the correctly rounded value of
the formula, and :func:`posenc_np.rope.cos_sin` reads the unrounded values.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from . import _exact
from ._checks import check_alloc, check_bool, check_int, check_real
from ._table_checks import (MAX_LENGTH, check_betas, check_dim_base, check_length, ordered, read_flag, read_fraction,
                            read_implied_factor, read_keys, read_nonnegative, read_optional_positive, read_original_max,
                            read_per_pair, read_positive, read_rope_type, resolve_dim_base)
from .absolute import sinusoidal_frequencies

__all__ = [
    "ROPE_TYPES",
    "Scaling",
    "inv_freq",
    "llama3_bands",
    "parse_scaling",
    "yarn_correction_dim",
    "yarn_correction_range",
    "yarn_get_mscale",
]


class _DefaultBase(float):
    """The default ``base`` (10000.0), recognisable by identity as "not passed".

    A Hugging Face 5.x ``rope_parameters`` dict carries its own ``rope_theta``; it may take
    the place of ``base`` only when the caller did not pass ``base`` explicitly.
    """

    def __repr__(self) -> str:
        return "10000.0"


DEFAULT_BASE = _DefaultBase(10000.0)

#: Keys any rope_type may carry. "mrope_section"/"mrope_interleaved" are read by
#: posenc_np.rope.mrope_cos_sin, not here; "partial_rotary_factor" by :func:`_resolve_dim_base`.
_COMMON_KEYS = {"rope_type", "type", "rope_theta", "partial_rotary_factor", "mrope_section", "mrope_interleaved"}


# --------------------------------------------------------------------------- the registry

@dataclass(frozen=True)
class ScalingType:
    """One ``rope_type``: the keys it reads (key -> reader, in reading order), its formula
    ``formula(dim, base, v, seq_len, max_pos) -> (inv_freq, attention_factor)`` (``v``: the
    values read), an optional cross-key ``check(v, rope_type)``, and ``length_key(v, seq_len,
    max_pos)``: what of the current length the result depends on (None: nothing), so that a
    model computes each table once."""

    name: str
    keys: dict
    formula: Callable
    check: Callable | None = None
    length_key: Callable | None = None


_SCALINGS: dict[str, ScalingType] = {}


def _entry(name: str, *, check=None, length_key=None, **keys):
    """Register the decorated formula as rope_type ``name`` reading ``keys``."""
    def register(formula):
        _SCALINGS[name] = ScalingType(name, keys, formula, check, length_key)
        return formula
    return register


# --------------------------------------------------------------------------- one entry per type

@_entry("default")
def _default(dim, base, v, seq_len, max_pos):
    r""":math:`\omega_i = \mathrm{base}^{-2i/d}`, attention factor 1 (Su et al. 2021, eq. 15)."""
    return _exact.omega(dim, base), 1.0


_SCALINGS["mrope"] = ScalingType("mrope", {}, _default)  # Qwen2-VL's legacy {"type": "mrope"}: default frequencies


@_entry("linear", factor=read_positive())
def _linear(dim, base, v, seq_len, max_pos):
    r"""Position interpolation (kaiokendev; Chen et al. 2023): :math:`\omega_i / s`."""
    return _exact.omega(dim, base) / v["factor"], 1.0


def _ntk_exponent(dim: int, rope_type: str) -> float:
    if dim <= 2:
        raise ValueError(f"rope_type {rope_type!r} rescales the base by a power d/(d-2); dim must be > 2, got {dim}")
    return _exact.mp().mpf(dim) / (dim - 2)


def _scaled_base(base, ratio, dim: int, rope_type: str, key: str):
    """``base * ratio**(d/(d-2))`` (the NTK rescaled base), or ``ValueError`` naming ``key`` when it
    is not a finite float64."""
    try:
        new_base = base * ratio ** _ntk_exponent(dim, rope_type)
    except OverflowError:
        new_base = math.inf
    if not math.isfinite(new_base):
        raise ValueError(f"rope_type {rope_type!r}: {key} makes the rescaled base {base} * {ratio:.6g}^(d/(d-2)) "
                         f"overflow float64")
    return new_base


@_entry("ntk", alpha=read_positive())
def _ntk(dim, base, v, seq_len, max_pos):
    r"""Static NTK-aware scaling (bloc97; x-transformers, rotary-embedding-torch
    ``theta_rescale_factor``; *not* a Hugging Face type):
    :math:`\mathrm{base}' = \mathrm{base}\,\alpha^{d/(d-2)}`."""
    return _exact.omega(dim, _scaled_base(base, v["alpha"], dim, "ntk", "scaling['alpha']")), 1.0


def _dynamic_length(v, seq_len, max_pos):
    return max_pos if seq_len is None else max(seq_len, max_pos)


@_entry("dynamic", factor=read_positive(), length_key=_dynamic_length)
def _dynamic(dim, base, v, seq_len, max_pos):
    r"""Dynamic NTK (emozilla; Hugging Face ``_compute_dynamic_ntk_parameters``): with
    :math:`L = \max(\text{seq\_len}, L_{max})` (:math:`L_{max}` = ``max_position_embeddings``),

    .. math:: \mathrm{base}' = \mathrm{base}\,\big(sL/L_{max} - (s-1)\big)^{d/(d-2)}.

    At :math:`L \le L_{max}` this is the default. A KV cache built before the base changed was
    rotated with the old frequencies (:func:`posenc_np.rope.rerotate`).
    """
    s = _exact.mp().mpf(v["factor"])
    L = _dynamic_length(v, seq_len, max_pos)
    new_base = base * (s * L / max_pos - (s - 1)) ** _ntk_exponent(dim, "dynamic")  # extended precision: no overflow
    return _exact.omega(dim, new_base), 1.0


def _correction_dim(r, dim, base, L0):
    r""":math:`c(r) = d\,\ln(L_0/(2\pi r)) / (2 \ln \mathrm{base})` in extended precision."""
    ctx = _exact.mp()
    return dim * ctx.log(L0 / (2 * ctx.pi * r)) / (2 * ctx.log(base))


def _correction_range(dim, base, L0, beta_fast, beta_slow, truncate):
    """``(low, high)``: :math:`c(\\beta_{fast})`, :math:`c(\\beta_{slow})`, floored/ceiled when
    ``truncate`` (ints), clamped to ``[0, dim - 1]``."""
    ctx = _exact.mp()
    low = _correction_dim(beta_fast, dim, base, L0)
    high = _correction_dim(beta_slow, dim, base, L0)
    if truncate:
        low, high = int(ctx.floor(low)), int(ctx.ceil(high))
    return max(low, 0), min(high, dim - 1)


def _mscale(scale, mscale=1.0):
    r""":math:`g(s, m) = 1` if :math:`s \le 1`, else :math:`0.1\,m \ln s + 1` (extended precision)."""
    ctx = _exact.mp()
    return ctx.mpf(1) if scale <= 1.0 else ctx.mpf("0.1") * mscale * ctx.log(scale) + 1


@_entry("yarn", original_max_position_embeddings=read_original_max, factor=read_implied_factor,
        beta_fast=read_positive(32.0), beta_slow=read_positive(1.0), truncate=read_flag(True),
        mscale=read_nonnegative, mscale_all_dim=read_nonnegative, attention_factor=read_optional_positive,
        check=ordered("beta_fast", "beta_slow"))
def _yarn(dim, base, v, seq_len, max_pos):
    r"""YaRN "NTK-by-parts" (Peng et al. 2023, arXiv:2309.00071), Hugging Face 5.x semantics.

    With :math:`L_0` = ``original_max_position_embeddings``, :math:`s` = ``factor`` (default
    :math:`L_{max}/L_0`) and :math:`c(r) = d \ln(L_0/(2\pi r)) / (2 \ln \mathrm{base})`
    (:func:`yarn_correction_dim`):

    .. math::

        low = \max(\lfloor c(\beta_{fast}) \rfloor, 0), \quad
        high = \min(\lceil c(\beta_{slow}) \rceil, d - 1) \quad
        (\text{no floor/ceil when } truncate = \text{False};\ high \mathrel{+}= 0.001 \text{ if equal}),

        r_j = \mathrm{clip}\Big(\frac{j - low}{high - low}, 0, 1\Big), \qquad
        \omega'_j = \frac{\omega_j}{s}\,r_j + \omega_j\,(1 - r_j),

    defaults :math:`\beta_{fast} = 32`, :math:`\beta_{slow} = 1`. Attention factor: the explicit
    ``attention_factor``, else :math:`g(s, m)/g(s, m_{all})` when ``mscale`` and
    ``mscale_all_dim`` are both non-zero, else :math:`g(s)` (:func:`yarn_get_mscale`).
    """
    s = v["factor"]
    attention_factor = v["attention_factor"]
    if attention_factor is None:
        m, m_all = v["mscale"], v["mscale_all_dim"]
        attention_factor = _mscale(s, m) / _mscale(s, m_all) if m and m_all else _mscale(s)
    low, high = _correction_range(dim, base, v["original_max_position_embeddings"], v["beta_fast"], v["beta_slow"],
                                  v["truncate"])
    if low == high:
        high += _exact.mp().mpf("0.001")  # HF: prevent a zero-width ramp
    ramp = np.clip((np.arange(dim // 2) - low) / _exact.mp().mpf(high - low), 0, 1)
    extrapolation = 1 - ramp  # 1: keep the original frequency (high freqs), 0: interpolate by 1/s
    inv = _exact.omega(dim, base)
    return (inv / s) * (1.0 - extrapolation) + inv * extrapolation, float(attention_factor)


def _longrope_check(v, rope_type):
    if v["attention_factor"] is None and v["factor"] > 1.0 and v["original_max_position_embeddings"] < 2:
        raise ValueError("rope_type 'longrope' derives attention_factor = sqrt(1 + ln(factor) / ln(L0)), undefined "
                         f"for original_max_position_embeddings L0 = {v['original_max_position_embeddings']}; give "
                         "L0 >= 2 or scaling['attention_factor']")


def _longrope_length(v, seq_len, max_pos):
    return seq_len is not None and seq_len > v["original_max_position_embeddings"]


@_entry("longrope", original_max_position_embeddings=read_original_max, factor=read_implied_factor,
        short_factor=read_per_pair, long_factor=read_per_pair, attention_factor=read_optional_positive,
        check=_longrope_check, length_key=_longrope_length)
def _longrope(dim, base, v, seq_len, max_pos):
    r"""LongRoPE (Ding et al. 2024; Phi-3): per-frequency rescale factors chosen by length.

    .. math:: \omega'_i = \frac{1}{e_i\,\mathrm{base}^{2i/d}}, \qquad
        e = \begin{cases}\text{long\_factor} & \text{seq\_len} > L_0 \\
                         \text{short\_factor} & \text{otherwise (exactly } L_0 \text{, and no seq\_len)}\end{cases}

    Attention factor: the explicit value, else :math:`\sqrt{1 + \ln s / \ln L_0}` for
    :math:`s > 1` (1 otherwise), :math:`s` = ``factor`` or :math:`L_{max}/L_0`.
    """
    s, L0 = v["factor"], v["original_max_position_embeddings"]
    attention_factor = v["attention_factor"]
    if attention_factor is None:
        ctx = _exact.mp()
        attention_factor = 1.0 if s <= 1.0 else ctx.sqrt(1 + ctx.log(s) / ctx.log(L0))
    factors = v["long_factor"] if _longrope_length(v, seq_len, max_pos) else v["short_factor"]
    return _exact.omega(dim, base) / factors, float(attention_factor)


def _llama3_check(v, rope_type):
    if not v["high_freq_factor"] > v["low_freq_factor"]:
        raise ValueError(f"llama3 needs high_freq_factor > low_freq_factor, got {v['high_freq_factor']} <= "
                         f"{v['low_freq_factor']}")


@_entry("llama3", factor=read_positive(), low_freq_factor=read_positive(), high_freq_factor=read_positive(),
        original_max_position_embeddings=read_original_max, check=_llama3_check)
def _llama3(dim, base, v, seq_len, max_pos):
    r"""LLaMA-3.1 band-wise interpolation (Meta ``apply_scaling``). With wavelength
    :math:`\lambda_i = 2\pi/\omega_i`, :math:`l` = ``low_freq_factor``, :math:`h` = ``high_freq_factor``:

    .. math::

        \omega'_i = \begin{cases} \omega_i & \lambda_i < L_0/h \ \text{(kept)} \\
            \omega_i / s & \lambda_i > L_0/l \ \text{(divided)} \\
            (1 - \sigma_i)\,\omega_i/s + \sigma_i\,\omega_i & \text{otherwise (blended)},
            \quad \sigma_i = \dfrac{L_0/\lambda_i - l}{h - l} \end{cases}

    LLaMA-3.1 (d = 128, base 5e5, :math:`L_0` = 8192, s = 8, l = 1, h = 4): 29 kept, 6 blended,
    29 divided (:func:`llama3_bands`).
    """
    s, low, high, L0 = v["factor"], v["low_freq_factor"], v["high_freq_factor"], v["original_max_position_embeddings"]
    inv = _exact.omega(dim, base)
    wavelen = 2 * _exact.mp().pi / inv
    smooth = (L0 / wavelen - low) / (high - low)
    blended = (1.0 - smooth) * inv / s + smooth * inv
    return np.where(wavelen > L0 / low, inv / s, np.where(wavelen < L0 / high, inv, blended)), 1.0


@_entry("proportional", partial_rotary_factor=read_fraction, factor=read_positive(1.0))
def _proportional(dim, base, v, seq_len, max_pos):
    r"""Hugging Face 5.x "proportional": ``dim`` is the *head* dim :math:`d`; with :math:`p` =
    ``partial_rotary_factor`` (default 1) and :math:`s` = ``factor`` (default 1),
    :math:`\omega'_i = \mathrm{base}^{-2i/d}/s` for :math:`i < \lfloor p d / 2 \rfloor` and 0 after
    (the zero pairs are not rotated; use the ``half`` layout over the whole head)."""
    rotated = int(v["partial_rotary_factor"] * dim // 2)
    return np.where(np.arange(dim // 2) < rotated, _exact.omega(dim, base), 0) / v["factor"], 1.0


#: Every accepted ``rope_type`` (``"ntk"`` is ours, not a Hugging Face type).
ROPE_TYPES = tuple(sorted(_SCALINGS))


# --------------------------------------------------------------------------- the YaRN and LLaMA-3 helpers

def yarn_get_mscale(scale: float, mscale: float = 1.0) -> float:
    r"""YaRN's attention temperature :math:`g(s, m) = 1` if :math:`s \le 1`, else :math:`0.1\,m \ln s + 1`.

    Peng et al. 2023 ("YaRN", eq. 22 with :math:`\sqrt{1/t} = 0.1 \ln s + 1`); :math:`g(32) = 1.346574`.
    """
    scale = check_real(scale, "scale", positive=True)
    mscale = check_real(mscale, "mscale")
    g = float(_mscale(scale, mscale))
    if not math.isfinite(g):
        raise ValueError(f"0.1 * mscale * ln(scale) + 1 overflows float64 for mscale={mscale}, scale={scale}")
    return g


def yarn_correction_dim(num_rotations: float, dim: int, base: float, original_max_position_embeddings: int) -> float:
    r"""The (fractional) dimension index whose wavelength fits ``num_rotations`` times in :math:`L_0`:

    .. math:: c(r) = \frac{d \,\ln\!\big(L_0 / (2\pi r)\big)}{2 \ln \mathrm{base}}

    (YaRN "find_correction_dim"). For d=64, base 1.5e5, :math:`L_0` = 4096:
    :math:`c(32) = 8.0928`, :math:`c(1) = 17.3980`. ``dim`` even >= 2, ``base > 0`` and not 1,
    :math:`L_0 \ge 1`, ``num_rotations > 0``.
    """
    r = check_real(num_rotations, "num_rotations", positive=True)
    dim, base = check_dim_base(dim, base)
    L0 = check_int(original_max_position_embeddings, "original_max_position_embeddings", minimum=1, maximum=MAX_LENGTH)
    return float(_correction_dim(r, dim, base, L0))


def yarn_correction_range(dim: int, base: float, original_max_position_embeddings: int, *,
                          beta_fast: float = 32.0, beta_slow: float = 1.0, truncate: bool = True):
    r"""YaRN ramp bounds ``(low, high)``: :math:`c(\beta_{fast})`, :math:`c(\beta_{slow})`, floored
    and ceiled when ``truncate`` (the default, as in Hugging Face), then ``low`` clamped below at 0
    and ``high`` above at :math:`d-1` (Hugging Face's clamps). Returns ints when truncated,
    floats otherwise.

    ``beta_fast >= beta_slow > 0`` (the ramp runs from the fast to the slow rotation count;
    swapping them would invert it, so it raises ``ValueError``); ``dim`` even >= 2; ``base > 0``
    and not 1; :math:`L_0 \ge 1`.
    """
    dim, base = check_dim_base(dim, base)
    L0 = check_int(original_max_position_embeddings, "original_max_position_embeddings", minimum=1, maximum=MAX_LENGTH)
    beta_fast, beta_slow = check_betas(beta_fast, beta_slow, "beta_fast", "beta_slow")
    truncate = check_bool(truncate, "truncate")
    low, high = _correction_range(dim, base, L0, beta_fast, beta_slow, truncate)
    return (low, high) if truncate else (float(low), float(high))


def llama3_bands(dim: int, base: float, scaling: dict) -> np.ndarray:
    r"""Which LLaMA-3.1 band each frequency falls in: 0 kept, 1 blended, 2 divided by ``factor``.

    With wavelength :math:`\lambda_i = 2\pi/\omega_i`: kept if :math:`\lambda_i < L_0/h`,
    divided if :math:`\lambda_i > L_0/l`, blended otherwise (boundaries blend, as in HF).
    LLaMA-3.1 (d=128, base 5e5, :math:`L_0` 8192, l=1, h=4): 29 kept, 6 blended, 29 divided.
    """
    sc = parse_scaling(dim, base=base, scaling=scaling)
    if sc.rope_type != "llama3":
        raise ValueError(f"llama3_bands needs a scaling with rope_type 'llama3', got {sc.rope_type!r}")
    v = sc.values
    low, high, L0 = v["low_freq_factor"], v["high_freq_factor"], v["original_max_position_embeddings"]
    wavelen = 2.0 * math.pi / sinusoidal_frequencies(sc.dim, base=sc.base)
    return np.where(wavelen < L0 / high, 0, np.where(wavelen > L0 / low, 2, 1)).astype(np.int64)


# --------------------------------------------------------------------------- the door: a dict, parsed once

@dataclass(frozen=True)
class Scaling:
    """A checked scaling: the ``rope_type``, rotary ``dim``, ``base``, the ``values`` its keys were
    read as, and ``max_position_embeddings``. :meth:`frequencies` evaluates the entry's formula
    with no further checks; a model parses its dict once and calls it per length."""

    rope_type: str
    dim: int
    base: float
    values: dict
    max_position_embeddings: int | None

    def frequencies(self, seq_len: int | None = None):
        """``(inv_freq, attention_factor)`` for a length ``seq_len`` (an int in ``[1, 2**53]`` or None)."""
        entry = _SCALINGS[self.rope_type]
        inv, attention_factor = entry.formula(self.dim, self.base, self.values, seq_len, self.max_position_embeddings)
        attention_factor = float(attention_factor)
        if not math.isfinite(attention_factor):
            raise ValueError(f"scaling {self.rope_type!r} gives an attention factor that overflows float64 (check its "
                             "mscale and factor values)")
        return _exact.frequency_array(inv), attention_factor

    def length_key(self, seq_len: int | None):
        """What :meth:`frequencies` depends on of ``seq_len``: equal keys give equal frequencies."""
        key = _SCALINGS[self.rope_type].length_key
        return None if key is None else key(self.values, seq_len, self.max_position_embeddings)


def parse_scaling(dim: int, *, base: float = DEFAULT_BASE, scaling: dict | None = None,
                  max_position_embeddings: int | None = None) -> Scaling:
    """Check a Hugging Face rope dict once and read its keys: a :class:`Scaling` (see :func:`inv_freq`)."""
    rope_type, params = read_rope_type(scaling, {name: e.keys for name, e in _SCALINGS.items()}, _COMMON_KEYS)
    dim, base = resolve_dim_base(dim, base, params, rope_type, DEFAULT_BASE)
    check_alloc((dim // 2,), np.float64, "inv_freq (dim // 2,)")
    max_pos = check_length(max_position_embeddings, "max_position_embeddings")
    if rope_type == "dynamic" and max_pos is None:
        raise ValueError("rope_type 'dynamic' needs the max_position_embeddings argument")
    if rope_type in ("ntk", "dynamic"):
        _ntk_exponent(dim, rope_type)
    entry = _SCALINGS[rope_type]
    values = read_keys(params, entry.keys, {"rope_type": rope_type, "dim": dim, "max_pos": max_pos})
    if entry.check is not None:
        entry.check(values, rope_type)
    return Scaling(rope_type, dim, base, values, max_pos)


def inv_freq(dim: int, *, base: float = DEFAULT_BASE, scaling: dict | None = None, seq_len: int | None = None,
             max_position_embeddings: int | None = None) -> tuple[np.ndarray, float]:
    r"""RoPE inverse frequencies and attention factor, for any Hugging Face ``rope_type``.

    Unscaled: :math:`\omega_i = \mathrm{base}^{-2i/d}`, :math:`i = 0 \dots d/2 - 1`
    (Su et al. 2021, "RoFormer", eq. 15). ``scaling`` is a Hugging Face ``rope_parameters``
    (5.x) or ``rope_scaling`` (4.x) dict, accepted verbatim; its ``rope_type`` (or legacy
    ``type``) selects one entry of the registry in :mod:`posenc_np.rope_scaling`, each a
    function with its formula in its docstring (and the table "Scaling types" of
    ``docs/rope.md``):

    ``default`` / ``mrope``
        :math:`\omega_i`; attention factor 1.
    ``linear`` (``factor``)
        position interpolation, :math:`\omega_i / s`.
    ``ntk`` (``alpha``; static NTK-aware, *not a Hugging Face type*)
        base :math:`\to \mathrm{base}\,\alpha^{d/(d-2)}`.
    ``dynamic`` (``factor``; needs ``max_position_embeddings``)
        the NTK base rescaled with the current length.
    ``yarn`` (``factor``, ``original_max_position_embeddings``, optional ramp and mscale keys)
        "NTK-by-parts": a linear ramp between interpolated and original frequencies, and an
        attention factor; optional ``beta_fast``\=32, ``beta_slow``\=1, ``truncate``\=True,
        ``mscale``, ``mscale_all_dim``, ``attention_factor`` (:func:`yarn_correction_range`,
        :func:`yarn_get_mscale`).
    ``longrope`` (``short_factor``, ``long_factor``, ``original_max_position_embeddings``)
        per-frequency divisors, ``long_factor`` once ``seq_len > L0``; optional ``factor``,
        ``attention_factor``.
    ``llama3`` (``factor``, ``low_freq_factor``, ``high_freq_factor``, ``original_max_position_embeddings``)
        band-wise interpolation (:func:`llama3_bands`).
    ``proportional`` (``partial_rotary_factor``, optional ``factor``\=1; ``dim`` is the *head* dim)
        the first :math:`\lfloor p d / 2 \rfloor` frequencies of the head dim, zeros after.

    ``dim`` is the rotary dim, except when the dict carries ``partial_rotary_factor`` p (as
    Hugging Face 5.x dicts do, e.g. GPT-NeoX's ``rotary_pct``): then ``dim`` is the head dim
    and, as in Hugging Face, the rotary dim is ``int(dim * p)`` for every type but
    ``proportional`` (which keeps ``dim // 2`` frequencies and zeroes the tail).
    ``original_max_position_embeddings`` defaults to ``max_position_embeddings`` (as Hugging
    Face's ``standardize_rope_params`` fills it), and ``factor`` of ``yarn``/``longrope`` to
    ``max_position_embeddings / original_max_position_embeddings``.

    Parameters
    ----------
    dim : int
        Even rotary dim; the head dim when ``scaling`` carries ``partial_rotary_factor``.
    base : float
        :math:`\theta`, 10000 by default. A dict's ``rope_theta`` replaces the default; if
        ``base`` is passed too, they must agree.
    scaling : dict or None
        Hugging Face rope parameters; None means ``default``.
    seq_len : int, optional
        Current length (Hugging Face passes ``max(position_ids) + 1``); used by ``dynamic``
        and ``longrope``.
    max_position_embeddings : int, optional
        The model's (possibly extended) context; needed by ``dynamic``, and by
        ``yarn``/``longrope``/``llama3`` when the dict lacks a key it stands in for.

    Returns
    -------
    inv_freq : ExactFrequencies (a float64 ndarray), shape ``(rotary_dim // 2,)``
        Each value the correctly rounded result of the formula (evaluated at 256 bits); the
        array also carries the unrounded values, which :func:`posenc_np.rope.cos_sin` uses.
    attention_factor : float
        Multiplies both cos and sin (:func:`posenc_np.rope.cos_sin`).
    """
    sc = parse_scaling(dim, base=base, scaling=scaling, max_position_embeddings=max_position_embeddings)
    return sc.frequencies(check_length(seq_len, "seq_len"))
