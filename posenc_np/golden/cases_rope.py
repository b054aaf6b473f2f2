r"""Golden cases for RoPE: inv_freq of every scaling type, cos/sin, applied rotations (both
layouts, partial, proportional, scaled, batched) with their gradients, long-context tables and
rotations up to position 10^7 for realistic configurations, xPos, 2-D axial and M-RoPE with
gradients, the layout permutation and RoFormer's long-term decay bound.

Parameters name the head dim and the rotary dim separately: ``head_dim`` is the width of the
vectors, ``rotary_dim`` the number of rotated channels (``rotary_dim // 2`` frequencies; equal
to ``head_dim`` for ``proportional``, whose tail frequencies are zero).

Tolerances (:mod:`.tolerance`) model an *ordinary* float64 implementation and a correct one in
each other dtype (tables: :func:`.tolerance.angle_tables`; rotations: :func:`.tolerance.rotation`).
The relative error of a float64 frequency, in units of :math:`u = 2^{-53}`, with
:math:`x_i = 2i/d` and :math:`\delta = 1` when ``d`` is not a power of two (:math:`x_i` is then
rounded) else 0 (:func:`frequency_error_units`):

* default/mrope: :math:`k_i = \delta x_i \ln b + 3` (``pow`` 1 ulp, the reciprocal);
  linear, longrope, proportional: one more (the division);
* ntk/dynamic: the new base :math:`b'` carries :math:`\rho` units (ntk: :math:`e \ln\alpha + 3`,
  dynamic: :math:`e(4s + \ln m) + 3` with :math:`e = d/(d-2)` and :math:`m` the inner factor),
  and :math:`k_i = x_i \rho + \delta x_i \ln b' + 3`;
* yarn: :math:`k_{plain} + 5 + 3(s - 1)` (the ramp's rounding, amplified by at most ``s`` where
  the blend approaches :math:`w/s`);
* llama3: :math:`k_{plain} + 5 + (s-1)\,(\tfrac{h}{h-l}(k_{plain} + 3) + 2)` (the smooth factor).

Inputs ``x``/``dy`` of new cases are multiples of 1/32 below 4 (exact in every dtype).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from .. import rope
from . import oracle_rope as oracle
from . import tolerance as tol
from .spec import (
    LONG_POSITIONS,
    CaseSpec,
    GoldenEncoding,
    conventions,
    divergence,
    exact_normals,
    positions_up_to,
)

HF = "Hugging Face transformers 5.x"
ROFORMER = "RoFormer (Su et al. 2021) eq. 13-15"
HF_INIT = "transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS[{!r}](config)"
#: Version 3: the frequencies of a rope type that depends on the length, at the case's ``seq_len``.
HF_INIT_AT = "transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS[{!r}](config, device, seq_len={})"
#: Version 3: tables at a fixed length, where LlamaRotaryEmbedding's forward would take another one.
HF_TABLES_AT = ("transformers LlamaRotaryEmbedding tables at a fixed length: inv_freq, attention_scaling = "
                "ROPE_INIT_FUNCTIONS[{!r}](config, device, seq_len={}); cos, sin = cos, sin of cat(freqs, freqs) "
                "* attention_scaling with freqs = positions * inv_freq (per pair: cos[..., :d/2]); "
                "LlamaRotaryEmbedding(config)(x, position_ids) itself takes seq_len = max(position_ids) + 1 = {}")
#: Version 3: the rotation with those tables.
HF_APPLY_ON = "transformers.models.llama.modeling_llama.apply_rotary_pos_emb(q, k, cos, sin) on the"
#: rope types whose frequencies depend on the length the call is made for
LENGTH_DEPENDENT = ("dynamic", "longrope")
#: Version 3: reference calls under the names transformers 5.24.0 gives them (or the 4.x they last exist in).
V3_NAMES = {
    HF_INIT.format("default"): "transformers.models.llama.modeling_llama.LlamaRotaryEmbedding."
                               "compute_default_rope_parameters(config) (ROPE_INIT_FUNCTIONS has no 'default' in 5.x)",
    "transformers convert_llama_weights_to_hf.permute(w, n_heads, dim1, dim2)":
        "transformers 4.x models/llama/convert_llama_weights_to_hf.py permute(w, n_heads, dim1, dim2) (the 5.24 "
        "wheel ships no conversion scripts)",
    "transformers Qwen2VL VisionRotaryEmbedding + apply_rotary_pos_emb_vision; dx: autograd VJP":
        "transformers.models.qwen2_vl.modeling_qwen2_vl.Qwen2VLVisionRotaryEmbedding + apply_rotary_pos_emb_vision; "
        "dx: autograd VJP",
    "transformers.models.qwen2_vl.modeling_qwen2_vl.apply_multimodal_rotary_pos_emb(q, k, cos, sin, mrope_section); "
    "dx: autograd VJP":
        "transformers.models.qwen2_vl.modeling_qwen2_vl.Qwen2VLRotaryEmbedding(config)(x, position_ids) "
        "(recomposition_frequencies by mrope_section) + apply_rotary_pos_emb(q, k, cos, sin); dx: autograd VJP "
        "(transformers 4.x: apply_multimodal_rotary_pos_emb(q, k, cos, sin, mrope_section))",
    "transformers Qwen3VL text rotary embedding (interleaved mrope_section); dx: autograd VJP":
        "transformers.models.qwen3_vl.modeling_qwen3_vl.Qwen3VLTextRotaryEmbedding(config)(x, position_ids) "
        "(interleaved recomposition_frequencies) + apply_rotary_pos_emb(q, k, cos, sin); dx: autograd VJP",
}
HF_COS_SIN = "transformers LlamaRotaryEmbedding(config)(x, position_ids) -> (cos, sin) (per pair: cos[..., :d/2])"
META_CIS = "Meta llama precompute_freqs_cis(dim, end, theta) (real part cos, imaginary part sin)"
HF_APPLY = "transformers.models.llama.modeling_llama.apply_rotary_pos_emb(q, k, cos, sin); dx: its autograd VJP"
META_APPLY = "Meta llama apply_rotary_emb(xq, xk, freqs_cis); dx: its autograd VJP"


# --------------------------------------------------------------------------- library evaluators

def _kind(params) -> str:
    sc = params.get("scaling") or {}
    return sc.get("rope_type") or sc.get("type") or "default"


def _dim_argument(params) -> int:
    """``rope.inv_freq``'s ``dim``: the head dim when the dict carries ``partial_rotary_factor``
    (or is ``proportional``), the rotary dim otherwise."""
    sc = params.get("scaling") or {}
    partial = _kind(params) == "proportional" or sc.get("partial_rotary_factor") is not None
    return params["head_dim"] if partial else params["rotary_dim"]


def frequencies(params):
    """``(ExactFrequencies, attention_factor)`` of the library for case ``params``: the evaluators build
    their tables from the exact frequencies (:func:`posenc_np.rope.exact_inv_freq`)."""
    return rope.exact_inv_freq(_dim_argument(params), base=params["base"], scaling=params.get("scaling"),
                               seq_len=params.get("seq_len"),
                               max_position_embeddings=params.get("max_position_embeddings"))


def _inv_freq(params, inputs):
    inv, af = frequencies(params)
    out = {"inv_freq": inv.rounded.copy(), "attention_factor": np.array([af])}
    sc, d = params.get("scaling") or {}, params["rotary_dim"]
    if _kind(params) == "yarn":
        L0 = sc.get("original_max_position_embeddings") or params.get("max_position_embeddings")
        fast, slow = sc.get("beta_fast") or 32.0, sc.get("beta_slow") or 1.0
        out["correction_range_raw"] = np.array([rope.yarn_correction_dim(r, d, params["base"], L0) for r in (fast, slow)])
        if sc.get("truncate", True):
            out["correction_range"] = np.array(rope.yarn_correction_range(d, params["base"], L0, beta_fast=fast,
                                                                          beta_slow=slow))
    if _kind(params) == "llama3":
        out["band_counts"] = np.bincount(rope.llama3_bands(d, params["base"], sc), minlength=3)
    return out


def _cos_sin(params, inputs):
    inv, af = frequencies(params)
    cos, sin = rope.cos_sin(inputs["positions"], inv, attention_factor=params.get("attention_factor", af),
                            layout=params["layout"])
    return {"cos": cos, "sin": sin}


def tables_for(x, positions, cos, sin):
    """Tables broadcast against ``x``: a heads axis is inserted when ``x`` has one more leading
    axis than the positions (``(batch, heads, seq, D)`` against positions ``(batch, seq)``)."""
    if x.ndim - 1 == positions.ndim + 1 and positions.ndim > 1:
        return cos[..., None, :, :], sin[..., None, :, :]
    return cos, sin


def _apply(params, inputs):
    inv, af = frequencies(params)
    cos, sin = rope.cos_sin(inputs["positions"], inv, attention_factor=af, layout=params["layout"])
    cos, sin = tables_for(inputs["x"], inputs["positions"], cos, sin)
    return {"y": rope.apply(inputs["x"], cos, sin, layout=params["layout"]),
            "dx": rope.apply_backward(inputs["dy"], cos, sin, layout=params["layout"])}


def _xpos(params, inputs):
    inv, _ = rope.exact_inv_freq(params["rotary_dim"], base=params["base"])
    tables = {}
    for role in ("query", "key"):
        tables[role] = rope.xpos_cos_sin(inputs["positions"], inv, role=role, centre=params["centre"],
                                         seq_len=params.get("seq_len"), scale_base=params["scale_base"],
                                         layout=params["layout"])
    q = rope.apply(inputs["q"], *tables["query"], layout=params["layout"])
    k = rope.apply(inputs["k"], *tables["key"], layout=params["layout"])
    out = {"q": q, "k": k, "scores": q @ k.T}
    if "dscores" in inputs:
        g = inputs["dscores"]
        out["dq"] = rope.apply_backward(g @ k, *tables["query"], layout=params["layout"])
        out["dk"] = rope.apply_backward(g.T @ q, *tables["key"], layout=params["layout"])
    return out


def _rotated(params, inputs, cos, sin):
    out = {"y": rope.apply(inputs["x"], cos, sin, layout=params["layout"])}
    if "dy" in inputs:
        out["dx"] = rope.apply_backward(inputs["dy"], cos, sin, layout=params["layout"])
    return out


def _axial(params, inputs):
    inv, _ = rope.exact_inv_freq(params["dim_per_axis"], base=params["base"])
    return _rotated(params, inputs, *rope.axial_cos_sin(inputs["positions"], inv, layout=params["layout"]))


def _mrope(params, inputs):
    inv, _ = rope.exact_inv_freq(params["rotary_dim"], base=params["base"])
    return _rotated(params, inputs, *rope.mrope_cos_sin(inputs["positions"], inv, params["mrope_section"],
                                                         variant=params["variant"], layout=params["layout"]))


def _convert(params, inputs):
    return {"w": rope.convert_layout(inputs["w"], params["num_heads"], src=params["src"], dst=params["dst"],
                                     rotary_dim=params["rotary_dim"])}


def _decay(params, inputs):
    inv, _ = rope.inv_freq(params["rotary_dim"], base=params["base"])
    return {"bound": rope.long_term_decay(inputs["distances"], inv)}


ENCODINGS = [
    GoldenEncoding("rope.inv_freq", oracle.inv_freq, _inv_freq),
    GoldenEncoding("rope.cos_sin", oracle.cos_sin, _cos_sin),
    GoldenEncoding("rope.apply", oracle.apply, _apply),
    GoldenEncoding("rope.xpos", oracle.xpos, _xpos),
    GoldenEncoding("rope.axial", oracle.axial, _axial),
    GoldenEncoding("rope.mrope", oracle.mrope, _mrope),
    GoldenEncoding("rope.convert_layout", oracle.convert_layout, _convert),
    GoldenEncoding("rope.long_term_decay", oracle.long_term_decay, _decay),
]


# --------------------------------------------------------------------------- error models

def _plain_freqs(d: int, base: float) -> np.ndarray:
    return base ** -(np.arange(0, d, 2) / d)


def frequency_error_units(params) -> tuple[np.ndarray, np.ndarray]:
    """(upper bounds of the frequencies, their float64 relative error in units of u): module docstring."""
    sc = params.get("scaling") or {}
    kind = _kind(params)
    d = params["head_dim"] if kind == "proportional" else params["rotary_dim"]
    base = float(sc.get("rope_theta") or params["base"])
    x = np.arange(0, d, 2) / d
    rounded_x = 0.0 if d & (d - 1) == 0 else 1.0
    plain = rounded_x * x * math.log(base) + 3
    w = _plain_freqs(d, base)
    if kind in ("default", "mrope"):
        return w, plain
    if kind in ("linear", "proportional"):
        return w, plain + 1
    if kind == "longrope":
        return w / min(1.0, *sc["short_factor"], *sc["long_factor"]), plain + 1
    if kind in ("ntk", "dynamic"):
        e = d / (d - 2)
        if kind == "ntk":
            inner, rho = sc["alpha"], e * math.log(sc["alpha"]) + 3
        else:
            s, L0 = sc["factor"], params["max_position_embeddings"]
            inner = s * max(params.get("seq_len") or L0, L0) / L0 - (s - 1)
            rho = e * (4 * s + math.log(inner)) + 3
        new_base = base * inner ** e
        return w, x * rho + rounded_x * x * math.log(new_base) + 3
    s = sc.get("factor") or params["max_position_embeddings"] / sc["original_max_position_embeddings"]
    if kind == "yarn":
        return w, plain + 5 + 3 * (s - 1)
    if kind == "llama3":
        lo, hi = sc["low_freq_factor"], sc["high_freq_factor"]
        return w, plain + 5 + (s - 1) * (hi / (hi - lo) * (plain + 3) + 2)
    raise ValueError(f"no error model for rope_type {kind!r}")


def _attention_factor(params) -> float:
    return rope.inv_freq(_dim_argument(params), base=params["base"], scaling=params.get("scaling"),
                         seq_len=params.get("seq_len"),
                         max_position_embeddings=params.get("max_position_embeddings"))[1]


def table_tolerances(params, positions, amplitude=None, dtypes=tol.DTYPES) -> dict:
    """The table error model (:data:`TABLE_MODEL`) of case ``params`` at ``positions``, per dtype."""
    w, k = frequency_error_units(params)
    a = _attention_factor(params) if amplitude is None else amplitude
    return tol.angle_tables(max_position=float(np.max(np.abs(positions))), inv_freq=w, freq_units=k, amplitude=a,
                            dtypes=dtypes)


def _pair_sum(layout: str, rotary_dim: int, *arrays) -> float:
    """Largest |a| + |b| over the rotated pairs of ``arrays``."""
    n = rotary_dim // 2
    best = 0.0
    for x in arrays:
        a, b = ((x[..., :n], x[..., n:2 * n]) if layout == "half" else (x[..., 0:2 * n:2], x[..., 1:2 * n:2]))
        best = max(best, float(np.max(np.abs(a) + np.abs(b), initial=0.0)))
    return best


def _rotation_tol(params, positions, *arrays, inputs_exact=True, amplitude=None) -> dict:
    a = _attention_factor(params) if amplitude is None else amplitude
    tables = table_tolerances(params, positions, a)
    return tol.rotation(tables, amplitude=a, pair_sum=_pair_sum(params["layout"], params["rotary_dim"], *arrays),
                        inputs_exact=inputs_exact)


TABLE_MODEL = ("angle_tables: float64 frequencies (error per rope_type, cases_rope docstring), float64 p*w, "
               "libm cos/sin; other dtypes: that rounded once (attention factor multiplied in the dtype)")
ROTATION_MODEL = "rotation of angle_tables-quality tables: two products and a sum in the dtype (inputs exact)"
FREQ_MODEL = ("rounded: float64 frequencies as an ordinary implementation computes them (cases_rope docstring), "
              "rounded once to float32; inv_freq is kept in float32 even by bfloat16/float16 models")


# --------------------------------------------------------------------------- cases

def rope_conventions(layout="n/a", semantics=ROFORMER, scale="n/a"):
    """The conventions record of a RoPE case (the rotation's sign, and the given layout, semantics, scale)."""
    return conventions(layout=layout, sign="counter-clockwise: a' = a cos t - b sin t, b' = a sin t + b cos t",
                       scale_placement=scale, semantics=semantics)


AF = "attention_factor multiplies both cos and sin (logits scale by its square)"

#: Realistic configurations (published config.json values; tests/fixtures/hf_configs/README.md).
LLAMA31 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
           "original_max_position_embeddings": 8192}
