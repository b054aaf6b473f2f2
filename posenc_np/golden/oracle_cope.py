"""mpmath oracle for CoPE (Golovneva et al. 2024, eqs. 3-5). Naive formula, high precision, no
NumPy maths and no import of the implementation.

Per head and query: gates sigma(s q_i . k_t) for kept keys (0 for dropped ones), positions
p_ij = sum_{t >= j} g_it, clamped at P = table rows - 1, the embedding interpolated between the
floor and ceiling rows, and the term q_i . e[p]. Returns object arrays of ``mpmath.mpf``.
"""

from __future__ import annotations

import mpmath as mp
import numpy as np

from ._mp import mpf as _mp


def _dot(a, b) -> mp.mpf:
    return mp.fsum(_mp(x) * _mp(y) for x, y in zip(a, b))


def forward(params, inputs):
    """``positions`` (not clamped) and ``term`` of shape ``(..., heads, q_len, k_len)``."""
    q, k, table = inputs["q"], inputs["k"], inputs["table"]
    keep = np.broadcast_to(inputs["mask"], q.shape[:-1] + (k.shape[-2],))
    s, big_p = _mp(params["gate_scale"]), table.shape[0] - 1
    positions = np.empty(keep.shape, dtype=object)
    term = np.empty(keep.shape, dtype=object)
    for lead in np.ndindex(*q.shape[:-2]):
        Q, K, M = q[lead], k[lead], keep[lead]
        for i in range(Q.shape[0]):
            gate = [1 / (1 + mp.exp(-s * _dot(Q[i], K[t]))) if M[i, t] else mp.mpf(0) for t in range(K.shape[0])]
            for j in range(K.shape[0]):
                p = mp.fsum(gate[j:])
                positions[lead + (i, j)] = p
                pc = min(p, mp.mpf(big_p))
                lo, hi = int(mp.floor(pc)), int(mp.ceil(pc))
                e = [(hi - pc) * _mp(table[lo, c]) + (pc - lo) * _mp(table[hi, c]) if hi != lo else _mp(table[lo, c])
                     for c in range(table.shape[1])]
                term[lead + (i, j)] = mp.fsum(_mp(Q[i, c]) * e[c] for c in range(table.shape[1]))
    return {"positions": positions, "term": term}
