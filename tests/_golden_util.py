"""Helpers shared by the golden-suite tests: a small suite, copies, edits an attacker can make."""

from __future__ import annotations

import json
import shutil
import time
import tracemalloc
from contextlib import contextmanager
from pathlib import Path

import pytest

from posenc_np.golden import catalogue, runner
from posenc_np.golden import format as fmt

SMALL = ["sinusoidal.*", "learned.*", "timing_signal.*"]
ONE = "sinusoidal.interleaved.d8.int"
REPO = Path(__file__).resolve().parents[1]


def make_small_suite(path: Path, formats=("json", "npz")) -> Path:
    rows = runner.generate(path, only=SMALL, formats=formats)
    assert rows and all(r.ok for r in rows), runner.format_table(rows)
    return path


def copy_suite(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst, symlinks=True)
    return dst


# Fixtures, imported by the test modules that use them.

@pytest.fixture(scope="module")
def small_suite(tmp_path_factory):
    """The SMALL cases, JSON + NPZ, generated once per module (tests must not modify it)."""
    return make_small_suite(tmp_path_factory.mktemp("golden") / "suite")


@pytest.fixture
def suite(small_suite, tmp_path):
    """A private copy of the small suite, to edit."""
    return copy_suite(small_suite, tmp_path / "s")


def bad_rows(directory, **kwargs) -> list[runner.Row]:
    return [r for r in runner.verify(directory, **kwargs) if r.status != runner.PASS]


def problems(directory, **kwargs) -> str:
    return "\n".join(f"{r.case}: {r.problem}" for r in bad_rows(directory, **kwargs))


def reseal(d: Path) -> None:
    """Recompute every digest and size in index.json, and SHA256SUMS: anyone can do this."""
    index = fmt.parse_index((d / fmt.INDEX).read_bytes())
    for entry in index.cases.values():
        for path in entry.files:
            p = d / path
            if p.is_file() and not p.is_symlink():
                data = p.read_bytes()
                entry.files[path] = (fmt.sha256(data), len(data))
    data = fmt.index_bytes(index)
    (d / fmt.INDEX).write_bytes(data)
    (d / fmt.SUMS).write_bytes(fmt.sums_bytes(index, data))


def case_doc(d: Path, name: str = ONE) -> dict:
    return json.loads((d / f"{name}.json").read_text())


def rewrite_case(d: Path, doc: dict, name: str = ONE) -> None:
    """Write ``doc`` as the case's JSON (and NPZ, when listed) and reseal: a consistent edit."""
    (d / f"{name}.json").write_bytes(fmt.case_json_bytes(doc))
    if (d / f"{name}.npz").exists():
        (d / f"{name}.npz").write_bytes(fmt.case_npz_bytes(doc))
    reseal(d)


def warm_up() -> None:
    """Import every family and build the catalogue, so that a measurement sees only the check."""
    catalogue.encodings()
    catalogue.by_name()


@contextmanager
def bounded(seconds: float = 10.0, megabytes: float = 64.0):
    """Assert that the block finishes in ``seconds`` and allocates at most ``megabytes`` at its peak."""
    warm_up()
    tracemalloc.start()
    t0 = time.perf_counter()
    try:
        yield
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    elapsed = time.perf_counter() - t0
    assert elapsed < seconds, f"took {elapsed:.1f} s"
    assert peak < megabytes * 2**20, f"peak allocation {peak / 2**20:.0f} MiB"