QWEN25_YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
GPT_OSS_YARN = {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096, "beta_fast": 32.0,
                "beta_slow": 1.0, "truncate": False}
PHI3_LONG_FACTOR = [
    1.0700000524520874, 1.1200000047683716, 1.149999976158142, 1.4199999570846558, 1.5699999332427979,
    1.7999999523162842, 2.129999876022339, 2.129999876022339, 3.009999990463257, 5.910000324249268,
    6.950000286102295, 9.070000648498535, 9.930000305175781, 10.710000038146973, 11.130000114440918,
    14.609999656677246, 15.409998893737793, 19.809999465942383, 37.279998779296875, 38.279998779296875,
    38.599998474121094, 40.12000274658203, 46.20000457763672, 50.940006256103516, 53.66000747680664,
    54.9373893737793, 56.89738845825195, 57.28738784790039, 59.98738479614258, 60.86738586425781,
    60.887386322021484, 61.71739196777344, 62.91739273071289, 62.957393646240234, 63.41739273071289,
    63.8173942565918, 63.83739471435547, 63.897396087646484, 63.93739700317383, 64.06739807128906,
    64.11434936523438, 64.12435150146484, 64.15435028076172, 64.19435119628906, 64.24435424804688,
    64.57435607910156, 64.69000244140625, 64.76000213623047]
