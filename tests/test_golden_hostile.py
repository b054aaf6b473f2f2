"""Hostile files: each one is a FAIL row naming the file, never a hang, a traceback or a huge
allocation, and the other cases are still checked. Every test runs verify under a time and
memory bound (``bounded``: tracemalloc peak, plus an alarm so that a regression fails instead
of hanging the suite)."""

import io
import json
import os
import re
import signal
import struct
import zipfile
from contextlib import contextmanager

import _golden_util
import numpy as np
import pytest
from _golden_util import (
    ONE,
    bounded,
    case_doc,
    copy_suite,
    reseal,
    rewrite_case,
)

from posenc_np._files import read_bounded
from posenc_np.golden import format as fmt
from posenc_np.golden import runner, safe_io

small_suite = _golden_util.small_suite  # fixture
suite = _golden_util.suite  # fixture

JSON, NPZ = f"{ONE}.json", f"{ONE}.npz"


@contextmanager
def alarm(seconds=20):
    def boom(*_):
        raise TimeoutError(f"verify did not finish in {seconds} s")
    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def only_bad(d, case, message, *, megabytes=64.0):
    """verify ``d`` within bounds; exactly ``case`` fails, with ``message``; every other case passes."""
    with alarm(), bounded(megabytes=megabytes):
        rows = runner.verify(d)
    bad = [r for r in rows if not r.ok]
    assert [r.case for r in bad] == [case], runner.format_table(bad)
    assert message in bad[0].problem, bad[0].problem
    assert len(rows) > 1
    return bad[0]


# --------------------------------------------------------------------------- not a regular file

def test_fifo(suite):
    (suite / JSON).unlink()
    os.mkfifo(suite / JSON)
    only_bad(suite, ONE, f"{JSON}: is a FIFO, not a regular file")


def test_symlink_to_dev_zero(suite):
    (suite / JSON).unlink()
    (suite / JSON).symlink_to("/dev/zero")
    only_bad(suite, ONE, f"{JSON}: is a symbolic link, not a regular file (symbolic links are never followed)")


def test_symlink_inside_the_directory_is_refused_too(suite):
    other = "sinusoidal.concat.d8.int.json"
    (suite / JSON).unlink()
    (suite / JSON).symlink_to(other)
    only_bad(suite, ONE, "is a symbolic link")


def test_directory_named_like_a_case_file(suite):
    (suite / JSON).unlink()
    (suite / JSON).mkdir()
    only_bad(suite, ONE, f"{JSON}: is a directory, not a regular file")
    (suite / "x.json").mkdir()
    assert "x.json: not listed in index.json (a directory)" in {r.problem for r in runner.verify(suite)}


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a chmod-000 file anyway; the injected-EIO test covers it")
def test_unreadable_file(suite):
    (suite / JSON).chmod(0)
    only_bad(suite, ONE, f"{JSON}: cannot open: Permission denied")


def test_read_error(suite, monkeypatch):
    """An I/O error while reading one case file (injected into the one bounded reader's file
    object) is that case's FAIL row."""
    from posenc_np import _files

    real_open = _files.open_regular

    class FailingFile(io.BufferedReader):
        def read1(self, n=-1):
            raise OSError(5, "Input/output error")

    def open_failing(name, *args, **kwargs):
        fh = real_open(name, *args, **kwargs)
        if os.fspath(name).endswith(JSON):
            raw = fh.detach()
            return FailingFile(raw)
        return fh

    monkeypatch.setattr(_files, "open_regular", open_failing)
    only_bad(suite, ONE, f"{JSON}: cannot read: Input/output error")


def test_file_over_the_size_limit_is_not_read(suite):
    os.truncate(suite / JSON, fmt.MAX_CASE_FILE_BYTES + 1)  # sparse: costs no disk
    only_bad(suite, ONE, f"{JSON}: {fmt.MAX_CASE_FILE_BYTES + 1} bytes, more than the limit", megabytes=8)


def test_directory_over_the_suite_size_limit_is_not_read(suite):
    for i in range(2):
        (suite / f"big{i}.bin").touch()
        os.truncate(suite / f"big{i}.bin", runner.MAX_SUITE_BYTES // 2 + 1)
    with alarm(), bounded(megabytes=8):
        rows = runner.verify(suite)
    assert len(rows) == 1 and "not a golden suite" in rows[0].problem


def test_directory_with_too_many_entries(tmp_path, monkeypatch):
    monkeypatch.setattr(safe_io, "MAX_DIR_ENTRIES", 50)  # the mechanism, without creating 10 000 files
    for i in range(51):
        (tmp_path / f"f{i}").touch()
    with alarm(), bounded(megabytes=8):
        rows = runner.verify(tmp_path)
    assert len(rows) == 1 and "more than 50 entries" in rows[0].problem


# --------------------------------------------------------------------------- hostile JSON

def test_json_nested_100000_deep(suite):
    (suite / JSON).write_text("[" * 100_000 + "]" * 100_000)
    reseal(suite)
    only_bad(suite, ONE, "JSON nested too deeply")


def test_5000_digit_integer_literal(suite):
    text = (suite / JSON).read_text()
    (suite / JSON).write_text(re.sub(r'"abs": [^,\n]*', '"abs": ' + "9" * 5000, text, count=1))
    reseal(suite)
    only_bad(suite, ONE, "integer literal of 5000 characters")


def test_hostile_index_fails_as_one_row_and_lists_the_rest(suite):
    (suite / "index.json").write_text('{"cases": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with alarm(), bounded():
        rows = runner.verify(suite)
    assert rows[0].case == "index.json" and "nested too deeply" in rows[0].problem
    assert all("not checked" in r.problem for r in rows[1:]) and len(rows) == len(list(suite.iterdir()))


# --------------------------------------------------------------------------- hostile NPZ

def _npz_replacing(suite, member: str, payload: bytes, *, compress=zipfile.ZIP_DEFLATED) -> None:
    src = (suite / NPZ).read_bytes()
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(src)) as zin, zipfile.ZipFile(out, "w", compression=compress) as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, payload if info.filename == member else zin.read(info))
    (suite / NPZ).write_bytes(out.getvalue())
    reseal(suite)


