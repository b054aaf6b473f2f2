"""Golden cases for the relative encodings: T5 buckets and bias, Shaw et al., BERT relative_key.

Integer outputs (buckets) must match exactly. Float tolerances are in float64 eps units, about
four times the error measured when the cases were written (see each comment).
"""

from __future__ import annotations

import numpy as np

from ..relative import bert, shaw, t5
from . import oracle_relative as oracle
from .spec import CaseSpec, Encoding, conventions, exact, tolerance

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
    Encoding("t5_bucket", oracle.t5_bucket, _t5_bucket),
    Encoding("t5_bias", oracle.t5_bias, _t5_bias),
    Encoding("shaw_logits", oracle.shaw_logits, _shaw_logits),
    Encoding("shaw_values", oracle.shaw_values, _shaw_values),
    Encoding("bert_relative", oracle.bert_relative, _bert),
]


# --------------------------------------------------------------------------- cases

def _rel(*parts) -> np.ndarray:
    return np.unique(np.concatenate([np.asarray(p, dtype=np.int64).ravel() for p in parts]))


def _bucket_case(name, bidirectional, num_buckets, max_distance, rel, description):
    direction = "bidirectional" if bidirectional else "unidirectional"
    return CaseSpec(
        name=f"relative.t5.bucket.{direction}.{name}",
        encoding="t5_bucket",
        params={"bidirectional": bidirectional, "num_buckets": num_buckets, "max_distance": max_distance},
        conventions=conventions(sign=T5_SIGN, semantics=T5_SEMANTICS),
        inputs={"relative_position": rel},
        tolerance=exact(),
        description=description,
    )


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


def _t5_bias_case(bidirectional, num_buckets, max_distance, num_heads, q_len, k_len, seed):
    rng = np.random.default_rng(seed)
    direction = "bidirectional" if bidirectional else "unidirectional"
    return CaseSpec(
        name=f"relative.t5.bias.{direction}.nb{num_buckets}_md{max_distance}.h{num_heads}_q{q_len}_k{k_len}",
        encoding="t5_bias",
        params={"bidirectional": bidirectional, "max_distance": max_distance, "q_len": q_len, "k_len": k_len},
        conventions=conventions(layout="table (num_buckets, num_heads); bias (num_heads, q_len, k_len)",
                                sign=T5_SIGN, scale_placement="added to the logits, never multiplied by a scale",
                                semantics="Hugging Face T5Attention.compute_bias" + ALIGNMENT),
        inputs={"weight": rng.standard_normal((num_buckets, num_heads)),
                "dout": rng.standard_normal((num_heads, q_len, k_len))},
        # bias is a copy (exact); dweight sums up to q_len*k_len normal values per bucket in
        # np.add.at order: measured 8.9e-16 = 4 eps absolute; bound 16 eps absolute + 4 eps relative.
        tolerance=tolerance(abs_eps=16, rel_eps=4),
        description=f"T5 bias with q_len={q_len} < k_len={k_len} (queries are the last positions), distances "
                    f"past max_distance={max_distance} (clamp) and the table gradient (scatter-add over buckets)",
    )


def _shaw_cases() -> list[CaseSpec]:
    rng = np.random.default_rng(20261201)
    kmax, d, heads = 2, 4, 2
    scale = 0.5  # 1/sqrt(d) for d = 4, exact in binary
    q_len = k_len = 5
    conv = conventions(layout="q (batch, heads, q_len, d); tables (2K+1, d) shared across heads",
                       sign="key - query, clipped to [-K, K], index + K",
                       scale_placement="relative logit term multiplied by the attention scale 1/sqrt(d)",
                       semantics="Shaw et al. 2018 / tensor2tensor dot_product_attention_relative" + ALIGNMENT)
    logits = CaseSpec(
        name=f"relative.shaw.logits.k{kmax}.b1_h{heads}_q{q_len}_k{k_len}_d{d}",
        encoding="shaw_logits",
        params={"max_relative_position": kmax, "k_len": k_len, "scale": scale},
        conventions=conv,
        inputs={"q": rng.standard_normal((1, heads, q_len, d)), "key_table": rng.standard_normal((2 * kmax + 1, d)),
                "dlogits": rng.standard_normal((1, heads, q_len, k_len))},
        # length-4 dot products and table sums of up to 2*5*5 products of normals: measured
        # 6.7e-16 = 3 eps absolute; bound 16 eps absolute + 4 eps relative.
        tolerance=tolerance(abs_eps=16, rel_eps=4),
        description="relative key term s*q_i.wK[clip(j-i,-2,2)+2] with clipping (|j-i| up to 4), its q gradient "
                    "and the scatter-add gradient of the shared key table",
    )
    q_len, k_len, dv = 3, 6, 3
    probs = rng.random((1, heads, q_len, k_len))
    probs /= probs.sum(axis=-1, keepdims=True)
    values = CaseSpec(
        name=f"relative.shaw.values.k{kmax}.b1_h{heads}_q{q_len}_k{k_len}_dv{dv}",
        encoding="shaw_values",
        params={"max_relative_position": kmax},
        conventions=conventions(layout="probs (batch, heads, q_len, k_len); value table (2K+1, d_v) shared across "
                                       "heads", sign="key - query, clipped to [-K, K], index + K",
                                scale_placement="n/a (added to the attention output)",
                                semantics=conv["semantics"]),
        inputs={"probs": probs, "value_table": rng.standard_normal((2 * kmax + 1, dv)),
                "dout": rng.standard_normal((1, heads, q_len, dv))},
        # sums of up to 2*3*6 products of terms below 3 in size: measured 4.4e-16 = 2 eps absolute;
        # bound 8 eps absolute + 4 eps relative.
        tolerance=tolerance(abs_eps=8, rel_eps=4),
        description="relative value term sum_j p_ij wV[idx_ij] with q_len=3 < k_len=6 (queries are the last "
                    "3 positions, as in tensor2tensor), dprobs and the value-table scatter-add",
    )
    return [logits, values]


def _bert_case(mode, q_len, k_len, tag, seed):
    rng = np.random.default_rng(seed)
    big_p, d, heads = 6, 4, 2
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
        inputs={"q": rng.standard_normal((1, heads, q_len, d)), "k": rng.standard_normal((1, heads, k_len, d)),
                "table": rng.standard_normal((2 * big_p - 1, d)),
                "dscores": rng.standard_normal((1, heads, q_len, k_len))},
        # length-4 (two for relative_key_query) dot products, table sums of up to 2*q*k products of
        # normals: measured 8.9e-16 = 4 eps absolute (relative_key_query); bound 16 eps absolute
        # + 4 eps relative.
        tolerance=tolerance(abs_eps=16, rel_eps=4),
        description=f"BERT {mode} scores, their q{'/k' if mode.endswith('query') else ''} gradients and the "
                    f"distance-table scatter-add; q_len={q_len}, k_len={k_len} (k_len = P uses the whole table)",
    )


def cases() -> list[CaseSpec]:
    out = _bucket_cases()
    out.append(_t5_bias_case(True, 8, 12, 2, 5, 16, 20261202))
    out.append(_t5_bias_case(False, 8, 10, 3, 6, 14, 20261203))
    out += _shaw_cases()
    out.append(_bert_case("relative_key", 5, 5, "", 20261204))
    out.append(_bert_case("relative_key_query", 5, 5, "", 20261205))
    out.append(_bert_case("relative_key", 1, 6, ".decode", 20261206))
    return out
