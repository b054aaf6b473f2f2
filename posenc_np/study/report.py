"""Tables, claim checks, resolution, figures and the CSV export, generated from ``results.json``.

Everything here is a function of the results document alone, so a rerun of the study, or
``posenc-np study report DIR``, regenerates every number the documentation shows.
:func:`sections` returns the Markdown blocks that ``docs/study.md`` includes between
``<!-- BEGIN GENERATED: name -->`` and ``<!-- END GENERATED: name -->`` markers
(:func:`publish` replaces them); ``results.md`` is all of them in one file, ``results.csv``
every record as one row (:func:`write_csv`).
"""

from __future__ import annotations

import csv
import io
import math
import os
import re

import numpy as np

from .._files import atomic_write, check_target, read_bounded
from .config import NGRAM
from .stats import MEASURES, Interval, detectable, fmt, seeds_for, t_interval
from .store import OUTPUTS, read_json, write_json, written_by_us

__all__ = ["Results", "csv_text", "publish", "sections", "write_csv", "write_report"]

FIGURES = {"tasks": "tasks.png", "lm": "lm.png", "rope_scaling": "rope_scaling.png", "position_loss": "position_loss.png",
           "attention": "attention.png", "curves": "curves.png"}
SCHEMA = 3  # of results.json
MODES = ("nonoverlapping", "sliding")


class Results:
    """Index of a results document: values by seed and intervals for every reported quantity.

    Examples
    --------
    >>> from posenc_np.study.report import Results
    >>> records = [{"part": "tasks", "training": "fixed", "task": "copy", "label": "rope", "seed_index": s,
    ...             "eval_factor": 1, "token_accuracy": a, "n_scored": 100} for s, a in enumerate([0.6, 0.7, 0.8])]
    >>> records += [{"part": "lm", "label": "alibi", "seed_index": s, "eval_factor": f, "ppl": p}
    ...             for s, ppls in enumerate([(4.0, 8.0), (4.0, 16.0)]) for f, p in zip((1, 2), ppls)]
    >>> R = Results({"meta": {"config": {}}, "records": records})
    >>> R.values("tasks", "token_accuracy", label="rope"), R.labels("tasks"), R.labels("lm")
    ({0: 0.6, 1: 0.7, 2: 0.8}, ['rope'], ['alibi'])
    >>> iv = R.iv("tasks", "token_accuracy", label="rope")         # 0.7 +- 4.302653 * 0.1 / sqrt(3)
    >>> round(iv.mean, 6), round(iv.lo, 6), round(iv.hi, 6)
    (0.7, 0.451586, 0.948414)
    >>> round(R.ratio_iv("lm", "eval_factor", 1, 2, label="alibi").mean, 6)   # ratios 2 and 4: geometric mean 2 ** 1.5
    2.828427
    """

    def __init__(self, doc: dict) -> None:
        self.doc, self.meta, self.records = doc, doc["meta"], doc["records"]
        self.cfg = self.meta["config"]
        self.by_part = {}
        for r in self.records:
            self.by_part.setdefault(r.get("part", "tasks"), []).append(r)

    def values(self, part: str, metric: str, **where: object) -> dict:
        """``{seed_index: value}`` of ``metric`` over the records of ``part`` matching ``where``."""
        return {r["seed_index"]: r.get(metric) for r in self.by_part.get(part, [])
                if all(r.get(k) == v for k, v in where.items())}

    def iv(self, part: str, metric: str, measure: str | None = None, **where: object) -> Interval | None:
        measure = measure or ("ppl" if metric == "ppl" else "accuracy")
        vals = self.values(part, metric, **where)
        counts = self.values(part, "n_scored", **where) if metric == "token_accuracy" else {}
        seeds = sorted(s for s, v in vals.items() if v is not None)
        return t_interval([vals[s] for s in seeds], measure, [counts.get(s) for s in seeds] if counts else None)

    def ratio_iv(self, part: str, key: str, base: object, other: object, **where: object) -> Interval | None:
        """Per-seed ratio of perplexity at ``key=other`` to ``key=base`` (a paired change)."""
        a, b = self.values(part, "ppl", **where, **{key: base}), self.values(part, "ppl", **where, **{key: other})
        return t_interval([b[s] / a[s] for s in sorted(set(a) & set(b)) if a[s] and b[s]], "ratio")

    def labels(self, part: str, **where: object) -> list[str]:
        return list(dict.fromkeys(r["label"] for r in self.by_part.get(part, [])
                                  if all(r.get(k) == v for k, v in where.items())))

    def lm_label(self, encoding: str) -> str | None:
        labels = [r["label"] for r in self.by_part.get("lm", []) if r["encoding"] == encoding]
        return labels[0] if labels else None

    def task_label(self, encoding: str, option: str) -> str | None:
        labels = [r["label"] for r in self.by_part.get("tasks", []) if r["encoding"] == encoding
                  and r["training"] == option]
        return labels[0] if labels else None

    @property
    def options(self) -> list[str]:
        return list(dict.fromkeys(r["training"] for r in self.by_part.get("tasks", [])))

    @property
    def tasks(self) -> list[str]:
        return list(dict.fromkeys(r["task"] for r in self.by_part.get("tasks", [])))