PHI3_SHORT_FACTOR = [
    1.1, 1.1, 1.1, 1.3000000000000003, 1.3500000000000003, 1.3500000000000003, 1.4000000000000004,
    1.5500000000000005, *[2.000000000000001] * 17, *[2.0500000000000007] * 6, 2.1000000000000005,
    2.1000000000000005, 2.1500000000000004, 2.25, 2.25, 2.25, 2.25, 2.25, 2.3999999999999995, 2.4499999999999993,
    2.499999999999999, 2.6999999999999984, 2.6999999999999984, 2.7499999999999982, 2.799999999999998,
    2.8999999999999977, 3.049999999999997]
PHI3_LONGROPE = {"rope_type": "longrope", "short_factor": PHI3_SHORT_FACTOR, "long_factor": PHI3_LONG_FACTOR,
                 "original_max_position_embeddings": 4096}


def rope_params(head_dim, base, scaling=None, *, rotary_dim=None, layout=None, seq_len=None, max_pos=None):
    """Case parameters (``head_dim``, ``rotary_dim``, ``base``, ``scaling``, ``seq_len``,
    ``max_position_embeddings``, ``layout``); ``rotary_dim`` follows Hugging Face's rules unless given."""
    sc = scaling or {}
    if rotary_dim is None:
        prf = sc.get("partial_rotary_factor")
        rotary_dim = head_dim if (prf is None or _kind({"scaling": sc}) == "proportional") else int(head_dim * prf)
    params = {"head_dim": head_dim, "rotary_dim": rotary_dim, "base": base, "scaling": scaling, "seq_len": seq_len,
              "max_position_embeddings": max_pos}
    if layout is not None:
        params["layout"] = layout
    return params


def _reference(kind: str) -> str:
    if kind == "ntk":
        return "rotary_embedding_torch.RotaryEmbedding(dim, theta_rescale_factor=alpha) / x_transformers NTK theta"
    return HF_INIT.format(kind if kind != "mrope" else "default")


def inv_freq_case(name, params, semantics, description) -> CaseSpec:
    """A ``rope.inv_freq`` case (frequencies, attention factor, YaRN ranges, llama3 band counts)."""
    w, k = frequency_error_units(params)
    rel = max(float(np.max(k[w > 0], initial=0.0)), 12.0) * tol.UNIT_ROUNDOFF["float64"]
    return CaseSpec(
        name=name, encoding="rope.inv_freq", params=params,
        conventions=rope_conventions(semantics=semantics, scale=AF), inputs={},
        tolerances=tol.rounded(rel64=rel, dtypes=("float64", "float32")), error_model=FREQ_MODEL,
        reference_call=_reference(_kind(params)), description=description)


def _inv_freq_cases() -> list[CaseSpec]:
    out = []

    def add(name, dim, base, scaling, semantics, description, *, seq_len=None, max_pos=None):
        out.append(inv_freq_case(f"rope.inv_freq.{name}",
                                 rope_params(dim, base, scaling, seq_len=seq_len, max_pos=max_pos), semantics,
                                 description))

    add("default.d64_base10000", 64, 10000.0, None, "RoFormer: inv_freq[i] = base^(-2i/d)",
        "unscaled RoPE frequencies, d=64, base 1e4; attention factor 1")
    add("default.d128_rope_theta500000", 128, 500000.0, {"rope_type": "default", "rope_theta": 500000.0},
        f"{HF} default (rope_theta read from the dict)", "HF 5.x rope_parameters carrying rope_theta; LLaMA-3 base")
    add("default.d128_neox_partial0_25", 128, 10000.0,
        {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
        f"{HF} default with partial_rotary_factor (GPT-NeoX rotary_pct)",
        "head_dim 128, partial_rotary_factor 0.25: rotary_dim int(128 * 0.25) = 32, 16 frequencies")
    add("linear.d32_f4_legacy_type", 32, 10000.0, {"type": "linear", "factor": 4.0}, f"{HF} linear",
        "position interpolation inv/4, dict with the legacy 'type' key")
    add("ntk.d64_alpha8", 64, 10000.0, {"rope_type": "ntk", "alpha": 8.0},
        "static NTK-aware (x-transformers / rotary-embedding-torch theta_rescale_factor); not a HF type",
        "base -> base * 8^(64/62)")
    add("dynamic.d64_f2.seq2048", 64, 10000.0, {"rope_type": "dynamic", "factor": 2.0}, f"{HF} dynamic",
        "dynamic NTK at seq_len = max_position_embeddings: equals default", seq_len=2048, max_pos=2048)
    add("dynamic.d64_f2.seq6144", 64, 10000.0, {"rope_type": "dynamic", "factor": 2.0}, f"{HF} dynamic",
        "dynamic NTK past the switch: base * (2*6144/2048 - 1)^(64/62)", seq_len=6144, max_pos=2048)
    add("dynamic.d128_f2.seq32768", 128, 10000.0, {"rope_type": "dynamic", "factor": 2.0}, f"{HF} dynamic",
        "dynamic NTK far past the original length (4096 -> 32768): base * 15^(128/126)", seq_len=32768,
        max_pos=4096)
    # YaRN published points: c(32)=8.0928, c(1)=17.3980 -> 8/18; c(32)=20.94, c(1)=45.03 -> 20/46; g(32)=1.346574.
    # floor/ceil are discontinuous: the nearest integer is >= 0.03 away, far beyond rounding.
    add("yarn.d64_base150000", 64, 150000.0,
        {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096}, f"{HF} yarn",
        "YaRN test point: range 8.0928/17.3980 truncated to 8/18, attention factor g(32) = 1.346574")
    add("yarn.d128_base10000", 128, 10000.0,
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}, f"{HF} yarn",
        "YaRN test point: range 20.94/45.03 truncated to 20/46, attention factor g(4)")
    add("yarn.d64_mscale_no_truncate", 64, 10000.0,
        {"rope_type": "yarn", "factor": None, "original_max_position_embeddings": 4096, "truncate": False,
         "beta_fast": 16.0, "beta_slow": 2.0, "mscale": 1.0, "mscale_all_dim": 0.707}, f"{HF} yarn",
        "factor None -> 16384/4096 = 4; untruncated ramp 9.8/15.8; attention factor g(4,1)/g(4,0.707)",
        max_pos=16384)
    add("yarn.d16_zero_width_ramp", 16, 10000.0,
        {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 8, "beta_slow": 2.0,
         "attention_factor": 0.9}, f"{HF} yarn",
        "both bounds clamp to 0 (raw -3.4/-0.39), high += 0.001; explicit attention_factor wins")
    add("yarn.qwen2_5_7b_f4", 128, 1000000.0, QWEN25_YARN, f"{HF} yarn (Qwen2.5 long-context setting)",
        "Qwen2.5-7B-Instruct with the model card's YaRN block: factor 4 over 32768, base 1e6")
    add("yarn.gpt_oss_20b_f32_no_truncate", 64, 150000.0, GPT_OSS_YARN, f"{HF} yarn (gpt-oss, truncate=false)",
        "gpt-oss-20b: factor 32 over 4096, base 150000, untruncated ramp 8.09/17.40 (not 8/18)",
        max_pos=131072)
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
    for tag, seq in (("short.seq4096", 4096), ("long.seq4097", 4097), ("long.seq131072", 131072)):
        add(f"longrope.phi3_mini_128k.{tag}", 96, 10000.0, PHI3_LONGROPE, f"{HF} longrope (Phi-3-mini-128k)",
            f"Phi-3-mini-128k-instruct's published factors (head_dim 96) at seq_len {seq}; af = 1.1902",
            seq_len=seq, max_pos=131072)
    add("llama3.d128_base500000", 128, 500000.0, LLAMA31, f"{HF} llama3 (Meta apply_scaling)",
        "LLaMA-3.1: 29 kept, 6 blended, 29 divided by 8 (band_counts); band edges i=28.2 and 34.99 "
        "are away from integers")
    add("proportional.d64_p0_25", 64, 10000.0, {"rope_type": "proportional", "partial_rotary_factor": 0.25},
        f"{HF} proportional", "head_dim 64: 8 pairs base^(-2i/64), 24 zero frequencies")
    add("proportional.d32_p0_5_f2", 32, 1000000.0,
        {"rope_type": "proportional", "partial_rotary_factor": 0.5, "factor": 2.0, "rope_theta": 1000000.0},
        f"{HF} proportional", "head_dim 32, 8 rotated pairs, divided by factor 2 (HF divides by factor too)")
    return out


