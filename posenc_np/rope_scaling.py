r"""RoPE frequencies and every frequency-scaling variant (Hugging Face ``rope_type`` registry).

The public entry points are :func:`inv_freq` and :func:`exact_inv_freq` (re-exported by
:mod:`posenc_np.rope`) and :func:`parse_scaling`, which checks a dict once and returns a
:class:`Scaling`, the one RoPE configuration type of the package (the registry, the Hugging Face
config reader and the precision lab use it). This module holds one small function per
``rope_type`` behind the registry ``_SCALINGS``, in the
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
the formula; :func:`exact_inv_freq` returns the unrounded values too, as an explicit
:class:`~posenc_np._exact.ExactFrequencies` that :func:`posenc_np.rope.cos_sin` takes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from . import _exact
from ._checks import as_float_array, check_alloc, check_bool, check_int, check_real, require
from .absolute import sinusoidal_frequencies

__all__ = [
    "DEFAULT_BASE",
    "ROPE_TYPES",
    "Scaling",
    "exact_inv_freq",
    "inv_freq",
    "llama3_bands",
    "parse_scaling",
    "yarn_correction_dim",
    "yarn_correction_range",
    "yarn_get_mscale",
]

#: ``base`` when neither the ``base`` argument nor the dict's ``rope_theta`` gives one.
DEFAULT_BASE = 10000.0
#: Largest length (``seq_len``, ``max_position_embeddings``, ``original_max_position_embeddings``)
#: accepted: positions past 2^53 are not exact in the float64 angles.
MAX_LENGTH = 2**53

#: Deepest nesting of containers accepted in a scaling dict (the dict is level 1, LongRoPE's lists
#: level 2): a deeper one is refused before anything recurses into it.
MAX_SCALING_DEPTH = 4

#: Keys any rope_type may carry. "mrope_section"/"mrope_interleaved" are read by
#: posenc_np.rope.mrope_cos_sin, not here; "partial_rotary_factor" by :func:`parse_scaling`.
_COMMON_KEYS = {"rope_type", "type", "rope_theta", "partial_rotary_factor", "mrope_section", "mrope_interleaved"}


# --------------------------------------------------------------------------- the registry

@dataclass(frozen=True)
class ScalingType:
    """One ``rope_type``: the keys it reads (key -> ``(kind, default)``, in reading order, see
    :func:`_read_key`), its formula ``formula(dim, base, v, seq_len, max_pos) -> (inv_freq,
    attention_factor)`` (``v``: the values read), an optional cross-key ``check(v, dim, base, max_pos)``, and
    ``length_key(v, seq_len, max_pos)``: what of the current length the result depends on (None:
    nothing), so that a model computes each table once."""

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


# Key kinds (see _read_key): a required real > 0, one with a default, ...
_REQUIRED = ("positive", None)
_OPTIONAL = ("optional", None)
_NONNEGATIVE = ("nonnegative", 0.0)
_L0 = ("original_max", None)
_IMPLIED_FACTOR = ("implied_factor", None)
_PER_PAIR = ("per_pair", None)


# --------------------------------------------------------------------------- one entry per type

@_entry("default")
def _default(dim, base, v, seq_len, max_pos):
    r""":math:`\omega_i = \mathrm{base}^{-2i/d}`, attention factor 1 (Su et al. 2021, eq. 15)."""
    return _exact.omega(dim, base), 1.0


_SCALINGS["mrope"] = ScalingType("mrope", {}, _default)  # Qwen2-VL's legacy {"type": "mrope"}: default frequencies


@_entry("linear", factor=_REQUIRED)
def _linear(dim, base, v, seq_len, max_pos):
    r"""Position interpolation (kaiokendev; Chen et al. 2023): :math:`\omega_i / s`."""
    return _exact.omega(dim, base) / v["factor"], 1.0


def _ntk_base(base, ratio, dim: int):
    r""":math:`\mathrm{base}\cdot\mathrm{ratio}^{d/(d-2)}` (the NTK rescaled base) in extended precision."""
    return base * ratio ** (_exact.mp().mpf(dim) / (dim - 2))


def _ntk_check(v, dim, base, max_pos):
    require(dim > 2, f"rope_type 'ntk' rescales the base by a power d/(d-2); dim must be > 2, got {dim}")
    require(math.isfinite(_ntk_base(base, v["alpha"], dim)), f"rope_type 'ntk': scaling['alpha'] makes the "
            f"rescaled base {base} * {v['alpha']:.6g}^(d/(d-2)) overflow float64")


@_entry("ntk", alpha=_REQUIRED, check=_ntk_check)
def _ntk(dim, base, v, seq_len, max_pos):
    r"""Static NTK-aware scaling (bloc97; x-transformers, rotary-embedding-torch
    ``theta_rescale_factor``; *not* a Hugging Face type):
    :math:`\mathrm{base}' = \mathrm{base}\,\alpha^{d/(d-2)}`."""
    return _exact.omega(dim, _ntk_base(base, v["alpha"], dim)), 1.0


def _dynamic_length(v, seq_len, max_pos):
    return max_pos if seq_len is None else max(seq_len, max_pos)


def _dynamic_check(v, dim, base, max_pos):
    require(max_pos is not None, "rope_type 'dynamic' needs the max_position_embeddings argument")
    require(dim > 2, f"rope_type 'dynamic' rescales the base by a power d/(d-2); dim must be > 2, got {dim}")


@_entry("dynamic", factor=_REQUIRED, check=_dynamic_check, length_key=_dynamic_length)
def _dynamic(dim, base, v, seq_len, max_pos):
    r"""Dynamic NTK (emozilla; Hugging Face ``_compute_dynamic_ntk_parameters``): with
    :math:`L = \max(\text{seq\_len}, L_{max})` (:math:`L_{max}` = ``max_position_embeddings``),

    .. math:: \mathrm{base}' = \mathrm{base}\,\big(sL/L_{max} - (s-1)\big)^{d/(d-2)}.

    At :math:`L \le L_{max}` this is the default. A KV cache built before the base changed was
    rotated with the old frequencies (:func:`posenc_np.rope.rerotate`).
    """
    s = _exact.mp().mpf(v["factor"])
    L = _dynamic_length(v, seq_len, max_pos)
    return _exact.omega(dim, _ntk_base(base, s * L / max_pos - (s - 1), dim)), 1.0  # extended: no overflow


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


def _yarn_attention_factor(v):
    """The explicit ``attention_factor``, else ``g(s, m) / g(s, m_all)`` when both mscales are set, else ``g(s)``."""
    if v["attention_factor"] is not None:
        return v["attention_factor"]
    m, m_all = v["mscale"], v["mscale_all_dim"]
    return _mscale(v["factor"], m) / _mscale(v["factor"], m_all) if m and m_all else _mscale(v["factor"])


def _yarn_check(v, dim, base, max_pos):
    require(v["beta_fast"] >= v["beta_slow"], f"scaling['beta_fast'] ({v['beta_fast']}) must be >= "
            f"scaling['beta_slow'] ({v['beta_slow']}): the YaRN ramp runs from the fast to the slow rotation count")
    require(math.isfinite(_yarn_attention_factor(v)), "scaling 'yarn' gives an attention factor that overflows "
            "float64 (check its mscale and factor values)")


@_entry("yarn", original_max_position_embeddings=_L0, factor=_IMPLIED_FACTOR, beta_fast=("positive", 32.0),
        beta_slow=("positive", 1.0), truncate=("flag", True), mscale=_NONNEGATIVE, mscale_all_dim=_NONNEGATIVE,
        attention_factor=_OPTIONAL, check=_yarn_check)
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
    low, high = _correction_range(dim, base, v["original_max_position_embeddings"], v["beta_fast"], v["beta_slow"],
                                  v["truncate"])
    if low == high:
        high += _exact.mp().mpf("0.001")  # HF: prevent a zero-width ramp
    ramp = np.clip((np.arange(dim // 2) - low) / _exact.mp().mpf(high - low), 0, 1)
    extrapolation = 1 - ramp  # 1: keep the original frequency (high freqs), 0: interpolate by 1/s
    inv = _exact.omega(dim, base)
    return (inv / s) * (1.0 - extrapolation) + inv * extrapolation, float(_yarn_attention_factor(v))


def _longrope_check(v, dim, base, max_pos):
    require(v["attention_factor"] is not None or v["factor"] <= 1.0 or v["original_max_position_embeddings"] >= 2,
            "rope_type 'longrope' derives attention_factor = sqrt(1 + ln(factor) / ln(L0)), undefined for "
            f"original_max_position_embeddings L0 = {v['original_max_position_embeddings']}; give L0 >= 2 or "
            "scaling['attention_factor']")


def _longrope_length(v, seq_len, max_pos):
    return seq_len is not None and seq_len > v["original_max_position_embeddings"]


@_entry("longrope", original_max_position_embeddings=_L0, factor=_IMPLIED_FACTOR, short_factor=_PER_PAIR,
        long_factor=_PER_PAIR, attention_factor=_OPTIONAL, check=_longrope_check, length_key=_longrope_length)
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


def _llama3_check(v, dim, base, max_pos):
    require(v["high_freq_factor"] > v["low_freq_factor"], f"llama3 needs high_freq_factor > low_freq_factor, got "
            f"{v['high_freq_factor']} <= {v['low_freq_factor']}")


@_entry("llama3", factor=_REQUIRED, low_freq_factor=_REQUIRED, high_freq_factor=_REQUIRED,
        original_max_position_embeddings=_L0, check=_llama3_check)
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


@_entry("proportional", partial_rotary_factor=("fraction", 1.0), factor=("positive", 1.0))
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

    Examples
    --------
    >>> from posenc_np.rope_scaling import yarn_get_mscale
    >>> round(yarn_get_mscale(32.0), 6), yarn_get_mscale(1.0)      # 0.1 ln 32 + 1; s <= 1 gives 1
    (1.346574, 1.0)
    >>> round(yarn_get_mscale(32.0, 0.707), 6)                     # 0.1 * 0.707 * ln 32 + 1
    1.245028
    """
    scale = check_real(scale, "scale", positive=True)
    mscale = check_real(mscale, "mscale")
    g = float(_mscale(scale, mscale))
    require(math.isfinite(g), f"0.1 * mscale * ln(scale) + 1 overflows float64 for mscale={mscale}, scale={scale}")
    return g


