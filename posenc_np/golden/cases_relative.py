"""Golden cases for the relative encodings: T5 buckets and bias, Shaw et al., BERT relative_key.

Integer outputs (buckets) must match exactly in every dtype; where well-known ports compute the
log term in floating point and land one bucket off, the case lists that port's buckets as a
known divergence. Float outputs follow :mod:`.tolerance`: table lookups are copies
(:func:`.tolerance.rounded`), every other output is a sum of products of inputs
(:func:`.tolerance.dot`, with the number of terms and a bound on the sum of their magnitudes
taken from the case's shapes and largest inputs).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from ..relative import bert, shaw, t5
from . import oracle_relative as oracle
from . import tolerance as tol
from .spec import CaseSpec, GoldenEncoding, bucket_divergences, conventions, log_in

T5_SIGN = "key - query"
T5_SEMANTICS = "Hugging Face T5 _relative_position_bucket (Mesh TF), exact floor of the log term"
ALIGNMENT = "; query i at position i + k_len - q_len, key j at j"


# --------------------------------------------------------------------------- library evaluators

def _t5_bucket(params, inputs):
    return {"bucket": t5.t5_relative_position_bucket(
        inputs["relative_position"], bidirectional=params["bidirectional"], num_buckets=params["num_buckets"],
        max_distance=params["max_distance"])}


def _t5_bias(params, inputs):
    num_buckets, num_heads = inputs["weight"].shape
    layer = t5.T5RelativeBias(num_heads, num_buckets=num_buckets, max_distance=params["max_distance"],
                              bidirectional=params["bidirectional"])
    layer.params["weight"] = inputs["weight"]
    bias = layer.bias(params["q_len"], params["k_len"])
    layer.bias_backward(inputs["dout"])
    return {"bucket": layer.buckets(params["q_len"], params["k_len"]), "bias": bias,
            "dweight": layer.grads["weight"]}


def _shaw_logits(params, inputs):
    term = shaw.shaw_logits(inputs["q"], inputs["key_table"], params["k_len"], scale=params["scale"])
    dq, dtable = shaw.shaw_logits_backward(inputs["dlogits"], inputs["q"], inputs["key_table"], scale=params["scale"])
    return {"logits_term": term, "dq": dq, "dkey_table": dtable}


def _shaw_values(params, inputs):
    term = shaw.shaw_values(inputs["probs"], inputs["value_table"])
    dprobs, dtable = shaw.shaw_values_backward(inputs["dout"], inputs["probs"], inputs["value_table"])
    return {"values_term": term, "dprobs": dprobs, "dvalue_table": dtable}


def _bert(params, inputs):
    kw = {"mode": params["mode"], "scale": params["scale"]}
    term = bert.bert_relative_scores(inputs["q"], inputs["k"], inputs["table"], **kw)
    dq, dk, dtable = bert.bert_relative_scores_backward(inputs["dscores"], inputs["q"], inputs["k"], inputs["table"],
                                                        **kw)
    out = {"scores_term": term, "dq": dq, "dtable": dtable}
    if dk is not None:
        out["dk"] = dk
    return out


ENCODINGS = [
    GoldenEncoding("t5_bucket", oracle.t5_bucket, _t5_bucket),
    GoldenEncoding("t5_bias", oracle.t5_bias, _t5_bias),
    GoldenEncoding("shaw_logits", oracle.shaw_logits, _shaw_logits),
    GoldenEncoding("shaw_values", oracle.shaw_values, _shaw_values),
    GoldenEncoding("bert_relative", oracle.bert_relative, _bert),
]


# --------------------------------------------------------------------------- third-party arithmetic

def t5_bucket_in(rel, *, bidirectional: bool, num_buckets: int, max_distance: int, dtype) -> np.ndarray:
    """T5's ``_relative_position_bucket`` with its log term in ``dtype`` (float32: torch's default,
    Hugging Face; float64: a NumPy/JAX-x64 port), truncated by ``.to(long)`` as T5 does."""
    rel = np.asarray(rel, dtype=np.int64)
    half = num_buckets // 2 if bidirectional else num_buckets
    offset = np.where(rel > 0, half, 0) if bidirectional else 0
    n = np.abs(rel) if bidirectional else np.maximum(-rel, 0)
    e = half // 2
    ratio = (n.astype(dtype) / dtype(e))
    with np.errstate(divide="ignore", invalid="ignore"):  # log(0) where n < e: not used
        v = np.nan_to_num(log_in(ratio, dtype) / dtype(math.log(max_distance / e)) * dtype(half - e))
    large = np.minimum(e + np.trunc(np.where(n < e, 0, v)).astype(np.int64), half - 1)
    return offset + np.where(n < e, n, large)


def _t5_divergences(rel, bidirectional, num_buckets, max_distance) -> tuple:
    exact = t5.t5_relative_position_bucket(rel, bidirectional=bidirectional, num_buckets=num_buckets,
                                           max_distance=max_distance)
    args = {"bidirectional": bidirectional, "num_buckets": num_buckets, "max_distance": max_distance}
    ports = {"Hugging Face T5Attention._relative_position_bucket (torch float32)":
             t5_bucket_in(rel, dtype=np.float32, **args),
             "T5 bucket expression in float64 (NumPy / JAX x64 ports)": t5_bucket_in(rel, dtype=np.float64, **args)}
    return bucket_divergences("relative_position", rel, exact, ports,
                              "the log term lands just below/above an integer and the truncation picks the "
                              "neighbouring bucket (emulated with correctly rounded log)")


# --------------------------------------------------------------------------- cases

def _maxabs(*arrays) -> float:
    return max(float(np.abs(a).max()) for a in arrays)


def dot_terms(*terms, extra: int = 1, copies: bool = False) -> tuple[dict, str]:
    """Tolerances and error model of a case whose outputs are sums of products: one ``(n, magnitude)``
    per output (``n`` terms, ``magnitude`` bounding the sum of their absolute values), ``extra``
    roundings (the scale); ``copies`` when some output copies table rows."""
    parts = [tol.dot(n, m, extra=extra) for n, m in terms] + ([tol.rounded()] if copies else [])
    model = "dot: " + ", ".join(f"{n} terms" for n, _ in terms) + (" and copies (rounded)" if copies else "")
    return tol.widest(*parts), model + "; inputs rounded once to the dtype"


def _rel(*parts) -> np.ndarray:
    return np.unique(np.concatenate([np.asarray(p, dtype=np.int64).ravel() for p in parts]))


def bucket_case(name, bidirectional, num_buckets, max_distance, rel, description):
    """A ``t5_bucket`` case (exact buckets, with the floating-point ports' divergences)."""
    return CaseSpec(
        name=name,
        encoding="t5_bucket",
        params={"bidirectional": bidirectional, "num_buckets": num_buckets, "max_distance": max_distance},
        conventions=conventions(sign=T5_SIGN, semantics=T5_SEMANTICS),
        inputs={"relative_position": rel},
        tolerances=tol.exact(), error_model="exact: integer buckets",
        reference_call="transformers T5Attention._relative_position_bucket(relative_position, bidirectional, "
                       "num_buckets, max_distance)",
        known_divergences=_t5_divergences(rel, bidirectional, num_buckets, max_distance),
        description=description,
    )
def _bucket_case(tag, bidirectional, num_buckets, max_distance, rel, description):
    direction = "bidirectional" if bidirectional else "unidirectional"
    return bucket_case(f"relative.t5.bucket.{direction}.{tag}", bidirectional, num_buckets, max_distance, rel,
                       description)


def _bucket_cases() -> list[CaseSpec]:
    far = [-(2**40), -1000, -200, 200, 1000, 2**40]
    default_rel = _rel(np.arange(-140, 141), far)
    return [
        _bucket_case("nb32_md128", True, 32, 128, default_rel,
                     "T5 default, encoder: every relative position in [-140, 140] plus far ones; published "
                     "points -200->15, -64->14, -9->8, -1->1, 0->0, 1->17, 8->24, 64->30, 128->31; exact "
                     "log-bucket boundaries at |r| = 16, 32, 64 (values 10/12/14 + offset) and the final clamp "
                     "(|r| >= 128 -> 15 or 31, never 16 or 32)"),
        _bucket_case("nb32_md128", False, 32, 128, default_rel,
                     "T5 default, causal decoder: n = max(-r, 0), every future key in bucket 0; exact range "
                     "0..15, log buckets 16..31, clamp at n >= 128"),
        _bucket_case("nb20_md160", True, 20, 160, _rel(np.arange(-170, 171)),
                     "exact integer log values at |r| = 10, 20, 80 (ln 2 / ln 32 * 5 = 1 etc.): the exact "
                     "buckets are 6/7/9 (+10 when r > 0); T5's expression evaluated in float64 gives one less "
                     "(0.9999999999999999); T5's float32 arithmetic gives the exact value here"),
        _bucket_case("nb32_md939", False, 32, 939, _rel(-np.arange(0, 40), -np.arange(700, 760),
                                                        -np.arange(930, 950), [1, 5]),
                     "causal, non-default max_distance 939: at n = 728 the exact bucket is 30 while T5's "
                     "float32 arithmetic rounds ln(728/16)/ln(939/16)*16 up to 15.0 and gives 31"),
        _bucket_case("nb6_md5", True, 6, 5, _rel(np.arange(-8, 9)),
                     "smallest useful bidirectional table: 3 buckets per direction, exact range 1, "
                     "log buckets for distances 1..4, clamp from 5"),
    ]


def t5_bias_case(bidirectional, num_buckets, max_distance, num_heads, q_len, k_len, seed, *, name=None):
    """A ``t5_bias`` case: the bias of a random table and its gradient for a random cotangent."""
    rng = np.random.default_rng(seed)
    direction = "bidirectional" if bidirectional else "unidirectional"
    dout = rng.standard_normal((num_heads, q_len, k_len))
    n = q_len * k_len  # at most every (i, j) of one head lands in one bucket
    tolerances, model = dot_terms((n, n * _maxabs(dout)), extra=0, copies=True)
    return CaseSpec(
        name=name or f"relative.t5.bias.{direction}.nb{num_buckets}_md{max_distance}.h{num_heads}_q{q_len}_k{k_len}",
        encoding="t5_bias",
        params={"bidirectional": bidirectional, "max_distance": max_distance, "q_len": q_len, "k_len": k_len},
        conventions=conventions(layout="table (num_buckets, num_heads); bias (num_heads, q_len, k_len)",
                                sign=T5_SIGN, scale_placement="added to the logits, never multiplied by a scale",
                                semantics="Hugging Face T5Attention.compute_bias" + ALIGNMENT),
        inputs={"weight": rng.standard_normal((num_buckets, num_heads)), "dout": dout},
        tolerances=tolerances, error_model=model,
        reference_call="transformers T5Attention.compute_bias(query_length, key_length) (bias) and its autograd "
                       "gradient w.r.t. relative_attention_bias.weight",
        description=f"T5 bias with q_len={q_len} < k_len={k_len} (queries are the last positions), distances "
                    f"past max_distance={max_distance} (clamp) and the table gradient (scatter-add over buckets)",
    )


SHAW_CONV = conventions(layout="q (batch, heads, q_len, d); tables (2K+1, d) shared across heads",
                        sign="key - query, clipped to [-K, K], index + K",
                        scale_placement="relative logit term multiplied by the attention scale 1/sqrt(d)",
                        semantics="Shaw et al. 2018 / tensor2tensor dot_product_attention_relative" + ALIGNMENT)


def shaw_logits_case(rng, kmax, d, heads, q_len, k_len, scale, description=None) -> CaseSpec:
    """A ``shaw_logits`` case: the relative key term, its q gradient and the key-table scatter-add."""
    q, table = rng.standard_normal((1, heads, q_len, d)), rng.standard_normal((2 * kmax + 1, d))
    g = rng.standard_normal((1, heads, q_len, k_len))
    n_table = heads * q_len * k_len
    tolerances, model = dot_terms((d, scale * d * _maxabs(q) * _maxabs(table)),
                                  (k_len, scale * k_len * _maxabs(g) * _maxabs(table)),
                                  (n_table, scale * n_table * _maxabs(g) * _maxabs(q)))
    return CaseSpec(
        name=f"relative.shaw.logits.k{kmax}.b1_h{heads}_q{q_len}_k{k_len}_d{d}",
        encoding="shaw_logits",
        params={"max_relative_position": kmax, "k_len": k_len, "scale": scale},
        conventions=SHAW_CONV,
        inputs={"q": q, "key_table": table, "dlogits": g},
        tolerances=tolerances, error_model=model,
        reference_call="tensor2tensor.layers.common_attention._relative_attention_inner(x, y, z, transpose=True) "
                       "(dot_product_attention_relative) and its autograd gradients",
        description=description or (
            f"relative key term s*q_i.wK[clip(j-i,-{kmax},{kmax})+{kmax}] with s = {scale:g}, q_len={q_len} < "
            f"k_len={k_len} (queries are the last {q_len} positions; |j-i| up to {k_len - 1}), its q gradient and the "
            "scatter-add gradient of the shared key table"),
    )


def _shaw_cases() -> list[CaseSpec]:
    rng = np.random.default_rng(20261201)
    kmax, d, heads = 2, 4, 2
    conv = SHAW_CONV
    logits = shaw_logits_case(rng, kmax, d, heads, 5, 5, 0.5,  # 0.5 = 1/sqrt(d) for d = 4, exact in binary
                              "relative key term s*q_i.wK[clip(j-i,-2,2)+2] with clipping (|j-i| up to 4), its q "
                              "gradient and the scatter-add gradient of the shared key table")
    q_len, k_len, dv = 3, 6, 3
    probs = rng.random((1, heads, q_len, k_len))
    probs /= probs.sum(axis=-1, keepdims=True)
    vtable, u = rng.standard_normal((2 * kmax + 1, dv)), rng.standard_normal((1, heads, q_len, dv))
    n_table = heads * q_len * k_len
    tolerances, model = dot_terms((k_len, k_len * _maxabs(vtable)), (dv, dv * _maxabs(u) * _maxabs(vtable)),
                                  (n_table, n_table * _maxabs(u)), extra=0)
    values = CaseSpec(
        name=f"relative.shaw.values.k{kmax}.b1_h{heads}_q{q_len}_k{k_len}_dv{dv}",
        encoding="shaw_values",
        params={"max_relative_position": kmax},
        conventions=conventions(layout="probs (batch, heads, q_len, k_len); value table (2K+1, d_v) shared across "
                                       "heads", sign="key - query, clipped to [-K, K], index + K",
                                scale_placement="n/a (added to the attention output)",
                                semantics=conv["semantics"]),
        inputs={"probs": probs, "value_table": vtable, "dout": u},
        tolerances=tolerances, error_model=model,
        reference_call="tensor2tensor.layers.common_attention._relative_attention_inner(weights, "
                       "relations_values, transpose=False) and its autograd gradients",
        description="relative value term sum_j p_ij wV[idx_ij] with q_len=3 < k_len=6 (queries are the last "
                    "3 positions, as in tensor2tensor), dprobs and the value-table scatter-add",
    )
    return [logits, values]


def _bert_case(mode, q_len, k_len, tag, seed):
    rng = np.random.default_rng(seed)
    big_p, d, heads = 6, 4, 2
    q, k = rng.standard_normal((1, heads, q_len, d)), rng.standard_normal((1, heads, k_len, d))
    table, g = rng.standard_normal((2 * big_p - 1, d)), rng.standard_normal((1, heads, q_len, k_len))
    both = 2 if mode.endswith("query") else 1
    qk, n_table = _maxabs(q, k), both * heads * q_len * k_len
    tolerances, model = dot_terms((both * d, 0.5 * both * d * qk * _maxabs(table)),
                                  (max(q_len, k_len), 0.5 * max(q_len, k_len) * _maxabs(g) * _maxabs(table)),
                                  (n_table, 0.5 * n_table * _maxabs(g) * qk))
    return CaseSpec(
        name=f"relative.bert.{mode}.p{big_p}.b1_h{heads}_q{q_len}_k{k_len}_d{d}{tag}",
        encoding="bert_relative",
        params={"mode": mode, "max_position_embeddings": big_p, "scale": 0.5},
        conventions=conventions(
            layout="q, k (batch, heads, len, d); table (2P-1, d) shared across heads",
            sign="query - key, unclipped, index + P - 1",
            scale_placement="relative scores added to raw q.k, the sum divided by sqrt(d) (term multiplied by "
                            "1/sqrt(d) = 0.5)",
            semantics="Hugging Face BertSelfAttention position_embedding_type=" + mode + ALIGNMENT),
        inputs={"q": q, "k": k, "table": table, "dscores": g},
        tolerances=tolerances, error_model=model,
        reference_call=f"transformers BertSelfAttention(config, position_embedding_type={mode!r}) relative term "
                       "(einsum with distance_embedding) and its autograd gradients",
        description=f"BERT {mode} scores, their q{'/k' if mode.endswith('query') else ''} gradients and the "
                    f"distance-table scatter-add; q_len={q_len}, k_len={k_len} (k_len = P uses the whole table)",
    )


def cases() -> list[CaseSpec]:
    out = _bucket_cases()
    out.append(t5_bias_case(True, 8, 12, 2, 5, 16, 20261202))
    out.append(t5_bias_case(False, 8, 10, 3, 6, 14, 20261203))
    out += _shaw_cases()
    out.append(_bert_case("relative_key", 5, 5, "", 20261204))
    out.append(_bert_case("relative_key_query", 5, 5, "", 20261205))
    out.append(_bert_case("relative_key", 1, 6, ".decode", 20261206))
    return out


#: Version 3: transformers 5 removed BERT's relative position types (huggingface/transformers#41170).
BERT_REMOVED = ("transformers 4.x ", " (removed in transformers 5.0, huggingface/transformers#41170)")


def _v3_bert(spec: CaseSpec) -> CaseSpec:
    return replace(spec, reference_call=BERT_REMOVED[0] + spec.reference_call.removeprefix("transformers ")
                   + BERT_REMOVED[1])


def v3_changes() -> tuple[dict, list]:
    """Version 3 (catalogue docstring): the BERT cases name transformers 4.x, where ``relative_key`` and
    ``relative_key_query`` last exist; second cases for the golden audit's Shaw ``scale``/``k_len`` and BERT
    ``mode`` rows (docs/golden-format.md, "The suite's teeth"): Shaw logits for a decode-like block with
    another scale, and ``relative_key_query`` for one query against six keys."""
    fields = {s.name: {"reference_call": _v3_bert(s).reference_call} for s in cases()
              if s.encoding == "bert_relative"}
    return fields, [shaw_logits_case(np.random.default_rng(20261207), 3, 4, 2, 3, 6, 0.25),
                    _v3_bert(_bert_case("relative_key_query", 1, 6, ".decode", 20261208))]
