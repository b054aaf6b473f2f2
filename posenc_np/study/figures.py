"""Figures of the study (matplotlib, the optional ``plot`` extra), drawn from ``results.json``.

``tasks.png``
    one panel per task and evaluation length, the training length L first: token accuracy per
    encoding, a marker per training option, horizontal bars the 95 % intervals over seeds.
``lm.png``
    perplexity versus evaluation length per encoding, non-overlapping and sliding (the shape of
    Press et al. 2022's Figure 1), shaded bands the 95 % intervals.
``rope_scaling.png``
    the same for the RoPE model under each scaling method, zero-shot and fine-tuned.
``position_loss.png``
    the LM's loss per position of the longest non-overlapping windows (mean over seeds), the
    training length marked: where past L a model starts to fail.
``attention.png``
    attention probabilities of one held-out sequence (seed 0, the first training option,
    ``lag`` at 2L), per encoding of ``attention_maps`` and layer, averaged over heads.
``curves.png``
    training loss curves of every task cell, one panel per task and training option.
"""

from __future__ import annotations

import os

from .._files import atomic_write
from .report import FIGURES, MODES, Results

__all__ = ["write_figures"]


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def _save(plt, fig, path) -> None:
    try:
        atomic_write(path, lambda fh: fig.savefig(fh, format="png", dpi=110))
    finally:
        plt.close(fig)


def _err(iv):
    if iv is None or not iv.known:
        return [[0], [0]]
    return [[iv.mean - iv.lo], [iv.hi - iv.mean]]


def _tasks(plt, R: Results, path) -> None:
    factors = list(R.cfg["eval_factors"])
    tasks, options = R.tasks, R.options
    labels = list(dict.fromkeys(lab for t in tasks for lab in R.labels("tasks", task=t)))
    fig, axes = plt.subplots(len(tasks), len(factors), figsize=(4.2 * len(factors) + 1, 0.28 * len(labels) * len(tasks)
                                                                  + 1.2), squeeze=False, sharey=True)
    markers = "os^Dv<>"
    for i, task in enumerate(tasks):
        for j, f in enumerate(factors):
            ax = axes[i][j]
            for k, option in enumerate(options):
                ys, xs, err = [], [], [[], []]
                for y, lab in enumerate(labels):
                    iv = R.iv("tasks", "token_accuracy", training=option, label=lab, task=task, eval_factor=f)
                    if iv is None:
                        continue
                    ys.append(y + (k - (len(options) - 1) / 2) * 0.25)
                    xs.append(iv.mean)
                    lo, hi = _err(iv)
                    err[0] += lo
                    err[1] += hi
                if xs:
                    ax.errorbar(xs, ys, xerr=err, fmt=markers[k % 7], ms=4, color=f"C{k}", capsize=2, lw=1)
            ax.axvline(1 / R.cfg["alphabet"], color="0.6", lw=0.8, ls=":")
            ax.set_xlim(-0.03, 1.03)
            ax.set_title(f"{task}, {f}L", fontsize=9)
            ax.set_yticks(range(len(labels)), labels, fontsize=7)
            ax.tick_params(axis="x", labelsize=7)
            ax.grid(axis="x", color="0.9")
    axes[0][0].invert_yaxis()  # shared by every panel: first encoding on top
    handles = [plt.Line2D([], [], color=f"C{k}", marker=markers[k % 7], ls="", label=o) for k, o in enumerate(options)]
    fig.legend(handles=handles, loc="upper right", fontsize=8, title="training", title_fontsize=8)
    fig.suptitle(f"token accuracy at and past the training length (L = {R.cfg['train_len']}); bars: 95 % interval over "
                 f"{R.cfg['seeds']} seeds; dotted: chance", fontsize=9)
    fig.tight_layout(rect=(0, 0, 0.9, 0.97))
    _save(plt, fig, path)


