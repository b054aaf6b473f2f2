"""Time ``rope.apply`` against the rotation it launches: how much of a public call is overhead.

Usage: ``python tools/api_overhead.py [--repeat N] [--json] [--cpu] [--shape B,H,T,D ...]``.

For each shape (``(B, H, T, D)`` float32, ``(T, D)`` tables from ``rope.cos_sin``, layout
``half``, ``backend="auto"``, which picks the Numba kernel at these sizes) it reports

- ``apply``: median wall time of ``rope.apply(x, cos, sin)``;
- ``rotation``: median wall time of allocating the output and running the compiled kernel
  alone, with the exact arguments ``rope.apply`` handed it (captured once) but a fresh output
  buffer: the rotation without any Python around it;
- ``share``: rotation / apply, the fraction of the public call spent rotating;
- ``calls``: Python-level function calls per ``rope.apply`` (cProfile's count);
- ``checks``: the door's argument checks alone (``rope._check_rotation``);
- ``launch``: the unchecked kernel entry ``kernels.rope.rotate_tables`` (the kernel's Python
  planning and the launch: everything ``apply`` does after its checks);
- ``out=x``: median wall time of ``rope.apply(x, cos, sin, out=x)`` (in place, no output
  allocation), where the library has ``out=``.

Timings are medians of ``--repeat`` runs of 20 calls each. On a shared machine wall time is
at the mercy of the other processes; ``--cpu`` (with ``NUMBA_NUM_THREADS=1``) measures the CPU
time this process spends instead.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import statistics
import time

import numpy as np

from posenc_np import rope
from posenc_np.kernels import rope as krope

SHAPES = ((8, 4, 128, 16), (2, 8, 512, 64))


#: The clock: wall time (``time.perf_counter``), or with ``--cpu`` the CPU time of this process
#: (``time.process_time``), which other processes on a shared machine do not inflate.
CLOCK = time.perf_counter


def _median_us(fn, repeat: int, inner: int = 20) -> float:
    times = []
    for _ in range(repeat):
        t0 = CLOCK()
        for _ in range(inner):
            fn()
        times.append((CLOCK() - t0) / inner)
    return statistics.median(times) * 1e6


def _captured_kernel_call(call):
    """The compiled kernel ``call()`` launches (the parallel one, or the serial one for small
    calls) and the arguments it passes (captured by one-off wrappers)."""
    seen = {}
    names = ("_rows_kernel", "_rows_kernel_serial", "_rope_kernel", "_rope_kernel_serial")
    kernels = {name: getattr(krope, name) for name in names}

    def spy_of(kernel):
        def spy(*args):
            seen["kernel"], seen["args"] = kernel, args
            return kernel(*args)
        return spy

    for name in names:
        setattr(krope, name, spy_of(kernels[name]))
    try:
        call()
    finally:
        for name in names:
            setattr(krope, name, kernels[name])
    return seen["kernel"], seen["args"]


def _calls_per(fn, n: int = 50) -> float:
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n):
        fn()
    prof.disable()
    return pstats.Stats(prof).total_calls / n


def measure_shape(shape, repeat: int) -> dict:
    """One row of the table for ``(B, H, T, D)`` float32."""
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    cos, sin = rope.cos_sin(np.arange(shape[2]), rope.inv_freq(shape[3])[0], dtype=np.float32)

    def apply():
        return rope.apply(x, cos, sin)

    for _ in range(20):
        apply()
    kernel, args = _captured_kernel_call(apply)
    # both kernels take (xb, ob, ...): ob is the flat output buffer, allocated per call as rope.apply does

    def rotation():
        kernel(args[0], np.empty_like(args[1]), *args[2:])

    t_apply, t_rot = _median_us(apply, repeat), _median_us(rotation, repeat)
    row = {"shape": list(shape), "apply_us": round(t_apply, 1), "rotation_us": round(t_rot, 1),
           "share": round(t_rot / t_apply, 3), "calls": _calls_per(apply)}
    try:  # this layout of the library: the door's checks alone, and the unchecked kernel entry
        from posenc_np.rope import _check_rotation
    except ImportError:
        return row
    row["checks_us"] = round(_median_us(lambda: _check_rotation(cos, sin, "half", x=x), repeat), 1)
    row["launch_us"] = round(_median_us(lambda: krope.rotate_tables(x, cos, sin, "half", False, None), repeat), 1)
    row["in_place_us"] = round(_median_us(lambda: rope.apply(x, cos, sin, out=x), repeat), 1)
    return row


def measure(repeat: int, shapes=SHAPES) -> list[dict]:
    return [measure_shape(shape, repeat) for shape in shapes]


def _shape(text: str) -> tuple:
    try:
        shape = tuple(int(n) for n in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shape must be four integers B,H,T,D, got {text!r}") from None
    if len(shape) != 4 or min(shape) < 1 or shape[3] % 2:
        raise argparse.ArgumentTypeError(f"--shape must be four positive integers B,H,T,D with D even, got {text!r}")
    return shape


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=51)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--cpu", action="store_true", help="time with the process's CPU time, not wall time "
                        "(stable on a shared machine; run with NUMBA_NUM_THREADS=1 so the kernel runs in this thread)")
    parser.add_argument("--shape", type=_shape, action="append",
                        help=f"B,H,T,D (repeatable; default {' and '.join(','.join(map(str, s)) for s in SHAPES)})")
    args = parser.parse_args(argv)
    global CLOCK
    CLOCK = time.process_time if args.cpu else time.perf_counter
    rows = measure(args.repeat, args.shape or SHAPES)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print(f"{'shape':18s} {'apply':>9s} {'checks':>9s} {'launch':>9s} {'rotation':>9s} {'share':>6s} {'calls':>6s} "
          f"{'out=x':>9s}")
    for r in rows:
        opt = {k: f"{r[k]:7.1f}us" if k in r else "        -" for k in ("checks_us", "launch_us", "in_place_us")}
        print(f"{tuple(r['shape'])!s:18s} {r['apply_us']:7.1f}us {opt['checks_us']} {opt['launch_us']} "
              f"{r['rotation_us']:7.1f}us {r['share']:6.0%} {r['calls']:6.0f} {opt['in_place_us']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
