"""Tables, rankings, claim checks and figures generated from ``results.json``.

Everything here is a function of the results document alone, so a rerun of the study, or
``posenc-np study report DIR``, regenerates every number the documentation shows.
:func:`sections` returns the Markdown blocks that ``docs/study.md`` includes between
``<!-- BEGIN GENERATED: name -->`` and ``<!-- END GENERATED: name -->`` markers
(:func:`publish` replaces them); ``results.md`` is all of them in one file.
"""

from __future__ import annotations

import os
import re

from .._files import atomic_write, check_target
from .stats import Interval, change, direction, fmt, t_interval, tiers
from .store import OUTPUTS, read_json, write_json, written_by_us

__all__ = ["Results", "publish", "sections", "write_report"]

FIGURES = {"tasks": "tasks.png", "lm": "lm.png", "rope_scaling": "rope_scaling.png"}
SCHEMA = 2  # of results.json
MODES = ("nonoverlapping", "sliding")


class Results:
    """Index of a results document: intervals over seeds for every reported quantity."""

    def __init__(self, doc: dict):
        self.doc, self.meta, self.records = doc, doc["meta"], doc["records"]
        self.cfg = self.meta["config"]
        self.by_part = {}
        for r in self.records:
            self.by_part.setdefault(r.get("part", "tasks"), []).append(r)

    # ------------------------------------------------------------ raw values, by seed index
    def values(self, part: str, metric: str, **where) -> dict:
        """``{seed_index: value}`` of ``metric`` over the records of ``part`` matching ``where``."""
        return {r["seed_index"]: r.get(metric) for r in self.by_part.get(part, [])
                if all(r.get(k) == v for k, v in where.items())}

    def iv(self, part: str, metric: str, **where) -> Interval | None:
        return t_interval(self.values(part, metric, **where).values())

    def ratio(self, part: str, metric: str, key: str, base, other, **where) -> Interval | None:
        """Per-seed ratio of ``metric`` at ``key=other`` to ``key=base`` (a paired change)."""
        a, b = self.values(part, metric, **where, **{key: base}), self.values(part, metric, **where, **{key: other})
        seeds = sorted(set(a) & set(b))
        return change([a[s] for s in seeds], [b[s] for s in seeds])

    def labels(self, part: str, **where) -> list[str]:
        return list(dict.fromkeys(r["label"] for r in self.by_part.get(part, [])
                                  if all(r.get(k) == v for k, v in where.items())))

    @property
    def options(self) -> list[str]:
        return list(dict.fromkeys(r["training"] for r in self.by_part.get("tasks", [])))

    @property
    def tasks(self) -> list[str]:
        return list(dict.fromkeys(r["task"] for r in self.by_part.get("tasks", [])))

    def n_seeds(self) -> int:
        return self.cfg["seeds"]


# --------------------------------------------------------------------------- formatting helpers

def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + ["| " + " | ".join(r) + " |" for r in rows]


def _chain(groups: list[list[str]]) -> str:
    """``a > {b, c} > d``: best first; braces hold results no interval comparison separates."""
    return " > ".join(g[0] if len(g) == 1 else "{" + ", ".join(g) + "}" for g in groups)


def _ranking(items: dict, higher_is_better: bool) -> str:
    ranked = {k: v for k, v in items.items() if v is not None}
    missing = sorted(k for k, v in items.items() if v is None)
    text = _chain(tiers(ranked, higher_is_better=higher_is_better)) if ranked else "nothing to rank"
    return text + (f" (n/a: {', '.join(missing)})" if missing else "")


def _ranking_lines(R: Results, part: str, metric: str, key: str, names, cases, higher_is_better: bool) -> list[str]:
    """``* <title>: <ranking>`` for every ``(title, where)`` in ``cases``, ranking ``names`` of ``key``."""
    return [f"* {title}: " + _ranking({n: R.iv(part, metric, **where, **{key: n}) for n in names}, higher_is_better)
            for title, where in cases]


def _pct(iv: Interval | None) -> str:
    return fmt(iv, 2)


# --------------------------------------------------------------------------- sections

