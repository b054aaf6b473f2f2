"""Figure for docs/relative.md: DeBERTa-v2 log buckets versus relative distance.

Run from the repository root: ``python docs/figures/relative_deberta.py`` (needs matplotlib).
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from posenc_np.relative import deberta_log_bucket_position  # noqa: E402

HERE = Path(__file__).resolve().parent


def buckets(path: Path) -> None:
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
    r = np.arange(-1100, 1101)
    for b, m, style in ((256, 512, "-"), (64, 512, "--")):
        bucket = deberta_log_bucket_position(r, b, m)
        ax1.plot(r, bucket, style, lw=1.4, label=f"bucket(r), position_buckets={b}, max_relative_positions={m}")
        row = np.clip(bucket + b, 0, 2 * b - 1) - b    # what the c2p row index can address
        ax1.plot(r, row, ":", lw=1.0, color=ax1.lines[-1].get_color(), alpha=0.8,
                 label=f"after the index clamp to [-{b}, {b - 1}]")
    ax1.plot(r, r, color="0.6", lw=0.8, label="identity (no buckets)")
    ax1.set_ylim(-330, 330)
    ax1.set_xlabel("relative position r = query - key")
    ax1.set_ylabel("bucket")
    ax1.set_title("DeBERTa-v2 log buckets (odd in r)")
    ax1.legend(fontsize=7.5, loc="lower right")
    ax1.grid(True, alpha=0.3)

    r = np.arange(1, 4097)
    b, m = 256, 512
    bucket = deberta_log_bucket_position(r, b, m)
    ax2.semilogx(r, bucket, "-", lw=1.4, drawstyle="steps-post", label=f"b={b}, M={m}")
    ax2.axvline(b // 2, color="0.5", ls="--", lw=0.8)
    ax2.axvline(m - 1, color="0.5", ls=":", lw=0.8)
    ax2.axhline(b - 1, color="0.5", ls=":", lw=0.8)
    ax2.annotate("|r| <= b/2 = 128: own bucket", (b // 2, b // 2), (3, 190), fontsize=8,
                 arrowprops={"arrowstyle": "->", "lw": 0.7})
    ax2.annotate("|r| = M-1 = 511 -> b-1 = 255\n(last table row)", (m - 1, b - 1), (700, 160), fontsize=8,
                 arrowprops={"arrowstyle": "->", "lw": 0.7})
    ax2.set_xlabel("|r| (log scale)")
    ax2.set_ylabel("bucket")
    ax2.set_title(r"$\lceil (m-1)\,\ln(|r|/m)\,/\,\ln((M-1)/m)\rceil + m$ beyond $m = b/2$")
    ax2.legend(fontsize=8, loc="lower right")
    ax2.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


if __name__ == "__main__":
    buckets(HERE / "relative_deberta_buckets.png")
    print("wrote", HERE / "relative_deberta_buckets.png")
