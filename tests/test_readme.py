"""The README's commands and example are the ones that work."""

import configparser
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
CI = (ROOT / ".ci" / "run").read_text()


def _blocks(lang):
    return re.findall(rf"```{lang}\n(.*?)```", README, flags=re.S)


def test_readme_opens_with_the_two_commands_and_ci_runs_both_from_the_readme():
    bash = _blocks("bash")
    assert README.index("```bash") < README.index("##"), "the two commands come first"
    main_job, tests = bash[0].strip(), bash[1].strip()
    assert "posenc-np golden generate" in main_job and "posenc-np golden verify" in main_job
    assert "pytest" in tests
    out = subprocess.run([sys.executable, str(ROOT / ".ci" / "readme_commands.py")], capture_output=True,
                         text=True, check=True).stdout
    assert out.splitlines() == [main_job, tests]
    assert '"$PYTHON" .ci/readme_commands.py' in CI and 'bash -euo pipefail -c "$cmd"' in CI
    assert "-m venv" in CI and "system-site-packages" not in CI and "pip freeze" in CI


def test_every_declared_lower_bound_is_the_one_ci_tests():
    """Each extra's bound equals the test extra's (which .ci/run installs at its lower bounds)."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    pins = subprocess.run([sys.executable, str(ROOT / ".ci" / "lower_bounds.py")], capture_output=True, text=True,
                          check=True).stdout.split()
    tested = dict(p.split("==") for p in pins)
    for extra, text in cfg["options.extras_require"].items():
        for req in filter(None, (r.strip() for r in text.split("\n"))):
            name, bound = req.split(">=")
            assert tested.get(name) == bound, f"extra {extra}: {req} is not the tested lower bound"
    assert "lower-bounds.txt" in CI
    for name, bound in tested.items():  # the README states the bounds it was tested with
        assert f"{name.split('[')[0]} {bound}" in README, f"README does not list the tested lower bound {name} {bound}"


def test_fast_and_full_test_commands_are_documented():
    assert 'python -m pytest -m "not slow"' in README and "python -m pytest" in README


def test_ten_line_example_runs():
    code = _blocks("python")[0]
    assert len(code.strip().splitlines()) <= 10
    namespace = {}
    exec(compile(code, "README.md", "exec"), namespace)
    assert namespace["out"].shape == (2, 8, 128, 64)
    assert set(namespace["grads"]) >= {"q", "k", "v"}
