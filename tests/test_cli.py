"""The posenc-np command line: --version, --help on every subcommand, python -m."""

import subprocess
import sys

import pytest

from posenc_np import __version__, cli

SUBCOMMANDS = [[], ["golden"], ["golden", "generate"], ["golden", "verify"], ["golden", "list"],
               ["study"], ["study", "extrapolation"]]


@pytest.mark.parametrize("words", SUBCOMMANDS, ids=lambda w: " ".join(w) or "top")
def test_help_on_every_subcommand(words, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(words + ["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: posenc-np") and (not words or words[-1] in out)


def test_version(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--version"])
    assert capsys.readouterr().out.strip() == f"posenc-np {__version__}"


def test_missing_subcommand_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["golden"])
    assert exc.value.code == 2
    assert "required" in capsys.readouterr().err


def test_python_dash_m_entry_point():
    res = subprocess.run([sys.executable, "-m", "posenc_np", "golden", "list", "--only", "learned.*"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "learned.lookup_and_scatter_add" in res.stdout and res.stdout.strip().endswith("1 cases")


def test_verify_missing_directory_is_a_clear_error(tmp_path, capsys):
    assert cli.main(["golden", "verify", str(tmp_path / "nope")]) == 2
    assert "is not a directory" in capsys.readouterr().err
