"""The README's commands and example are the ones that work."""

import re
from pathlib import Path

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()
CI = (Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()


def _blocks(lang):
    return re.findall(rf"```{lang}\n(.*?)```", README, flags=re.S)


def test_readme_opens_with_the_two_commands_and_ci_runs_the_second():
    bash = _blocks("bash")
    assert README.index("```bash") < README.index("##"), "the two commands come first"
    main_job, tests = bash[0].strip(), bash[1].strip()
    assert "posenc-np golden generate" in main_job and "posenc-np golden verify" in main_job
    assert "pytest" in tests
    assert tests in CI.splitlines(), ".ci/run must run exactly the README's test command"


def test_ten_line_example_runs():
    code = _blocks("python")[0]
    assert len(code.strip().splitlines()) <= 10
    namespace = {}
    exec(compile(code, "README.md", "exec"), namespace)
    assert namespace["out"].shape == (2, 8, 128, 64)
    assert set(namespace["grads"]) >= {"q", "k", "v"}
