"""Generate a golden suite from the oracle, and verify a suite against the library.

``generate`` evaluates each case with the mpmath oracle, rounds once to float64, writes the
case files and an ``index.json``, and reports how far the library's float64 path is from
the oracle. ``verify`` re-reads a directory: schema, checksums, JSON/NPZ agreement, index
agreement, and a recomputation of every case with the library.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import _version
from . import catalogue, format as fmt
from .spec import ORACLE, ORACLE_DIGITS, CaseSpec, finish_oracle_output

INDEX = "index.json"


@dataclass
class Row:
    """One line of a generate/verify report."""

    case: str
    encoding: str
    values: int
    max_abs: float
    max_rel: float
    ok: bool
    problem: str = ""


# --------------------------------------------------------------------------- comparison

def compare(actual: dict, expected: dict, tol: dict) -> tuple[int, float, float, list[str]]:
    """Compare named outputs. Returns (number of values, max abs err, max rel err, problems).

    Floats pass when ``|a - e| <= tol.abs + tol.rel * |e|`` elementwise; integer and boolean
    outputs must be equal. The relative error is reported over entries with ``e != 0``.
    """
    problems: list[str] = []
    count, max_abs, max_rel = 0, 0.0, 0.0
    if set(actual) != set(expected):
        problems.append(f"outputs {sorted(actual)} != expected {sorted(expected)}")
        return count, float("nan"), float("nan"), problems
    for key, exp in expected.items():
        act = np.asarray(actual[key])
        if act.shape != exp.shape:
            problems.append(f"{key}: shape {act.shape} != expected {exp.shape}")
            continue
        count += exp.size
        if exp.dtype.kind in "ib":
            if act.dtype.kind not in "iub":
                problems.append(f"{key}: dtype {act.dtype}, expected integers")
                continue
            bad = np.flatnonzero(act.astype(np.int64).ravel() != exp.astype(np.int64).ravel())
            if bad.size:
                i = np.unravel_index(bad[0], exp.shape)
                problems.append(f"{key}: {bad.size} entries differ, first at {tuple(map(int, i))}: "
                                f"{act[i]} != {exp[i]}")
                max_abs = max(max_abs, float(np.max(np.abs(act.astype(np.float64) - exp))))
            continue
        act = act.astype(np.float64)
        err = np.abs(act - exp)
        err = np.where(np.isnan(err), np.inf, err)
        if err.size:
            max_abs = max(max_abs, float(err.max()))
            nz = exp != 0
            if nz.any():
                max_rel = max(max_rel, float((err[nz] / np.abs(exp[nz])).max()))
        bound = tol["abs"] + tol["rel"] * np.abs(exp)
        bad = np.flatnonzero((err > bound).ravel())
        if bad.size:
            i = np.unravel_index(bad[0], exp.shape)
            problems.append(f"{key}: {bad.size} of {exp.size} values outside tolerance, worst abs error "
                            f"{err.max():.3e}; first at {tuple(map(int, i))}: {act[i]!r} vs {exp[i]!r}")
    return count, max_abs, max_rel, problems


def evaluate_library(encoding: str, params: dict, inputs: dict) -> dict:
    """Outputs of the library's evaluator for ``encoding`` (a case's ``encoding`` field)."""
    enc = catalogue.encodings().get(encoding)
    if enc is None:
        raise KeyError(f"unknown encoding {encoding!r}")
    return enc.library(params, inputs)


# --------------------------------------------------------------------------- generate

def oracle_outputs(spec: CaseSpec) -> dict:
    """Evaluate a case with the mpmath oracle at ORACLE_DIGITS and round once to float64."""
    import mpmath

    enc = catalogue.encodings()[spec.encoding]
    with mpmath.workdps(ORACLE_DIGITS):
        raw = enc.oracle(spec.params, spec.inputs)
    return {k: finish_oracle_output(v) for k, v in raw.items()}


def build_case(spec: CaseSpec) -> dict:
    return fmt.build_document(
        name=spec.name, encoding=spec.encoding, description=spec.description, params=spec.params,
        conventions=spec.conventions, inputs=spec.inputs, outputs=oracle_outputs(spec),
        tolerance=spec.tolerance, oracle=ORACLE, library_version=_version.__version__,
    )


def generate(out_dir, *, formats=("json", "npz"), only=None, progress=None) -> list[Row]:
    """Write the suite (or the cases matching ``only``) to ``out_dir``; return a report."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows, index = [], []
    specs = catalogue.cases(only)
    for spec in specs:
        if progress:
            progress(spec.name)
        doc = build_case(spec)
        files = []
        if "json" in formats:
            fmt.write_json(doc, out / f"{spec.name}.json")
            files.append(f"{spec.name}.json")
        if "npz" in formats:
            fmt.write_npz(doc, out / f"{spec.name}.npz")
            files.append(f"{spec.name}.npz")
        index.append({"name": spec.name, "encoding": spec.encoding, "sha256": doc["sha256"], "files": files})
        rows.append(_check_library(doc))
    index_doc = {"schema": fmt.SCHEMA, "schema_version": fmt.SCHEMA_VERSION,
                 "library_version": _version.__version__, "cases": index}
    (out / INDEX).write_text(json.dumps(index_doc, sort_keys=True, indent=1) + "\n", encoding="ascii")
    return rows


