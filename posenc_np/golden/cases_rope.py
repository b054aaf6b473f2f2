"""Golden cases for RoPE: inv_freq of every scaling type, cos/sin, applied rotations (both
layouts, partial, proportional, scaled), xPos, 2-D axial, M-RoPE, the layout permutation and
RoFormer's long-term decay bound.

Tolerances are first-order worst-case bounds on the float64 library path, in eps (u = eps/2),
computed per case from its own frequencies (no extra safety factor):

* ``w_i = base ** (-x_i)``, ``x_i = 2i/d``: the rounded exponent carries a relative error <= u
  (none when d is a power of 2), which ``pow`` turns into <= x_i ln(base) u, plus <= u for
  ``pow`` itself: relative error <= (x_i ln(base)/2 + 0.5) eps. ``w_0 = 1`` is exact.
* an angle ``p w_i`` adds u: absolute error <= ``|p| w_i (x_i ln(base)/2 + 1)`` eps; the largest
  over the case's positions and pairs i >= 1 is ``_angle_eps``. cos/sin add <= 1 ulp.
* a rotation ``a c - b s`` with ``|a|, |b| <= X`` adds the table errors times 2X plus ~2 eps X.
* YaRN's blend ``(w/s) r + w (1 - r)`` and llama3's smooth factor turn an ulp of r into up to
  s/2 eps of relative error (the result can be as small as w/s).

Measured errors (runner table) use 1-35% of these bounds: a worst case adds every rounding
error with the same sign at the largest position, a measured maximum over a few hundred
values does not.
"""

from __future__ import annotations

import math

import numpy as np

from .. import rope
from . import oracle_rope as oracle
from .spec import CaseSpec, Encoding, conventions, exact, tolerance

HF = "Hugging Face transformers 5.x"


# --------------------------------------------------------------------------- library evaluators

def _freqs(params):
    return rope.inv_freq(params["dim"], base=params["base"], scaling=params.get("scaling"),
                         seq_len=params.get("seq_len"), max_position_embeddings=params.get("max_position_embeddings"))


def _inv_freq(params, inputs):
    inv, af = _freqs(params)
    out = {"inv_freq": inv, "attention_factor": np.array([af])}
    sc = params.get("scaling") or {}
    kind = sc.get("rope_type") or sc.get("type")
    if kind == "yarn":
        L0 = sc.get("original_max_position_embeddings") or params.get("max_position_embeddings")
        fast, slow = sc.get("beta_fast") or 32.0, sc.get("beta_slow") or 1.0
        out["correction_range_raw"] = np.array([rope.yarn_correction_dim(r, params["dim"], params["base"], L0)
                                                for r in (fast, slow)])
        if sc.get("truncate", True):
            out["correction_range"] = np.array(rope.yarn_correction_range(
                params["dim"], params["base"], L0, beta_fast=fast, beta_slow=slow))
    if kind == "llama3":
        out["band_counts"] = np.bincount(rope.llama3_bands(params["dim"], params["base"], sc), minlength=3)
    return out


def _cos_sin(params, inputs):
    inv, af = _freqs(params)
    cos, sin = rope.cos_sin(inputs["positions"], inv, attention_factor=params.get("attention_factor", af),
                            layout=params["layout"])
    return {"cos": cos, "sin": sin}


def _apply(params, inputs):
    inv, af = _freqs(params)
    cos, sin = rope.cos_sin(inputs["positions"], inv, attention_factor=af, layout=params["layout"])
    return {"y": rope.apply(inputs["x"], cos, sin, layout=params["layout"]),
            "dx": rope.apply_backward(inputs["dy"], cos, sin, layout=params["layout"])}


def _xpos(params, inputs):
    inv, _ = rope.inv_freq(params["dim"], base=params["base"])
    out = {}
    for role, name in (("query", "q"), ("key", "k")):
        cos, sin = rope.xpos_cos_sin(inputs["positions"], inv, role=role, centre=params["centre"],
                                     seq_len=params.get("seq_len"), scale_base=params["scale_base"],
                                     layout=params["layout"])
        out[name] = rope.apply(inputs[name], cos, sin, layout=params["layout"])
    out["scores"] = out["q"] @ out["k"].T
    return out


def _axial(params, inputs):
    inv, _ = rope.inv_freq(params["dim_per_axis"], base=params["base"])
    cos, sin = rope.axial_cos_sin(inputs["positions"], inv, layout=params["layout"])
    return {"y": rope.apply(inputs["x"], cos, sin, layout=params["layout"])}