def _npy_header(shape, descr="<f8") -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False, "shape": shape})
    return buf.getvalue()


def test_npy_header_claiming_10_to_the_12_elements(suite):
    _npz_replacing(suite, "outputs.encoding.npy", _npy_header((10**6, 10**6)) + b"\0" * 64)
    only_bad(suite, ONE, "header claims shape (1000000, 1000000)")


def test_npy_header_shape_not_matching_the_data(suite):
    _npz_replacing(suite, "outputs.encoding.npy", _npy_header((20, 8)) + b"\0" * 8)
    only_bad(suite, ONE, "the member holds 8 data bytes")


def test_zip_bomb_over_the_total_limit(suite):
    zeros = _npy_header((5 << 20,)) + bytes(40 << 20)  # 40 MiB of zeros, ~40 KB deflated
    _npz_replacing(suite, "outputs.encoding.npy", zeros)
    assert (suite / NPZ).stat().st_size < 100_000
    only_bad(suite, ONE, f"bytes uncompressed (limit {fmt.MAX_NPZ_UNCOMPRESSED})")


def test_zip_bomb_over_the_compression_ratio(suite):
    zeros = _npy_header((1 << 20,)) + bytes(8 << 20)  # 8 MiB: within the total, ~1000x compressed
    _npz_replacing(suite, "outputs.encoding.npy", zeros)
    only_bad(suite, ONE, f"(limit: {fmt.MAX_COMPRESSION_RATIO}x + 64 KiB)")


def test_zip_member_lying_about_its_size(suite):
    """A member that declares 1 KB but inflates to 8 MiB is read only up to what it declares."""
    zeros = _npy_header((1 << 20,)) + bytes(8 << 20)
    _npz_replacing(suite, "outputs.encoding.npy", zeros)
    data = bytearray((suite / NPZ).read_bytes())
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as zf:
        info = zf.getinfo("outputs.encoding.npy")
    struct.pack_into("<I", data, info.header_offset + 22, 1000)  # local header: uncompressed size
    cd = data.index(b"PK\x01\x02")  # find the member's central-directory entry
    while data[cd + 46: cd + 46 + struct.unpack_from("<H", data, cd + 28)[0]] != info.filename.encode():
        cd = data.index(b"PK\x01\x02", cd + 4)
    struct.pack_into("<I", data, cd + 24, 1000)  # central directory: uncompressed size
    (suite / NPZ).write_bytes(bytes(data))
    reseal(suite)
    only_bad(suite, ONE, "not a readable zip archive", megabytes=16)


def test_zip_with_too_many_members(suite):
    src = (suite / NPZ).read_bytes()
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(src)) as zin, zipfile.ZipFile(out, "w") as zout:
        for info in zin.infolist():
            zout.writestr(info.filename, zin.read(info))
        for i in range(fmt.MAX_NPZ_MEMBERS + 1):
            zout.writestr(f"x{i}.npy", b"")
    (suite / NPZ).write_bytes(out.getvalue())
    reseal(suite)
    only_bad(suite, ONE, "exceeds the limits")


# --------------------------------------------------------------------------- cost bounded by the catalogue

@pytest.fixture(scope="module")
def alibi_suite(tmp_path_factory):
    out = tmp_path_factory.mktemp("golden") / "alibi"
    runner.generate(out, only=["alibi.bias.causal.h4_q5_k7*", "alibi.slopes.n8"], formats=("json",))
    return out


