"""mpmath oracle for Transformer-XL and DeBERTa relative attention. Naive formulas, exact sums.

Written from the papers' formulas, not from :mod:`posenc_np.relative`:

* ``rel_shift``: the pad / reshape / drop-first-row sequence written as an index formula on
  the flat padded buffer (no reshaping), and its adjoint as an explicit sum.
* Transformer-XL: ``S_ij = s [(q_i + u).k_j + (q_i + v).r_(p_i - p_j)]`` with
  ``r_t = W_r^T [sin(t w) | cos(t w)]``, ``w_c = base^(-2c/d_r)``, per pair (no shift trick).
* DeBERTa: log buckets with mpmath ``log`` and ``ceil``; a value within 1e-6 of an integer is
  decided exactly with rational arithmetic (``fractions.Fraction``), since a finite-precision
  ``log`` cannot tell ``4`` from ``4 - 1e-60``. Scores are per-pair dot products with the paper's
  ``delta(i, j)`` / ``delta(j, i)`` indices.

Every function takes ``(params, inputs)`` and returns object arrays of ``mpmath.mpf`` (or
Python ints); the caller sets the precision and rounds once to float64.
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath as mp
import numpy as np

from ._mp import grid as _grid, mpf as _mp




def _dot(a, b) -> mp.mpf:
    return mp.fsum(_mp(x) * _mp(y) for x, y in zip(a, b))


# --------------------------------------------------------------------------- rel_shift

def _shift_source(i, j, q_len, k_len):
    """Row/column of x that out[i, j] reads, or None for the zero pad.

    The padded buffer is P = [0 | x] of shape (Q, K+1) read in row order; dropping its first
    Q elements and reading Q*K more puts out[i, j] at flat slot f = Q + i*K + j of P.
    """
    r, c = divmod(q_len + i * k_len + j, k_len + 1)
    return None if c == 0 else (r, c - 1)


def rel_shift(params, inputs):
    """out = rel_shift(x) and dx = rel_shift^T(dout), on the last two axes."""
    x, dout = inputs["x"], inputs["dout"]
    q_len, k_len = x.shape[-2:]
    out = np.empty(x.shape, dtype=object)
    dx = np.empty(x.shape, dtype=object)
    for lead in np.ndindex(*x.shape[:-2]):
        acc = {(r, c): [] for r in range(q_len) for c in range(k_len)}
        for i in range(q_len):
            for j in range(k_len):
                src = _shift_source(i, j, q_len, k_len)
                out[lead + (i, j)] = mp.mpf(0) if src is None else _mp(x[lead + src])
                if src is not None:
                    acc[src].append(_mp(dout[lead + (i, j)]))
        for (r, c), terms in acc.items():
            dx[lead + (r, c)] = mp.fsum(terms)
    return {"out": out, "dx": dx}


# --------------------------------------------------------------------------- Transformer-XL

def _txl_r(t, d_r, base, w_r, h, d):
    """r_t for head h: W_r[:, h*d:(h+1)*d]^T [sin(t w) | cos(t w)]."""
    half = d_r // 2
    angles = [mp.mpf(t) * mp.power(base, -mp.mpf(2 * c) / d_r) for c in range(half)]
    big_r = [mp.sin(a) for a in angles] + [mp.cos(a) for a in angles]
    return [mp.fsum(big_r[c] * _mp(w_r[c, h * d + e]) for c in range(d_r)) for e in range(d)], big_r


def _softmax_rows(scores, keep):
    """Softmax over the last axis of an object array, restricted to keep (True = keep)."""
    probs = np.empty(scores.shape, dtype=object)
    for idx in np.ndindex(*scores.shape[:-1]):
        row = [scores[idx + (j,)] for j in range(scores.shape[-1]) if keep[idx[-1], j]]
        m = max(row)
        total = mp.fsum(mp.exp(s - m) for s in row)
        for j in range(scores.shape[-1]):
            probs[idx + (j,)] = mp.exp(scores[idx + (j,)] - m) / total if keep[idx[-1], j] else mp.mpf(0)
    return probs


def _attend(probs, value):
    lead = probs.shape[:-1]
    d_v = value.shape[-1]
    return _grid(lead + (d_v,), lambda *ix: mp.fsum(probs[ix[:-1] + (j,)] * _mp(value[ix[:-3] + (ix[-3], j, ix[-1])])
                                                   for j in range(probs.shape[-1])))


def txl_score(params, inputs):
    """Transformer-XL scores, causal attention output and score gradients, per pair.

    Positions: key j at j, query i at i + K - Q; distance t = i + K - Q - j, clamped to
    clamp_len when given. Outputs: ``score`` (masked entries, t < 0, are 0), ``out``
    (causal softmax attention), and for the upstream gradient ``dlogits`` (zero where
    masked): ``dq, dk, du, dv, dW_r`` of sum(dlogits * score).
    """
    q, k, value = inputs["q"], inputs["k"], inputs["value"]
    u, v, w_r, g = inputs["u"], inputs["v"], inputs["W_r"], inputs["dlogits"]
    d_r, base, clamp_len = params["d_model_r"], mp.mpf(params["base"]), params["clamp_len"]
    _, n_heads, q_len, d = q.shape
    k_len = k.shape[-2]
    s = 1 / mp.sqrt(d)
    dist = {}
    for i in range(q_len):
        for j in range(k_len):
            t = i + k_len - q_len - j
            if t >= 0:
                dist[i, j] = t if clamp_len is None else min(t, clamp_len)
    rt = {(h, t): _txl_r(t, d_r, base, w_r, h, d) for h in range(n_heads) for t in set(dist.values())}
    keep = np.array([[(i, j) in dist for j in range(k_len)] for i in range(q_len)])

    def score(b, h, i, j):
        if (i, j) not in dist:
            return mp.mpf(0)
        r = rt[h, dist[i, j]][0]
        return s * (mp.fsum((_mp(q[b, h, i, e]) + _mp(u[h, e])) * _mp(k[b, h, j, e]) for e in range(d))
                    + mp.fsum((_mp(q[b, h, i, e]) + _mp(v[h, e])) * r[e] for e in range(d)))

    sc = _grid(q.shape[:-1] + (k_len,), score)
    out = _attend(_softmax_rows(sc, keep), value)
    pairs = list(dist)
    B = q.shape[0]

    def dq(b, h, i, e):
        return s * mp.fsum(_mp(g[b, h, i, j]) * (_mp(k[b, h, j, e]) + rt[h, dist[i, j]][0][e])
                           for (ii, j) in pairs if ii == i)

    def dk(b, h, j, e):
        return s * mp.fsum(_mp(g[b, h, i, j]) * (_mp(q[b, h, i, e]) + _mp(u[h, e])) for (i, jj) in pairs if jj == j)

    def du(h, e):
        return s * mp.fsum(_mp(g[b, h, i, j]) * _mp(k[b, h, j, e]) for b in range(B) for (i, j) in pairs)

    def dv(h, e):
        return s * mp.fsum(_mp(g[b, h, i, j]) * rt[h, dist[i, j]][0][e] for b in range(B) for (i, j) in pairs)

    def dw(c, col):
        h, e = divmod(col, d)
        return s * mp.fsum(_mp(g[b, h, i, j]) * (_mp(q[b, h, i, e]) + _mp(v[h, e])) * rt[h, dist[i, j]][1][c]
                           for b in range(B) for (i, j) in pairs)

    return {"score": sc, "out": out, "dq": _grid(q.shape, dq), "dk": _grid(k.shape, dk),
            "du": _grid(u.shape, du), "dv": _grid(v.shape, dv), "dW_r": _grid(w_r.shape, dw)}


# --------------------------------------------------------------------------- DeBERTa buckets

def _log_bucket(rel: int, bucket_size: int, max_position: int) -> int:
    """bucket(rel): rel if |rel| <= mid, else sign * (ceil((mid-1) ln(a/mid) / ln((M-1)/mid)) + mid)."""
    mid = bucket_size // 2
    a = mid - 1 if abs(rel) < mid else abs(rel)
    if a <= mid:
        return rel
    v = mp.log(mp.mpf(a) / mid) / mp.log(mp.mpf(max_position - 1) / mid) * (mid - 1)
    n = int(mp.nint(v))
    if abs(v - n) < mp.mpf(10) ** -6:
        # Near an integer the log cannot be trusted to land on the right side (v == n exactly iff
        # (a/mid)^(mid-1) == ((M-1)/mid)^n); decide ceil(v) in {n, n+1} with exact rationals.
        lhs, rhs = Fraction(a, mid) ** (mid - 1), Fraction(max_position - 1, mid) ** n
        ceil_v = n if lhs <= rhs else n + 1
    else:
        ceil_v = int(mp.ceil(v))
    return int(math.copysign(1, rel)) * (ceil_v + mid)


def deberta_log_bucket(params, inputs):
    rel = inputs["relative_pos"]
    return {"bucket": _grid(rel.shape, lambda *ix: _log_bucket(int(rel[ix]), params["bucket_size"],
                                                                params["max_position"]))}


def _rel(i, j, q_len, k_len, offset):
    return (i + (k_len - q_len if offset is None else offset)) - j


def deberta_relative_positions(params, inputs):
    """rel[i, j] = p_i - p_j (query - key), then log-bucketed when bucket_size > 0."""
    q_len, k_len, b, m = params["q_len"], params["k_len"], params["bucket_size"], params["max_position"]
    off = params.get("query_offset")

    def value(i, j):
        r = _rel(i, j, q_len, k_len, off)
        return _log_bucket(r, b, m) if b > 0 else r

    return {"relative_pos": _grid((q_len, k_len), value)}


def deberta_scores(params, inputs):
    """He et al. 2021 eq. 4 per pair, scale 1/sqrt(d (1 + n)); softmax attention; gradients.

    c2p_ij = q_i . K^r[clamp(rel_ij + k)], p2c_ij = k_j . Q^r[clamp(-rel_ij + k)] ("paper")
    or Q^r[clamp(rel_ij + k)] ("hf"), rel_ij = bucket(p_i - p_j). Outputs: ``c2p``/``p2c``
    (unscaled, each when enabled), ``logits`` = s (q.k + c2p + p2c), ``out`` (softmax over
    all keys), and for upstream ``dlogits``: ``dq, dk, dpos_key, dpos_query`` of
    sum(dlogits * logits).
    """
    q, k, value, g = inputs["q"], inputs["k"], inputs["value"], inputs["dlogits"]
    types = list(params["pos_att_type"])
    b_sz, m = params["position_buckets"], params["max_relative_positions"]
    span = b_sz if b_sz > 0 else m
    B, H, q_len, d = q.shape
    k_len = k.shape[-2]
    s = 1 / mp.sqrt(d * (1 + len(types)))

    def rel(i, j):
        r = _rel(i, j, q_len, k_len, None)
        return _log_bucket(r, b_sz, m) if b_sz > 0 else r

    def clamp(t):
        return min(max(t, 0), 2 * span - 1)

    ci = {(i, j): clamp(rel(i, j) + span) for i in range(q_len) for j in range(k_len)}
    sign = 1 if params["p2c_index"] == "hf" else -1
    pi = {(i, j): clamp(sign * rel(i, j) + span) for i in range(q_len) for j in range(k_len)}
    kr, qr = inputs.get("pos_key"), inputs.get("pos_query")
    res = {}
    c2p = _grid((B, H, q_len, k_len), lambda b, h, i, j: _dot(q[b, h, i], kr[h, ci[i, j]])) if "c2p" in types else None
    p2c = _grid((B, H, q_len, k_len), lambda b, h, i, j: _dot(k[b, h, j], qr[h, pi[i, j]])) if "p2c" in types else None

    def logit(b, h, i, j):
        total = _dot(q[b, h, i], k[b, h, j])
        if c2p is not None:
            total += c2p[b, h, i, j]
        if p2c is not None:
            total += p2c[b, h, i, j]
        return s * total

    logits = _grid((B, H, q_len, k_len), logit)
    keep = np.ones((q_len, k_len), dtype=bool)
    res["logits"] = logits
    res["out"] = _attend(_softmax_rows(logits, keep), value)
    if c2p is not None:
        res["c2p"] = c2p
    if p2c is not None:
        res["p2c"] = p2c

    def dq(b, h, i, e):
        return s * mp.fsum(_mp(g[b, h, i, j]) * (_mp(k[b, h, j, e]) + (_mp(kr[h, ci[i, j], e]) if c2p is not None else 0))
                           for j in range(k_len))

    def dk(b, h, j, e):
        return s * mp.fsum(_mp(g[b, h, i, j]) * (_mp(q[b, h, i, e]) + (_mp(qr[h, pi[i, j], e]) if p2c is not None else 0))
                           for i in range(q_len))

    res["dq"] = _grid(q.shape, dq)
    res["dk"] = _grid(k.shape, dk)
    if c2p is not None:
        res["dpos_key"] = _grid(kr.shape, lambda h, t, e: s * mp.fsum(
            _mp(g[b, h, i, j]) * _mp(q[b, h, i, e]) for b in range(B) for (i, j), c in ci.items() if c == t))
    if p2c is not None:
        res["dpos_query"] = _grid(qr.shape, lambda h, t, e: s * mp.fsum(
            _mp(g[b, h, i, j]) * _mp(k[b, h, j, e]) for b in range(B) for (i, j), c in pi.items() if c == t))
    return res
