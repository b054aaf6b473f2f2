"""mpmath oracle for RoPE. Naive formulas from docs/rope.md at high precision, no NumPy maths.

Each function takes ``(params, inputs)`` and returns object arrays of ``mpmath.mpf`` (or Python
ints); the caller sets the working precision and rounds once to float64. Frequencies are
described by ``params`` (``rotary_dim``, ``head_dim``, ``base``, ``scaling``, ``seq_len``,
``max_position_embeddings``) and evaluated here from the formula for each ``rope_type``.
Functions that take positions raise the working precision by the digits the largest
position needs (:func:`._mp.position_digits`), frequencies included, so that angles up to
``10^7`` and beyond keep every digit after reduction modulo ``2 pi``.

Positions and vectors: ``x`` has shape ``(..., head_dim)``; ``positions`` has the shape of
``x.shape[:-1]``, or that shape without its heads axis (``x`` of shape ``(batch, heads, seq,
head_dim)`` with positions ``(batch, seq)``), or is one sequence ``(seq,)``.
"""

from __future__ import annotations

import mpmath as mp
import numpy as np

from ._mp import extra_digits_for as _extra_digits_for
from ._mp import grid as _grid
from ._mp import mpf as _mpf
from ._mp import value as _value


def _vector(values):
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = v
    return out


# --------------------------------------------------------------------------- frequencies

