r"""Length-extrapolation study: train one small transformer per position encoding on synthetic
tasks at length :math:`L` and evaluate it at :math:`L`, :math:`2L` and :math:`4L`.

Run it with ``posenc-np study extrapolation --out DIR [--quick] [--seed N] [--no-progress]``.

Tasks (alphabet of ``A`` symbols ``2 .. A+1``; token 0 = BOS, 1 = SEP; a task of *size*
:math:`n` is a sequence of :math:`2n + 1` input tokens):

``copy``
    ``BOS x1..xn SEP x1..xn``: after SEP the model must reproduce the :math:`n` symbols
    (scored: the :math:`n` answer tokens).
``reverse``
    ``BOS x1..xn SEP xn..x1`` (scored: the :math:`n` answer tokens).
``lag``
    a local pattern where only *relative* position matters: ``BOS x1..x2n`` and at every
    position :math:`i > k` the target is the symbol :math:`k = 3` positions back,
    :math:`x_{i-k}` (scored: every such position).

The training length :math:`L` is the task size :math:`n`; evaluation uses sizes
:math:`L, 2L, 4L` on fixed held-out sets that are the same for every encoding. Metrics
(teacher forced): token accuracy over scored positions and exact match (every scored token
of a sequence right; under teacher forcing this equals greedy decoding reproducing the whole
answer). ``learned`` has a table of exactly the training sequence length: past it the
library raises (a learned table cannot extrapolate) and the record says ``"status": "n/a"``
with the reason instead of inventing positions (no clamping).

Outputs in ``DIR``: ``results.json`` (metadata, one record per encoding, fusion, task,
train length and eval length, with metrics and seed, and the list of ``failed`` cells with
their errors), ``results.md`` (Markdown tables) and ``results.png`` (a heat map, when
matplotlib is installed), all written atomically at the end; ``cells/<cell>.json``, one per
finished (encoding, fusion, task) cell, written atomically as each finishes; ``study.json``,
the configuration. Rerunning with the same ``--out`` resumes: finished cells are read back,
failed ones run again (see :class:`ResultStore`). The CLI exits with status 1 when a cell failed.

Models: pre-LN decoder (:class:`posenc_np.model.Transformer`), tied output, GPT-2
initialisation (``N(0, 0.02^2)``); ``sinusoidal`` uses Vaswani et al.'s embedding recipe
instead (``embed_scale="sqrt_d"``: token table ``N(0, 1/d)`` times :math:`\sqrt d`), because
with GPT-2's small token embeddings the unit-amplitude sinusoid drowns the tokens and the
model does not learn copy or reverse even at :math:`L` (and, conversely, NoPE, learned and
ALiBi do not learn them within the budget with Vaswani's recipe). ``StudyConfig.embed_scale``
maps encodings to the recipe; each record stores the one it used.

Runs are independent and seeded (seed derived from the base seed, encoding, fusion and
task by CRC32, recorded per record), so the results do not depend on scheduling; the full
grid runs in worker processes (two by default), each with single-threaded BLAS.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import time
import traceback
import zlib
from dataclasses import asdict, dataclass, field

import numpy as np

from ._checks import check_alloc, check_int, check_real
from ._files import atomic_write, check_target, sweep_stale_temps
from ._version import __version__
from .absolute import FUSIONS
from .model import REGISTRY, ModelConfig, Transformer
from .train import Progress, evaluate, train

__all__ = ["CopyTask", "LagTask", "ResultStore", "ReverseTask", "StudyConfig", "TASKS", "cell_id", "grid",
           "run_cell", "run_extrapolation", "run_extrapolation_cli", "write_markdown", "write_plot"]

BOS, SEP, FIRST_SYMBOL = 0, 1, 2
IGNORE = -100


# --------------------------------------------------------------------------- tasks

@dataclass
class _Task:
    """A synthetic task of size ``n >= 1`` over ``alphabet >= 2`` symbols; ``sample`` draws a batch."""

    n: int
    alphabet: int = 16

    name = "task"

    def __post_init__(self):
        self.n = check_int(self.n, "n", minimum=1)
        self.alphabet = check_int(self.alphabet, "alphabet", minimum=2)  # one symbol carries no information

    @property
    def vocab_size(self) -> int:
        return FIRST_SYMBOL + self.alphabet

    @property
    def seq_len(self) -> int:
        return 2 * self.n + 1

    def _symbols(self, rng, batch, length):
        return rng.integers(FIRST_SYMBOL, FIRST_SYMBOL + self.alphabet, size=(batch, length))

    def sample(self, rng: np.random.Generator, batch_size: int):
        """``(tokens, targets)``, integer arrays ``(batch_size, seq_len)`` drawn with ``rng``."""
        if not isinstance(rng, np.random.Generator):
            raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
        batch_size = check_int(batch_size, "batch_size", minimum=1)
        check_alloc((batch_size, self.seq_len + 1), np.int64, "task batch (batch_size, sequence length)")
        return self._sample(rng, batch_size)

    def _sample(self, rng, batch_size):
        raise NotImplementedError


def _seq2seq(prefix_and_answer: np.ndarray, n: int):
    """``BOS x SEP y`` (length 2n+2) to next-token ``(tokens, targets)``, scoring only ``y``."""
    tokens, targets = prefix_and_answer[:, :-1], prefix_and_answer[:, 1:].copy()
    targets[:, : n + 1] = IGNORE  # positions 0..n predict x2..xn, SEP: not scored
    return tokens, targets


class CopyTask(_Task):
    """``BOS x1..xn SEP x1..xn``; the n answer tokens are scored."""

    name = "copy"

    def _sample(self, rng, batch_size):
        x = self._symbols(rng, batch_size, self.n)
        col = np.full((batch_size, 1), BOS), np.full((batch_size, 1), SEP)
        return _seq2seq(np.concatenate([col[0], x, col[1], x], axis=1), self.n)


class ReverseTask(_Task):
    """``BOS x1..xn SEP xn..x1``; the n answer tokens are scored."""

    name = "reverse"

    def _sample(self, rng, batch_size):
        x = self._symbols(rng, batch_size, self.n)
        col = np.full((batch_size, 1), BOS), np.full((batch_size, 1), SEP)
        return _seq2seq(np.concatenate([col[0], x, col[1], x[:, ::-1]], axis=1), self.n)


@dataclass
class LagTask(_Task):
    """``BOS x1..x2n``; position i > lag predicts x_{i-lag} (a purely relative pattern).

    ``1 <= lag <= 2n - 1``, so that at least one position is scored."""

    lag: int = 3
    name = "lag"

    def __post_init__(self):
        super().__post_init__()
        self.lag = check_int(self.lag, "lag", minimum=1, maximum=2 * self.n - 1)

    def _sample(self, rng, batch_size):
        tokens = np.concatenate([np.full((batch_size, 1), BOS), self._symbols(rng, batch_size, 2 * self.n)], axis=1)
        targets = np.full_like(tokens, IGNORE)
        targets[:, self.lag + 1:] = tokens[:, 1:-self.lag]  # position i predicts x_{i-lag}, i - lag >= 1
        return tokens, targets


TASKS = {"copy": CopyTask, "reverse": ReverseTask, "lag": LagTask}


# --------------------------------------------------------------------------- grid

@dataclass
class StudyConfig:
    """Everything that defines a study run (stored in ``results.json``)."""

    encodings: list = field(default_factory=lambda: list(REGISTRY))
    fusions: tuple = ("add", "concat", "multiply")
    tasks: list = field(default_factory=lambda: ["copy", "reverse", "lag"])
    train_len: int = 16
    eval_factors: tuple = (1, 2, 4)
    alphabet: int = 16
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    d_ff: int = 128
    embed_scale: dict = field(default_factory=lambda: {"sinusoidal": "sqrt_d"})
    position_options: dict = field(default_factory=dict)  # encoding -> ModelConfig.position_options
    steps: int = 1500
    batch_size: int = 32
    lr: float = 2e-3
    warmup: int = 100
    min_lr: float = 1e-4
    weight_decay: float = 0.01
    clip: float = 1.0
    eval_sequences: int = 256
    seed: int = 0
    jobs: int = 2

    def validate(self) -> StudyConfig:
        """Check the grid and the hyper-parameters before anything runs (``ValueError``/``TypeError``)."""
        for name, allowed in (("encodings", REGISTRY), ("tasks", TASKS), ("fusions", FUSIONS)):
            values = getattr(self, name)
            if isinstance(values, str) or not all(isinstance(v, str) for v in values) or not values:
                raise TypeError(f"{name} must be a non-empty list of names from {sorted(allowed)}, got {values!r}")
            unknown = sorted(set(values) - set(allowed))
            if unknown:
                raise ValueError(f"{name} has unknown entries {unknown}; allowed: {sorted(allowed)}")
        if not self.eval_factors or isinstance(self.eval_factors, str):
            raise TypeError(f"eval_factors must be a non-empty list of ints, got {self.eval_factors!r}")
        for f in self.eval_factors:
            check_int(f, "eval_factors entry", minimum=1)
        for name in ("train_len", "d_model", "n_heads", "n_layers", "d_ff", "batch_size", "eval_sequences", "jobs"):
            check_int(getattr(self, name), name, minimum=1)
        check_int(self.alphabet, "alphabet", minimum=2)
        for name in ("steps", "warmup", "seed"):
            check_int(getattr(self, name), name, minimum=0)
        for name in ("lr", "min_lr", "weight_decay", "clip"):
            check_real(getattr(self, name), name, nonnegative=True)
        for name in ("embed_scale", "position_options"):
            if not isinstance(getattr(self, name), dict):
                raise TypeError(f"{name} must be a dict keyed by encoding, got {type(getattr(self, name)).__name__}")
        return self


def quick_config(seed: int = 0) -> StudyConfig:
    """The reduced grid of ``--quick``: every encoding and fusion, tiny model, a few steps."""
    return StudyConfig(train_len=4, alphabet=8, d_model=16, n_heads=2, n_layers=1, d_ff=32, steps=40,
                       batch_size=8, lr=3e-3, warmup=5, eval_sequences=16, seed=seed, jobs=1)


def grid(cfg: StudyConfig) -> list[dict]:
    """The cells of a study: one per (encoding, fusion, task), with its derived seed.

    A cell is the unit of work and of storage: :func:`run_cell` trains and evaluates it,
    :class:`ResultStore` keeps its result under :func:`cell_id`."""
    runs = []
    for enc in cfg.encodings:
        fusions = cfg.fusions if REGISTRY[enc].absolute else (None,)
        for fusion in fusions:
            for task in cfg.tasks:
                label = enc if fusion is None else f"{enc}+{fusion}"
                seed = zlib.crc32(f"{cfg.seed}/{label}/{task}".encode()) & 0x7FFFFFFF
                runs.append({"encoding": enc, "fusion": fusion, "label": label, "task": task, "seed": seed,
                             "embed_scale": cfg.embed_scale.get(enc, "none")})
    return runs


def cell_id(cell: dict) -> str:
    """A cell's name in the result store, e.g. ``"rope__copy"``, ``"learned+concat__lag"``."""
    return f"{cell['label']}__{cell['task']}"