def yarn_correction_dim(num_rotations: float, dim: int, base: float, original_max_position_embeddings: int) -> float:
    r"""The (fractional) dimension index whose wavelength fits ``num_rotations`` times in :math:`L_0`:

    .. math:: c(r) = \frac{d \,\ln\!\big(L_0 / (2\pi r)\big)}{2 \ln \mathrm{base}}

    (YaRN "find_correction_dim"). For d=64, base 1.5e5, :math:`L_0` = 4096:
    :math:`c(32) = 8.0928`, :math:`c(1) = 17.3980`. ``dim`` even >= 2, ``base > 0`` and not 1,
    :math:`L_0 \ge 1`, ``num_rotations > 0``.

    Examples
    --------
    >>> from posenc_np.rope_scaling import yarn_correction_dim
    >>> round(yarn_correction_dim(32, 64, 1.5e5, 4096), 4), round(yarn_correction_dim(1, 64, 1.5e5, 4096), 4)
    (8.0928, 17.398)
    """
    r = check_real(num_rotations, "num_rotations", positive=True)
    sc = parse_scaling(dim, base=base)
    L0 = check_int(original_max_position_embeddings, "original_max_position_embeddings", minimum=1, maximum=MAX_LENGTH)
    return float(_correction_dim(r, sc.rotary_dim, sc.base, L0))


