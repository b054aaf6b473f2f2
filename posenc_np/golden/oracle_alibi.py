"""mpmath oracle for ALiBi. Naive formulas, high precision, no NumPy maths.

Slopes follow the paper's reference code literally (recursion on the next power of two);
bias values are the three forms evaluated entry by entry; attention is an explicit
``exp``/sum softmax with the causal mask applied by skipping keys, and its gradient is the
chain rule written out per entry. Each function takes ``(params, inputs)`` like every
oracle and returns object arrays of ``mpmath.mpf``; the caller sets the working precision
and rounds once to float64.
"""

from __future__ import annotations

import mpmath as mp
import numpy as np

from ._mp import grid as _grid, mpf as _mp




def _paper_slopes(n: int, max_bias) -> list:
    """Press et al. ``get_slopes``: geometric for powers of two, else slopes(p) + slopes(2p)[0::2][:n-p]."""
    if n & (n - 1) == 0:  # a power of two
        start = mp.power(2, -mp.mpf(max_bias) / n)
        return [start ** h for h in range(1, n + 1)]
    p = 1
    while 2 * p <= n:
        p *= 2
    return _paper_slopes(p, max_bias) + _paper_slopes(2 * p, max_bias)[0::2][: n - p]


def _slopes_for(params, inputs, n):
    if "slopes" in inputs:
        return [_mp(x) for x in inputs["slopes"]]
    return _paper_slopes(n, params.get("max_bias", 8.0))


def slopes(params, inputs):
    """m_h for h = 1..n (paper rule; ``max_bias`` replaces the 8 of 2^(-8h/n), as MPT does)."""
    return {"slopes": np.array(_paper_slopes(params["num_heads"], params["max_bias"]), dtype=object)}


def _bias_value(form, m, qpos, kpos):
    if form == "causal":
        return -m * (qpos - kpos)
    if form == "symmetric":
        return -m * abs(kpos - qpos)
    if form == "bloom":
        return m * kpos
    raise ValueError(f"unknown ALiBi form {form!r}")


def bias(params, inputs):
    """B[h, i, j] for query position i + q_offset and key position j."""
    n, q_len, k_len = params["num_heads"], params["q_len"], params["k_len"]
    form, off = params["form"], params["q_offset"]
    m = _slopes_for(params, inputs, n)
    return {"bias": _grid((n, q_len, k_len), lambda h, i, j: _bias_value(form, m[h], mp.mpf(i + off), mp.mpf(j)))}


def attention(params, inputs):
    """Softmax(q.k * scale + bias) v with ALiBi, and its gradient for the cotangent ``dout``.

    ``causal``: causal form, keys j <= i + (k_len - q_len) only; otherwise symmetric form,
    all keys. Queries are aligned bottom-right (query i at position i + k_len - q_len).
    Gradient: dV = P^T G, dP = G V^T, dS = P (dP - sum_j dP P), dQ = s dS K, dK = s dS^T Q.
    """
    q, k, v, g = inputs["q"], inputs["k"], inputs["v"], inputs["dout"]
    lead, heads, q_len, d = q.shape[:-3], q.shape[-3], q.shape[-2], q.shape[-1]
    k_len, d_v = k.shape[-2], v.shape[-1]
    causal = params["causal"]
    form = "causal" if causal else "symmetric"
    scale = 1 / mp.sqrt(d) if params.get("scale") is None else _mp(params["scale"])
    m = _slopes_for(params, inputs, heads)
    off = k_len - q_len
    out = np.empty(q.shape[:-1] + (d_v,), dtype=object)
    dq = np.empty(q.shape, dtype=object)
    dk = _grid(k.shape, lambda *i: mp.mpf(0))
    dv = _grid(v.shape, lambda *i: mp.mpf(0))
    for b in np.ndindex(*lead):
        for h in range(heads):
            Q, K, V, G = q[b + (h,)], k[b + (h,)], v[b + (h,)], g[b + (h,)]
            for i in range(q_len):
                keys = [j for j in range(k_len) if not causal or j <= i + off]
                s = {j: scale * mp.fsum(_mp(Q[i, c]) * _mp(K[j, c]) for c in range(d))
                     + _bias_value(form, m[h], mp.mpf(i + off), mp.mpf(j)) for j in keys}
                top = max(s.values()) if keys else 0
                e = {j: mp.exp(s[j] - top) for j in keys}
                z = mp.fsum(e.values())
                p = {j: e[j] / z for j in keys}
                for c in range(d_v):
                    out[b + (h, i, c)] = mp.fsum(p[j] * _mp(V[j, c]) for j in keys)
                dp = {j: mp.fsum(_mp(G[i, c]) * _mp(V[j, c]) for c in range(d_v)) for j in keys}
                avg = mp.fsum(dp[j] * p[j] for j in keys)
                ds = {j: p[j] * (dp[j] - avg) for j in keys}
                for c in range(d):
                    dq[b + (h, i, c)] = scale * mp.fsum(ds[j] * _mp(K[j, c]) for j in keys)
                for j in keys:
                    for c in range(d):
                        dk[b + (h, j, c)] += scale * ds[j] * _mp(Q[i, c])
                    for c in range(d_v):
                        dv[b + (h, j, c)] += p[j] * _mp(G[i, c])
    return {"out": out, "dq": dq, "dk": dk, "dv": dv}