# --------------------------------------------------------------------------- formatting helpers

def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows]


def _pct(iv: Interval | None) -> str:
    return fmt(iv, 2)


# --------------------------------------------------------------------------- sections

def section_config(R: Results) -> str:
    c, m = R.cfg, R.meta
    env = m.get("environment", {})
    lines = [(f"Run of {m.get('date', 'unknown date')} with posenc_np {m['version']}, Python {env.get('python')}, "
              f"NumPy {env.get('numpy')}, Numba {env.get('numba')}, SciPy {env.get('scipy')}, on "
              f"{env.get('cpu_count')} CPU(s) ({env.get('cpu')}), executor: {m.get('executor', '?')}. Seeds per cell: "
              f"{c['seeds']} (base seed {c['seed']}); every number is the mean over seeds with its 95 % interval "
              "`mean [lo, hi]`."), ""]
    parts = c["parts"]
    if "tasks" in parts:
        lines.append(f"* **tasks**: {', '.join(c['tasks'])} at size L = {c['train_len']} ({2 * c['train_len'] + 1} "
                     f"tokens), alphabet {c['alphabet']}; up to {c['fit_rounds']} rounds of {c['steps']} steps of "
                     f"{c['batch_size']} sequences (lr {c['lr']:g}, {c['warmup']} warm-up steps, cosine to "
                     f"{c['min_lr']:g} per round), stopping once token accuracy at L on {c['fit_sequences']} fit-check "
                     f"sequences reaches {c['fit_accuracy']:g}; evaluated at "
                     + ", ".join(f"{f}L" for f in c["eval_factors"]) + f" on {c['eval_sequences']} held-out "
                     f"sequences per length; training options: {', '.join(c['training'])}"
                     + (f"; randomized positions (for {', '.join(c['randomized_encodings'])}) from 0 .. "
                        f"{c['randomized_range'] - 1} in training and evaluation, up to "
                        f"{c['randomized_fit_rounds']} rounds." if "randomized" in c["training"] else "."))
    if "lm" in parts or "rope_scaling" in parts:
        L = c["lm_train_len"]
        lines.append(f"* **lm**: byte-level LM trained at L = {L} bytes, {c['lm_steps']} steps of {c['lm_batch_size']} "
                     f"windows, lr {c['lm_lr']:g}; perplexity per byte on the first {c['lm_eval_tokens']} held-out "
                     f"predictions at " + ", ".join(f"{f}L" for f in c["lm_eval_factors"])
                     + f", non-overlapping and sliding (windows advancing by half their length); baseline: "
                     f"interpolated Kneser-Ney n-gram up to order {c['ngram_order']}.")
    if "rope_scaling" in parts:
        lines.append(f"* **rope_scaling**: the lm part's RoPE models; zero-shot: {', '.join(c['scaling_methods'])}, "
                     f"static methods at their design factor s = T/L; fine-tuned: s = {c['scaling_factor']}, "
                     f"{c['finetune_steps']} steps of {c['finetune_batch_size']} windows of "
                     f"{c['scaling_factor'] * c['lm_train_len']} bytes at lr {c['finetune_lr']:g}.")
    lines.append(f"* model: {c['n_layers']} layers, d_model {c['d_model']}, {c['n_heads']} heads, MLP {c['d_ff']}; "
                 f"encodings: {', '.join(c['encodings'])}.")
    corpus = m.get("corpus")
    if corpus:
        lines.append(f"* corpus: {corpus['source']}; {corpus['train_bytes']} training bytes (SHA-256 "
                     f"`{corpus['train_sha256'][:16]}…`), {corpus['held_out_bytes']} held-out bytes (SHA-256 "
                     f"`{corpus['held_out_sha256'][:16]}…`); file list and digests in `results.json`.")
    lines.append(f"* cost: {m.get('cells', 0)} cells, {m['elapsed_seconds'] / 60:.1f} min wall clock for the cells run "
                 f"in the last invocation, {m['cell_seconds'] / 60:.1f} min of cell time in total"
                 + (f"; {len(R.doc['failed'])} cell(s) failed: {', '.join(f['cell'] for f in R.doc['failed'])}"
                    if R.doc.get("failed") else "; no cell failed") + ".")
    return "\n".join(lines)


