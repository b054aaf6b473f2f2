"""The result store: every finished cell in ``<out>/cells/<cell_id>.json``, written as it finishes."""

from __future__ import annotations

import json
import os

import numpy as np

from .._files import atomic_write, check_target, sweep_stale_temps
from .config import cell_id

__all__ = ["OUTPUTS", "STUDY_TOOL", "ResultStore", "json_safe", "read_json", "write_json"]

STUDY_TOOL = "posenc-np study extrapolation"
#: Files the study writes in its output directory (besides ``study.json`` and ``cells/``).
OUTPUTS = ("results.json", "results.md", "tasks.png", "lm.png", "rope_scaling.png")
_MAX_JSON_BYTES = 256 << 20  # a results or cell file larger than this is not one of ours


def identity(cfg_dict: dict) -> dict:
    """The part of a config that determines the results (``jobs`` only schedules them)."""
    return {k: v for k, v in cfg_dict.items() if k != "jobs"}


def read_json(path):
    """The JSON document at ``path``, or None when it is missing, unreadable, too large or not JSON."""
    try:
        if os.path.getsize(path) > _MAX_JSON_BYTES:
            return None
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None


def write_json(path, obj) -> None:
    """Write ``obj`` as strict JSON (no NaN) atomically."""
    text = json.dumps(obj, indent=1, sort_keys=True, allow_nan=False) + "\n"
    atomic_write(path, lambda fh: fh.write(text), mode="w")


def json_safe(obj):
    """NaN/inf (e.g. the loss of a diverged cell) as None, so result files stay strict JSON."""
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
    store belongs to; a directory holding another study's configuration, or output files this
    tool did not write, is refused instead of mixed or clobbered. Cells recorded with
    ``"status": "error"`` are run again on a rerun, and so are cells whose stored description
    differs (e.g. an LM cell of another corpus).
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
        doc = read_json(self.path(cell))
        if not (isinstance(doc, dict) and doc.get("cell") == cell and isinstance(doc.get("records"), list)
                and doc.get("status") in ("ok", "error") and isinstance(doc.get("config"), dict)
                and identity(doc["config"]) == identity(self.cfg_dict)):
            return None
        return doc

    def save(self, result: dict) -> None:
        write_json(self.path(result["cell"]), {**result, "config": self.cfg_dict})
