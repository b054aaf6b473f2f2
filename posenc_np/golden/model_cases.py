"""Golden cases for one model's positional setup, from its Hugging Face ``config.json``.

``posenc-np golden generate --hf-config config.json --out DIR`` writes these cases;
``posenc-np golden verify DIR --hf-config config.json`` checks them against the same list, so
that what the cases must be comes from the configuration the user trusts, not from the files.
They use the catalogue's encodings, builders and error models; only the parameters and the
positions differ: positions reach the model's context (:attr:`.hf_config.PositionalSetup.context`)
through the 4k/8k/32k/128k/1M boundaries and their neighbours.

The cases per family (names ``model.*``) are listed in ``docs/golden-format.md`` ("A suite for your
own model"); keys are capped so that a case holds at most :data:`MAX_BIAS_VALUES` values.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..hf_config import PositionalSetup
from ..rope_scaling import Scaling
from . import cases_alibi, cases_relative, cases_relative_xl, cases_rope
from .spec import CaseSpec, exact_normals, positions_up_to

#: Largest number of values a model case's bias holds (keys are capped to stay below it).
MAX_BIAS_VALUES = 1 << 20
#: The rotation a model's own code applies, when it is not the catalogue's for its pairing (transformers 5.24).
APPLY_CALLS = {
    "gptj": "transformers.models.gptj.modeling_gptj.apply_rotary_pos_emb(tensor, sin, cos) (rotate_every_two)",
    "deepseek_v2": "transformers.models.deepseek_v2.modeling_deepseek_v2.apply_rotary_emb(xq, xk, freqs_cis)",
    "deepseek_v3": "transformers.models.deepseek_v3.modeling_deepseek_v3.apply_rotary_pos_emb_interleave(q, k, cos, "
                   "sin), its output re-interleaved (it returns cat(rotated even channels, rotated odd channels), a "
                   "permutation that leaves q . k unchanged; y[..., 0::2] and y[..., 1::2] are its two halves)"}


def cases_for(config: PositionalSetup) -> list[CaseSpec]:
    """The golden cases of ``config``'s positional setup (deterministic: same config, same cases)."""
    if config.context is None:
        raise ValueError(f"{config.source}: 'max_position_embeddings' is missing: the context the cases' positions "
                         "must reach is unknown")
    builders = {"rope": _rope_cases, "alibi": _alibi_cases, "t5": _t5_cases, "deberta": _deberta_cases}
    return [_named_as_in_version_3(c) for c in builders[config.family](config)]


def _named_as_in_version_3(spec: CaseSpec) -> CaseSpec:
    """``spec`` with the reference call version 3 gives its catalogue siblings (docs/golden-format.md)."""
    for family in (cases_rope, cases_relative_xl):
        spec = replace(spec, reference_call=family.v3_reference(spec))
    return spec


def _signed_range(limit: int, far: int) -> np.ndarray:
    """Every integer in [-limit, limit], the powers of two up to ``far``, and +-(far - 1), +-far."""
    powers = [1 << k for k in range(far.bit_length()) if (1 << k) <= far]
    extra = np.array(powers + [far - 1, far], dtype=np.int64)
    return np.unique(np.concatenate([np.arange(-limit, limit + 1), extra, -extra]))


def _phases(r: Scaling) -> list[tuple[str, int | None, int]]:
    """``(name suffix, seq_len, context)`` of each frequency regime the layer goes through."""
    sc = r.scaling or {}
    if r.rope_type == "longrope":
        l0 = sc.get("original_max_position_embeddings") or r.max_position_embeddings
        return [(f".short.seq{l0}", l0, l0), (f".long.seq{r.context}", r.context, r.context)]
    if r.rope_type == "dynamic":
        return [(f".seq{r.max_position_embeddings}", r.max_position_embeddings, r.max_position_embeddings),
                (f".seq{r.context}", r.context, r.context)]
    return [("", None, r.context)]


def _rope_cases(config: PositionalSetup) -> list[CaseSpec]:
    out = []
    rng = np.random.default_rng(0)
    for r in config.rope:
        prefix = "model.rope" + (f".{r.layer_type}" if len(config.rope) > 1 else "")
        where = f"{config.model_type}" + (f" ({r.layer_type} layers)" if len(config.rope) > 1 else "")
        semantics = f"{cases_rope.HF} {r.rope_type}, from the model's config.json"
        scale = cases_rope.AF if r.scaling else "n/a"
        for suffix, seq_len, context in _phases(r):
            params = cases_rope.rope_params(r.head_dim, r.base, r.scaling, rotary_dim=r.rotary_dim,
                                            layout=config.rope_layout,
                                            seq_len=seq_len, max_pos=r.max_position_embeddings)
            regime = "" if seq_len is None else f" at seq_len {seq_len}"
            out.append(cases_rope.inv_freq_case(
                f"{prefix}.inv_freq{suffix}", params, semantics,
                f"{where}: frequencies and attention factor{regime} (head_dim {r.head_dim}, rotary_dim "
                f"{r.rotary_dim}, base {r.base:g}, rope_type {r.rope_type})"))
            positions = positions_up_to(context)
            out.append(cases_rope.table_case(
                f"{prefix}.cos_sin{suffix}", params, positions, semantics,
                f"{where}: cos/sin tables{regime} at {positions.size} positions up to {positions.max()}", scale=scale))
        # the rotation (and its gradient) at the last regime: the full context
        x, dy = exact_normals(rng, (positions.size, r.head_dim)), exact_normals(rng, (positions.size, r.head_dim))
        apply = cases_rope.apply_case(
            f"{prefix}.apply{suffix}", params, positions, x, dy, semantics,
            f"{where}: rotation of ({positions.size}, {r.head_dim}) vectors and its gradient, positions up to "
            f"{positions.max()}")
        own = APPLY_CALLS.get(config.model_type) if config.rope_layout == "interleaved" else None
        out.append(apply if own is None else replace(apply, reference_call=f"{own}; dx: its autograd VJP"))
        if r.mrope_section is not None:
            out.append(_mrope_case(prefix, where, r, rng))
    return out


