"""Golden cases for Transformer-XL (rel_shift, relative scores) and DeBERTa (log buckets,
relative positions, disentangled c2p/p2c scores).

Error models (:mod:`.tolerance`): ``rel_shift`` and its adjoint copy values (exact in float64);
buckets and relative positions are integers (exact, with the floating-point DeBERTa ports that
land one bucket off listed as known divergences); scores and their gradients are sums of
products (:func:`.tolerance.dot`, terms and magnitudes from the shapes and the largest
inputs); the softmax outputs follow :func:`.tolerance.attention` with those logit errors.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from .. import attention
from ..relative import deberta, transformer_xl
from . import oracle_relative_xl as oracle
from . import tolerance as tol
from .cases_relative import dot_terms
from .spec import CaseSpec, GoldenEncoding, bucket_divergences, conventions, log_in

TXL = "Dai et al. 2019 (Transformer-XL), sec. 3.3; kimiyoung/transformer-xl _rel_shift"
DEBERTA = "He et al. 2021 (paper), HF DeBERTa-v2 buckets"
DEBERTA_HF = "He et al. 2021 eq. 4 with the p2c index of HF/microsoft code (delta(i,j)); HF DeBERTa-v2 buckets"
QK = "query - key"


# --------------------------------------------------------------------------- library evaluators

def _rel_shift(params, inputs):
    return {"out": transformer_xl.rel_shift(inputs["x"]), "dx": transformer_xl.rel_shift_backward(inputs["dout"])}


def _txl_score(params, inputs):
    q, k, value, g = inputs["q"], inputs["k"], inputs["value"], inputs["dlogits"]
    _, n_heads, q_len, d = q.shape
    hook = transformer_xl.TransformerXLRelative(n_heads, d, params["d_model_r"], base=params["base"],
                                                clamp_len=params["clamp_len"])
    hook.params = {"u": inputs["u"], "v": inputs["v"], "W_r": inputs["W_r"]}
    scale = 1.0 / np.sqrt(d)
    term, cache = hook.logits(q, k, scale)
    keep = attention.causal_mask(q_len, k.shape[-2])
    score = np.where(keep, scale * (q @ np.swapaxes(k, -1, -2)) + term, 0.0)
    dq, dk = hook.logits_backward(g, cache)
    out, _ = attention.forward(q, k, value, causal=True, hooks=[hook])
    return {"score": score, "out": out, "dq": scale * (g @ k) + dq, "dk": scale * (np.swapaxes(g, -1, -2) @ q) + dk,
            "du": hook.grads["u"], "dv": hook.grads["v"], "dW_r": hook.grads["W_r"]}


def _log_bucket(params, inputs):
    return {"bucket": deberta.deberta_log_bucket_position(inputs["relative_pos"], params["bucket_size"],
                                                          params["max_position"])}


def _relative_positions(params, inputs):
    return {"relative_pos": deberta.deberta_relative_positions(
        params["q_len"], params["k_len"], bucket_size=params["bucket_size"], max_position=params["max_position"],
        query_offset=params.get("query_offset"))}


def _deberta_scores(params, inputs):
    q, k, value, g = inputs["q"], inputs["k"], inputs["value"], inputs["dlogits"]
    _, n_heads, _, d = q.shape
    hook = deberta.DebertaDisentangled(n_heads, d, position_buckets=params["position_buckets"],
                                       max_relative_positions=params["max_relative_positions"],
                                       pos_att_type=params["pos_att_type"], p2c_index=params["p2c_index"])
    hook.params = {key: inputs[key] for key in hook.params}
    scale = deberta.deberta_scale(d, params["pos_att_type"])
    term, cache = hook.logits(q, k, scale)
    dq, dk = hook.logits_backward(g, cache)
    res = {"logits": scale * (q @ np.swapaxes(k, -1, -2)) + term,
           "dq": scale * (g @ k) + (0 if dq is None else dq),
           "dk": scale * (np.swapaxes(g, -1, -2) @ q) + (0 if dk is None else dk)}
    res["out"], _ = attention.forward(q, k, value, scale=scale, hooks=[hook])
    # The unscaled single terms, from a hook with only that term enabled.
    for term_name, table in (("c2p", "pos_key"), ("p2c", "pos_query")):
        if term_name in params["pos_att_type"]:
            single = deberta.DebertaDisentangled(n_heads, d, position_buckets=params["position_buckets"],
                                                 max_relative_positions=params["max_relative_positions"],
                                                 pos_att_type=(term_name,), p2c_index=params["p2c_index"])
            single.params = {table: inputs[table]}
            res[term_name] = single.logits(q, k, 1.0)[0]
            res["d" + table] = hook.grads[table]
    return res


ENCODINGS = [
    GoldenEncoding("relative.txl.rel_shift", oracle.rel_shift, _rel_shift),
    GoldenEncoding("relative.txl.score", oracle.txl_score, _txl_score),
    GoldenEncoding("relative.deberta.log_bucket", oracle.deberta_log_bucket, _log_bucket),
    GoldenEncoding("relative.deberta.relative_positions", oracle.deberta_relative_positions, _relative_positions),
    GoldenEncoding("relative.deberta.c2p_p2c", oracle.deberta_scores, _deberta_scores),
]


# --------------------------------------------------------------------------- cases

def _sym(values) -> np.ndarray:
    """Sorted test points with both signs and zero."""
    v = np.asarray(sorted(set(values)), dtype=np.int64)
    return np.unique(np.concatenate([-v, [0], v]))


def _txl_cases(rng) -> list[CaseSpec]:
    out = []
    # rel_shift is a pure data movement: every output is a copy of an input or the zero pad,
    # and every dx entry a sum of at most one dout entry. Exact.
    for q_len, k_len, lead, why in (
        (3, 5, (), "memory of 2: queries at positions 2..4; upper triangle shows the pad and next-row values"),
        (4, 4, (2,), "q_len == k_len with a leading batch axis"),
        (5, 3, (), "q_len > k_len (not used by Transformer-XL): several pads and wraps"),
    ):
        out.append(CaseSpec(
            name=f"relative.txl.rel_shift.q{q_len}_k{k_len}",
            encoding="relative.txl.rel_shift",
            params={},
            conventions=conventions(layout="(..., q_len, k_len), input column m = distance k_len-1-m",
                                    sign="output holds distance query - key (bottom-right)", semantics=TXL),
            inputs={"x": rng.standard_normal(lead + (q_len, k_len)), "dout": rng.standard_normal(lead + (q_len, k_len))},
            tolerances=tol.rounded(), error_model="rounded: copies (exact in float64; the inputs rounded once in a "
                                                  "dtype)",
            reference_call="transformers TransfoXL RelPartialLearnableMultiHeadAttn._rel_shift(x) "
                           "(kimiyoung/transformer-xl _rel_shift) and its autograd gradient",
            description=f"rel_shift (pad zero column, reshape, drop first row) and its adjoint; {why}",
        ))
    # Scores: s * (two d-term dot products) with r_t = W_r^T R_t a d_r-term sum of sin/cos of
    # angles below 5 rad; gradients are sums of such products (_txl_tol).
    for q_len, k_len, d_r, clamp_len, why in (
        (3, 5, 6, None, "memory of 2 (queries are the last 3 of 5 positions)"),
        (4, 4, 8, 2, "q_len == k_len with clamp_len=2 (distances 3 use r_2)"),
    ):
        out.append(txl_score_case(rng, q_len, k_len, d_r, clamp_len, why))
    return out


def txl_score_case(rng, q_len, k_len, d_r, clamp_len, why) -> CaseSpec:
    """A ``relative.txl.score`` case (2 heads of width 3, batch 1), with version 2's reference call."""
    n_heads, d, batch = 2, 3, 1
    g = rng.standard_normal((batch, n_heads, q_len, k_len))
    g = np.where(attention.causal_mask(q_len, k_len), g, 0.0)
    inputs = {"q": rng.standard_normal((batch, n_heads, q_len, d)),
              "k": rng.standard_normal((batch, n_heads, k_len, d)),
              "value": rng.standard_normal((batch, n_heads, k_len, 2)),
              "u": rng.standard_normal((n_heads, d)), "v": rng.standard_normal((n_heads, d)),
              "W_r": rng.standard_normal((d_r, n_heads * d)), "dlogits": g}
    tolerances, model = _txl_tol(inputs, d_r)
    return CaseSpec(
        name=f"relative.txl.score.q{q_len}_k{k_len}" + ("" if clamp_len is None else f".clamp{clamp_len}"),
        encoding="relative.txl.score",
        params={"num_heads": n_heads, "head_dim": d, "d_model_r": d_r, "base": 10000.0, "clamp_len": clamp_len},
        conventions=conventions(layout="q,k (B, H, len, d); R = [sin | cos] of descending distances; "
                                       "W_r (d_r, H*d)",
                                sign="distance = query - key, query i at i + k_len - q_len",
                                scale_placement="all terms over sqrt(d)", semantics=TXL),
        inputs=inputs, tolerances=tolerances, error_model=model,
        reference_call="transformers TransfoXL RelPartialLearnableMultiHeadAttn.forward (AC + BD with _rel_shift)"
                       " and its autograd gradients",
        description="Transformer-XL score (q+u).k + (q+v).r_{i-j} over sqrt(d) (masked future entries 0), "
                    f"causal attention output, and gradients of sum(dlogits*score); {why}",
    )