def _mrope(params, inputs):
    inv, _ = rope.inv_freq(params["dim"], base=params["base"])
    cos, sin = rope.mrope_cos_sin(inputs["positions"], inv, params["mrope_section"], variant=params["variant"],
                                  layout=params["layout"])
    return {"y": rope.apply(inputs["x"], cos, sin, layout=params["layout"])}


def _convert(params, inputs):
    return {"w": rope.convert_layout(inputs["w"], params["num_heads"], src=params["src"], dst=params["dst"],
                                     rotary_dim=params["rotary_dim"])}


def _decay(params, inputs):
    return {"bound": rope.long_term_decay(inputs["distances"], rope.inv_freq(params["dim"], base=params["base"])[0])}


ENCODINGS = [
    Encoding("rope.inv_freq", oracle.inv_freq, _inv_freq),
    Encoding("rope.cos_sin", oracle.cos_sin, _cos_sin),
    Encoding("rope.apply", oracle.apply, _apply),
    Encoding("rope.xpos", oracle.xpos, _xpos),
    Encoding("rope.axial", oracle.axial, _axial),
    Encoding("rope.mrope", oracle.mrope, _mrope),
    Encoding("rope.convert_layout", oracle.convert_layout, _convert),
    Encoding("rope.long_term_decay", oracle.long_term_decay, _decay),
]


# --------------------------------------------------------------------------- tolerances

def _freq_rel_eps(base: float, scale: float = 1.0) -> float:
    """Relative bound on inv_freq: pow's (ln(base)/2 + 0.5) eps, one more rounding, s/2 eps for a blend."""
    return math.log(base) / 2 + 1.5 + (scale / 2 if scale > 1 else 0.0)


def _angle_eps(dim: int, base: float, max_pos: float) -> float:
    """Largest absolute angle error in eps: max over i >= 1 of |p| w_i (x_i ln(base)/2 + 1).

    The x_i ln(base)/2 term comes from rounding x_i = 2i/d and vanishes when d is a power of 2.
    """
    x = np.arange(2, dim, 2) / dim
    x_rounding = 0.0 if dim & (dim - 1) == 0 else math.log(base) / 2
    return max_pos * float(np.max(base ** -x * (x * x_rounding + 1), initial=0.0))


def _table_abs_eps(dim: int, base: float, max_pos: float, amplitude: float = 1.0) -> float:
    """Absolute bound on amplitude * cos/sin(angle): the angle error plus 1 ulp."""
    return amplitude * (_angle_eps(dim, base, max_pos) + 1)


def _rotation_tol(dim: int, base: float, max_pos: float, max_x: float, amplitude: float = 1.0) -> dict:
    """y = a c - b s: table errors times |a| + |b| <= 2 max|x|, plus ~2 eps max|x| of rounding."""
    return tolerance(abs_eps=2 * max_x * (_table_abs_eps(dim, base, max_pos, amplitude) + amplitude))


# --------------------------------------------------------------------------- cases

def _conv(layout="n/a", semantics="RoFormer (Su et al. 2021) eq. 13-15", scale="n/a"):
    return conventions(layout=layout, sign="counter-clockwise: a' = a cos t - b sin t, b' = a sin t + b cos t",
                       scale_placement=scale, semantics=semantics)


_AF = "attention_factor multiplies both cos and sin (logits scale by its square)"