def _pooled_sd(groups: list[list[float]], log: bool) -> tuple[float, int]:
    """Root mean square of the per-group standard deviations (groups of two or more values)."""
    sds = []
    for g in groups:
        x = np.asarray([v for v in g if v is not None and math.isfinite(v) and (v > 0 or not log)], dtype=float)
        if x.size >= 2:
            sds.append(float((np.log(x) if log else x).std(ddof=1)))
    return (float(np.sqrt(np.mean(np.square(sds)))) if sds else float("nan")), len(sds)


def resolution(R: Results) -> list[dict]:
    """Per measure: the pooled between-seed standard deviation of this run, the difference its seeds
    detect (level 0.05, power 0.8, before the Holm correction) and the seeds that would detect the
    minimum effect."""
    n = R.cfg["seeds"]
    rows = []
    groups = {}
    for r in R.by_part.get("tasks", []):
        groups.setdefault(("accuracy", r["training"], r["label"], r["task"], r["eval_factor"]), []).append(
            r.get("token_accuracy"))
    for r in R.by_part.get("lm", []):
        if r["encoding"] != NGRAM:
            groups.setdefault(("ppl", r["label"], r["eval_mode"], r["eval_factor"]), []).append(r.get("ppl"))
    for name, log in (("accuracy", False), ("ppl", True)):
        g = [v for k, v in groups.items() if k[0] == name]
        if not g:
            continue
        sd, k = _pooled_sd(g, log)
        meas = MEASURES[name]
        rows.append({"measure": name, "groups": k, "sd": sd, "delta": meas.delta, "margin": meas.margin,
                     "detectable": detectable(sd, n) if math.isfinite(sd) else float("nan"),
                     "seeds_needed": seeds_for(meas.margin, sd) if math.isfinite(sd) and sd > 0 else 2})
    return rows


def section_resolution(R: Results) -> str:
    rows = resolution(R)
    if not rows:
        return "Nothing to compare in this run."
    n = R.cfg["seeds"]
    body = []
    for r in rows:
        scale = "log scale (a relative change)" if r["measure"] == "ppl" else "absolute"
        det = r["detectable"] if r["measure"] != "ppl" else math.expm1(r["detectable"])
        unit = (lambda v: f"{v:.1%}") if r["measure"] == "ppl" else (lambda v: f"{v:.3f}")
        body.append([r["measure"], scale, f"{r['sd']:.4f} ({r['groups']} cells)", unit(det),
                     unit(r["delta"]), str(r["seeds_needed"])])
    return "\n".join([(f"The smallest true difference the {n} seeds per cell detect between two encodings (Welch t test, "
                       "level 0.05, power 0.8, before the Holm correction), from this run's pooled between-seed "
                       "standard deviation, next to the minimum effect every verdict requires and the seeds that "
                       "would detect it:"), ""] + _table(["measure", "compared", "between-seed sd", f"detectable with "
                                                          f"{n} seeds", "minimum effect", "seeds needed"], body))


def _fit_text(R: Results, option: str, label: str, task: str) -> str:
    first = R.cfg["eval_factors"][0]
    recs = [r for r in R.by_part["tasks"] if r["training"] == option and r["label"] == label and r["task"] == task
            and r["eval_factor"] == first]
    if not recs:
        return "—"
    fitted = sum(1 for r in recs if (r.get("token_accuracy") or 0) >= R.cfg.get("fit_accuracy", 0.9))
    steps = int(np.mean([r.get("train_steps", 0) for r in recs]))
    return f"{fitted}/{len(recs)} ({steps})"


def section_tasks(R: Results) -> str:
    if "tasks" not in R.by_part:
        return "The tasks part was not run."
    factors = R.cfg["eval_factors"]
    chance = 1 / R.cfg["alphabet"]
    out = [f"![token accuracy at and past the training length](study_results/{FIGURES['tasks']})", "",
           (f"Token accuracy (teacher forced) over scored positions; chance is {chance:.2f}. *learned*: seeds whose "
            f"accuracy at L reaches {R.cfg.get('fit_accuracy', 0.9):g} (mean training steps); only those comparisons "
            "enter the verdicts. Exact match, accuracy past the training length and training loss: "
            "[results.md](study_results/results.md)."), ""]
    for task in R.tasks:
        for o in R.options:
            rows = []
            for label in R.labels("tasks", task=task, training=o):
                rows.append([label, _fit_text(R, o, label, task)]
                            + [_pct(R.iv("tasks", "token_accuracy", training=o, label=label, task=task, eval_factor=f))
                               for f in factors])
            out += [f"**{task}, {o}**", ""] + _table(["encoding", "learned"] + [f"{f}L" for f in factors], rows) + [""]
    return "\n".join(out).rstrip()