def section_config(R: Results) -> str:
    c, m = R.cfg, R.meta
    lines = [(f"Run of {m.get('date', 'unknown date')} with posenc_np {m['version']}, Python {m['python']}, "
             f"NumPy {m['numpy']}, on {m['cpu_count']} CPU(s) ({m['machine']}), executor: {m.get('executor', '?')}. "
             f"Seeds per cell: {c['seeds']} (base seed {c['seed']}); every number is the mean over seeds with its "
             f"95 % Student-t interval `mean [lo, hi]`."), ""]
    parts = c["parts"]
    if "tasks" in parts:
        lines.append(f"* **tasks**: {', '.join(c['tasks'])} at size L = {c['train_len']} ({2 * c['train_len'] + 1} "
                     f"tokens), alphabet {c['alphabet']}, {c['steps']} steps of {c['batch_size']} sequences, lr "
                     f"{c['lr']:g} ({c['warmup']} warm-up steps, cosine to {c['min_lr']:g}), evaluated at "
                     + ", ".join(f"{f}L" for f in c["eval_factors"]) + f" on {c['eval_sequences']} held-out "
                     f"sequences per length; training options: {', '.join(c['training'])}.")
    if "lm" in parts or "rope_scaling" in parts:
        L = c["lm_train_len"]
        lines.append(f"* **lm**: byte-level LM trained at L = {L} bytes, {c['lm_steps']} steps of {c['lm_batch_size']} "
                     f"windows, lr {c['lm_lr']:g}; perplexity per byte on the first {c['lm_eval_tokens']} held-out "
                     f"predictions at " + ", ".join(f"{f}L" for f in c["lm_eval_factors"])
                     + ", non-overlapping and sliding (windows advancing by half their length).")
    if "rope_scaling" in parts:
        lines.append(f"* **rope_scaling**: the lm part's RoPE models; methods {', '.join(c['scaling_methods'])} with "
                     f"factor {c['scaling_factor']}; zero-shot, and after {c['finetune_steps']} fine-tuning steps of "
                     f"{c['finetune_batch_size']} windows of {c['scaling_factor'] * c['lm_train_len']} bytes at lr "
                     f"{c['finetune_lr']:g}.")
    lines.append(f"* model: {c['n_layers']} layers, d_model {c['d_model']}, {c['n_heads']} heads, MLP {c['d_ff']}; "
                 f"encodings: {', '.join(c['encodings'])}.")
    corpus = m.get("corpus")
    if corpus:
        lines.append(f"* corpus: {len([f for f in corpus['files'] if f['split'] == 'train'])} training files "
                     f"({corpus['train_bytes']} bytes, SHA-256 `{corpus['train_sha256'][:16]}…`) and "
                     f"{len([f for f in corpus['files'] if f['split'] == 'held_out'])} held-out files "
                     f"({corpus['held_out_bytes']} bytes, SHA-256 `{corpus['held_out_sha256'][:16]}…`) of the "
                     f"{corpus['implementation']} {corpus['python']} standard library (full list and digests in "
                     "`results.json`).")
    n_cells = m.get("cells", 0)
    lines.append(f"* cost: {n_cells} cells, {m['elapsed_seconds'] / 60:.1f} min wall clock for the cells run in the "
                 f"last invocation, {m['cell_seconds'] / 60:.1f} min of cell time in total"
                 + (f"; {len(R.doc['failed'])} cell(s) failed: {', '.join(f['cell'] for f in R.doc['failed'])}"
                    if R.doc.get("failed") else "; no cell failed") + ".")
    return "\n".join(lines)