def _inv_freq_cases() -> list[CaseSpec]:
    out = []

    def add(name, dim, base, scaling, semantics, description, *, seq_len=None, max_pos=None, scale=1.0):
        params = {"dim": dim, "base": base, "scaling": scaling, "seq_len": seq_len, "max_position_embeddings": max_pos}
        out.append(CaseSpec(
            name=f"rope.inv_freq.{name}", encoding="rope.inv_freq", params=params,
            conventions=_conv(semantics=semantics, scale=_AF), inputs={},
            tolerance=tolerance(rel_eps=_freq_rel_eps(base, scale)), description=description,
        ))

    add("default.d64_base10000", 64, 10000.0, None, "RoFormer: inv_freq[i] = base^(-2i/d)",
        "unscaled RoPE frequencies, d=64, base 1e4; attention factor 1")
    add("default.d128_rope_theta500000", 128, 500000.0, {"rope_type": "default", "rope_theta": 500000.0},
        f"{HF} default (rope_theta read from the dict)", "HF 5.x rope_parameters carrying rope_theta; LLaMA-3 base")
    add("default.d128_neox_partial0_25", 128, 10000.0,
        {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
        f"{HF} default with partial_rotary_factor (GPT-NeoX rotary_pct)",
        "dim is the head dim when the dict carries partial_rotary_factor: rotary dim int(128 * 0.25) = 32")
    add("linear.d32_f4_legacy_type", 32, 10000.0, {"type": "linear", "factor": 4.0}, f"{HF} linear",
        "position interpolation inv/4, dict with the legacy 'type' key")
    add("ntk.d64_alpha8", 64, 10000.0, {"rope_type": "ntk", "alpha": 8.0},
        "static NTK-aware (x-transformers / rotary-embedding-torch theta_rescale_factor); not a HF type",
        "base -> base * 8^(64/62)")
    add("dynamic.d64_f2.seq2048", 64, 10000.0, {"rope_type": "dynamic", "factor": 2.0}, f"{HF} dynamic",
        "dynamic NTK at seq_len = max_position_embeddings: equals default", seq_len=2048, max_pos=2048)
    add("dynamic.d64_f2.seq6144", 64, 10000.0, {"rope_type": "dynamic", "factor": 2.0}, f"{HF} dynamic",
        "dynamic NTK past the switch: base * (2*6144/2048 - 1)^(64/62)", seq_len=6144, max_pos=2048)
    # YaRN published points: c(32)=8.0928, c(1)=17.3980 -> 8/18; c(32)=20.94, c(1)=45.03 -> 20/46; g(32)=1.346574.
    # floor/ceil are discontinuous: the nearest integer is >= 0.03 away, far beyond rounding.
    add("yarn.d64_base150000", 64, 150000.0,
        {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096}, f"{HF} yarn",
        "YaRN test point: range 8.0928/17.3980 truncated to 8/18, attention factor g(32) = 1.346574",
        scale=32.0)
    add("yarn.d128_base10000", 128, 10000.0,
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}, f"{HF} yarn",
        "YaRN test point: range 20.94/45.03 truncated to 20/46, attention factor g(4)", scale=4.0)
    add("yarn.d64_mscale_no_truncate", 64, 10000.0,
        {"rope_type": "yarn", "factor": None, "original_max_position_embeddings": 4096, "truncate": False,
         "beta_fast": 16.0, "beta_slow": 2.0, "mscale": 1.0, "mscale_all_dim": 0.707}, f"{HF} yarn",
        "factor None -> 16384/4096 = 4; untruncated ramp 9.8/15.8; attention factor g(4,1)/g(4,0.707)",
        max_pos=16384, scale=4.0)
    add("yarn.d16_zero_width_ramp", 16, 10000.0,
        {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 8, "beta_slow": 2.0,
         "attention_factor": 0.9}, f"{HF} yarn",
        "both bounds clamp to 0 (raw -3.4/-0.39), high += 0.001; explicit attention_factor wins", scale=8.0)
    long_f = [1.0, 1.25, 1.5, 2.0, 3.0, 5.0, 8.0, 12.0]
    short_f = [1.0, 1.0, 1.05, 1.1, 1.2, 1.3, 1.5, 2.0]
    lr = {"rope_type": "longrope", "short_factor": short_f, "long_factor": long_f,
          "original_max_position_embeddings": 4096}
    add("longrope.d16.seq4096_exactly_l0", 16, 10000.0, lr, f"{HF} longrope (Phi-3)",
        "seq_len exactly L0 uses short_factor; factor absent -> 131072/4096 = 32, af = sqrt(1 + ln32/ln4096)",
        seq_len=4096, max_pos=131072)
    add("longrope.d16.seq4097", 16, 10000.0, lr, f"{HF} longrope (Phi-3)",
        "seq_len = L0 + 1 switches to long_factor", seq_len=4097, max_pos=131072)
    add("longrope.d16.explicit_factors", 16, 10000.0, {**lr, "factor": 8.0, "attention_factor": 1.2},
        f"{HF} longrope", "explicit factor and attention_factor; no seq_len -> short", max_pos=131072)
    add("llama3.d128_base500000", 128, 500000.0,
        {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
         "original_max_position_embeddings": 8192}, f"{HF} llama3 (Meta apply_scaling)",
        "LLaMA-3.1: 29 kept, 6 blended, 29 divided by 8 (band_counts); band edges i=28.2 and 35.0 "
        "are away from integers", scale=8.0)
    add("proportional.d64_p0_25", 64, 10000.0, {"rope_type": "proportional", "partial_rotary_factor": 0.25},
        f"{HF} proportional", "head_dim 64: 8 pairs base^(-2i/64), 24 zero frequencies")
    add("proportional.d32_p0_5_f2", 32, 1000000.0,
        {"rope_type": "proportional", "partial_rotary_factor": 0.5, "factor": 2.0, "rope_theta": 1000000.0},
        f"{HF} proportional", "head_dim 32, 8 rotated pairs, divided by factor 2 (HF divides by factor too)")
    return out