def section_task_details(R: Results) -> str:
    """Exact match, accuracy past the training length and final training loss (``results.md`` only)."""
    if "tasks" not in R.by_part:
        return "The tasks part was not run."
    factors = R.cfg["eval_factors"]
    longer = [f for f in factors if f > 1]
    out = [("Exact match (every scored token of a sequence right), token accuracy on positions past the training "
            "length only (*beyond*), and the training loss (mean of the last 50 steps)."), ""]
    for o in R.options:
        for task in R.tasks:
            rows = []
            for label in R.labels("tasks", task=task, training=o):
                where = {"training": o, "label": label, "task": task}
                loss = t_interval(R.values("tasks", "final_train_loss", **where, eval_factor=factors[0]).values(), "ratio")
                rows.append([label] + [_pct(R.iv("tasks", "exact_match", **where, eval_factor=f)) for f in factors]
                            + [_pct(R.iv("tasks", "token_accuracy_beyond", **where, eval_factor=f)) for f in longer]
                            + [fmt(loss, 3)])
            header = (["encoding"] + [f"exact {f}L" for f in factors] + [f"beyond {f}L" for f in longer]
                      + ["train loss"])
            out += [f"**{task}, {o}**", ""] + _table(header, rows) + [""]
    return "\n".join(out).rstrip()


def section_option(R: Results, option: str, baseline: str = "fixed") -> str:
    """Training option ``option`` against ``baseline``: per-seed difference of token accuracy (same
    initial weights for both, so the pairs share their seed)."""
    if option not in R.options:
        return f"No cells with the `{option}` training option in this run."
    if baseline not in R.options:
        return f"The `{option}` cells have no `{baseline}` cells to compare with in this run."
    factors = R.cfg["eval_factors"]
    out = [(f"Token accuracy under `{option}` minus under `{baseline}` (paired by seed), mean [95 % interval]; "
            "**bold**: the interval excludes 0."), ""]
    for task in R.tasks:
        rows = []
        for label in R.labels("tasks", task=task, training=option):
            row = [label]
            for f in factors:
                a = R.values("tasks", "token_accuracy", training=baseline, label=label, task=task, eval_factor=f)
                b = R.values("tasks", "token_accuracy", training=option, label=label, task=task, eval_factor=f)
                seeds = sorted(s for s in set(a) & set(b) if a[s] is not None and b[s] is not None)
                iv = t_interval([b[s] - a[s] for s in seeds], "difference")
                text = fmt(iv, 2)
                row.append(f"**{text}**" if iv is not None and iv.known and (iv.lo > 0 or iv.hi < 0) else text)
            rows.append(row)
        out += [f"**{task}**", ""] + _table(["encoding"] + [f"{f}L" for f in factors], rows) + [""]
    return "\n".join(out).rstrip()


def section_fusion(R: Results) -> str:
    fusions = {r["fusion"] for r in R.by_part.get("tasks", []) if r["fusion"] and r["training"] == "fixed"}
    if len(fusions) < 2:
        return "Only one fusion mode in this run (`fixed` training with every fusion mode runs under `--full`)."
    absolute = sorted({r["encoding"] for r in R.by_part["tasks"] if r["fusion"] and r["training"] == "fixed"})
    factors = R.cfg["eval_factors"]
    out = ["Fusion modes of each absolute encoding under `fixed` training, token accuracy:", ""]
    for task in R.tasks:
        rows = []
        for enc in absolute:
            for fusion in sorted(fusions):
                rows.append([f"{enc}+{fusion}"] + [_pct(R.iv("tasks", "token_accuracy", training="fixed", encoding=enc,
                                                              fusion=fusion, task=task, eval_factor=f)) for f in factors])
        out += [f"**{task}**", ""] + _table(["encoding"] + [f"{f}L" for f in factors], rows) + [""]
    return "\n".join(out).rstrip()


def _shape_word(iv: Interval | None) -> str:
    if iv is None or not iv.known:
        return "unknown"
    return "rises" if iv.lo > 1 else "falls" if iv.hi < 1 else "no separated change"


def _bpb(iv: Interval | None) -> str:
    return "n/a" if iv is None else f"{math.log2(iv.mean):.2f}"