def _curves(plt, R: Results, path, part: str, series: list[tuple[str, dict]], panels: list[tuple[str, dict]],
            title: str) -> None:
    factors = R.cfg["lm_eval_factors"]
    L = R.cfg["lm_train_len"]
    from matplotlib.ticker import FuncFormatter, NullFormatter

    cols = min(2, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.4 * cols + 1.6, 3.9 * rows), squeeze=False)
    for ax, (panel_title, where) in zip(axes.flat, panels):
        for k, (name, sel) in enumerate(series):
            xs, means, los, his = [], [], [], []
            for f in factors:
                iv = R.iv(part, "ppl", **sel, **where, eval_factor=f)
                if iv is None:
                    continue
                xs.append(L * f)
                means.append(iv.mean)
                los.append(iv.lo if iv.known else iv.mean)
                his.append(iv.hi if iv.known else iv.mean)
            if not xs:
                continue
            style = "-" if k < 10 else "--"
            ax.plot(xs, means, style, marker="o", ms=3, color=f"C{k % 10}", label=name, lw=1.3)
            ax.fill_between(xs, los, his, color=f"C{k % 10}", alpha=0.15, lw=0)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_xticks([L * f for f in factors], [str(L * f) for f in factors], fontsize=8)
        ax.axvline(L, color="0.5", lw=0.8, ls=":")
        ax.set_xlabel("evaluation length (bytes)", fontsize=9)
        ax.set_ylabel("perplexity per byte", fontsize=9)
        ax.set_title(panel_title, fontsize=9)
        ax.grid(color="0.92", which="both")
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    _save(plt, fig, path)


def _position_loss(plt, R: Results, path) -> bool:
    recs = [r for r in R.by_part.get("lm", []) if r.get("position_loss")]
    if not recs:
        return False
    fig, ax = plt.subplots(figsize=(8.5, 4.4))
    for k, lab in enumerate(R.labels("lm")):
        mine = [r for r in recs if r["label"] == lab]
        if not mine:
            continue
        edges = mine[0]["position_edges"]
        mids = [(a + b) / 2 for a, b in zip(edges[:-1], edges[1:])]
        ax.plot(mids, [sum(r["position_loss"][i] for r in mine) / len(mine) for i in range(len(mids))],
                "-" if k < 10 else "--", color=f"C{k % 10}", lw=1.2, label=lab)
    ax.axvline(R.cfg["lm_train_len"], color="0.5", lw=0.8, ls=":")
    ax.set_xlabel("position in the window (bytes)", fontsize=9)
    ax.set_ylabel("loss (nats per byte)", fontsize=9)
    ax.set_title(f"loss per position of the {R.cfg['lm_eval_factors'][-1]}L non-overlapping windows (mean over seeds; "
                 f"dotted: L = {R.cfg['lm_train_len']})", fontsize=9)
    ax.grid(color="0.92")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.tight_layout()
    _save(plt, fig, path)
    return True


def _attention(plt, R: Results, path) -> bool:
    recs = [r for r in R.by_part.get("tasks", []) if r.get("attention")]
    if not recs:
        return False
    layers = max(len(r["attention"]) for r in recs)
    fig, axes = plt.subplots(len(recs), layers, figsize=(2.6 * layers + 0.6, 2.5 * len(recs)), squeeze=False)
    import numpy as np

    for i, r in enumerate(recs):
        for j, heads in enumerate(r["attention"]):
            ax = axes[i][j]
            ax.imshow(np.mean(np.asarray(heads), axis=0), cmap="viridis", vmin=0.0, vmax=1.0)
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title(f"{r['label']} ({r['training']}), layer {j}", fontsize=8)
            ax.axhline(r["train_seq_len"] - 0.5, color="w", lw=0.6, ls=":")
    fig.suptitle(f"attention of one {recs[0]['task']} sequence of size {recs[0]['eval_len']} (seed 0, mean over heads; "
                 "rows queries, columns keys; dotted: the training length)", fontsize=9)
    fig.tight_layout()
    _save(plt, fig, path)
    return True