def _eval_seed(cfg: StudyConfig, task: str, n: int) -> int:
    return zlib.crc32(f"{cfg.seed}/eval/{task}/{n}".encode()) & 0x7FFFFFFF


def run_cell(cfg_dict: dict, cell: dict) -> dict:
    """Run one cell and report, never raise: ``{"cell", "status": "ok" | "error", "records",
    "error", "seconds"}`` (``error`` holds the exception and traceback of a failed cell).

    A plain function of picklable arguments, so any executor (a process pool here) can run it.
    """
    t0 = time.perf_counter()
    try:
        records, status, error = _run_one(cfg_dict, cell), "ok", ""
    except Exception as exc:  # noqa: BLE001 - one failing cell is recorded, not fatal
        records, status = [], "error"
        error = f"{type(exc).__name__}: {exc}\n" + traceback.format_exc(limit=-4)
    return {"cell": cell, "status": status, "records": records, "error": error,
            "seconds": time.perf_counter() - t0}


def _run_one(cfg_dict: dict, run: dict) -> list[dict]:
    """Train one model and evaluate it at every eval length (runs in a worker process)."""
    from threadpoolctl import threadpool_limits

    cfg = StudyConfig(**cfg_dict)
    with threadpool_limits(1):
        task_cls = TASKS[run["task"]]
        train_task = task_cls(cfg.train_len, cfg.alphabet)
        mcfg = ModelConfig(vocab_size=train_task.vocab_size, d_model=cfg.d_model, n_heads=cfg.n_heads,
                           n_layers=cfg.n_layers, d_ff=cfg.d_ff, max_len=train_task.seq_len, causal=True, tied=True,
                           position=run["encoding"], fusion=run["fusion"] or "add",
                           position_options=dict(cfg.position_options.get(run["encoding"], {})),
                           embed_scale=run["embed_scale"], seed=run["seed"])
        model = Transformer(mcfg)
        t0 = time.perf_counter()
        hist = train(model, train_task, cfg.steps, batch_size=cfg.batch_size, lr=cfg.lr, warmup=cfg.warmup,
                     min_lr=cfg.min_lr, weight_decay=cfg.weight_decay, clip=cfg.clip, seed=run["seed"], progress=False)
        train_seconds = time.perf_counter() - t0
        final_loss = float(np.mean([h["loss"] for h in hist[-min(50, len(hist)):]])) if hist else float("nan")
        records = []
        for factor in cfg.eval_factors:
            n = cfg.train_len * factor
            task = task_cls(n, cfg.alphabet)
            tokens, targets = task.sample(np.random.default_rng(_eval_seed(cfg, run["task"], n)), cfg.eval_sequences)
            rec = {**{k: run[k] for k in ("encoding", "fusion", "label", "task", "seed", "embed_scale")},
                   "train_len": cfg.train_len, "eval_len": n, "eval_factor": factor,
                   "train_seq_len": train_task.seq_len, "eval_seq_len": task.seq_len,
                   "train_steps": cfg.steps, "final_train_loss": final_loss, "train_seconds": train_seconds}
            if run["encoding"] == "learned" and task.seq_len > mcfg.max_len:
                rec.update(status="n/a", token_accuracy=None, exact_match=None, token_accuracy_beyond=None, loss=None,
                           note=f"positions {mcfg.max_len}..{task.seq_len - 1} are past the learned table of "
                                f"{mcfg.max_len} rows (a learned table cannot extrapolate; not clamped)")
            else:
                m = evaluate(model, tokens, targets, batch_size=64, beyond=train_task.seq_len)
                rec.update(status="ok", token_accuracy=m["token_accuracy"], exact_match=m["exact_match"],
                           token_accuracy_beyond=m["token_accuracy_beyond"], loss=m["loss"],
                           n_sequences=m["n_sequences"], note="")
            records.append(rec)
    return records


