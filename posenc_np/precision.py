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
from dataclasses import dataclass, field

import numpy as np

from . import _exact
from ._checks import as_positions, check_choice, check_int

__all__ = [
    "DTYPES",
    "RECIPES",
    "Recipe",
    "RopeSetup",
    "apply_error",
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
    "round_to",
    "table_error",
    "to_bfloat16",
]

#: Model dtypes the recipes understand.
DTYPES = ("float64", "float32", "bfloat16", "float16")
_F32 = np.float32
_MAX_CONFIG_BYTES = 1 << 22


# --------------------------------------------------------------------------- dtype emulation

def to_bfloat16(x) -> np.ndarray:
    """Round to bfloat16; the values are returned in a float32 array.

    float32 input: round-to-nearest-even on the bit pattern (add ``0x7FFF`` plus the lowest kept
    bit, clear the low 16 bits), exactly as ``torch``'s ``c10::BFloat16``; NaN stays NaN, values
    past the largest bfloat16 become infinities. float64 input is rounded directly (correctly
    rounded; torch goes through float32 first, which differs only when that first rounding lands
    on a bfloat16 tie).
    """
    x = np.asarray(x)
    if x.dtype == np.float32:
        bits = x.view(np.uint32)
        rounded = (bits + (np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1)))) & np.uint32(0xFFFF0000)
        return np.where(np.isnan(x), x, rounded.view(np.float32))
    x = x.astype(np.float64)
    mant, expo = np.frexp(x)
    out = np.ldexp(np.rint(np.ldexp(mant, 8)), expo - 8)  # 8 significant bits, ties to even
    out = np.where(np.abs(out) > 3.3895313892515355e38, np.copysign(np.inf, x), out)
    return np.where(np.isfinite(x), out, x).astype(np.float32)


def round_to(x, dtype: str) -> np.ndarray:
    """``x`` rounded once to ``dtype`` (one of :data:`DTYPES`); bfloat16 values come back in float32."""
    dtype = check_choice(dtype, "dtype", DTYPES)
    if dtype == "bfloat16":
        return to_bfloat16(x)
    with np.errstate(over="ignore"):  # float16 overflows to inf, as a cast would
        return np.asarray(x).astype(dtype)


def _arith(dtype: str):
    """Storage dtype and per-operation rounding for arithmetic in ``dtype`` (bfloat16: float32 ops, each
    result rounded to bfloat16, as torch does on CPU)."""
    if dtype == "bfloat16":
        return np.float32, to_bfloat16
    return np.dtype(dtype), (lambda v: v)


