"""mpmath oracle for the MLP position biases: FIRE (Li et al. 2023) and the dynamic position bias
(x-transformers' ``DynamicPositionBias``, CrossFormer). Naive formulas entry by entry, no NumPy
maths, no import of the implementation; returns object arrays of ``mpmath.mpf``.

FIRE: ``x = log(|c| |i - j| + 1) / (log(|c| max(L, i) + 1) + eps)``, ``L = |L_multiplier| init_L``,
query ``i`` at ``i + query_offset``; ``bias[h, i, j] = (relu(x w1 + b1) w2 + b2)[h]``.
Dynamic position bias: ``u = sign(r) log(|r| + 1)`` (or ``r``), ``r = (i + query_offset) - j``,
an MLP of SiLU hidden layers ``z / (1 + exp(-z))`` and a linear output.
"""

from __future__ import annotations

import mpmath as mp
import numpy as np

from ._mp import grid as _grid, mpf as _mp


def _mlp(x, inputs, activation: str) -> list:
    h = [x]
    n = 1
    while f"w{n + 1}" in inputs:
        n += 1
    for layer in range(1, n + 1):
        w, b = inputs[f"w{layer}"], inputs[f"b{layer}"]
        z = [mp.fsum(h[a] * _mp(w[a, o]) for a in range(len(h))) + _mp(b[o]) for o in range(w.shape[1])]
        if layer == n:
            return z
        h = [max(v, mp.mpf(0)) for v in z] if activation == "relu" else [v / (1 + mp.exp(-v)) for v in z]
    raise AssertionError("unreachable")


def _fire_x(params, inputs, i, j):
    c = abs(_mp(inputs["c"][0]))
    L = abs(_mp(inputs["L_multiplier"][0])) * _mp(params["init_L"])
    qpos = mp.mpf(i + params["query_offset"])
    return mp.log(c * abs(qpos - j) + 1) / (mp.log(c * max(L, qpos) + 1) + _mp(params["eps"]))


def fire(params, inputs):
    """``distance`` ``(q_len, k_len)`` (the MLP input) and ``bias`` ``(heads, q_len, k_len)``."""
    q_len, k_len = params["q_len"], params["k_len"]
    x = _grid((q_len, k_len), lambda i, j: _fire_x(params, inputs, i, j))
    heads = inputs["w2"].shape[1]
    bias = np.empty((heads, q_len, k_len), dtype=object)
    for i in range(q_len):
        for j in range(k_len):
            for h, v in enumerate(_mlp(x[i, j], inputs, "relu")):
                bias[h, i, j] = v
    return {"distance": x, "bias": bias}


def _dpb_u(params, i, j):
    r = mp.mpf(i + params["query_offset"] - j)
    if not params["log_distance"]:
        return r
    return mp.sign(r) * mp.log(abs(r) + 1)


def dpb(params, inputs):
    """``inputs`` ``(q_len, k_len)`` (the MLP input) and ``bias`` ``(heads, q_len, k_len)``."""
    q_len, k_len = params["q_len"], params["k_len"]
    u = _grid((q_len, k_len), lambda i, j: _dpb_u(params, i, j))
    n = 1
    while f"w{n + 1}" in inputs:
        n += 1
    bias = np.empty((inputs[f"w{n}"].shape[1], q_len, k_len), dtype=object)
    for i in range(q_len):
        for j in range(k_len):
            for h, v in enumerate(_mlp(u[i, j], inputs, "silu")):
                bias[h, i, j] = v
    return {"mlp_input": u, "bias": bias}