def _training_curves(plt, R: Results, path) -> bool:
    recs = [r for r in R.by_part.get("tasks", []) if r.get("curve")]
    if not recs:
        return False
    panels = list(dict.fromkeys((r["task"], r["training"]) for r in recs))
    labels = list(dict.fromkeys(r["label"] for r in recs))
    cols = min(2, len(panels))
    rows = -(-len(panels) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.6 * cols + 1.6, 3.6 * rows), squeeze=False)
    for ax, (task, option) in zip(axes.flat, panels):
        for r in recs:
            if r["task"] == task and r["training"] == option:
                k = labels.index(r["label"])
                xs, ys = zip(*r["curve"])
                ax.plot(xs, ys, "-" if k < 10 else "--", color=f"C{k % 10}", lw=0.8, alpha=0.8,
                        label=r["label"] if r["seed_index"] == 0 else None)
        ax.set_yscale("log")
        ax.set_title(f"{task}, {option}", fontsize=9)
        ax.set_xlabel("step", fontsize=9)
        ax.set_ylabel("training loss", fontsize=9)
        ax.grid(color="0.92", which="both")
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.suptitle("training loss per cell (every seed)", fontsize=10)
    fig.tight_layout()
    _save(plt, fig, path)
    return True


def write_figures(doc: dict, out_dir: str | os.PathLike) -> list[str]:
    """Draw every figure whose part is in ``doc`` into ``out_dir``; return the file names written
    (none without matplotlib).

    Examples
    --------
    >>> import os, tempfile
    >>> from posenc_np.study.figures import write_figures
    >>> from posenc_np.study.report import FIGURES
    >>> sorted(FIGURES.values())          # what a full run draws (drawing one takes about a second: not shown here)
    ['attention.png', 'curves.png', 'lm.png', 'position_loss.png', 'rope_scaling.png', 'tasks.png']
    >>> with tempfile.TemporaryDirectory() as out:        # a results document without records: nothing to draw
    ...     written = write_figures({"meta": {"config": {}}, "records": []}, out)
    ...     files = os.listdir(out)
    >>> written, files
    ([], [])
    """
    plt = _pyplot()
    if plt is None:
        return []
    R = Results(doc)
    out_dir = os.fspath(out_dir)
    written = []
    if "tasks" in R.by_part:
        _tasks(plt, R, os.path.join(out_dir, FIGURES["tasks"]))
        written.append(FIGURES["tasks"])
    if "lm" in R.by_part:
        series = [(lab, {"label": lab}) for lab in R.labels("lm")]  # the n-gram row is a flat reference
        panels = [(f"{mode} windows", {"eval_mode": mode}) for mode in MODES]
        _curves(plt, R, os.path.join(out_dir, FIGURES["lm"]), "lm", series, panels,
                f"byte-level LM trained at L = {R.cfg['lm_train_len']}: perplexity versus evaluation length "
                f"(band: 95 % interval over {R.cfg['seeds']} seeds)")
        written.append(FIGURES["lm"])
    if "rope_scaling" in R.by_part:
        methods = list(dict.fromkeys(r["method"] for r in R.by_part["rope_scaling"]))
        series = [(m, {"method": m}) for m in methods]
        panels = [(f"{phase.replace('_', '-')}, {mode}", {"phase": phase, "eval_mode": mode})
                  for phase in ("zero_shot", "finetuned") for mode in MODES]
        _curves(plt, R, os.path.join(out_dir, FIGURES["rope_scaling"]), "rope_scaling", series, panels,
                f"RoPE trained at L = {R.cfg['lm_train_len']}, scaling factor {R.cfg['scaling_factor']}")
        written.append(FIGURES["rope_scaling"])
    for name, draw in (("position_loss", _position_loss), ("attention", _attention), ("curves", _training_curves)):
        if draw(plt, R, os.path.join(out_dir, FIGURES[name])):
            written.append(FIGURES[name])
    return written