def section_tasks(R: Results) -> str:
    if "tasks" not in R.by_part:
        return "The tasks part was not run."
    factors = R.cfg["eval_factors"]
    chance = 1 / R.cfg["alphabet"]
    out = [(f"Token accuracy (teacher forced) over scored positions; chance is {chance:.2f}. Columns per training "
           "option; — where the option has no such cell (only the first fusion mode runs under options other than "
           "`fixed`). Full tables with exact match, accuracy past the training length and training loss: "
           "[results.md](study_results/results.md)."), ""]
    for task in R.tasks:
        header = ["encoding"] + [f"{o} {f}L" for o in R.options for f in factors]
        rows = []
        for label in R.labels("tasks", task=task):
            row = [label]
            for o in R.options:
                for f in factors:
                    if not R.values("tasks", "token_accuracy", training=o, label=label, task=task):
                        row.append("—")
                    else:
                        row.append(_pct(R.iv("tasks", "token_accuracy", training=o, label=label, task=task,
                                             eval_factor=f)))
            rows.append(row)
        out += [f"**{task}**", ""] + _table(header, rows) + [""]
    out += [("**Rankings** (token accuracy, best first; `a > b`: every interval on the left lies above every interval "
            "on the right; braces: not separated):"), ""]
    for o in R.options:
        for task in R.tasks:
            out += _ranking_lines(R, "tasks", "token_accuracy", "label", R.labels("tasks", task=task, training=o),
                                  [(f"{task}, {f}L, {o}", {"training": o, "task": task, "eval_factor": f})
                                   for f in factors if f > 1], True)
    return "\n".join(out)


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
                rows.append([label] + [_pct(R.iv("tasks", "exact_match", **where, eval_factor=f)) for f in factors]
                            + [_pct(R.iv("tasks", "token_accuracy_beyond", **where, eval_factor=f)) for f in longer]
                            + [fmt(R.iv("tasks", "final_train_loss", **where, eval_factor=factors[0]), 3)])
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
                iv = t_interval([b[s] - a[s] for s in seeds])
                text = fmt(iv, 2)
                row.append(f"**{text}**" if direction(iv, 0.0) in ("up", "down") else text)
            rows.append(row)
        out += [f"**{task}**", ""] + _table(["encoding"] + [f"{f}L" for f in factors], rows) + [""]
    return "\n".join(out).rstrip()


def section_fusion(R: Results) -> str:
    absolute = sorted({r["encoding"] for r in R.by_part.get("tasks", []) if r["fusion"] and r["training"] == "fixed"})
    if not absolute:
        return "No absolute encodings with fusion modes in this run."
    out = [("Fusion modes of each absolute encoding under `fixed` training, token accuracy ranked best first "
           "(`a > b` only where the intervals separate):"), ""]
    for enc in absolute:
        for task in R.tasks:
            parts = []
            for f in R.cfg["eval_factors"]:
                items = {}
                for r in R.by_part["tasks"]:
                    if r["encoding"] == enc and r["task"] == task and r["training"] == "fixed":
                        items[r["fusion"]] = None
                for fusion in items:
                    items[fusion] = R.iv("tasks", "token_accuracy", training="fixed", encoding=enc, fusion=fusion,
                                         task=task, eval_factor=f)
                parts.append(f"{f}L: {_ranking(items, True)}")
            out.append(f"* {enc}, {task}: " + "; ".join(parts))
    return "\n".join(out)


def _shape_word(iv: Interval | None) -> str:
    return {"up": "rises", "down": "falls", "flat": "no separated change", "unknown": "unknown"}[direction(iv)]


def section_lm(R: Results) -> str:
    if "lm" not in R.by_part:
        return "The lm part was not run."
    factors = R.cfg["lm_eval_factors"]
    out = [f"![perplexity versus evaluation length](study_results/{FIGURES['lm']})", "",
           "Perplexity per byte (lower is better); n/a: past the learned table.", ""]
    for mode in MODES:
        rows = [[lab] + [_pct(R.iv("lm", "ppl", label=lab, eval_mode=mode, eval_factor=f)) for f in factors]
                for lab in R.labels("lm")]
        out += [f"**{mode}**", ""] + _table(["encoding"] + [f"{f}L" for f in factors], rows) + [""]
    out += [("**Shape**: perplexity at kL divided by perplexity at L, per seed (paired), mean [95 % interval], and "
            "whether the interval lies above 1 (rises) or below 1 (falls)."), ""]
    for mode in MODES:
        rows = []
        for lab in R.labels("lm"):
            row = [lab]
            for f in factors[1:]:
                iv = R.ratio("lm", "ppl", "eval_factor", factors[0], f, label=lab, eval_mode=mode)
                row.append("n/a" if iv is None else f"{fmt(iv, 3)} {_shape_word(iv)}")
            rows.append(row)
        out += [f"*{mode}*", ""] + _table(["encoding"] + [f"{f}L / {factors[0]}L" for f in factors[1:]], rows) + [""]
    out += ["**Rankings** (perplexity, best first; `a > b`: intervals separate):", ""]
    out += _ranking_lines(R, "lm", "ppl", "label", R.labels("lm"),
                          [(f"{mode}, {f}L", {"eval_mode": mode, "eval_factor": f}) for mode in MODES for f in factors],
                          False)
    return "\n".join(out)