def section_lm(R: Results) -> str:
    if "lm" not in R.by_part:
        return "The lm part was not run."
    factors = R.cfg["lm_eval_factors"]
    labels = [lab for lab in R.labels("lm") if lab != NGRAM]
    out = [f"![perplexity versus evaluation length](study_results/{FIGURES['lm']})", "",
           f"![loss per position in the longest windows](study_results/{FIGURES['position_loss']})", ""]
    base = R.values("lm", "ppl", encoding=NGRAM, eval_mode="sliding", eval_factor=factors[0])
    gate = R.cfg.get("lm_gate", 0.15)
    if base:
        b = next(iter(base.values()))
        order = next((r.get("order") for r in R.by_part["lm"] if r["encoding"] == NGRAM), "?")
        beating = [lab for lab in labels if (v := R.values("lm", "ppl", label=lab, eval_mode="sliding",
                                                            eval_factor=factors[0]))
                   and all(x is not None and x <= (1 - gate) * b for x in v.values())]
        out += [(f"Perplexity per byte (lower is better) and bits per byte (`bpb`, log2 of the perplexity). The row "
                 f"`{NGRAM}` is the count-model baseline (Kneser-Ney, order {order}): {b:.2f} per byte at L on the "
                 f"sliding windows. LM claims are judged only for models that beat it by {gate:.0%} or more in every "
                 f"seed (perplexity at most {(1 - gate) * b:.2f}): "
                 + (", ".join(f"`{x}`" for x in beating) if beating else "none of this run's models") + "."), ""]
    for mode in MODES:
        rows = []
        for lab in [NGRAM] + labels if base else labels:
            cells = []
            for f in factors:
                iv = R.iv("lm", "ppl", label=lab, eval_mode=mode, eval_factor=f)
                cells.append(f"{_pct(iv)} ({_bpb(iv)})" if iv else "n/a")
            rows.append([lab] + cells)
        out += [f"**{mode}** (ppl (bpb))", ""] + _table(["encoding"] + [f"{f}L" for f in factors], rows) + [""]
    out += [("**Shape**: perplexity at kL divided by perplexity at L, per seed (paired), mean [95 % interval], and "
             "whether the interval lies above 1 (rises) or below 1 (falls)."), ""]
    for mode in MODES:
        rows = []
        for lab in labels:
            row = [lab]
            for f in factors[1:]:
                iv = R.ratio_iv("lm", "eval_factor", factors[0], f, label=lab, eval_mode=mode)
                row.append("n/a" if iv is None else f"{fmt(iv, 3)} {_shape_word(iv)}")
            rows.append(row)
        out += [f"*{mode}*", ""] + _table(["encoding"] + [f"{f}L / {factors[0]}L" for f in factors[1:]], rows) + [""]
    return "\n".join(out).rstrip()


def section_scaling(R: Results) -> str:
    if "rope_scaling" not in R.by_part:
        return "The rope_scaling part was not run."
    factors = R.cfg["lm_eval_factors"]
    methods = list(dict.fromkeys(r["method"] for r in R.by_part["rope_scaling"]))
    F = R.cfg["scaling_factor"]
    out = [f"![RoPE scaling: perplexity versus evaluation length](study_results/{FIGURES['rope_scaling']})", "",
           ("Perplexity per byte of the RoPE LM under each scaling method. Zero-shot, `linear`, `ntk` and `yarn` "
            f"are each evaluated at length T with their design factor s = T/L; fine-tuned, every method uses "
            f"s = {F} and {R.cfg['finetune_steps']} fine-tuning steps at {F}L. Comparisons between methods are "
            "paired by seed (one base model per seed)."), ""]
    for phase in ("zero_shot", "finetuned"):
        for mode in MODES:
            rows = [[m] + [_pct(R.iv("rope_scaling", "ppl", method=m, phase=phase, eval_mode=mode, eval_factor=f))
                           for f in factors] for m in methods]
            out += [f"**{phase.replace('_', '-')}, {mode}**", ""] + _table(["method"] + [f"{f}L" for f in factors],
                                                                          rows) + [""]
    return "\n".join(out).rstrip()


def section_randomized(R: Results) -> str:
    """Randomized positions against ``varying`` (the same example sizes, ordinary positions)."""
    if "randomized" not in R.options:
        return "No cells with the `randomized` training option (Ruoss et al. 2023) in this run."
    return section_option(R, "randomized", "varying" if "varying" in R.options else "fixed")


#: Settings below which a run is a smoke test rather than the study (the default configuration's).
_STUDY_SIZE = ("seeds", "steps", "lm_steps", "finetune_steps", "d_model", "n_layers", "eval_sequences", "lm_eval_tokens")


def smaller_than_default(cfg: dict) -> list[str]:
    """The settings of ``cfg`` below the default configuration's (``name value < default``)."""
    from .config import StudyConfig

    default = StudyConfig()
    return [f"{k} {cfg[k]} < {getattr(default, k)}" for k in _STUDY_SIZE
            if isinstance(cfg.get(k), (int, float)) and cfg[k] < getattr(default, k)]


def _smoke_warning(R: Results) -> list[str]:
    reduced = smaller_than_default(R.cfg)
    if not reduced:
        return []
    return [f"> **A reduced run, not the study** ({', '.join(reduced)}): its models are far from trained, so "
            "the numbers and verdicts on this page show that the machinery works and are no evidence for or "
            "against any paper. Run the default configuration (`posenc-np study extrapolation --out DIR "
            "--publish docs`) for results.", ""]


