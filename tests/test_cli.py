"""The posenc-np command line: --version, --help on every subcommand, python -m, an output that
cannot be written, one spelling of the progress flag."""

import os
import signal
import subprocess
import sys

import pytest

from posenc_np import __version__, cli

SUBCOMMANDS = [[], ["golden"], ["golden", "generate"], ["golden", "verify"], ["golden", "list"],
               ["study"], ["study", "extrapolation"], ["study", "report"], ["precision"]]
#: A complete invocation of every subcommand (``{d}`` is an empty scratch directory).
INVOCATIONS = [
    ["--version"], ["--help"], ["golden", "list"], ["golden", "generate", "--out", "{d}/suite"],
    ["golden", "verify", "{d}"], ["study", "extrapolation", "--out", "{d}/study", "--quick"],
    ["study", "report", "{d}"], ["precision", "--head-dim", "8", "--max-position", "64", "--out", "{d}/prec"],
]


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


def _run(words, **kwargs):
    return subprocess.run([sys.executable, "-m", "posenc_np", *words], text=True, timeout=120, **kwargs)


def _close_stdout():
    os.close(1)


@pytest.mark.slow
@pytest.mark.parametrize("words", INVOCATIONS, ids=lambda w: " ".join(w[:2]))
def test_closed_stdout_is_one_error_line_before_any_work(words, tmp_path):
    """``posenc-np ... >&-``: was ``AttributeError: 'NoneType' object has no attribute 'flush'``, status 1."""
    words = [w.format(d=tmp_path) for w in words]
    res = _run(words, stderr=subprocess.PIPE, preexec_fn=_close_stdout)
    assert res.returncode == 2, res.stderr
    assert res.stderr.splitlines() == ["posenc-np: error: standard output is closed, so nothing could be "
                                       "reported; redirect it instead (e.g. >/dev/null)"]
    assert list(tmp_path.iterdir()) == []  # refused before any work


@pytest.mark.slow
@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "PYTHONUNBUFFERED"])
@pytest.mark.parametrize("words", [["golden", "list"], ["golden", "list", "--only", "learned.*"]],
                         ids=["long output", "short output"])
@pytest.mark.parametrize("target, reason", [("/dev/full", "No space left on device"),
                                            ("read-only", "Bad file descriptor")])
def test_stdout_refusing_writes_is_one_error_line(words, unbuffered, target, reason):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    with open("/dev/full" if target == "/dev/full" else os.devnull, "w" if target == "/dev/full" else "r") as out:
        res = _run(words, stdout=out, stderr=subprocess.PIPE, env=env)
    lines = res.stderr.splitlines()
    assert res.returncode == 2 and len(lines) == 1, res.stderr
    assert lines[0].startswith("posenc-np: error: ") and reason in lines[0]


def test_closed_pipe_ends_quietly():
    """``posenc-np golden list | head``: the reader is gone before anything is written."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        res = subprocess.run([sys.executable, "-m", "posenc_np", "golden", "list"], stdout=write_end,
                             stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert res.stderr == ""
    assert res.returncode == 128 + signal.SIGPIPE


LEAVES = [w for w in SUBCOMMANDS if w and not any(o[:len(w)] == w and len(o) > len(w) for o in SUBCOMMANDS)]


def test_one_spelling_of_the_progress_flag(capsys):
    """Every subcommand that shows progress takes --no-progress, and none takes --quiet."""
    helps = {}
    for words in LEAVES:
        with pytest.raises(SystemExit):
            cli.main([*words, "--help"])
        helps[" ".join(words)] = capsys.readouterr().out
    assert len(helps) == 6
    assert {c for c, text in helps.items() if "--no-progress" in text} == {
        "golden generate", "study extrapolation", "precision"}
    assert not [c for c, text in helps.items() if "--quiet" in text or "-q," in text]
