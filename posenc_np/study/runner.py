"""The driver: run a study's cells through an executor into the result store, then write the report."""

from __future__ import annotations

import datetime
import functools
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from typing import TYPE_CHECKING

import numpy as np

from .._version import __version__
from .cells import environment, run_cell
from .config import NGRAM, PARTS, StudyConfig, cell_id, grid
from .corpus import corpus_digests, load_corpus, load_corpus_file
from .executors import make_executor
from .report import SCHEMA, load_results, publish, write_report
from .store import STUDY_TOOL, ResultStore, json_safe, write_json
from .tasks import TASKS, TRAINING_OPTIONS

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable

    from .executors import Dask, InProcess, ProcessPool

__all__ = ["cell_cost", "report_cli", "run_extrapolation", "run_extrapolation_cli", "warm_cache"]


def cell_cost(cfg: StudyConfig, cell: dict) -> float:
    """A rough relative cost of a cell (token-positions processed, attention-weighted), for the ETA.

    Examples
    --------
    >>> from posenc_np.study.config import grid, quick_config
    >>> from posenc_np.study.runner import cell_cost
    >>> cfg = quick_config()
    >>> ngram = next(c for c in grid(cfg) if c["encoding"] == "ngram")
    >>> cell_cost(cfg, ngram)       # 2 % of the LM's training: 0.02 * lm_steps * batch * T * (1 + T / 64)
    16.0
    >>> 0.02 * cfg.lm_steps * cfg.lm_batch_size * cfg.lm_train_len * (1 + cfg.lm_train_len / 64)
    16.0
    """
    def tokens(batch, T, passes=1.0):
        return batch * T * (1 + T / 64) * passes

    def lm_eval():
        N = cfg.lm_eval_tokens
        return sum(tokens(N / (T := cfg.lm_train_len * f), T, 1 / 3) + tokens(2 * N / T - 1, T, 1 / 3)
                   for f in cfg.lm_eval_factors)

    if cell["part"] == "tasks":
        rounds = (1 + cfg.rounds(cell["training"])) / 2  # many cells fit before the last round
        return rounds * cfg.steps * tokens(cfg.batch_size, 2 * cfg.train_len + 1) + sum(
            tokens(cfg.eval_sequences, 2 * cfg.train_len * f + 1, 1 / 3) for f in cfg.eval_factors)
    train = cfg.lm_steps * tokens(cfg.lm_batch_size, cfg.lm_train_len)
    if cell.get("encoding") == NGRAM:
        return 0.02 * train
    if cell["part"] == "lm":
        return train + lm_eval()
    ft = cfg.finetune_steps * tokens(cfg.finetune_batch_size, cfg.scaling_factor * cfg.lm_train_len)
    return train + len(cfg.scaling_methods) * (ft + 2 * lm_eval())


class _Progress:
    """One line per finished cell with the count, elapsed time and an ETA weighted by
    :func:`cell_cost` (a tqdm bar instead when stderr is a terminal and tqdm is installed)."""

    def __init__(self, total_cost: float, n_cells: int, enabled: bool, log):
        self.total_cost, self.n_cells, self.enabled, self.log = total_cost, n_cells, enabled, log
        self.done_cost, self.done, self.t0 = 0.0, 0, time.perf_counter()
        self.bar = None
        if enabled and sys.stderr.isatty():
            try:
                from tqdm.auto import tqdm
            except ImportError:
                tqdm = None
            if tqdm is not None:
                self.bar = tqdm(total=max(total_cost, 1.0), desc="study", unit="", file=sys.stderr, leave=False,
                                bar_format="{desc} {percentage:3.0f}%|{bar}| {postfix} [{elapsed}<{remaining}]")

    def update(self, cost: float, text: str) -> None:
        if not self.enabled:
            return
        self.done += 1
        self.done_cost += cost
        if self.bar is not None:
            self.bar.set_postfix_str(f"{self.done}/{self.n_cells} cells, {text}", refresh=False)
            self.bar.update(cost)
            return
        elapsed = time.perf_counter() - self.t0
        left = self.total_cost - self.done_cost
        eta = elapsed * left / self.done_cost if self.done_cost > 0 else float("nan")
        self.log(f"study: {self.done}/{self.n_cells} cells, {_hms(elapsed)} elapsed, ETA {_hms(eta)}: {text}")

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _hms(seconds: float) -> str:
    if not np.isfinite(seconds):
        return "?"
    seconds = round(seconds)
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


