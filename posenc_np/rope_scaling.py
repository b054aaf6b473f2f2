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

import numpy as np

from . import _exact
from ._checks import as_float_array, check_alloc, check_bool, check_int, check_real
from .absolute import sinusoidal_frequencies

__all__ = [
    "ROPE_TYPES",
    "inv_freq",
    "llama3_bands",
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

#: Largest length (``seq_len``, ``max_position_embeddings``, ``original_max_position_embeddings``)
#: accepted: positions past 2^53 are not exact in the float64 angles.
MAX_LENGTH = 2**53

# Keys any rope_type may carry. "mrope_section"/"mrope_interleaved" are read by
# posenc_np.rope.mrope_cos_sin, not here.
_COMMON_KEYS = {"rope_type", "type", "rope_theta", "partial_rotary_factor", "mrope_section", "mrope_interleaved"}
_TYPE_KEYS = {
    "default": set(),
    "mrope": set(),  # Qwen2-VL's legacy {"type": "mrope"}: default frequencies
    "linear": {"factor"},
    "ntk": {"alpha"},
    "dynamic": {"factor"},
    "yarn": {"factor", "original_max_position_embeddings", "attention_factor", "beta_fast", "beta_slow",
             "mscale", "mscale_all_dim", "truncate"},
    "longrope": {"short_factor", "long_factor", "factor", "original_max_position_embeddings", "attention_factor"},
    "llama3": {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"},
    "proportional": {"factor"},
}
#: Every accepted ``rope_type`` (``"ntk"`` is ours, not a Hugging Face type).
ROPE_TYPES = tuple(sorted(_TYPE_KEYS))


# --------------------------------------------------------------------------- dict reading

def _require(params: dict, key: str, rope_type: str):
    if params.get(key) is None:
        raise ValueError(f"scaling for rope_type {rope_type!r} needs key {key!r} "
                         f"(got keys {sorted(params)})")
    return params[key]


def _factor(params: dict, key: str, rope_type: str, *, default=None):
    """A finite real scaling parameter ``> 0`` (``default`` when absent or None)."""
    value = params.get(key)
    if value is None:
        if default is None:
            _require(params, key, rope_type)
        return default
    value = check_real(value, f"scaling[{key!r}]")
    if not value > 0:
        raise ValueError(f"scaling[{key!r}] must be > 0 for rope_type {rope_type!r}, got {value}")
    return value


def _original_max(params: dict, rope_type: str, max_position_embeddings):
    """``L0``: the dict's ``original_max_position_embeddings``, else ``max_position_embeddings``.

    Hugging Face's ``standardize_rope_params`` fills the key from ``max_position_embeddings``
    the same way for yarn/longrope/llama3.
    """
    value = params.get("original_max_position_embeddings")
    if value is None:
        value = max_position_embeddings
    if value is None:
        raise ValueError(f"rope_type {rope_type!r} needs scaling['original_max_position_embeddings'] "
                         "or the max_position_embeddings argument")
    return check_int(value, "original_max_position_embeddings", minimum=1, maximum=MAX_LENGTH)


def _implied_factor(params, rope_type, L0, max_position_embeddings):
    """``factor`` if given, else ``max_position_embeddings / L0`` (yarn, longrope)."""
    if params.get("factor") is not None:
        return _factor(params, "factor", rope_type)
    if max_position_embeddings is None:
        raise ValueError(f"rope_type {rope_type!r} needs scaling['factor'] or the max_position_embeddings "
                         "argument (factor defaults to max_position_embeddings / original_max_position_embeddings)")
    return max_position_embeddings / L0


def _ntk_exponent(dim: int, rope_type: str) -> float:
    if dim <= 2:
        raise ValueError(f"rope_type {rope_type!r} rescales the base by a power d/(d-2); dim must be > 2, got {dim}")
    return _exact.mp().mpf(dim) / (dim - 2)


def _scaled_base(base: float, ratio: float, dim: int, rope_type: str, key: str) -> float:
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


# --------------------------------------------------------------------------- one function per type

def _default(dim, base, params, seq_len, max_pos):
    """:math:`\\omega_i = \\mathrm{base}^{-2i/d}`, attention factor 1."""
    return _exact.omega(dim, base), 1.0


def _linear(dim, base, params, seq_len, max_pos):
    """Position interpolation (kaiokendev; Chen et al. 2023): :math:`\\omega_i / s`."""
    s = _factor(params, "factor", "linear")
    return _exact.omega(dim, base) / s, 1.0


def _ntk(dim, base, params, seq_len, max_pos):
    """Static NTK-aware scaling (bloc97; x-transformers, rotary-embedding-torch
    ``theta_rescale_factor``): :math:`\\mathrm{base}' = \\mathrm{base}\\,\\alpha^{d/(d-2)}`."""
    alpha = _factor(params, "alpha", "ntk")
    return _exact.omega(dim, _scaled_base(base, alpha, dim, "ntk", "scaling['alpha']")), 1.0


def _dynamic(dim, base, params, seq_len, max_pos):
    """Dynamic NTK (emozilla): with :math:`L = \\max(\\text{seq\\_len}, L_{max})`,
    :math:`\\mathrm{base}' = \\mathrm{base}\\,(sL/L_{max} - (s-1))^{d/(d-2)}`."""
    s = _factor(params, "factor", "dynamic")
    if max_pos is None:
        raise ValueError("rope_type 'dynamic' needs the max_position_embeddings argument")
    L = max_pos if seq_len is None else max(seq_len, max_pos)
    s = _exact.mp().mpf(s)
    new_base = base * (s * L / max_pos - (s - 1)) ** _ntk_exponent(dim, "dynamic")
    return _exact.omega(dim, new_base), 1.0


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


def _mscale(scale, mscale=1.0):
    ctx = _exact.mp()
    return ctx.mpf(1) if scale <= 1.0 else ctx.mpf("0.1") * mscale * ctx.log(scale) + 1


def yarn_correction_dim(num_rotations: float, dim: int, base: float, original_max_position_embeddings: int) -> float:
    r"""The (fractional) dimension index whose wavelength fits ``num_rotations`` times in :math:`L_0`:

    .. math:: c(r) = \frac{d \,\ln\!\big(L_0 / (2\pi r)\big)}{2 \ln \mathrm{base}}

    (YaRN "find_correction_dim"). For d=64, base 1.5e5, :math:`L_0` = 4096:
    :math:`c(32) = 8.0928`, :math:`c(1) = 17.3980`. ``dim`` even >= 2, ``base > 0`` and not 1,
    :math:`L_0 \ge 1`, ``num_rotations > 0``.
    """
    r = check_real(num_rotations, "num_rotations", positive=True)
    dim, base = _check_dim_base(dim, base)
    L0 = check_int(original_max_position_embeddings, "original_max_position_embeddings", minimum=1, maximum=MAX_LENGTH)
    return float(_correction_dim(r, dim, base, L0))


def _correction_dim(r, dim, base, L0):
    ctx = _exact.mp()
    return dim * ctx.log(L0 / (2 * ctx.pi * r)) / (2 * ctx.log(base))


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
    dim, base = _check_dim_base(dim, base)
    L0 = check_int(original_max_position_embeddings, "original_max_position_embeddings", minimum=1, maximum=MAX_LENGTH)
    beta_fast, beta_slow = _check_betas(beta_fast, beta_slow, "beta_fast", "beta_slow")
    truncate = check_bool(truncate, "truncate")
    low, high = _correction_range(dim, base, L0, beta_fast, beta_slow, truncate)
    return (low, high) if truncate else (float(low), float(high))


def _check_betas(beta_fast, beta_slow, fast_name: str, slow_name: str) -> tuple[float, float]:
    beta_fast = check_real(beta_fast, fast_name, positive=True)
    beta_slow = check_real(beta_slow, slow_name, positive=True)
    if beta_fast < beta_slow:
        raise ValueError(f"{fast_name} ({beta_fast}) must be >= {slow_name} ({beta_slow}): the YaRN ramp runs from "
                         "the fast to the slow rotation count, and swapping them inverts it")
    return beta_fast, beta_slow


def _correction_range(dim, base, L0, beta_fast, beta_slow, truncate):
    """:func:`yarn_correction_range` in extended precision (ints when truncated), arguments checked."""
    ctx = _exact.mp()
    low = _correction_dim(beta_fast, dim, base, L0)
    high = _correction_dim(beta_slow, dim, base, L0)
    if truncate:
        low, high = int(ctx.floor(low)), int(ctx.ceil(high))
    return max(low, 0), min(high, dim - 1)


def _yarn(dim, base, params, seq_len, max_pos):
    """YaRN "NTK-by-parts" (Peng et al. 2023), Hugging Face 5.x semantics; see :func:`inv_freq`."""
    L0 = _original_max(params, "yarn", max_pos)
    s = _implied_factor(params, "yarn", L0, max_pos)
    beta_fast, beta_slow = _check_betas(_factor(params, "beta_fast", "yarn", default=32.0),
                                        _factor(params, "beta_slow", "yarn", default=1.0),
                                        "scaling['beta_fast']", "scaling['beta_slow']")
    truncate = check_bool(params.get("truncate", True), "scaling['truncate']")
    attention_factor = params.get("attention_factor")
    if attention_factor is not None:
        attention_factor = _factor(params, "attention_factor", "yarn")
    else:
        mscale, mscale_all_dim = (
            0.0 if params.get(k) is None else check_real(params[k], f"scaling[{k!r}]", nonnegative=True)
            for k in ("mscale", "mscale_all_dim"))
        if mscale and mscale_all_dim:  # HF tests truthiness: a 0 counts as absent
            attention_factor = _mscale(s, mscale) / _mscale(s, mscale_all_dim)
        else:
            attention_factor = _mscale(s)
    low, high = _correction_range(dim, base, L0, beta_fast, beta_slow, truncate)
    if low == high:
        high += _exact.mp().mpf("0.001")  # HF: prevent a zero-width ramp
    ramp = np.clip((np.arange(dim // 2) - low) / _exact.mp().mpf(high - low), 0, 1)
    extrapolation = 1 - ramp  # 1: keep the original frequency (high freqs), 0: interpolate by 1/s
    inv = _exact.omega(dim, base)
    return (inv / s) * (1.0 - extrapolation) + inv * extrapolation, float(attention_factor)


def _longrope(dim, base, params, seq_len, max_pos):
    """LongRoPE (Ding et al. 2024; Phi-3): per-frequency rescale factors chosen by length."""
    L0 = _original_max(params, "longrope", max_pos)
    s = _implied_factor(params, "longrope", L0, max_pos)
    ext = {}
    for key in ("short_factor", "long_factor"):
        arr = as_float_array(_require(params, key, "longrope"), f"scaling[{key!r}]")
        if arr.shape != (dim // 2,):
            raise ValueError(f"scaling[{key!r}] must have length dim // 2 = {dim // 2}, got shape {arr.shape}")
        if not (np.all(np.isfinite(arr)) and np.all(arr > 0)):
            raise ValueError(f"scaling[{key!r}] must hold finite values > 0, got {arr.tolist()}")
        ext[key] = arr.astype(np.float64)
    attention_factor = params.get("attention_factor")
    if attention_factor is not None:
        attention_factor = _factor(params, "attention_factor", "longrope")
    elif s <= 1.0:
        attention_factor = 1.0
    else:
        if L0 < 2:
            raise ValueError("rope_type 'longrope' derives attention_factor = sqrt(1 + ln(factor) / ln(L0)), undefined "
                             f"for original_max_position_embeddings L0 = {L0}; give L0 >= 2 or "
                             "scaling['attention_factor']")
        ctx = _exact.mp()
        attention_factor = ctx.sqrt(1 + ctx.log(s) / ctx.log(L0))
    # exactly L0 uses the short factors (HF: "seq_len > original_max_position_embeddings")
    factors = ext["long_factor"] if seq_len is not None and seq_len > L0 else ext["short_factor"]
    return _exact.omega(dim, base) / factors, float(attention_factor)


def llama3_bands(dim: int, base: float, scaling: dict) -> np.ndarray:
    r"""Which LLaMA-3.1 band each frequency falls in: 0 kept, 1 blended, 2 divided by ``factor``.

    With wavelength :math:`\lambda_i = 2\pi/\omega_i`: kept if :math:`\lambda_i < L_0/h`,
    divided if :math:`\lambda_i > L_0/l`, blended otherwise (boundaries blend, as in HF).
    LLaMA-3.1 (d=128, base 5e5, :math:`L_0` 8192, l=1, h=4): 29 kept, 6 blended, 29 divided.
    """
    rope_type, params = _normalise(scaling)
    dim, base = _resolve_dim_base(dim, base, params, rope_type)
    check_alloc((dim // 2,), np.float64, "bands (dim // 2,)")
    low, high, L0 = _llama3_params(params, None)
    wavelen = 2.0 * math.pi / sinusoidal_frequencies(dim, base=base)
    return np.where(wavelen < L0 / high, 0, np.where(wavelen > L0 / low, 2, 1)).astype(np.int64)


def _llama3_params(params, max_pos):
    low = _factor(params, "low_freq_factor", "llama3")
    high = _factor(params, "high_freq_factor", "llama3")
    if not high > low:
        raise ValueError(f"llama3 needs high_freq_factor > low_freq_factor, got {high} <= {low}")
    return low, high, _original_max(params, "llama3", max_pos)


def _llama3(dim, base, params, seq_len, max_pos):
    """LLaMA-3.1 band-wise interpolation (Meta ``apply_scaling``); see :func:`llama3_bands`."""
    s = _factor(params, "factor", "llama3")
    low, high, L0 = _llama3_params(params, max_pos)
    inv = _exact.omega(dim, base)
    wavelen = 2 * _exact.mp().pi / inv
    smooth = (L0 / wavelen - low) / (high - low)
    blended = (1.0 - smooth) * inv / s + smooth * inv
    out = np.where(wavelen > L0 / low, inv / s, np.where(wavelen < L0 / high, inv, blended))
    return out, 1.0


def _proportional(dim, base, params, seq_len, max_pos):
    """HF 5.x "proportional": the first ``int(p*head_dim // 2)`` of ``base^(-2i/head_dim)``, then zeros;
    everything divided by ``factor`` (default 1). Here ``dim`` is the head dim."""
    p = params.get("partial_rotary_factor", 1.0)
    p = check_real(1.0 if p is None else p, "scaling['partial_rotary_factor']", nonnegative=True)
    if p > 1.0:
        raise ValueError(f"scaling['partial_rotary_factor'] must lie in [0, 1], got {p}")
    s = _factor(params, "factor", "proportional", default=1.0)
    rotated = int(p * dim // 2)
    out = np.where(np.arange(dim // 2) < rotated, _exact.omega(dim, base), 0)
    return out / s, 1.0


_SCALINGS = {
    "default": _default, "mrope": _default, "linear": _linear, "ntk": _ntk, "dynamic": _dynamic,
    "yarn": _yarn, "longrope": _longrope, "llama3": _llama3, "proportional": _proportional,
}


# --------------------------------------------------------------------------- public entry point

def _check_dim_base(dim, base):
    dim = check_int(dim, "dim", minimum=2)
    if dim % 2:
        raise ValueError(f"dim (the rotary dim) must be even, got {dim}")
    base = check_real(base, "base", positive=True)
    if base == 1.0:
        raise ValueError("base must differ from 1 (every frequency would be 1)")
    return dim, base


def _normalise(scaling) -> tuple[str, dict]:
    """``(rope_type, params)`` from a HF dict (``rope_type`` or legacy ``type``), checking keys."""
    if scaling is None:
        return "default", {}
    if not isinstance(scaling, dict):
        raise TypeError(f"scaling must be a dict (a Hugging Face rope_parameters / rope_scaling) or None, "
                        f"got {type(scaling).__name__}")
    new, old = scaling.get("rope_type"), scaling.get("type")
    for key, value in (("rope_type", new), ("type", old)):
        if value is not None and not isinstance(value, str):
            raise TypeError(f"scaling[{key!r}] must be a string, one of {list(ROPE_TYPES)}; got {value!r}")
    if new is not None and old is not None and new != old:
        raise ValueError(f"scaling has rope_type={new!r} and type={old!r}; they must agree")
    rope_type = new if new is not None else (old if old is not None else "default")
    if rope_type not in _SCALINGS:
        raise ValueError(f"unknown rope_type {rope_type!r}; expected one of {list(ROPE_TYPES)}")
    unknown = set(scaling) - _COMMON_KEYS - _TYPE_KEYS[rope_type]
    if unknown:
        raise ValueError(f"scaling has keys {sorted(unknown)} that rope_type {rope_type!r} does not use; "
                         f"allowed: {sorted(_COMMON_KEYS | _TYPE_KEYS[rope_type])}")
    return rope_type, dict(scaling)


def _resolve_dim_base(dim, base, params: dict, rope_type: str) -> tuple[int, float]:
    """The rotary dim and base after the dict's ``rope_theta`` and ``partial_rotary_factor``."""
    theta = params.get("rope_theta")
    if theta is not None:
        theta = check_real(theta, "scaling['rope_theta']", positive=True)
        if base is not DEFAULT_BASE and float(base) != theta:
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
    dim, base = _check_dim_base(dim, float(base))
    return dim, base


def inv_freq(dim: int, *, base: float = DEFAULT_BASE, scaling: dict | None = None, seq_len: int | None = None,
             max_position_embeddings: int | None = None) -> tuple[np.ndarray, float]:
    r"""RoPE inverse frequencies and attention factor, for any Hugging Face ``rope_type``.

    Unscaled: :math:`\omega_i = \mathrm{base}^{-2i/d}`, :math:`i = 0 \dots d/2 - 1`
    (Su et al. 2021, "RoFormer", eq. 15). ``scaling`` is a Hugging Face ``rope_parameters``
    (5.x) or ``rope_scaling`` (4.x) dict, accepted verbatim; its ``rope_type`` (or legacy
    ``type``) selects:

    ``default`` / ``mrope``
        :math:`\omega_i`; attention factor 1.
    ``linear`` (``factor`` s)
        :math:`\omega_i / s`.
    ``ntk`` (``alpha``; static NTK-aware, *not a Hugging Face type*)
        base :math:`\to \mathrm{base}\,\alpha^{d/(d-2)}`.
    ``dynamic`` (``factor``; needs ``max_position_embeddings`` :math:`L_{max}`)
        with :math:`L = \max(\text{seq\_len}, L_{max})`:
        base :math:`\to \mathrm{base}\,(sL/L_{max} - (s-1))^{d/(d-2)}`.
    ``yarn`` (``factor``, ``original_max_position_embeddings`` :math:`L_0`, optional ...)
        optional keys ``beta_fast``\=32, ``beta_slow``\=1, ``truncate``\=True, ``mscale``,
        ``mscale_all_dim``, ``attention_factor``; ramp bounds from :func:`yarn_correction_range`; if equal, ``high += 0.001``;
        :math:`r_j = \mathrm{clip}((j - low)/(high - low), 0, 1)`;
        :math:`\omega'_j = (\omega_j/s)\,r_j + \omega_j\,(1 - r_j)`. Attention factor: the explicit
        value, else :math:`g(s, m)/g(s, m_{all})` when both mscales are non-zero, else
        :math:`g(s)` (:func:`yarn_get_mscale`). ``factor`` defaults to :math:`L_{max}/L_0`.
    ``longrope`` (``short_factor``, ``long_factor``, :math:`L_0`, optional ``factor``, ``attention_factor``)
        :math:`\omega_i / e_i` with :math:`e` = ``long_factor`` if ``seq_len > L0`` else
        ``short_factor`` (exactly :math:`L_0`, and ``seq_len=None``, use short); attention factor
        :math:`\sqrt{1 + \ln s / \ln L_0}` for :math:`s > 1`, with :math:`s = L_{max}/L_0` when
        ``factor`` is absent.
    ``llama3`` (``factor``, ``low_freq_factor`` l, ``high_freq_factor`` h, :math:`L_0`)
        see :func:`llama3_bands`; blended band:
        :math:`\omega' = (1-\sigma)\,\omega/s + \sigma\,\omega`,
        :math:`\sigma = (L_0/\lambda - l)/(h - l)`.
    ``proportional`` (``partial_rotary_factor`` p, optional ``factor``\=1; ``dim`` is the *head* dim)
        :math:`\mathrm{base}^{-2i/d}/s` for :math:`i < \lfloor p d / 2 \rfloor`, zeros after
        (the zero pairs are not rotated; use the ``half`` layout over the whole head).

    ``dim`` is the rotary dim, except when the dict carries ``partial_rotary_factor`` p (as
    Hugging Face 5.x dicts do, e.g. GPT-NeoX's ``rotary_pct``): then ``dim`` is the head dim
    and, as in Hugging Face, the rotary dim is ``int(dim * p)`` for every type but
    ``proportional`` (which keeps ``dim // 2`` frequencies and zeroes the tail).

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
    rope_type, params = _normalise(scaling)
    dim, base = _resolve_dim_base(dim, base, params, rope_type)
    check_alloc((dim // 2,), np.float64, "inv_freq (dim // 2,)")
    if seq_len is not None:
        seq_len = check_int(seq_len, "seq_len", minimum=1, maximum=MAX_LENGTH)
    if max_position_embeddings is not None:
        max_position_embeddings = check_int(max_position_embeddings, "max_position_embeddings", minimum=1,
                                            maximum=MAX_LENGTH)
    inv, attention_factor = _SCALINGS[rope_type](dim, base, params, seq_len, max_position_embeddings)
    attention_factor = float(attention_factor)
    if not math.isfinite(attention_factor):
        raise ValueError(f"scaling {rope_type!r} gives an attention factor that overflows float64 (check its mscale "
                         "and factor values)")
    return _exact.frequency_array(inv), attention_factor