def section_scaling(R: Results) -> str:
    if "rope_scaling" not in R.by_part:
        return "The rope_scaling part was not run."
    factors = R.cfg["lm_eval_factors"]
    methods = list(dict.fromkeys(r["method"] for r in R.by_part["rope_scaling"]))
    F = R.cfg["scaling_factor"]
    out = [f"![RoPE scaling: perplexity versus evaluation length](study_results/{FIGURES['rope_scaling']})", "",
           (f"Perplexity per byte of the RoPE LM under each scaling method (factor {F}), zero-shot and after "
           f"{R.cfg['finetune_steps']} fine-tuning steps at {F}L."), ""]
    for phase in ("zero_shot", "finetuned"):
        for mode in MODES:
            rows = [[m] + [_pct(R.iv("rope_scaling", "ppl", method=m, phase=phase, eval_mode=mode, eval_factor=f))
                           for f in factors] for m in methods]
            out += [f"**{phase.replace('_', '-')}, {mode}**", ""] + _table(["method"] + [f"{f}L" for f in factors],
                                                                          rows) + [""]
    out += ["**Orderings** (perplexity, best first; `a > b`: intervals separate):", ""]
    out += _ranking_lines(R, "rope_scaling", "ppl", "method", methods,
                          [(f"{phase.replace('_', '-')}, {mode}, {f}L", {"phase": phase, "eval_mode": mode,
                                                                         "eval_factor": f})
                           for phase in ("zero_shot", "finetuned") for mode in MODES for f in factors], False)
    return "\n".join(out)


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


def sections(doc: dict) -> dict[str, str]:
    """Every generated block of the documentation, by marker name; a run smaller than the default
    configuration says so at the top of the configuration and claims blocks."""
    from .claims import section_claims

    R = Results(doc)
    warn = "\n".join(_smoke_warning(R))
    return {"config": warn + section_config(R), "claims": warn + section_claims(R), "tasks": section_tasks(R),
            "varying": section_option(R, "varying"), "fusion": section_fusion(R), "lm": section_lm(R),
            "rope-scaling": section_scaling(R), "randomized": section_randomized(R)}


_TITLES = {"config": "Configuration", "claims": "Claims of the papers, checked", "tasks": "Synthetic tasks",
           "varying": "Varying-length training against fixed-length training", "fusion": "Fusion modes",
           "lm": "Language-model perplexity versus length", "rope-scaling": "RoPE scaling",
           "randomized": "Randomized positions", "details": "Synthetic tasks: exact match, beyond L, training loss"}


def markdown(doc: dict) -> str:
    """``results.md``: every generated block under a heading, and the detail tables."""
    blocks = sections(doc)
    blocks["details"] = section_task_details(Results(doc))
    text = ["# Study results", "", "Generated by `posenc-np study report` from `results.json`.", ""]
    for name, body in blocks.items():
        text += [f"## {_TITLES[name]}", "", body.replace("study_results/", ""), ""]
    return "\n".join(text)


# --------------------------------------------------------------------------- writing

def write_report(doc: dict, out_dir) -> list[str]:
    """Write ``results.md`` and the figures (when matplotlib is installed) into ``out_dir``; return
    the names written."""
    from .figures import write_figures

    out_dir = os.fspath(out_dir)
    text = markdown(doc)
    atomic_write(os.path.join(out_dir, "results.md"), lambda fh: fh.write(text), mode="w")
    return ["results.md", *write_figures(doc, out_dir)]


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


def publish(out_dir, docs_dir) -> list[str]:
    """Copy a finished study's results into the documentation: ``docs_dir/study_results/``
    (``results.json``, ``results.md``, figures) and the generated blocks of ``docs_dir/study.md``.

    Everything is checked before anything is written: ``results.json`` must be this tool's,
    ``study.md`` must carry every block's markers, and an existing
    ``study_results/results.json`` must be this tool's too (it is never clobbered otherwise)."""
    out_dir, docs_dir = os.fspath(out_dir), os.fspath(docs_dir)
    doc = load_results(out_dir)
    page = os.path.join(docs_dir, "study.md")
    try:
        with open(page, encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read {page!r}: {exc}") from exc
    new_text = fill_blocks(text, sections(doc))
    target = os.path.join(docs_dir, "study_results")
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