def log_bucket_case(name, bucket_size, max_position, rel, description, *, semantics=DEBERTA) -> CaseSpec:
    """A ``relative.deberta.log_bucket`` case (exact, with the floating-point ports' divergences)."""
    return CaseSpec(
        name=name, encoding="relative.deberta.log_bucket",
        params={"bucket_size": bucket_size, "max_position": max_position},
        conventions=conventions(layout="elementwise", sign=QK, semantics=semantics), inputs={"relative_pos": rel},
        tolerances=tol.exact(), error_model="exact: integer buckets", reference_call=REF_BUCKET,
        known_divergences=_deberta_divergences(rel, bucket_size, max_position), description=description)


def relative_positions_case(name, q_len, k_len, bucket_size, max_position, description, *,
                            query_offset=None) -> CaseSpec:
    """A ``relative.deberta.relative_positions`` case (exact)."""
    params = {"q_len": q_len, "k_len": k_len, "bucket_size": bucket_size, "max_position": max_position}
    if query_offset is not None:
        params["query_offset"] = query_offset
    return CaseSpec(
        name=name, encoding="relative.deberta.relative_positions", params=params,
        conventions=conventions(layout="(q_len, k_len)", sign=QK, semantics=DEBERTA),
        inputs={}, tolerances=tol.exact(), error_model="exact: integer relative positions",
        reference_call="transformers.models.deberta_v2.modeling_deberta_v2.build_relative_position(query_layer, "
                       "key_layer, bucket_size, max_position)",
        description=description)


