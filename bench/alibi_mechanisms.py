"""What each mechanism of the fused ALiBi kernels buys, per 64 x 64 tile: an interleaved A/B in one process.

``python bench/alibi_mechanisms.py [ROUNDS]``. Each forward tile step (``posenc_np/kernels/alibi.py``,
``_attend_range``) forms the transposed scores ``S^T = K_b Q_a^T`` (BLAS, the query tile transposed
once per work item), turns them into ``P~^T`` along key rows with the queries as vector lanes
(``_fwd_scores_t``: scale, bias, running maxima and sums as elementwise updates, exponentials),
forms ``P~ V_b`` as ``(P~^T)^T V_b`` (BLAS) and rescales the accumulator. The mechanisms kept in
the forward, each timed on one thread against what it replaced, on float32 64 x 64 tiles with
d = 64 (the kernel's tiles), ``calls`` repetitions inside one compiled loop:

* ``transposed score tiles``: the library's step (``_attend_range`` over :data:`TILES` key tiles
  of one query tile, per tile) against the row form it replaced: ``S = Q_a K_b^T`` on a stored
  transposed key tile, ``_fwd_scores`` (row maxima as order keys, see below), ``np.dot(s, v)``
  and the same rescaling. The row form also needed the keys transposed once per call (a pass
  over ``k`` into a new array, not timed here: the whole calls on ``docs/benchmarks.md`` are);
* ``transposed query tile``: ``K_b Q_a^T`` as ``np.dot(k, qt)`` with ``qt`` the query tile
  transposed into a C-contiguous ``(d, 64)`` array, against ``np.dot(k, q.T)`` on a transposed
  view (what BLAS gets as a "T" operand);
* ``order-key row maxima``, in the row form that query tiles of at most ``SMALL_Q`` rows
  (decoding) keep: the score loop (scale, bias, store, row maximum, NaN test; the first loop of
  ``_fwd_scores``) with each row's maximum taken as the integer maximum of order keys
  (``kernels._numba.order_key``), against the float ``m = x if x > m else m`` reduction, which
  LLVM keeps scalar without fast-math's ``nnan``, and with it the whole loop;
* ``vectorisable exp``: ``kernels._numba.exp`` over a tile (a float32 polynomial that LLVM
  vectorises), against ``math.exp``, which Numba compiles to one call of the C library's ``expf``
  per element (no vectorised math library here);
* and, for scale, ``P~ V_b`` (``np.dot(p.T, v)``) and the whole library tile step as it is.

The backward's tile step (``_dkdv_tile`` and the ``dQ`` product of ``_backward_one_pass_kernel``:
five products, the score loop, three accumulations) takes its two products with a transpose,
``K_b Q_a^T`` and ``V_b dO_a^T``, on C-contiguous transposed tiles of ``Q`` and ``dO`` (the
one-pass backward transposes each query tile once into tile buffers, the two-pass backward stores
tile-transposed copies); without: the same step handed transposed views ``Q_a^T``, ``dO_a^T``.

Rounds alternate the order of the variants; the table gives the median over rounds of each
variant's time per call (microseconds), and what the mechanism saves of the whole tile step.

A second table times one mechanism of the door, on whole calls: the float16 <-> float32 loops
(``_half_to_float`` / ``_float_to_half``, used by ``_items`` and ``_to_io``), against NumPy's casts
in their place, in ``fused_forward`` on float16 inputs, causal, one thread: a ``(1, 8, 2048, 64)``
forward, and decoding one query against a long float16 KV cache, where the conversion of the
cache is most of the call (:data:`CONVERSION_CALLS`).

A third times the small-query path of the same kernels on whole float32 calls, one thread: a
query tile of at most ``SMALL_Q`` rows (decoding) forms its two products with plain loops
(``_small_qkt``, ``_small_pv``) on the keys as stored, against the kernels compiled here with
``SMALL_Q = 0``, where every tile takes the BLAS products on transposed score tiles
(:data:`SMALL_QUERY_CALLS`).

A fourth times the door's allocation of its outputs, on whole float32 forward + backward calls
(:func:`huge_pages`: a loop of calls per variant, each variant in its own process, 2 threads):
``out`` and the gradients of at least 4 MiB start on a 2 MiB boundary (``kernels._numba.new_array``:
NumPy's transparent huge pages then back them whole), against plain ``np.zeros``.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time
import types

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

from posenc_np.kernels import alibi as kalibi  # noqa: E402
from posenc_np.kernels._numba import blas_single_thread, exp, from_order_key, njit_kernel, order_key  # noqa: E402

_loop = njit_kernel(parallel=False, cache=False)
CALLS = 4000


TILES = 16  # key tiles per query tile in the tile-step rows (an average item at T = 2048 has 16.5)


@_loop
def _dot_view(k, q, s, calls):
    for _ in range(calls):
        np.dot(k, q.T, s)


@_loop
def _dot_tile(k, qt, s, calls):
    for _ in range(calls):
        np.dot(k, qt, s)


@_loop
def _dot_view_first(pt, v, s, calls):
    for _ in range(calls):
        np.dot(pt.T, v, s)


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
def _exp_math(s, out, calls):
    for _ in range(calls):
        for a in range(s.shape[0]):
            for b in range(s.shape[1]):
                out[a, b] = math.exp(s[a, b])


@_loop
def _tile_step(q, k, v, acc, row_max, row_sum, calls):
    ninf = np.float32(-np.inf)
    for _ in range(calls):
        row_max[:] = ninf
        row_sum[:] = 0
        kalibi._attend_range(q, k, v, 10_000, 0, k.shape[0], True, np.float32(-0.0625), np.float32(0.125), ninf,
                             acc, row_max, row_sum)


@_loop
def _row_tile_step(q, kt, v, acc, row_max, row_sum, alpha, pv, s, calls):
    """The row form the library replaced: ``S = Q_a K_b^T`` on stored transposed key tiles."""
    ninf = np.float32(-np.inf)
    d = q.shape[1]
    for _ in range(calls):
        row_max[:] = ninf
        row_sum[:] = 0
        for j0 in range(0, v.shape[0], 64):
            np.dot(q, kt[j0 * d:(j0 + 64) * d].reshape((d, 64)), s)
            kalibi._fwd_scores(s, 10_000, j0, True, np.float32(-0.0625), np.float32(0.125), ninf, row_max, row_sum,
                               alpha)
            np.dot(s, v[j0:j0 + 64], pv)
            kalibi._rescale_add(acc, alpha, pv)


@_loop
def _backward_step(q, qt, do, dot, k, v, lse, delta, st, dpt, tk, tv, tq, dk, dv, dq, calls):
    ninf = np.float32(-np.inf)
    for _ in range(calls):
        dst = kalibi._dkdv_tile(q, qt, do, dot, k, v, 10_000, 0, True, np.float32(-0.0625), np.float32(0.125), ninf,
                                lse, delta, st, dpt, tk, tv, dk, dv)
        np.dot(dst.T, k, tq)
        kalibi._add(dq, tq)


def measure(rounds: int = 11) -> dict:
    rng = np.random.default_rng(0)
    f = np.float32
    q, k, v = (rng.standard_normal((64, 64)).astype(f) for _ in range(3))
    qt = np.ascontiguousarray(q.T)
    s = np.empty((64, 64), f)
    scores = (q @ k.T * f(0.125)).astype(f)
    tile_out = np.empty((64, 64), f)
    row = np.empty(64, f)
    keys, values = (rng.standard_normal((64 * TILES, 64)).astype(f) for _ in range(2))
    keys_t = np.empty((1, keys.size), f)
    kalibi._transpose_tiles(keys[None], keys_t)
    state = [np.zeros((64, 64), f), np.empty(64, f), np.empty(64, f)]
    row_state = state + [np.empty(64, f), np.empty((64, 64), f), np.empty((64, 64), f)]
    steps = CALLS // TILES
    do = rng.standard_normal((64, 64)).astype(f)
    qt, dot = np.ascontiguousarray(q.T), np.ascontiguousarray(do.T)
    lse = np.full(64, 10.0, f)  # P = exp(S - lse) small: the values stay finite over the calls
    bstate = [lse, np.zeros(64, f), *(np.empty(64 * 64, f) for _ in range(2)),
              *(np.empty((64, 64), f) for _ in range(3)), *(np.zeros((64, 64), f) for _ in range(3))]
    variants = {
        "K_bQ_a^T, transposed view": lambda: _dot_view(k, q, s, CALLS),
        "K_bQ_a^T, transposed query tile": lambda: _dot_tile(k, qt, s, CALLS),
        "score loop, float maximum": lambda: _scores_float_max(scores, s, row, CALLS),
        "score loop, order-key maximum": lambda: _scores_key_max(scores, s, row, CALLS),
        "exp, math.exp": lambda: _exp_math(scores, tile_out, CALLS),
        "exp, kernels._numba.exp": lambda: _exp_f32(scores, tile_out, CALLS),
        "P~V": lambda: _dot_view_first(scores, v, s, CALLS),
        "row-form tile step": lambda: _row_tile_step(q, keys_t[0], values, *row_state, steps),
        "library tile step": lambda: _tile_step(q, keys, values, *state, steps),
        "backward step, transposed views": lambda: _backward_step(q, q.T, do, do.T, k, v, *bstate, CALLS),
        "backward step, transposed tiles": lambda: _backward_step(q, qt, do, dot, k, v, *bstate, CALLS),
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
                times[name].append((time.perf_counter() - t0) / (steps * TILES if "tile step" in name else CALLS))
    return {name: statistics.median(t) for name, t in times.items()}


def _alternate(variants: dict, call, rounds: int) -> dict:
    """Median seconds of ``call()`` under each variant (``variants`` maps a name to a function
    that puts it in place); rounds alternate the order, each times one call after a warm-up call."""
    times = {name: [] for name in variants}
    for r in range(rounds):
        order = list(variants.items())
        for name, install in (order if r % 2 == 0 else order[::-1]):
            install()
            call()
            t0 = time.perf_counter()
            call()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) for name, t in times.items()}


#: The calls the conversions are timed on: (label, q shape, k and v shape, query_offset), causal.
CONVERSION_CALLS = (
    ("fused forward, float16 (1, 8, 2048, 64)", (1, 8, 2048, 64), (1, 8, 2048, 64), 0),
    ("decoding, float16, 1 query of 8 heads against 65536 cached keys, d = 64", (1, 8, 1, 64), (1, 8, 65536, 64),
     65535),
)


def conversions(rounds: int = 11) -> dict:
    """Seconds per ``fused_forward`` call on float16 inputs with the library's conversion loops and
    with NumPy's casts in their place (same bits: ``tests/test_kernels_alibi.py``), for each of
    :data:`CONVERSION_CALLS`: ``{label: {variant: seconds}}``."""
    rng = np.random.default_rng(0)
    loops = (kalibi._items, kalibi._to_io)

    def numpy_items(a, compute):
        return np.ascontiguousarray(a.reshape((math.prod(a.shape[:-2]),) + a.shape[-2:]), dtype=compute)

    def numpy_to_io(a, io):
        return a.astype(io, copy=False)

    def install(items, to_io):
        kalibi._items, kalibi._to_io = items, to_io

    variants = {"conversion loops": lambda: install(*loops), "NumPy casts": lambda: install(numpy_items, numpy_to_io)}
    result = {}
    try:
        for label, q_shape, kv_shape, offset in CONVERSION_CALLS:
            q = rng.standard_normal(q_shape).astype(np.float16)
            k, v = (rng.standard_normal(kv_shape).astype(np.float16) for _ in range(2))
            slopes = 2.0 ** -np.arange(1.0, q_shape[1] + 1.0)
            result[label] = _alternate(variants, lambda: kalibi.fused_forward(q, k, v, slopes, True, 0.125, offset),
                                       rounds)
    finally:
        install(*loops)
    return result


#: Decoding calls for the small-query path: (label, q shape, k and v shape, query_offset), causal.
SMALL_QUERY_CALLS = (
    ("decoding, 1 query of 8 heads against 4096 cached keys", (1, 8, 1, 64), (1, 8, 4096, 64), 4095),
    ("decoding, 1 query of 8 heads against 65536 cached keys", (1, 8, 1, 64), (1, 8, 65536, 64), 65535),
    ("4 queries of 8 heads against 8192 cached keys", (1, 8, 4, 64), (1, 8, 8192, 64), 8188),
    ("7 queries (SMALL_Q) of 8 heads against 8192 cached keys", (1, 8, 7, 64), (1, 8, 8192, 64), 8185),
)


def _blas_only_kernels() -> dict:
    """The forward kernel compiled with ``SMALL_Q = 0``: every query tile takes BLAS."""
    scope = dict(kalibi.__dict__, SMALL_Q=0)
    attend = kalibi._attend_range.py_func
    scope["_attend_range"] = njit_kernel(parallel=False, cache=False)(
        types.FunctionType(attend.__code__, scope, attend.__name__ + "_blas"))
    body = kalibi._forward_kernel.py_func
    kernel = njit_kernel(cache=False)(types.FunctionType(body.__code__, scope, body.__name__ + "_blas"))
    return {"_forward_kernel": kernel}


def small_queries(rounds: int = 11) -> dict:
    """Seconds per float32 ``fused_forward`` call with the small-query loops and with BLAS in their
    place, for each of :data:`SMALL_QUERY_CALLS`: ``{label: {variant: seconds}}``."""
    rng = np.random.default_rng(0)
    library = {"_forward_kernel": kalibi._forward_kernel}
    blas, small_q = _blas_only_kernels(), kalibi.SMALL_Q

    def install(kernels, threshold):
        for name, kernel in kernels.items():
            setattr(kalibi, name, kernel)
        kalibi.SMALL_Q = threshold

    variants = {"small-query loops": lambda: install(library, small_q), "BLAS": lambda: install(blas, 0)}
    result = {}
    try:
        for label, q_shape, kv_shape, offset in SMALL_QUERY_CALLS:
            q, k, v = (rng.standard_normal(shape, dtype=np.float32) for shape in (q_shape, kv_shape, kv_shape))
            slopes = 2.0 ** -np.arange(1.0, q_shape[1] + 1.0)
            result[label] = _alternate(variants, lambda: kalibi.fused_forward(q, k, v, slopes, True, 0.125, offset),
                                       rounds)
    finally:
        install(library, small_q)
    return result


def markdown(us: dict) -> str:
    step = us["library tile step"]
    rows = [("transposed score tiles", "row-form tile step", "library tile step"),
            ("transposed query tile", "K_bQ_a^T, transposed view", "K_bQ_a^T, transposed query tile"),
            ("order-key row maxima (row form: decoding)", "score loop, float maximum", "score loop, order-key maximum"),
            ("vectorisable exp", "exp, math.exp", "exp, kernels._numba.exp")]
    lines = ["| mechanism | without (us per tile) | with (us per tile) | saved per tile, % of the library tile step |",
             "|---|---:|---:|---:|"]
    for name, off, on in rows:
        lines.append(f"| {name} | {1e6 * us[off]:.2f} | {1e6 * us[on]:.2f} | "
                     f"{100 * (us[off] - us[on]) / step:.0f} % |")
    off, on = us["backward step, transposed views"], us["backward step, transposed tiles"]
    lines.append(f"| transposed Q and dO tiles (backward) | {1e6 * off:.2f} | {1e6 * on:.2f} | "
                 f"{100 * (off - on) / on:.0f} % of the backward tile step |")
    lines += ["", f"For scale: `P~ V_b` {1e6 * us['P~V']:.2f} us, the library's whole tile step (both products, "
                  f"scores, exponentials, rescaling; {TILES} key tiles of one query tile, per tile) "
                  f"{1e6 * step:.2f} us, its backward tile step (five products, "
                  f"the score loop, three accumulations) {1e6 * on:.2f} us (one thread, float32, 64 x 64 tiles, "
                  "d = 64)."]
    return "\n".join(lines)


def conversions_markdown(calls: dict) -> str:
    lines = ["| mechanism | call (causal, one thread) | without (ms) | with (ms) | saved |", "|---|---|---:|---:|---:|"]
    for label, s in calls.items():
        on, off = s["conversion loops"], s["NumPy casts"]
        lines.append(f"| float16 conversion loops | {label} | {1e3 * off:.1f} | {1e3 * on:.1f} | "
                     f"{100 * (1 - on / off):.0f} % |")
    return "\n".join(lines)


def small_queries_markdown(calls: dict) -> str:
    lines = ["| mechanism | call (float32, causal, one thread) | without (ms) | with (ms) | saved |",
             "|---|---|---:|---:|---:|"]
    for label, s in calls.items():
        on, off = s["small-query loops"], s["BLAS"]
        lines.append(f"| small-query loops | {label}, d = 64 | {1e3 * off:.2f} | {1e3 * on:.2f} | "
                     f"{100 * (1 - on / off):.0f} % |")
    return "\n".join(lines)


_HUGE_PAGES_WORKER = r"""
import json, resource, statistics, sys, time
import numpy as np
from posenc_np.kernels import alibi as kalibi
if sys.argv[1] == "plain":
    kalibi.new_array = lambda shape, dtype, *, zero=False: (np.zeros if zero else np.empty)(shape, dtype)