def table_case(name, params, positions, semantics, description, *, scale="n/a", divergences=()) -> CaseSpec:
    """A ``rope.cos_sin`` case with the table error model (Meta's tables have no scaling: a scaled interleaved
    case names transformers' tables per pair, as DeepSeek's own rotary module computes them)."""
    layout = params["layout"]
    return CaseSpec(
        name=name, encoding="rope.cos_sin", params=params, conventions=rope_conventions(layout, semantics, scale),
        inputs={"positions": positions}, tolerances=table_tolerances(params, positions), error_model=TABLE_MODEL,
        reference_call=HF_COS_SIN if layout == "half" or _kind(params) != "default" else META_CIS,
        known_divergences=tuple(divergences),
        description=description)


def precision_setup(params):
    """The :class:`posenc_np.rope_scaling.Scaling` of case ``params`` at its ``seq_len`` (for the float32
    recipe emulations of :mod:`posenc_np.precision`)."""
    from ..rope_scaling import parse_scaling

    return parse_scaling(_dim_argument(params), base=params["base"], scaling=params.get("scaling"),
                         max_position_embeddings=params.get("max_position_embeddings"), seq_len=params.get("seq_len"))


#: Third-party float32 table recipes recorded as known divergences of the long-context tables
#: (:mod:`posenc_np.precision` emulates them bit for bit up to the transcendental functions).
FLOAT32_RECIPES = {
    "hf-float32>float32": "Hugging Face LlamaRotaryEmbedding (float32 inv_freq, positions, product and cos/sin); "
                          "also Meta precompute_freqs_cis, vLLM, SGLang, gpt-fast",
    "llama.cpp>float32": "llama.cpp / ggml rope_cache_init (float32 theta *= theta_scale recurrence)",
}


def _float32_divergences(params, positions) -> list[dict]:
    """What the float32-angle recipes return at the case's three largest positions, in its layout."""
    from .. import precision

    setup, top = precision_setup(params), np.sort(positions)[-3:]
    out = []
    for recipe, who in FLOAT32_RECIPES.items():
        try:
            c, s = precision.recipe_tables(recipe, setup, top)
        except ValueError:  # llama.cpp is not emulated for this rope_type
            continue
        c, s = (np.concatenate([t, t], axis=-1).astype(np.float64) for t in (c, s))
        inv, af = frequencies(params)
        exact_c, _ = rope.cos_sin(top, inv, attention_factor=af, layout="half")
        out.append(divergence(
            who, f"angles in float32: tables off by up to {float(np.max(np.abs(c - exact_c))):.2g} at these "
                 "positions (the float32 tolerance rejects them); values emulated by posenc_np.precision",
            {"positions": top}, {"cos": c, "sin": s}))
    return out


def apply_case(name, params, positions, x, dy, semantics, description, *, inputs_exact=True) -> CaseSpec:
    """A ``rope.apply`` case (rotation and its gradient) with the rotation error model."""
    layout = params["layout"]
    return CaseSpec(
        name=name, encoding="rope.apply", params=params,
        conventions=rope_conventions(layout, semantics, AF if params.get("scaling") else "n/a"),
        inputs={"x": x, "positions": positions, "dy": dy},
        tolerances=_rotation_tol(params, positions, x, dy, inputs_exact=inputs_exact),
        error_model=ROTATION_MODEL + ("" if inputs_exact else "; inputs rounded once to the dtype"),
        reference_call=HF_APPLY if layout == "half" else META_APPLY, description=description)


#: Long-context configurations: tag, head_dim, base, scaling, max context (positions reach it), extra params.
LONG_CONFIGS = [
    ("default.d128_base10000", 128, 10000.0, None, 10_000_000, {}),
    ("default.d128_base500000", 128, 500000.0, None, 10_000_000, {}),
    ("llama3.llama3_1_8b", 128, 500000.0, LLAMA31, 131072, {}),
    ("yarn.qwen2_5_7b_f4", 128, 1000000.0, QWEN25_YARN, 131072, {}),
    ("yarn.gpt_oss_20b_f32", 64, 150000.0, GPT_OSS_YARN, 131072, {"max_pos": 131072}),
    ("longrope.phi3_mini_128k.short", 96, 10000.0, PHI3_LONGROPE, 4096, {"seq_len": 4096, "max_pos": 131072}),
    ("longrope.phi3_mini_128k.long", 96, 10000.0, PHI3_LONGROPE, 131072, {"seq_len": 131072, "max_pos": 131072}),
    ("dynamic.d128_f2.seq32768", 128, 10000.0, {"rope_type": "dynamic", "factor": 2.0}, 32768,
     {"seq_len": 32768, "max_pos": 4096}),
    ("linear.d128_f8", 128, 10000.0, {"rope_type": "linear", "factor": 8.0}, 32768, {}),
    ("ntk.d128_alpha8", 128, 10000.0, {"rope_type": "ntk", "alpha": 8.0}, 32768, {}),
    ("proportional.d256_p0_25", 256, 1000000.0, {"rope_type": "proportional", "partial_rotary_factor": 0.25},
     131072, {}),
]
#: Long-context configurations that also get a rotation case (with its gradient).
LONG_APPLY = ("default.d128_base10000", "default.d128_base500000", "llama3.llama3_1_8b", "yarn.gpt_oss_20b_f32",
              "longrope.phi3_mini_128k.long")


