"""Generate a golden suite from the oracle; verify a suite against the catalogue and the library.

``generate`` evaluates each case with the mpmath oracle, rounds once to float64, and writes the
case files, ``index.json`` (first as a plan of ``pending`` cases, rewritten at least every
:data:`COMMIT_SECONDS`) and ``SHA256SUMS``, each file through a temporary name; it never loses
data and a killed run is finished by rerunning it (``docs/golden-format.md``, "Writing a suite").
``verify`` trusts nothing the suite says about itself: manifest and digests, every field but the
outputs equal to the catalogue's, outputs within the catalogue's tolerance of the library (and,
with ``oracle=True``, bit-equal to the oracle's); an unknown case is ``unknown``, never ``pass``.
Every problem is a row naming the file; the run goes on.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import stat
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import numpy as np

from .. import _version
from .._checks import require
from .._files import kind
from . import catalogue, safe_io
from . import format as fmt
from .safe_io import GoldenFormatError, short
from .spec import ORACLE_DIGITS, CaseSpec, finish_oracle_output

INDEX, SUMS = fmt.INDEX, fmt.SUMS
PASS, FAIL, UNKNOWN = "pass", "FAIL", "unknown"
MODES = ("new", "force", "update")
#: Largest total size of the regular files in a directory that verify reads.
MAX_SUITE_BYTES = 1 << 30
#: generate records finished cases in the index at least this often (and after the last one).
COMMIT_SECONDS = 1.0
#: What a version-1 file is trusted by (:data:`.format.V1_PUBLISHED`): shipped with the package (so an
#: installed library verifies ``vectors/v1``), never read from the directory being checked.
V1_PUBLISHED_FILE = Path(__file__).resolve().parent / "v1_published.json"


class SuiteRefused(ValueError):
    """generate will not write to this directory (it would lose or mix up data)."""


@dataclass
class Row:
    """One line of a generate/verify report: a case, or a file that is not part of one."""

    case: str
    encoding: str = "?"
    values: int = 0
    max_abs: float = math.nan
    max_rel: float = math.nan
    status: str = FAIL
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == PASS

    @property
    def problem(self) -> str:
        return "; ".join(self.problems)


def compare(actual: dict, expected: dict, tol: dict) -> tuple[int, float, float, list[str]]:
    """Compare named outputs. Returns (number of values, max abs err, max rel err, problems).

    Floats pass when ``|a - e| <= tol.abs + tol.rel * |e|`` elementwise with a finite bound (an
    expected NaN or infinity passes nothing); integer and boolean outputs must be equal. The
    relative error is reported over entries with ``e != 0``.
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
        with np.errstate(invalid="ignore"):  # inf - inf and inf / inf are NaN: an infinite error
            err = np.abs(act - exp)
            err = np.where(np.isnan(err), np.inf, err)
            nz = exp != 0
            if nz.any():
                rel = err[nz] / np.abs(exp[nz])
                max_rel = max(max_rel, float(np.where(np.isnan(rel), np.inf, rel).max()))
        if err.size:
            max_abs = max(max_abs, float(err.max()))
        bound = tol["abs"] + tol["rel"] * np.abs(exp)
        bad = np.flatnonzero(~((err <= bound) & np.isfinite(bound)).ravel())  # a NaN or inf expected value fails
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


def _check_library(spec: CaseSpec, expected: dict, row: Row) -> None:
    """Add to ``row`` the library's error on the spec's inputs against ``expected`` outputs."""
    try:
        actual = evaluate_library(spec.encoding, spec.params, {k: v.copy() for k, v in spec.inputs.items()})
        row.values, row.max_abs, row.max_rel, problems = compare(actual, expected, spec.tolerance)
        row.problems += problems
    except Exception as exc:  # noqa: BLE001 - any library error is a failure of this case, reported in its row
        row.values = sum(v.size for v in expected.values())
        row.problems.append(f"library raised {type(exc).__name__}: {exc}")


def catalogue_problems(doc: dict, spec: CaseSpec) -> list[str]:
    """Fields of a case document that differ from what the catalogue says (outputs excluded)."""
    return [f"{key} differs from the catalogue: the file has {short(doc[key])}, the catalogue {short(want)}"
            for key, want in catalogue.document_fields(spec).items() if fmt.canonical(doc[key]) != fmt.canonical(want)]