@pytest.mark.parametrize("rename", [False, True], ids=["known-name", "unknown-name"])
def test_crafted_alibi_bias_with_q_len_k_len_46000(alibi_suite, tmp_path, rename):
    """A 2 KB case asking for two (4, 46000, 46000) float64 arrays: the library is only ever run
    on the catalogue's parameters, and an unknown case is not run at all."""
    d = copy_suite(alibi_suite, tmp_path / "s")
    name = "alibi.bias.causal.h4_q5_k7"
    doc = case_doc(d, name)
    doc["params"].update(q_len=46000, k_len=46000, q_offset=0)
    if rename:
        (d / f"{name}.json").unlink()
        doc["name"] = name = "alibi.bias.crafted"
        index = json.loads((d / "index.json").read_text())
        for c in index["cases"]:
            if c["name"] == "alibi.bias.causal.h4_q5_k7":
                c["name"], c["files"][0]["path"] = name, f"{name}.json"
        (d / "index.json").write_text(json.dumps(index))
    rewrite_case(d, doc, name)
    assert (d / f"{name}.json").stat().st_size < 4096
    with alarm(), bounded(seconds=5, megabytes=16):
        rows = runner.verify(d)
    row = next(r for r in rows if r.case == name)
    if rename:
        assert row.status == runner.UNKNOWN
    else:
        assert row.status == runner.FAIL and "params differs from the catalogue" in row.problem
    assert all(r.ok for r in rows if r is not row)


# --------------------------------------------------------------------------- load_case is as careful

def test_load_case_refuses_fifo_and_symlink(tmp_path):
    from posenc_np.testing import load_case

    os.mkfifo(tmp_path / "x.json")
    (tmp_path / "y.json").symlink_to("/dev/zero")
    with alarm(5):
        with pytest.raises(fmt.GoldenFormatError, match="is a FIFO"):
            load_case(tmp_path / "x.json")
        with pytest.raises(fmt.GoldenFormatError, match="symbolic link"):
            load_case(tmp_path / "y.json")


# --------------------------------------------------------------------------- the library's one reader

def _hostile(tmp_path, what: str):
    """A path in ``tmp_path`` holding ``what`` where a file is expected."""
    path = tmp_path / re.sub(r"\W", "_", what)
    if what == "link to /dev/zero":
        path.symlink_to("/dev/zero")
    elif what == "FIFO":
        os.mkfifo(path)
    elif what == "directory":
        path.mkdir()
    elif what == "socket":
        import socket

        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()
    elif what == "huge file":
        path.touch()
        os.truncate(path, 1 << 40)  # sparse: a terabyte that costs no disk
    return path


@pytest.mark.parametrize("what, message", [
    ("link to /dev/zero", "is a character device, not a regular file"),
    ("FIFO", "is a FIFO, not a regular file"),
    ("directory", "is a directory, not a regular file"),
    ("socket", "is a socket, not a regular file"),
    ("huge file", f"{1 << 40} bytes, more than the limit of {1 << 20}"),
])
def test_read_bounded_refuses_each_hostile_file_in_bounded_time_and_memory(tmp_path, what, message):
    path = _hostile(tmp_path, what)
    with alarm(5), bounded(seconds=2, megabytes=4):
        with pytest.raises(ValueError) as exc:
            read_bounded(path, 1 << 20, "study cell")
    assert str(exc.value) == f"study cell {path}: {message}"


def test_read_bounded_suite_policy_never_follows_a_link(tmp_path):
    target = tmp_path / "real.json"
    target.write_bytes(b"{}")
    (tmp_path / "link.json").symlink_to(target)
    assert read_bounded(tmp_path / "link.json", 10) == b"{}"  # a config in a Hugging Face cache is a link
    with pytest.raises(fmt.GoldenFormatError, match="link.json: is a symbolic link, not a regular file "
                                                    r"\(symbolic links are never followed\)"):
        safe_io.read_file(str(tmp_path / "link.json"), limit=10)


def test_read_bounded_stops_reading_a_file_that_outgrows_its_size(tmp_path):
    """/proc files claim 0 bytes and hold more: the read itself is bounded, not only the size check."""
    with pytest.raises(ValueError, match=r"^/proc/self/maps: grew beyond the limit of 64 bytes while being read$"):
        read_bounded("/proc/self/maps", 64)
    assert len(read_bounded("/proc/self/maps", 1 << 24)) > 64


def test_read_bounded_a_fifo_swapped_in_after_the_check_does_not_block(tmp_path, monkeypatch):
    regular = tmp_path / "regular"
    regular.write_bytes(b"x")
    fifo = _hostile(tmp_path, "FIFO")
    real_stat = os.stat
    monkeypatch.setattr(os, "stat", lambda p, **kw: real_stat(regular if os.fspath(p) == str(fifo) else p, **kw))
    with alarm(5), pytest.raises(ValueError, match=f"^{re.escape(str(fifo))}: is a FIFO, not a regular file$"):
        read_bounded(fifo, 10)


def test_read_bounded_missing_file_and_error_class(tmp_path):
    with pytest.raises(ValueError, match=f"^checkpoint {re.escape(str(tmp_path))}/nope: cannot open: No such file"):
        read_bounded(tmp_path / "nope", 10, "checkpoint")
    with pytest.raises(fmt.GoldenFormatError):
        read_bounded(tmp_path / "nope", 10, error=fmt.GoldenFormatError)
    (tmp_path / "ok").write_bytes(b"0123456789")
    assert read_bounded(tmp_path / "ok", 10) == b"0123456789"
    with pytest.raises(ValueError, match="10 bytes, more than the limit of 9"):
        read_bounded(tmp_path / "ok", 9)
