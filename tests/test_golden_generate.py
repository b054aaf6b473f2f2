"""generate never loses data: it refuses what it did not write, replaces or extends only its own
suites, writes atomically, survives a kill at any moment, and fails like a Unix tool."""

import json
import os
import random
import re
import signal
import subprocess
import sys
from pathlib import Path

import _golden_util
import pytest
from _golden_util import (
    ONE,
    REPO,
    SMALL,
    bad_rows,
    copy_suite,
    make_small_suite,
    warm_up,
)

from posenc_np import _version, cli
from posenc_np.golden import catalogue, runner, safe_io
from posenc_np.golden import format as fmt

small_suite = _golden_util.small_suite  # fixture

SMALL_NAMES = sorted(s.name for s in catalogue.cases(SMALL))


@pytest.fixture(scope="module")
def old_suite(tmp_path_factory):
    """The small suite as an older library version wrote it: every file differs from today's."""
    out = tmp_path_factory.mktemp("golden") / "old"
    version = _version.__version__
    _version.__version__ = "0.0.0+old"
    try:
        make_small_suite(out)
    finally:
        _version.__version__ = version
    return out


def snapshot(d: Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def error_line(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("posenc-np: error: "), captured.err
    return lines[0]


def gen(out, *extra) -> int:
    return cli.main(["golden", "generate", "--out", str(out), "--no-progress", "--only", *SMALL, *extra])


# --------------------------------------------------------------------------- refusing

def test_refuses_a_non_empty_directory_without_a_flag(small_suite, tmp_path, capsys):
    d = copy_suite(small_suite, tmp_path / "s")
    before = snapshot(d)
    assert cli.main(["golden", "generate", "--out", str(d), "--only", "rope.*", "--no-progress"]) == 2
    assert "is not empty; pass --update" in error_line(capsys)
    assert snapshot(d) == before


def test_refuses_a_users_index_even_with_force(tmp_path, capsys):
    (tmp_path / "index.json").write_text('{"my": "own data"}')
    (tmp_path / f"{ONE}.json").write_text("my notes")
    before = snapshot(tmp_path)
    for flag in ("--force", "--update"):
        assert gen(tmp_path, flag) == 2
        assert "holds no valid golden-suite index" in error_line(capsys)
    assert snapshot(tmp_path) == before


def test_refuses_our_suite_with_a_stranger_in_it(small_suite, tmp_path, capsys):
    d = copy_suite(small_suite, tmp_path / "s")
    (d / "notes.txt").write_text("mine")
    (d / "sub").mkdir()
    before = {p.name for p in d.iterdir()}
    assert gen(d, "--force") == 2
    assert "does not list as regular files (notes.txt, sub)" in error_line(capsys)
    assert {p.name for p in d.iterdir()} == before and (d / "notes.txt").read_text() == "mine"


def test_update_refuses_a_v1_suite_and_force_replaces_it(tmp_path, capsys):
    d = copy_suite(REPO / "vectors" / "v1", tmp_path / "v1")
    assert gen(d, "--update") == 2
    assert "version-1 suite" in error_line(capsys)
    assert gen(d, "--force") == 0
    assert sorted(p.name for p in d.iterdir()) == sorted(
        ["index.json", "SHA256SUMS"] + [f"{n}.{e}" for n in SMALL_NAMES for e in ("json", "npz")])
    assert not bad_rows(d)


# --------------------------------------------------------------------------- replacing and extending

def test_force_replaces_our_suite_with_the_selection(small_suite, tmp_path):
    d = copy_suite(small_suite, tmp_path / "s")
    assert cli.main(["golden", "generate", "--out", str(d), "--force", "--no-progress", "--format", "json",
                     "--only", "learned.*"]) == 0
    assert sorted(p.name for p in d.iterdir()) == ["SHA256SUMS", "index.json", "learned.lookup_and_scatter_add.json"]
    assert not bad_rows(d)


def test_update_with_only_keeps_the_rest_of_the_suite(small_suite, tmp_path):
    """The old tooling rewrote index.json to the --only cases: verify then failed the others."""
    d = copy_suite(small_suite, tmp_path / "s")
    assert cli.main(["golden", "generate", "--out", str(d), "--update", "--no-progress", "--only", "learned.*"]) == 0
    rows = runner.verify(d)
    assert [r.case for r in rows] == SMALL_NAMES and all(r.ok for r in rows)
    assert snapshot(d) == snapshot(small_suite)


def test_update_adds_cases_and_replaces_old_ones(old_suite, tmp_path):
    d = copy_suite(old_suite, tmp_path / "s")
    assert cli.main(["golden", "generate", "--out", str(d), "--update", "--no-progress",
                     "--only", ONE, "alibi.slopes.n8"]) == 0
    rows = runner.verify(d)
    assert sorted(r.case for r in rows) == sorted([*SMALL_NAMES, "alibi.slopes.n8"]) and all(r.ok for r in rows)
    assert fmt.parse_case((d / f"{ONE}.json").read_bytes(), "x.json")["library_version"] == _version.__version__
    other = "learned.lookup_and_scatter_add.json"
    assert (d / other).read_bytes() == (old_suite / other).read_bytes()


def test_no_temporary_files_after_success_and_stray_ones_are_reported_then_cleaned(small_suite, tmp_path):
    d = copy_suite(small_suite, tmp_path / "s")
    assert not [p for p in d.iterdir() if safe_io.TEMP_RE.match(p.name)]
    stray = d / f".posenc-np-tmp-0123abcd-{ONE}.json"
    stray.write_text("half written")
    assert "a temporary file of an interrupted generate" in bad_rows(d)[0].problem
    assert gen(d, "--update") == 0
    assert not stray.exists() and not bad_rows(d)


# --------------------------------------------------------------------------- kill at any moment

def _generate_in_child(out: Path, kill_at: int, count_file: Path | None = None, **kwargs) -> bool:
    """Run generate in a forked child that SIGKILLs itself before its ``kill_at``-th filesystem
    step (write, fsync, rename, unlink). Returns whether it was killed."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            steps = [0]

            def counted(fn):
                def step(*args, **kw):
                    steps[0] += 1
                    if steps[0] == kill_at:
                        os.kill(os.getpid(), signal.SIGKILL)
                    return fn(*args, **kw)
                return step

            for name in ("write", "fsync", "replace", "unlink"):
                setattr(os, name, counted(getattr(os, name)))
            runner.generate(out, **kwargs)
            if count_file is not None:
                count_file.write_text(str(steps[0]))
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) or os.WEXITSTATUS(status) == 0, "generate failed in the child"
    return os.WIFSIGNALED(status)


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["fresh", "force-over-old"])
def test_kill_at_random_moments(old_suite, tmp_path, scenario):
    """After a kill, every case file is byte-for-byte the old one or the new one, verify names
    every unfinished case, and rerunning generate finishes the suite as if nothing happened."""
    warm_up()
    if scenario == "fresh":
        kwargs = {"only": [ONE, "learned.*", "timing_signal.d7.*"]}
    else:  # keeps 2 of the old suite's 8 cases, drops their NPZ files
        kwargs = {"only": [ONE, "learned.*"], "formats": ("json",)}
    mode, resume = ("new", "update") if scenario == "fresh" else ("force", "force")
    new = tmp_path / "new"
    runner.generate(new, **kwargs)
    new_files, old_files = snapshot(new), ({} if scenario == "fresh" else snapshot(old_suite))
    selected = {n[:-5] for n in new_files if n.endswith(".json") and n != "index.json"}
    counting = tmp_path / "count"
    start = copy_suite(old_suite, tmp_path / "start") if scenario != "fresh" else tmp_path / "start"
    assert not _generate_in_child(start, 0, counting, mode=mode, **kwargs)
    steps = int(counting.read_text())
    rnd = random.Random(f"{scenario}-kills")
    for k in sorted({1, 2, steps - 1, *rnd.sample(range(3, steps - 1), 4)}):
        d = tmp_path / f"kill{k}"
        if scenario != "fresh":
            copy_suite(old_suite, d)
        assert _generate_in_child(d, k, mode=mode, **kwargs)
        for name, data in snapshot(d).items():
            if safe_io.TEMP_RE.match(name) or name in (fmt.INDEX, fmt.SUMS):
                continue
            assert data in (new_files.get(name), old_files.get(name)), f"kill at step {k}: {name} is neither"
        rows = runner.verify(d)
        named = {r.case for r in rows if not r.ok}
        if not (d / fmt.INDEX).exists():
            assert scenario == "fresh" and all(safe_io.TEMP_RE.match(p.name) for p in d.iterdir())
        else:
            ok = {r.case for r in rows if r.ok}
            assert selected <= ok | named, f"kill at step {k}: cases neither passing nor named"
            old_cases = {n.rsplit(".", 1)[0] for n in old_files}
            known = selected | old_cases | set(new_files) | set(old_files) | {fmt.SUMS}
            assert all(n in known or safe_io.TEMP_RE.match(n) for n in named), f"kill at step {k}: {named}"
        runner.generate(d, mode=resume, **kwargs)
        assert snapshot(d) == new_files, f"kill at step {k}: resuming did not finish the suite"


# --------------------------------------------------------------------------- the CLI fails like a Unix tool

def test_out_is_an_existing_file(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    assert gen(tmp_path / "f") == 2
    assert "exists and is not a directory" in error_line(capsys)


def test_out_below_a_file(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    assert gen(tmp_path / "f" / "sub" / "out") == 2
    assert re.search(r"cannot create .*: .*/f is not a directory", error_line(capsys))
    assert (tmp_path / "f").read_text() == "x"


def test_out_in_an_unwritable_place(tmp_path, capsys):
    if os.geteuid() == 0:
        target = Path("/proc") / f"posenc-np-test-{os.getpid()}" / "out"  # not even root writes here
    else:
        (tmp_path / "ro").mkdir(mode=0o500)
        target = tmp_path / "ro" / "out"
    assert gen(target) == 2
    error_line(capsys)
    assert not target.exists()


def test_only_matching_nothing_creates_nothing(tmp_path, capsys):
    out = tmp_path / "new" / "dir"
    assert cli.main(["golden", "generate", "--out", str(out), "--only", "no-such-case"]) == 2
    assert "matched no case" in error_line(capsys)
    assert not (tmp_path / "new").exists()


def test_force_and_update_are_exclusive(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        gen(tmp_path, "--force", "--update")
    assert exc.value.code == 2 and "not allowed with" in capsys.readouterr().err


def test_write_error_is_one_line(tmp_path, capsys, monkeypatch):
    def full(*_):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(safe_io, "atomic_write", full)
    assert gen(tmp_path / "out") == 2
    assert "No space left on device" in error_line(capsys)


@pytest.mark.slow  # two full generations of the 115 cases (~7 s each on a loaded 2-core box: the oracle, fsyncs)
def test_readme_main_job_runs_twice_and_reproduces_the_committed_suite(tmp_path):
    """The README's command works in a fresh directory and again on its own output (--force), and
    what it writes is byte for byte the committed vectors/v3."""
    readme = (REPO / "README.md").read_text()
    main_job = re.search(r"```bash\n(.*?)```", readme, flags=re.DOTALL).group(1).strip()
    commands = [c.strip().split()[1:] for c in main_job.split("&&") if c.strip().startswith("posenc-np")]
    assert [c[:2] for c in commands] == [["golden", "generate"], ["golden", "verify"]]
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        for _ in range(2):
            for words in commands:
                assert cli.main(words) == 0, words
    finally:
        os.chdir(cwd)
    out = tmp_path / commands[0][commands[0].index("--out") + 1]
    assert snapshot(out) == snapshot(REPO / "vectors" / "v3")


@pytest.mark.slow  # one full generation of version 2's 137 cases
def test_suite_v2_regenerates_byte_for_byte(tmp_path):
    assert cli.main(["golden", "generate", "--suite", "v2", "--out", str(tmp_path / "v2"), "--no-progress",
                     "--jobs", "1"]) == 0
    assert snapshot(tmp_path / "v2") == snapshot(REPO / "vectors" / "v2")


def test_suite_option(tmp_path, capsys):
    assert cli.main(["golden", "list", "--suite", "v2"]) == 0
    assert capsys.readouterr().out.endswith(f"{len(catalogue.cases(suite=2))} cases\n")
    assert len(catalogue.cases(suite=2)) < len(catalogue.cases()) == len(catalogue.cases(suite=3))
    with pytest.raises(SystemExit):
        cli.main(["golden", "list", "--suite", "v4"])
    assert "must be v2 or v3" in capsys.readouterr().err
    out = tmp_path / "s"
    assert gen(out, "--suite", "v2") == 0
    assert json.loads((out / "index.json").read_text())["schema_version"] == 2
    assert gen(out, "--update") == 2  # a v2 suite is not extended as v3
    assert "holds a version-2 suite" in error_line(capsys)
    assert gen(out, "--force") == 0  # replaced wholesale
    assert json.loads((out / "index.json").read_text())["schema_version"] == 3
    assert all(r.ok for r in runner.verify(out))


FEW = ["learned.*", "sinusoidal.*"]


@pytest.mark.slow
@pytest.mark.parametrize("flags", [[], ["--no-progress"]], ids=["default", "--no-progress"])
def test_generate_into_a_log_writes_no_progress(tmp_path, flags):
    """stderr a pipe (a redirected log): no progress bar or per-case lines, with or without the flag."""
    res = subprocess.run([sys.executable, "-m", "posenc_np", "golden", "generate", "--out", str(tmp_path / "o"),
                          *flags, "--only", *FEW, "--jobs", "1"], capture_output=True,
                         text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert res.returncode == 0 and res.stderr == ""
    assert f"wrote {len(catalogue.cases(FEW))} cases" in res.stdout


@pytest.mark.slow
@pytest.mark.parametrize("flags, shown", [([], True), (["--no-progress"], False)], ids=["default", "--no-progress"])
def test_generate_on_a_terminal_shows_progress_unless_told_not_to(tmp_path, flags, shown):
    """stderr a terminal (a pseudo-terminal here): the progress bar is drawn there, unless --no-progress."""
    import fcntl
    import pty
    import struct
    import termios

    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))  # tqdm draws nothing at width 0
    try:
        res = subprocess.run([sys.executable, "-m", "posenc_np", "golden", "generate", "--out", str(tmp_path / "o"),
                              *flags, "--only", *FEW, "--jobs", "1"], stdout=subprocess.PIPE,
                             stderr=follower, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})
        os.close(follower)
        follower = None
        terminal = b""
        while True:
            try:
                chunk = os.read(leader, 1 << 16)
            except OSError:  # EIO: the terminal has no writer left
                break
            if not chunk:
                break
            terminal += chunk
    finally:
        if follower is not None:
            os.close(follower)
        os.close(leader)
    assert res.returncode == 0 and f"wrote {len(catalogue.cases(FEW))} cases" in res.stdout
    assert (b"golden cases" in terminal or b"oracle: " in terminal) is shown, terminal