def section_lm_large(probe: dict | None) -> str:
    """The published run of the ``--lm-large`` preset (``study_results/lm_large/results.json``):
    what it ran, what it cost, and how its LMs compare with the n-gram baseline at L."""
    if probe is None:
        return "No run of the `--lm-large` preset is published."
    R = Results(probe)
    c, m = R.cfg, R.meta
    env = m.get("environment", {})
    first = c["lm_eval_factors"][0]
    base = R.values("lm", "ppl", encoding=NGRAM, eval_mode="sliding", eval_factor=first)
    b = next(iter(base.values()), None)
    rows = []
    for lab in [x for x in R.labels("lm") if x != NGRAM]:
        iv = R.iv("lm", "ppl", label=lab, eval_mode="sliding", eval_factor=first)
        seconds = [r["train_seconds"] for r in R.by_part["lm"] if r["label"] == lab and r["eval_factor"] == first
                   and r["eval_mode"] == "sliding"]
        gain = "n/a" if b is None or iv is None else f"{1 - iv.mean / b:.1%}"
        rows.append([lab, f"{_pct(iv)} ({_bpb(iv)})", gain, f"{np.mean(seconds) / 60:.0f} min"])
    lines = [(f"A run of the preset with {', '.join(c['encodings'])}, {c['seeds']} seed(s) and {c['lm_steps']} "
              f"training steps: {c['n_layers']} layers, d_model {c['d_model']}, {c['n_heads']} heads, MLP {c['d_ff']}, "
              f"L = {c['lm_train_len']} bytes, batches of {c['lm_batch_size']}; {m.get('cells', 0)} cells, "
              f"{m['cell_seconds'] / 60:.0f} min of cell time (wall clock, on a shared machine) on {env.get('cpu')} (Python {env.get('python')}, "
              f"NumPy {env.get('numpy')}, executor {m.get('executor')}). Sliding perplexity at L against the n-gram "
              f"baseline ({'n/a' if b is None else f'{b:.2f}'}); LM claims need a gain of {c.get('lm_gate', 0.15):.0%}:"),
             ""] + _table(["encoding", "ppl at L (bpb)", "below the n-gram", "training time per cell"], rows)
    return "\n".join(lines)


def sections(doc: dict, probe: dict | None = None) -> dict[str, str]:
    """Every generated block of the documentation, by marker name (``probe``: the published
    ``--lm-large`` run, or None); a run smaller than the default configuration says so at the top
    of the configuration and claims blocks.

    Examples
    --------
    >>> from dataclasses import asdict
    >>> from posenc_np.study.config import StudyConfig
    >>> from posenc_np.study.report import sections
    >>> doc = {"meta": {"version": "0", "config": asdict(StudyConfig(seeds=4)), "elapsed_seconds": 0.0,
    ...                 "cell_seconds": 0.0}, "records": []}            # a run that produced nothing yet
    >>> blocks = sections(doc)
    >>> list(blocks)
    ['config', 'resolution', 'lm-large', 'claims', 'tasks', 'varying', 'fusion', 'lm', 'rope-scaling', 'randomized']
    >>> blocks["tasks"], blocks["lm-large"]
    ('The tasks part was not run.', 'No run of the `--lm-large` preset is published.')
    """
    from .claims import section_claims

    R = Results(doc)
    warn = "\n".join(_smoke_warning(R))
    return {"config": warn + section_config(R), "resolution": section_resolution(R), "lm-large": section_lm_large(probe),
            "claims": warn + section_claims(R), "tasks": section_tasks(R),
            "varying": section_option(R, "varying"), "fusion": section_fusion(R), "lm": section_lm(R),
            "rope-scaling": section_scaling(R), "randomized": section_randomized(R)}


_TITLES = {"config": "Configuration", "resolution": "What the seeds can detect", "claims": "Claims of the papers, checked",
           "tasks": "Synthetic tasks", "varying": "Varying-length training against fixed-length training",
           "fusion": "Fusion modes", "lm": "Language-model perplexity versus length", "rope-scaling": "RoPE scaling",
           "randomized": "Randomized positions", "details": "Synthetic tasks: exact match, beyond L, training loss",
           "lm-large": "The larger LM preset"}


def markdown(doc: dict) -> str:
    """``results.md``: every generated block under a heading, and the detail tables."""
    blocks = sections(doc)
    del blocks["lm-large"]  # a separate run, published on the documentation page only
    blocks["details"] = section_task_details(Results(doc))
    text = ["# Study results", "", "Generated by `posenc-np study report` from `results.json`.", ""]
    for name, body in blocks.items():
        text += [f"## {_TITLES[name]}", "", body.replace("study_results/", ""), ""]
    return "\n".join(text)


