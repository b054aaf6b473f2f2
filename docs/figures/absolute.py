"""Figures for docs/absolute.md: sinusoidal heatmaps (interleaved, concat, t2t) and frequencies.

Run from the repository root: ``python docs/figures/absolute.py`` (needs matplotlib).
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from posenc_np import absolute  # noqa: E402

HERE = Path(__file__).resolve().parent


def heatmaps(path: Path) -> None:
    pos, dim = np.arange(128), 64
    panels = [
        ("interleaved (paper):\nsin on even, cos on odd channels", absolute.sinusoidal(pos, dim)),
        ("concat:\n[sin | cos], paper frequencies", absolute.sinusoidal(pos, dim, layout="concat")),
        ("tensor2tensor timing signal:\n[sin | cos], t2t frequencies", absolute.timing_signal(pos, dim)),
    ]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.6), sharey=True)
    for ax, (title, pe) in zip(axes, panels):
        im = ax.imshow(pe, aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("channel")
    axes[0].set_ylabel("position p")
    fig.colorbar(im, ax=axes, shrink=0.8, label="value")
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def frequencies(path: Path) -> None:
    dim = 64
    i = np.arange(dim // 2)
    paper = absolute.sinusoidal_frequencies(dim)
    t2t = absolute.timing_signal([1e-9], dim)[0, : dim // 2] / 1e-9
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    ax.semilogy(i, paper, "o-", ms=3, label=r"paper: $10000^{-2i/d}$")
    ax.semilogy(i, t2t, "s--", ms=3, label=r"t2t: $\exp(-i\,\ln 10^4/(d/2-1))$")
    ax.set_xlabel("pair index i")
    ax.set_ylabel(r"angular frequency $\omega_i$")
    ax.set_title(f"sinusoidal frequencies, d={dim}")
    ax.legend()
    ax.grid(True, which="both", alpha=0.3)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


if __name__ == "__main__":
    heatmaps(HERE / "absolute_heatmap.png")
    frequencies(HERE / "absolute_frequencies.png")
    print("wrote", HERE / "absolute_heatmap.png", HERE / "absolute_frequencies.png")
