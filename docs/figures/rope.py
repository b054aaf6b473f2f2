"""Figures for docs/rope.md: inverse frequency per channel for every scaling type, and RoFormer's
long-term decay bound. Needs the ``plot`` extra (matplotlib).

    python docs/figures/rope.py        # writes docs/figures/rope_inv_freq.png and rope_decay.png
"""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from posenc_np import rope  # noqa: E402

HERE = Path(__file__).resolve().parent
DIM, BASE, L0, FACTOR = 128, 10000.0, 4096, 8.0


def inv_freq_figure(path: Path) -> None:
    n = DIM // 2
    long_factor = list(np.concatenate([np.ones(16), np.geomspace(1.0, 2 * FACTOR, n - 16)]))
    variants = [
        ("default", None, {}),
        ("linear (factor 8)", {"rope_type": "linear", "factor": FACTOR}, {}),
        ("ntk (alpha 8, not HF)", {"rope_type": "ntk", "alpha": FACTOR}, {}),
        ("dynamic (factor 8, seq_len 8 L0)", {"rope_type": "dynamic", "factor": FACTOR},
         {"seq_len": 8 * L0, "max_position_embeddings": L0}),
        ("yarn (factor 8)", {"rope_type": "yarn", "factor": FACTOR, "original_max_position_embeddings": L0}, {}),
        ("longrope (long_factor 1, then geometric to 16)", {"rope_type": "longrope", "short_factor": [1.0] * n,
                                             "long_factor": long_factor, "original_max_position_embeddings": L0},
         {"seq_len": 8 * L0, "max_position_embeddings": 8 * L0}),
        ("llama3 (factor 8, l=1, h=4)", {"rope_type": "llama3", "factor": FACTOR, "low_freq_factor": 1.0,
                                         "high_freq_factor": 4.0, "original_max_position_embeddings": L0}, {}),
        ("proportional (p = 0.5: default for i < 32, then 0)", {"rope_type": "proportional", "partial_rotary_factor": 0.5}, {}),
    ]
    styles = ["-", "--", "-.", ":", "-", "--", "-.", ":"]
    fig, ax = plt.subplots(figsize=(9, 5.5), dpi=120)
    i = np.arange(n)
    for (label, scaling, kwargs), style in zip(variants, styles):
        inv, af = rope.inv_freq(DIM, base=BASE, scaling=scaling, **kwargs)
        shown = np.where(inv > 0, inv, np.nan)
        suffix = f", attention factor {af:.3f}" if af != 1.0 else ""
        ax.semilogy(i, shown, style, lw=1.8, label=label + suffix)
    ax.axhline(2 * math.pi / L0, color="grey", lw=0.8)
    ax.text(1, 2 * math.pi / L0 * 1.4, "wavelength = L0 = 4096", color="grey", fontsize=8)
    low, high = rope.yarn_correction_range(DIM, BASE, L0)
    ax.axvspan(low, high, color="tab:purple", alpha=0.08)
    ax.text(low + 0.5, 3e-5 * 20, f"yarn ramp\n[{low}, {high}]", color="tab:purple", fontsize=8)
    ax.set_xlabel("frequency index i (pair i rotates by p * inv_freq[i])")
    ax.set_ylabel("inv_freq[i]  (radians per position)")
    ax.set_title(f"RoPE inverse frequencies by scaling type (d = {DIM}, base = {BASE:g}, L0 = {L0})")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def decay_figure(path: Path) -> None:
    theta = rope.inv_freq(DIM, base=BASE)[0]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4), dpi=120)
    r = np.arange(0, 257)
    left.plot(r, rope.long_term_decay(r, theta), lw=1.2)
    left.set_xlabel("relative distance m - n")
    left.set_ylabel("relative upper bound  (1/n) sum_j |S_j|")
    left.set_title("RoFormer fig. 2 range (d = 128, base 1e4)")
    r_log = np.unique(np.round(np.geomspace(1, 1e5, 2000)))
    right.semilogx(r_log, rope.long_term_decay(r_log, theta), lw=0.8)
    right.set_xlabel("relative distance m - n (log scale)")
    right.set_title("out to 1e5 (longest wavelength 2 pi base = 62832)")
    for ax in (left, right):
        ax.grid(True, alpha=0.3)
        ax.set_ylim(0, 34)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


if __name__ == "__main__":
    inv_freq_figure(HERE / "rope_inv_freq.png")
    decay_figure(HERE / "rope_decay.png")
    print("wrote", HERE / "rope_inv_freq.png", "and", HERE / "rope_decay.png")
