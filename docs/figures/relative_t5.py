"""Figure: the T5 bucket of each relative position (key - query), bidirectional and causal.

Run ``python docs/figures/relative_t5.py``; writes ``docs/figures/relative_t5_buckets.png``
next to this script. Needs matplotlib (``pip install posenc-np[plot]``).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from posenc_np.relative import t5_relative_position_bucket  # noqa: E402

NUM_BUCKETS, MAX_DISTANCE = 32, 128
OUT = Path(__file__).with_name("relative_t5_buckets.png")


def main() -> Path:
    rel = np.arange(-170, 171)
    fig, axes = plt.subplots(2, 1, figsize=(9, 7), sharex=True, constrained_layout=True)
    for ax, bidirectional in zip(axes, (True, False)):
        b = t5_relative_position_bucket(rel, bidirectional=bidirectional, num_buckets=NUM_BUCKETS,
                                        max_distance=MAX_DISTANCE)
        half = NUM_BUCKETS // 2 if bidirectional else NUM_BUCKETS
        exact = half // 2
        ax.step(rel, b, where="mid", color="tab:blue", lw=1.4)
        for x in (-MAX_DISTANCE, MAX_DISTANCE) if bidirectional else (-MAX_DISTANCE,):
            ax.axvline(x, color="tab:red", ls="--", lw=0.9)
        for x in (-exact, exact) if bidirectional else (-exact,):
            ax.axvline(x, color="tab:green", ls=":", lw=0.9)
        mode = "bidirectional (encoder)" if bidirectional else "unidirectional (causal decoder)"
        ax.set_title(f"T5 buckets, {mode}: num_buckets={NUM_BUCKETS}, max_distance={MAX_DISTANCE}")
        ax.set_ylabel("bucket")
        ax.set_ylim(-1, NUM_BUCKETS)
        ax.set_yticks(range(0, NUM_BUCKETS + 1, 4))
        ax.grid(alpha=0.3)
        # bidirectional: the curve is high on the right, so the note goes bottom right; causal: bottom left
        x, ha = (0.99, "right") if bidirectional else (0.01, "left")
        ax.text(x, 0.04, f"exact buckets for |r| < {exact} (green),\nlog-spaced up to |r| = {MAX_DISTANCE} (red),\n"
                         "then clamped to the last bucket", transform=ax.transAxes, ha=ha, va="bottom", fontsize=8)
    axes[0].annotate("keys after the query:\nbuckets 17..31 (16 unused)", xy=(60, 29), xytext=(85, 18), fontsize=8,
                     arrowprops={"arrowstyle": "->", "lw": 0.8})
    axes[0].annotate("keys before the query:\nbuckets 0..15", xy=(-60, 14), xytext=(-160, 22), fontsize=8,
                     arrowprops={"arrowstyle": "->", "lw": 0.8})
    axes[1].annotate("every future key: bucket 0", xy=(60, 0), xytext=(60, 9), fontsize=8,
                     arrowprops={"arrowstyle": "->", "lw": 0.8})
    axes[1].set_xlabel("relative position r = key - query")
    fig.savefig(OUT, dpi=110)
    plt.close(fig)
    return OUT


if __name__ == "__main__":
    print(main())