def rotate(a, b, c, s, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    r"""The pair rotation :math:`(a c - b s,\ a s + b c)` with every product and sum rounded to ``dtype``.

    This is Hugging Face's ``q * cos + rotate_half(q) * sin`` and Meta's complex product, one
    rounding per operation. Inputs must already hold values of ``dtype``.
    """
    store, r = _arith(dtype)
    a, b, c, s = (np.asarray(v, dtype=store) for v in (a, b, c, s))
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

@dataclass(frozen=True)
class RopeSetup:
    """A RoPE configuration: ``head_dim`` (or the rotary dim when ``scaling`` has no
    ``partial_rotary_factor``), ``base``, a Hugging Face ``scaling`` dict, the model's
    ``max_position_embeddings`` and the ``seq_len`` at which length-dependent frequencies
    (``dynamic``, ``longrope``) are taken."""

    head_dim: int
    base: float = 10000.0
    scaling: dict | None = None
    max_position_embeddings: int | None = None
    seq_len: int | None = None
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    def frequencies(self):
        """``(inv_freq, attention_factor)`` from :func:`posenc_np.rope.inv_freq` (exact values attached)."""
        if "freq" not in self._cache:
            from . import rope

            self._cache["freq"] = rope.inv_freq(self.head_dim, base=self.base, scaling=self.scaling,
                                                seq_len=self.seq_len,
                                                max_position_embeddings=self.max_position_embeddings)
        return self._cache["freq"]

    def parsed(self):
        """The scaling dict read once (:func:`posenc_np.rope_scaling.parse_scaling`)."""
        if "parsed" not in self._cache:
            from .rope_scaling import parse_scaling

            self._cache["parsed"] = parse_scaling(self.head_dim, base=self.base, scaling=self.scaling,
                                                  max_position_embeddings=self.max_position_embeddings)
        return self._cache["parsed"]

    @property
    def rope_type(self) -> str:
        return self.parsed().rope_type

    @property
    def pairs(self) -> int:
        return self.frequencies()[0].size

    def describe(self) -> dict:
        inv, af = self.frequencies()
        return {"head_dim": self.head_dim, "rotary_dim": 2 * inv.size, "base": self.base,
                "rope_type": self.rope_type, "scaling": self.scaling,
                "max_position_embeddings": self.max_position_embeddings, "seq_len": self.seq_len,
                "attention_factor": af}


def read_hf_config(source, *, seq_len: int | None = None, layer_type: str | None = None) -> RopeSetup:
    """A :class:`RopeSetup` from a Hugging Face ``config.json`` (a path or an already parsed dict).

    The file is read by :func:`posenc_np.hf_config.read_hf_config`, the library's one reader of
    Hugging Face configurations (every spelling of the RoPE keys transformers 5.x accepts; a
    missing, unreadable, oversized or contradictory file is a ``ValueError`` naming the
    problem). A model with one rope dict per layer type (Gemma 3) gives one setup per
    ``layer_type``; the first is taken unless one is named. A model without RoPE (ALiBi, T5,
    DeBERTa) is a ``ValueError``.
    """
    from .hf_config import read_hf_config as read

    config = read(source)
    if config.family != "rope":
        raise ValueError(f"{config.source}: model_type {config.model_type!r} uses {config.family} positions, "
                         "not RoPE (no 'rope_theta')")
    layers = {r.layer_type: r for r in config.rope}
    if layer_type is not None and layer_type not in layers:
        raise ValueError(f"layer_type {layer_type!r} is not one of the config's {sorted(map(str, layers))}")
    r = layers[layer_type] if layer_type is not None else config.rope[0]
    setup = RopeSetup(head_dim=r.dim_argument, base=r.base, scaling=r.scaling,
                      max_position_embeddings=r.max_position_embeddings, seq_len=seq_len)
    setup.frequencies()
    return setup


# --------------------------------------------------------------------------- emulations

def _hf_plain(dim: int, base: float) -> np.ndarray:
    """HF's float32 ``1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))``."""
    return _F32(1) / _pow32(base, np.arange(0, dim, 2).astype(_F32) / _F32(dim))


def _hf_correction_dim(r, dim, base, L0):  # HF evaluates this in Python floats (math.log)
    return (dim * math.log(L0 / (r * 2 * math.pi))) / (2 * math.log(base))


def hf_inv_freq(setup: RopeSetup) -> tuple[np.ndarray, bool]:
    """Hugging Face's float32 ``inv_freq`` for ``setup``, operation by operation; and whether it is emulated.

    ``default``/``mrope``, ``linear`` (``inv_freq /= factor``), ``dynamic`` (new base in Python
    floats, then the default formula), ``yarn`` (``1/pos_freqs`` and ``1/(factor*pos_freqs)``
    blended by a float32 ramp), ``longrope`` (``1 / (ext_factors * base**shape)``) and ``llama3``
    (float32 wavelengths, ``torch.where`` bands, smoothed blend) follow transformers' code in
    float32. Other types (``ntk``, ``proportional``) return the exact frequencies rounded to
    float32 and ``False``.
    """
    sc = setup.parsed()
    rope_type, dim, base, v = sc.rope_type, sc.dim, sc.base, sc.values
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


def hf_cos_sin(positions, inv_freq, *, attention_factor: float = 1.0, inv_freq_dtype: str = "float32",
               position_dtype: str = "float32", angle_dtype: str = "float32", table_dtype: str = "float32"):
    r"""Hugging Face's table pipeline with every dtype named; per-pair ``(cos, sin)`` in ``table_dtype``.

    1. ``inv_freq`` (float32, from :func:`hf_inv_freq`) rounded to ``inv_freq_dtype`` (a model
       cast of the buffer);
    2. positions rounded to ``position_dtype`` (``position_ids.float()`` rounds int64 to float32);
    3. both converted to ``angle_dtype`` and multiplied there (one rounding);
    4. cos/sin in ``angle_dtype`` (correctly rounded), times ``attention_factor`` in that dtype;
    5. the tables rounded to ``table_dtype`` (``cos.to(x.dtype)``).

    The defaults are ``LlamaRotaryEmbedding``; ``angle_dtype="float16"`` with float16
    everywhere is GPT-NeoX's cache before EleutherAI/gpt-neox#1003 was fixed.
    """
    store, r = _arith(angle_dtype)
    w = round_to(round_to(np.asarray(inv_freq, dtype=_F32), inv_freq_dtype), angle_dtype).astype(store)
    p = round_to(round_to(as_positions(positions), position_dtype), angle_dtype).astype(store)
    angles = r(p[..., None] * w)
    c, s = _cos_sin_of(angles, angle_dtype)
    if attention_factor != 1.0:
        f = round_to(np.float64(attention_factor), angle_dtype).astype(store)
        c, s = r(c * f), r(s * f)
    return round_to(c, table_dtype), round_to(s, table_dtype)


def meta_freqs_cis(positions, inv_freq) -> np.ndarray:
    """Meta's ``precompute_freqs_cis``: ``torch.polar(ones, outer(t, freqs))`` as complex64.

    ``freqs`` is float32 (:func:`hf_inv_freq`, the same formula), ``t`` an int64 ``arange``
    promoted to float32 by the outer product: the angles equal :func:`hf_cos_sin`'s.
    """
    c, s = hf_cos_sin(positions, inv_freq)
    return (c + 1j * s).astype(np.complex64)


def llama_cpp_cos_sin(positions, dim: int, base: float, *, freq_scale: float = 1.0, freq_factors=None,
                      attention_factor: float = 1.0):
    r"""ggml's float32 rope cache (llama.cpp ``rope_cache_init``, no YaRN ramp).

    ``theta_scale = powf(base, -2.0f/dim)``; per position ``theta = (float) p`` and, pair after
    pair, ``cache = cosf(freq_scale * (theta / ff_i)) * mscale`` then ``theta *= theta_scale``.
    The angle of pair ``i`` carries ``i`` roundings of the recurrence on top of the float32
    position. ``freq_factors`` (``rope_freqs``: LongRoPE factors, LLaMA-3.1 factors) default to 1.
    """
    theta_scale = _pow32(base, _F32(-2.0) / _F32(dim))
    theta = as_positions(positions).astype(_F32)
    ff = np.ones(dim // 2, dtype=_F32) if freq_factors is None else np.asarray(freq_factors, dtype=_F32)
    angles = np.empty(theta.shape + (dim // 2,), dtype=_F32)
    for i in range(dim // 2):
        angles[..., i] = _F32(freq_scale) * (theta / ff[i])
        theta = theta * theta_scale
    c, s = _cos_sin_of(angles, "float32")
    f = _F32(attention_factor)
    return (c * f, s * f) if attention_factor != 1.0 else (c, s)


def _llama_cpp_params(setup: RopeSetup):
    """``(dim, base, freq_scale, freq_factors)`` for llama.cpp, or None where this module does not emulate it."""
    sc = setup.parsed()
    rope_type, dim, base = sc.rope_type, sc.dim, sc.base
    if rope_type in ("default", "mrope"):
        return dim, base, 1.0, None
    if rope_type == "linear":
        return dim, base, 1.0 / sc.values["factor"], None
    if rope_type in ("llama3", "longrope"):  # GGUF rope_freqs: the per-pair divisor, stored as float32
        plain = 1.0 / (base ** (np.arange(0, dim, 2) / dim))
        return dim, base, 1.0, plain / np.asarray(setup.frequencies()[0], dtype=np.float64)
    return None


# --------------------------------------------------------------------------- recipes

@dataclass(frozen=True)
class Recipe:
    """A named pipeline: ``tables(setup, positions)`` gives per-pair ``(cos, sin)`` holding the emulated
    values; ``rotation`` is the dtype of the rotation arithmetic and ``output`` the dtype the
    rotated vectors are stored in. ``source`` names the public code it emulates."""

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
        inv, af = setup.frequencies()
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

        inv, af = setup.frequencies()
        c, s = rope.cos_sin(positions, inv, attention_factor=af, dtype=dtype, method=method)
        return c[..., :inv.size], s[..., :inv.size]

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


def recipe_names(dtype: str, setup: RopeSetup | None = None) -> list[str]:
    """The recipes a report for model dtype ``dtype`` compares (llama.cpp only where emulated)."""
    dtype = check_choice(dtype, "dtype", DTYPES)
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
    if recipe not in RECIPES:
        raise ValueError(f"unknown recipe {recipe!r}; expected one of {sorted(RECIPES)}")
    return RECIPES[recipe]


def recipe_tables(recipe, setup: RopeSetup, positions) -> tuple[np.ndarray, np.ndarray]:
    """Per-pair ``(cos, sin)`` of ``recipe`` (a name or :class:`Recipe`) at ``positions``, shape ``(..., n)``."""
    return _recipe(recipe).tables(setup, positions)


# --------------------------------------------------------------------------- measurements

def exact_tables(setup: RopeSetup, positions):
    """The reference: exact ``f cos(p w)``, ``f sin(p w)`` as double-doubles ``(c_hi, c_lo, s_hi, s_lo)``."""
    inv, af = setup.frequencies()
    return _exact.dd_cos_sin(_exact.positions(positions), _exact.turn_constants(inv), amplitude=af)


def _error(values, hi, lo) -> np.ndarray:
    """``|values - (hi + lo)|``; NaN (an overflowed float16 position, say) counts as an infinite error."""
    err = np.abs((values.astype(np.float64) - hi) - lo)
    return np.where(np.isnan(err), np.inf, err)


def table_error(recipe, setup: RopeSetup, positions) -> np.ndarray:
    """Largest ``|table - exact|`` over the pairs and both tables, per position (shape ``positions.shape``)."""
    c, s = recipe_tables(recipe, setup, positions)
    c_hi, c_lo, s_hi, s_lo = exact_tables(setup, positions)
    return np.maximum(_error(c, c_hi, c_lo), _error(s, s_hi, s_lo)).max(axis=-1, initial=0.0)


def _stored(x, dtype: str) -> np.ndarray:
    """``x`` as a model holding it in ``dtype`` would (float64 array of those values)."""
    return round_to(x, dtype).astype(np.float64)


def _rotate_recipe(rec: Recipe, stored, c, s):
    """Rotate stored vectors (pairs ``(i, i + n)``, ``n = c.shape[-1]``) as ``rec`` does; float64 result."""
    n = c.shape[-1]
    a, b = (round_to(v, rec.rotation) for v in (stored[..., :n], stored[..., n:2 * n]))  # exact: as wide or wider
    y = np.concatenate(rotate(a, b, c, s, rec.rotation), axis=-1)
    return (y if rec.rotation == rec.output else round_to(y, rec.output)).astype(np.float64)


def _rotate_exact(x, hi_lo):
    c_hi, c_lo, s_hi, s_lo = hi_lo
    n = c_hi.shape[-1]
    a, b = x[..., :n], x[..., n:2 * n]
    c, s = c_hi + c_lo, s_hi + s_lo
    return np.concatenate([a * c - b * s, a * s + b * c], axis=-1)


def apply_error(recipe, setup: RopeSetup, x, positions) -> np.ndarray:
    """Largest ``|rotated x - exact rotation|`` per position for ``x`` of shape ``positions.shape + (d,)``.

    ``x`` (float64) is first stored in the recipe's output dtype; the exact rotation is of that
    stored ``x``, so the figure is the rotation's error alone.
    """
    rec = _recipe(recipe)
    c, s = rec.tables(setup, positions)
    stored = _stored(np.asarray(x, dtype=np.float64)[..., :2 * c.shape[-1]], rec.output)
    err = np.abs(_rotate_recipe(rec, stored, c, s) - _rotate_exact(stored, exact_tables(setup, positions)))
    return np.where(np.isnan(err), np.inf, err).max(axis=-1, initial=0.0)


def logit_error(recipe, setup: RopeSetup, q, k, query_positions, key_positions) -> np.ndarray:
    r"""``|logit - exact logit|`` with :math:`\mathrm{logit} = \langle R_m q, R_n k\rangle / \sqrt{d_{head}}`,
    for rows ``q[j]`` at ``query_positions[j]`` and ``k[j]`` at ``key_positions[j]`` (shape ``(L,)``).

    Vectors are stored in the recipe's output dtype and rotated in its arithmetic; the dot
    product itself is float64, so the figure is the positional error alone.
    """
    rec = _recipe(recipe)
    out = []
    for vec, pos in ((q, query_positions), (k, key_positions)):
        c, s = rec.tables(setup, pos)
        stored = _stored(np.asarray(vec, dtype=np.float64)[..., :2 * c.shape[-1]], rec.output)
        out.append((_rotate_recipe(rec, stored, c, s), _rotate_exact(stored, exact_tables(setup, pos))))
    (yq, eq), (yk, ek) = out
    err = np.abs(np.sum(yq * yk, axis=-1) - np.sum(eq * ek, axis=-1)) / math.sqrt(setup.head_dim)
    return np.where(np.isnan(err), np.inf, err)


def invariance_breakage(recipe, setup: RopeSetup, shifts, *, window: int = 32, seed: int = 0) -> np.ndarray:
    r"""Largest change of the logits :math:`\langle R_{m+s} q_m, R_{n+s} k_n\rangle/\sqrt{d}` against their
    exact value (which depends on :math:`m - n` only), for ``m, n < window``, per shift ``s``.

    ``q``, ``k``: standard normal, seeded by ``seed``, one vector per position of the window.
    """
    rec = _recipe(recipe)
    window = check_int(window, "window", minimum=1)
    d = 2 * setup.pairs
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal((window, d)), rng.standard_normal((window, d))
    base = np.arange(window)
    sq, sk = _stored(q, rec.output), _stored(k, rec.output)
    ref = exact_tables(setup, base)  # exact logits of the stored vectors, at the unshifted positions
    exact = _rotate_exact(sq, ref) @ _rotate_exact(sk, ref).T
    out = []
    for shift in np.asarray(shifts, dtype=np.int64).reshape(-1):
        c, s = rec.tables(setup, base + int(shift))
        err = np.abs(_rotate_recipe(rec, sq, c, s) @ _rotate_recipe(rec, sk, c, s).T - exact).max()
        out.append(np.inf if np.isnan(err) else float(err) / math.sqrt(setup.head_dim))
    return np.array(out)
