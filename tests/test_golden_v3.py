"""Suite version 3 (docs/golden-format.md, "Version 3"): the named float64 reference computations pass
its float64 tolerances (emulated in NumPy, no framework), and the bug classes its new cases were added
for are caught by them, each by at least two cases."""

import math
from pathlib import Path

import numpy as np
import pytest

from posenc_np import absolute, rope
from posenc_np.golden import catalogue, runner
from posenc_np.golden import format as fmt
from posenc_np.testing import load_case


REPO = Path(__file__).resolve().parent.parent
V2, V3 = REPO / "vectors" / "v2", REPO / "vectors" / "v3"


def stored(name: str, directory: Path = V3) -> tuple[dict, dict]:
    """``(params, expected outputs)`` of a committed case, read through the trusted loader."""
    doc, _ = runner.load_case_file(directory / f"{name}.json")
    return doc["params"], fmt.arrays(doc, "outputs")


def caught(name: str, actual: dict, directory: Path = V3) -> bool:
    """Whether the case rejects ``actual`` at its float64 tolerance."""
    spec = catalogue.by_name(3 if directory == V3 else 2)[name]
    return bool(runner.compare(actual, stored(name, directory)[1], spec.tolerance)[3])


# --------------------------------------------------------------------------- float64 reference calls

def bloom_slopes_float64(n: int) -> np.ndarray:
    """transformers build_alibi_tensor's slopes, as written, in float64 (torch.pow of the base)."""
    p = 2 ** math.floor(math.log2(n))
    base = 2 ** (-(2 ** -(math.log2(p) - 3)))
    slopes = np.power(base, np.arange(1, 1 + p, dtype=np.float64))
    if p != n:
        extra = 2 ** (-(2 ** -(math.log2(2 * p) - 3)))
        slopes = np.concatenate([slopes, np.power(extra, np.arange(1, 1 + 2 * min(p, n - p), 2, dtype=np.float64))])
    return slopes


def paper_get_slopes(n: int) -> list:
    """ofirpress/attention_with_linear_biases get_slopes, as written."""
    def power_of_2(m):
        start = 2 ** (-2 ** -(math.log2(m) - 3))
        return [start * start ** i for i in range(m)]
    if math.log2(n).is_integer():
        return power_of_2(n)
    p = 2 ** math.floor(math.log2(n))
    return power_of_2(p) + paper_get_slopes(2 * p)[0::2][:n - p]


@pytest.mark.parametrize("name", [s.name for s in catalogue.cases(["alibi.slopes.*"])
                                  if s.params["max_bias"] == 8.0])
@pytest.mark.parametrize("emulation", [bloom_slopes_float64, paper_get_slopes])
def test_alibi_reference_slopes_pass_in_float64(name, emulation):
    n = catalogue.by_name()[name].params["num_heads"]
    assert not caught(name, {"slopes": np.array(emulation(n))})


def test_version_2_n20_rejected_them():
    assert caught("alibi.slopes.n20", {"slopes": bloom_slopes_float64(20)}, V2)


def kerple_log_reference(name: str) -> np.ndarray:
    """chijames/KERPLE ParallelKerpleLog's bias term, -p * log(1 + a * d), in float64."""
    spec = catalogue.by_name()[name]
    q_len, k_len = spec.params["q_len"], spec.params["k_len"]
    d = np.abs(np.arange(q_len)[:, None] + k_len - q_len - np.arange(k_len)[None, :]).astype(np.float64)
    r1, r2 = spec.inputs["r1"][:, None, None], spec.inputs["r2"][:, None, None]
    return -r1 * np.log(1 + r2 * d)


@pytest.mark.parametrize("name", [s.name for s in catalogue.cases(["kerple.bias.log.*"])])
def test_kerple_log_reference_passes_in_float64(name):
    assert not caught(name, {"bias": kerple_log_reference(name)})


def test_version_2_kerple_log_rejected_it():
    assert caught("kerple.bias.log.h3_q5_k5", {"bias": kerple_log_reference("kerple.bias.log.h3_q5_k5")}, V2)


# --------------------------------------------------------------------------- bug classes

