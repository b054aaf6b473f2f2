r"""Precision lab: bit-faithful NumPy emulations of the RoPE pipelines people run, and measurements
of their error against the exact tables.

Every recipe turns positions into per-pair tables :math:`f\cos(p\,\omega_i)`, :math:`f\sin(p\,\omega_i)`
(returned as arrays holding the emulated values: float64, float32, float16, or bfloat16 values
stored in float32) and rotates vectors in its own arithmetic. The reference is
:mod:`posenc_np._exact` (double-double tables, within :math:`2^{-67}` of the exact values).

Recipes (:data:`RECIPES`; ``D`` is the model dtype of a report):

``exact-float64``
    this library's default float64 tables (within one ulp at any position).
``float64-direct``
    the ordinary float64 implementation: float64 frequencies, :math:`p\,\omega` rounded to
    float64, libm cos/sin (``rope.cos_sin(..., method="direct")``; this library before the
    exact tables, transformers run in float64).
``exact-float32``, ``exact-bfloat16``, ``exact-float16``
    the exact values rounded once to the dtype (``rope.cos_sin(..., dtype=...)``); rotation in
    that dtype.
``exact-float32>D``
    exact float32 tables, rotation in float32, result stored in ``D`` (bfloat16/float16 models):
    the recommended recipe for reduced-precision pipelines.
``float32-split``
    ``rope.cos_sin(..., method="float32-split")``: float32 arithmetic only.
``hf-float32``
    Hugging Face ``LlamaRotaryEmbedding`` (:func:`hf_inv_freq`, :func:`hf_cos_sin`): float32
    ``inv_freq`` from float32 ``arange``, ``base ** (arange / dim)`` and ``1 / x``; positions
    ``.float()``; float32 product (the matmul has one term); float32 cos/sin; times the
    attention factor in float32; tables cast to ``D`` and the rotation done in ``D``.
``meta-complex64``
    Meta's ``precompute_freqs_cis`` (:func:`meta_freqs_cis`): the same float32 angles as a
    complex64 table (``torch.polar``); ``apply_rotary_emb`` rotates in float32 and casts to ``D``.
``llama.cpp``
    ggml's ``rope_cache_init`` (:func:`llama_cpp_cos_sin`): ``theta = (float) p``, then
    ``theta *= theta_scale`` per pair with ``theta_scale = powf(base, -2.0f/n_dims)``; float32
    rotation, result cast to ``D``.
``hf-inv_freq-D``
    ``hf-float32`` after the model cast its ``inv_freq`` buffer to ``D`` (``model.to(D)``).
``hf-positions-D``
    ``hf-float32`` with the positions stored in ``D``.
``angles-D``
    everything in ``D``: ``inv_freq``, positions, product and cos/sin (GPT-NeoX's cache before
    its fix).

What "bit-faithful" covers: every rounding of the angle pipeline (dtype conversions, products,
sums, the recurrence) is reproduced exactly in IEEE arithmetic, and bfloat16 is rounded
exactly (:func:`to_bfloat16`, round-to-nearest-even on the float32 bit pattern). What can
differ by one ulp: the transcendental functions. Here float32 ``pow``/``cos``/``sin`` are
correctly rounded (evaluated in float64 and rounded once); torch on CPU uses SLEEF's 1-ulp
vectorised functions and CUDA its own, NumPy's float32 cos/sin differ again. The measured
errors of the broken recipes are many ulps of the angle, so this does not change any
figure in ``docs/precision.md`` beyond the last digit. Meta's complex product may use FMA in
torch's vectorised complex kernel; here it is two products and one sum per component.

The report (:func:`report`, ``posenc-np precision``) is in :mod:`posenc_np.precision_report`.
``import posenc_np.precision`` imports neither mpmath nor Numba.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np

from . import _exact
from numpy.typing import ArrayLike

from ._checks import as_float_array, as_int_array, as_positions, check_alloc, check_choice, check_even, check_int, check_real, require
from .rope_scaling import Scaling, parse_scaling

__all__ = [
    "DTYPES",
    "RECIPES",
    "Recipe",
    "apply_error",
    "describe",
    "entry_error",
    "exact_tables",
    "hf_cos_sin",
    "hf_inv_freq",
    "invariance_breakage",
    "llama_cpp_cos_sin",
    "logit_error",
    "meta_freqs_cis",
    "read_hf_config",
    "recipe_names",
    "recipe_tables",
    "rotate",
    "rotate_as",
    "rotate_exact",
    "round_to",
    "stored",
    "table_error",
    "to_bfloat16",
]

#: Model dtypes the recipes understand.
DTYPES = ("float64", "float32", "bfloat16", "float16")
_F32 = np.float32
_F32_MAX, _F32_TINY = float(np.finfo(np.float32).max), float(np.finfo(np.float32).tiny)


# --------------------------------------------------------------------------- dtype emulation

def to_bfloat16(x: ArrayLike) -> np.ndarray:
    """Round to bfloat16; the values are returned in a float32 array.

    float32 input: round-to-nearest-even on the bit pattern (add ``0x7FFF`` plus the lowest kept
    bit, clear the low 16 bits), exactly as ``torch``'s ``c10::BFloat16``; NaN stays NaN, values
    past the largest bfloat16 become infinities. float64 input is rounded directly (correctly
    rounded; torch goes through float32 first, which differs only when that first rounding lands
    on a bfloat16 tie). Integers are converted to float64; complex, boolean and other values are a
    ``TypeError``.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.precision import to_bfloat16
    >>> to_bfloat16([257.0, 1 / 3]).tolist()        # 8 significant bits: 257 ties to even 256
    [256.0, 0.333984375]
    >>> to_bfloat16(np.float32([259.0])).tolist(), to_bfloat16([1.0]).dtype
    ([260.0], dtype('float32'))
    """
    x = as_float_array(x, "x")
    if x.dtype == np.float32:
        bits = x.view(np.uint32)
        rounded = (bits + (np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))) & np.uint32(0xFFFF0000)
        return np.where(np.isnan(x), x, rounded.view(np.float32))
    x = x.astype(np.float64)
    mant, expo = np.frexp(x)
    out = np.ldexp(np.rint(np.ldexp(mant, 8)), expo - 8)  # 8 significant bits, ties to even
    out = np.where(np.abs(out) > 3.3895313892515355e38, np.copysign(np.inf, x), out)
    return np.where(np.isfinite(x), out, x).astype(np.float32)


def round_to(x: ArrayLike, dtype: str) -> np.ndarray:
    """``x`` (real numbers) rounded once to ``dtype`` (one of :data:`DTYPES`); bfloat16 values come back in float32.

    Examples
    --------
    >>> from posenc_np.precision import round_to
    >>> round_to([257.0, 2049.0], "float16").tolist()   # 11 bits hold 257; 2049 ties to even 2048
    [257.0, 2048.0]
    >>> round_to([257.0], "bfloat16").tolist()
    [256.0]
    """
    dtype = check_choice(dtype, "dtype", DTYPES)
    if dtype == "bfloat16":
        return to_bfloat16(x)
    with np.errstate(over="ignore"):  # float16 overflows to inf, as a cast would
        return as_float_array(x, "x").astype(dtype)


def _arith(dtype: str):
    """Storage dtype and per-operation rounding for arithmetic in ``dtype`` (bfloat16: float32 ops, each
    result rounded to bfloat16, as torch does on CPU)."""
    if dtype == "bfloat16":
        return np.float32, to_bfloat16
    return np.dtype(dtype), (lambda v: v)


def rotate(a: ArrayLike, b: ArrayLike, c: ArrayLike, s: ArrayLike, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    r"""The pair rotation :math:`(a c - b s,\ a s + b c)` with every product and sum rounded to ``dtype``.

    This is Hugging Face's ``q * cos + rotate_half(q) * sin`` and Meta's complex product, one
    rounding per operation. Inputs must already hold values of ``dtype``; a value or result
    past the dtype's range is ``inf`` there (then ``nan`` where infinities cancel), as in that dtype.

    Examples
    --------
    >>> from posenc_np.precision import rotate
    >>> a, b = rotate([1.0], [2.0], [0.0], [1.0], "float64")     # (a c - b s, a s + b c) with c = 0, s = 1
    >>> a.tolist(), b.tolist()
    ([-2.0], [1.0])
    >>> [v.tolist() for v in rotate([256.0], [1.0], [1.0], [0.0], "bfloat16")]  # the identity, in bfloat16 values
    [[256.0], [1.0]]
    """
    store, r = _arith(check_choice(dtype, "dtype", DTYPES))
    with np.errstate(over="ignore", invalid="ignore"):  # past the dtype's range is inf there, as in that dtype
        a, b, c, s = (as_float_array(v, name).astype(store) for v, name in ((a, "a"), (b, "b"), (c, "c"), (s, "s")))
        return r(r(a * c) - r(b * s)), r(r(a * s) + r(b * c))


def _cos_sin_of(angles: np.ndarray, dtype: str):
    """Correctly rounded cos/sin of angles held in ``dtype`` (evaluated in float64, rounded once)."""
    a = angles.astype(np.float64)
    with np.errstate(invalid="ignore"):  # an overflowed angle gives NaN, as it would in the emulated pipeline
        return round_to(np.cos(a), dtype), round_to(np.sin(a), dtype)


def _pow32(base, exponent) -> np.ndarray:
    """float32 ``base ** exponent`` (torch ``pow`` with a float32 result), correctly rounded."""
    return (np.float64(_F32(base)) ** np.asarray(exponent, dtype=_F32).astype(np.float64)).astype(_F32)


# --------------------------------------------------------------------------- setup

def _check_setup(setup) -> Scaling:
    """``setup`` itself, after checking it is a :class:`~posenc_np.rope_scaling.Scaling`."""
    require(isinstance(setup, Scaling), "setup must be a posenc_np.rope_scaling.Scaling (from read_hf_config or "
            f"rope_scaling.parse_scaling), got {type(setup).__name__}", TypeError)
    return setup


def describe(setup: Scaling) -> dict:
    """A JSON-able summary of a configuration (what a report records).

    Examples
    --------
    >>> from posenc_np.precision import describe
    >>> from posenc_np.rope_scaling import parse_scaling
    >>> summary = describe(parse_scaling(8, scaling={"rope_type": "linear", "factor": 2.0}))
    >>> summary["rope_type"], summary["rotary_dim"], summary["base"], summary["attention_factor"]
    ('linear', 8, 10000.0, 1.0)
    """
    setup = _check_setup(setup)
    return {"head_dim": setup.head_dim, "rotary_dim": setup.rotary_dim, "base": setup.base,
            "rope_type": setup.rope_type, "scaling": setup.scaling,
            "max_position_embeddings": setup.max_position_embeddings, "seq_len": setup.seq_len,
            "attention_factor": setup.exact_frequencies()[1]}


def read_hf_config(source: str | os.PathLike | dict, *, seq_len: int | None = None,
                   layer_type: str | None = None) -> Scaling:
    """The RoPE configuration (a :class:`~posenc_np.rope_scaling.Scaling` taken at ``seq_len``) of a
    Hugging Face ``config.json`` (a path or an already parsed dict).

    The file is read by :func:`posenc_np.hf_config.read_hf_config`, the library's one reader of
    Hugging Face configurations (every spelling of the RoPE keys transformers 5.x accepts; a
    missing, unreadable, oversized or contradictory file is a ``ValueError`` naming the
    problem). A model with one rope dict per layer type (Gemma 3) has one configuration per
    ``layer_type``; the first is taken unless one is named. A model without RoPE (ALiBi, T5,
    DeBERTa) is a ``ValueError``.

    Examples
    --------
    >>> from posenc_np.precision import read_hf_config
    >>> config = {"model_type": "llama", "head_dim": 64, "rope_theta": 500000.0, "max_position_embeddings": 8192}
    >>> setup = read_hf_config(config, seq_len=100)
    >>> setup.rope_type, setup.rotary_dim, setup.base, setup.max_position_embeddings, setup.seq_len
    ('default', 64, 500000.0, 8192, 100)
    """
    from .hf_config import read_hf_config as read

    config = read(source)
    require(config.family == "rope", f"{config.source}: model_type {config.model_type!r} uses {config.family} "
            "positions, not RoPE (no 'rope_theta')")
    layers = {r.layer_type: r for r in config.rope}
    require(layer_type is None or layer_type in layers,
            f"layer_type {layer_type!r} is not one of the config's {sorted(map(str, layers))}")
    r = layers[layer_type] if layer_type is not None else config.rope[0]
    return parse_scaling(r.head_dim, base=r.base, scaling=r.scaling, max_position_embeddings=r.max_position_embeddings,
                         seq_len=seq_len)


# --------------------------------------------------------------------------- emulations

def _hf_plain(dim: int, base: float) -> np.ndarray:
    """HF's float32 ``1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))``."""
    return _F32(1) / _pow32(base, np.arange(0, dim, 2).astype(_F32) / _F32(dim))