def yarn_correction_range(dim: int, base: float, original_max_position_embeddings: int, *,
                          beta_fast: float = 32.0, beta_slow: float = 1.0,
                          truncate: bool = True) -> tuple[int, int] | tuple[float, float]:
    r"""YaRN ramp bounds ``(low, high)``: :math:`c(\beta_{fast})`, :math:`c(\beta_{slow})`, floored
    and ceiled when ``truncate`` (the default, as in Hugging Face), then ``low`` clamped below at 0
    and ``high`` above at :math:`d-1` (Hugging Face's clamps). Returns ints when truncated,
    floats otherwise.

    ``beta_fast >= beta_slow > 0`` (the ramp runs from the fast to the slow rotation count;
    swapping them would invert it, so it raises ``ValueError``); ``dim`` even >= 2; ``base > 0``
    and not 1; :math:`L_0 \ge 1`.

    Examples
    --------
    >>> from posenc_np.rope_scaling import yarn_correction_range
    >>> yarn_correction_range(64, 1.5e5, 4096), yarn_correction_range(128, 1e4, 4096)   # floor(low), ceil(high)
    ((8, 18), (20, 46))
    >>> tuple(round(v, 4) for v in yarn_correction_range(64, 1.5e5, 4096, truncate=False))
    (8.0928, 17.398)
    """
    sc = parse_scaling(dim, base=base, scaling={  # the checks of a YaRN dict with these keys
        "rope_type": "yarn", "factor": 1.0, "original_max_position_embeddings": original_max_position_embeddings,
        "beta_fast": beta_fast, "beta_slow": beta_slow, "truncate": truncate})
    v = sc.values
    low, high = _correction_range(sc.rotary_dim, sc.base, v["original_max_position_embeddings"], v["beta_fast"],
                                  v["beta_slow"], v["truncate"])
    return (low, high) if v["truncate"] else (float(low), float(high))


