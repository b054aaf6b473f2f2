"""What each mechanism of the fused ALiBi forward buys, per 64 x 64 tile: an interleaved A/B in one process.

``python bench/alibi_mechanisms.py [ROUNDS]``. Each forward tile step (``posenc_np/kernels/alibi.py``,
``_attend_range``) forms ``S = Q_a K_b^T`` (BLAS), turns ``S`` into ``P~`` (scale, bias, row
maximum, exponentials), forms ``P~ V_b`` (BLAS) and rescales the accumulator. The mechanisms
kept in the forward, each timed on one thread against what it replaced, on float32 64 x 64
tiles with d = 64 (the kernel's tiles), ``calls`` repetitions inside one compiled loop:

* ``transposed key tiles``: ``Q_a K_b^T`` as ``np.dot(q, kt)`` with ``kt`` a C-contiguous
  ``(d, 64)`` tile of the once-transposed keys (``_transpose_key_tiles``), against
  ``np.dot(q, k.T)`` on a transposed view (what BLAS gets as a "T" operand);
* ``order-key row maxima``: the score loop (scale, bias, store, row maximum, NaN test; the first
  loop of ``_fwd_scores``) with each row's maximum taken as the integer maximum of order keys
  (``kernels._numba.order_key``), against the float ``m = x if x > m else m`` reduction, which
  LLVM keeps scalar without fast-math's ``nnan``, and with it the whole loop;
* ``float32 exp``: ``kernels._numba.exp`` over a tile (the polynomial in float32), against the
  same degree-7 polynomial evaluated in float64 (what ``exp`` did before, 0.58 ulp);
* and, for scale, ``P~ V_b`` (``np.dot(p, v)``) and the whole library tile step
  (``_attend_range`` over one key tile) as they are.

Rounds alternate the order of the variants; the table gives the median over rounds of each
variant's time per call (microseconds), and what the mechanism saves of the whole tile step.

A second table times one mechanism of the door, on a whole call: the float16 <-> float32 loops
(``_half_to_float`` / ``_float_to_half``, used by ``_items`` and ``_to_io``), against NumPy's casts
in their place, in ``fused_forward`` on float16 ``(1, 8, 2048, 64)`` q, k, v, causal, one thread.
"""

from __future__ import annotations

import math
import os
import statistics
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

from posenc_np.kernels import alibi as kalibi  # noqa: E402
from posenc_np.kernels._numba import (_bits_to_f32, blas_single_thread, exp, from_order_key,  # noqa: E402
                                      njit_kernel, order_key)

_loop = njit_kernel(parallel=False, cache=False)
CALLS = 4000


@_loop
def _dot_view(q, k, s, calls):
    for _ in range(calls):
        np.dot(q, k.T, s)


@_loop
def _dot_tile(q, kt, s, calls):
    for _ in range(calls):
        np.dot(q, kt, s)


@_loop
def _scores_float_max(s0, s, out, calls):
    for _ in range(calls):
        for a in range(s.shape[0]):
            m = np.float32(-np.inf)
            dist = np.float32(10_000 + a)
            nan_seen = False
            for b in range(s.shape[1]):
                x = s0[a, b] * np.float32(0.125) + np.float32(-0.0625) * dist
                dist -= np.float32(1)
                s[a, b] = x
                m = x if x > m else m
                nan_seen |= x != x
            out[a] = np.float32(np.nan) if nan_seen else m


@_loop
def _scores_key_max(s0, s, out, calls):
    for _ in range(calls):
        for a in range(s.shape[0]):
            key_max = order_key(np.float32(-np.inf))
            dist = np.float32(10_000 + a)
            nan_seen = False
            for b in range(s.shape[1]):
                x = s0[a, b] * np.float32(0.125) + np.float32(-0.0625) * dist
                dist -= np.float32(1)
                s[a, b] = x
                key = order_key(x)
                key_max = key if key > key_max else key_max
                nan_seen |= x != x
            out[a] = np.float32(np.nan) if nan_seen else from_order_key(key_max)


@_loop
def _exp_f32(s, out, calls):
    for _ in range(calls):
        for a in range(s.shape[0]):
            for b in range(s.shape[1]):
                out[a, b] = exp(s[a, b])


@_loop
def _exp_f64_poly(s, out, calls):
    """The degree-7 Taylor polynomial of ``exp`` evaluated in float64 (the earlier ``_exp32``)."""
    for _ in range(calls):
        for a in range(s.shape[0]):
            for b in range(s.shape[1]):
                x = s[a, b]
                lo = np.float32(-87.0)
                xc = lo if x < lo else x
                xc = np.float32(0.0) if xc != xc else xc
                nf = np.floor(xc * np.float32(1.4426950408889634) + np.float32(0.5))
                r = np.float64(x) - np.float64(nf) * 0.6931471805599453
                p = 1.0 / 5040.0
                p = p * r + 1.0 / 720.0
                p = p * r + 1.0 / 120.0
                p = p * r + 1.0 / 24.0
                p = p * r + 1.0 / 6.0
                p = p * r + 0.5
                p = p * r + 1.0
                p = p * r + 1.0
                res = np.float32(p) * _bits_to_f32((np.int32(nf) + np.int32(127)) << np.int32(23))
                out[a, b] = np.float32(0.0) if x < lo else res


