"""The result store: every finished cell in ``<out>/cells/<cell_id>.json``, written as it finishes."""

from __future__ import annotations

import json
import os

import numpy as np

from .._files import atomic_write, check_target, read_bounded, sweep_stale_temps
from .config import cell_id

__all__ = ["OUTPUTS", "STUDY_TOOL", "ResultStore", "json_safe", "read_json", "write_json"]

STUDY_TOOL = "posenc-np study extrapolation"
#: Files the study writes in its output directory (besides ``study.json`` and ``cells/``).
OUTPUTS = ("results.json", "results.md", "results.csv", "tasks.png", "lm.png", "rope_scaling.png", "position_loss.png",
           "attention.png", "curves.png")
_MAX_JSON_BYTES = 256 << 20  # a results or cell file larger than this is not one of ours


#: Config keys that do not change any cell's result: ``jobs`` only schedules; the others choose
#: which cells exist or are recorded in each cell itself (its encoding, task, training option,
#: fusion, seed index, embedding scale and position options). A study may grow along them
#: (another encoding, task or seed) and keeps the cells it has.
PER_CELL_KEYS = ("jobs", "parts", "encodings", "tasks", "training", "fusions", "seeds", "embed_scale",
                 "position_options")


def identity(cfg_dict: dict) -> dict:
    """The part of a config that every cell's result depends on (all but :data:`PER_CELL_KEYS`)."""
    return {k: v for k, v in cfg_dict.items() if k not in PER_CELL_KEYS}


def read_json(path: str | os.PathLike) -> object:
    """The JSON document at ``path``, or None when it is missing, not a regular file (a symbolic
    link, a FIFO, a device), larger than the limit, not UTF-8 or not strict JSON (read with
    :func:`posenc_np._files.read_bounded`, parsed by :func:`posenc_np.golden.safe_io.parse_json`).

    Examples
    --------
    >>> import os, tempfile
    >>> from posenc_np.study.store import read_json, write_json
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     write_json(os.path.join(tmp, "a.json"), {"b": [1, 2.5]})
    ...     with open(os.path.join(tmp, "bad.json"), "w") as fh:
    ...         _ = fh.write("{NaN")
    ...     docs = [read_json(os.path.join(tmp, name)) for name in ("a.json", "bad.json", "missing.json")]
    >>> docs                                  # not strict JSON, or missing: None
    [{'b': [1, 2.5]}, None, None]
    """
    from ..golden.safe_io import parse_json

    try:
        return parse_json(read_bounded(path, _MAX_JSON_BYTES, "study file", follow_links=False), os.fspath(path))
    except ValueError:
        return None


def write_json(path: str | os.PathLike, obj: object) -> None:
    """Write ``obj`` as strict JSON (no NaN) atomically.

    Examples
    --------
    >>> import os, tempfile
    >>> from posenc_np.study.store import write_json
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     write_json(os.path.join(tmp, "a.json"), {"loss": 0.5, "cell": "lm__ngram"})
    ...     with open(os.path.join(tmp, "a.json")) as fh:
    ...         text = fh.read()
    >>> text.splitlines()                     # sorted keys, one space of indent
    ['{', ' "cell": "lm__ngram",', ' "loss": 0.5', '}']
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     write_json(os.path.join(tmp, "b.json"), {"loss": float("nan")})    # strict JSON: no NaN
    Traceback (most recent call last):
        ...
    ValueError: Out of range float values are not JSON compliant...
    """
    text = json.dumps(obj, indent=1, sort_keys=True, allow_nan=False) + "\n"
    atomic_write(path, lambda fh: fh.write(text), mode="w")


def json_safe(obj: object) -> object:
    """NaN/inf (e.g. the loss of a diverged cell) as None, so result files stay strict JSON.

    Examples
    --------
    >>> from posenc_np.study.store import json_safe
    >>> json_safe({"loss": float("nan"), "ppl": [3.5, float("inf")], "status": "ok"})
    {'loss': None, 'ppl': [3.5, None], 'status': 'ok'}
    """
    if isinstance(obj, float) and not np.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def written_by_us(doc) -> bool:
    """True when ``doc`` (a parsed ``results.json``) was written by this tool."""
    return isinstance(doc, dict) and isinstance(doc.get("meta"), dict) and doc["meta"].get("tool") == STUDY_TOOL