def llama3_bands(dim: int, base: float, scaling: dict) -> np.ndarray:
    r"""Which LLaMA-3.1 band each frequency falls in: 0 kept, 1 blended, 2 divided by ``factor``.

    With wavelength :math:`\lambda_i = 2\pi/\omega_i`: kept if :math:`\lambda_i < L_0/h`,
    divided if :math:`\lambda_i > L_0/l`, blended otherwise (boundaries blend, as in HF).
    LLaMA-3.1 (d=128, base 5e5, :math:`L_0` 8192, l=1, h=4): 29 kept, 6 blended, 29 divided.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.rope_scaling import llama3_bands
    >>> llama31 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
    ...            "original_max_position_embeddings": 8192}
    >>> np.bincount(llama3_bands(128, 5e5, llama31)).tolist()      # kept, blended, divided
    [29, 6, 29]
    """
    sc = parse_scaling(dim, base=base, scaling=scaling)
    require(sc.rope_type == "llama3", f"llama3_bands needs a scaling with rope_type 'llama3', got {sc.rope_type!r}")
    v = sc.values
    low, high, L0 = v["low_freq_factor"], v["high_freq_factor"], v["original_max_position_embeddings"]
    wavelen = 2.0 * math.pi / sinusoidal_frequencies(sc.rotary_dim, base=sc.base)
    return np.where(wavelen < L0 / high, 0, np.where(wavelen > L0 / low, 2, 1)).astype(np.int64)


# --------------------------------------------------------------------------- the one configuration type

@dataclass(frozen=True)
class Scaling:
    """A RoPE configuration checked once: a Hugging Face rope dict read for a width and a base.

    ``rope_type``; ``rotary_dim``: the rotated channels (``2 * len(inv_freq)``; the whole head
    for ``proportional``); ``head_dim``: the ``dim`` it was read for (the head dim when the dict
    carries ``partial_rotary_factor`` or is ``proportional``, else the rotary dim); ``base``;
    ``values``: the dict's keys as read, defaults filled in; ``max_position_embeddings``;
    ``scaling``: the dict as given (None: plain RoPE); ``seq_len``: the length
    :meth:`frequencies` takes when given none (``dynamic`` and ``longrope`` depend on it). Read
    from a model's ``config.json`` (:func:`posenc_np.hf_config.read_hf_config`) it also records
    the ``layer_type`` it applies to, the ``context`` its positions reach and Qwen2-VL's
    ``mrope_section`` / ``mrope_interleaved``.

    The frequencies are the formula of the ``rope_type`` evaluated without further checks, once
    per :meth:`length_key`.

    Examples
    --------
    >>> from posenc_np.rope_scaling import parse_scaling
    >>> sc = parse_scaling(8, scaling={"rope_type": "linear", "factor": 2.0})
    >>> sc.rope_type, sc.rotary_dim, sc.base
    ('linear', 8, 10000.0)
    >>> inv, attention_factor = sc.frequencies()                    # 10000**(-2i/8) / 2
    >>> inv.round(6).tolist(), attention_factor
    ([0.5, 0.05, 0.005, 0.0005], 1.0)
    """

    rope_type: str
    rotary_dim: int
    head_dim: int
    base: float
    values: dict = field(compare=False, repr=False)
    max_position_embeddings: int | None = None
    scaling: dict | None = None
    seq_len: int | None = None
    layer_type: str | None = None
    context: int | None = None
    mrope_section: tuple | None = None
    mrope_interleaved: bool = False
    _memo: dict = field(default_factory=dict, init=False, compare=False, repr=False)

    def exact_frequencies(self, seq_len: int | None = None) -> tuple[_exact.ExactFrequencies, float]:
        """``(ExactFrequencies, attention_factor)`` at length ``seq_len`` (default :attr:`seq_len`)."""
        key = self.length_key(self.seq_len if seq_len is None else seq_len)
        if key not in self._memo:
            inv, attention_factor = _SCALINGS[self.rope_type].formula(
                self.rotary_dim, self.base, self.values, self.seq_len if seq_len is None else seq_len,
                self.max_position_embeddings)
            try:
                self._memo[key] = (_exact.exact_frequencies(inv), float(attention_factor))
            except OverflowError:  # a tiny factor divides omega_0 = 1 past the largest double
                raise ValueError(f"scaling for rope_type {self.rope_type!r} gives a frequency past float64's "
                                 "largest value (a factor, or a per-pair factor, below about 5.6e-309)") from None
        return self._memo[key]

    def frequencies(self, seq_len: int | None = None) -> tuple[np.ndarray, float]:
        """``(inv_freq, attention_factor)`` at length ``seq_len``: :meth:`exact_frequencies` rounded (a new array)."""
        inv, attention_factor = self.exact_frequencies(seq_len)
        return inv.rounded.copy(), attention_factor

    def length_key(self, seq_len: int | None) -> object:
        """What the frequencies depend on of ``seq_len``: equal keys give equal frequencies."""
        key = _SCALINGS[self.rope_type].length_key
        return None if key is None else key(self.values, seq_len, self.max_position_embeddings)