def _bits(a: np.ndarray) -> np.ndarray:
    """One row of raw bytes per element (so that -0.0 and 0.0 differ)."""
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8).reshape(a.size, a.dtype.itemsize)


def _bit_differences(stored: dict, exact: dict) -> list[str]:
    """Outputs whose stored values are not bit-identical to the oracle's float64 values."""
    if set(stored) != set(exact):
        return [f"outputs {sorted(stored)}, the oracle gives {sorted(exact)}"]
    problems = []
    for key, want in exact.items():
        have = stored[key]
        if have.shape != want.shape or have.dtype != want.dtype:
            problems.append(f"{key}: {have.dtype} {have.shape}, the oracle gives {want.dtype} {want.shape}")
            continue
        diff = np.flatnonzero((_bits(have) != _bits(want)).any(axis=1))
        if diff.size:
            i = np.unravel_index(diff[0], want.shape)
            problems.append(f"{key}: {diff.size} of {want.size} values are not the oracle's float64 bits; "
                            f"first at {tuple(map(int, i))}: {have[i]!r}, oracle {want[i]!r}")
    return problems


def oracle_outputs(spec: CaseSpec) -> dict:
    """Evaluate a case with the mpmath oracle at ORACLE_DIGITS and round once to float64."""
    import mpmath

    enc = catalogue.encodings()[spec.encoding]
    with mpmath.workdps(ORACLE_DIGITS):
        raw = enc.oracle(spec.params, spec.inputs)
    return {k: finish_oracle_output(v) for k, v in raw.items()}


def generate(out_dir, *, formats=("json", "npz"), only=None, mode="new", progress=None, specs=None,
             jobs: int = 1, suite: int = fmt.SCHEMA_VERSION) -> list[Row]:
    """Write the cases matching ``only`` (names or glob patterns; default: all) of ``specs`` (default:
    the catalogue of suite version ``suite``; e.g. :func:`posenc_np.golden.model_cases.cases_for`) to
    ``out_dir`` in ``formats`` (``"json"``, ``"npz"``) as a version-``suite`` suite; return the library's errors.

    ``mode``: ``"new"`` (``out_dir`` missing or empty), ``"force"`` (replace a suite this function
    wrote: its index and only the files it lists) or ``"update"`` (add or replace the selected cases,
    and any an interrupted run left pending, in such a suite). ``progress(name)`` is called as each
    case is written; ``jobs`` processes evaluate the oracle (the files do not depend on it). Raises
    ``ValueError`` (:class:`SuiteRefused` for a directory it must not write to) before anything is
    created or changed, ``OSError`` when ``out_dir`` cannot be written.
    """
    require(mode in MODES, f"mode must be one of {MODES}, got {mode!r}")
    require(formats and set(formats) <= {"json", "npz"},
            f"formats must be a non-empty subset of ('json', 'npz'), got {formats!r}")
    require(type(jobs) is int and jobs >= 1, f"jobs must be a positive integer, got {jobs!r}")
    available = catalogue.cases(suite=suite) if specs is None else list(specs)
    selected = catalogue.select(available, only)
    out = Path(out_dir)
    old = _existing_suite(out, mode, suite)
    units = {s.name: s for s in selected}
    if old is not None and mode == "update":
        by_name = {s.name: s for s in available}
        for name in old.pending:
            spec = by_name.get(name)
            if spec is None:
                raise SuiteRefused(f"{out}: {INDEX} lists {name} as pending, but the catalogue has no such case")
            units.setdefault(name, spec)
    out.mkdir(parents=True, exist_ok=True)
    dir_fd = safe_io.open_dir(out)
    try:
        index = _start(dir_fd, old, set(units), mode, suite)
        rows, committed = [], time.monotonic()
        for spec, outputs in _oracle_results(list(units.values()), jobs):
            rows.append(_write_case(dir_fd, index, spec, outputs, formats))
            if progress:
                progress(spec.name)
            if time.monotonic() - committed >= COMMIT_SECONDS:
                _commit(dir_fd, index)
                committed = time.monotonic()
        _commit(dir_fd, index)
        return rows
    finally:
        os.close(dir_fd)