def _deberta_bucket_cases() -> list[CaseSpec]:
    out = []
    # b=256, M=512 (DeBERTa-v3, deberta-v2-xlarge): identity up to |r| = 128, then a new bucket
    # wherever ceil(127 ln(r/128) / ln(511/128)) steps. Points: 0..11, 120..139 around mid, both
    # sides (r-1, r) of bucket steps at r = 131, 133, 201, 258, 303, 349, 411, 506, 512; the
    # in-table values closest to a step (216: 48.0031, 500: 125.0036, 402: 104.9898); the last
    # in-table distance 511 (exactly 127 -> 255); beyond the table 1471 (223.99983) and 2650
    # (277.99987), the points nearest an integer for |r| < 4096; and far values.
    steps = [131, 133, 201, 258, 303, 349, 411, 506, 512]
    pts = (set(range(0, 12)) | set(range(120, 140)) | set(steps) | {t - 1 for t in steps}
           | {216, 500, 402, 510, 511, 513, 1471, 2650, 4096, 100000})
    out.append(log_bucket_case(
        "relative.deberta.log_bucket.b256_m512", 256, 512, _sym(pts),
        "DeBERTa-v2 make_log_bucket_position, position_buckets=256, max_relative_positions=512: "
        "identity for |r| <= 128, log buckets up to 255 at |r| = 511, odd in r"))
    # A configuration where the ceiling's argument is an exact integer inside the table:
    # 8 ln(15/9) / ln(25/9) = 4 because (15/9)^8 = (25/9)^4. Exact bucket(15) = 13; a plain
    # float64 evaluation gives 4.000000000000001 and 14. Also r = 25 = M - 1 (value 8, exact).
    out.append(log_bucket_case(
        "relative.deberta.log_bucket.b18_m26.exact_tie", 18, 26, _sym(range(1, 41)),
        "log buckets b=18, M=26, |r| <= 40: r = +-15 sits exactly on a bucket boundary "
        "(exact 13, naive float64 14); float implementations must round the log ratio carefully",
        semantics=DEBERTA + "; ceiling of the exact value"))
    out.append(log_bucket_case(
        "relative.deberta.log_bucket.b2_m4", 2, 4, _sym([1, 2, 3, 4, 100]),
        "smallest valid configuration: mid = 1, mid - 1 = 0, every |r| >= 1 maps to +-1"))
    return out