def _num(value) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def _describe(result: dict) -> str:
    """One line about a finished cell for the progress log."""
    cell, recs = result["cell"], result["records"]
    name = cell_id(cell)
    if result["status"] != "ok":
        return f"{name} FAILED ({result['error'].splitlines()[0][:120]})"
    if cell["part"] == "tasks":
        shown = " ".join(f"{r['eval_factor']}L={_num(r['token_accuracy'])}" for r in recs)
        return f"{name} acc {shown} ({result['seconds']:.1f} s)"
    shown = " ".join(f"{r['eval_factor']}L={_num(r['ppl'])}" for r in recs
                     if r["eval_mode"] == "nonoverlapping" and r.get("method", "none") == "none"
                     and r.get("phase", "zero_shot") == "zero_shot")
    return f"{name} ppl {shown} ({result['seconds']:.1f} s)"


def warm_cache(cfg_dict: dict, log: Callable[[str], None] | None = None, timeout: float = 1800.0) -> float:
    """Compile the study's Numba kernels into the on-disk cache in a separate process
    (:func:`posenc_np.study.cells.warm_kernels`) before any cell runs, so that every cell, in
    this process or a worker, loads the same cached machine code; returns the seconds it took.
    A failure is reported and ignored (the cells then compile for themselves).

    Examples
    --------
    >>> from dataclasses import asdict
    >>> from posenc_np.study.config import quick_config
    >>> from posenc_np.study.runner import warm_cache
    >>> seconds = warm_cache(asdict(quick_config()), log=print, timeout=0.001)   # a failure is reported, not raised
    study: warming the Numba cache failed (Command ... timed out after 0.001 seconds); the cells compile their kernels
    >>> seconds < 60
    True
    """
    t0 = time.perf_counter()
    code = ("import json, sys; from posenc_np.study.cells import warm_kernels; "
            "warm_kernels(json.loads(sys.stdin.read()))")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    try:
        done = subprocess.run([sys.executable, "-c", code], input=json.dumps(cfg_dict), text=True, env=env,
                              capture_output=True, timeout=timeout, check=False)
        if done.returncode != 0 and log:
            log(f"study: warming the Numba cache failed (the cells compile their kernels): {done.stderr[-300:]}")
    except (OSError, subprocess.TimeoutExpired) as exc:
        if log:
            log(f"study: warming the Numba cache failed ({exc}); the cells compile their kernels")
    return time.perf_counter() - t0