def _long_cases(rng) -> list[CaseSpec]:
    out = []
    for tag, head, base, scaling, context, extra in LONG_CONFIGS:
        kind = _kind({"scaling": scaling})
        params = rope_params(head, base, scaling, layout="half", **extra)
        positions = positions_up_to(context)
        semantics = f"{HF} {kind}" if scaling else ROFORMER
        scale = AF if scaling else "n/a"
        out.append(table_case(f"rope.cos_sin.long.{tag}", params, positions, semantics,
                              f"long-context tables, {len(positions)} positions up to {positions.max()} "
                              f"(4k/8k/32k/128k/1M/10M boundaries and neighbours, as far as the context)",
                              scale=scale, divergences=_float32_divergences(params, positions)))
        if tag in LONG_APPLY:
            x, dy = exact_normals(rng, (positions.size, head)), exact_normals(rng, (positions.size, head))
            out.append(apply_case(f"rope.apply.long.{tag}", params, positions, x, dy, semantics,
                                   f"long-context rotation and its gradient at {positions.size} positions up to "
                                   f"{positions.max()}, x of shape ({positions.size}, {head})"))
    interleaved = rope_params(64, 10000.0, layout="interleaved")
    pos = np.array(LONG_POSITIONS, dtype=np.int64)
    out.append(table_case("rope.cos_sin.long.default.d64_base10000.interleaved", interleaved, pos,
                           ROFORMER,
                           "interleaved (Meta) tables up to position 10^7"))
    return out


def cases() -> list[CaseSpec]:
    out = _inv_freq_cases()
    rng = np.random.default_rng(20261201)
    ints = np.concatenate([np.arange(16), [100, 1000, 4095, -3]]).astype(np.int64)
    floats = np.array([0.0, 0.5, 1.25, 7.75, 1.0e4 + 0.5, 65535.0])
    for layout, dim, pos, tag in (("half", 8, ints, "int"), ("interleaved", 8, ints, "int"),
                                  ("half", 16, floats, "float"), ("interleaved", 16, floats, "float")):
        out.append(table_case(f"rope.cos_sin.{layout}.d{dim}.{tag}", rope_params(dim, 10000.0, layout=layout), pos,
                               ROFORMER,
                               f"cos/sin tables, {layout} layout, d={dim}, {tag} positions"))
    yarn16 = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 64}
    out.append(table_case("rope.cos_sin.half.d16.yarn_attention_factor",
                           rope_params(16, 10000.0, yarn16, layout="half"), np.arange(0, 600, 50),
                           f"{HF} yarn", "YaRN tables: both cos and sin carry g(8) = 1.2079", scale=AF))
    out += _long_cases(rng)

    pos6 = np.array([0, 1, 2, 7, 100, 2047], dtype=np.int64)
    apply_cases = [
        ("half.d8", "half", 8, None, None, "full rotary, half (NeoX) layout"),
        ("interleaved.d8", "interleaved", 8, None, None, "full rotary, interleaved (GPT-J / Meta) layout"),
        ("half.partial.d12_r8", "half", 12, 8, None, "partial rotary: 8 of 12 channels rotate, 4 pass through"),
        ("interleaved.partial.d12_r8", "interleaved", 12, 8, None, "partial rotary, interleaved inside the slice"),
        ("half.proportional.d16_p0_5", "half", 16, None, {"rope_type": "proportional", "partial_rotary_factor": 0.5},
         "HF proportional: half pairing over the whole head, 4 rotating pairs and 4 with frequency 0"),
        ("half.yarn.d16", "half", 16, None, yarn16, "YaRN frequencies and attention factor g(8) in the rotation"),
    ]
    for tag, layout, width, rotary, scaling, desc in apply_cases:
        params = rope_params(width, 10000.0, scaling, rotary_dim=rotary, layout=layout)
        x, dy = exact_normals(rng, (pos6.size, width)), exact_normals(rng, (pos6.size, width))
        kind = _kind(params)
        out.append(apply_case(f"rope.apply.{tag}", params, pos6, x, dy,
                               f"{HF} {kind}" if scaling else ROFORMER,
                               f"{desc}; y = R x and its gradient dx = R^T dy, x of shape (6, {width})"))
    batch_pos = np.array([[0, 1, 2, 3, 4], [1000, 1001, 1002, 1003, 1004]], dtype=np.int64)
    params = rope_params(16, 10000.0, layout="half")
    x, dy = exact_normals(rng, (2, 3, 5, 16)), exact_normals(rng, (2, 3, 5, 16))
    out.append(apply_case("rope.apply.batched.half.d16.b2_h3_s5", params, batch_pos, x, dy,
                           "RoFormer (Su et al. 2021) eq. 13-15; x (batch, heads, seq, head_dim), positions "
                           "(batch, seq) shared by the heads",
                           "batched rotation: two sequences at different offsets (0.. and 1000..), 3 heads"))
    out += _xpos_cases(rng) + _multi_axis_cases(rng)

    for src, dst, r in (("interleaved", "half", 8), ("half", "interleaved", 4)):
        out.append(convert_case(src, dst, r, exact_normals(rng, (16, 3))))
    out.append(decay_case(128, 10000.0, np.array([0, 1, 10, 100, 1000, 10000, 60000], dtype=np.int64),
                          "rope.long_term_decay.d128_base10000",
                          "relative upper bound of RoFormer's figure 2 at seven distances"))
    return out


def convert_case(src, dst, rotary_dim, w, num_heads=2, head_dim=8) -> CaseSpec:
    """A ``rope.convert_layout`` case: the row permutation of a (num_heads x head_dim, n) weight ``w``."""
    return CaseSpec(
        name=f"rope.convert_layout.{src}_to_{dst}.h{num_heads}_d{head_dim}_r{rotary_dim}",
        encoding="rope.convert_layout",
        params={"num_heads": num_heads, "head_dim": head_dim, "src": src, "dst": dst, "rotary_dim": rotary_dim},
        conventions=rope_conventions(semantics="HF convert_llama_weights_to_hf permute (per head, rotary rows only)"),
        inputs={"w": w}, tolerances=tol.rounded(), error_model="rounded: copies",
        reference_call="transformers convert_llama_weights_to_hf.permute(w, n_heads, dim1, dim2)",
        description=f"row permutation of a ({num_heads} heads x {head_dim}, {w.shape[1]}) projection weight")


def decay_case(rotary_dim, base, distances, name=None, description=None) -> CaseSpec:
    """A ``rope.long_term_decay`` case: RoFormer's relative upper bound at ``distances``."""
    w, k = frequency_error_units({"head_dim": rotary_dim, "rotary_dim": rotary_dim, "base": base})
    n = w.size
    # each |S_j| sums j phasors of angle error |r| w_k (k_k + 1) u and 1 ulp; in t the phasors and the
    # complex sums round (gamma_{n+4}); the average keeps the largest |S_j| error.
    angle = float(distances.max()) * float(np.sum(w * (k + 1))) * tol.UNIT_ROUNDOFF["float64"]
    return CaseSpec(
        name=name or f"rope.long_term_decay.d{rotary_dim}_base{base:g}", encoding="rope.long_term_decay",
        params={"rotary_dim": rotary_dim, "base": base},
        conventions=rope_conventions(semantics="RoFormer sec. 3.4.3: (1/n) sum_j |sum_{k<j} exp(i r theta_k)|"),
        inputs={"distances": distances},
        tolerances={t: tol.entry(angle + tol.gamma(n + 4, tol.UNIT_ROUNDOFF[t]) * n, 0.0)
                    for t in ("float64", "float32")},
        error_model="angles of the float64 frequencies (cases_rope docstring), phasors and partial sums in the "
                    "dtype: |r| sum_k w_k (k_k + 1) u64 + gamma_{n+4} n",
        reference_call="n/a (RoFormer figure 2)",
        description=description or f"relative upper bound of RoFormer's figure 2 at {len(distances)} distances "
                                   f"(up to {int(distances.max())}), d={rotary_dim}, base {base:g}")