def _deberta_position_cases() -> list[CaseSpec]:
    out = []
    for q_len, k_len, b, m, offset, why in (
        (4, 4, -1, -1, None, "square, raw: rel[i, j] = i - j"),
        (3, 6, -1, -1, None, "queries are the last 3 of 6 positions (bottom-right): rel[i, j] = i + 3 - j"),
        (3, 6, -1, -1, 0, "query_offset=0: Hugging Face build_relative_position (query i at i)"),
        (2, 20, 8, 12, None, "decode-like block with log buckets b=8, M=12 (clamped beyond bucket 7)"),
    ):
        name = f"relative.deberta.relative_positions.q{q_len}_k{k_len}"
        if b > 0:
            name += f".b{b}_m{m}"
        if offset is not None:
            name += f".offset{offset}"
        out.append(relative_positions_case(name, q_len, k_len, b, m, f"DeBERTa relative positions query - key; {why}",
                                           query_offset=offset))
    return out


def _deberta_score_cases(rng) -> list[CaseSpec]:
    out = []
    for q_len, k_len, pb, mrp, types, p2c, why in (
        (4, 4, -1, 2, ("c2p", "p2c"), "paper", "square, span 2 (clamps for |rel| >= 2)"),
        (4, 4, -1, 2, ("c2p", "p2c"), "hf", "square, span 2, p2c index of HF/microsoft code (delta(i,j))"),
        (3, 6, 4, 6, ("c2p", "p2c"), "paper", "q_len != k_len (bottom-right) with log buckets b=4, M=6"),
        (3, 5, -1, 3, ("c2p",), "paper", "c2p only: scale 1/sqrt(2d)"),
        (3, 5, -1, 3, ("p2c",), "paper", "p2c only, q_len != k_len"),
    ):
        out.append(deberta_score_case(rng, q_len, k_len, pb, mrp, types, p2c, why))
    return out


def deberta_score_case(rng, q_len, k_len, pb, mrp, types, p2c, why) -> CaseSpec:
    """A ``relative.deberta.c2p_p2c`` case (2 heads of width 3, batch 2)."""
    n_heads, d, batch = 2, 3, 2
    span = pb if pb > 0 else mrp
    inputs = {"q": rng.standard_normal((batch, n_heads, q_len, d)),
              "k": rng.standard_normal((batch, n_heads, k_len, d)),
              "value": rng.standard_normal((batch, n_heads, k_len, 2)),
              "dlogits": rng.standard_normal((batch, n_heads, q_len, k_len))}
    if "c2p" in types:
        inputs["pos_key"] = rng.standard_normal((n_heads, 2 * span, d))
    if "p2c" in types:
        inputs["pos_query"] = rng.standard_normal((n_heads, 2 * span, d))
    tag = "_".join(types) + (f".b{pb}_m{mrp}" if pb > 0 else f".span{mrp}")
    tolerances, model = _deberta_tol(inputs, len(types))
    return CaseSpec(
        name=f"relative.deberta.c2p_p2c.q{q_len}_k{k_len}.{tag}.{p2c}",
        encoding="relative.deberta.c2p_p2c",
        params={"position_buckets": pb, "max_relative_positions": mrp, "pos_att_type": list(types),
                "p2c_index": p2c},
        conventions=conventions(
            layout="q,k (B, H, len, d); pos_key/pos_query (H, 2*span, d), row t = relative position t - span",
            sign=QK + ("; p2c row clamp(-rel + span)" if p2c == "paper" else "; p2c row clamp(rel + span)"),
            scale_placement=f"all terms over sqrt({1 + len(types)}d)",
            semantics=DEBERTA if p2c == "paper" else DEBERTA_HF),
        inputs=inputs, tolerances=tolerances, error_model=model,
        reference_call="transformers DebertaV2 DisentangledSelfAttention.disentangled_attention_bias(query_layer, "
                       "key_layer, relative_pos, rel_embeddings, scale_factor) and its autograd gradients",
        description="DeBERTa disentangled scores: unscaled c2p/p2c terms, full logits, softmax attention "
                    f"output and gradients of sum(dlogits*logits); {why}",
    )


REF_BUCKET = "transformers.models.deberta_v2.modeling_deberta_v2.make_log_bucket_position(relative_pos, bucket_size, " \
             "max_position)"