def _mrope_case(prefix: str, where: str, r: Scaling, rng) -> CaseSpec:
    """Text tokens (all three streams equal) up to the context, a 2x2 image grid at ``context - 2`` (t fixed,
    h and w stepping), then one text token at the context (Qwen2-VL ``get_rope_index``)."""
    text = [p for p in positions_up_to(r.context) if p < r.context - 2]
    s, variant = r.context - 2, "qwen3-vl" if r.mrope_interleaved else "qwen2-vl"
    grid = np.array([[s] * 4, [s, s, s + 1, s + 1], [s, s + 1, s, s + 1]], dtype=np.int64)
    pos = np.concatenate([np.array([text] * 3, dtype=np.int64), grid, np.full((3, 1), r.context)], axis=1)
    x, dy = exact_normals(rng, (pos.shape[1], r.head_dim)), exact_normals(rng, (pos.shape[1], r.head_dim))
    return cases_rope.mrope_case(
        f"{prefix}.mrope", r.head_dim, r.base, r.mrope_section, variant, pos, x, dy,
        f"{where}: M-RoPE ({variant}, mrope_section {list(r.mrope_section)}) of {len(text)} text tokens, a 2x2 "
        f"image grid at {s} and a text token at {r.context}; gradient")


def _alibi_cases(config: PositionalSetup) -> list[CaseSpec]:
    a = config.alibi
    n, form = a["num_heads"], a["form"]
    keys = min(config.context, MAX_BIAS_VALUES // n)
    units = cases_alibi.v3_slope_units(n) if a["max_bias"] == 8.0 else None  # the paper's (BLOOM's) construction
    return [
        cases_alibi.slopes_case("model.alibi.slopes", n, a["max_bias"],
                                f"{config.model_type}: ALiBi slopes of {n} heads, max_bias {a['max_bias']:g}",
                                units=units),
        cases_alibi.bias_case(f"model.alibi.bias.{form}.last_query", form, n, 1, keys, keys - 1,
                              f"{config.model_type}: ALiBi bias ({form} form) of the query at position {keys - 1} "
                              f"against keys 0..{keys - 1}", max_bias=a["max_bias"], slope_units=units),
    ]


def _t5_cases(config: PositionalSetup) -> list[CaseSpec]:
    t = config.t5
    rel = _signed_range(2 * t["max_distance"], config.context)
    out = []
    for bidirectional in t["bidirectional"]:
        direction = "bidirectional" if bidirectional else "unidirectional"
        role = "encoder" if bidirectional else "decoder"
        out.append(cases_relative.bucket_case(
            f"model.t5.bucket.{direction}", bidirectional, t["num_buckets"], t["max_distance"], rel,
            f"{config.model_type} {role}: buckets of {rel.size} relative positions (every |r| <= "
            f"{2 * t['max_distance']}, and up to the context {config.context})"))
        out.append(cases_relative.t5_bias_case(
            bidirectional, t["num_buckets"], t["max_distance"], t["num_heads"], 2, min(config.context, 512), 0,
            name=f"model.t5.bias.{direction}"))
    return out


def _deberta_cases(config: PositionalSetup) -> list[CaseSpec]:
    d = config.deberta
    buckets, mrp = d["position_buckets"], d["max_relative_positions"]
    out = []
    if buckets > 0:
        rel = _signed_range(2 * mrp, 4 * config.context)
        out.append(cases_relative_xl.log_bucket_case(
            "model.deberta.log_bucket", buckets, mrp, rel,
            f"{config.model_type}: log buckets (position_buckets {buckets}, max_relative_positions {mrp}) of "
            f"{rel.size} relative positions"))
    keys = min(config.context, MAX_BIAS_VALUES // 4)
    out.append(cases_relative_xl.relative_positions_case(
        "model.deberta.relative_positions.last_queries", 4, keys, buckets, mrp if buckets > 0 else -1,
        f"{config.model_type}: relative positions (query - key{', bucketed' if buckets > 0 else ''}) of the last 4 "
        f"queries against all {keys} keys"))
    return out