def _oracle_results(specs: list[CaseSpec], jobs: int) -> Iterator[tuple[CaseSpec, dict]]:
    """``(spec, oracle outputs)`` in the order of ``specs``, evaluated by ``jobs`` processes."""
    if jobs == 1 or len(specs) < 2:
        for spec in specs:
            yield spec, oracle_outputs(spec)
        return
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else None)  # fork: no re-import per worker
    with ProcessPoolExecutor(max_workers=min(jobs, len(specs)), mp_context=context) as pool:
        futures = [pool.submit(oracle_outputs, spec) for spec in specs]
        for spec, future in zip(specs, futures):
            yield spec, future.result()


def _existing_suite(out: Path, mode: str, suite: int) -> fmt.Index | None:
    """The suite in ``out`` that ``mode`` may replace or extend; ``None`` when ``out`` is missing or empty."""
    try:
        is_dir = stat.S_ISDIR(os.stat(out).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        _check_creatable(out)
        return None
    if not is_dir:
        raise NotADirectoryError(f"{out} exists and is not a directory")
    dir_fd = safe_io.open_dir(out)
    try:
        entries, overflow = safe_io.list_dir(dir_fd)
        rest = {n: m for n, (m, _) in entries.items() if not safe_io.TEMP_RE.match(n)}
        if not rest and not overflow:
            return None
        flag = {"force": "--force", "update": "--update"}.get(mode)
        if flag is None:
            raise SuiteRefused(f"{out} is not empty; pass --update to add or replace cases in the golden suite "
                               "there, or --force to replace that suite (neither touches a directory holding "
                               "anything but a suite written by posenc-np)")
        try:
            index = fmt.parse_index(safe_io.read_file(INDEX, dir_fd=dir_fd, limit=fmt.MAX_INDEX_BYTES))
        except GoldenFormatError as exc:
            raise SuiteRefused(f"{out} is not empty and holds no valid golden-suite index ({exc}); "
                               f"refusing to write there, even with {flag}") from None
        if mode == "update" and index.version != suite:
            raise SuiteRefused(f"{out} holds a version-{index.version} suite; --update only extends a suite "
                               f"of the version written (v{suite}; use --force to replace it)")
        ours = {INDEX, SUMS} | {p for e in index.cases.values() for p in e.files} | set(_case_files(index.pending))
        strangers = sorted(n for n, m in rest.items() if n not in ours or not stat.S_ISREG(m))
        if overflow or strangers:
            raise SuiteRefused(f"{out} holds entries its {INDEX} does not list as regular files "
                               f"({', '.join(strangers[:3])}{', ...' if overflow or len(strangers) > 3 else ''}); "
                               f"refusing to touch them, even with {flag}")
        return index
    finally:
        os.close(dir_fd)


def _check_creatable(out: Path) -> None:
    """Fail now, before anything is created, if ``out`` cannot become a directory."""
    parent = out.absolute()
    while not os.path.lexists(parent):
        parent = parent.parent
    if not parent.is_dir():
        raise NotADirectoryError(f"cannot create {out}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise PermissionError(f"cannot create {out}: {parent} is not writable")


def _start(dir_fd: int, old: fmt.Index | None, selected: set, mode: str, suite: int) -> fmt.Index:
    """Remove what the new suite drops, then write the plan: the index with the selection pending."""
    for name in safe_io.list_dir(dir_fd)[0]:
        if safe_io.TEMP_RE.match(name):  # left by an interrupted run
            os.unlink(name, dir_fd=dir_fd)
    if old is not None and old.version != suite:  # replaced wholesale (force); the old index goes last
        for entry in old.cases.values():
            for path in entry.files:
                _unlink(dir_fd, path)
        _unlink(dir_fd, INDEX)
        old = None
    index = old or fmt.Index(suite)
    if mode == "force":
        for path in _case_files(n for n in [*index.cases, *index.pending] if n not in selected):
            _unlink(dir_fd, path)
        # the files are gone before the index stops listing them: a kill in between leaves
        # cases verify reports as missing, never files it cannot account for
        index.cases = {n: e for n, e in index.cases.items() if n in selected}
        index.pending = []
    index.pending = sorted((set(index.pending) | selected) - set(index.cases))
    _commit(dir_fd, index)
    return index


def _write_case(dir_fd: int, index: fmt.Index, spec: CaseSpec, outputs: dict, formats) -> Row:
    """Write one case (its oracle ``outputs`` given) atomically and record it in ``index`` (in memory)."""
    doc = fmt.build_document(fields=catalogue.document_fields(spec), outputs=outputs,
                             library_version=_version.__version__, version=index.version)
    blobs = {}
    if "json" in formats:
        blobs[f"{spec.name}.json"] = fmt.case_json_bytes(doc)
    if "npz" in formats:
        blobs[f"{spec.name}.npz"] = fmt.case_npz_bytes(doc)
    for path, data in blobs.items():  # what we write, verify must be able to read
        if len(data) > fmt.MAX_CASE_FILE_BYTES:
            raise GoldenFormatError(f"{path}: {len(data)} bytes exceeds the format's limit")
        fmt.parse_case(data, path)
    for path, data in blobs.items():
        safe_io.atomic_write(dir_fd, path, data)
    os.fsync(dir_fd)
    for path in set(_case_files([spec.name])) - set(blobs):  # a format no longer written
        _unlink(dir_fd, path)
    index.cases[spec.name] = fmt.CaseEntry(spec.name, spec.encoding,
                                           {p: (fmt.sha256(d), len(d)) for p, d in blobs.items()})
    if spec.name in index.pending:
        index.pending.remove(spec.name)
    row = Row(spec.name, spec.encoding)
    _check_library(spec, fmt.arrays(doc, "outputs"), row)
    row.status = FAIL if row.problems else PASS
    return row


def _commit(dir_fd: int, index: fmt.Index) -> None:
    """Write index.json, then SHA256SUMS (which seals it), each atomically."""
    data = fmt.index_bytes(index)
    safe_io.atomic_write(dir_fd, INDEX, data)
    safe_io.atomic_write(dir_fd, SUMS, fmt.sums_bytes(index, data))
    os.fsync(dir_fd)


def _case_files(names) -> list[str]:
    """The file names a case may have (what generate may replace or remove for it)."""
    return [f"{n}.{ext}" for n in names for ext in ("json", "npz")]


def _unlink(dir_fd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass


def verify(directory, *, oracle: bool = False, known: Callable[[str], CaseSpec | None] | None = None) -> list[Row]:
    """Check the suite in ``directory`` (module docstring); one row per case and per file that is not
    part of one. ``oracle``: also require the stored outputs to be the oracle's float64 values bit
    for bit. ``known``: ``name -> CaseSpec or None``, the cases to trust (default: the catalogue).
    Raises ``FileNotFoundError`` / ``NotADirectoryError`` for a ``directory`` that is not one;
    anything wrong inside it is a row.
    """
    dir_fd = safe_io.open_dir(directory)
    try:
        return _verify_dir(dir_fd, oracle, known)
    finally:
        os.close(dir_fd)


def _verify_dir(dir_fd: int, oracle: bool, known) -> list[Row]:
    entries, overflow = safe_io.list_dir(dir_fd)
    total = sum(size for mode, size in entries.values() if stat.S_ISREG(mode))
    if overflow or total > MAX_SUITE_BYTES:
        return [Row(".", problems=[(f"more than {safe_io.MAX_DIR_ENTRIES} entries or {MAX_SUITE_BYTES} bytes: "
                                    "not a golden suite (nothing was read)")])]
    index_data = b""
    try:
        if INDEX not in entries:
            raise GoldenFormatError(f"{INDEX}: missing; without its manifest a directory is not a suite "
                                    "(an interrupted generate, or not a golden suite)")
        index_data = safe_io.read_file(INDEX, dir_fd=dir_fd, limit=fmt.MAX_INDEX_BYTES)
        index = fmt.parse_index(index_data)
    except GoldenFormatError as exc:
        return [Row(INDEX, problems=[str(exc)])] + [
            Row(n, problems=[f"{n}: not checked (no valid {INDEX} lists it)"]) for n in sorted(entries) if n != INDEX]
    known = known or (catalogue.by_name(index.version).get if index.version > 1 else None)
    rows = [_verify_case(dir_fd, entries, entry, index.version, oracle, known) for entry in index.cases.values()]
    if not index.cases and not index.pending:
        rows.append(Row(INDEX, problems=[f"{INDEX}: lists no cases (an empty suite checks nothing)"]))
    rows += [Row(name, problems=[(f"{INDEX} lists it as pending: the generate run that planned it was "
                                  "interrupted before writing it (rerun generate with --update)")])
             for name in index.pending]
    claimed = {INDEX} | {p for e in index.cases.values() for p in e.files}
    if index.version >= 2:
        claimed.add(SUMS)
        rows += _verify_sums(dir_fd, entries, index, index_data)
    pending_files = set(_case_files(index.pending))
    for n in sorted(set(entries) - claimed):
        why = ("a temporary file of an interrupted generate" if safe_io.TEMP_RE.match(n)
               else "written for a pending case before the interruption" if n in pending_files
               else kind(entries[n][0]))
        rows.append(Row(n, problems=[f"{n}: not listed in {INDEX} ({why})"]))
    return rows


def _read_listed(dir_fd: int, path: str, record, version: int, entry: fmt.CaseEntry) -> tuple[dict, str]:
    """Read one listed case file and check it against its index entry; returns it and its SHA-256."""
    data = safe_io.read_file(path, dir_fd=dir_fd, limit=fmt.MAX_CASE_FILE_BYTES)
    if record is not None and len(data) != record[1]:
        raise GoldenFormatError(f"{path}: {len(data)} bytes, but the index lists {record[1]}")
    digest = fmt.sha256(data)
    if record is not None and digest != record[0]:
        raise GoldenFormatError(f"{path}: SHA-256 is {digest[:16]}..., {INDEX} lists {record[0][:16]}...")
    doc = fmt.parse_case(data, path)
    claims = {"schema_version": version, "name": entry.name, "encoding": entry.encoding}
    for key, want in claims.items():
        if doc[key] != want:
            raise GoldenFormatError(f"{path}: {key} is {short(doc[key])}, {INDEX} says {short(want)}")
    return doc, digest


@cache
def published_v1() -> dict:
    """The checked content of :data:`V1_PUBLISHED_FILE` (read once per process, with the bounded reader)."""
    data = safe_io.read_file(str(V1_PUBLISHED_FILE), limit=fmt.MAX_INDEX_BYTES)
    published = safe_io.parse_json(data, V1_PUBLISHED_FILE.name)
    fmt.V1_PUBLISHED(published, V1_PUBLISHED_FILE.name)
    return published


def v1_problems(path: str, digest: str) -> list[str]:
    """Why a version-1 file is not trusted: its bytes must be those of a published v1 file."""
    if published_v1()["files"].get(Path(path).name) == digest:
        return []
    return [(f"{Path(path).name}: not a published version-1 file (its SHA-256 {digest[:16]}... is not the one "
             f"listed in {V1_PUBLISHED_FILE.name}); version 1 is read-only, regenerate as version 2")]


def spec_from_v1(doc: dict) -> CaseSpec:
    """The spec of a (published, trusted) version-1 document: its own inputs and float64 tolerance, and its
    parameters (under today's names where version 2 renamed them, from :data:`V1_PUBLISHED_FILE`)."""
    return CaseSpec(name=doc["name"], encoding=doc["encoding"], conventions=doc["conventions"],
                    params=published_v1()["renamed_params"].get(doc["name"], doc["params"]),
                    inputs=fmt.arrays(doc, "inputs"), tolerances={"float64": doc["tolerance"]},
                    error_model="version 1", reference_call="n/a", description=doc["description"])


def _verify_case(dir_fd: int, entries: dict, entry: fmt.CaseEntry, version: int, oracle: bool, known) -> Row:
    row = Row(entry.name, entry.encoding)
    docs, digests = {}, {}
    for path, record in entry.files.items():
        if path not in entries:
            row.problems.append(f"{path}: listed in {INDEX} but missing")
            continue
        try:
            docs[path], digests[path] = _read_listed(dir_fd, path, record, version, entry)
        except GoldenFormatError as exc:
            row.problems.append(str(exc))
    if len(docs) == 2 and len({fmt.canonical(d) for d in docs.values()}) == 2:
        row.problems.append(f"{' and '.join(docs)} hold different content")
    if not docs:
        return row
    doc = next(iter(docs.values()))
    stored = fmt.arrays(doc, "outputs")
    if version == 1:  # trusted by the digests of the published files, then judged on its own terms
        try:
            untrusted = [p for path, digest in digests.items() for p in v1_problems(path, digest)]
        except GoldenFormatError as exc:  # the published digests cannot be read
            untrusted = [str(exc)]
        if untrusted:
            row.problems += untrusted
            row.values = sum(v.size for v in stored.values())
            return row
        spec = spec_from_v1(doc)
    else:
        spec = known(entry.name)
        if spec is None:
            row.values = sum(v.size for v in stored.values())
            row.status = FAIL if row.problems else UNKNOWN
            row.problems.append("unknown case: not in the catalogue, checked for format only")
            return row
        row.problems += catalogue_problems(doc, spec)
    _check_library(spec, stored, row)
    if oracle:
        row.problems += _bit_differences(stored, oracle_outputs(spec))
    row.status = FAIL if row.problems else PASS
    return row


def _verify_sums(dir_fd: int, entries: dict, index: fmt.Index, index_data: bytes) -> list[Row]:
    want = fmt.sums_bytes(index, index_data)
    try:
        if SUMS not in entries:
            raise GoldenFormatError(f"{SUMS}: missing")
        have = safe_io.read_file(SUMS, dir_fd=dir_fd, limit=fmt.MAX_INDEX_BYTES)
    except GoldenFormatError as exc:
        return [Row(SUMS, problems=[str(exc)])]
    if have == want:
        return []
    stale = sorted(set(have.splitlines()) ^ set(want.splitlines()))
    names = sorted({line.decode("ascii", "replace").split("  ", 1)[-1] for line in stale})
    return [Row(SUMS, problems=[(f"{SUMS}: does not match {INDEX} and the files it lists "
                                 f"(lines differ for {', '.join(names[:5])}{', ...' if len(names) > 5 else ''}); "
                                 "an interrupted generate, or an edited file")])]


def load_case_file(path, *, known: Callable[[str], CaseSpec | None] | None = None) -> tuple[dict, str]:
    """One case file read and trusted as :func:`posenc_np.testing.load_case` documents (listed in its
    directory's index with its digest, catalogue fields, published if version 1): ``(document,
    SHA-256)``, else a :class:`GoldenFormatError` naming the file."""
    path = Path(os.fspath(path))
    data = safe_io.read_file(str(path), limit=fmt.MAX_CASE_FILE_BYTES)
    doc = fmt.parse_case(data, str(path))
    digest = fmt.sha256(data)
    index_path = path.parent / INDEX
    if os.path.lexists(index_path):
        index = fmt.parse_index(safe_io.read_file(str(index_path), limit=fmt.MAX_INDEX_BYTES))
        entry = index.cases.get(doc["name"])
        if entry is None or path.name not in entry.files:
            raise GoldenFormatError(f"{path}: not listed in {index_path}")
        record = entry.files[path.name]
        if record is not None and record[0] != digest:
            raise GoldenFormatError(f"{path}: its digest differs from the one in {index_path}")
    if doc["schema_version"] == 1:
        problems = v1_problems(str(path), digest)
    else:
        spec = (known or catalogue.by_name(doc["schema_version"]).get)(doc["name"])
        problems = catalogue_problems(doc, spec) if spec is not None else []
    if problems:
        raise GoldenFormatError(f"{path}: " + "; ".join(problems))
    return doc, digest


def format_table(rows: list[Row]) -> str:
    """A fixed-width table (names and messages with control characters escaped) plus a totals line."""
    cells = [(safe_io.printable(r.case), safe_io.printable(r.encoding)) for r in rows]
    w = min(60, max([len("case")] + [len(c) for c, _ in cells]))
    e = min(30, max([len("encoding")] + [len(x) for _, x in cells]))
    lines = [f"{'case':<{w}}  {'encoding':<{e}}  {'values':>7}  {'max abs err':>11}  {'max rel err':>11}  result"]
    lines.append("-" * len(lines[0]))
    for r, (case, enc) in zip(rows, cells):
        lines.append(f"{case:<{w}}  {enc:<{e}}  {r.values:>7}  {r.max_abs:>11.3e}  {r.max_rel:>11.3e}  {r.status}")
        lines += [f"    -> {safe_io.printable(p)}" for p in r.problems]
    counts = {s: sum(r.status == s for r in rows) for s in (PASS, FAIL, UNKNOWN)}
    worst = max((r.max_abs for r in rows if np.isfinite(r.max_abs)), default=0.0)
    lines.append(f"{len(rows)} rows, {sum(r.values for r in rows)} values, worst abs error {worst:.3e}: "
                 f"{counts[PASS]} passed, {counts[FAIL]} failed, {counts[UNKNOWN]} unknown")
    return "\n".join(lines)
