"""Figures: the ALiBi bias per head (8 heads, 16 x 16, causal form with the causal mask)
and the slopes for 8 and 12 heads (the non-power-of-two rule is not monotone).

Run from the repository root: ``python docs/figures/alibi.py``; writes
``docs/figures/alibi_bias.png`` and ``docs/figures/alibi_slopes.png`` next to this script.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from posenc_np import alibi  # noqa: E402

HEADS, LENGTH = 8, 16


def main(out: Path = Path(__file__).with_name("alibi_bias.png")) -> Path:
    m = alibi.slopes(HEADS)
    b = alibi.bias(HEADS, LENGTH, form="causal")
    future = np.triu(np.ones((LENGTH, LENGTH), dtype=bool), k=1)
    shown = np.where(future, np.nan, b)  # masked keys are not part of the softmax
    fig, axes = plt.subplots(2, 4, figsize=(13, 6.6), constrained_layout=True)
    cmap = matplotlib.colormaps["viridis"].copy()
    cmap.set_bad("#eeeeee")
    for h, ax in enumerate(axes.flat):
        # One colour scale per head (its range is -m*(LENGTH-1) .. 0), so that the linear
        # ramp is visible for the small slopes too.
        im = ax.imshow(shown[h], cmap=cmap, vmin=-m[h] * (LENGTH - 1), vmax=0.0, interpolation="nearest")
        fig.colorbar(im, ax=ax, shrink=0.75, pad=0.02)
        ax.set_title(f"head {h + 1}: m = 2^{np.log2(m[h]):g} = {m[h]:.4g}", fontsize=10)
        ax.set_xticks([0, 5, 10, 15])
        ax.set_yticks([0, 5, 10, 15])
        if h % 4 == 0:
            ax.set_ylabel("query position q")
        if h >= 4:
            ax.set_xlabel("key position k")
    fig.suptitle(f"ALiBi bias -m (q - k) per head, {HEADS} heads, {LENGTH} x {LENGTH}, causal form; "
                 "grey: future keys (masked); colour scale per head", fontsize=12)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def slopes_figure(out: Path = Path(__file__).with_name("alibi_slopes.png")) -> Path:
    fig, ax = plt.subplots(figsize=(7, 3.6), constrained_layout=True)
    for n, style in ((8, dict(marker="o", markersize=11, fillstyle="none", linewidth=3, alpha=0.6)),
                     (12, dict(marker="s", markersize=5))):
        m = alibi.slopes(n)
        ax.plot(np.arange(1, n + 1), m, label=f"{n} heads", **style)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("head h")
    ax.set_ylabel("slope m_h")
    ax.set_title("ALiBi slopes: 12 heads = slopes(8) + every other slope of 16 heads")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


if __name__ == "__main__":
    print(main())
    print(slopes_figure())