def yarn_inv_freq(params: dict, ramp_dim: int) -> np.ndarray:
    """YaRN frequencies of ``params`` (truncated ramp) with the ramp computed for width ``ramp_dim``."""
    sc, r, base = params["scaling"], params["rotary_dim"], params["base"]
    L0 = sc["original_max_position_embeddings"]
    lo = max(math.floor(rope.yarn_correction_dim(32.0, ramp_dim, base, L0)), 0)
    hi = min(math.ceil(rope.yarn_correction_dim(1.0, ramp_dim, base, L0)), ramp_dim - 1)
    ramp = np.clip((np.arange(r // 2) - lo) / (hi - lo + (0.001 if lo == hi else 0)), 0, 1)
    w = base ** (-np.arange(0, r, 2) / r)
    return w / sc["factor"] * ramp + w * (1 - ramp)


def dynamic_inv_freq(params: dict, exponent_dim: int) -> np.ndarray:
    sc, r, base = params["scaling"], params["rotary_dim"], params["base"]
    s, L = sc["factor"], params["max_position_embeddings"]
    new_base = base * (s * params["seq_len"] / L - (s - 1)) ** (exponent_dim / (exponent_dim - 2))
    return new_base ** (-np.arange(0, r, 2) / r)


def tables(name: str, inv: np.ndarray) -> dict:
    params, out = stored(name)
    positions = catalogue.by_name()[name].inputs["positions"]
    cos, sin = rope.cos_sin(positions, inv, attention_factor=float(np.max(out["cos"][0])), layout="half")
    return {"cos": cos, "sin": sin}


@pytest.mark.parametrize("family, emulate, names", [
    ("yarn", yarn_inv_freq, ["rope.inv_freq.yarn.d64_partial0_5", "rope.cos_sin.half.yarn.d64_partial0_5"]),
    ("dynamic", dynamic_inv_freq, ["rope.inv_freq.dynamic.d64_partial0_5.seq8192",
                                   "rope.cos_sin.half.dynamic.d64_partial0_5.seq8192",
                                   "rope.cos_sin.half.dynamic.d32_partial0_25.seq4096"]),
])
def test_partial_rotary_ramp_and_exponent_from_the_head_width_are_caught(family, emulate, names):
    for name in names:
        params, out = stored(name)
        for width, wrong in ((params["rotary_dim"], False), (params["head_dim"], True)):
            inv = emulate(params, width)
            if name.startswith("rope.inv_freq."):
                actual = {**out, "inv_freq": inv}
            else:
                actual = tables(name, inv)
            assert caught(name, actual) is wrong, (name, width)


@pytest.mark.parametrize("name", ["fire.bias.h2_w4_q8_k8_off0_thr4", "fire.bias.h2_w6_q2_k10_off8_thr4"])
def test_fire_ignoring_its_threshold_multiplier_is_caught(name):
    spec = catalogue.by_name()[name]
    blind = runner.evaluate_library(spec.encoding, spec.params, {**spec.inputs, "L_multiplier": np.array([1.0])})
    assert caught(name, blind)
    assert not caught(name, runner.evaluate_library(spec.encoding, spec.params, dict(spec.inputs)))


def test_the_sinusoid_refuses_odd_widths_and_covers_an_odd_number_of_frequencies():
    with pytest.raises(ValueError, match="even"):
        absolute.sinusoidal(np.arange(3), 7)
    assert {s.params["dim"] // 2 % 2 for s in catalogue.cases(["sinusoidal.*"])} == {0, 1}


def test_version_3_changes_no_version_2_case_silently():
    v2, v3 = catalogue.by_name(2), catalogue.by_name(3)
    changed = {n for n in v2 if fmt.canonical(catalogue.document_fields(v2[n]))
               != fmt.canonical(catalogue.document_fields(v3[n]))}
    renamed = {f"rope.cos_sin.long.{tag}" for tag in ("yarn.qwen2_5_7b_f4", "yarn.gpt_oss_20b_f32",
                                                      "longrope.phi3_mini_128k.short", "longrope.phi3_mini_128k.long",
                                                      "dynamic.d128_f2.seq32768", "proportional.d256_p0_25")}
    # reference calls that name the length (dynamic NTK, LongRoPE) or the computation transformers lacks (DeBERTa)
    at_length = {f"rope.inv_freq.{tag}" for tag in (
        "dynamic.d64_f2.seq2048", "dynamic.d64_f2.seq6144", "dynamic.d128_f2.seq32768", "longrope.d16.seq4096_exactly_l0",
        "longrope.d16.seq4097", "longrope.phi3_mini_128k.short.seq4096", "longrope.phi3_mini_128k.long.seq4097",
        "longrope.phi3_mini_128k.long.seq131072")} | {"rope.apply.long.longrope.phi3_mini_128k.long"}
    deberta = {"relative.deberta.relative_positions.q3_k6", "relative.deberta.relative_positions.q2_k20.b8_m12",
               *(f"relative.deberta.c2p_p2c.{tag}.paper" for tag in ("q4_k4.c2p_p2c.span2", "q3_k6.c2p_p2c.b4_m6",
                                                                     "q3_k5.p2c.span3"))}
    # reference calls under their transformers 5.24 names, or the 4.x where they last exist (BERT, permute)
    named = {"rope.axial.half.d16.grid3x4", "rope.convert_layout.half_to_interleaved.h2_d8_r4",
             "rope.convert_layout.interleaved_to_half.h2_d8_r8", "rope.inv_freq.default.d128_neox_partial0_25",
             "rope.inv_freq.default.d128_rope_theta500000", "rope.inv_freq.default.d64_base10000",
             "rope.mrope.qwen2-vl.half.d16", "rope.mrope.qwen3-vl.half.d24",
             "relative.bert.relative_key.p6.b1_h2_q1_k6_d4.decode", "relative.bert.relative_key.p6.b1_h2_q5_k5_d4",
             "relative.bert.relative_key_query.p6.b1_h2_q5_k5_d4"}
    # a description generated from the parameters where version 2 typed a number wrong (34.99 for 34.98)
    described = {"rope.inv_freq.llama3.d128_base500000"}
    assert changed == {"alibi.slopes.n20", "kerple.bias.log.h3_q5_k5", "rope.cos_sin.long.ntk.d128_alpha8",
                       "rope.inv_freq.yarn.d16_zero_width_ramp", "rope.inv_freq.yarn.d64_mscale_no_truncate",
                       *renamed, *at_length, *deberta, *named, *described,
                       *(n for n in v2 if n.startswith(("relative.txl.", "sinusoidal.concat.")))}
    assert not any("LlamaRotaryEmbedding" in v3[n].reference_call for n in v3 if ".ntk." in n)
    # a float32 divergence keeps the Hugging Face name only where transformers' tables were measured
    # within one float32 step of it (tools/hf_float32_divergences.py); the values never change
    for n in v3:
        if n.startswith("rope.cos_sin.long.") and v3[n].known_divergences:
            hf = [d["implementation"].startswith("Hugging Face") for d in v3[n].known_divergences]
            kind = (v3[n].params["scaling"] or {}).get("rope_type", "default")
            assert any(hf) == (kind in ("default", "linear", "llama3")), n
            for a, b in zip(v2[n].known_divergences, v3[n].known_divergences):
                assert all(np.array_equal(a["outputs"][k], b["outputs"][k]) for k in a["outputs"]), n
    assert not any("TransfoXL" in s.reference_call for s in v3.values())


# ---------------------------------------------------------------- the score cases from the document alone
# Transcriptions of docs/golden-format.md, "The Transformer-XL and DeBERTa score cases, step by step",
# in plain NumPy (no posenc_np function computes a value): a reader following the document passes.


def _document_bucket(rel: int, b: int, m: int) -> int:
    mid = b // 2
    a = mid - 1 if abs(rel) < mid else abs(rel)
    if a <= mid:
        return rel
    return int(np.sign(rel)) * (int(np.ceil(np.log(a / mid) / np.log((m - 1) / mid) * (mid - 1))) + mid)


def _document_txl(p, x):
    q, k, value, u, v, w_r, g = (x[n] for n in ("q", "k", "value", "u", "v", "W_r", "dlogits"))
    B, H, Q, d = q.shape
    K, d_r, s = k.shape[-2], p["d_model_r"], 1 / np.sqrt(q.shape[-1])
    w = p["base"] ** (-2 * np.arange(d_r // 2) / d_r)
    out = {n: np.zeros_like(a) for n, a in (("dq", q), ("dk", k), ("du", u), ("dv", v), ("dW_r", w_r))}
    score = np.zeros((B, H, Q, K))
    for b, h, i, j in np.ndindex(B, H, Q, K):
        t = i + K - Q - j
        if t < 0:
            continue
        t = t if p["clamp_len"] is None else min(t, p["clamp_len"])
        big = np.concatenate([np.sin(t * w), np.cos(t * w)])
        r = w_r[:, h * d:(h + 1) * d].T @ big
        score[b, h, i, j] = s * ((q[b, h, i] + u[h]) @ k[b, h, j] + (q[b, h, i] + v[h]) @ r)
        gij = g[b, h, i, j]
        out["dq"][b, h, i] += s * gij * (k[b, h, j] + r)
        out["dk"][b, h, j] += s * gij * (q[b, h, i] + u[h])
        out["du"][h] += s * gij * k[b, h, j]
        out["dv"][h] += s * gij * r
        out["dW_r"][:, h * d:(h + 1) * d] += s * gij * np.outer(big, q[b, h, i] + v[h])
    keep = np.arange(Q)[:, None] + K - Q - np.arange(K)[None, :] >= 0
    e = np.where(keep, np.exp(score - np.where(keep, score, -np.inf).max(-1, keepdims=True)), 0.0)
    return {**out, "score": score, "out": (e / e.sum(-1, keepdims=True)) @ value}


def _document_deberta(p, x):
    q, k, value, g = x["q"], x["k"], x["value"], x["dlogits"]
    B, H, Q, d = q.shape
    K, types = k.shape[-2], p["pos_att_type"]
    span = p["position_buckets"] if p["position_buckets"] > 0 else p["max_relative_positions"]
    s = 1 / np.sqrt(d * (1 + len(types)))
    res = {"dq": np.zeros_like(q), "dk": np.zeros_like(k), "logits": np.einsum("bhie,bhje->bhij", q, k)}
    tables = {"c2p": ("pos_key", q, "dq", k, "dk"), "p2c": ("pos_query", k, "dk", q, "dq")}
    for term in types:
        name, own, _, _, _ = tables[term]
        res[term], res["d" + name] = np.zeros((B, H, Q, K)), np.zeros_like(x[name])
    for i, j in np.ndindex(Q, K):
        rel = (i + K - Q) - j
        rel = _document_bucket(rel, p["position_buckets"], p["max_relative_positions"]) \
            if p["position_buckets"] > 0 else rel
        rows = {"c2p": rel + span, "p2c": (rel if p["p2c_index"] == "hf" else -rel) + span}
        for term in types:
            name = tables[term][0]
            row = min(max(rows[term], 0), 2 * span - 1)
            table = x[name][:, row]  # (H, d)
            vec = q[:, :, i] if term == "c2p" else k[:, :, j]  # (B, H, d)
            res[term][:, :, i, j] = np.einsum("bhe,he->bh", vec, table)
            res["d" + name][:, row] += s * np.einsum("bh,bhe->he", g[:, :, i, j], vec)
            if term == "c2p":
                res["dq"][:, :, i] += s * g[:, :, i, j, None] * table
            else:
                res["dk"][:, :, j] += s * g[:, :, i, j, None] * table
    res["logits"] = s * (res["logits"] + sum(res[t] for t in types))
    res["dq"] += s * np.einsum("bhij,bhje->bhie", g, k)
    res["dk"] += s * np.einsum("bhij,bhie->bhje", g, q)
    e = np.exp(res["logits"] - res["logits"].max(-1, keepdims=True))
    res["out"] = (e / e.sum(-1, keepdims=True)) @ value
    return res


@pytest.mark.parametrize("name", sorted(p.name[:-5] for p in (V3).glob("relative.*.json")
                                        if p.name.startswith(("relative.txl.score.", "relative.deberta.c2p_p2c."))))
def test_the_score_cases_can_be_implemented_from_the_document_alone(name):
    case = load_case(V3 / f"{name}.json")
    got = (_document_txl if ".txl." in name else _document_deberta)(case.params, case.inputs)
    assert set(got) == set(case.outputs), name
    tol = case.tolerances["float64"]
    for key, want in case.outputs.items():
        err = np.abs(got[key] - want) - (tol["abs"] + tol["rel"] * np.abs(want))
        assert err.max() <= 0, f"{name}: {key} off by up to {np.abs(got[key] - want).max():.3g}"
