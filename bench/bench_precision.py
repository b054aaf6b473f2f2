"""Cost of the exact RoPE tables: ``rope.cos_sin`` with ``method="exact"`` (the default) against
``method="direct"`` (float64 angles and libm cos/sin: the tables before the exact ones) and
``method="float32-split"``.

``run(quick) -> dict`` returns JSON-able numbers and a Markdown table under ``"markdown"``;
``bench/run.py`` calls it (section ``precision``). Run directly: ``python bench/bench_precision.py
[--quick]``.

Problem: head_dim 128 (64 frequencies, ``rope.exact_inv_freq(128)``), ``half`` layout, integer
positions ``[0, P)`` for P = 4096, 131072 and 1048576, output float64 and float32 (tables cast
once). For P = 10^7 full tables do not fit in memory (two float64 tables are 20 GB), so the
row times the window of 2^20 positions ending at 10^7 and scales by 10^7 / 2^20: the exact
method's cost does not depend on the size of the positions (integer digits of fixed length).
Median wall time of ``repeats`` calls (each call builds both tables) after a warm-up call
(mpmath import, constants), timed in interleaved rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
for path in (HERE, os.path.dirname(HERE)):
    if path not in sys.path:
        sys.path.insert(0, path)

from timing import interleaved_rounds

from posenc_np import rope

METHODS = ("direct", "exact", "float32-split")
SIZES = (4096, 131072, 1048576, 10 ** 7)
WINDOW = 1 << 20


def _positions(p: int) -> tuple[np.ndarray, float]:
    """Positions timed for a table of ``p`` positions, and the factor to scale the time by."""
    if p <= WINDOW:
        return np.arange(p), 1.0
    return np.arange(p - WINDOW, p), p / WINDOW


def run(quick: bool = False) -> dict:
    sizes = SIZES[:2] if quick else SIZES
    inv, _ = rope.exact_inv_freq(128)
    rows = []
    for p in sizes:
        pos, scale = _positions(p)
        repeats = 1 if pos.size >= WINDOW else (3 if quick else 5)
        for dtype in (np.float64, np.float32):
            calls = {m: (lambda m=m, pos=pos, dtype=dtype: rope.cos_sin(pos, inv, dtype=dtype, method=m))
                     for m in METHODS}
            times = interleaved_rounds(calls, repeats)
            row = {"positions": p, "dtype": np.dtype(dtype).name, "scaled_from_window": scale != 1.0}
            for m, t in times.items():
                row[m] = t * scale
            rows.append(row)
            print(f"  precision P={p} {row['dtype']}: " + ", ".join(f"{m} {row[m]:.3g} s" for m in METHODS),
                  flush=True)
    return {"problem": {"head_dim": 128, "layout": "half", "window": WINDOW}, "rows": rows,
            "markdown": markdown(rows)}


def markdown(rows) -> str:
    lines = [("Both tables (`cos`, `sin`) for integer positions `[0, P)`, head_dim 128 (64 frequencies), "
              "`half` layout; median wall time. `exact` is the default: every float64 entry within one ulp at "
              "any position. `direct`: float64 angles and libm cos/sin (the tables before). `float32-split`: "
              "float32 arithmetic from two small exact tables. P = 10M: the 2^20 positions below 10^7, "
              "time scaled by 10^7 / 2^20 (full tables would need 20 GB)."), "",
             "| P | output | direct | exact (x direct) | float32-split (x direct) |",
             "|---:|---|---:|---:|---:|"]
    for r in rows:
        label = f"{r['positions']:,}" + (" (scaled)" if r["scaled_from_window"] else "")
        lines.append(f"| {label} | {r['dtype']} | {_t(r['direct'])} | {_t(r['exact'])} "
                     f"({r['exact'] / r['direct']:.1f}x) | {_t(r['float32-split'])} "
                     f"({r['float32-split'] / r['direct']:.1f}x) |")
    return "\n".join(lines)


def _t(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON line")
    args = parser.parse_args()
    result = run(args.quick)
    print(json.dumps(result) if args.json else result["markdown"])