def _hf_correction_dim(r, dim, base, L0):  # HF evaluates this in Python floats (math.log)
    return (dim * math.log(L0 / (r * 2 * math.pi))) / (2 * math.log(base))


def hf_inv_freq(setup: Scaling) -> tuple[np.ndarray, bool]:
    """Hugging Face's float32 ``inv_freq`` for ``setup``, operation by operation; and whether it is emulated.

    ``default``/``mrope``, ``linear`` (``inv_freq /= factor``), ``dynamic`` (new base in Python
    floats, then the default formula), ``yarn`` (``1/pos_freqs`` and ``1/(factor*pos_freqs)``
    blended by a float32 ramp), ``longrope`` (``1 / (ext_factors * base**shape)``) and ``llama3``
    (float32 wavelengths, ``torch.where`` bands, smoothed blend) follow transformers' code in
    float32. Other types (``ntk``, ``proportional``) return the exact frequencies rounded to
    float32 and ``False``.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.precision import hf_inv_freq
    >>> from posenc_np.rope_scaling import parse_scaling
    >>> inv, emulated = hf_inv_freq(parse_scaling(8))
    >>> inv.dtype, inv.astype(np.float64).round(6).tolist(), emulated     # float32 1 / 10000**(2i/8)
    (dtype('float32'), [1.0, 0.1, 0.01, 0.001], True)
    >>> float(inv[1])                                        # 0.1 in float32
    0.10000000149011612
    """
    rope_type, dim, base, v = _check_setup(setup).rope_type, setup.rotary_dim, setup.base, setup.values
    max_pos, seq_len = setup.max_position_embeddings, setup.seq_len
    if rope_type in ("default", "mrope"):
        return _hf_plain(dim, base), True
    if rope_type == "linear":
        return _hf_plain(dim, base) / _F32(v["factor"]), True
    if rope_type == "dynamic":
        s = v["factor"]
        L = max_pos if seq_len is None or seq_len <= max_pos else seq_len
        return _hf_plain(dim, base * ((s * L / max_pos) - (s - 1)) ** (dim / (dim - 2))), True
    if rope_type == "yarn":
        L0, s = v["original_max_position_embeddings"], v["factor"]
        fast, slow = v["beta_fast"], v["beta_slow"]
        low, high = _hf_correction_dim(fast, dim, base, L0), _hf_correction_dim(slow, dim, base, L0)
        if v["truncate"]:
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, dim - 1)
        if low == high:
            high += 0.001
        ramp = np.clip((np.arange(dim // 2, dtype=_F32) - _F32(low)) / _F32(high - low), _F32(0), _F32(1))
        extrapolation = _F32(1) - ramp
        pos_freqs = _pow32(base, np.arange(0, dim, 2).astype(_F32) / _F32(dim))
        interpolation = _F32(1) / (_F32(s) * pos_freqs)
        return interpolation * (_F32(1) - extrapolation) + (_F32(1) / pos_freqs) * extrapolation, True
    if rope_type == "longrope":
        L0 = v["original_max_position_embeddings"]
        ext = v["long_factor"] if seq_len is not None and seq_len > L0 else v["short_factor"]
        pos_freqs = _pow32(base, np.arange(0, dim, 2).astype(_F32) / _F32(dim))
        return _F32(1) / (np.asarray(ext, dtype=_F32) * pos_freqs), True
    if rope_type == "llama3":
        s = _F32(v["factor"])
        low, high, L0 = v["low_freq_factor"], v["high_freq_factor"], v["original_max_position_embeddings"]
        inv = _hf_plain(dim, base)
        wavelen = _F32(2 * math.pi) / inv
        low_wl, high_wl = _F32(L0 / low), _F32(L0 / high)
        inv_l = np.where(wavelen > low_wl, inv / s, inv)
        smooth = (_F32(L0) / wavelen - _F32(low)) / _F32(high - low)
        smoothed = (_F32(1) - smooth) * inv_l / s + smooth * inv_l
        medium = ~(wavelen < high_wl) & ~(wavelen > low_wl)
        return np.where(medium, smoothed, inv_l), True
    return np.asarray(setup.frequencies()[0], dtype=np.float64).astype(_F32), False


def hf_cos_sin(positions: ArrayLike, inv_freq: ArrayLike, *, attention_factor: float = 1.0,
               inv_freq_dtype: str = "float32", position_dtype: str = "float32", angle_dtype: str = "float32",
               table_dtype: str = "float32") -> tuple[np.ndarray, np.ndarray]:
    r"""Hugging Face's table pipeline with every dtype named; per-pair ``(cos, sin)`` in ``table_dtype``.

    1. ``inv_freq`` (float32, from :func:`hf_inv_freq`) rounded to ``inv_freq_dtype`` (a model
       cast of the buffer);
    2. positions rounded to ``position_dtype`` (``position_ids.float()`` rounds int64 to float32);
    3. both converted to ``angle_dtype`` and multiplied there (one rounding);
    4. cos/sin in ``angle_dtype`` (correctly rounded), times ``attention_factor`` in that dtype;
    5. the tables rounded to ``table_dtype`` (``cos.to(x.dtype)``).

    The defaults are ``LlamaRotaryEmbedding``; ``angle_dtype="float16"`` with float16
    everywhere is GPT-NeoX's cache before EleutherAI/gpt-neox#1003 was fixed. ``inv_freq`` is 1-D
    in ``[0, float32 max]`` (zero: an unrotated pair), ``attention_factor`` positive within
    float32, ``|positions| < 2**53``; an angle that overflows the emulated dtype gives NaN
    entries, as the emulated pipeline does.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.precision import hf_cos_sin
    >>> inv = np.float32([1.0, 0.1])
    >>> cos, sin = hf_cos_sin([0, 1], inv)
    >>> cos.dtype, cos.astype(np.float64).round(6).tolist()      # per pair: cos(p w)
    (dtype('float32'), [[1.0, 1.0], [0.540302, 0.995004]])
    >>> bool(np.array_equal(hf_cos_sin([2049], inv, position_dtype="float16")[0], hf_cos_sin([2048], inv)[0]))
    True
    """
    w = as_float_array(inv_freq, "inv_freq").astype(np.float64)
    require(w.ndim == 1 and bool(np.all((w >= 0) & (w <= _F32_MAX))), "inv_freq must be a 1-D array of values in "
            f"[0, {_F32_MAX:.6g}] (zero: a pair left unrotated), got shape {w.shape}")
    require(check_real(attention_factor, "attention_factor", positive=True) <= _F32_MAX,
            f"attention_factor must be at most float32's largest value {_F32_MAX:.6g}, got {attention_factor}")
    pos = as_positions(positions)
    require(float(np.max(np.abs(pos), initial=0)) < 2.0**53, "positions must satisfy |p| < 2**53")
    check_alloc(pos.shape + w.shape, np.float64, "tables positions.shape + inv_freq.shape")
    store, r = _arith(angle_dtype)
    w = round_to(round_to(w.astype(_F32), inv_freq_dtype), angle_dtype).astype(store)
    with np.errstate(over="ignore"):  # float16 positions and angles overflow to inf, as in the emulated pipeline
        p = round_to(round_to(pos, position_dtype), angle_dtype).astype(store)
        angles = r(p[..., None] * w)
    c, s = _cos_sin_of(angles, angle_dtype)
    if attention_factor != 1.0:
        f = round_to(np.float64(attention_factor), angle_dtype).astype(store)
        c, s = r(c * f), r(s * f)
    return round_to(c, table_dtype), round_to(s, table_dtype)


def meta_freqs_cis(positions: ArrayLike, inv_freq: ArrayLike) -> np.ndarray:
    """Meta's ``precompute_freqs_cis``: ``torch.polar(ones, outer(t, freqs))`` as complex64.

    ``freqs`` is float32 (:func:`hf_inv_freq`, the same formula), ``t`` an int64 ``arange``
    promoted to float32 by the outer product: the angles equal :func:`hf_cos_sin`'s.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.precision import hf_cos_sin, meta_freqs_cis
    >>> z = meta_freqs_cis([0, 1], np.float32([1.0, 0.1]))
    >>> z.dtype, z[0].tolist()                               # position 0: e^(i 0) = 1
    (dtype('complex64'), [(1+0j), (1+0j)])
    >>> bool(np.array_equal(z.imag, hf_cos_sin([0, 1], np.float32([1.0, 0.1]))[1]))   # the same float32 angles
    True
    """
    c, s = hf_cos_sin(positions, inv_freq)
    return (c + 1j * s).astype(np.complex64)


def llama_cpp_cos_sin(positions: ArrayLike, dim: int, base: float, *, freq_scale: float = 1.0,
                      freq_factors: ArrayLike | None = None,
                      attention_factor: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    r"""ggml's float32 rope cache (llama.cpp ``rope_cache_init``, no YaRN ramp).

    ``theta_scale = powf(base, -2.0f/dim)``; per position ``theta = (float) p`` and, pair after
    pair, ``cache = cosf(freq_scale * (theta / ff_i)) * mscale`` then ``theta *= theta_scale``.
    The angle of pair ``i`` carries ``i`` roundings of the recurrence on top of the float32
    position. ``freq_factors`` (``rope_freqs``: LongRoPE factors, LLaMA-3.1 factors) default to 1.
    ``dim`` even; ``base``, ``freq_scale``, ``attention_factor`` and the factors finite, ``> 0`` and
    within float32 (``base != 1``). Returns per-pair tables ``positions.shape + (dim // 2,)``, float32.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.precision import llama_cpp_cos_sin
    >>> cos, sin = llama_cpp_cos_sin([0, 1], 8, 10000.0)     # theta_scale = 10000**(-2/8)
    >>> cos.dtype, cos.shape, cos[0].tolist()
    (dtype('float32'), (2, 4), [1.0, 1.0, 1.0, 1.0])
    >>> sin[1].astype(np.float64).round(6).tolist()          # sin(1), sin(0.1), sin(0.01), sin(0.001)
    [0.841471, 0.099833, 0.01, 0.001]
    """
    dim = check_even(dim, "dim")
    for name, value in (("base", base), ("freq_scale", freq_scale), ("attention_factor", attention_factor)):
        require(check_real(value, name, positive=True) <= _F32_MAX, f"{name} must be at most float32's largest "
                f"value {_F32_MAX:.6g}, got {value}")
    require(base != 1.0 and base >= _F32_TINY, f"base must differ from 1 and be a normal float32 (>= {_F32_TINY:.6g}), "
            f"got {base}")
    pos = as_positions(positions)
    require(float(np.max(np.abs(pos), initial=0)) < 2.0**53, "positions must satisfy |p| < 2**53")
    check_alloc(pos.shape + (dim // 2,), np.float64, "llama.cpp tables positions.shape + (dim // 2,)")
    theta = pos.astype(_F32)
    ff = np.ones(dim // 2) if freq_factors is None else as_float_array(freq_factors, "freq_factors").astype(np.float64)
    require(ff.shape == (dim // 2,) and bool(np.all((ff >= _F32_TINY) & (ff <= _F32_MAX))), "freq_factors must hold "
            f"dim // 2 = {dim // 2} values within float32's normal range, got shape {ff.shape}")
    ff = ff.astype(_F32)
    theta_scale = _pow32(base, _F32(-2.0) / _F32(dim))
    angles = np.empty(theta.shape + (dim // 2,), dtype=_F32)
    with np.errstate(over="ignore"):  # refused just below
        for i in range(dim // 2):
            angles[..., i] = _F32(freq_scale) * (theta / ff[i])
            theta = theta * theta_scale
    require(bool(np.all(np.isfinite(angles))), "the float32 angles overflow (positions, base, freq_scale and "
            "freq_factors make |angle| > 3.4e38)")
    c, s = _cos_sin_of(angles, "float32")
    f = _F32(attention_factor)
    return (c * f, s * f) if attention_factor != 1.0 else (c, s)


def _llama_cpp_params(setup: Scaling):
    """``(dim, base, freq_scale, freq_factors)`` for llama.cpp, or None where this module does not emulate it."""
    rope_type, dim, base = setup.rope_type, setup.rotary_dim, setup.base
    if rope_type in ("default", "mrope"):
        return dim, base, 1.0, None
    if rope_type == "linear":
        return dim, base, 1.0 / setup.values["factor"], None
    if rope_type in ("llama3", "longrope"):  # GGUF rope_freqs: the per-pair divisor, stored as float32
        plain = 1.0 / (base ** (np.arange(0, dim, 2) / dim))
        return dim, base, 1.0, plain / np.asarray(setup.frequencies()[0], dtype=np.float64)
    return None


# --------------------------------------------------------------------------- recipes

@dataclass(frozen=True)
class Recipe:
    """A named pipeline: ``tables(setup, positions)`` gives per-pair ``(cos, sin)`` holding the emulated
    values; ``rotation`` is the dtype of the rotation arithmetic and ``output`` the dtype the
    rotated vectors are stored in. ``source`` names the public code it emulates.

    Examples
    --------
    >>> from posenc_np.precision import RECIPES
    >>> from posenc_np.rope_scaling import parse_scaling
    >>> rec = RECIPES["exact-float32>bfloat16"]
    >>> rec.table_dtype, rec.rotation, rec.output
    ('float32', 'float32', 'bfloat16')
    >>> cos, sin = rec.tables(parse_scaling(8), [0, 1])      # per pair
    >>> cos.dtype, cos.shape, cos[0].tolist()
    (dtype('float32'), (2, 4), [1.0, 1.0, 1.0, 1.0])
    """

    name: str
    title: str
    source: str
    table_dtype: str
    rotation: str
    output: str
    tables: object = field(repr=False)


def _exact_recipe(dtype: str, output: str | None = None) -> Recipe:
    """Exact tables rounded once to ``dtype``, rotation in ``dtype``, result stored in ``output``."""
    def tables(setup, positions):
        inv, af = setup.exact_frequencies()
        c, s = _exact.cos_sin(_exact.positions(positions), _exact.turn_constants(inv), amplitude=af)
        return round_to(c, dtype), round_to(s, dtype)

    if output is None:
        return Recipe(f"exact-{dtype}", f"posenc_np exact tables, {dtype}", "posenc_np.rope.cos_sin", dtype, dtype,
                      dtype, tables)
    return Recipe(f"exact-{dtype}>{output}", f"posenc_np exact {dtype} tables and rotation, output {output}",
                  "posenc_np.rope.cos_sin + apply in float32", dtype, dtype, output, tables)


def _library_method(method: str, dtype: str):
    def tables(setup, positions):
        from . import rope

        inv, af = setup.exact_frequencies()
        c, s = rope.cos_sin(positions, inv, attention_factor=af, dtype=dtype, method=method)
        n = inv.rounded.size
        return c[..., :n], s[..., :n]

    return tables


def _hf_recipe(name, title, source, dtype, **dtypes) -> Recipe:
    def tables(setup, positions):
        w, _ = hf_inv_freq(setup)
        return hf_cos_sin(positions, w, attention_factor=setup.frequencies()[1], table_dtype=dtype, **dtypes)

    return Recipe(name, title, source, dtype, dtype, dtype, tables)


def _meta_tables(setup, positions):
    z = meta_freqs_cis(positions, hf_inv_freq(setup)[0])
    af = setup.frequencies()[1]
    if af != 1.0:
        z = z * _F32(af)
    return z.real.astype(_F32), z.imag.astype(_F32)


def _llama_cpp_tables(setup, positions):
    params = _llama_cpp_params(setup)
    if params is None:
        raise ValueError(f"llama.cpp is not emulated here for rope_type {setup.rope_type!r}")
    dim, base, scale, ff = params
    return llama_cpp_cos_sin(positions, dim, base, freq_scale=scale, freq_factors=ff,
                             attention_factor=setup.frequencies()[1])


def _recipes() -> dict:
    out = {r.name: r for r in [
        _exact_recipe("float64"),
        Recipe("float64-direct", "float64 angles p*w, libm cos/sin", "rope.cos_sin(method='direct')",
               "float64", "float64", "float64", _library_method("direct", np.float64)),
        _exact_recipe("float32"),
        Recipe("float32-split", "posenc_np float32-split (float32 arithmetic only)",
               "rope.cos_sin(method='float32-split')", "float32", "float32", "float32",
               _library_method("float32-split", np.float32)),
        _exact_recipe("bfloat16"),
        _exact_recipe("float16"),
    ]}
    for d in ("bfloat16", "float16"):
        out[f"exact-float32>{d}"] = _exact_recipe("float32", d)
    for d in DTYPES:
        out[f"hf-float32>{d}"] = _hf_recipe(f"hf-float32>{d}", f"Hugging Face float32 angles, tables cast to {d}",
                                            "transformers LlamaRotaryEmbedding", d)
    for d in ("bfloat16", "float16"):
        out[f"hf-inv_freq-{d}"] = _hf_recipe(f"hf-inv_freq-{d}", f"Hugging Face with inv_freq cast to {d}",
                                             "transformers#25681, sglang-jax#1472", d, inv_freq_dtype=d)
        out[f"hf-positions-{d}"] = _hf_recipe(f"hf-positions-{d}", f"Hugging Face with positions in {d}",
                                              "candle#3520 (positions)", d, position_dtype=d)
        out[f"angles-{d}"] = _hf_recipe(f"angles-{d}", f"inv_freq, positions, product and cos/sin in {d}",
                                        "gpt-neox#1003, candle#3520", d, inv_freq_dtype=d, position_dtype=d,
                                        angle_dtype=d)
    for d in DTYPES:
        out[f"meta-complex64>{d}"] = Recipe(f"meta-complex64>{d}", f"Meta complex64 freqs_cis, output {d}",
                                            "llama precompute_freqs_cis / apply_rotary_emb", "float32",
                                            "float32", d, _meta_tables)
        out[f"llama.cpp>{d}"] = Recipe(f"llama.cpp>{d}", f"llama.cpp theta *= theta_scale, output {d}",
                                       "ggml rope_cache_init", "float32", "float32", d, _llama_cpp_tables)
    return out


#: Every recipe by name (``>D``: tables or output cast to the model dtype ``D``).
RECIPES = _recipes()


def recipe_names(dtype: str, setup: Scaling | None = None) -> list[str]:
    """The recipes a report for model dtype ``dtype`` compares (llama.cpp only where emulated).

    Examples
    --------
    >>> from posenc_np.precision import recipe_names
    >>> recipe_names("float32")
    ['exact-float64', 'float64-direct', 'exact-float32', 'float32-split', 'hf-float32>float32',
     'meta-complex64>float32', 'llama.cpp>float32']
    >>> recipe_names("bfloat16")[-4:]
    ['exact-float32>bfloat16', 'hf-inv_freq-bfloat16', 'hf-positions-bfloat16', 'angles-bfloat16']
    """
    dtype = check_choice(dtype, "dtype", DTYPES)
    setup = setup if setup is None else _check_setup(setup)
    names = ["exact-float64", "float64-direct", f"exact-{dtype}" if dtype != "float64" else "exact-float32"]
    if dtype == "float32":
        names.append("float32-split")
    names += [f"hf-float32>{dtype}", f"meta-complex64>{dtype}"]
    if setup is None or _llama_cpp_params(setup) is not None:
        names.append(f"llama.cpp>{dtype}")
    if dtype in ("bfloat16", "float16"):
        names += [f"exact-float32>{dtype}", f"hf-inv_freq-{dtype}", f"hf-positions-{dtype}", f"angles-{dtype}"]
    return list(dict.fromkeys(names))


def _recipe(recipe) -> Recipe:
    if isinstance(recipe, Recipe):
        return recipe
    require(recipe in RECIPES, f"unknown recipe {recipe!r}; expected one of {sorted(RECIPES)}")
    return RECIPES[recipe]


def recipe_tables(recipe: str | Recipe, setup: Scaling, positions: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Per-pair ``(cos, sin)`` of ``recipe`` (a name or :class:`Recipe`) at ``positions``, shape ``(..., n)``.

    Examples
    --------
    >>> from posenc_np.precision import recipe_tables
    >>> from posenc_np.rope_scaling import parse_scaling
    >>> cos, sin = recipe_tables("hf-float32>float16", parse_scaling(8), [0, 1])
    >>> cos.dtype, cos.shape, cos[0].tolist(), sin[0].tolist()
    (dtype('float16'), (2, 4), [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0])
    """
    return _recipe(recipe).tables(_check_setup(setup), positions)


# --------------------------------------------------------------------------- measurements

def exact_tables(setup: Scaling, positions: ArrayLike) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The reference: exact ``f cos(p w)``, ``f sin(p w)`` as double-doubles ``(c_hi, c_lo, s_hi, s_lo)``.

    Examples
    --------
    >>> from posenc_np.precision import exact_tables
    >>> from posenc_np.rope_scaling import parse_scaling
    >>> c_hi, c_lo, s_hi, s_lo = exact_tables(parse_scaling(4), [0, 1])   # frequencies 1, 0.01
    >>> c_hi[0].tolist(), c_lo[0].tolist(), s_hi[0].tolist()
    ([1.0, 1.0], [0.0, 0.0], [0.0, 0.0])
    >>> (c_hi[1] + c_lo[1]).round(6).tolist()                 # cos(1), cos(0.01)
    [0.540302, 0.99995]
    """
    inv, af = _check_setup(setup).exact_frequencies()
    return _exact.dd_cos_sin(_exact.positions(positions), _exact.turn_constants(inv), amplitude=af)


def entry_error(values: np.ndarray, hi: np.ndarray, lo: np.ndarray) -> np.ndarray:
    """``|values - (hi + lo)|``; NaN (an overflowed float16 position, say) counts as an infinite error.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.precision import entry_error
    >>> entry_error(np.array([0.5, np.nan]), np.array([0.25, 1.0]), np.zeros(2)).tolist()
    [0.25, inf]
    """
    err = np.abs((values.astype(np.float64) - hi) - lo)
    return np.where(np.isnan(err), np.inf, err)


def table_error(recipe: str | Recipe, setup: Scaling, positions: ArrayLike) -> np.ndarray:
    """Largest ``|table - exact|`` over the pairs and both tables, per position (shape ``positions.shape``).

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.precision import table_error
    >>> from posenc_np.rope_scaling import parse_scaling
    >>> setup = parse_scaling(8)
    >>> bool(np.all(table_error("exact-float64", setup, [0, 1000, 10**6]) <= 2.0**-53))   # within half an ulp of 1
    True
    >>> bool(table_error("angles-float16", setup, [3000])[0] > 1e-3)   # float16 angles: p*w rounded to 11 bits
    True
    """
    c, s = recipe_tables(recipe, setup, positions)  # checks setup
    c_hi, c_lo, s_hi, s_lo = exact_tables(setup, positions)
    return np.maximum(entry_error(c, c_hi, c_lo), entry_error(s, s_hi, s_lo)).max(axis=-1, initial=0.0)


def stored(x: ArrayLike, dtype: str) -> np.ndarray:
    """``x`` as a model holding it in ``dtype`` would (float64 array of those values).

    Examples
    --------
    >>> from posenc_np.precision import stored
    >>> stored([1 / 3, 257.0], "bfloat16").tolist()     # bfloat16 values, in float64
    [0.333984375, 256.0]
    """
    return round_to(x, dtype).astype(np.float64)


def rotate_as(rec: Recipe, held: np.ndarray, c: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Rotate stored vectors ``held`` (pairs ``(i, i + n)``, ``n = c.shape[-1]``) as ``rec`` does; float64 result.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.precision import RECIPES, rotate_as
    >>> held = np.array([[1.0, 2.0]])                   # one pair (0, 1)
    >>> rotate_as(RECIPES["exact-float64"], held, np.array([[0.0]]), np.array([[1.0]])).tolist()   # by 90 degrees
    [[-2.0, 1.0]]
    >>> rotate_as(RECIPES["exact-bfloat16"], np.array([[257.0, 0.0]]), np.array([[1.0]]), np.array([[0.0]])).tolist()
    [[256.0, 0.0]]
    """
    n = c.shape[-1]
    a, b = (round_to(v, rec.rotation) for v in (held[..., :n], held[..., n:2 * n]))  # exact: as wide or wider
    y = np.concatenate(rotate(a, b, c, s, rec.rotation), axis=-1)
    return (y if rec.rotation == rec.output else round_to(y, rec.output)).astype(np.float64)


def rotate_exact(x: np.ndarray, hi_lo: tuple[np.ndarray, ...]) -> np.ndarray:
    """Rotate ``x`` (pairs ``(i, i + n)``) by the double-double tables of :func:`exact_tables`, in float64.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.precision import exact_tables, rotate_exact
    >>> from posenc_np.rope_scaling import parse_scaling
    >>> x = np.array([[1.0, 2.0, 3.0, 4.0]])
    >>> rotate_exact(x, exact_tables(parse_scaling(4), [0])).tolist()    # position 0: the identity
    [[1.0, 2.0, 3.0, 4.0]]
    """
    c_hi, c_lo, s_hi, s_lo = hi_lo
    n = c_hi.shape[-1]
    a, b = x[..., :n], x[..., n:2 * n]
    c, s = c_hi + c_lo, s_hi + s_lo
    return np.concatenate([a * c - b * s, a * s + b * c], axis=-1)


def _vectors(x: ArrayLike, name: str, positions: ArrayLike, setup: Scaling) -> np.ndarray:
    """``x`` as float64 after checking its shape is ``positions.shape + (d,)`` with ``d >= rotary_dim``."""
    x, shape = as_float_array(x, name).astype(np.float64), np.shape(as_positions(positions))
    require(x.ndim == len(shape) + 1 and x.shape[:-1] == shape and x.shape[-1] >= setup.rotary_dim,
            f"{name} must have shape positions.shape + (d,) = {shape} + (d,) with d >= rotary_dim = "
            f"{setup.rotary_dim}, got {x.shape}")
    return x


def apply_error(recipe: str | Recipe, setup: Scaling, x: ArrayLike, positions: ArrayLike) -> np.ndarray:
    """Largest ``|rotated x - exact rotation|`` per position for ``x`` of shape ``positions.shape + (d,)``.

    ``x`` (float64) is first stored in the recipe's output dtype; the exact rotation is of that
    stored ``x``, so the figure is the rotation's error alone.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.precision import apply_error
    >>> from posenc_np.rope_scaling import parse_scaling
    >>> setup, x = parse_scaling(8), np.random.default_rng(0).standard_normal((3, 8))
    >>> apply_error("exact-float64", setup, x, [0, 10, 10**6]).shape
    (3,)
    >>> bool(np.all(apply_error("exact-float64", setup, x, [0, 10, 10**6]) < 1e-15))
    True
    """
    rec, setup = _recipe(recipe), _check_setup(setup)
    c, s = rec.tables(setup, positions)
    held = stored(_vectors(x, "x", positions, setup)[..., :2 * c.shape[-1]], rec.output)
    err = np.abs(rotate_as(rec, held, c, s) - rotate_exact(held, exact_tables(setup, positions)))
    return np.where(np.isnan(err), np.inf, err).max(axis=-1, initial=0.0)


def logit_error(recipe: str | Recipe, setup: Scaling, q: ArrayLike, k: ArrayLike, query_positions: ArrayLike,
                key_positions: ArrayLike) -> np.ndarray:
    r"""``|logit - exact logit|`` with :math:`\mathrm{logit} = \langle R_m q, R_n k\rangle / \sqrt{d_{head}}`,
    for rows ``q[j]`` at ``query_positions[j]`` and ``k[j]`` at ``key_positions[j]`` (shape ``(L,)``).

    Vectors are stored in the recipe's output dtype and rotated in its arithmetic; the dot
    product itself is float64, so the figure is the positional error alone.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.precision import logit_error
    >>> from posenc_np.rope_scaling import parse_scaling
    >>> q, k = np.random.default_rng(0).standard_normal((2, 3, 8))
    >>> err = logit_error("exact-float64", parse_scaling(8), q, k, [1, 10, 10**6], [0, 9, 10**6 - 1])
    >>> err.shape, bool(np.all(err < 1e-14))
    ((3,), True)
    """
    rec, setup = _recipe(recipe), _check_setup(setup)
    out = []
    for vec, name, pos in ((q, "q", query_positions), (k, "k", key_positions)):
        c, s = rec.tables(setup, pos)
        held = stored(_vectors(vec, name, pos, setup)[..., :2 * c.shape[-1]], rec.output)
        out.append((rotate_as(rec, held, c, s), rotate_exact(held, exact_tables(setup, pos))))
    (yq, eq), (yk, ek) = out
    err = np.abs(np.sum(yq * yk, axis=-1) - np.sum(eq * ek, axis=-1)) / math.sqrt(setup.head_dim)
    return np.where(np.isnan(err), np.inf, err)


def invariance_breakage(recipe: str | Recipe, setup: Scaling, shifts: ArrayLike, *, window: int = 32,
                        seed: int = 0) -> np.ndarray:
    r"""Largest change of the logits :math:`\langle R_{m+s} q_m, R_{n+s} k_n\rangle/\sqrt{d}` against their
    exact value (which depends on :math:`m - n` only), for ``m, n < window``, per shift ``s``.

    ``q``, ``k``: standard normal, seeded by ``seed``, one vector per position of the window.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.precision import invariance_breakage
    >>> from posenc_np.rope_scaling import parse_scaling
    >>> err = invariance_breakage("exact-float64", parse_scaling(8), [0, 10**6], window=4)
    >>> err.shape, bool(np.all(err < 1e-14))
    ((2,), True)
    """
    rec, setup = _recipe(recipe), _check_setup(setup)
    window = check_int(window, "window", minimum=1)
    d = setup.rotary_dim
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal((window, d)), rng.standard_normal((window, d))
    base = np.arange(window)
    sq, sk = stored(q, rec.output), stored(k, rec.output)
    ref = exact_tables(setup, base)  # exact logits of the stored vectors, at the unshifted positions
    exact = rotate_exact(sq, ref) @ rotate_exact(sk, ref).T
    out = []
    shifts = as_int_array(shifts if np.size(shifts) else np.zeros(0, np.int64), "shifts").reshape(-1)  # [] is float
    require(bool(np.all(np.abs(shifts) < 2**53 - window)), f"shifts must satisfy |s| < 2**53 - window, got {shifts}")
    for shift in shifts:
        c, s = rec.tables(setup, base + int(shift))
        err = np.abs(rotate_as(rec, sq, c, s) @ rotate_as(rec, sk, c, s).T - exact).max()
        out.append(np.inf if np.isnan(err) else float(err) / math.sqrt(setup.head_dim))
    return np.array(out)