def deberta_bucket_in(rel, bucket_size: int, max_position: int, dtype) -> np.ndarray:
    """DeBERTa's ``make_log_bucket_position`` with its log term in ``dtype`` (float32: Hugging Face's
    torch default; float64: a plain NumPy port), ceiling as in the original."""
    rel = np.asarray(rel, dtype=np.int64)
    mid = bucket_size // 2
    a = np.where((rel < mid) & (rel > -mid), mid - 1, np.abs(rel))
    with np.errstate(divide="ignore", invalid="ignore"):  # log(0) where a <= mid: not used
        ratio = log_in(a.astype(dtype) / dtype(mid), dtype) / log_in(dtype((max_position - 1) / mid), dtype)
        log_pos = np.nan_to_num(np.ceil(ratio * dtype(mid - 1))).astype(np.int64) + mid
    return np.where(a <= mid, rel, log_pos * np.sign(rel))


def _deberta_divergences(rel, bucket_size, max_position) -> tuple:
    ports = {"Hugging Face make_log_bucket_position (torch float32)":
             deberta_bucket_in(rel, bucket_size, max_position, np.float32),
             "make_log_bucket_position in float64 (NumPy port)":
             deberta_bucket_in(rel, bucket_size, max_position, np.float64)}
    return bucket_divergences("relative_pos", rel, deberta.deberta_log_bucket_position(rel, bucket_size, max_position),
                              ports, "the log ratio lands just above an integer and the ceiling takes the next "
                                     "bucket (emulated with correctly rounded log)")


def _m(inputs, *names) -> float:
    return max(float(np.abs(inputs[n]).max()) for n in names)


def _softmax_out(logit_tolerances: dict, inputs, *, scale) -> dict:
    """tolerance.attention's output bound for logits with the given errors (no cotangent of the output)."""
    logit = {t: e["abs"] for t, e in logit_tolerances.items()}
    v = inputs["value"]
    return tol.attention(q=inputs["q"], k=inputs["k"], v=v, g=np.zeros(v.shape[:-2] + inputs["q"].shape[-2:-1] + v.shape[-1:]),
                         scale=scale, logit_error=logit)["out"]


def _txl_tol(inputs, d_r) -> tuple[dict, str]:
    b, _, q_len, d = inputs["q"].shape
    k_len = inputs["k"].shape[-2]
    s = 1 / math.sqrt(d)
    Q, K, U, V, W, G = (_m(inputs, n) for n in ("q", "k", "u", "v", "W_r", "dlogits"))
    pairs = b * q_len * k_len
    score = (2 * d + d_r + 6, s * d * ((Q + U) * K + (Q + V) * d_r * W))  # R entries are sin/cos, |R| <= 1
    grads = [(k_len + d_r + 3, s * k_len * G * (K + d_r * W)), (q_len + 2, s * q_len * G * (Q + U)),
             (pairs + 1, s * pairs * G * K), (pairs + d_r + 1, s * pairs * G * d_r * W),
             (pairs + 3, s * pairs * G * (Q + V))]
    tolerances, model = dot_terms(score, *grads)
    logits = tol.dot(*score, extra=1)
    out = _softmax_out(logits, inputs, scale=s)
    return tol.widest(tolerances, out), model + "; out: attention (softmax of those logits)"


def _deberta_tol(inputs, n_terms) -> tuple[dict, str]:
    b, _, q_len, d = inputs["q"].shape
    k_len = inputs["k"].shape[-2]
    s = 1 / math.sqrt(d * (1 + n_terms))
    pos = [n for n in ("pos_key", "pos_query") if n in inputs]
    Q, K, G, P = _m(inputs, "q"), _m(inputs, "k"), _m(inputs, "dlogits"), _m(inputs, *pos)
    pairs = b * q_len * k_len
    logit = ((1 + n_terms) * d + 2, s * (1 + n_terms) * d * max(Q, K) * max(K, P))
    terms = [(d, d * max(Q, K) * P), logit, (k_len + 2, s * k_len * G * (K + P)), (q_len + 2, s * q_len * G * (Q + P)),
             (pairs, s * pairs * G * max(Q, K))]
    tolerances, model = dot_terms(*terms)
    out = _softmax_out(tol.dot(*logit, extra=1), inputs, scale=s)
    return tol.widest(tolerances, out), model + "; out: attention (softmax of those logits)"


