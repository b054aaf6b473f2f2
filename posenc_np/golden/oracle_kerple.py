"""mpmath oracle for KERPLE (Chi et al. 2022) and Sandwich (Chi et al. 2023): the papers' biases
entry by entry, no NumPy maths. Each function takes ``(params, inputs)`` and returns object arrays
of ``mpmath.mpf``; the caller sets the working precision and rounds once to float64."""

from __future__ import annotations

import mpmath as mp

from ._mp import grid as _grid, mpf as _mp


def kerple_bias(params, inputs):
    """``b[h, i, j] = -r1_h log(1 + r2_h |m - n|)`` (log) or ``-r1_h |m - n|^r2_h`` (power);
    query ``i`` at ``m = i + k_len - q_len``, key ``j`` at ``n = j``."""
    q_len, k_len, variant = params["q_len"], params["k_len"], params["variant"]
    r1, r2 = [_mp(x) for x in inputs["r1"]], [_mp(x) for x in inputs["r2"]]

    def value(h, i, j):
        d = mp.mpf(abs(i + k_len - q_len - j))
        return -r1[h] * (mp.log(1 + r2[h] * d) if variant == "log" else (d ** r2[h] if d else mp.mpf(0)))

    return {"bias": _grid((len(r1), q_len, k_len), value)}


def sandwich_bias(params, inputs):
    """b[h, i, j] = (sum_{k=1}^{d'/2} cos((m - n) / 10000^(2k/d')) - d'/2) / rho_h, rho_h = 8h/H
    (or 1), query i at m = i + k_len - q_len, key j at n = j."""
    H, q_len, k_len, dim = params["num_heads"], params["q_len"], params["k_len"], params["dim"]
    freqs = [mp.power(10000, -mp.mpf(2 * k) / dim) for k in range(1, dim // 2 + 1)]
    rho = [mp.mpf(8 * (h + 1)) / H if params["compression"] == "alibi" else mp.mpf(1) for h in range(H)]
    row = {}

    def at(offset):
        if offset not in row:
            row[offset] = mp.fsum(mp.cos(offset * w) for w in freqs) - mp.mpf(dim) / 2
        return row[offset]

    return {"bias": _grid((H, q_len, k_len), lambda h, i, j: at(i + k_len - q_len - j) / rho[h])}


def p_rope(params, inputs):
    """p-RoPE (Barbero et al. 2024): w_i = base^(-2i/d) for i < floor(p d/2) (p's exact float64
    value), 0 after; cos/sin tables of positions in the half or interleaved layout."""
    d, base, p, layout = params["rotary_dim"], _mp(params["base"]), _mp(params["p"]), params["layout"]
    n = d // 2
    kept = int(mp.floor(p * n))
    inv = [mp.power(base, -mp.mpf(2 * i) / d) if i < kept else mp.mpf(0) for i in range(n)]
    pos = inputs["positions"]

    def table(fn):
        def at(*idx):
            *pidx, ch = idx
            i = ch % n if layout == "half" else ch // 2
            return fn(_mp(pos[tuple(pidx)]) * inv[i])
        return _grid(pos.shape + (d,), at)

    out = {"inv_freq": _grid((n,), lambda i: inv[i]), "cos": table(mp.cos), "sin": table(mp.sin)}
    return out