def run_extrapolation(out: str | os.PathLike, cfg: StudyConfig | None = None, *, progress: bool = True,
                      log: Callable[[str], None] | None = None,
                      executor: InProcess | ProcessPool | Dask | None = None,
                      corpus_file: str | os.PathLike | None = None, warm: bool = True) -> dict:
    """Run the study described by ``cfg`` into ``out`` and return the results dict.

    Every cell's result is stored as it finishes (:class:`~posenc_np.study.store.ResultStore`),
    so a rerun with the same ``out`` and configuration resumes: finished cells are skipped,
    failed ones retried. A failing cell is recorded with its error (``results["failed"]``) and
    does not stop the others. The configuration, the corpus and the writability of every output
    are checked before the first cell runs. At the end ``results.json``, ``results.md`` and the
    figures (when matplotlib is installed) are written atomically from every finished cell.

    ``executor``: one of :mod:`posenc_np.study.executors` (default: a process pool of
    ``cfg.jobs`` workers, in-process for ``jobs=1``). ``corpus_file``: the LM corpus for a
    configuration with ``corpus="file"`` (read here, shipped to the workers). The corpus and the
    encodings added with :func:`posenc_np.registry.register` travel to every worker once.
    ``warm``: compile the Numba kernels into the cache first (:func:`warm_cache`).

    Examples
    --------
    >>> import tempfile
    >>> from posenc_np.study.config import StudyConfig
    >>> from posenc_np.study.runner import run_extrapolation
    >>> with tempfile.TemporaryDirectory() as out:            # the configuration is checked before anything runs
    ...     run_extrapolation(out, StudyConfig(tasks=["sort"]))
    Traceback (most recent call last):
        ...
    ValueError: tasks has unknown entries ['sort']; allowed: ['copy', 'lag', 'reverse']
    >>> with tempfile.TemporaryDirectory() as out:
    ...     run_extrapolation(out, StudyConfig(corpus="file"))
    Traceback (most recent call last):
        ...
    ValueError: corpus='file' needs the corpus file (--corpus FILE)
    """
    from ..registry import registered

    cfg = cfg or StudyConfig()
    if corpus_file is not None:
        cfg.corpus = "file"
    cfg = cfg.validate()
    cfg_dict = json.loads(json.dumps(asdict(cfg)))  # tuples become lists, as stored
    shared = {"corpus": None, "encodings": registered()}
    corpus = None
    if {"lm", "rope_scaling"} & set(cfg.parts):
        if cfg.corpus == "file" and corpus_file is None:
            raise ValueError("corpus='file' needs the corpus file (--corpus FILE)")
        data = (load_corpus_file(corpus_file, min_held_out=cfg.lm_eval_tokens + 1) if cfg.corpus == "file"
                else load_corpus())
        if len(data["held_out"]) <= cfg.lm_eval_tokens:
            raise ValueError(f"the corpus holds {len(data['held_out'])} held-out bytes; lm_eval_tokens needs "
                             f"{cfg.lm_eval_tokens + 1}")
        corpus = data["identity"]
        shared["corpus"] = {"train": data["train"].tobytes(), "held_out": data["held_out"].tobytes(),
                            "identity": corpus}
    store = ResultStore(out, cfg_dict)
    store.prepare()
    cells = grid(cfg, corpus_digests(corpus) if corpus else None)
    executor = executor or make_executor(jobs=cfg.jobs)
    log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
    say = log if progress else (lambda msg: None)
    results = {cell_id(c): store.load(c) for c in cells}
    todo = [c for c in cells if results[cell_id(c)] is None or results[cell_id(c)]["status"] != "ok"]
    counts = ", ".join(f"{sum(c['part'] == p for c in cells)} {p}" for p in PARTS if p in cfg.parts)
    say(f"study: {len(cells)} cells ({counts}; {cfg.seeds} seed(s) each) on {executor.name}"
        + (f"; {len(cells) - len(todo)} already done in {store.out}, {len(todo)} to run" if len(todo) < len(cells)
           else ""))
    costs = {cell_id(c): cell_cost(cfg, c) for c in todo}
    bar = _Progress(sum(costs.values()), len(todo), progress, log)
    t0 = time.perf_counter()

    def on_result(result):
        result = json_safe(result)
        store.save(result)
        results[cell_id(result["cell"])] = result
        bar.update(costs[cell_id(result["cell"])], _describe(result))

    def on_failure(cell, message):
        on_result({"cell": cell, "status": "error", "records": [], "seconds": 0.0, "error": message, "worker": None})

    order = sorted(todo, key=lambda c: -costs[cell_id(c)])  # longest first: no long cell left alone at the end
    warm_seconds = None
    try:
        if order:  # nothing to run: no worker or cluster is started
            if warm:
                warm_seconds = warm_cache(cfg_dict, say)
                say(f"study: Numba kernels compiled into the cache in {warm_seconds:.0f} s")
            executor.run(functools.partial(run_cell, cfg_dict), order, on_result, on_failure, shared)
    finally:
        bar.close()
    elapsed = time.perf_counter() - t0
    done = [results[cell_id(c)] for c in cells]
    failed = [{"cell": cell_id(r["cell"]), "error": r["error"]} for r in done if r["status"] != "ok"]
    workers = sorted({f"{w.get('host')} (Python {w.get('python')}, NumPy {w.get('numpy')}, Numba {w.get('numba')}, "
                      f"{w.get('cpu')})" for r in done if isinstance(w := r.get("worker"), dict)})
    env = {k: v for k, v in environment().items() if k not in ("host", "pid")}
    summary = {"meta": {"tool": STUDY_TOOL, "schema": SCHEMA, "version": __version__, "config": cfg_dict,
                        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
                        "cells": len(cells), "elapsed_seconds": elapsed, "warm_seconds": warm_seconds,
                        "cell_seconds": sum(r["seconds"] for r in done), "executor": executor.name,
                        "workers": workers, "environment": env, "corpus": corpus,
                        "tasks": {t: TASKS[t].__doc__ or t for t in cfg.tasks},
                        "training": {o: TRAINING_OPTIONS[o].description for o in cfg.training}},
               "records": [rec for r in done if r["status"] == "ok" for rec in r["records"]], "failed": failed}
    write_json(os.path.join(store.out, "results.json"), summary)
    written = write_report(summary, store.out)
    say(f"study: done in {_hms(elapsed)}; wrote results.json, {', '.join(written)} to {store.out}"
        + ("" if any(w.endswith(".png") for w in written) else " (matplotlib not installed: no figures)")
        + (f"; {len(failed)} cell(s) FAILED: {', '.join(f['cell'] for f in failed)}" if failed else ""))
    return summary


