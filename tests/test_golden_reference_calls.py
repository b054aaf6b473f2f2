"""Every version-3 case's ``reference_call``, transcribed to NumPy float64 operation by operation in the
order the named third-party code runs it, passes the case's float64 tolerance (issue 25; docs/golden-format.md,
"The error model" and "Known divergences and reference calls").

Each ``ref_*`` function below is an independent transcription of the named code (no posenc_np encoding is
called): where that code hard-codes ``torch.float`` / ``float32`` (every transformers ``ROPE_INIT_FUNCTIONS``),
"in float64" means the same operations with every tensor in float64. Gradients ("its autograd VJP /
gradients") are the transposed maps autograd builds (rotation by ``-angle``, scatter-add for a gather, the
adjoint of pad/reshape for ``_rel_shift``, the softmax backward). ``n/a`` reference calls get an ordinary
float64 few-liner of the case's formula. The transcriptions were compared once, outside the suite, with the
real code in float64 (transformers 5.24 and torch 2.14 with torch.float patched to float64, x-transformers,
rotary-embedding-torch) where it exists; this file needs NumPy only.

The expected values are the committed vectors (read through the trusted loader). A float64 divergence the
case already lists (``known_divergences``) must be reproduced exactly by the emulation; a reference call that
fails the case as written and is not listed is in ``KNOWN_FAILURES`` (strict xfail) with the measured excess.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from posenc_np.golden import catalogue, model_cases, runner
from posenc_np.golden import format as fmt
from posenc_np.hf_config import read_hf_config

REPO = Path(__file__).resolve().parent.parent
V3 = REPO / "vectors" / "v3"
SPECS = catalogue.by_name(3)


def stored(name: str) -> tuple[dict, dict, dict]:
    """``(params, inputs, expected outputs)`` of a committed version-3 case."""
    doc, _ = runner.load_case_file(V3 / f"{name}.json")
    return doc["params"], fmt.arrays(doc, "inputs"), fmt.arrays(doc, "outputs")


def _cat(*xs):
    return np.concatenate(xs, axis=-1)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


# =========================================================================== absolute

def ref_pytorch_tutorial_pe(p, x):
    """PyTorch 'Language Modeling with nn.Transformer' PositionalEncoding, positions = the case's."""
    d = p["dim"]
    position = x["positions"].astype(np.float64)[..., None]
    div_term = np.exp(np.arange(0, d, 2).astype(np.float64) * (-math.log(p["base"]) / d))
    pe = np.zeros(position.shape[:-1] + (d,))
    pe[..., 0::2] = np.sin(position * div_term)
    pe[..., 1::2] = np.cos(position * div_term)
    return {"encoding": pe}


