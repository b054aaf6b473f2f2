"""Every script under examples/ runs in a fresh process in under a minute, and says what its
docstring says it shows."""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted((ROOT / "examples").glob("*.py"))


def _run(script: Path) -> str:
    start = time.perf_counter()
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    elapsed = time.perf_counter() - start
    assert res.returncode == 0, f"{script.name} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    assert elapsed < 60, f"{script.name} took {elapsed:.0f} s"
    return res.stdout


def test_there_are_examples():
    assert {s.name for s in SCRIPTS} >= {"co2_seasonality.py", "verify_rope_with_golden.py"}


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS, ids=[s.name for s in SCRIPTS])
def test_example_runs(script):
    out = _run(script)
    assert out.strip()
    if script.name == "co2_seasonality.py":
        rmse = {m.group(1): float(m.group(2))
                for m in re.finditer(r"^\| (.+?) \| \d+ \| ([\d.]+) \| [\d.]+ \|$", out, flags=re.MULTILINE)}
        assert len(rmse) == 7, out
        # the claims of the example's docstring, on held-out years
        assert rmse["sinusoidal, period 1 year, K=2"] < rmse["one-hot calendar: 12 months"]
        assert rmse["one-hot calendar: 12 months"] < rmse["raw time: month number 1-12"]
        assert rmse["raw time: month number 1-12"] < rmse["trend only (no seasonal feature)"]
        assert rmse["sinusoidal, base 10000, dim 16 (weeks)"] > rmse["trend only (no seasonal feature)"]
    if script.name == "verify_rope_with_golden.py":
        good = re.search(r"^float64 angles \(correct\): (\d+) passed, (\d+) failed$", out, flags=re.MULTILINE)
        bug = re.search(r"^float32 angles \(bug\): (\d+) passed, (\d+) failed$", out, flags=re.MULTILINE)
        assert good and int(good.group(1)) >= 9 and int(good.group(2)) == 0, out
        assert bug and int(bug.group(2)) >= 8, out
