"""mpmath oracle for the relative encodings (T5 buckets and bias, Shaw, BERT relative_key).

Naive formulas, one element at a time, high precision, no NumPy maths; never imports the
implementation. Each function takes ``(params, inputs)`` and returns object arrays of
``mpmath.mpf`` (rounded once to float64 by the caller) or Python ``int``.

Positions follow the library's alignment: key ``j`` at ``j``, query ``i`` at
``i + k_len - q_len``.
"""

from __future__ import annotations

import mpmath as mp
import numpy as np

from ._mp import grid as _grid, mpf as _mpf




def _query_position(i: int, q_len: int, k_len: int) -> int:
    return i + k_len - q_len


# --------------------------------------------------------------------------- T5

def t5_bucket_one(rel: int, bidirectional: bool, num_buckets: int, max_distance: int) -> int:
    """One T5 bucket for ``rel = key - query``; the log term's floor is exact.

    ``v = ln(n/e) / ln(D/e) * (H - e)`` is evaluated at the working precision; when ``v`` is
    within ``10**-(dps/2)`` of an integer ``m`` (it may *be* ``m``: e.g. n=64, e=8, D=128 gives
    exactly 6, which no finite precision can prove), ``v >= m`` is decided in integers:
    ``(n/e)**(H-e) >= (D/e)**m``  <=>  ``n**(H-e) * e**m >= D**m * e**(H-e)``.
    """
    rel = int(rel)
    if bidirectional:
        half = num_buckets // 2
        offset = half if rel > 0 else 0
        n = abs(rel)
    else:
        half = num_buckets
        offset = 0
        n = max(-rel, 0)
    e = half // 2
    if n < e:
        return offset + n
    steps = half - e
    v = mp.log(mp.mpf(n) / e) / mp.log(mp.mpf(max_distance) / e) * steps
    m = int(mp.nint(v))
    if abs(v - m) < mp.mpf(10) ** (-(mp.mp.dps // 2)):
        k = m if n**steps * e**m >= max_distance**m * e**steps else m - 1
    else:
        k = int(mp.floor(v))
    return offset + min(e + k, half - 1)


def t5_bucket(params, inputs):
    """bucket = T5 bucket of each relative position (key - query)."""
    rel = inputs["relative_position"]
    args = (params["bidirectional"], params["num_buckets"], params["max_distance"])
    return {"bucket": _grid(rel.shape, lambda *idx: t5_bucket_one(rel[idx], *args))}


def t5_bias(params, inputs):
    """bucket[i, j], bias[h, i, j] = W[bucket[i, j], h], dweight[b, h] = sum of dout over bucket b."""
    w, dout = inputs["weight"], inputs["dout"]
    q_len, k_len = params["q_len"], params["k_len"]
    num_buckets, num_heads = w.shape

    def bucket(i, j):
        return t5_bucket_one(j - _query_position(i, q_len, k_len), params["bidirectional"], num_buckets,
                             params["max_distance"])

    buckets = _grid((q_len, k_len), bucket)
    bias = _grid((num_heads, q_len, k_len), lambda h, i, j: _mpf(w[buckets[i, j], h]))
    dweight = _grid((num_buckets, num_heads), lambda b, h: mp.fsum(
        _mpf(dout[h, i, j]) for i in range(q_len) for j in range(k_len) if buckets[i, j] == b))
    return {"bucket": buckets, "bias": bias, "dweight": dweight}


# --------------------------------------------------------------------------- Shaw

def _shaw_index(i, j, q_len, k_len, kmax):
    rel = j - _query_position(i, q_len, k_len)
    return min(max(rel, -kmax), kmax) + kmax


def _lead(shape):
    return list(np.ndindex(*shape))


def shaw_logits(params, inputs):
    """term = s * q_i . wK[idx_ij]; dq_i = s sum_j G_ij wK[idx_ij]; dwK[r] = s sum_{idx=r} G_ij q_i."""
    q, table, g = inputs["q"], inputs["key_table"], inputs["dlogits"]
    kmax, k_len, s = params["max_relative_position"], params["k_len"], _mpf(params["scale"])
    lead, q_len, d = q.shape[:-2], q.shape[-2], q.shape[-1]
    idx = [[_shaw_index(i, j, q_len, k_len, kmax) for j in range(k_len)] for i in range(q_len)]

    def term(*ix):
        *b, i, j = ix
        return s * mp.fsum(_mpf(q[tuple(b) + (i, c)]) * _mpf(table[idx[i][j], c]) for c in range(d))

    def dq(*ix):
        *b, i, c = ix
        return s * mp.fsum(_mpf(g[tuple(b) + (i, j)]) * _mpf(table[idx[i][j], c]) for j in range(k_len))

    def dtable(r, c):
        return s * mp.fsum(_mpf(g[b + (i, j)]) * _mpf(q[b + (i, c)]) for b in _lead(lead)
                           for i in range(q_len) for j in range(k_len) if idx[i][j] == r)

    return {"logits_term": _grid(lead + (q_len, k_len), term), "dq": _grid(q.shape, dq),
            "dkey_table": _grid(table.shape, dtable)}


def shaw_values(params, inputs):
    """term_i = sum_j p_ij wV[idx_ij]; dp_ij = U_i . wV[idx_ij]; dwV[r] = sum_{idx=r} p_ij U_i."""
    p, table, u = inputs["probs"], inputs["value_table"], inputs["dout"]
    kmax = params["max_relative_position"]
    lead, q_len, k_len = p.shape[:-2], p.shape[-2], p.shape[-1]
    dv = table.shape[1]
    idx = [[_shaw_index(i, j, q_len, k_len, kmax) for j in range(k_len)] for i in range(q_len)]

    def term(*ix):
        *b, i, c = ix
        return mp.fsum(_mpf(p[tuple(b) + (i, j)]) * _mpf(table[idx[i][j], c]) for j in range(k_len))

    def dprobs(*ix):
        *b, i, j = ix
        return mp.fsum(_mpf(u[tuple(b) + (i, c)]) * _mpf(table[idx[i][j], c]) for c in range(dv))

    def dtable(r, c):
        return mp.fsum(_mpf(p[b + (i, j)]) * _mpf(u[b + (i, c)]) for b in _lead(lead)
                       for i in range(q_len) for j in range(k_len) if idx[i][j] == r)

    return {"values_term": _grid(lead + (q_len, dv), term), "dprobs": _grid(p.shape, dprobs),
            "dvalue_table": _grid(table.shape, dtable)}


# --------------------------------------------------------------------------- BERT

def bert_relative(params, inputs):
    """r_ij = W[(query - key) + P - 1]; term = s (q_i . r_ij [+ k_j . r_ij]) and its gradients."""
    q, k, w, g = inputs["q"], inputs["k"], inputs["table"], inputs["dscores"]
    both = params["mode"] == "relative_key_query"
    s, big_p = _mpf(params["scale"]), params["max_position_embeddings"]
    lead, q_len, k_len, d = q.shape[:-2], q.shape[-2], k.shape[-2], q.shape[-1]
    row = [[_query_position(i, q_len, k_len) - j + big_p - 1 for j in range(k_len)] for i in range(q_len)]
    for r in row:
        assert all(0 <= x < 2 * big_p - 1 for x in r), "distance outside the table"

    def dot(x, xi, rr):
        return mp.fsum(_mpf(x[xi + (c,)]) * _mpf(w[rr, c]) for c in range(d))

    def term(*ix):
        *b, i, j = ix
        b = tuple(b)
        t = dot(q, b + (i,), row[i][j])
        return s * (t + dot(k, b + (j,), row[i][j]) if both else t)

    def dq(*ix):
        *b, i, c = ix
        return s * mp.fsum(_mpf(g[tuple(b) + (i, j)]) * _mpf(w[row[i][j], c]) for j in range(k_len))

    def dk(*ix):
        *b, j, c = ix
        return s * mp.fsum(_mpf(g[tuple(b) + (i, j)]) * _mpf(w[row[i][j], c]) for i in range(q_len))

    def dtable(rr, c):
        return s * mp.fsum(_mpf(g[b + (i, j)]) * (_mpf(q[b + (i, c)]) + (_mpf(k[b + (j, c)]) if both else 0))
                           for b in _lead(lead) for i in range(q_len) for j in range(k_len) if row[i][j] == rr)

    out = {"scores_term": _grid(lead + (q_len, k_len), term), "dq": _grid(q.shape, dq),
           "dtable": _grid(w.shape, dtable)}
    if both:
        out["dk"] = _grid(k.shape, dk)
    return out