def _plain(d, base):
    """omega_i = base^(-2i/d), i < d/2."""
    return [mp.power(base, -mp.mpf(2 * i) / d) for i in range(d // 2)]


def _g(s, m=1):
    """YaRN g(s, m) = 1 if s <= 1 else 0.1 m ln s + 1."""
    return mp.mpf(1) if s <= 1 else mp.mpf("0.1") * m * mp.log(s) + 1


def _correction_dim(r, d, base, L0):
    """c(r) = d ln(L0 / (2 pi r)) / (2 ln base)."""
    return d * mp.log(L0 / (2 * mp.pi * r)) / (2 * mp.log(base))


def _kind(scaling):
    if not scaling:
        return "default", {}
    return scaling.get("rope_type") or scaling.get("type") or "default", scaling


def frequencies(params):
    """(list of mpf inverse frequencies, mpf attention factor, extra outputs dict).

    ``rotary_dim`` pairs are rotated with ``rotary_dim // 2`` frequencies; ``proportional``
    uses the head dim (``rotary_dim == head_dim`` there, the tail frequencies are zero).
    """
    d = params["rotary_dim"]
    kind, sc = _kind(params.get("scaling"))
    base = _mpf(sc.get("rope_theta") or params["base"])
    seq_len, max_pos = params.get("seq_len"), params.get("max_position_embeddings")
    L0 = sc.get("original_max_position_embeddings") or max_pos
    one, extra = mp.mpf(1), {}
    if kind in ("default", "mrope"):
        return _plain(d, base), one, extra
    if kind == "linear":
        s = _mpf(sc["factor"])
        return [w / s for w in _plain(d, base)], one, extra
    if kind == "ntk":
        return _plain(d, base * mp.power(_mpf(sc["alpha"]), mp.mpf(d) / (d - 2))), one, extra
    if kind == "dynamic":
        s = _mpf(sc["factor"])
        L = max(seq_len or max_pos, max_pos)
        new_base = base * mp.power(s * L / max_pos - (s - 1), mp.mpf(d) / (d - 2))
        return _plain(d, new_base), one, extra
    if kind == "yarn":
        s = _mpf(sc["factor"]) if sc.get("factor") is not None else mp.mpf(max_pos) / L0
        fast, slow = _mpf(sc.get("beta_fast") or 32), _mpf(sc.get("beta_slow") or 1)
        low, high = _correction_dim(fast, d, base, L0), _correction_dim(slow, d, base, L0)
        extra["correction_range_raw"] = _vector([low, high])
        if sc.get("truncate", True):
            low, high = int(mp.floor(low)), int(mp.ceil(high))
            extra["correction_range"] = _vector([max(low, 0), min(high, d - 1)])
        low, high = max(low, 0), min(high, d - 1)
        if low == high:
            high = high + mp.mpf("0.001")
        ramp = [min(max((j - mp.mpf(low)) / (high - low), 0), 1) for j in range(d // 2)]
        inv = [w / s * r + w * (1 - r) for w, r in zip(_plain(d, base), ramp)]
        if sc.get("attention_factor") is not None:
            af = _mpf(sc["attention_factor"])
        elif sc.get("mscale") and sc.get("mscale_all_dim"):
            af = _g(s, _mpf(sc["mscale"])) / _g(s, _mpf(sc["mscale_all_dim"]))
        else:
            af = _g(s)
        return inv, af, extra
    if kind == "longrope":
        s = _mpf(sc["factor"]) if sc.get("factor") is not None else mp.mpf(max_pos) / L0
        ext = sc["long_factor"] if seq_len is not None and seq_len > L0 else sc["short_factor"]
        inv = [w / _mpf(e) for w, e in zip(_plain(d, base), ext)]
        if sc.get("attention_factor") is not None:
            af = _mpf(sc["attention_factor"])
        else:
            af = one if s <= 1 else mp.sqrt(1 + mp.log(s) / mp.log(L0))
        return inv, af, extra
    if kind == "llama3":
        s, lo, hi = _mpf(sc["factor"]), _mpf(sc["low_freq_factor"]), _mpf(sc["high_freq_factor"])
        inv, counts = [], [0, 0, 0]
        for w in _plain(d, base):
            lam = 2 * mp.pi / w
            if lam < L0 / hi:
                inv.append(w)
                counts[0] += 1
            elif lam > L0 / lo:
                inv.append(w / s)
                counts[2] += 1
            else:
                sm = (L0 / lam - lo) / (hi - lo)
                inv.append((1 - sm) * w / s + sm * w)
                counts[1] += 1
        extra["band_counts"] = _vector(counts)
        return inv, one, extra
    if kind == "proportional":
        p = _mpf(sc.get("partial_rotary_factor", 1.0))
        s = _mpf(sc.get("factor") or 1.0)
        rotated = int(mp.floor(p * d / 2))
        inv = [mp.power(base, -mp.mpf(2 * i) / d) / s if i < rotated else mp.mpf(0) for i in range(d // 2)]
        return inv, one, extra
    raise ValueError(f"oracle: unknown rope_type {kind!r}")


def inv_freq(params, inputs):
    inv, af, extra = frequencies(params)
    # shape (1,), not 0-d: golden/format.py's NPZ writer turns 0-d arrays into shape (1,)
    return {"inv_freq": _vector(inv), "attention_factor": _vector([af]), **extra}


# --------------------------------------------------------------------------- rotation

def _pairs(n, layout):
    """Channel indices (a, b) of pair i."""
    return (lambda i: (i, i + n)) if layout == "half" else (lambda i: (2 * i, 2 * i + 1))


def _rotate(x_row, angles, amps, layout, sign=1):
    """Rotate pairs of one row by sign*angle, scaled by amps; tail channels copy.

    ``sign=-1`` with the same ``amps`` is the transposed map: the vector-Jacobian product.
    """
    n = len(angles)
    pair = _pairs(n, layout)
    out = [_value(v) for v in x_row]
    for i in range(n):
        ia, ib = pair(i)
        a, b = _value(x_row[ia]), _value(x_row[ib])
        c, s = amps[i] * mp.cos(angles[i]), sign * amps[i] * mp.sin(angles[i])
        out[ia], out[ib] = a * c - b * s, a * s + b * c
    return out


def _position_index(idx, pos_ndim):
    """Index into ``positions`` of the row ``x[idx]`` (see the module docstring)."""
    if len(idx) == pos_ndim:
        return idx
    if len(idx) == pos_ndim + 1:
        return idx[:-2] + idx[-1:]  # x carries a heads axis the positions do not
    return idx[-1:]  # one sequence of positions shared by every leading axis


def _rotate_all(x, pos_ndim, angle_fn, amp_fn, layout, sign=1):
    """Rotate every row of ``x`` (..., D); angle_fn(pidx) / amp_fn(pidx) give per-pair angles and
    amplitudes at the positions index of the row."""
    out = np.empty(x.shape, dtype=object)
    for idx in np.ndindex(*x.shape[:-1]):
        pidx = _position_index(idx, pos_ndim)
        out[idx] = _rotate(x[idx], angle_fn(pidx), amp_fn(pidx), layout, sign)
    return out


def cos_sin(params, inputs):
    """cos/sin tables a*cos(p w_i), a*sin(p w_i) in the half or interleaved layout."""
    pos = inputs["positions"]
    with _extra_digits_for(pos):
        inv, af, _ = frequencies(params)
        a = _mpf(params["attention_factor"]) if "attention_factor" in params else af
        layout, n = params["layout"], len(inv)

        def value(fn):
            def at(*idx):
                *pidx, ch = idx
                i = ch % n if layout == "half" else ch // 2
                return a * fn(_mpf(pos[tuple(pidx)]) * inv[i])
            return at

        return {"cos": _grid(pos.shape + (2 * n,), value(mp.cos)), "sin": _grid(pos.shape + (2 * n,), value(mp.sin))}


def apply(params, inputs):
    """y = R_{p w} x (times the attention factor), dx = R_{p w}^T dy (the same map with -sin)."""
    pos = inputs["positions"]
    with _extra_digits_for(pos):
        inv, af, _ = frequencies(params)
        layout = params["layout"]
        angles = lambda pidx: [_mpf(pos[pidx]) * w for w in inv]
        amps = lambda pidx: [af] * len(inv)
        return {"y": _rotate_all(inputs["x"], pos.ndim, angles, amps, layout),
                "dx": _rotate_all(inputs["dy"], pos.ndim, angles, amps, layout, sign=-1)}


def xpos(params, inputs):
    """q' = zeta^((p-c)/B) R q, k' = zeta^(-(p-c)/B) R k, zeta_i = (2i + 0.4d)/(1.4d); scores q'k'^T.

    With a cotangent ``dscores`` G of the scores: dq'_m = sum_j G_mj k'_j, dk'_j = sum_m G_mj q'_m,
    and dq_m, dk_j are those rotated back by the transposed (equally scaled) maps.
    """
    d, layout, B = params["rotary_dim"], params["layout"], _mpf(params["scale_base"])
    inv = _plain(d, _mpf(params["base"]))
    n_total, centre = params.get("seq_len"), params["centre"]
    c = {"none": 0, "torchscale": -(-(n_total or 0) // 2), "rotary-embedding-torch": (n_total or 0) // 2}[centre]
    zeta = [(2 * i + mp.mpf("0.4") * d) / (mp.mpf("1.4") * d) for i in range(d // 2)]
    pos = inputs["positions"]
    angles = lambda pidx: [_mpf(pos[pidx]) * w for w in inv]
    amp_q = lambda pidx: [mp.power(z, (_mpf(pos[pidx]) - c) / B) for z in zeta]
    amp_k = lambda pidx: [mp.power(z, -(_mpf(pos[pidx]) - c) / B) for z in zeta]
    q = _rotate_all(inputs["q"], pos.ndim, angles, amp_q, layout)
    k = _rotate_all(inputs["k"], pos.ndim, angles, amp_k, layout)
    L, D = q.shape

    def dot(a, b):
        return mp.fsum(a[ch] * b[ch] for ch in range(D))

    out = {"q": q, "k": k, "scores": _grid((L, L), lambda m, j: dot(q[m], k[j]))}
    if "dscores" in inputs:
        g = inputs["dscores"]
        dq_rot = _grid((L, D), lambda m, ch: mp.fsum(_mpf(g[m, j]) * k[j, ch] for j in range(L)))
        dk_rot = _grid((L, D), lambda j, ch: mp.fsum(_mpf(g[m, j]) * q[m, ch] for m in range(L)))
        out["dq"] = _rotate_all(dq_rot, pos.ndim, angles, amp_q, layout, sign=-1)
        out["dk"] = _rotate_all(dk_rot, pos.ndim, angles, amp_k, layout, sign=-1)
    return out


def _streamed(params, inputs, freqs, stream_of):
    """Rotate x (L, D) with pair j driven by positions[stream_of(j), l] * freqs[j]; with a
    cotangent ``dy``, also dx = R^T dy."""
    pos = inputs["positions"]
    angles = lambda pidx: [_mpf(pos[(stream_of(j),) + pidx]) * freqs[j] for j in range(len(freqs))]
    ones = lambda pidx: [mp.mpf(1)] * len(freqs)
    out = {"y": _rotate_all(inputs["x"], pos.ndim - 1, angles, ones, params["layout"])}
    if "dy" in inputs:
        out["dx"] = _rotate_all(inputs["dy"], pos.ndim - 1, angles, ones, params["layout"], sign=-1)
    return out


def axial(params, inputs):
    """Pair j = a*m + k rotates by positions[a] * base^(-2k/(2m)), m = dim_per_axis // 2."""
    m = params["dim_per_axis"] // 2
    axes = inputs["positions"].shape[0]
    per_axis = _plain(2 * m, _mpf(params["base"]))
    return _streamed(params, inputs, per_axis * axes, lambda j: j // m)


def mrope(params, inputs):
    """Frequency j follows stream t/h/w by mrope_section (Qwen2-VL contiguous, Qwen3-VL interleaved)."""
    d, sec = params["rotary_dim"], params["mrope_section"]
    if params["variant"] == "qwen2-vl":
        def stream_of(j):  # chunk k holds frequencies sum(sec[:k]) <= j < sum(sec[:k+1])
            return sum(1 for k in range(len(sec)) if sum(sec[:k + 1]) <= j) % 3
    else:
        def stream_of(j):
            for s in (1, 2):
                if j % 3 == s and j < 3 * sec[s]:
                    return s
            return 0
    return _streamed(params, inputs, _plain(d, _mpf(params["base"])), stream_of)


def convert_layout(params, inputs):
    """interleaved row 2i -> half row i, row 2i+1 -> half row i + r/2 (per head); inverse for half->int."""
    w, heads, r = inputs["w"], params["num_heads"], params["rotary_dim"]
    hd = w.shape[0] // heads
    src_of = {}
    for h in range(heads):
        for i in range(r // 2):
            int_a, int_b, half_a, half_b = h * hd + 2 * i, h * hd + 2 * i + 1, h * hd + i, h * hd + i + r // 2
            if params["src"] == "interleaved":
                src_of[half_a], src_of[half_b] = int_a, int_b
            else:
                src_of[int_a], src_of[int_b] = half_a, half_b
    return {"w": _grid(w.shape, lambda row, col: _mpf(w[src_of.get(row, row), col]))}


def long_term_decay(params, inputs):
    """``(1/n) sum_{j=1..n} |sum_{k<j} exp(i r theta_k)|``, ``theta_k = base^(-2k/d)``."""
    distances = inputs["distances"]
    with _extra_digits_for(distances):
        theta = _plain(params["rotary_dim"], _mpf(params["base"]))
        n = len(theta)

        def bound(*idx):
            r = _mpf(distances[idx])
            total, acc = mp.mpf(0), mp.mpc(0)
            for t in theta:
                acc += mp.expj(r * t)
                total += abs(acc)
            return total / n

        return {"bound": _grid(distances.shape, bound)}
