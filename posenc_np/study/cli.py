"""The ``posenc-np study`` subcommands: their options and how they become a :class:`StudyConfig`.

``posenc-np study extrapolation --out DIR [--quick | --full | --lm-large] [--seeds K] [--seed N]
[--parts P,...] [--encodings E,...] [--tasks T,...] [--training O,...] [--steps N] [--fit-rounds N]
[--randomized-fit-rounds N] [--randomized-encodings E,...]
[--lm-steps N] [--d-model N] [--n-heads N] [--n-layers N] [--d-ff N] [--plugin MODULE] [--corpus FILE]
[--jobs N | --dask-workers N | --scheduler ADDRESS] [--publish DOCS_DIR] [--no-progress]``

``posenc-np study report DIR [--publish DOCS_DIR]``
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from ..cli import positive_int

if TYPE_CHECKING:
    from .config import StudyConfig

__all__ = ["add_parser", "config_from_args"]

#: Integer options that set one :class:`~posenc_np.study.config.StudyConfig` field each.
INT_OPTIONS = {"seeds": "seeds per cell", "steps": "task training steps per round",
               "fit_rounds": "task training rounds at most (training stops once the model fits L)",
               "randomized_fit_rounds": "the same with randomized positions",
               "lm_steps": "LM training steps", "d_model": "model width", "n_heads": "attention heads",
               "n_layers": "layers", "d_ff": "MLP width", "jobs": "local worker processes (1 runs in this process)"}
#: Comma-separated list options, one field each.
LIST_OPTIONS = {"parts": "subset of tasks,lm,rope_scaling", "encodings": "encodings (default: every registered one)",
                "tasks": "tasks (copy, reverse, lag)", "training": "training options (fixed, varying, randomized)",
                "randomized_encodings": "encodings trained with randomized positions (default learned,rope)"}


def _names(text: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"must name at least one entry, got {text!r}")
    return names


def _study(args) -> int:
    from . import run_extrapolation_cli  # the study's modules load only when the command runs

    return run_extrapolation_cli(args)


def _study_report(args) -> int:
    from . import report_cli

    return report_cli(args)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add the ``study`` command and its subcommands to the ``posenc-np`` subparsers ``sub``.

    Examples
    --------
    >>> import argparse
    >>> from posenc_np.study.cli import add_parser
    >>> parser = argparse.ArgumentParser(prog="posenc-np")
    >>> add_parser(parser.add_subparsers(dest="command"))
    >>> args = parser.parse_args(["study", "extrapolation", "--out", "runs/q", "--quick", "--seeds", "3",
    ...                           "--tasks", "copy"])
    >>> args.study_command, args.out, args.quick, args.seeds, args.tasks
    ('extrapolation', 'runs/q', True, 3, ['copy'])
    >>> args = parser.parse_args(["study", "report", "runs/q"])
    >>> args.study_command, args.dir, args.publish
    ('report', 'runs/q', None)
    """
    study = sub.add_parser("study", help="experiments with trained models",
                           description="Train small NumPy transformers and compare position encodings.")
    ssub = study.add_subparsers(dest="study_command", required=True)
    ext = ssub.add_parser("extrapolation", help="run (or resume) the length-extrapolation study",
                          description="Train small models per encoding at length L (synthetic tasks, a byte-level "
                                      "LM, RoPE scaling), several seeds per cell, and measure them past L. Each cell "
                                      "is stored as it finishes; rerunning with the same --out resumes.")
    ext.add_argument("--out", required=True, help="output directory (results.json, results.md, results.csv, "
                                                  "figures, cells/)")
    size = ext.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="reduced smoke run (about a minute; what the tests run)")
    size.add_argument("--full", action="store_true",
                      help="larger study: fixed training with every fusion mode, the reverse task, longer training")
    size.add_argument("--lm-large", action="store_true",
                      help="the LM preset large enough to beat the n-gram baseline (lm and rope_scaling parts; meant "
                           "for --scheduler)")
    ext.add_argument("--seed", type=int, default=0, help="base random seed")
    for name, text in INT_OPTIONS.items():
        if name != "jobs":
            ext.add_argument(f"--{name.replace('_', '-')}", type=positive_int, metavar="N", help=text)
    for name, text in LIST_OPTIONS.items():
        ext.add_argument(f"--{name.replace('_', '-')}", type=_names, metavar="A,B", help=f"comma-separated {text}")
    ext.add_argument("--plugin", metavar="MODULE", action="append",
                     help="import MODULE first (a module that calls posenc_np.registry.register); repeatable")
    ext.add_argument("--corpus", metavar="FILE",
                     help="LM corpus: a text file (its last 10 %% held out) instead of the standard library's source")
    where = ext.add_mutually_exclusive_group()
    where.add_argument("--jobs", type=positive_int, metavar="N", help=INT_OPTIONS["jobs"] + " (default 2)")
    where.add_argument("--dask-workers", type=positive_int, metavar="N",
                       help="run on a local Dask cluster of N single-threaded workers (extra 'dask')")
    where.add_argument("--scheduler", metavar="ADDRESS",
                       help="run on the Dask cluster at ADDRESS, e.g. tcp://host:8786 (workers: --nthreads 1)")
    ext.add_argument("--publish", metavar="DOCS_DIR",
                     help="afterwards copy the results into DOCS_DIR/study_results and fill DOCS_DIR/study.md")
    ext.add_argument("--no-progress", action="store_true", help="do not show progress")
    ext.set_defaults(func=_study)
    rep = ssub.add_parser("report", help="regenerate a study's tables, CSV and figures from its results.json",
                          description="Write results.md, results.csv and the figures of a finished study from "
                                      "DIR/results.json.")
    rep.add_argument("dir", metavar="DIR", help="the study's output directory")
    rep.add_argument("--publish", metavar="DOCS_DIR",
                     help="also copy the results into DOCS_DIR/study_results and fill DOCS_DIR/study.md")
    rep.set_defaults(func=_study_report)