def ref_distilbert_create_sinusoidal(p, x):
    """transformers create_sinusoidal_embeddings: pos / np.power(10000, 2 * (j // 2) / dim)."""
    d = p["dim"]
    pos = x["positions"].astype(np.float64)
    enc = np.array([[q / np.power(p["base"], 2 * (j // 2) / d) for j in range(d)] for q in pos.ravel()])
    out = np.zeros_like(enc)
    out[:, 0::2] = np.sin(enc[:, 0::2])
    out[:, 1::2] = np.cos(enc[:, 1::2])
    return {"encoding": out.reshape(pos.shape + (d,))}


def ref_txl_positional_embedding(p, x):
    """kimiyoung PositionalEmbedding: inv_freq = 1 / (10000 ** (arange(0, d, 2) / d)); [sin | cos] of ger."""
    d = p["dim"]
    inv_freq = 1 / (p["base"] ** (np.arange(0.0, d, 2.0) / d))
    sinusoid_inp = np.multiply.outer(x["positions"].astype(np.float64), inv_freq)
    return {"encoding": _cat(np.sin(sinusoid_inp), np.cos(sinusoid_inp))}


def ref_t2t_timing_signal(p, x):
    """tensor2tensor get_timing_signal_1d (positions = the case's, plus start_index)."""
    channels, tmin, tmax = p["dim"], p["min_timescale"], p["max_timescale"]
    position = (x["positions"] + p["start_index"]).astype(np.float64)
    num_timescales = channels // 2
    log_timescale_increment = math.log(float(tmax) / float(tmin)) / max(float(num_timescales) - 1, 1)
    inv_timescales = tmin * np.exp(np.arange(num_timescales).astype(np.float64) * -log_timescale_increment)
    scaled_time = position[:, None] * inv_timescales[None, :]
    signal = _cat(np.sin(scaled_time), np.cos(scaled_time))
    return {"encoding": np.pad(signal, [[0, 0], [0, channels % 2]])}


def ref_embedding(p, x):
    """torch.nn.Embedding lookup and its weight gradient (embedding_dense_backward: index_add)."""
    w, pos, g = x["weight"], x["positions"], x["dout"]
    dw = np.zeros_like(w)
    np.add.at(dw, pos.ravel(), g.reshape(-1, w.shape[1]))
    return {"output": w[pos], "dweight": dw}


# =========================================================================== ALiBi

def bloom_slopes(n):
    """transformers build_alibi_tensor's slopes (torch.pow of the base), float64."""
    closest = 2 ** math.floor(math.log2(n))
    base = 2 ** (-(2 ** -(math.log2(closest) - 3)))
    slopes = np.power(base, np.arange(1, 1 + closest, dtype=np.float64))
    if closest != n:
        extra_base = 2 ** (-(2 ** -(math.log2(2 * closest) - 3)))
        num_remaining = min(closest, n - closest)
        slopes = np.concatenate([slopes, np.power(extra_base, np.arange(1, 1 + 2 * num_remaining, 2,
                                                                        dtype=np.float64))])
    return slopes


def paper_get_slopes(n):
    """ofirpress/attention_with_linear_biases get_slopes."""
    def power_of_2(m):
        start = 2 ** (-2 ** -(math.log2(m) - 3))
        ratio = start
        return [start * ratio ** i for i in range(m)]
    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + paper_get_slopes(2 * closest)[0::2][:n - closest]


def mpt_gen_slopes(n_heads, alibi_bias_max=8.0):
    """llm-foundry gen_slopes."""
    _n_heads = 2 ** math.ceil(math.log2(n_heads))
    m = np.arange(1, _n_heads + 1, dtype=np.float64)
    m = m * (alibi_bias_max / _n_heads)
    slopes = 1.0 / np.power(2, m)
    if _n_heads != n_heads:
        slopes = np.concatenate([slopes[1::2], slopes[::2]])[:n_heads]
    return slopes


def ref_alibi_slopes_bloom(p, x):
    return {"slopes": bloom_slopes(p["num_heads"])}


def ref_alibi_slopes_paper(p, x):
    return {"slopes": np.array(paper_get_slopes(p["num_heads"]))}


def ref_alibi_slopes_mpt(p, x):
    return {"slopes": mpt_gen_slopes(p["num_heads"], p["max_bias"])}


def ref_alibi_bias_causal(p, x):
    """Press et al. / fairseq: slopes * relative position (key - query); the buffered future mask is -inf
    above the diagonal, so only the entries it keeps are compared (``keep``)."""
    h, q, k, off = p["num_heads"], p["q_len"], p["k_len"], p["q_offset"]
    slopes = np.array(paper_get_slopes(h))
    rel = np.arange(k)[None, :] - (np.arange(q) + off)[:, None]
    future = np.triu(np.full((q, k), -np.inf), 1 + off)
    return {"bias": slopes[:, None, None] * rel + future}


def ref_alibi_bias_mpt(p, x):
    """llm-foundry build_alibi_bias(n_heads, seq_len=k_len, full=True): rows of the last q_len queries."""
    h, q, k = p["num_heads"], p["q_len"], p["k_len"]
    alibi_bias = np.arange(1 - k, 1).reshape(1, 1, 1, k)
    alibi_bias = alibi_bias - np.arange(1 - k, 1).reshape(1, 1, k, 1)
    alibi_bias = np.abs(alibi_bias) * -1
    slopes = x["slopes"] if "slopes" in x else mpt_gen_slopes(h, p["max_bias"])
    alibi_bias = alibi_bias.astype(np.float64) * slopes.reshape(1, h, 1, 1)
    return {"bias": alibi_bias[0, :, k - q:, :]}


def ref_alibi_bias_bloom(p, x):
    """transformers build_alibi_tensor(attention_mask of ones, num_heads): slopes * cumsum positions."""
    h, q, k = p["num_heads"], p["q_len"], p["k_len"]
    attention_mask = np.ones((1, k), dtype=np.int64)
    arange_tensor = ((np.cumsum(attention_mask, axis=-1) - 1) * attention_mask)[:, None, :]
    alibi = bloom_slopes(h)[..., None] * arange_tensor  # (1, h, k)
    return {"bias": np.broadcast_to(alibi.reshape(h, 1, k), (h, q, k)).copy()}


def _softmax_attention(s, v, g, qm, km, scale):
    """softmax(s) v with the autograd backward (math SDPA): returns out, dq, dk, dv."""
    m = np.max(s, axis=-1, keepdims=True)
    e = np.exp(s - m)
    probs = e / np.sum(e, axis=-1, keepdims=True)
    out = probs @ v
    dv = np.swapaxes(probs, -1, -2) @ g
    dp = g @ np.swapaxes(v, -1, -2)
    ds = probs * (dp - np.sum(dp * probs, axis=-1, keepdims=True))
    dq = (ds @ km) * scale
    dk = (np.swapaxes(ds, -1, -2) @ qm) * scale
    return out, dq, dk, dv


def ref_sdpa_alibi(p, x):
    """torch scaled_dot_product_attention(q, k, v, attn_mask=alibi_bias) (math reference: q k^T * scale +
    bias, softmax, @ v) and its autograd gradients; bias = paper slopes, bottom-right aligned."""
    q, k, v, g = x["q"], x["k"], x["v"], x["dout"]
    h, ql, kl, d = q.shape[-3], q.shape[-2], k.shape[-2], q.shape[-1]
    scale = 1 / math.sqrt(d) if p["scale"] is None else p["scale"]
    slopes = np.array(paper_get_slopes(h))[:, None, None]
    rel = np.arange(kl)[None, :] - (np.arange(ql) + kl - ql)[:, None]
    if p["causal"]:
        bias = slopes * rel + np.triu(np.full((ql, kl), -np.inf), 1 + kl - ql)
    else:
        bias = -slopes * np.abs(rel)
    attn = q @ np.swapaxes(k, -1, -2) * scale + bias
    out, dq, dk, dv = _softmax_attention(attn, v, g, q, k, scale)
    return {"out": out, "dq": dq, "dk": dk, "dv": dv}


# =========================================================================== CoPE, KERPLE, Sandwich, FIRE, DPB

def ref_xtransformers_cope(p, x):
    """x_transformers CoPE.forward(query, attn_logits): gates = sigmoid(logits), pos = flip-cumsum-flip,
    clamp(max_pos - 1), logits_int = q . pos_emb, gather at ceil/floor, linear interpolation."""
    q, k, table, keep = x["q"], x["k"], x["table"], x["mask"]
    attn_logits = p["gate_scale"] * (q @ np.swapaxes(k, -1, -2))
    attn_logits = np.where(keep, attn_logits, -np.finfo(np.float64).max)
    with np.errstate(over="ignore"):  # exp(finfo.max) = inf: the gate is 0, as torch.sigmoid gives
        gates = _sigmoid(attn_logits)
    pos = np.flip(np.cumsum(np.flip(gates, -1), axis=-1), -1)
    positions = pos.copy()
    pos = np.minimum(pos, table.shape[0] - 1)
    logits_int = np.einsum("bhnd,pd->bhnp", q, table)
    pos_ceil, pos_floor = np.ceil(pos).astype(np.int64), np.floor(pos).astype(np.int64)
    logits_ceil = np.take_along_axis(logits_int, pos_ceil, -1)
    logits_floor = np.take_along_axis(logits_int, pos_floor, -1)
    w = pos - pos_floor
    return {"positions": positions, "term": logits_ceil * w + logits_floor * (1 - w)}


def _kerple_distance(p):
    q, k = p["q_len"], p["k_len"]
    return np.abs(np.arange(q)[:, None] + k - q - np.arange(k)[None, :]).astype(np.float64)


def ref_kerple_log(p, x):
    """ParallelKerpleLog: -bias_p * log(1 + bias_a * diff)."""
    return {"bias": -x["r1"][:, None, None] * np.log(1 + x["r2"][:, None, None] * _kerple_distance(p))}


def ref_kerple_power(p, x):
    """ParallelKerplePower: -bias_p * diff ** bias_a."""
    return {"bias": -x["r1"][:, None, None] * _kerple_distance(p) ** x["r2"][:, None, None]}


def ref_sandwich(p, x):
    """n/a: ordinary float64 of the paper's bias, (sum_k cos((m-n) w_k) - d'/2) / rho_h."""
    H, q, k, d = p["num_heads"], p["q_len"], p["k_len"], p["dim"]
    w = 10000.0 ** (-np.arange(1, d // 2 + 1) * 2 / d)
    rel = (np.arange(q)[:, None] + k - q - np.arange(k)[None, :]).astype(np.float64)
    s = np.sum(np.cos(rel[..., None] * w), axis=-1) - d / 2
    rho = 8.0 * np.arange(1, H + 1) / H if p["compression"] == "alibi" else np.ones(H)
    return {"bias": s[None] / rho[:, None, None]}


def ref_fire(p, x):
    """FIRE (Li et al. 2023, appendix code) forward on k_len positions, rows of the queries; nn.Linear
    weights given transposed (x @ w + b)."""
    q, k, off = p["q_len"], p["k_len"], p["query_offset"]
    positions = np.arange(max(k, q + off), dtype=np.float64)
    rel_distance = positions[:, None] - positions[None, :]
    threshold = np.abs(x["L_multiplier"][0] * p["init_L"])
    pos_normalizer = np.maximum(positions, threshold)[:, None]
    rel_distance = np.log(np.abs(x["c"][0] * rel_distance) + 1)
    pos_normalizer = np.log(np.abs(x["c"][0] * pos_normalizer) + 1) + p["eps"]
    normalized = (rel_distance / pos_normalizer)[off:off + q, :k]
    hidden = np.maximum(normalized[..., None] @ x["w1"] + x["b1"], 0)
    bias = hidden @ x["w2"] + x["b2"]
    return {"distance": normalized, "bias": np.moveaxis(bias, -1, 0)}


def ref_xtransformers_dpb(p, x):
    """x_transformers DynamicPositionBias(i, j): MLP (Linear, SiLU)* Linear on pos = arange(-n+1, n),
    sign * log(|pos| + 1), gathered at query - key + n - 1; the caller keeps the last i rows."""
    q, k, off = p["q_len"], p["k_len"], p["query_offset"]
    n = max(k, q + off)
    indices = np.arange(n)[:, None] - np.arange(n)[None, :] + (n - 1)
    pos = np.arange(-n + 1, n).astype(np.float64)[:, None]
    if p["log_distance"]:
        pos = np.sign(pos) * np.log(np.abs(pos) + 1)
    mlp_in = pos[:, 0][indices][off:off + q, :k]
    layers = 1
    while f"w{layers + 1}" in x:
        layers += 1
    for i in range(1, layers + 1):
        pos = pos @ x[f"w{i}"] + x[f"b{i}"]
        if i < layers:
            pos = pos * _sigmoid(pos)  # nn.SiLU
    bias = pos[indices][off:off + q, :k]
    return {"mlp_input": mlp_in, "bias": np.moveaxis(bias, -1, 0)}


# =========================================================================== T5, Shaw, BERT

def t5_relative_position_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    """transformers T5Attention._relative_position_bucket, with .float() as float64."""
    relative_position = np.asarray(relative_position, dtype=np.int64)
    relative_buckets = 0
    if bidirectional:
        num_buckets //= 2
        relative_buckets += (relative_position > 0).astype(np.int64) * num_buckets
        relative_position = np.abs(relative_position)
    else:
        relative_position = -np.minimum(relative_position, np.zeros_like(relative_position))
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    with np.errstate(divide="ignore", invalid="ignore"):
        large = (np.log(relative_position.astype(np.float64) / max_exact) / math.log(max_distance / max_exact)
                 * (num_buckets - max_exact))
    large = max_exact + np.where(is_small, 0, large).astype(np.int64)
    large = np.minimum(large, np.full_like(large, num_buckets - 1))
    return relative_buckets + np.where(is_small, relative_position, large)


def ref_t5_bucket(p, x):
    return {"bucket": t5_relative_position_bucket(x["relative_position"], p["bidirectional"],
                                                  p["num_buckets"], p["max_distance"])}


def ref_t5_compute_bias(p, x):
    """T5Attention.compute_bias(q_len, k_len, past_seen_tokens=k_len - q_len) and the embedding's weight
    gradient for dout."""
    w, g = x["weight"], x["dout"]
    q, k = p["q_len"], p["k_len"]
    context_position = np.arange(q)[:, None] + (k - q)
    memory_position = np.arange(k)[None, :]
    bucket = t5_relative_position_bucket(memory_position - context_position, p["bidirectional"], w.shape[0],
                                         p["max_distance"])
    values = w[bucket]  # (q, k, heads)
    dw = np.zeros_like(w)
    np.add.at(dw, bucket.ravel(), np.moveaxis(g, 0, -1).reshape(-1, w.shape[1]))
    return {"bucket": bucket, "bias": np.moveaxis(values, -1, 0), "dweight": dw}


def t2t_relative_positions_matrix(length_q, length_k, max_relative_position):
    """tensor2tensor _generate_relative_positions_matrix (cache=False)."""
    range_vec_k = np.arange(length_k)
    range_vec_q = range_vec_k[-length_q:]
    distance_mat = range_vec_k[None, :] - range_vec_q[:, None]
    return np.clip(distance_mat, -max_relative_position, max_relative_position) + max_relative_position


def ref_shaw_logits(p, x):
    """t2t _relative_attention_inner(q * scale, relations_keys, transpose=True): the relative term, and
    autograd: d(q*s) = G z, dz = G^T (q*s) scattered back through the table gather."""
    q, table, g = x["q"], x["key_table"], x["dlogits"]
    s, kmax, kl = p["scale"], p["max_relative_position"], p["k_len"]
    ql = q.shape[-2]
    idx = t2t_relative_positions_matrix(ql, kl, kmax)
    z = table[idx]  # (q, k, d)
    qs = q * s
    term = np.einsum("bhqd,qkd->bhqk", qs, z)
    dq = np.einsum("bhqk,qkd->bhqd", g, z) * s
    dz = np.einsum("bhqk,bhqd->qkd", g, qs)
    dtable = np.zeros_like(table)
    np.add.at(dtable, idx.ravel(), dz.reshape(-1, table.shape[1]))
    return {"logits_term": term, "dq": dq, "dkey_table": dtable}


def ref_shaw_values(p, x):
    """t2t _relative_attention_inner(weights, relations_values, transpose=False) and its gradients."""
    probs, table, g = x["probs"], x["value_table"], x["dout"]
    ql, kl = probs.shape[-2:]
    idx = t2t_relative_positions_matrix(ql, kl, p["max_relative_position"])
    z = table[idx]
    term = np.einsum("bhqk,qkd->bhqd", probs, z)
    dprobs = np.einsum("bhqd,qkd->bhqk", g, z)
    dz = np.einsum("bhqk,bhqd->qkd", probs, g)
    dtable = np.zeros_like(table)
    np.add.at(dtable, idx.ravel(), dz.reshape(-1, table.shape[1]))
    return {"values_term": term, "dprobs": dprobs, "dvalue_table": dtable}


def ref_bert_relative(p, x):
    """BertSelfAttention relative_key(_query): distance = position_ids_l - position_ids_r (l = key_length - 1
    when decoding one query), embedding(distance + P - 1), einsum terms; / sqrt(head_size) afterwards."""
    q, k, table, g = x["q"], x["k"], x["table"], x["dscores"]
    ql, kl, d = q.shape[-2], k.shape[-2], q.shape[-1]
    both, P = p["mode"] == "relative_key_query", p["max_position_embeddings"]
    position_ids_l = np.array([[kl - 1]]) if ql == 1 else np.arange(ql)[:, None]
    position_ids_r = np.arange(kl)[None, :]
    distance = position_ids_l - position_ids_r
    idx = distance + P - 1
    emb = table[idx]
    rel = np.einsum("bhld,lrd->bhlr", q, emb)
    if both:
        rel = rel + np.einsum("bhrd,lrd->bhlr", k, emb)
    scale = 1 / math.sqrt(d)
    assert scale == p["scale"]
    gs = g * scale
    out = {"scores_term": rel * scale, "dq": np.einsum("bhlr,lrd->bhld", gs, emb)}
    demb = np.einsum("bhlr,bhld->lrd", gs, q)
    if both:
        out["dk"] = np.einsum("bhlr,lrd->bhrd", gs, emb)
        demb = demb + np.einsum("bhlr,bhrd->lrd", gs, k)
    dtable = np.zeros_like(table)
    np.add.at(dtable, idx.ravel(), demb.reshape(-1, d))
    out["dtable"] = dtable
    return out


# =========================================================================== Transformer-XL

def txl_rel_shift(x):
    """kimiyoung _rel_shift on the last two axes: cat([zero_pad, x], 1), view(K+1, Q), [1:], view_as(x)."""
    *lead, Q, K = x.shape
    x_padded = np.concatenate([np.zeros((*lead, Q, 1)), x], axis=-1)
    x_padded = x_padded.reshape(*lead, K + 1, Q)
    return x_padded[..., 1:, :].reshape(x.shape)


def txl_rel_shift_vjp(g):
    """Autograd of _rel_shift: view_as^T, then [1:]^T (zero first row), view^T, cat^T (drop the pad)."""
    *lead, Q, K = g.shape
    gp = np.concatenate([np.zeros((*lead, 1, Q)), g.reshape(*lead, K, Q)], axis=-2)
    return gp.reshape(*lead, Q, K + 1)[..., 1:]


def ref_txl_rel_shift(p, x):
    return {"out": txl_rel_shift(x["x"]), "dx": txl_rel_shift_vjp(x["dout"])}


def ref_txl_score(p, x):
    """RelPartialLearnableMultiHeadAttn.forward: AC = (q + r_w_bias) k, BD = _rel_shift((q + r_r_bias) r_head_k),
    r_head_k = r_net(PositionalEmbedding(pos_seq = klen-1 .. 0, clamped)), score = (AC + BD) * scale with the
    causal mask (the case stores 0 there), softmax @ value; autograd of sum(dlogits * score)."""
    q, k, value, u, v, W_r, g = (x[n] for n in ("q", "k", "value", "u", "v", "W_r", "dlogits"))
    _, H, ql, d = q.shape
    kl, d_r = k.shape[-2], p["d_model_r"]
    pos_seq = np.arange(kl - 1, -1, -1.0)
    if p["clamp_len"] is not None:
        pos_seq = np.minimum(pos_seq, p["clamp_len"])
    inv_freq = 1 / (p["base"] ** (np.arange(0.0, d_r, 2.0) / d_r))
    sinusoid = np.multiply.outer(pos_seq, inv_freq)
    pos_emb = _cat(np.sin(sinusoid), np.cos(sinusoid))  # (klen, d_r)
    r_head_k = (pos_emb @ W_r).reshape(kl, H, d)  # r_net, Linear(d_r, H*d, bias=False), weight^T = W_r
    scale = 1 / math.sqrt(d)
    rw_q, rr_q = q + u[None, :, None, :], q + v[None, :, None, :]
    AC = np.einsum("bhid,bhjd->bhij", rw_q, k)
    BD = txl_rel_shift(np.einsum("bhid,jhd->bhij", rr_q, r_head_k))
    keep = np.arange(kl)[None, :] <= np.arange(ql)[:, None] + kl - ql
    score = (AC + BD) * scale
    masked = np.where(keep, score, -np.inf)
    e = np.exp(masked - masked.max(-1, keepdims=True))
    out = (e / e.sum(-1, keepdims=True)) @ value
    gs = g * scale
    dBD = txl_rel_shift_vjp(gs)
    drr_q = np.einsum("bhij,jhd->bhid", dBD, r_head_k)
    drw_q = np.einsum("bhij,bhjd->bhid", gs, k)
    dr_head_k = np.einsum("bhij,bhid->jhd", dBD, rr_q).reshape(kl, H * d)
    return {"score": np.where(keep, score, 0.0), "out": out, "dq": drw_q + drr_q,
            "dk": np.einsum("bhij,bhid->bhjd", gs, rw_q), "du": drw_q.sum(axis=(0, 2)),
            "dv": drr_q.sum(axis=(0, 2)), "dW_r": pos_emb.T @ dr_head_k}


# =========================================================================== DeBERTa

def make_log_bucket_position(relative_pos, bucket_size, max_position):
    """transformers deberta_v2 make_log_bucket_position, float64."""
    relative_pos = np.asarray(relative_pos, dtype=np.int64)
    sign = np.sign(relative_pos)
    mid = bucket_size // 2
    abs_pos = np.where((relative_pos < mid) & (relative_pos > -mid), np.int64(mid - 1), np.abs(relative_pos))
    with np.errstate(divide="ignore", invalid="ignore"):  # log(0) where mid == 1; torch.where drops it too
        log_pos = np.ceil(np.log(abs_pos / mid) / np.log(np.float64((max_position - 1) / mid))
                          * (mid - 1)) + mid
    return np.where(abs_pos <= mid, relative_pos.astype(np.float64), log_pos * sign)


def ref_deberta_log_bucket(p, x):
    return {"bucket": make_log_bucket_position(x["relative_pos"], p["bucket_size"],
                                               p["max_position"]).astype(np.int64)}


def deberta_build_relative_position(query_size, key_size, bucket_size=-1, max_position=-1):
    """transformers deberta_v2 build_relative_position (queries at 0 .. query_size - 1)."""
    rel_pos_ids = np.arange(query_size)[:, None] - np.arange(key_size)[None, :]
    if bucket_size > 0 and max_position > 0:
        rel_pos_ids = make_log_bucket_position(rel_pos_ids, bucket_size, max_position)
    return rel_pos_ids.astype(np.int64)[:query_size, :]


def ref_deberta_relative_positions(p, x):
    return {"relative_pos": deberta_build_relative_position(p["q_len"], p["k_len"], p["bucket_size"],
                                                            p["max_position"])}


def ref_deberta_relative_positions_bottom_right(p, x):
    """The case's default alignment: query i at k_len - q_len + i, then the log buckets."""
    q_len, k_len, b, m = p["q_len"], p["k_len"], p["bucket_size"], p["max_position"]
    rel = np.arange(q_len)[:, None] + (k_len - q_len) - np.arange(k_len)[None, :]
    return {"relative_pos": (make_log_bucket_position(rel, b, m) if b > 0 and m > 0 else rel).astype(np.int64)}


def ref_deberta_paper(p, x):
    """He et al. 2021 eq. 4, transcribed with gathers (not transformers' key-key trick): with rel_ij the
    case's bottom-right query - key distance (bucketed), c2p[i, j] = q_i . Kr[clamp(rel_ij + k)] and
    p2c[i, j] = k_j . Qr[clamp(-rel_ij + k)] (delta(j, i)); logits = (q k^T + c2p + p2c) / sqrt((1 + n) d);
    gradients of sum(dlogits * logits) by the chain rule, the gathers' backward a scatter-add."""
    q, k, value, g = x["q"], x["k"], x["value"], x["dlogits"]
    types, buckets, maxrel = list(p["pos_att_type"]), p["position_buckets"], p["max_relative_positions"]
    ql, d, kl = q.shape[-2], q.shape[-1], k.shape[-2]
    span = buckets if buckets > 0 else maxrel
    rel = np.arange(ql)[:, None] + kl - ql - np.arange(kl)[None, :]
    if buckets > 0:
        rel = make_log_bucket_position(rel, buckets, maxrel).astype(np.int64)
    scale = math.sqrt(d * (1 + len(types)))
    gs = g / scale
    logits = q @ np.swapaxes(k, -1, -2) / scale
    res = {"dq": gs @ k, "dk": np.swapaxes(gs, -1, -2) @ q}
    for term, table, sign, own, other in (("c2p", "pos_key", 1, "q", "dq"), ("p2c", "pos_query", -1, "k", "dk")):
        if term not in types:
            continue
        index = np.clip(sign * rel + span, 0, 2 * span - 1)
        rows = x[table][:, index]  # (H, q_len, k_len, d)
        lhs = "bhid" if own == "q" else "bhjd"
        res[term] = np.einsum(f"{lhs},hijd->bhij", x[own], rows)
        logits = logits + res[term] / scale
        res[other] = res[other] + np.einsum(f"bhij,hijd->{lhs}", gs, rows)
        grad = np.zeros_like(x[table])
        np.add.at(grad, (slice(None), index), np.einsum(f"bhij,{lhs}->hijd", gs, x[own]))
        res["dpos_key" if term == "c2p" else "dpos_query"] = grad
    e = np.exp(logits - logits.max(-1, keepdims=True))
    res.update(logits=logits, out=(e / e.sum(-1, keepdims=True)) @ value)
    return res


def ref_deberta_disentangled(p, x):
    """DisentangledSelfAttention: scores q k^T / scale + disentangled_attention_bias(q, k, relative_pos, ...)
    with relative_pos passed in (the case's bottom-right positions, bucketed), pos_key/pos_query the
    projected rel_embeddings; softmax @ value; autograd of sum(dlogits * logits). p2c as written: r_pos =
    relative_pos when q_len == k_len, else build_relative_position(key, key); index clamp(-r_pos + span),
    gather on the key axis, transpose."""
    q, k, value, g = x["q"], x["k"], x["value"], x["dlogits"]
    types, buckets, maxrel = list(p["pos_att_type"]), p["position_buckets"], p["max_relative_positions"]
    B, H, ql, d = q.shape
    kl = k.shape[-2]
    att_span = buckets if buckets > 0 else maxrel
    rel = np.arange(ql)[:, None] + kl - ql - np.arange(kl)[None, :]
    if buckets > 0:
        rel = make_log_bucket_position(rel, buckets, maxrel).astype(np.int64)
    scale = math.sqrt(d * (1 + len(types)))
    logits = q @ np.swapaxes(k, -1, -2) / scale
    res, dq, dk = {}, (g / scale) @ k, np.swapaxes(g / scale, -1, -2) @ q
    if "c2p" in types:
        kr = x["pos_key"][:2 * att_span]
        c2p_all = np.einsum("bhid,htd->bhit", q, kr)
        c2p_pos = np.clip(rel + att_span, 0, att_span * 2 - 1)
        c2p = np.take_along_axis(c2p_all, np.broadcast_to(c2p_pos, (B, H, ql, kl)), -1)
        logits = logits + c2p / scale
        res["c2p"] = c2p
        dall = _scatter_last(np.zeros_like(c2p_all), c2p_pos, g / scale)
        dq = dq + np.einsum("bhit,htd->bhid", dall, kr)
        res["dpos_key"] = np.einsum("bhit,bhid->htd", dall, q)
    if "p2c" in types:
        qr = x["pos_query"][:2 * att_span]
        r_pos = rel if kl == ql else deberta_build_relative_position(kl, kl, buckets, maxrel)
        p2c_pos = np.clip(-r_pos + att_span, 0, att_span * 2 - 1)
        p2c_all = np.einsum("bhjd,htd->bhjt", k, qr)
        p2c = np.swapaxes(np.take_along_axis(p2c_all, np.broadcast_to(p2c_pos, (B, H, kl, kl)), -1), -1, -2)
        logits = logits + p2c / scale  # raises for q_len != k_len, as the reference does
        res["p2c"] = p2c
        dall = _scatter_last(np.zeros_like(p2c_all), p2c_pos, np.swapaxes(g / scale, -1, -2))
        dk = dk + np.einsum("bhjt,htd->bhjd", dall, qr)
        res["dpos_query"] = np.einsum("bhjt,bhjd->htd", dall, k)
    e = np.exp(logits - logits.max(-1, keepdims=True))
    res.update(logits=logits, out=(e / e.sum(-1, keepdims=True)) @ value, dq=dq, dk=dk)
    return res


def _scatter_last(acc, index, grad):
    """gather's backward along the last axis: acc[..., i, index[i, j]] += grad[..., i, j]."""
    for i in range(index.shape[0]):
        for j in range(index.shape[1]):
            acc[..., i, index[i, j]] += grad[..., i, j]
    return acc


# =========================================================================== RoPE frequencies (transformers)

def _rope_dims(p):
    sc = p["scaling"] or {}
    base = sc.get("rope_theta") or p["base"]
    # transformers: dim = int(head_dim * partial_rotary_factor); a case without the factor states rotary_dim
    dim = int(p["head_dim"] * sc["partial_rotary_factor"]) if "partial_rotary_factor" in sc else p["rotary_dim"]
    assert dim == p["rotary_dim"] or sc.get("rope_type") == "proportional"
    return sc, base, p["head_dim"], dim


def hf_default(p):
    sc, base, _, dim = _rope_dims(p)
    return 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.int64).astype(np.float64) / dim)), 1.0, {}


def hf_linear(p):
    inv, af, _ = hf_default(p)
    return inv / p["scaling"]["factor"], af, {}


def hf_dynamic(p):
    sc, base, _, dim = _rope_dims(p)
    mpe, factor = p["max_position_embeddings"], sc["factor"]
    seq_len = max(p["seq_len"], mpe) if p["seq_len"] is not None else mpe
    base = base * ((factor * seq_len / mpe) - (factor - 1)) ** (dim / (dim - 2))
    return 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.int64).astype(np.float64) / dim)), 1.0, {}


def hf_yarn(p):
    sc, base, _, dim = _rope_dims(p)
    factor, attention_factor = sc.get("factor"), sc.get("attention_factor")
    mscale, mscale_all_dim = sc.get("mscale"), sc.get("mscale_all_dim")
    L0 = sc["original_max_position_embeddings"]
    if factor is None:
        factor = p["max_position_embeddings"] / L0

    def get_mscale(scale, mscale=1):
        return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0

    if attention_factor is None:
        if mscale and mscale_all_dim:
            attention_factor = float(get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim))
        else:
            attention_factor = get_mscale(factor)
    beta_fast, beta_slow = sc.get("beta_fast") or 32, sc.get("beta_slow") or 1

    def find_correction_dim(num_rotations):
        return (dim * math.log(L0 / (num_rotations * 2 * math.pi))) / (2 * math.log(base))

    truncate = sc.get("truncate", True)
    raw = (find_correction_dim(beta_fast), find_correction_dim(beta_slow))
    low, high = (math.floor(raw[0]), math.ceil(raw[1])) if truncate else raw
    low, high = max(low, 0), min(high, dim - 1)
    extra = {"correction_range_raw": np.array(raw)}
    if truncate:
        extra["correction_range"] = np.array([low, high], dtype=np.int64)
    hi = high + 0.001 if low == high else high
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (hi - low), 0, 1)
    pos_freqs = base ** (np.arange(0, dim, 2).astype(np.float64) / dim)
    inv_freq_extrapolation = 1.0 / pos_freqs
    inv_freq_interpolation = 1.0 / (factor * pos_freqs)
    extrapolation_factor = 1 - ramp
    inv = inv_freq_interpolation * (1 - extrapolation_factor) + inv_freq_extrapolation * extrapolation_factor
    return inv, attention_factor, extra