def run_extrapolation_cli(args: argparse.Namespace) -> int:
    """``posenc-np study extrapolation``: run (or resume) a study, optionally publish it.

    Examples
    --------
    >>> import argparse, tempfile
    >>> from posenc_np.study.cli import add_parser
    >>> from posenc_np.study.runner import run_extrapolation_cli
    >>> parser = argparse.ArgumentParser(prog="posenc-np")
    >>> add_parser(parser.add_subparsers(dest="command"))
    >>> with tempfile.TemporaryDirectory() as out:
    ...     args = parser.parse_args(["study", "extrapolation", "--out", out, "--quick", "--tasks", "sort"])
    ...     run_extrapolation_cli(args)
    Traceback (most recent call last):
        ...
    ValueError: tasks has unknown entries ['sort']; allowed: ['copy', 'lag', 'reverse']
    """
    from .cli import config_from_args

    cfg = config_from_args(args)
    executor = make_executor(jobs=cfg.validate().jobs, scheduler=args.scheduler, dask_workers=args.dask_workers)
    results = run_extrapolation(args.out, cfg, progress=not args.no_progress, executor=executor,
                                corpus_file=args.corpus)
    if args.publish is not None:
        _publish(args.out, args.publish, not args.no_progress)
    return 1 if results["failed"] else 0


def _publish(out, docs, verbose: bool) -> None:
    written = publish(out, docs)
    if verbose:
        print(f"study: published {', '.join(written)} under {docs}", file=sys.stderr)


def report_cli(args: argparse.Namespace) -> int:
    """``posenc-np study report DIR``: regenerate ``results.md`` and the figures from ``results.json``.

    Examples
    --------
    >>> import argparse, os, tempfile
    >>> from dataclasses import asdict
    >>> from posenc_np.study.config import StudyConfig
    >>> from posenc_np.study.report import SCHEMA
    >>> from posenc_np.study.runner import report_cli
    >>> from posenc_np.study.store import STUDY_TOOL, write_json
    >>> doc = {"meta": {"tool": STUDY_TOOL, "schema": SCHEMA, "version": "0", "config": asdict(StudyConfig(seeds=4)),
    ...                 "elapsed_seconds": 0.0, "cell_seconds": 0.0}, "records": [], "failed": []}
    >>> with tempfile.TemporaryDirectory() as out:
    ...     write_json(os.path.join(out, "results.json"), doc)
    ...     status = report_cli(argparse.Namespace(dir=out, publish=None))     # says what it wrote on stderr
    ...     files = sorted(os.listdir(out))
    >>> status, files                   # 0: no cell failed
    (0, ['results.csv', 'results.json', 'results.md'])
    """
    doc = load_results(args.dir)
    written = write_report(doc, args.dir)
    print(f"study: wrote {', '.join(written)} to {args.dir}", file=sys.stderr)
    if args.publish is not None:
        _publish(args.dir, args.publish, True)
    return 1 if doc.get("failed") else 0
