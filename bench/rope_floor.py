"""What the simplest possible Numba RoPE loops reach against the in-place and copy rooflines.

``python bench/rope_floor.py [--rows R]`` times, on a ``(R, 128)`` float32 array (default
``R = 524288``: 256 MiB) with ``(4096, 128)`` tables, each of these minimal kernels (a ``prange``
over rows, no argument handling) next to the library's kernel, every call after a sweep over a
600 MiB buffer (so that no variant finds its array in a large L3), median of 7:

* ``scale``: ``x = -x`` in place (the in-place roofline of ``bench/bench_rope.py``);
* ``half in place``: the ``half`` rotation in place, one loop storing both half-rows;
* ``half in place, one table row``: the same reading table row 0 for every row (no table traffic);
* ``half out, one loop`` / ``half out, two loops``: out of place, both half-rows stored in one
  loop, or each half-row in its own loop (what ``posenc_np.kernels.rope`` does out of place);
* ``interleaved out``: out of place, pairs ``(2i, 2i+1)``;
* ``copy``: ``np.copyto`` (the out-of-place roofline's copy).

GB/s count ``2|x|`` for every variant (tables not counted). Not part of ``bench/run.py``: a
by-hand study of what bounds the RoPE targets on a machine, summarised in ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numba
import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

FASTMATH = {"nsz", "arcp", "afn", "reassoc"}


@numba.njit(parallel=True, fastmath=FASTMATH)
def scale(x):
    for i in numba.prange(x.shape[0]):
        x[i] = -x[i]


@numba.njit(parallel=True, fastmath=FASTMATH)
def half_one_loop(x, c, s, y, one_row):
    """Both half-rows stored in one loop; ``y`` may be ``x`` (in place: each pair is loaded first)."""
    rows, d = x.shape
    n = d // 2
    for r in numba.prange(rows):
        t = 0 if one_row else r % c.shape[0]
        for i in range(n):
            a, b = x[r, i], x[r, i + n]
            y[r, i] = a * c[t, i] - b * s[t, i]
            y[r, i + n] = a * s[t, i + n] + b * c[t, i + n]


@numba.njit(parallel=True, fastmath=FASTMATH)
def half_out_two_loops(x, c, s, y):
    rows, d = x.shape
    n = d // 2
    for r in numba.prange(rows):
        t = r % c.shape[0]
        for i in range(n):
            y[r, i] = x[r, i] * c[t, i] - x[r, i + n] * s[t, i]
        for i in range(n):
            y[r, i + n] = x[r, i] * s[t, i + n] + x[r, i + n] * c[t, i + n]


@numba.njit(parallel=True, fastmath=FASTMATH)
def interleaved_out(x, c, s, y):
    rows, d = x.shape
    for r in numba.prange(rows):
        t = r % c.shape[0]
        for i in range(d // 2):
            a, b = x[r, 2 * i], x[r, 2 * i + 1]
            y[r, 2 * i] = a * c[t, 2 * i] - b * s[t, 2 * i]
            y[r, 2 * i + 1] = a * s[t, 2 * i + 1] + b * c[t, 2 * i + 1]


def main(argv=None) -> int:
    from posenc_np import rope
    from posenc_np.kernels import rope_apply

    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=524288)
    args = parser.parse_args(argv)
    t_len, d = 4096, 128
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.rows, d), dtype=np.float32)
    y = np.empty_like(x)
    freqs = rope.inv_freq(d)[0]
    half = rope.cos_sin(np.arange(t_len), freqs, dtype=np.float32)
    inter = rope.cos_sin(np.arange(t_len), freqs, layout="interleaved", dtype=np.float32)
    # the library's kernel on the same rows, as (rows / T, T, d) so that row r uses table row r % T
    x3, y3 = x.reshape(-1, t_len, d), y.reshape(-1, t_len, d)
    sweep = np.ones(600 << 18, np.float32)
    fns = {
        "scale": lambda: scale(x.reshape(-1)),
        "half in place": lambda: half_one_loop(x, *half, x, False),
        "half in place, one table row": lambda: half_one_loop(x, *half, x, True),
        "library: half in place": lambda: rope_apply(x3, *half, layout="half", out=x3),
        "half out, one loop": lambda: half_one_loop(x, *half, y, False),
        "half out, two loops": lambda: half_out_two_loops(x, *half, y),
        "library: half out": lambda: rope_apply(x3, *half, layout="half", out=y3),
        "interleaved out": lambda: interleaved_out(x, *inter, y),
        "library: interleaved out": lambda: rope_apply(x3, *inter, layout="interleaved", out=y3),
        "copy": lambda: np.copyto(y, x),
    }
    times = {name: [] for name in fns}
    for fn in fns.values():
        fn()
    for _ in range(7):
        for name, fn in fns.items():
            scale(sweep)
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    gbs = {name: 2 * x.nbytes / float(np.median(t)) / 1e9 for name, t in times.items()}
    print(f"x = ({args.rows}, {d}) float32 ({x.nbytes >> 20} MiB), tables ({t_len}, {d}); GB/s of 2|x|, "
          f"% of scale (in place) or of copy (out of place)")
    print("| kernel | GB/s | % of roofline |")
    print("|---|---:|---:|")
    for name, value in gbs.items():
        ref = gbs["scale"] if "in place" in name or name == "scale" else gbs["copy"]
        print(f"| {name} | {value:.1f} | {100 * value / ref:.0f} % |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