def _xpos_cases(rng) -> list[CaseSpec]:
    out = []
    for centre, layout in (("torchscale", "interleaved"), ("rotary-embedding-torch", "interleaved"), ("none", "half")):
        q, k = exact_normals(rng, (5, 8)), exact_normals(rng, (5, 8))
        g = exact_normals(rng, (5, 5))
        out.append(xpos_case(centre, layout, q, k, g))
    return out


def xpos_case(centre, layout, q, k, g) -> CaseSpec:
    """A ``rope.xpos`` case over positions 0..L-1 (L = len(q), the seq_len of a centred case)."""
    L, d = q.shape
    positions = np.arange(L, dtype=np.int64)
    params = {"head_dim": d, "rotary_dim": d, "base": 10000.0, "layout": layout, "centre": centre,
              "scale_base": 512.0, "seq_len": None if centre == "none" else L}
    res = _xpos_tol(params, positions, q, k, g)
    parity = (f"odd, so torchscale's centre {-(-L // 2)} and rotary-embedding-torch's {L // 2} differ" if L % 2 else
              f"even, so torchscale's and rotary-embedding-torch's centres are both {L // 2}")
    return CaseSpec(
        name=f"rope.xpos.{centre.replace('-', '_')}.{layout}.d{d}", encoding="rope.xpos", params=params,
        conventions=rope_conventions(layout, f"xPos (Sun et al. 2022), centre {centre!r}",
                          "q times zeta^((p-c)/B), k times zeta^(-(p-c)/B), on both cos and sin"),
        inputs={"q": q, "k": k, "positions": positions, "dscores": g}, tolerances=res,
        error_model=f"rotation with xPos-scaled tables (scale within 2% of 1); scores and gradients: dot over "
                    f"{d} channels / {L} positions of rotated values, then the transposed rotation",
        reference_call="rotary_embedding_torch.RotaryEmbedding(dim, use_xpos=True).rotate_queries_and_keys(q, k)"
                       " / torchscale XPOS; dq, dk: autograd of sum(dscores * scores)",
        description=f"xPos q, k, q k^T for L={L} ({parity}; scores do not) and the gradients of "
                    "sum(dscores * scores) w.r.t. q and k")


def _xpos_tol(params, positions, q, k, g) -> dict:
    """xPos: tables A cos, A sin with A = zeta^(+-(p-c)/B) within 2% of 1 (zeta_i = (2i + 0.4d)/(1.4d) carries
    6 units of u; the exponent (p-c)/B is exact for B = 512; pow adds 2): the rotation model for q', k'; the
    scores a dot over d channels of rotated values with their errors; the gradients a dot over L positions,
    rotated back by the transposed map."""
    u64 = tol.UNIT_ROUNDOFF["float64"]
    amp, L, d = 1.02, q.shape[0], params["rotary_dim"]
    w, k_units = frequency_error_units(params)
    angle = u64 * float(np.max(np.abs(positions))) * float(np.max(w * (k_units + 1)))
    tables = tol.rounded(abs64=amp * angle, rel64=(2 + 6 + 2 + 1) * u64, ops=3, magnitude=amp)
    rot = tol.rotation({t: tables[t] for t in tol.REDUCTION_DTYPES}, amplitude=amp,
                       pair_sum=_pair_sum(params["layout"], d, q, k), inputs_exact=True)
    entry_max = amp * 2 * float(np.abs(np.r_[q, k]).max())  # |q'|, |k'| entries: A (|a| + |b|)
    gmax = float(np.abs(g).max())
    res = {}
    for t, r in rot.items():
        u = tol.UNIT_ROUNDOFF[t]
        scores = d * 2 * entry_max * r["abs"] + tol.gamma(d, u) * d * entry_max ** 2
        pulled = L * gmax * (r["abs"] + tol.gamma(L, u) * entry_max)  # error of G k' (and G^T q')
        back = tol.rotation({t: tables[t]}, amplitude=amp, pair_sum=2 * L * gmax * entry_max * 1.01,
                            inputs_exact=True).get(t)
        if back is not None:
            res[t] = tol.entry(max(r["abs"], scores, 2 * amp * pulled + back["abs"]), 0.0)
    return res


#: Qwen2-VL style (temporal, height, width) ids: 2 text tokens, a 1x2x2 image grid, 1 text token after it
MROPE_IDS = np.array([[0, 1, 2, 2, 2, 2, 4], [0, 1, 2, 2, 3, 3, 4], [0, 1, 2, 3, 2, 3, 4]], dtype=np.int64)


def _multi_axis_cases(rng) -> list[CaseSpec]:
    out = []
    for layout in rope.LAYOUTS:
        x, dy = exact_normals(rng, (12, 16)), exact_normals(rng, (12, 16))
        out.append(axial_case(layout, 3, 4, x, dy))

    mpos = MROPE_IDS
    for variant, dim, section in (("qwen2-vl", 16, [2, 3, 3]), ("qwen3-vl", 24, [6, 3, 3])):
        x, dy = exact_normals(rng, (7, dim)), exact_normals(rng, (7, dim))
        out.append(mrope_case(f"rope.mrope.{variant}.half.d{dim}", dim, 10000.0, section, variant, mpos, x, dy,
                              f"M-RoPE ({variant}) over text, a 1x2x2 image grid and text; positions (3, 7); gradient"))
    return out


def axial_case(layout, rows, cols, x, dy) -> CaseSpec:
    """A ``rope.axial`` case over a ``rows`` x ``cols`` patch grid (head 16, 8 channels per axis, base 100)."""
    grid = rope.patch_positions(rows, cols)
    params = {"head_dim": 16, "rotary_dim": 16, "dim_per_axis": 8, "base": 100.0, "layout": layout}
    w, k = frequency_error_units({"head_dim": 8, "rotary_dim": 8, "base": 100.0})
    tables = tol.angle_tables(max_position=float(max(rows, cols) - 1), inv_freq=w, freq_units=k)
    return CaseSpec(
        name=f"rope.axial.{layout}.d16.grid{rows}x{cols}", encoding="rope.axial", params=params,
        conventions=rope_conventions(layout, "2-D axial RoPE: pairs 0-3 follow the row, 4-7 the column (Qwen2-VL vision)"),
        inputs={"x": x, "positions": grid, "dy": dy},
        tolerances=tol.rotation(tables, amplitude=1.0, pair_sum=_pair_sum(layout, 16, x, dy), inputs_exact=True),
        error_model=ROTATION_MODEL, reference_call=(
            "transformers Qwen2VL VisionRotaryEmbedding + apply_rotary_pos_emb_vision; dx: autograd VJP"
            if layout == "half" else "RoPE-ViT axial (Heo et al. 2024); dx: autograd VJP"),
        description=f"axial RoPE over a {rows}x{cols} patch grid, inv_freq(8, base=100) per axis, and its gradient")


def mrope_case(name, dim, base, section, variant, positions, x, dy, description) -> CaseSpec:
    """A ``rope.mrope`` case: default frequencies over the whole head, ``half`` pairing, and its gradient."""
    params = {"head_dim": dim, "rotary_dim": dim, "base": base, "layout": "half", "mrope_section": list(section),
              "variant": variant}
    return CaseSpec(
        name=name, encoding="rope.mrope", params=params,
        conventions=rope_conventions("half", f"{HF} {variant} M-RoPE, mrope_section {list(section)}"),
        inputs={"x": x, "positions": positions, "dy": dy},
        tolerances=_rotation_tol(params, positions, x, dy, amplitude=1.0), error_model=ROTATION_MODEL,
        reference_call=("transformers.models.qwen2_vl.modeling_qwen2_vl.apply_multimodal_rotary_pos_emb(q, k, cos, "
                        "sin, mrope_section)" if variant == "qwen2-vl" else "transformers Qwen3VL text rotary "
                        "embedding (interleaved mrope_section)") + "; dx: autograd VJP",
        description=description)