class ResultStore:
    """The finished cells of one study in ``<out>/cells/<cell_id>.json``, one file per cell.

    Each file is written atomically (:func:`posenc_np._files.atomic_write`) as soon as its cell
    finishes, so a study killed at any moment keeps every finished cell, and a rerun with the
    same ``out`` and configuration skips them. ``<out>/study.json`` names the configuration the
    store belongs to; a directory holding another study's configuration (one that differs outside
    :data:`PER_CELL_KEYS`), or output files this tool did not write, is refused instead of mixed
    or clobbered. A grid grown by an encoding, task, training option or seed reuses every stored
    cell and runs only the new ones. Cells recorded with
    ``"status": "error"`` are run again on a rerun, and so are cells whose stored description
    differs (e.g. an LM cell of another corpus).

    Examples
    --------
    >>> import os, tempfile
    >>> from posenc_np.study.store import ResultStore
    >>> cell = {"part": "lm", "encoding": "ngram", "label": "ngram", "seed_index": 0}
    >>> with tempfile.TemporaryDirectory() as out:
    ...     store = ResultStore(out, {"seed": 0, "jobs": 1})
    ...     store.prepare()
    ...     before = store.load(cell)
    ...     store.save({"cell": cell, "status": "ok", "records": [{"ppl": 3.5}]})
    ...     after = store.load(cell)
    ...     name = os.path.basename(store.path(cell))
    ...     other = ResultStore(out, {"seed": 1, "jobs": 1}).load(cell)     # a cell of another configuration
    >>> before, after["records"], name, other
    (None, [{'ppl': 3.5}], 'lm__ngram.json', None)
    """

    def __init__(self, out: str | os.PathLike, cfg_dict: dict) -> None:
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
        for name in ("study.json", *OUTPUTS):
            check_target(os.path.join(self.out, name), "study output")
            sweep_stale_temps(os.path.join(self.out, name))
        check_target(os.path.join(self.cells_dir, "probe.json"), "study cell directory")
        if os.path.exists(self.manifest):
            theirs = read_json(self.manifest)
            if not isinstance(theirs, dict) or theirs.get("tool") != STUDY_TOOL:
                raise ValueError(f"{self.manifest} was not written by {STUDY_TOOL}; refusing to use {self.out!r}")
            config = theirs.get("config") if isinstance(theirs.get("config"), dict) else {}
            if identity(config) != identity(self.cfg_dict):
                keys = sorted(k for k in set(config) | set(self.cfg_dict)
                              if k != "jobs" and config.get(k) != self.cfg_dict.get(k))
                raise ValueError(f"{self.out!r} holds a study with another configuration (differs in {keys}); "
                                 "use another --out or remove it")
            if config != self.cfg_dict:  # the same study with more (or fewer) cells: record the new grid
                write_json(self.manifest, {"tool": STUDY_TOOL, "config": self.cfg_dict})
        else:
            results = os.path.join(self.out, "results.json")
            if os.path.exists(results) and not written_by_us(read_json(results)):
                raise ValueError(f"{results} was not written by {STUDY_TOOL}; refusing to overwrite it")
            write_json(self.manifest, {"tool": STUDY_TOOL, "config": self.cfg_dict})

    def path(self, cell: dict) -> str:
        return os.path.join(self.cells_dir, f"{cell_id(cell)}.json")

    def load(self, cell: dict) -> dict | None:
        """The stored result of ``cell`` if it finished with this configuration, else None.

        A file that does not parse or belongs to another cell or configuration counts as not
        finished (it is overwritten when the cell runs again)."""
        path = self.path(cell)
        if os.path.isdir(path) and not os.path.islink(path):
            raise ValueError(f"study cell {path} is a directory, not a file; remove it (the cell's result is "
                             "stored there)")
        doc = read_json(path)
        if not (isinstance(doc, dict) and doc.get("cell") == cell and isinstance(doc.get("records"), list)
                and doc.get("status") in ("ok", "error") and isinstance(doc.get("config"), dict)
                and identity(doc["config"]) == identity(self.cfg_dict)):
            return None
        return doc

    def save(self, result: dict) -> None:
        write_json(self.path(result["cell"]), {**result, "config": self.cfg_dict})