def hf_longrope(p):
    sc, base, _, dim = _rope_dims(p)
    factor, attention_factor = sc.get("factor"), sc.get("attention_factor")
    L0 = sc["original_max_position_embeddings"]
    if factor is None:
        factor = p["max_position_embeddings"] / L0
    if attention_factor is None:
        attention_factor = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(L0))
    seq_len = p["seq_len"]
    ext = np.array(sc["long_factor"] if seq_len and seq_len > L0 else sc["short_factor"], dtype=np.float64)
    inv_freq_shape = np.arange(0, dim, 2, dtype=np.int64).astype(np.float64) / dim
    return 1.0 / (ext * base ** inv_freq_shape), attention_factor, {}


def hf_llama3(p):
    sc = p["scaling"]
    inv_freq, _, _ = hf_default(p)
    factor, lo, hi, L0 = sc["factor"], sc["low_freq_factor"], sc["high_freq_factor"], \
        sc["original_max_position_embeddings"]
    low_freq_wavelen, high_freq_wavelen = L0 / lo, L0 / hi
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = np.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (L0 / wavelen - lo) / (hi - lo)
    smoothed = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
    counts = np.array([np.sum(wavelen < high_freq_wavelen), np.sum(is_medium), np.sum(wavelen > low_freq_wavelen)])
    return np.where(is_medium, smoothed, inv_freq_llama), 1.0, {"band_counts": counts}