NTK_REFERENCE = ("rotary_embedding_torch.RotaryEmbedding(dim, theta_rescale_factor=alpha) / x_transformers "
                 "RotaryEmbedding(dim, base_rescale_factor=alpha): cos/sin of positions * freqs (per pair)")


def _yarn_range(params) -> str:
    """YaRN's untruncated correction range of case ``params``, as a description quotes it."""
    sc = params["scaling"]
    L0 = sc["original_max_position_embeddings"]
    return "/".join(f"{rope.yarn_correction_dim(r, params['rotary_dim'], params['base'], L0):.2f}"
                    for r in (sc.get("beta_fast") or 32.0, sc.get("beta_slow") or 1.0))


#: rope types whose "Hugging Face" float32 divergence equals transformers' own tables to one float32 step
#: (measured against transformers 5.24 on the long-context cases; docs/golden-format.md)
HF_FAITHFUL = ("default", "linear", "llama3")
#: what the float32 divergence of the other rope types is: the recipe, not transformers' values
FLOAT32_PIPELINE = ("float32 pipeline of the case's formula (float32 inv_freq, positions, product and cos/sin, "
                    "each correctly rounded); not transformers' own tables for this rope_type")
_NOT_HF = {"yarn": "torch's float32 pow is not correctly rounded, and the ramp amplifies one-ulp frequency differences",
           "dynamic": "transformers takes seq_len from the largest position of the call, not the case's seq_len",
           "longrope": "transformers picks short or long factors from the largest position of the call, and torch's "
                       "float32 pow is not correctly rounded",
           "proportional": "transformers' float32 frequencies (pow over head_dim, zeros appended) differ by ulps that "
                           "the positions amplify",
           "ntk": "transformers has no ntk rope_type; x-transformers and rotary-embedding-torch compute these "
                  "frequencies with torch's float32 pow"}


def _renamed_float32_divergences(spec: CaseSpec) -> tuple:
    """``spec``'s divergences with the Hugging Face float32 entry named for what it is (version 3)."""
    hf = FLOAT32_RECIPES["hf-float32>float32"]
    return tuple({**d, "implementation": FLOAT32_PIPELINE,
                  "description": f"{d['description']}; {_NOT_HF[_kind(spec.params)]} (docs/golden-format.md, "
                                 "Known divergences)"} if d["implementation"] == hf else d
                 for d in spec.known_divergences)


def v3_reference(spec: CaseSpec) -> str:
    """Version 3's reference call of ``spec``: the names of :data:`V3_NAMES`; for dynamic NTK and LongRoPE,
    the frequencies at the case's ``seq_len`` named in the call, and tables (and rotations with them) whose
    positions do not end at ``seq_len - 1`` from :data:`HF_TABLES_AT` (LlamaRotaryEmbedding would take its
    length from the positions)."""
    kind, seq_len = _kind(spec.params), spec.params.get("seq_len")
    if kind not in LENGTH_DEPENDENT or seq_len is None:
        return V3_NAMES.get(spec.reference_call, spec.reference_call)
    if spec.encoding == "rope.inv_freq":
        return HF_INIT_AT.format(kind, seq_len)
    longest = int(np.max(spec.inputs["positions"])) + 1
    if longest == seq_len or spec.reference_call not in (HF_COS_SIN, HF_APPLY):
        return spec.reference_call
    tables = HF_TABLES_AT.format(kind, seq_len, longest)
    return tables if spec.encoding == "rope.cos_sin" else f"{HF_APPLY_ON} {tables}; dx: its autograd VJP"


def v3_changes() -> tuple[dict, list]:
    """Version 3 (catalogue docstring): the ``ntk`` tables name what computes them, two YaRN descriptions
    quote their ranges from the parameters, the float32 divergences of rope types outside
    :data:`HF_FAITHFUL` are named for what they are; new cases put YaRN and dynamic NTK under partial
    rotary (the ramp and the exponent come from the rotary width) and YaRN's ``mscale_all_dim`` and
    explicit ``attention_factor`` on tables and rotations."""
    old = {s.name: s for s in cases()}
    fields = {n: {"reference_call": NTK_REFERENCE} for n, s in old.items()
              if _kind(s.params) == "ntk" and s.encoding == "rope.cos_sin"}
    fields.update({n: {"reference_call": v3_reference(s)} for n, s in old.items()
                   if v3_reference(s) != s.reference_call})
    for name, spec in old.items():
        if spec.known_divergences and _kind(spec.params) not in HF_FAITHFUL:
            fields.setdefault(name, {})["known_divergences"] = _renamed_float32_divergences(spec)
    zero, msc = old["rope.inv_freq.yarn.d16_zero_width_ramp"], old["rope.inv_freq.yarn.d64_mscale_no_truncate"]
    fields[zero.name] = {"description": f"both bounds clamp to 0 (raw {_yarn_range(zero.params)}), high += 0.001; "
                                        "explicit attention_factor wins"}
    fields[msc.name] = {"description": f"factor None -> 16384/4096 = 4; untruncated ramp {_yarn_range(msc.params)}; "
                                       "attention factor g(4,1)/g(4,0.707)"}
    llama31 = old["rope.inv_freq.llama3.d128_base500000"]
    fields[llama31.name] = {"description": f"LLaMA-3.1: {_llama3_bands_text(llama31.params, 2)}"}
    rng = np.random.default_rng(20261203)
    yarn_p = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096,
              "partial_rotary_factor": 0.5, "mscale": 1.0, "mscale_all_dim": 0.707}
    dyn_p = {"rope_type": "dynamic", "factor": 2.0, "partial_rotary_factor": 0.5}
    yarn16 = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 64}
    mscale = {**yarn16, "mscale": 1.0, "mscale_all_dim": 0.8}
    explicit = {**yarn16, "attention_factor": 0.9}
    yp, dp = rope_params(64, 10000.0, yarn_p), rope_params(64, 10000.0, dyn_p, seq_len=8192, max_pos=2048)
    new = [inv_freq_case("rope.inv_freq.yarn.d64_partial0_5", yp, f"{HF} yarn with partial_rotary_factor",
                         f"head_dim 64, rotary_dim 32: ramp {_yarn_range(yp)} from the rotary width (the head "
                         f"width would give {_yarn_range({**yp, 'rotary_dim': 64})})"),
           inv_freq_case("rope.inv_freq.dynamic.d64_partial0_5.seq8192", dp, f"{HF} dynamic with partial_rotary_factor",
                         "head_dim 64, rotary_dim 32: base * (2*8192/2048 - 1)^(32/30), not ^(64/62)")]
    pos = np.array([0, 1, 7, 100, 1000, 4095, 4096, 8191, 32767], dtype=np.int64)
    for tag, head, scaling, extra, desc in (
        ("yarn.d64_partial0_5", 64, yarn_p, {}, "YaRN under partial rotary (ramp from rotary_dim 32 of 64) with "
         "mscale 1 and mscale_all_dim 0.707, as DeepSeek's MLA rotary"),
        ("dynamic.d64_partial0_5.seq8192", 64, dyn_p, {"seq_len": 8192, "max_pos": 2048},
         "dynamic NTK under partial rotary: exponent 32/30 from rotary_dim 32 of 64 (positions end at seq_len - 1, "
         "as the reference call takes seq_len from them)"),
        ("yarn.d16_mscale_all_dim", 16, mscale, {}, "YaRN with mscale 1 and mscale_all_dim 0.8: g(8,1)/g(8,0.8)"),
        ("yarn.d16_explicit_attention_factor", 16, explicit, {}, "YaRN with an explicit attention_factor 0.9"),
        ("yarn.d32_explicit_attention_factor.no_truncate", 32, {**explicit, "factor": 4.0, "attention_factor": 1.1,
         "original_max_position_embeddings": 256, "truncate": False, "beta_fast": 16.0}, {},
         "YaRN with an untruncated ramp and an explicit attention_factor 1.1"),
        ("dynamic.d32_partial0_25.seq4096", 32, {**dyn_p, "factor": 4.0, "partial_rotary_factor": 0.25},
         {"seq_len": 4096, "max_pos": 1024}, "dynamic NTK with rotary_dim 8 of 32: exponent 8/6 (positions end at "
         "seq_len - 1)"),
    ):
        params = rope_params(head, 10000.0, scaling, layout="half", **extra)
        p = pos[pos < (extra.get("seq_len") or pos.max() + 1)]
        new.append(table_case(f"rope.cos_sin.half.{tag}", params, p, f"{HF} {_kind(params)}",
                              f"{desc}; cos/sin tables", scale=AF))
        x, dy = exact_normals(rng, (p.size, head)), exact_normals(rng, (p.size, head))
        new.append(apply_case(f"rope.apply.half.{tag}", params, p, x, dy, f"{HF} {_kind(params)}",
                              f"{desc}; y = R x and dx = R^T dy, x of shape ({p.size}, {head})"))
    return fields, [replace(c, reference_call=v3_reference(c)) for c in new + _v3_audit_cases(pos)]