# --------------------------------------------------------------------------- outputs

def _fmt(v) -> str:
    return "n/a" if v is None else f"{v:.2f}"


def write_markdown(results: dict, path) -> str:
    """Markdown tables per task: token accuracy / exact match at every eval length, token
    accuracy on the positions past the training length, final training loss. Returns the text."""
    meta, records = results["meta"], results["records"]
    factors = meta["config"]["eval_factors"]
    longer = [f for f in factors if f > 1]
    L = meta["config"]["train_len"]
    lines = [f"Trained at size L = {L} ({2 * L + 1} tokens), evaluated at "
             + ", ".join(f"{f}L" for f in factors) + ". Cells `a / e`: token accuracy / exact match "
             "(teacher forced). *beyond*: token accuracy on positions past the training length only. "
             "n/a: past the learned table.", ""]
    labels = list(dict.fromkeys(r["label"] for r in records))
    for task in dict.fromkeys(r["task"] for r in records):
        lines += [f"### {task}", "",
                  "| encoding | " + " | ".join(f"{f}L" for f in factors) + " | "
                  + " | ".join(f"{f}L beyond" for f in longer) + " | train loss |",
                  "|---|" + "---|" * (len(factors) + len(longer) + 1)]
        for label in labels:
            rs = {r["eval_factor"]: r for r in records if r["label"] == label and r["task"] == task}
            if not rs:
                continue
            cells = [f"{_fmt(rs[f]['token_accuracy'])} / {_fmt(rs[f]['exact_match'])}" if f in rs else "" for f in factors]
            cells += [_fmt(rs[f].get("token_accuracy_beyond")) if f in rs else "" for f in longer]
            loss = next(iter(rs.values()))["final_train_loss"]
            lines.append(f"| {label} | " + " | ".join(cells) + f" | {'n/a' if loss is None else f'{loss:.3f}'} |")
        lines.append("")
    text = "\n".join(lines)
    atomic_write(path, lambda fh: fh.write(text), mode="w")
    return text