def _check_library(doc: dict, problems_before=()) -> Row:
    inputs, expected = fmt.arrays(doc, "inputs"), fmt.arrays(doc, "outputs")
    problems = list(problems_before)
    try:
        actual = evaluate_library(doc["encoding"], doc["params"], inputs)
        n, mabs, mrel, cmp_problems = compare(actual, expected, doc["tolerance"])
        problems += cmp_problems
    except Exception as exc:  # a library error is a verification failure, reported per case
        n, mabs, mrel = sum(v.size for v in expected.values()), float("nan"), float("nan")
        problems.append(f"library raised {type(exc).__name__}: {exc}")
    return Row(doc["name"], doc["encoding"], n, mabs, mrel, not problems, "; ".join(problems))


# --------------------------------------------------------------------------- verify

def verify(directory) -> list[Row]:
    """Verify every case file in ``directory``; one row per case (or per broken file)."""
    d = Path(directory)
    if not d.is_dir():
        raise FileNotFoundError(f"{d} is not a directory")
    files = sorted(p for p in d.iterdir() if p.suffix in (".json", ".npz") and p.name != INDEX)
    rows: list[Row] = []
    by_name: dict[str, list[tuple[Path, dict]]] = {}
    for path in files:
        try:
            doc = fmt.read_case_file(path)
        except fmt.GoldenFormatError as exc:
            rows.append(Row(path.name, "?", 0, float("nan"), float("nan"), False, str(exc)))
            continue
        if doc["name"] != path.stem:
            rows.append(Row(path.name, doc["encoding"], 0, float("nan"), float("nan"), False,
                            f"{path}: file name does not match case name {doc['name']!r}"))
            continue
        by_name.setdefault(doc["name"], []).append((path, doc))
    listed = _read_index(d, rows)
    for name, entries in by_name.items():
        problems = []
        first_path, doc = entries[0]
        for other_path, other in entries[1:]:
            if other != doc:
                problems.append(f"{other_path.name} and {first_path.name} hold different content")
        if listed is not None:
            if name not in listed:
                problems.append(f"case not listed in {INDEX}")
            elif listed[name] != doc["sha256"]:
                problems.append(f"{INDEX} lists sha256 {listed[name][:16]}..., file has {doc['sha256'][:16]}...")
        rows.append(_check_library(doc, problems))
    if listed is not None:
        for name in sorted(set(listed) - set(by_name)):
            # a listed case whose file exists but failed to parse already has its own row
            if not any(r.case.startswith(name + ".") for r in rows):
                rows.append(Row(name, "?", 0, float("nan"), float("nan"), False, f"listed in {INDEX} but no file found"))
    if not rows:
        rows.append(Row(str(d), "?", 0, float("nan"), float("nan"), False, "no case files found"))
    return rows


def _read_index(d: Path, rows: list) -> dict | None:
    path = d / INDEX
    if not path.exists():
        return None
    try:
        idx = json.loads(path.read_text(encoding="utf-8"))
        return {c["name"]: c["sha256"] for c in idx["cases"]}
    except (ValueError, KeyError, TypeError) as exc:
        rows.append(Row(INDEX, "?", 0, float("nan"), float("nan"), False, f"{path}: unreadable index: {exc}"))
        return {}


# --------------------------------------------------------------------------- report

def format_table(rows: list[Row]) -> str:
    """A fixed-width summary table plus a totals line."""
    w = max([len("case")] + [len(r.case) for r in rows])
    e = max([len("encoding")] + [len(r.encoding) for r in rows])
    lines = [f"{'case':<{w}}  {'encoding':<{e}}  {'values':>7}  {'max abs err':>11}  {'max rel err':>11}  result"]
    lines.append("-" * len(lines[0]))
    for r in rows:
        lines.append(f"{r.case:<{w}}  {r.encoding:<{e}}  {r.values:>7}  {r.max_abs:>11.3e}  {r.max_rel:>11.3e}  "
                     f"{'pass' if r.ok else 'FAIL'}")
        if r.problem:
            lines.append(f"    -> {r.problem}")
    failed = sum(not r.ok for r in rows)
    worst = max((r.max_abs for r in rows if np.isfinite(r.max_abs)), default=0.0)
    lines.append(f"{len(rows)} cases, {sum(r.values for r in rows)} values, worst abs error {worst:.3e}, "
                 f"{len(rows) - failed} passed, {failed} failed")
    return "\n".join(lines)
