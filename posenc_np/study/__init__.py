r"""Length-extrapolation study: small transformers trained per position encoding at length
:math:`L` and measured past it, with several seeds per cell and 95 % intervals.

Run it with ``posenc-np study extrapolation --out DIR`` (options in :mod:`.cli`); regenerate
the report with ``posenc-np study report DIR [--publish DOCS_DIR]``. ``docs/study.md`` describes
the design and discusses the committed results.

Parts (:data:`~posenc_np.study.config.PARTS`):

``tasks``
    copy, reverse and lag (:mod:`.tasks`) at size :math:`L`, evaluated at multiples of
    :math:`L`, for every training option (``fixed``; ``varying``, Kazemnejad et al. 2023).
``lm``
    a byte-level language model on the Python standard library's source (:mod:`.corpus`),
    perplexity versus evaluation length, non-overlapping and sliding (Press et al. 2022).
``rope_scaling``
    the RoPE LM under no scaling, position interpolation, NTK, dynamic NTK and YaRN, zero-shot
    and after a short fine-tune at the longer length.

Modules: :mod:`.config` (what a run is, its cells and seeds), :mod:`.tasks`, :mod:`.corpus`,
:mod:`.cells` (one cell: train and evaluate), :mod:`.executors` (in-process, process pool,
Dask), :mod:`.store` (each cell written atomically as it finishes; resume), :mod:`.stats`
(intervals, tests, Holm, detectable differences), :mod:`.ngram` (the LM's count-model
baseline), :mod:`.report` / :mod:`.claims` / :mod:`.figures` (everything the documentation
shows, generated from ``results.json``, and ``results.csv``), :mod:`.runner` (the driver),
:mod:`.cli` (the command's options).

Encodings come from :data:`posenc_np.model.REGISTRY`; one added with
:func:`posenc_np.registry.register` joins the default grid and is shipped to pool and Dask
workers. Training options come from :data:`.tasks.TRAINING_OPTIONS`.

Names are imported lazily (the command line builds its parser from :mod:`.cli` without
importing the model).
"""

from __future__ import annotations

import importlib

#: Public name -> the submodule that defines it.
_EXPORTS = {
    "PARTS": "config", "PRESETS": "config", "SCALING_METHODS": "config", "StudyConfig": "config", "cell_id": "config",
    "grid": "config", "full_config": "config", "lm_large_config": "config", "quick_config": "config",
    "scaling_dict": "config", "planned_seeds": "config",
    "LMWindows": "corpus", "eval_windows": "corpus", "load_corpus": "corpus", "load_corpus_file": "corpus",
    "Dask": "executors", "InProcess": "executors", "ProcessPool": "executors", "make_executor": "executors",
    "publish": "report", "sections": "report", "write_report": "report", "csv_text": "report", "write_csv": "report",
    "cell_cost": "runner", "report_cli": "runner", "run_extrapolation": "runner", "run_extrapolation_cli": "runner",
    "Interval": "stats", "t_interval": "stats", "welch": "stats", "paired": "stats", "holm": "stats",
    "ResultStore": "store", "run_cell": "cells", "KneserNey": "ngram",
    "BOS": "tasks", "IGNORE": "tasks", "SEP": "tasks", "TASKS": "tasks", "TRAINING_OPTIONS": "tasks",
    "CopyTask": "tasks", "LagTask": "tasks", "ReverseTask": "tasks", "TrainingOption": "tasks",
    "VaryingLength": "tasks",
}
_SUBMODULES = ("cells", "claims", "cli", "config", "corpus", "executors", "figures", "ngram", "report", "runner",
               "stats", "store", "tasks")

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(_EXPORTS) | set(_SUBMODULES))