#: Columns of ``results.csv`` (scalar fields of the records; lists such as curves stay in the JSON).
CSV_COLUMNS = ("part", "training", "task", "encoding", "fusion", "label", "seed_index", "seed", "method", "phase",
               "design_factor", "eval_mode", "train_len", "eval_len", "eval_factor", "status", "token_accuracy",
               "exact_match", "token_accuracy_beyond", "n_scored", "loss", "ppl", "bpb", "train_steps", "rounds",
               "fit_accuracy", "fitted", "final_train_loss", "train_seconds", "order", "note")


def csv_text(doc: dict) -> str:
    """Every record of ``doc`` as one CSV row (:data:`CSV_COLUMNS`; empty where a record has no such field).

    Examples
    --------
    >>> import csv, io
    >>> from posenc_np.study.report import csv_text
    >>> doc = {"records": [{"part": "lm", "label": "alibi", "seed_index": 0, "eval_len": 64, "ppl": 3.5,
    ...                     "curve": [[1, 2.0]]}]}                   # a list field: kept in the JSON only
    >>> rows = list(csv.DictReader(io.StringIO(csv_text(doc))))
    >>> len(rows), rows[0]["part"], rows[0]["ppl"], rows[0]["eval_len"], rows[0]["task"], "curve" in rows[0]
    (1, 'lm', '3.5', '64', '', False)
    """
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for r in doc["records"]:
        w.writerow(["" if r.get(k) is None else r[k] for k in CSV_COLUMNS])
    return buf.getvalue()


def write_csv(doc: dict, path: str | os.PathLike) -> None:
    """Write :func:`csv_text` atomically to ``path``.

    Examples
    --------
    >>> import os, tempfile
    >>> from posenc_np.study.report import write_csv
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     write_csv({"records": [{"part": "lm", "ppl": 3.5}]}, os.path.join(tmp, "results.csv"))
    ...     with open(os.path.join(tmp, "results.csv")) as fh:
    ...         lines = fh.read().splitlines()
    >>> len(lines), lines[0].split(",")[:4], lines[1].split(",")[0]
    (2, ['part', 'training', 'task', 'encoding'], 'lm')
    """
    text = csv_text(doc)
    atomic_write(path, lambda fh: fh.write(text), mode="w")


# --------------------------------------------------------------------------- writing

def write_report(doc: dict, out_dir: str | os.PathLike) -> list[str]:
    """Write ``results.md``, ``results.csv`` and the figures (when matplotlib is installed) into
    ``out_dir``; return the names written.

    Examples
    --------
    >>> import os, tempfile
    >>> from dataclasses import asdict
    >>> from posenc_np.study.config import StudyConfig
    >>> from posenc_np.study.report import write_report
    >>> doc = {"meta": {"version": "0", "config": asdict(StudyConfig(seeds=4)), "elapsed_seconds": 0.0,
    ...                 "cell_seconds": 0.0}, "records": []}            # no part has results: no figure
    >>> with tempfile.TemporaryDirectory() as out:
    ...     written = write_report(doc, out)
    ...     files = sorted(os.listdir(out))
    >>> written, files
    (['results.md', 'results.csv'], ['results.csv', 'results.md'])
    """
    from .figures import write_figures

    out_dir = os.fspath(out_dir)
    text = markdown(doc)
    atomic_write(os.path.join(out_dir, "results.md"), lambda fh: fh.write(text), mode="w")
    write_csv(doc, os.path.join(out_dir, "results.csv"))
    return ["results.md", "results.csv", *write_figures(doc, out_dir)]


_MAX_PAGE_BYTES = 4 << 20  # the study page; anything larger is not ours
_BLOCK = re.compile(r"(<!-- BEGIN GENERATED: ([\w-]+) -->\n)(.*?)(<!-- END GENERATED: \2 -->)", re.DOTALL)


def fill_blocks(text: str, blocks: dict[str, str]) -> str:
    """``text`` with the body of every ``BEGIN/END GENERATED: name`` block replaced by ``blocks[name]``.

    ``ValueError`` when a marker has no partner, names an unknown block, or a block is missing."""
    found = _BLOCK.findall(text)
    names = [m[1] for m in found]
    begins = re.findall(r"<!-- BEGIN GENERATED: ([\w-]+) -->", text)
    if sorted(begins) != sorted(names) or len(re.findall(r"<!-- END GENERATED: ", text)) != len(names):
        raise ValueError("the document has a GENERATED marker without its partner")
    unknown, missing = sorted(set(names) - set(blocks)), sorted(set(blocks) - set(names))
    if unknown or missing or len(set(names)) != len(names):
        raise ValueError(f"the document's generated blocks do not match the report's: unknown {unknown}, missing "
                         f"{missing}, duplicated {sorted({n for n in names if names.count(n) > 1})}")
    return _BLOCK.sub(lambda m: m.group(1) + blocks[m.group(2)].rstrip() + "\n" + m.group(4), text)


