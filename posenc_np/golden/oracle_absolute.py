"""mpmath oracle for the absolute encodings. Naive formulas, high precision, no NumPy maths.

Each function takes ``(params, inputs)`` like every oracle and returns object arrays of
``mpmath.mpf``; the caller sets the working precision and rounds once to float64.
"""

from __future__ import annotations

import mpmath as mp
import numpy as np

from ._mp import extra_digits_for as _extra_digits_for, grid as _grid

def sinusoidal(params, inputs):
    """PE[p, 2i] = sin(p * base^(-2i/d)), PE[p, 2i+1] = cos(...) (interleaved) or [sin | cos]."""
    d, base, layout = params["dim"], mp.mpf(params["base"]), params["layout"]
    pos = inputs["positions"]
    half = d // 2

    def value(*idx):
        *pidx, c = idx
        p = mp.mpf(float(pos[tuple(pidx)]))
        if layout == "interleaved":
            i, use_cos = c // 2, c % 2 == 1
        else:
            i, use_cos = c % half, c >= half
        angle = p * mp.power(base, -mp.mpf(2 * i) / d)
        return mp.cos(angle) if use_cos else mp.sin(angle)

    with _extra_digits_for(pos):
        return {"encoding": _grid(pos.shape + (d,), value)}


def timing_signal(params, inputs):
    """tensor2tensor: w_i = tmin * exp(-i ln(tmax/tmin) / max(n-1, 1)); [sin | cos | 0]."""
    d = params["dim"]
    tmin, tmax = mp.mpf(params["min_timescale"]), mp.mpf(params["max_timescale"])
    start = params["start_index"]
    pos = inputs["positions"]
    n = d // 2

    def value(*idx):
        *pidx, c = idx
        if c >= 2 * n:
            return mp.mpf(0)
        p = mp.mpf(float(pos[tuple(pidx)])) + start
        i = c % n
        w = tmin * mp.exp(-i * mp.log(tmax / tmin) / max(n - 1, 1))
        return mp.sin(p * w) if c < n else mp.cos(p * w)

    with _extra_digits_for(np.abs(pos) + abs(start)):
        return {"encoding": _grid(pos.shape + (d,), value)}


def learned(params, inputs):
    """y = W[p]; dW[r] = sum over j with p_j = r of dy_j (summed exactly, rounded once)."""
    table, pos, dy = inputs["weight"], inputs["positions"], inputs["dout"]
    y = _grid(pos.shape + (table.shape[1],), lambda *idx: mp.mpf(float(table[pos[idx[:-1]], idx[-1]])))
    dw = _grid(table.shape, lambda r, c: mp.fsum(mp.mpf(float(dy[j + (c,)]))
                                                 for j in np.ndindex(*pos.shape) if pos[j] == r))
    return {"output": y, "dweight": dw}