# --------------------------------------------------------------------------- the door: a dict, parsed once

def _read_key(params: dict, key: str, kind: str, default, ctx: dict):
    """``scaling[key]`` read as ``kind``, ``default`` when absent or None. Kinds: ``positive`` (a real
    > 0; required when ``default`` is None), ``optional`` (> 0 or None), ``nonnegative``, ``fraction``
    (in [0, 1]), ``flag`` (a bool), ``per_pair`` (``dim // 2`` reals > 0: LongRoPE's lists),
    ``original_max`` (:math:`L_0`, default ``max_position_embeddings``, as Hugging Face's
    ``standardize_rope_params`` fills it) and ``implied_factor`` (default ``max_position_embeddings / L0``)."""
    name, value, rope_type = f"scaling[{key!r}]", params.get(key), ctx["rope_type"]
    if kind == "flag":
        return check_bool(params.get(key, default), name)
    if kind == "original_max":
        value = ctx["max_pos"] if value is None else value
        require(value is not None, f"rope_type {rope_type!r} needs scaling['original_max_position_embeddings'] or "
                "the max_position_embeddings argument")
        return check_int(value, "original_max_position_embeddings", minimum=1, maximum=MAX_LENGTH)
    if kind == "implied_factor" and value is None:
        require(ctx["max_pos"] is not None, f"rope_type {rope_type!r} needs scaling['factor'] or the "
                "max_position_embeddings argument (factor defaults to max_position_embeddings / "
                "original_max_position_embeddings)")
        return ctx["max_pos"] / ctx["original_max_position_embeddings"]
    if value is None:
        require(default is not None or kind == "optional", f"scaling for rope_type {rope_type!r} needs key {key!r} "
                f"(got keys {sorted(params)})")
        return default
    if kind == "per_pair":
        arr, n = as_float_array(value, name), ctx["dim"] // 2
        require(arr.shape == (n,) and bool(np.all(np.isfinite(arr) & (arr > 0))), f"{name} must hold dim // 2 = {n} "
                f"finite values > 0, got shape {arr.shape}: {arr.tolist()}")
        return arr.astype(np.float64)
    return check_real(value, name, positive=kind not in ("nonnegative", "fraction"),
                      nonnegative=kind in ("nonnegative", "fraction"), maximum=1.0 if kind == "fraction" else None)


def _nests_deeper(value, limit: int) -> bool:
    """Whether ``value`` nests dicts, lists or tuples more than ``limit`` levels deep (level by level,
    without recursion, so any depth is safe to ask about)."""
    level = [value]
    for _ in range(limit):
        level = [v for x in level if isinstance(x, (dict, list, tuple)) for v in (x.values() if isinstance(x, dict)
                                                                                   else x)]
    return any(isinstance(x, (dict, list, tuple)) for x in level)