def _llama3_bands_text(params, digits: int) -> str:
    """The band counts and band edges of a llama3 case, as its description quotes them: the edges are the
    pair index ``i`` where the wavelength ``2 pi base^(2i/d)`` reaches ``L0 / high_freq_factor`` and
    ``L0 / low_freq_factor``."""
    sc, d, base = params["scaling"], params["rotary_dim"], params["base"]
    kept, blended, divided = np.bincount(rope.llama3_bands(d, base, sc), minlength=3)
    L0 = sc["original_max_position_embeddings"]
    lo, hi = (d / 2 * math.log(L0 / f / (2 * math.pi)) / math.log(base)
              for f in (sc["high_freq_factor"], sc["low_freq_factor"]))
    return (f"{kept} kept, {blended} blended, {divided} divided by {sc['factor']:g} (band_counts); band edges "
            f"i = {lo:.{digits}f} and {hi:.{digits}f} are away from integers")


def _v3_audit_cases(pos) -> list[CaseSpec]:
    """Version 3's cases that give each parameter the golden audit perturbs a second catching case
    (docs/golden-format.md, "The suite's teeth"): llama3, longrope, untruncated-YaRN and ntk tables and
    rotations, xPos centres over an odd length, axial, M-RoPE and layout-conversion siblings of the
    version-2 cases, proportional frequencies and a second long-term decay."""
    rng = np.random.default_rng(20261204)
    lr16 = {"rope_type": "longrope", "short_factor": [1.0, 1.0, 1.05, 1.1, 1.2, 1.3, 1.5, 2.0],
            "long_factor": [1.0, 1.25, 1.5, 2.0, 3.0, 5.0, 8.0, 12.0], "original_max_position_embeddings": 4096}
    llama = {**LLAMA31, "factor": 4.0}
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256, "truncate": False,
            "beta_fast": 16.0, "beta_slow": 2.0}
    out = []
    for tag, head, scaling, extra, rotation, desc in (
        ("llama3.d64_f4", 64, llama, {}, True, "LLaMA-3 scaling (factor 4, low/high_freq_factor 1/4 over 8192) at "
         "d=64: band edges i = 20.1 and 24.9"),
        ("yarn.d32_no_truncate.beta_slow2", 32, yarn, {}, True, "YaRN with an untruncated ramp "
         f"{_yarn_range(rope_params(32, 10000.0, yarn))} (beta_fast 16, beta_slow 2)"),
        ("longrope.d16.seq4096", 16, lr16, {"seq_len": 4096, "max_pos": 131072}, True, "LongRoPE at seq_len = L0: "
         "short factors (positions end at seq_len - 1)"),
        ("longrope.d16.seq2048", 16, lr16, {"seq_len": 2048, "max_pos": 131072}, True, "LongRoPE below L0: "
         "short factors (positions end at seq_len - 1)"),
        ("longrope.d16.seq8192", 16, lr16, {"seq_len": 8192, "max_pos": 131072}, True, "LongRoPE past L0: long "
         "factors (positions end at seq_len - 1)"),
        ("ntk.d32_alpha4", 32, {"rope_type": "ntk", "alpha": 4.0}, {}, False, "static NTK, base * 4^(32/30)"),
    ):
        params = rope_params(head, 10000.0, scaling, layout="half", **extra)
        p = pos[pos < (extra.get("seq_len") or pos.max() + 1)]
        table = table_case(f"rope.cos_sin.half.{tag}", params, p, f"{HF} {_kind(params)}", f"{desc}; cos/sin tables",
                           scale=AF)
        out.append(replace(table, reference_call=NTK_REFERENCE) if _kind(params) == "ntk" else table)
        if rotation:
            x, dy = exact_normals(rng, (p.size, head)), exact_normals(rng, (p.size, head))
            out.append(apply_case(f"rope.apply.half.{tag}", params, p, x, dy, f"{HF} {_kind(params)}",
                                  f"{desc}; y = R x and dx = R^T dy, x of shape ({p.size}, {head})"))
    out += [inv_freq_case("rope.inv_freq.llama3.d64_f4", rope_params(64, 10000.0, llama),
                          f"{HF} llama3 (Meta apply_scaling)", f"LLaMA-3 scaling at d=64, factor 4: "
                          f"{_llama3_bands_text(rope_params(64, 10000.0, llama), 1)}"),
            inv_freq_case("rope.inv_freq.ntk.d32_alpha4", rope_params(32, 10000.0, {"rope_type": "ntk", "alpha": 4.0}),
                          "static NTK-aware (x-transformers / rotary-embedding-torch theta_rescale_factor); not a HF "
                          "type", "base -> base * 4^(32/30)"),
            inv_freq_case("rope.inv_freq.proportional.d32_p0_5",
                          rope_params(32, 10000.0, {"rope_type": "proportional", "partial_rotary_factor": 0.5}),
                          f"{HF} proportional", "head_dim 32: 8 pairs base^(-2i/32), 8 zero frequencies")]
    for src, dst, r in (("interleaved", "half", 4), ("half", "interleaved", 8)):
        out.append(convert_case(src, dst, r, exact_normals(rng, (16, 2))))
    for centre in ("torchscale", "rotary-embedding-torch"):
        q, k, g = exact_normals(rng, (7, 8)), exact_normals(rng, (7, 8)), exact_normals(rng, (7, 7))
        out.append(xpos_case(centre, "half", q, k, g))
    for layout in rope.LAYOUTS:
        x, dy = exact_normals(rng, (6, 16)), exact_normals(rng, (6, 16))
        out.append(axial_case(layout, 2, 3, x, dy))
    mpos = MROPE_IDS
    for variant, dim, section in (("qwen2-vl", 12, [2, 2, 2]), ("qwen3-vl", 12, [2, 2, 2])):
        x, dy = exact_normals(rng, (7, dim)), exact_normals(rng, (7, dim))
        out.append(mrope_case(f"rope.mrope.{variant}.half.d{dim}", dim, 10000.0, section, variant, mpos, x, dy,
                              f"M-RoPE ({variant}, mrope_section {section}) over text, a 1x2x2 image grid and text; "
                              "positions (3, 7); gradient"))
    out.append(decay_case(64, 500000.0, np.array([0, 1, 10, 100, 1000, 10000], dtype=np.int64)))
    return out