def cases() -> list[CaseSpec]:
    rng = np.random.default_rng(20261201)
    return _txl_cases(rng) + _deberta_bucket_cases() + _deberta_position_cases() + _deberta_score_cases(rng)


#: Version 3: DeBERTa relative positions with the case's default alignment (no ``query_offset``, q_len != k_len).
BOTTOM_RIGHT = ("n/a (queries aligned bottom-right, query i at position k_len - q_len + i: rel[i, j] = k_len - q_len "
                "+ i - j, then make_log_bucket_position when bucket_size > 0; transformers.models.deberta_v2."
                "modeling_deberta_v2.build_relative_position places query i at i, which the .offset0 cases check)")
#: Version 3: DeBERTa scores with the paper's p2c index, which transformers does not compute.
DEBERTA_PAPER = ("n/a (He et al. 2021, DeBERTa eq. 4 with the case's alignment: c2p[i, j] = q_i . pos_key[clamp(rel_ij "
                 "+ span)], p2c[i, j] = k_j . pos_query[clamp(-rel_ij + span)]; transformers DebertaV2 "
                 "DisentangledSelfAttention indexes p2c by clamp(rel_ij + span), the .hf cases, and needs "
                 "q_len == k_len for p2c)")


def v3_reference(spec: CaseSpec) -> str:
    """Version 3's reference call of a DeBERTa case: what computes it, where transformers does not."""
    p = spec.params
    if spec.encoding == "relative.deberta.relative_positions" and "query_offset" not in p and p["q_len"] != p["k_len"]:
        return BOTTOM_RIGHT
    if spec.encoding == "relative.deberta.c2p_p2c" and p["p2c_index"] == "paper" and "p2c" in p["pos_att_type"]:
        return DEBERTA_PAPER
    return spec.reference_call


def v3_changes() -> tuple[dict, list]:
    """Version 3 (catalogue docstring): the Transformer-XL reference calls name kimiyoung/transformer-xl's
    ``RelPartialLearnableMultiHeadAttn`` (pytorch/mem_transformer.py), not transformers' TransfoXL, which
    transformers 5 removed (it was deprecated in 4.35); DeBERTa cases that transformers does not compute
    (bottom-right positions, the paper's p2c index) name the computation they hold."""
    fields = {s.name: {"reference_call": _v3_reference(s.reference_call)} for s in cases()
              if TRANSFO_XL in s.reference_call}
    fields.update({s.name: {"reference_call": v3_reference(s)} for s in cases()
                   if v3_reference(s) != s.reference_call})
    # second cases for the golden audit's clamp_len, p2c_index, max_position and query_offset rows
    # (docs/golden-format.md, "The suite's teeth")
    rng = np.random.default_rng(20261205)
    txl = txl_score_case(rng, 3, 6, 6, 3, "memory of 3 with clamp_len=3 (distances 4 and 5 use r_3)")
    new = [replace(txl, reference_call=_v3_reference(txl.reference_call)),
           deberta_score_case(rng, 5, 5, -1, 3, ("c2p", "p2c"), "hf", "square, span 3, p2c index of HF/microsoft "
                              "code (delta(i,j))"),
           deberta_score_case(rng, 5, 5, -1, 3, ("p2c",), "paper", "p2c only, square, span 3"),
           deberta_score_case(rng, 3, 7, 4, 6, ("c2p", "p2c"), "paper", "log buckets b=4, M=6 with |rel| up to 6, "
                              "past M - 1 (a bucket there depends on M)"),
           deberta_score_case(rng, 4, 10, 8, 10, ("c2p", "p2c"), "paper", "log buckets b=8, M=10 with |rel| up to "
                              "9 = M - 1"),
           relative_positions_case("relative.deberta.relative_positions.q2_k20.b8_m12.offset0", 2, 20, 8, 12,
                                   "DeBERTa relative positions query - key; query_offset=0 with log buckets b=8, M=12 "
                                   "(queries at 0 and 1, clamped beyond bucket 7)", query_offset=0)]
    return fields, [replace(c, reference_call=v3_reference(c)) for c in new]


TRANSFO_XL = "transformers TransfoXL"


def _v3_reference(call: str) -> str:
    """A version-2 Transformer-XL reference call as version 3 words it."""
    return call.replace(TRANSFO_XL, "kimiyoung/transformer-xl pytorch/mem_transformer.py").replace(
        " (kimiyoung/transformer-xl _rel_shift)", "")