def _read_rope_type(scaling) -> str:
    """The ``rope_type`` of a Hugging Face dict (its ``rope_type`` or legacy ``type``; they must agree)."""
    require(isinstance(scaling, dict), "scaling must be a dict (a Hugging Face rope_parameters / rope_scaling) or "
            f"None, got {type(scaling).__name__}", TypeError)
    require(not _nests_deeper(scaling, MAX_SCALING_DEPTH), f"scaling nests containers more than "
            f"MAX_SCALING_DEPTH = {MAX_SCALING_DEPTH} levels deep (a rope dict holds numbers, strings and lists)")
    new, old = scaling.get("rope_type"), scaling.get("type")
    for key, value in (("rope_type", new), ("type", old)):
        require(value is None or isinstance(value, str), f"scaling[{key!r}] must be a string, one of "
                f"{sorted(_SCALINGS)}; got {value!r}", TypeError)
    require(new is None or old is None or new == old,
            f"scaling has rope_type={new!r} and type={old!r}; they must agree")
    rope_type = new or old or "default"
    require(rope_type in _SCALINGS, f"unknown rope_type {rope_type!r}; expected one of {sorted(_SCALINGS)}")
    unknown = set(scaling) - _COMMON_KEYS - set(_SCALINGS[rope_type].keys)
    require(not unknown, f"scaling has keys {sorted(unknown)} that rope_type {rope_type!r} does not use; allowed: "
            f"{sorted(_COMMON_KEYS | set(_SCALINGS[rope_type].keys))}")
    return rope_type


