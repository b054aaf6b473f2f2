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


def test_verify_a_file_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    assert cli.main(["golden", "verify", str(tmp_path / "f")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0] == f"posenc-np: error: {tmp_path / 'f'} is not a directory"


def test_error_messages_escape_control_characters(tmp_path, capsys):
    assert cli.main(["golden", "verify", str(tmp_path / "x\x1b[2Jy")]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "x\\x1b[2Jy" in err


def test_closed_pipe_ends_quietly():
    """``posenc-np golden list | head``: the reader is gone before anything is written."""
    import os
    import signal

    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        res = subprocess.run([sys.executable, "-m", "posenc_np", "golden", "list"], stdout=write_end,
                             stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert res.stderr == ""
    assert res.returncode == 128 + signal.SIGPIPE