def cases() -> list[CaseSpec]:
    out = _inv_freq_cases()
    rng = np.random.default_rng(20261201)
    ints = np.concatenate([np.arange(16), [100, 1000, 4095, -3]]).astype(np.int64)
    floats = np.array([0.0, 0.5, 1.25, 7.75, 1.0e4 + 0.5, 65535.0])
    for layout, dim, pos, tag in (("half", 8, ints, "int"), ("interleaved", 8, ints, "int"),
                                  ("half", 16, floats, "float"), ("interleaved", 16, floats, "float")):
        out.append(CaseSpec(
            name=f"rope.cos_sin.{layout}.d{dim}.{tag}", encoding="rope.cos_sin",
            params={"dim": dim, "base": 10000.0, "scaling": None, "layout": layout},
            conventions=_conv(layout), inputs={"positions": pos},
            tolerance=tolerance(abs_eps=_table_abs_eps(dim, 10000.0, float(np.abs(pos).max()))),
            description=f"cos/sin tables, {layout} layout, d={dim}, {tag} positions"))
    yarn16 = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 64}
    g8 = 0.1 * math.log(8.0) + 1
    out.append(CaseSpec(
        name="rope.cos_sin.half.d16.yarn_attention_factor", encoding="rope.cos_sin",
        params={"dim": 16, "base": 10000.0, "scaling": yarn16, "layout": "half"},
        conventions=_conv("half", f"{HF} yarn", _AF), inputs={"positions": np.arange(0, 600, 50)},
        tolerance=tolerance(abs_eps=_table_abs_eps(16, 10000.0, 550.0, g8) + g8 * 8),  # + blend, g8 rounding
        description="YaRN tables: both cos and sin carry g(8) = 1.2079"))

    pos6 = np.array([0, 1, 2, 7, 100, 2047], dtype=np.int64)
    apply_cases = [
        ("half.d8", "half", 8, 8, None, "full rotary, half (NeoX) layout"),
        ("interleaved.d8", "interleaved", 8, 8, None, "full rotary, interleaved (GPT-J / Meta) layout"),
        ("half.partial.d12_r8", "half", 12, 8, None, "partial rotary: 8 of 12 channels rotate, 4 pass through"),
        ("interleaved.partial.d12_r8", "interleaved", 12, 8, None, "partial rotary, interleaved inside the slice"),
        ("half.proportional.d16_p0_5", "half", 16, 16,
         {"rope_type": "proportional", "partial_rotary_factor": 0.5},
         "HF proportional: half pairing over the whole head, 4 rotating pairs and 4 with frequency 0"),
        ("half.yarn.d16", "half", 16, 16, yarn16, "YaRN frequencies and attention factor g(8) in the rotation"),
    ]
    for tag, layout, width, dim, scaling, desc in apply_cases:
        af = g8 if scaling is yarn16 else 1.0
        x = rng.standard_normal((pos6.size, width))
        dy = rng.standard_normal((pos6.size, width))
        max_x = float(max(np.abs(x).max(), np.abs(dy).max()))
        kind = (scaling or {}).get("rope_type", "default")
        out.append(CaseSpec(
            name=f"rope.apply.{tag}", encoding="rope.apply",
            params={"dim": dim, "base": 10000.0, "scaling": scaling, "layout": layout},
            conventions=_conv(layout, f"{HF} {kind}" if scaling else "RoFormer (Su et al. 2021) eq. 13-15", _AF),
            inputs={"x": x, "positions": pos6, "dy": dy},
            tolerance=_rotation_tol(dim, 10000.0, float(pos6.max()), max_x, af),
            description=f"{desc}; y = R x and its backward dx = R^T dy, x of shape (6, {width})"))

    pos5 = np.arange(5, dtype=np.int64)
    for centre, layout in (("torchscale", "interleaved"), ("rotary-embedding-torch", "interleaved"), ("none", "half")):
        q, k = rng.standard_normal((5, 8)), rng.standard_normal((5, 8))
        params = {"dim": 8, "base": 10000.0, "layout": layout, "centre": centre, "scale_base": 512.0,
                  "seq_len": None if centre == "none" else 5}
        out.append(CaseSpec(
            name=f"rope.xpos.{centre.replace('-', '_')}.{layout}.d8", encoding="rope.xpos", params=params,
            conventions=_conv(layout, f"xPos (Sun et al. 2022), centre {centre!r}",
                              "q times zeta^((p-c)/B), k times zeta^(-(p-c)/B), on both cos and sin"),
            inputs={"q": q, "k": k, "positions": pos5},
            # scales are within 2^(+-0.01) of 1 (pow adds ~1 ulp); scores add 8 products of rotated entries.
            tolerance=_rotation_tol(8, 10000.0, 4.0, 8 * float(np.abs(np.r_[q, k]).max()) ** 2, 1.02),
            description="xPos q, k and q k^T for L=5 (odd, so torchscale's centre 3 and "
                        "rotary-embedding-torch's 2 differ; scores do not)"))

    grid = rope.patch_positions(3, 4)
    for layout in rope.LAYOUTS:
        x = rng.standard_normal((12, 16))
        out.append(CaseSpec(
            name=f"rope.axial.{layout}.d16.grid3x4", encoding="rope.axial",
            params={"dim_per_axis": 8, "base": 100.0, "layout": layout},
            conventions=_conv(layout, "2-D axial RoPE: pairs 0-3 follow the row, 4-7 the column (Qwen2-VL vision)"),
            inputs={"x": x, "positions": grid},
            tolerance=_rotation_tol(8, 100.0, 3.0, float(np.abs(x).max())),
            description="axial RoPE over a 3x4 patch grid, inv_freq(8, base=100) per axis"))

    # Qwen2-VL style ids: 2 text tokens, a 1x2x2 image grid, 1 text token after it.
    mpos = np.array([[0, 1, 2, 2, 2, 2, 4], [0, 1, 2, 2, 3, 3, 4], [0, 1, 2, 3, 2, 3, 4]], dtype=np.int64)
    for variant, dim, section in (("qwen2-vl", 16, [2, 3, 3]), ("qwen3-vl", 24, [6, 3, 3])):
        x = rng.standard_normal((7, dim))
        out.append(CaseSpec(
            name=f"rope.mrope.{variant}.half.d{dim}", encoding="rope.mrope",
            params={"dim": dim, "base": 10000.0, "layout": "half", "mrope_section": section, "variant": variant},
            conventions=_conv("half", f"{HF} {variant} M-RoPE, mrope_section {section}"),
            inputs={"x": x, "positions": mpos},
            tolerance=_rotation_tol(dim, 10000.0, 4.0, float(np.abs(x).max())),
            description=f"M-RoPE ({variant}) over text, a 1x2x2 image grid and text; positions (3, 7)"))

    for src, dst, r in (("interleaved", "half", 8), ("half", "interleaved", 4)):
        out.append(CaseSpec(
            name=f"rope.convert_layout.{src}_to_{dst}.h2_d8_r{r}", encoding="rope.convert_layout",
            params={"num_heads": 2, "src": src, "dst": dst, "rotary_dim": r},
            conventions=_conv(semantics="HF convert_llama_weights_to_hf permute (per head, rotary rows only)"),
            inputs={"w": rng.standard_normal((16, 3))}, tolerance=exact(),
            description="row permutation of a (2 heads x 8, 3) projection weight"))

    out.append(CaseSpec(
        name="rope.long_term_decay.d128_base10000", encoding="rope.long_term_decay",
        params={"dim": 128, "base": 10000.0},
        conventions=_conv(semantics="RoFormer sec. 3.4.3: (1/n) sum_j |sum_{k<j} exp(i r theta_k)|"),
        inputs={"distances": np.array([0, 1, 10, 100, 1000, 10000, 60000], dtype=np.int64)},
        # each |S_j| sums j phasors: error <= sum_k |r| w_k (x_k ln(base)/2 + 1) eps + j ulp.
        tolerance=tolerance(abs_eps=60000.0 * float(np.sum(10000.0 ** -(np.arange(0, 128, 2) / 128)
                                                         * (np.arange(0, 128, 2) / 128 * math.log(1e4) / 2 + 1))) + 64),
        description="relative upper bound of RoFormer's figure 2 at seven distances"))
    return out