def write_plot(results: dict, path) -> bool:
    """Heat map of token accuracy (exact match in brackets): one row per encoding, one column
    per task and eval length; hatched = n/a. Returns False when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    records = results["records"]
    tasks = list(dict.fromkeys(r["task"] for r in records))
    labels = list(dict.fromkeys(r["label"] for r in records))
    factors = list(results["meta"]["config"]["eval_factors"])
    L = results["meta"]["config"]["train_len"]
    index = {(r["label"], r["task"], r["eval_factor"]): r for r in records}
    acc = np.full((len(labels), len(tasks) * len(factors)), np.nan)
    for i, label in enumerate(labels):
        for t, task in enumerate(tasks):
            for f, factor in enumerate(factors):
                r = index.get((label, task, factor))
                if r is not None and r["token_accuracy"] is not None:
                    acc[i, t * len(factors) + f] = r["token_accuracy"]
    fig, ax = plt.subplots(figsize=(1.0 * acc.shape[1] + 3.0, 0.42 * len(labels) + 1.6))
    cmap = plt.get_cmap("viridis").with_extremes(bad="white")
    im = ax.imshow(np.ma.masked_invalid(acc), cmap=cmap, vmin=0, vmax=1, aspect="auto")
    for i, label in enumerate(labels):
        for t, task in enumerate(tasks):
            for f, factor in enumerate(factors):
                j = t * len(factors) + f
                r = index.get((label, task, factor))
                if r is None:
                    continue
                if r["token_accuracy"] is None:
                    ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="///", color="0.6", lw=0))
                    ax.text(j, i, "n/a", ha="center", va="center", fontsize=7, color="0.3")
                else:
                    ax.text(j, i, f"{r['token_accuracy']:.2f}\n({r['exact_match']:.2f})", ha="center", va="center",
                            fontsize=6.5, color="black" if r["token_accuracy"] > 0.55 else "white")
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.set_xticks(range(acc.shape[1]), [f"{f}L" for _ in tasks for f in factors], fontsize=8)
    for t, task in enumerate(tasks):
        ax.text(t * len(factors) + (len(factors) - 1) / 2, -0.9, task, ha="center", va="bottom", fontsize=10,
                fontweight="bold")
        if t:
            ax.axvline(t * len(factors) - 0.5, color="white", lw=3)
    ax.set_title(f"token accuracy (exact match), trained at L = {L}", pad=34, fontsize=10)
    fig.colorbar(im, ax=ax, fraction=0.025, pad=0.02)
    fig.tight_layout()
    try:
        atomic_write(path, lambda fh: fig.savefig(fh, format="png", dpi=120))
    finally:
        plt.close(fig)
    return True


# --------------------------------------------------------------------------- result store

STUDY_TOOL = "posenc-np study extrapolation"
_OUTPUTS = ("results.json", "results.md", "results.png")


def _identity(cfg_dict: dict) -> dict:
    """The part of a config that determines the results (``jobs`` only schedules them)."""
    return {k: v for k, v in cfg_dict.items() if k != "jobs"}


class ResultStore:
    """The finished cells of one study in ``<out>/cells/<cell_id>.json``, one file per cell.

    Each file is written atomically (:func:`posenc_np._files.atomic_write`) as soon as its cell
    finishes, so a study killed at any moment keeps every finished cell, and a rerun with the
    same ``out`` and configuration skips them. ``<out>/study.json`` names the configuration the
    store belongs to; a directory holding another study's configuration, or output files this
    tool did not write, is refused instead of mixed or clobbered. Cells recorded with
    ``"status": "error"`` are run again on a rerun.
    """

    def __init__(self, out, cfg_dict: dict):
        self.out = os.fspath(out)
        self.cells_dir = os.path.join(self.out, "cells")
        self.cfg_dict = cfg_dict
        self.manifest = os.path.join(self.out, "study.json")

    def prepare(self) -> None:
        """Create the directories and prove every output can be written, before any cell runs."""
        try:
            os.makedirs(self.cells_dir, exist_ok=True)
        except OSError as exc:
            raise ValueError(f"cannot create the study output directory {self.cells_dir!r}: {exc}") from exc
        for name in ("study.json", *_OUTPUTS):
            check_target(os.path.join(self.out, name), "study output")
            sweep_stale_temps(os.path.join(self.out, name))
        check_target(os.path.join(self.cells_dir, "probe.json"), "study cell directory")
        if os.path.exists(self.manifest):
            theirs = self._read_json(self.manifest)
            if not isinstance(theirs, dict) or theirs.get("tool") != STUDY_TOOL:
                raise ValueError(f"{self.manifest} was not written by {STUDY_TOOL}; refusing to use {self.out!r}")
            if _identity(theirs.get("config") or {}) != _identity(self.cfg_dict):
                keys = sorted(k for k in set(theirs.get("config") or {}) | set(self.cfg_dict)
                              if k != "jobs" and (theirs.get("config") or {}).get(k) != self.cfg_dict.get(k))
                raise ValueError(f"{self.out!r} holds a study with another configuration (differs in {keys}); "
                                 "use another --out or remove it")
        else:
            results = os.path.join(self.out, "results.json")
            if os.path.exists(results):
                doc = self._read_json(results)
                if not (isinstance(doc, dict) and isinstance(doc.get("meta"), dict)
                        and doc["meta"].get("tool") == STUDY_TOOL):
                    raise ValueError(f"{results} was not written by {STUDY_TOOL}; refusing to overwrite it")
            self._write_json(self.manifest, {"tool": STUDY_TOOL, "config": self.cfg_dict})

    @staticmethod
    def _read_json(path):
        try:
            with open(path, encoding="utf-8") as fh:
                return json.load(fh)
        except (OSError, UnicodeDecodeError, ValueError):
            return None

    @staticmethod
    def _write_json(path, obj) -> None:
        text = json.dumps(obj, indent=1, sort_keys=True, allow_nan=False) + "\n"
        atomic_write(path, lambda fh: fh.write(text), mode="w")

    def path(self, cell: dict) -> str:
        return os.path.join(self.cells_dir, f"{cell_id(cell)}.json")

    def load(self, cell: dict) -> dict | None:
        """The stored result of ``cell`` if it finished with this configuration, else None.

        A file that does not parse or belongs to another cell or configuration counts as not
        finished (it is overwritten when the cell runs again)."""
        doc = self._read_json(self.path(cell))
        if not (isinstance(doc, dict) and doc.get("cell") == cell and isinstance(doc.get("records"), list)
                and _identity(doc.get("config") or {}) == _identity(self.cfg_dict)):
            return None
        return doc

    def save(self, result: dict) -> None:
        self._write_json(self.path(result["cell"]), {**result, "config": self.cfg_dict})


def _json_safe(obj):
    """NaN/inf (e.g. the loss of a diverged cell) as None, so result files stay strict JSON."""
    if isinstance(obj, float) and not np.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_json_safe(v) for v in obj]
    return obj


# --------------------------------------------------------------------------- driver

def _execute(cfg_dict: dict, cells: list[dict], jobs: int, on_result) -> None:
    """Run ``cells`` (serially, or on ``jobs`` worker processes) and hand each result to
    ``on_result`` as it arrives. A worker that dies is recorded as an error of its cell."""
    if jobs <= 1:
        for cell in cells:
            on_result(run_cell(cfg_dict, cell))
        return
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed

    with ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("spawn")) as pool:
        futures = {pool.submit(run_cell, cfg_dict, cell): cell for cell in cells}
        for fut in as_completed(futures):
            try:
                result = fut.result()
            except Exception as exc:  # noqa: BLE001 - e.g. BrokenProcessPool: the worker died
                result = {"cell": futures[fut], "status": "error", "records": [], "seconds": 0.0,
                          "error": f"{type(exc).__name__}: {exc} (the worker process failed)"}
            on_result(result)


def run_extrapolation(out, cfg: StudyConfig | None = None, *, progress: bool = True, log=None) -> dict:
    """Run the study described by ``cfg`` into ``out`` and return the results dict.

    Every cell's result is stored as it finishes (:class:`ResultStore`), so a rerun with the
    same ``out`` and configuration resumes: finished cells are skipped, failed ones retried.
    A failing cell is recorded with its error (``results["failed"]``) and does not stop the
    others. The configuration and the writability of every output are checked before the first
    cell runs. At the end ``results.json``, ``results.md`` and ``results.png`` (when matplotlib
    is installed) are written atomically from every finished cell.
    """
    cfg = (cfg or StudyConfig()).validate()
    cfg_dict = json.loads(json.dumps(asdict(cfg)))  # tuples become lists, as stored
    store = ResultStore(out, cfg_dict)
    store.prepare()
    cells = grid(cfg)
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    say = log if progress else (lambda msg: None)
    results = {cell_id(c): store.load(c) for c in cells}
    todo = [c for c in cells if results[cell_id(c)] is None or results[cell_id(c)]["status"] != "ok"]
    say(f"study: {len(cells)} cells ({len({c['label'] for c in cells})} encodings x {len(cfg.tasks)} tasks), "
        f"L={cfg.train_len}, {cfg.steps} steps each, {cfg.jobs} worker(s)"
        + (f"; {len(cells) - len(todo)} already done in {store.out}, {len(todo)} to run" if len(todo) < len(cells)
           else ""))
    t0 = time.perf_counter()
    bar = Progress(len(todo), desc="study", enabled=progress, use_tqdm=False, min_interval=0.0)

    def on_result(result):
        result = _json_safe(result)
        store.save(result)
        results[cell_id(result["cell"])] = result
        cell = result["cell"]
        if result["status"] == "ok":
            recs = result["records"]
            accs = " ".join(f"{r['eval_factor']}L={_fmt(r['token_accuracy'])}" for r in recs)
            loss = recs[0]["final_train_loss"]
            bar.update(1, run=f"{cell['label']}/{cell['task']}", loss=None if loss is None else round(loss, 4),
                       acc=accs, secs=round(recs[0]["train_seconds"], 1))
        else:
            bar.update(1, run=f"{cell['label']}/{cell['task']}", status="FAILED",
                       error=result["error"].splitlines()[0][:120])

    _execute(cfg_dict, todo, cfg.jobs, on_result)
    bar.close()
    elapsed = time.perf_counter() - t0
    done = [results[cell_id(c)] for c in cells]
    failed = [{"cell": cell_id(r["cell"]), "error": r["error"]} for r in done if r["status"] != "ok"]
    records = [rec for r in done if r["status"] == "ok" for rec in r["records"]]
    out_dir = store.out
    summary = {"meta": {"tool": STUDY_TOOL, "version": __version__, "config": cfg_dict,
                        "elapsed_seconds": elapsed, "cell_seconds": sum(r["seconds"] for r in done),
                        "python": platform.python_version(), "numpy": np.__version__,
                        "machine": platform.machine(), "cpu_count": os.cpu_count(),
                        "tasks": {t: TASKS[t].__doc__ or t for t in cfg.tasks}},
               "records": records, "failed": failed}
    ResultStore._write_json(os.path.join(out_dir, "results.json"), summary)
    write_markdown(summary, os.path.join(out_dir, "results.md"))
    plotted = write_plot(summary, os.path.join(out_dir, "results.png"))
    say(f"study: done in {elapsed:.1f} s; wrote results.json, results.md"
        + (", results.png" if plotted else " (matplotlib not installed: no plot)") + f" to {out_dir}"
        + (f"; {len(failed)} cell(s) FAILED: {', '.join(f['cell'] for f in failed)}" if failed else ""))
    return summary


def run_extrapolation_cli(args) -> int:
    """Entry point of ``posenc-np study extrapolation`` (``args.out``, ``quick``, ``seed``, ``no_progress``)."""
    seed = check_int(args.seed, "--seed", minimum=0)
    cfg = quick_config(seed) if args.quick else StudyConfig(seed=seed)
    results = run_extrapolation(args.out, cfg, progress=not args.no_progress)
    return 1 if results["failed"] else 0