def hf_proportional(p):
    sc, base, head_dim, _ = _rope_dims(p)
    factor, rope_proportion = sc.get("factor", 1.0), sc.get("partial_rotary_factor", 1.0)
    rope_angles = int(rope_proportion * head_dim // 2)
    rotated = 1.0 / (base ** (np.arange(0, 2 * rope_angles, 2, dtype=np.int64).astype(np.float64) / head_dim))
    inv = np.concatenate([rotated, np.zeros(head_dim // 2 - rope_angles)])
    return inv / factor, 1.0, {}


def rotary_embedding_torch_ntk(p):
    """rotary_embedding_torch RotaryEmbedding(dim, theta_rescale_factor=alpha) freqs."""
    dim, theta = p["rotary_dim"], p["base"]
    theta *= p["scaling"]["alpha"] ** (dim / (dim - 2))
    return 1.0 / (theta ** (np.arange(0, dim, 2)[:dim // 2].astype(np.float64) / dim)), 1.0, {}


ROPE_INIT = {"default": hf_default, "linear": hf_linear, "dynamic": hf_dynamic, "yarn": hf_yarn,
             "longrope": hf_longrope, "llama3": hf_llama3, "proportional": hf_proportional,
             "ntk": rotary_embedding_torch_ntk}


def rope_init(p):
    sc = p.get("scaling") or {}
    return ROPE_INIT[sc.get("rope_type") or sc.get("type") or "default"](p)


def ref_rope_init(p, x):
    inv, af, extra = rope_init(p)
    return {"inv_freq": inv, "attention_factor": np.array([af]), **extra}


# =========================================================================== RoPE tables and rotations

def llama_rotary_embedding(p, positions):
    """LlamaRotaryEmbedding.forward: freqs = position_ids[..., None] * inv_freq, emb = cat(freqs, freqs),
    cos = emb.cos() * attention_scaling. dynamic / longrope: dynamic_rope_update / longrope_frequency_update
    take seq_len = max(position_ids) + 1 from the batch (the case's positions), as transformers does."""
    kind = (p.get("scaling") or {}).get("rope_type")
    if kind in ("dynamic", "longrope"):
        p = dict(p, seq_len=int(np.max(positions)) + 1)
    return llama_tables(p, positions)


def llama_tables(p, positions):
    """cos, sin of cat(freqs, freqs) * attention_scaling, freqs = positions * inv_freq, inv_freq and
    attention_scaling from ROPE_INIT_FUNCTIONS at ``p``'s seq_len."""
    inv, af, _ = rope_init(p)
    freqs = positions.astype(np.float64)[..., None] * inv
    emb = _cat(freqs, freqs)
    return np.cos(emb) * af, np.sin(emb) * af


def meta_precompute_freqs_cis(dim, positions, theta, inv=None):
    """Meta llama precompute_freqs_cis, t = the case's positions: polar(1, outer(t, freqs))."""
    if inv is None:
        inv = 1.0 / (theta ** (np.arange(0, dim, 2)[: dim // 2].astype(np.float64) / dim))
    freqs = np.multiply.outer(positions.astype(np.float64), inv)
    return np.exp(1j * freqs)  # torch.polar: cos + i sin


def _interleave(a):
    return np.repeat(a, 2, axis=-1)


def _in_layout(p, cos, sin):
    """The tables per pair (cos[..., :d/2]) laid out in the case's layout."""
    if p["layout"] == "half":
        return {"cos": cos, "sin": sin}
    return {"cos": _interleave(cos[..., :cos.shape[-1] // 2]), "sin": _interleave(sin[..., :sin.shape[-1] // 2])}


def ref_llama_tables(p, x):
    return _in_layout(p, *llama_rotary_embedding(p, x["positions"]))


def ref_llama_tables_at(p, x):
    """ROPE_INIT_FUNCTIONS[rope_type](config, device, seq_len) at the seq_len the call names (the case's,
    test_a_named_seq_len_is_the_cases), then LlamaRotaryEmbedding.forward's tables without its update."""
    return _in_layout(p, *llama_tables(p, x["positions"]))


def ref_meta_tables(p, x):
    cis = meta_precompute_freqs_cis(p["rotary_dim"], x["positions"], p["base"])
    return {"cos": _interleave(cis.real), "sin": _interleave(cis.imag)}


def ref_p_rope_llama_tables(p, x):
    q = dict(p, scaling={"rope_type": "proportional", "partial_rotary_factor": p["p"]})
    cos, sin = llama_rotary_embedding(q, x["positions"])
    return {"inv_freq": rope_init(q)[0], "cos": cos, "sin": sin}


def ref_p_rope_meta_tables(p, x):
    inv = rope_init(dict(p, scaling={"rope_type": "proportional", "partial_rotary_factor": p["p"]}))[0]
    cis = meta_precompute_freqs_cis(p["rotary_dim"], x["positions"], p["base"], inv)
    return {"inv_freq": inv, "cos": _interleave(cis.real), "sin": _interleave(cis.imag)}


def ref_ntk_tables(p, x):
    """rotary_embedding_torch: freqs = t * freqs repeated per pair; per pair in the case's half layout."""
    inv, _, _ = rotary_embedding_torch_ntk(p)
    freqs = x["positions"].astype(np.float64)[..., None] * inv
    return {"cos": _cat(np.cos(freqs), np.cos(freqs)), "sin": _cat(np.sin(freqs), np.sin(freqs))}


def rotate_half(x):
    x1, x2 = np.split(x, 2, axis=-1)
    return _cat(-x2, x1)


def rotate_half_vjp(g):
    g1, g2 = np.split(g, 2, axis=-1)
    return _cat(g2, -g1)


def hf_apply(x, cos, sin, r):
    """apply_rotary_pos_emb on the first r channels (q_rot, q_pass split of partial-rotary models)."""
    rot, pas = x[..., :r], x[..., r:]
    return _cat(rot * cos + rotate_half(rot) * sin, pas)


def hf_apply_vjp(g, cos, sin, r):
    rot, pas = g[..., :r], g[..., r:]
    return _cat(rot * cos + rotate_half_vjp(rot * sin), pas)


def ref_hf_apply(p, x):
    """transformers apply_rotary_pos_emb(q, k, cos, sin) with LlamaRotaryEmbedding tables; dx its VJP."""
    cos, sin = llama_rotary_embedding(p, x["positions"])
    if x["x"].ndim == cos.ndim + 1:  # (batch, heads, seq, d) with positions (batch, seq): unsqueeze_dim=1
        cos, sin = cos[:, None], sin[:, None]
    r = cos.shape[-1]
    return {"y": hf_apply(x["x"], cos, sin, r), "dx": hf_apply_vjp(x["dy"], cos, sin, r)}


def ref_hf_apply_at(p, x):
    """apply_rotary_pos_emb(q, k, cos, sin) with the tables of ref_llama_tables_at (the named seq_len)."""
    cos, sin = llama_tables(p, x["positions"])
    r = cos.shape[-1]
    return {"y": hf_apply(x["x"], cos, sin, r), "dx": hf_apply_vjp(x["dy"], cos, sin, r)}


def meta_apply(x, cis):
    r = 2 * cis.shape[-1]
    xc = x[..., :r].reshape(*x.shape[:-1], -1, 2)
    xc = xc[..., 0] + 1j * xc[..., 1]
    out = xc * cis
    return _cat(np.stack([out.real, out.imag], -1).reshape(*x.shape[:-1], r), x[..., r:])


def ref_meta_apply(p, x):
    """Meta llama apply_rotary_emb (complex multiply); dx: autograd's g * conj(freqs_cis)."""
    cis = meta_precompute_freqs_cis(p["rotary_dim"], x["positions"], p["base"])
    return {"y": meta_apply(x["x"], cis), "dx": meta_apply(x["dy"], np.conj(cis))}


def rotate_every_two(x):
    x1, x2 = x[..., ::2], x[..., 1::2]
    return np.stack((-x2, x1), -1).reshape(x.shape)


def rotate_every_two_vjp(g):
    g1, g2 = g[..., ::2], g[..., 1::2]
    return np.stack((g2, -g1), -1).reshape(g.shape)


def _interleaved_tables(p, positions):
    """cos, sin per pair (positions * inv_freq) with the attention factor, frequencies as ROPE_INIT_FUNCTIONS."""
    inv, af, _ = rope_init(p)
    angles = positions.astype(np.float64)[..., None] * inv
    return np.cos(angles) * af, np.sin(angles) * af


def ref_gptj_apply(p, x):
    """GPT-J apply_rotary_pos_emb(tensor, sin, cos) on the first rotary_dim channels: tensor * cos + rotate_every_two
    (tensor) * sin, cos and sin repeat_interleave'd; dx its VJP."""
    cos, sin = (_interleave(t) for t in _interleaved_tables(p, x["positions"]))
    r = cos.shape[-1]
    rot, g = x["x"][..., :r], x["dy"][..., :r]
    return {"y": _cat(rot * cos + rotate_every_two(rot) * sin, x["x"][..., r:]),
            "dx": _cat(g * cos + rotate_every_two_vjp(g * sin), x["dy"][..., r:])}


def ref_deepseek_v2_apply(p, x):
    """DeepSeek-V2 apply_rotary_emb(xq, xk, freqs_cis): view_as_complex of neighbour pairs times freqs_cis."""
    cos, sin = _interleaved_tables(p, x["positions"])
    cis = cos + 1j * sin
    return {"y": meta_apply(x["x"], cis), "dx": meta_apply(x["dy"], np.conj(cis))}


def ref_deepseek_v3_apply(p, x):
    """DeepSeek-V3 apply_rotary_pos_emb_interleave (5.24): cat(x1 cos - x2 sin, x2 cos + x1 sin) with x1, x2 the
    even and odd channels, then re-interleaved as the call says; dx the VJP of that composition."""
    cos, sin = _interleaved_tables(p, x["positions"])

    def rotate(v, sign):
        v1, v2 = v[..., 0::2], v[..., 1::2]
        halves = (v1 * cos - sign * v2 * sin, v2 * cos + sign * v1 * sin)
        out = np.empty_like(v)
        out[..., 0::2], out[..., 1::2] = halves
        return out
    return {"y": rotate(x["x"], 1), "dx": rotate(x["dy"], -1)}


def ref_xpos(p, x):
    """rotary_embedding_torch RotaryEmbedding(dim, use_xpos=True).rotate_queries_and_keys (centre
    len(t) // 2) / torchscale XPOS (fixed_pos_embedding, min_pos = -(L) // 2); centre 'none' is the first
    recipe without the centre, half layout as the case states. scores = q' k'^T, dq, dk by autograd."""
    q, k, g, t = x["q"], x["k"], x["dscores"], x["positions"].astype(np.float64)
    d, B, centre = p["rotary_dim"], p["scale_base"], p["centre"]
    L = len(t)
    if centre == "torchscale":
        half = d // 2
        scale_vec = (np.arange(0, d, 2) + 0.4 * d) / (1.4 * d)
        min_pos = -L // 2
        scale = scale_vec ** (np.arange(min_pos, L + min_pos, 1).astype(np.float64) / B)[:, None]
        inv_freq = 1.0 / (10000 ** (np.arange(0, half) / half))
        sinusoid = np.einsum("i,j->ij", np.arange(0, L, dtype=np.float64), inv_freq)
        sin, cos = np.sin(sinusoid), np.cos(sinusoid)
        # torchscale pairs neighbours (rotate_every_two); a half-layout case pairs (i, i + d/2) instead
        spread, rot, rot_vjp = ((_interleave, rotate_every_two, rotate_every_two_vjp) if p["layout"] == "interleaved"
                                else (lambda a: _cat(a, a), rotate_half, rotate_half_vjp))
        cq, sq = spread(cos * scale), spread(sin * scale)
        ck, sk = spread(cos * (1 / scale)), spread(sin * (1 / scale))
    else:
        base = p["base"]
        freqs = 1.0 / (base ** (np.arange(0, d, 2)[:d // 2].astype(np.float64) / d))
        f = np.einsum("i,f->if", t, freqs)
        scale_vec = (np.arange(0, d, 2) + 0.4 * d) / (1.4 * d)
        power = (t - (L // 2 if centre == "rotary-embedding-torch" else 0)) / B
        scale = scale_vec ** power[:, None]
        if p["layout"] == "interleaved":
            f, scale = _interleave(f), _interleave(scale)
            rot, rot_vjp = rotate_every_two, rotate_every_two_vjp
        else:
            f, scale = _cat(f, f), _cat(scale, scale)
            rot, rot_vjp = rotate_half, rotate_half_vjp
        cq, sq = np.cos(f) * scale, np.sin(f) * scale
        ck, sk = np.cos(f) * scale ** -1, np.sin(f) * scale ** -1
    qr, kr = q * cq + rot(q) * sq, k * ck + rot(k) * sk
    gq, gk = g @ kr, g.T @ qr
    return {"q": qr, "k": kr, "scores": qr @ kr.T, "dq": gq * cq + rot_vjp(gq * sq),
            "dk": gk * ck + rot_vjp(gk * sk)}


def ref_qwen2vl_vision(p, x):
    """Qwen2VL VisionRotaryEmbedding(head_dim // 2, theta) at (h, w) ids, cat(emb, emb), cos/sin;
    apply_rotary_pos_emb_vision = q cos + rotate_half(q) sin; dx its VJP."""
    dim = p["dim_per_axis"]
    inv_freq = 1.0 / (p["base"] ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    freqs = np.concatenate([np.multiply.outer(a.astype(np.float64), inv_freq) for a in x["positions"]], -1)
    emb = _cat(freqs, freqs)
    cos, sin = np.cos(emb), np.sin(emb)
    return {"y": hf_apply(x["x"], cos, sin, cos.shape[-1]), "dx": hf_apply_vjp(x["dy"], cos, sin, cos.shape[-1])}


def ref_ropevit_axial(p, x):
    """RoPE-ViT compute_axial_cis(dim, theta): freqs = 1 / theta ** (arange(0, dim, 4)[:dim//4] / dim) per
    axis, cat(polar x, polar y); apply_rotary_emb complex multiply; dx with conj."""
    dim = p["rotary_dim"]
    freqs = 1.0 / (p["base"] ** (np.arange(0, dim, 4)[: dim // 4].astype(np.float64) / dim))
    cis = np.concatenate([np.exp(1j * np.multiply.outer(a.astype(np.float64), freqs)) for a in x["positions"]], -1)
    return {"y": meta_apply(x["x"], cis), "dx": meta_apply(x["dy"], np.conj(cis))}


def _mrope_freqs(p, x):
    d = p["rotary_dim"]
    inv_freq = 1.0 / (p["base"] ** (np.arange(0, d, 2, dtype=np.int64).astype(np.float64) / d))
    return x["positions"].astype(np.float64)[..., None] * inv_freq  # (3, seq, d/2)


def ref_qwen2vl_mrope(p, x):
    """Qwen2VLRotaryEmbedding.forward (5.24): cos/sin per stream, recomposition_frequencies (split of the
    half width by mrope_section, stream i % 3, then cat(freq, freq)), apply_rotary_pos_emb."""
    freqs = _mrope_freqs(p, x)
    bounds = np.cumsum(p["mrope_section"])[:-1]
    cos, sin = (_cat(*[m[i % 3] for i, m in enumerate(np.split(f(freqs), bounds, axis=-1))]) for f in (np.cos, np.sin))
    cos, sin = _cat(cos, cos), _cat(sin, sin)
    r = cos.shape[-1]
    return {"y": hf_apply(x["x"], cos, sin, r), "dx": hf_apply_vjp(x["dy"], cos, sin, r)}


def ref_qwen2vl_mrope_4x(p, x):
    """transformers 4.x: Qwen2-VL rotary tables per stream, then apply_multimodal_rotary_pos_emb's split by
    mrope_section * 2."""
    freqs = _mrope_freqs(p, x)
    emb = _cat(freqs, freqs)
    cos3, sin3 = np.cos(emb), np.sin(emb)
    bounds = np.cumsum(list(p["mrope_section"]) * 2)[:-1]
    cos = _cat(*[m[i % 3] for i, m in enumerate(np.split(cos3, bounds, axis=-1))])
    sin = _cat(*[m[i % 3] for i, m in enumerate(np.split(sin3, bounds, axis=-1))])
    r = cos.shape[-1]
    return {"y": hf_apply(x["x"], cos, sin, r), "dx": hf_apply_vjp(x["dy"], cos, sin, r)}


def ref_qwen3vl_mrope(p, x):
    """Qwen3VLTextRotaryEmbedding: the interleaved recomposition (T, then H/W at offsets 1, 2 step 3), cat,
    cos/sin (5.24 takes cos/sin before the recomposition, 4.x after: a selection, the same values)."""
    freqs = _mrope_freqs(p, x)
    freqs_t = freqs[0].copy()
    for dim, offset in enumerate((1, 2), start=1):
        idx = slice(offset, p["mrope_section"][dim] * 3, 3)
        freqs_t[..., idx] = freqs[dim, ..., idx]
    emb = _cat(freqs_t, freqs_t)
    cos, sin = np.cos(emb), np.sin(emb)
    r = cos.shape[-1]
    return {"y": hf_apply(x["x"], cos, sin, r), "dx": hf_apply_vjp(x["dy"], cos, sin, r)}


def ref_convert_permute(p, x):
    """convert_llama_weights_to_hf.permute(w, n_heads, dim1, dim2) (interleaved -> half) on each head's first
    rotary_dim rows; half -> interleaved is its inverse view/transpose."""
    w, H, r = x["w"], p["num_heads"], p["rotary_dim"]
    hd = w.shape[0] // H
    out = w.reshape(H, hd, -1).copy()
    rot = out[:, :r]
    if p["src"] == "interleaved":
        out[:, :r] = rot.reshape(H, r // 2, 2, -1).transpose(0, 2, 1, 3).reshape(H, r, -1)
    else:
        out[:, :r] = rot.reshape(H, 2, r // 2, -1).transpose(0, 2, 1, 3).reshape(H, r, -1)
    return {"w": out.reshape(w.shape)}


def ref_long_term_decay(p, x):
    """n/a (RoFormer figure 2): ordinary float64, mean over j of |sum_{k<j} exp(i r theta_k)|."""
    d = p["rotary_dim"]
    theta = p["base"] ** (-np.arange(0, d, 2) / d)
    acc = np.cumsum(np.exp(1j * np.multiply.outer(x["distances"].astype(np.float64), theta)), axis=-1)
    return {"bound": np.mean(np.abs(acc), axis=-1)}


# =========================================================================== the table

EMULATIONS = {
    "PyTorch 'Language Modeling": [ref_pytorch_tutorial_pe, ref_distilbert_create_sinusoidal],
    "Transformer-XL PositionalEmbedding": [ref_txl_positional_embedding],
    "tensor2tensor.layers.common_attention.get_timing_signal_1d": [ref_t2t_timing_signal],
    "torch.nn.Embedding": [ref_embedding],
    "transformers.models.bloom.modeling_bloom.build_alibi_tensor (its slopes)": [ref_alibi_slopes_bloom,
                                                                                 ref_alibi_slopes_paper],
    "MPT (llm-foundry) gen_slopes": [ref_alibi_slopes_mpt],
    "ALiBi (ofirpress/attention_with_linear_biases, fairseq)": [ref_alibi_bias_causal],
    "MPT (llm-foundry) build_alibi_bias": [ref_alibi_bias_mpt],
    "transformers.models.bloom.modeling_bloom.build_alibi_tensor(attention_mask": [ref_alibi_bias_bloom],
    "torch.nn.functional.scaled_dot_product_attention": [ref_sdpa_alibi],
    "x_transformers.x_transformers.CoPE": [ref_xtransformers_cope],
    "chijames/KERPLE (gpt-neox) ParallelKerpleLog": [ref_kerple_log],
    "chijames/KERPLE (gpt-neox) ParallelKerplePower": [ref_kerple_power],
    "n/a (NeMo sandwich_pos_bias": [ref_sandwich],
    "gemma apply_rope(inputs, positions, base_frequency, rope_proportion=p) / transformers "
    "ROPE_INIT_FUNCTIONS['proportional'] (partial_rotary_factor=p); tables as transformers": [ref_p_rope_llama_tables],
    "gemma apply_rope(inputs, positions, base_frequency, rope_proportion=p) / transformers "
    "ROPE_INIT_FUNCTIONS['proportional'] (partial_rotary_factor=p); tables as Meta": [ref_p_rope_meta_tables],
    "FIRE(num_heads, mlp_width": [ref_fire],
    "x_transformers.x_transformers.DynamicPositionBias": [ref_xtransformers_dpb],
    "transformers T5Attention._relative_position_bucket": [ref_t5_bucket],
    "transformers T5Attention.compute_bias": [ref_t5_compute_bias],
    "tensor2tensor.layers.common_attention._relative_attention_inner(x, y, z": [ref_shaw_logits],
    "tensor2tensor.layers.common_attention._relative_attention_inner(weights": [ref_shaw_values],
    "transformers 4.x BertSelfAttention(config, position_embedding_type='relative_key')": [ref_bert_relative],
    "transformers 4.x BertSelfAttention(config, position_embedding_type='relative_key_query')": [ref_bert_relative],
    "kimiyoung/transformer-xl pytorch/mem_transformer.py RelPartialLearnableMultiHeadAttn._rel_shift":
        [ref_txl_rel_shift],
    "kimiyoung/transformer-xl pytorch/mem_transformer.py RelPartialLearnableMultiHeadAttn.forward": [ref_txl_score],
    "transformers.models.deberta_v2.modeling_deberta_v2.make_log_bucket_position": [ref_deberta_log_bucket],
    "transformers.models.deberta_v2.modeling_deberta_v2.build_relative_position": [ref_deberta_relative_positions],
    "transformers DebertaV2 DisentangledSelfAttention": [ref_deberta_disentangled],
    "n/a (queries aligned bottom-right": [ref_deberta_relative_positions_bottom_right],
    "n/a (He et al. 2021, DeBERTa eq. 4": [ref_deberta_paper],
    "transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS[": [ref_rope_init],
    "transformers.models.llama.modeling_llama.LlamaRotaryEmbedding.compute_default_rope_parameters(config)":
        [ref_rope_init],
    "rotary_embedding_torch.RotaryEmbedding(dim, theta_rescale_factor=alpha) / x_transformers NTK theta":
        [ref_rope_init],
    "transformers LlamaRotaryEmbedding(config)(x, position_ids)": [ref_llama_tables],
    "transformers LlamaRotaryEmbedding tables at a fixed length": [ref_llama_tables_at],
    "Meta llama precompute_freqs_cis": [ref_meta_tables],
    "transformers.models.llama.modeling_llama.apply_rotary_pos_emb": [ref_hf_apply],
    "rotary_embedding_torch.RotaryEmbedding(dim, theta_rescale_factor=alpha) / x_transformers RotaryEmbedding":
        [ref_ntk_tables],
    "Meta llama apply_rotary_emb": [ref_meta_apply],
    "transformers.models.gptj.modeling_gptj.apply_rotary_pos_emb(tensor, sin, cos)": [ref_gptj_apply],
    "transformers.models.deepseek_v2.modeling_deepseek_v2.apply_rotary_emb(xq, xk, freqs_cis)": [ref_deepseek_v2_apply],
    "transformers.models.deepseek_v3.modeling_deepseek_v3.apply_rotary_pos_emb_interleave": [ref_deepseek_v3_apply],
    "transformers.models.llama.modeling_llama.apply_rotary_pos_emb(q, k, cos, sin) on the": [ref_hf_apply_at],
    "rotary_embedding_torch.RotaryEmbedding(dim, use_xpos=True)": [ref_xpos],
    "transformers.models.qwen2_vl.modeling_qwen2_vl.Qwen2VLVisionRotaryEmbedding": [ref_qwen2vl_vision],
    "RoPE-ViT axial": [ref_ropevit_axial],
    "transformers.models.qwen2_vl.modeling_qwen2_vl.Qwen2VLRotaryEmbedding(config)": [ref_qwen2vl_mrope,
                                                                                    ref_qwen2vl_mrope_4x],
    "transformers.models.qwen3_vl.modeling_qwen3_vl.Qwen3VLTextRotaryEmbedding(config)": [ref_qwen3vl_mrope],
    "transformers 4.x models/llama/convert_llama_weights_to_hf.py permute": [ref_convert_permute],
    "n/a (RoFormer figure 2)": [ref_long_term_decay],
}


def emulations(reference_call: str) -> list:
    """The transcriptions of ``reference_call``: the longest EMULATIONS key it starts with."""
    keys = [k for k in EMULATIONS if reference_call.startswith(k)]
    assert keys, f"no emulation for {reference_call!r}"
    return EMULATIONS[max(keys, key=len)]


# Reference calls that fail their case as written and are not (yet) listed as known divergences:
# (case, emulation) -> what was measured. Strict xfail: fixing the case or the transcription must update this.
KNOWN_FAILURES: dict[tuple[str, str], str] = {}

# Entries the reference computation legitimately leaves out of the comparison: name -> output -> mask function.
def _causal_keep(p):
    return np.arange(p["k_len"])[None, :] <= np.arange(p["q_len"])[:, None] + p["q_offset"]


COMPARED = {s.name: {"bias": _causal_keep} for s in catalogue.cases(["alibi.bias.causal.*"], suite=3)}


def params_of(case):
    return [pytest.param(name, fn.__name__, id=f"{name}-{fn.__name__}",
                         marks=[pytest.mark.xfail(strict=True, reason=KNOWN_FAILURES[name, fn.__name__])]
                         if (name, fn.__name__) in KNOWN_FAILURES else [])
            for name in case for fn in emulations(SPECS[name].reference_call)]


def _float64_divergences(spec) -> list:
    return [d for d in spec.known_divergences if "float64" in d["implementation"]]


def _key_input(spec):
    return {"t5_bucket": "relative_position", "relative.deberta.log_bucket": "relative_pos"}[spec.encoding]


def check(name: str, fn_name: str) -> None:
    params, inputs, expected = stored(name)
    agrees(SPECS[name], params, inputs, expected, fn_name)


def agrees(spec, params: dict, inputs: dict, expected: dict, fn_name: str) -> None:
    """The emulation ``fn_name`` of ``spec``'s reference call passes ``expected`` within the float64 tolerance
    (on the listed float64 divergences, it lands on them exactly)."""
    name = spec.name
    fn = next(f for f in emulations(spec.reference_call) if f.__name__ == fn_name)
    actual = fn(params, inputs)
    expected = dict(expected)
    for div in _float64_divergences(spec):
        # the emulation must land on the listed float64 divergence there, and on the exact values elsewhere
        key = _key_input(spec)
        where = np.isin(inputs[key], div["inputs"][key])
        for out, values in div["outputs"].items():
            got = np.asarray(actual[out])[where]
            assert np.array_equal(got, values), (name, out, got, values)
            assert not np.array_equal(expected[out][where], values), "listed divergence equals the exact values"
            expected[out] = np.where(where, actual[out], expected[out])
    if name in COMPARED:
        for out, keep in COMPARED[name].items():
            actual[out] = np.where(keep(params), actual[out], expected[out])
    n, max_abs, max_rel, problems = runner.compare(actual, expected, spec.tolerances["float64"])
    assert not problems, (name, fn_name, problems, max_abs)


CASES = [s.name for s in catalogue.cases(suite=3)]


@pytest.mark.parametrize("name, fn_name", params_of(CASES))
def test_reference_call_passes_float64(name, fn_name):
    check(name, fn_name)


def test_a_named_seq_len_is_the_cases():
    """The emulations of calls that name a seq_len use the case's: so it must be the one named."""
    specs = [*catalogue.cases(suite=3), *(s for c in HF_CONFIGS for s in model_specs(c))]
    named = [(s, re.findall(r"\bseq_len=(\d+)", s.reference_call)) for s in specs]
    named = [(s, v) for s, v in named if v]
    assert len([s for s, _ in named if s.name in SPECS]) == 15
    assert all(v == [str(s.params["seq_len"])] for s, v in named), [(s.name, v) for s, v in named]


HF_CONFIGS = {path.stem: json.loads(path.read_text()) for path in sorted((REPO / "tests" / "fixtures" /
                                                                          "hf_configs").glob("*.json"))}
HF_CONFIGS["deepseek-v2-from-v3"] = {**HF_CONFIGS["deepseek-v3-base"], "model_type": "deepseek_v2"}
HF_CONFIGS["llama-dynamic"] = {"model_type": "llama", "head_dim": 64, "rope_theta": 10000.0,
                               "max_position_embeddings": 2048, "rope_scaling": {"rope_type": "dynamic", "factor": 4.0}}


def model_specs(config: str) -> list:
    return model_cases.cases_for(read_hf_config(HF_CONFIGS[config]))


@pytest.mark.parametrize("config", sorted(HF_CONFIGS))
def test_a_models_cases_pass_their_reference_calls_as_written(config):
    """``generate --hf-config``'s cases against their oracle outputs, as the catalogue's are."""
    for spec in model_specs(config):
        for fn in emulations(spec.reference_call):
            agrees(spec, spec.params, spec.inputs, runner.oracle_outputs(spec), fn.__name__)


def test_every_emulation_is_of_a_reference_call_in_the_suite():
    calls = {s.reference_call for s in catalogue.cases(suite=3)} | {s.reference_call for c in HF_CONFIGS
                                                                    for s in model_specs(c)}
    assert all(any(c.startswith(k) for c in calls) for k in EMULATIONS), \
        [k for k in EMULATIONS if not any(c.startswith(k) for c in calls)]


def test_every_reference_call_is_emulated():
    pairs = {(s.encoding, s.reference_call) for s in catalogue.cases(suite=3)}
    assert len(pairs) == 63  # 49 of version 2, plus the seq_len-named RoPE calls and the DeBERTa n/a calls
    assert all(emulations(r) for _, r in pairs)


def _fails(name: str, actual: dict) -> bool:
    _, _, expected = stored(name)
    return bool(runner.compare(actual, expected, SPECS[name].tolerances["float64"])[3])


@pytest.mark.parametrize("name, wrong", [
    # sin and cos swapped in the tutorial's interleave
    ("sinusoidal.interleaved.d8.int",
     lambda p, x: {"encoding": ref_pytorch_tutorial_pe(p, x)["encoding"][..., [1, 0, 3, 2, 5, 4, 7, 6]]}),
    # rotate_half's sign flipped (a rotation by -angle)
    ("rope.apply.half.d8", lambda p, x: ref_hf_apply(p, {**x, "positions": -x["positions"]})),
    # T5 buckets without the bidirectional split (the decoder's rule on an encoder case)
    ("relative.t5.bucket.bidirectional.nb32_md128", lambda p, x: ref_t5_bucket(dict(p, bidirectional=False), x)),
    # DeBERTa's c2p read from the position table mirrored (row 2k - 1 - t instead of t)
    ("relative.deberta.c2p_p2c.q3_k5.c2p.span3.paper", lambda p, x: {**ref_deberta_disentangled(p, x), "c2p":
        ref_deberta_disentangled(p, {**x, "pos_key": x["pos_key"][::-1]})["c2p"]}),
    # _rel_shift without the zero pad (a plain reshape)
    ("relative.txl.rel_shift.q3_k5", lambda p, x: {**ref_txl_rel_shift(p, x),
                                                   "out": x["x"].reshape(x["x"].shape[::-1]).T.copy()}),
    # YaRN without the ramp (every frequency divided by the factor)
    ("rope.inv_freq.yarn.d128_base10000", lambda p, x: {**ref_rope_init(p, x),
                                                        "inv_freq": hf_default(p)[0] / p["scaling"]["factor"]}),
    # ALiBi slopes from 2^(-8h/n) with n rounded up to a power of two (MPT's order lost)
    ("alibi.slopes.n12", lambda p, x: {"slopes": 2.0 ** (-8.0 * np.arange(1, 13) / 16)}),
])
def test_the_emulations_catch_plausible_bugs(name, wrong):
    params, inputs, _ = stored(name)
    assert _fails(name, wrong(params, inputs))
