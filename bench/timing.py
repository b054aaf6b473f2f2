"""Timing helper shared by the benchmark sections."""

from __future__ import annotations

import statistics
import time


def interleaved_rounds(fns: dict, repeats: int, warmup: int = 1) -> dict:
    """Median seconds per variant, timing one call of each variant per round.

    Interleaving spreads any drift in machine load over every variant alike, so ratios
    measured in one run stay comparable.
    """
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) for name, t in times.items()}