def publish(out_dir: str | os.PathLike, docs_dir: str | os.PathLike) -> list[str]:
    """Copy a finished study's results into the documentation: ``docs_dir/study_results/``
    (``results.json``, ``results.md``, figures) and the generated blocks of ``docs_dir/study.md``.

    Everything is checked before anything is written: ``results.json`` must be this tool's,
    ``study.md`` must carry every block's markers, and an existing
    ``study_results/results.json`` must be this tool's too (it is never clobbered otherwise).

    Examples
    --------
    >>> import os, tempfile
    >>> from dataclasses import asdict
    >>> from posenc_np.study.config import StudyConfig
    >>> from posenc_np.study.report import SCHEMA, publish, sections
    >>> from posenc_np.study.store import STUDY_TOOL, write_json
    >>> doc = {"meta": {"tool": STUDY_TOOL, "schema": SCHEMA, "version": "0", "config": asdict(StudyConfig(seeds=4)),
    ...                 "elapsed_seconds": 0.0, "cell_seconds": 0.0}, "records": [], "failed": []}
    >>> with tempfile.TemporaryDirectory() as out, tempfile.TemporaryDirectory() as docs:
    ...     write_json(os.path.join(out, "results.json"), doc)
    ...     with open(os.path.join(docs, "study.md"), "w") as fh:     # a page with every generated block's markers
    ...         for n in sections(doc):
    ...             print(f"<!-- BEGIN GENERATED: {n} -->", file=fh)
    ...             print(f"<!-- END GENERATED: {n} -->", file=fh)
    ...     written = publish(out, docs)
    ...     with open(os.path.join(docs, "study.md")) as fh:
    ...         page = fh.read()
    >>> written
    ['study_results/results.json', 'study_results/results.md', 'study_results/results.csv', 'study.md']
    >>> "The tasks part was not run." in page
    True
    """
    out_dir, docs_dir = os.fspath(out_dir), os.fspath(docs_dir)
    doc = load_results(out_dir)
    page = os.path.join(docs_dir, "study.md")
    try:
        text = read_bounded(page, _MAX_PAGE_BYTES, follow_links=False).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"cannot read {page!r}: {exc}") from exc
    target = os.path.join(docs_dir, "study_results")
    probe = load_probe(docs_dir)
    new_text = fill_blocks(text, sections(doc, probe))
    os.makedirs(target, exist_ok=True)
    existing = os.path.join(target, "results.json")
    if os.path.exists(existing) and not written_by_us(read_json(existing)):
        raise ValueError(f"{existing} was not written by the study; refusing to overwrite it")
    for name in OUTPUTS:
        check_target(os.path.join(target, name), "study documentation output")
    check_target(page, "study page")
    written = write_report(doc, target)
    if os.path.abspath(out_dir) != os.path.abspath(target):
        write_json(existing, doc)
        for name in FIGURES.values():  # a figure of a part that was not run must not stay behind
            if name not in written and os.path.exists(os.path.join(target, name)):
                os.unlink(os.path.join(target, name))
    atomic_write(page, lambda fh: fh.write(new_text), mode="w")
    return [os.path.join("study_results", n) for n in ["results.json", *written]] + ["study.md"]


#: Where the published ``--lm-large`` run lives under the documentation directory.
PROBE_DIR = os.path.join("study_results", "lm_large")


def load_probe(docs_dir) -> dict | None:
    """The published ``--lm-large`` run under ``docs_dir`` (:data:`PROBE_DIR`), or None when there is none."""
    path = os.path.join(os.fspath(docs_dir), PROBE_DIR)
    return load_results(path) if os.path.exists(os.path.join(path, "results.json")) else None


def load_results(out_dir) -> dict:
    """``out_dir/results.json``, checked to be a results file of this tool's current schema and
    to yield every generated block (``ValueError`` naming the file otherwise, never a traceback)."""
    path = os.path.join(os.fspath(out_dir), "results.json")
    doc = read_json(path)
    if not written_by_us(doc) or not isinstance(doc.get("records"), list):
        raise ValueError(f"{path} is missing, unreadable or not a results file of the study")
    if doc["meta"].get("schema") != SCHEMA:
        raise ValueError(f"{path} is a study results file of schema {doc['meta'].get('schema', 1)}; this version "
                         f"reads schema {SCHEMA} (rerun the study)")
    try:
        sections(doc)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, ZeroDivisionError) as exc:
        raise ValueError(f"{path} is not a valid study results file ({type(exc).__name__}: {exc})") from exc
    return doc
