r"""Length-extrapolation study: small transformers trained per position encoding at length
:math:`L` and measured past it, with several seeds per cell and 95 % intervals.

Run it with ``posenc-np study extrapolation --out DIR [--quick | --full] [--seeds K] [--parts ...]
[--jobs N | --dask-workers N | --scheduler ADDRESS] [--publish DOCS_DIR]``; regenerate the
report with ``posenc-np study report DIR [--publish DOCS_DIR]``. ``docs/study.md`` describes
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
(t intervals, separations), :mod:`.report` / :mod:`.claims` / :mod:`.figures` (everything the
documentation shows, generated from ``results.json``), :mod:`.runner` (the driver).

Encodings come from :data:`posenc_np.model.REGISTRY` (a newly registered encoding joins the
default grid); training options from :data:`.tasks.TRAINING_OPTIONS`.
"""

from __future__ import annotations

from .cells import run_cell
from .config import (
                    PARTS,
                    SCALING_METHODS,
                    StudyConfig,
                    cell_id,
                    grid,
                    full_config,
                    quick_config,
                    scaling_dict,
)
from .corpus import LMWindows, eval_windows, load_corpus
from .executors import Dask, InProcess, ProcessPool, make_executor
from .report import publish, sections, write_report
from .runner import cell_cost, report_cli, run_extrapolation, run_extrapolation_cli
from .stats import Interval, t_interval, tiers
from .store import ResultStore
from .tasks import (
                    BOS,
                    IGNORE,
                    SEP,
                    TASKS,
                    TRAINING_OPTIONS,
                    CopyTask,
                    LagTask,
                    ReverseTask,
                    TrainingOption,
                    VaryingLength,
)

__all__ = ["BOS", "IGNORE", "PARTS", "SCALING_METHODS", "SEP", "TASKS", "TRAINING_OPTIONS", "CopyTask", "Dask",
           "InProcess", "Interval", "LMWindows", "LagTask", "ProcessPool", "ResultStore", "ReverseTask", "StudyConfig",
           "TrainingOption", "VaryingLength", "cell_cost", "cell_id", "eval_windows", "grid", "load_corpus",
           "full_config", "make_executor", "publish", "quick_config", "report_cli", "run_cell", "run_extrapolation",
           "run_extrapolation_cli", "scaling_dict", "sections", "t_interval", "tiers", "write_report"]