def parse_scaling(dim: int, *, base: float | None = None, scaling: dict | None = None,
                  max_position_embeddings: int | None = None, seq_len: int | None = None) -> Scaling:
    """Check a Hugging Face rope dict once and read its keys: a :class:`Scaling` (see :func:`inv_freq`
    for the arguments; ``seq_len`` becomes :attr:`Scaling.seq_len`).

    Examples
    --------
    >>> from posenc_np.rope_scaling import parse_scaling
    >>> sc = parse_scaling(128, scaling={"rope_type": "yarn", "original_max_position_embeddings": 4096},
    ...                    max_position_embeddings=131072)
    >>> sc.values["factor"], sc.values["beta_fast"], sc.values["beta_slow"]   # factor = 131072 / 4096; defaults
    (32.0, 32.0, 1.0)
    >>> round(sc.frequencies()[1], 6)                                  # attention factor g(32)
    1.346574
    """
    rope_type = "default" if scaling is None else _read_rope_type(scaling)
    params = scaling or {}
    theta = None if params.get("rope_theta") is None else check_real(params["rope_theta"], "scaling['rope_theta']",
                                                                     positive=True)
    require(theta is None or base is None or float(base) == theta,
            f"base={base} disagrees with scaling['rope_theta']={theta}; pass one of them")
    base = check_real(theta or (DEFAULT_BASE if base is None else base), "base", positive=True)
    require(base != 1.0, "base must differ from 1 (every frequency would be 1)")
    head_dim = rotary = check_int(dim, "dim", minimum=2)
    prf = params.get("partial_rotary_factor")
    if rope_type != "proportional" and prf is not None:  # HF's rule for every other type: int(head_dim * factor)
        prf = check_real(prf, "scaling['partial_rotary_factor']", positive=True, maximum=1.0)
        rotary = int(head_dim * prf)
    require(rotary % 2 == 0 and rotary >= 2, f"dim (the rotary dim) must be even, got {dim}" if rotary == head_dim
            else f"rotary dim int(dim * partial_rotary_factor) = int({head_dim} * {prf}) = {rotary} must be even "
                 "and >= 2")
    check_alloc((rotary // 2, _exact.FREQUENCY_BYTES), np.uint8, "extended frequencies (dim // 2, FREQUENCY_BYTES)")
    max_pos = None if max_position_embeddings is None else check_int(
        max_position_embeddings, "max_position_embeddings", minimum=1, maximum=MAX_LENGTH)
    seq_len = None if seq_len is None else check_int(seq_len, "seq_len", minimum=1, maximum=MAX_LENGTH)
    entry, ctx = _SCALINGS[rope_type], {"rope_type": rope_type, "dim": rotary, "max_pos": max_pos}
    for key, (kind, default) in entry.keys.items():
        ctx[key] = _read_key(params, key, kind, default, ctx)
    values = {key: ctx[key] for key in entry.keys}
    if entry.check is not None:
        entry.check(values, rotary, base, max_pos)
    return Scaling(rope_type, rotary, head_dim, base, values, max_pos, scaling, seq_len)


def exact_inv_freq(dim: int, *, base: float | None = None, scaling: dict | None = None, seq_len: int | None = None,
                   max_position_embeddings: int | None = None) -> tuple[_exact.ExactFrequencies, float]:
    r""":func:`inv_freq` with the frequencies as an explicit
    :class:`~posenc_np._exact.ExactFrequencies`: the formula's values before rounding
    (``.exact``) and rounded (``.rounded``). :func:`posenc_np.rope.cos_sin` (and the other table
    builders) then build each entry within one ulp of :math:`\cos`, :math:`\sin` of the exact
    angle, free of the half-ulp error of each stored frequency (``docs/precision.md``).

    Returns
    -------
    inv_freq : ExactFrequencies
    attention_factor : float

    Examples
    --------
    >>> from posenc_np.rope_scaling import exact_inv_freq
    >>> inv, attention_factor = exact_inv_freq(4)
    >>> type(inv).__name__, inv.rounded.tolist(), attention_factor    # 10000**(-2i/4): 1, 0.01
    ('ExactFrequencies', [1.0, 0.01], 1.0)
    """
    return parse_scaling(dim, base=base, scaling=scaling, max_position_embeddings=max_position_embeddings,
                         seq_len=seq_len).exact_frequencies()


def inv_freq(dim: int, *, base: float | None = None, scaling: dict | None = None, seq_len: int | None = None,
             max_position_embeddings: int | None = None) -> tuple[np.ndarray, float]:
    r"""RoPE inverse frequencies and attention factor, for any Hugging Face ``rope_type``.

    Unscaled: :math:`\omega_i = \mathrm{base}^{-2i/d}`, :math:`i = 0 \dots d/2 - 1`
    (Su et al. 2021, "RoFormer", eq. 15). ``scaling`` is a Hugging Face ``rope_parameters``
    (5.x) or ``rope_scaling`` (4.x) dict, accepted verbatim; its ``rope_type`` (or legacy
    ``type``) selects one entry of the registry in this module (:data:`ROPE_TYPES`: ``default``,
    ``mrope``, ``linear``, ``ntk`` (static NTK-aware, *not a Hugging Face type*), ``dynamic``,
    ``yarn``, ``longrope``, ``llama3``, ``proportional``), each a function with its formula and
    keys in its docstring (and the table "Scaling types" of ``docs/rope.md``).

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
    base : float, optional
        :math:`\theta`: the dict's ``rope_theta`` when it has one (``base``, if passed too, must
        agree), else 10000 (:data:`DEFAULT_BASE`).
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
    inv_freq : ndarray, float64, shape ``(rotary_dim // 2,)``
        Each value the correctly rounded result of the formula (evaluated at 256 bits). For
        tables free of the frequencies' own rounding pass :func:`exact_inv_freq`'s value instead.
    attention_factor : float
        Multiplies both cos and sin (:func:`posenc_np.rope.cos_sin`).

    Examples
    --------
    >>> from posenc_np.rope_scaling import inv_freq
    >>> inv_freq(8)                                                  # 10000**(-2i/8), attention factor 1
    (array([1.   , 0.1  , 0.01 , 0.001]), 1.0)
    >>> inv_freq(8, scaling={"rope_type": "linear", "factor": 4.0})[0].tolist()
    [0.25, 0.025, 0.0025, 0.00025]
    >>> inv, attention_factor = inv_freq(128, scaling={"rope_type": "yarn", "factor": 32.0,
    ...                                                "original_max_position_embeddings": 4096})
    >>> float(inv[0]), float(inv[-1] * 32 / inv_freq(128)[0][-1]), round(attention_factor, 6)  # kept, divided by 32
    (1.0, 1.0, 1.346574)
    """
    return parse_scaling(dim, base=base, scaling=scaling, max_position_embeddings=max_position_embeddings,
                         seq_len=seq_len).frequencies()