@_loop
def _tile_step(q, k, kt, v, acc, row_max, row_sum, alpha, pv, s_buf, calls):
    ninf = np.float32(-np.inf)
    for _ in range(calls):
        row_max[:] = ninf
        row_sum[:] = 0
        kalibi._attend_range(q, k, kt, v, 10_000, 0, 64, True, np.float32(-0.0625), np.float32(0.125), ninf,
                             acc, row_max, row_sum, alpha, pv, s_buf)


def measure(rounds: int = 11) -> dict:
    rng = np.random.default_rng(0)
    f = np.float32
    q, k, v = (rng.standard_normal((64, 64)).astype(f) for _ in range(3))
    kt = np.ascontiguousarray(k.T)
    s = np.empty((64, 64), f)
    scores = (q @ k.T * f(0.125)).astype(f)
    tile_out = np.empty((64, 64), f)
    row = np.empty(64, f)
    state = [np.zeros((64, 64), f), np.empty(64, f), np.empty(64, f), np.empty(64, f), np.empty((64, 64), f),
             np.empty(64 * 64, f)]
    variants = {
        "QK^T, transposed view": lambda: _dot_view(q, k, s, CALLS),
        "QK^T, transposed key tile": lambda: _dot_tile(q, kt, s, CALLS),
        "score loop, float maximum": lambda: _scores_float_max(scores, s, row, CALLS),
        "score loop, order-key maximum": lambda: _scores_key_max(scores, s, row, CALLS),
        "exp, float64 polynomial": lambda: _exp_f64_poly(scores, tile_out, CALLS),
        "exp, float32 polynomial": lambda: _exp_f32(scores, tile_out, CALLS),
        "P~V": lambda: _dot_tile(scores, v, s, CALLS),
        "library tile step": lambda: _tile_step(q, k, kt, v, *state, CALLS),
    }
    times = {name: [] for name in variants}
    with blas_single_thread():
        for fn in variants.values():
            fn()
        for r in range(rounds):
            order = list(variants.items())
            for name, fn in (order if r % 2 == 0 else order[::-1]):
                t0 = time.perf_counter()
                fn()
                times[name].append((time.perf_counter() - t0) / CALLS)
    return {name: statistics.median(t) for name, t in times.items()}


def conversions(rounds: int = 11) -> dict:
    """Seconds per ``fused_forward`` call on float16 inputs with the library's conversion loops and
    with NumPy's casts in their place (same bits: ``tests/test_kernels_alibi.py``)."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 8, 2048, 64)).astype(np.float16) for _ in range(3))
    slopes = 2.0 ** -np.arange(1.0, 9.0)
    loops = (kalibi._items, kalibi._to_io)

    def numpy_items(a, compute):
        return np.ascontiguousarray(a.reshape((math.prod(a.shape[:-2]),) + a.shape[-2:]), dtype=compute)

    def numpy_to_io(a, io):
        return a.astype(io, copy=False)

    variants = {"conversion loops": loops, "NumPy casts": (numpy_items, numpy_to_io)}
    times = {name: [] for name in variants}
    try:
        for r in range(rounds):
            order = list(variants.items())
            for name, (items, to_io) in (order if r % 2 == 0 else order[::-1]):
                kalibi._items, kalibi._to_io = items, to_io
                kalibi.fused_forward(q, k, v, slopes, True, 0.125, 0)
                t0 = time.perf_counter()
                kalibi.fused_forward(q, k, v, slopes, True, 0.125, 0)
                times[name].append(time.perf_counter() - t0)
    finally:
        kalibi._items, kalibi._to_io = loops
    return {name: statistics.median(t) for name, t in times.items()}


def markdown(us: dict) -> str:
    step = us["library tile step"]
    rows = [("transposed key tiles", "QK^T, transposed view", "QK^T, transposed key tile"),
            ("order-key row maxima", "score loop, float maximum", "score loop, order-key maximum"),
            ("float32 exp", "exp, float64 polynomial", "exp, float32 polynomial")]
    lines = ["| mechanism | without (us per tile) | with (us per tile) | saved per tile, % of the library tile step |",
             "|---|---:|---:|---:|"]
    for name, off, on in rows:
        lines.append(f"| {name} | {1e6 * us[off]:.2f} | {1e6 * us[on]:.2f} | "
                     f"{100 * (us[off] - us[on]) / step:.0f} % |")
    lines += ["", f"For scale: `P~ V_b` {1e6 * us['P~V']:.2f} us, the library's whole tile step (both products, "
                  f"scores, exponentials, rescaling) {1e6 * step:.2f} us (one thread, float32, 64 x 64 tiles, d = 64)."]
    return "\n".join(lines)


def conversions_markdown(s: dict) -> str:
    on, off = s["conversion loops"], s["NumPy casts"]
    return "\n".join([
        "| mechanism | call | without (ms) | with (ms) | saved |", "|---|---|---:|---:|---:|",
        f"| float16 conversion loops | fused forward, float16 (1, 8, 2048, 64), causal, one thread | "
        f"{1e3 * off:.1f} | {1e3 * on:.1f} | {100 * (1 - on / off):.0f} % |"])


if __name__ == "__main__":
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 11
    print(markdown(measure(rounds)))
    print()
    print(conversions_markdown(conversions(rounds)))