t = int(sys.argv[2])
rng = np.random.default_rng(0)
q, k, v, do = (rng.standard_normal((1, 8, t, 64), dtype=np.float32) for _ in range(4))
slopes = 2.0 ** -np.arange(1.0, 9.0)
times, faults = [], []
for i in range(6):  # a training loop's steady state: each step's outputs freed before the next
    f0, t0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
    out, lse = kalibi.fused_forward(q, k, v, slopes, True, 0.125, 0)
    kalibi.fused_backward(do, q, k, v, out, lse, slopes, True, 0.125, 0)
    times.append(time.perf_counter() - t0)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
    del out, lse
print(json.dumps({"s": statistics.median(times[1:]), "faults": statistics.median(faults[1:])}))
"""


def huge_pages(rounds: int = 11) -> dict:
    """Float32 forward + backward (``fused_forward`` then ``fused_backward``, causal, ``(1, 8, T, 64)``,
    Numba's default threads) with the outputs on huge-page boundaries (``kernels._numba.new_array``)
    and with plain ``np.zeros`` in its place. Each variant runs in its own process, as a loop of calls
    whose outputs are freed before the next (a training loop: what malloc then hands back decides
    the page faults), the processes alternating over ``max(3, rounds // 3)`` rounds:
    ``{T: {variant: (seconds per call, page faults per call)}}``, medians."""
    env = {key: val for key, val in os.environ.items() if key != "NUMBA_NUM_THREADS"}
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    result = {}
    for t in (2048, 4096):
        runs = {"huge pages": [], "plain": []}
        for r in range(max(3, rounds // 3)):
            for name in (("huge pages", "plain") if r % 2 == 0 else ("plain", "huge pages")):
                proc = subprocess.run([sys.executable, "-c", _HUGE_PAGES_WORKER, name.split()[0], str(t)],
                                      capture_output=True, text=True, env=env, check=True, timeout=600)
                runs[name].append(json.loads(proc.stdout.strip().splitlines()[-1]))
        result[t] = {name: (statistics.median(x["s"] for x in v), statistics.median(x["faults"] for x in v))
                     for name, v in runs.items()}
    return result


def huge_pages_markdown(calls: dict) -> str:
    lines = ["| mechanism | call (float32, causal, 2 threads, a loop of calls) | without: ms (page faults) | "
             "with: ms (page faults) | saved |", "|---|---|---:|---:|---:|"]
    for t, s in calls.items():
        (on, f_on), (off, f_off) = s["huge pages"], s["plain"]
        lines.append(f"| outputs on huge pages | forward + backward (1, 8, {t}, 64) | {1e3 * off:.1f} ({f_off:.0f}) | "
                     f"{1e3 * on:.1f} ({f_on:.0f}) | {100 * (1 - on / off):.0f} % |")
    return "\n".join(lines)


if __name__ == "__main__":
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 11
    print(markdown(measure(rounds)))
    print()
    print(conversions_markdown(conversions(rounds)))
    print()
    print(small_queries_markdown(small_queries(rounds)))
    print()
    print(huge_pages_markdown(huge_pages(rounds)))