def config_from_args(args: argparse.Namespace) -> StudyConfig:
    """The :class:`StudyConfig` the options describe: the preset (``--quick``, ``--full``,
    ``--lm-large``, else the default), then every option given, then validated.

    Examples
    --------
    >>> import argparse
    >>> from posenc_np.study.cli import add_parser, config_from_args
    >>> parser = argparse.ArgumentParser(prog="posenc-np")
    >>> add_parser(parser.add_subparsers(dest="command"))
    >>> cfg = config_from_args(parser.parse_args(["study", "extrapolation", "--out", "q", "--quick", "--seeds", "3"]))
    >>> cfg.seeds, cfg.train_len, cfg.d_model, cfg.jobs          # the quick preset, then --seeds
    (3, 4, 16, 1)
    >>> config_from_args(parser.parse_args(["study", "extrapolation", "--out", "q", "--training", "fixed,sorted"]))
    Traceback (most recent call last):
        ...
    ValueError: training has unknown entries ['sorted']; allowed: ['fixed', 'randomized', 'varying']
    """
    import importlib

    from .config import PRESETS

    for module in getattr(args, "plugin", None) or []:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise ValueError(f"--plugin {module!r} cannot be imported: {exc}") from exc
    preset = "quick" if args.quick else "full" if args.full else "lm_large" if args.lm_large else "default"
    seed = args.seed
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"--seed must be an integer >= 0, got {seed!r}")
    cfg = PRESETS[preset](seed=seed)
    for name in INT_OPTIONS:
        value = getattr(args, name, None)
        if value is not None:
            setattr(cfg, name, value)
    for name in LIST_OPTIONS:
        value = getattr(args, name, None)
        if value is not None:
            setattr(cfg, name, list(value) if name in ("encodings", "tasks", "randomized_encodings") else tuple(value))
    if args.corpus is not None:
        cfg.corpus = "file"
    return cfg.validate()
