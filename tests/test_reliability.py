"""Hostile files, endpoints and caches on the training, study and decoding surfaces (issue 26):
device files, FIFOs and directories in place of files, huge sizes in a checkpoint's config, a
foreign RNG state, inconsistent KV caches, and scheduler addresses that are not a Dask scheduler.
Every case is one ValueError/TypeError naming the file or argument (one ``error:`` line and
status 2 at the command line), never unbounded memory, a hang or a traceback."""

from __future__ import annotations

import http.server
import io
import json
import os
import socket
import threading
import zipfile

import numpy as np
import pytest

from posenc_np import cli
from posenc_np._files import npz_bytes, read_bounded
from posenc_np.model import KVCache, ModelConfig, Transformer
from posenc_np.optim import Adam
from posenc_np.study import StudyConfig, run_extrapolation
from posenc_np.study.executors import probe_scheduler, scheduler_endpoint
from posenc_np.study.store import ResultStore, read_json
from posenc_np.train import load_checkpoint, save_checkpoint

CFG = {"vocab_size": 10, "d_model": 8, "n_heads": 2, "n_layers": 2, "d_ff": 16, "max_len": 16, "position": "rope"}


def _model(seed: int = 0) -> Transformer:
    return Transformer(ModelConfig(**CFG, seed=seed))


def _hostile_paths(tmp_path):
    """(label, path) of things that are not a regular file."""
    (tmp_path / "dir").mkdir()
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "zero").symlink_to("/dev/zero")
    (tmp_path / "null").symlink_to("/dev/null")
    (tmp_path / "dangling").symlink_to(tmp_path / "nothing")
    return [(n, tmp_path / n) for n in ("dir", "fifo", "zero", "null", "dangling")]


# --------------------------------------------------------------------------- the one reader

def test_read_bounded_refuses_what_is_not_a_regular_file_and_bounds_the_rest(tmp_path):
    for label, path in _hostile_paths(tmp_path):
        with pytest.raises(ValueError, match=str(path)):
            read_bounded(path, 1 << 20, "x")
    big = tmp_path / "big"
    big.write_bytes(b"a" * 100)
    with pytest.raises(ValueError, match="100 bytes, more than the limit of 99"):
        read_bounded(big, 99)
    assert read_bounded(big, 100) == b"a" * 100
    assert len(read_bounded("/proc/cpuinfo", 1 << 20)) > 0  # a procfs file reports size 0


# --------------------------------------------------------------------------- checkpoints

@pytest.fixture
def saved(tmp_path):
    model = _model()
    path = tmp_path / "ck.npz"
    save_checkpoint(path, model, Adam(model.params), 1, np.random.default_rng(0).bit_generator.state)
    return path


def _with_meta(path, out, change) -> str:
    with zipfile.ZipFile(path) as zf:
        arrays = {n[:-4]: np.load(io.BytesIO(zf.read(n))) for n in zf.namelist()}
    meta = json.loads(arrays["meta"].tobytes())
    change(meta)
    arrays["meta"] = np.frombuffer(json.dumps(meta, default=np.ndarray.tolist).encode(), dtype=np.uint8)
    arrays = {k: (v if k == "meta" or not k.startswith("param.") else np.full_like(v, 7.0)) for k, v in arrays.items()}
    out.write_bytes(npz_bytes(arrays))
    return str(out)


def test_checkpoint_that_is_not_a_regular_file_is_one_clear_error(tmp_path):
    for label, path in _hostile_paths(tmp_path):
        with pytest.raises(ValueError, match=f"checkpoint {path}: (is|cannot open)") as info:
            load_checkpoint(path)
        assert "not a regular file" in str(info.value) or label == "dangling"
    with pytest.raises(FileNotFoundError):
        load_checkpoint(tmp_path / "missing.npz")


def test_checkpoint_larger_than_its_model_is_refused_before_reading(saved, tmp_path):
    padded = tmp_path / "padded.npz"
    padded.write_bytes(b"\0" * (20 << 20) + saved.read_bytes())  # a ZIP may start after other data
    with pytest.raises(ValueError, match=f"checkpoint {padded}: .* bytes, more than the .* a checkpoint of this"):
        load_checkpoint(padded)


def test_foreign_rng_states_fail_before_any_parameter_changes(saved, tmp_path):
    mt = np.random.Generator(np.random.MT19937(0)).bit_generator.state
    philox = np.random.Generator(np.random.Philox(0)).bit_generator.state
    foreign = [{"bit_generator": "Mystery", "state": {}}, {**mt, "bit_generator": "PCG64"}, [1, 2],
               {**mt, "state": {"key": list(range(10)), "pos": 1}}, {**philox, "state": {"counter": [1], "key": [1]}},
               {"bit_generator": "PCG64", "state": {"state": 2 ** 300, "inc": 1}, "has_uint32": 0, "uinteger": 0}]
    for i, state in enumerate(foreign):
        bad = _with_meta(saved, tmp_path / f"rng{i}.npz", lambda m, s=state: m.update(rng_state=s))
        target = _model(seed=3)
        before = {k: v.copy() for k, v in target.params.items()}
        with pytest.raises(ValueError, match="rng_state") as info:
            load_checkpoint(bad, model=target)
        assert bad in str(info.value)
        for k, v in before.items():
            np.testing.assert_array_equal(target.params[k], v, err_msg=str(state))


@pytest.mark.parametrize("key, value", [("vocab_size", 10 ** 12), ("d_model", 2 ** 40), ("n_layers", 10 ** 9),
                                        ("max_len", -1), ("position", "nope"), ("dtype", "complex128")])
def test_huge_or_invalid_config_in_a_checkpoint_names_the_file(saved, tmp_path, key, value):
    bad = _with_meta(saved, tmp_path / "cfg.npz", lambda m: m["model_config"].update({key: value}))
    with pytest.raises(ValueError, match="invalid model config") as info:
        load_checkpoint(bad)
    assert bad in str(info.value)


# --------------------------------------------------------------------------- KV cache and forward

def _cache(model, length: int = 3) -> KVCache:
    cache = model.init_cache()
    model.forward(np.zeros((1, length), dtype=int), cache=cache)
    return cache


def _bad_caches(model):
    c = _cache(model)
    k, v = c.keys, c.values
    yield "one layer of two", KVCache(c.length, k[:1], v[:1]), "2 layers"
    yield "length -1", KVCache(-1, k, v), "cache.length must be an int >= 0"
    yield "length ahead of the keys", KVCache(5, k, v), r"expected \(1, 2, 5, 4\)"
    yield "length 0 with keys", KVCache(0, k, v), r"expected \(1, 2, 0, 4\)"
    yield "float length", KVCache(3.0, k, v), "cache.length"
    yield "bool length", KVCache(True, k, v), "cache.length"
    yield "keys without values", KVCache(3, k, []), "value arrays"
    yield "keys of another batch", KVCache(3, [np.concatenate([a, a]) for a in k], v), "keys"
    yield "keys of another head dim", KVCache(3, [a[..., :2] for a in k], v), "keys"
    yield "lists as keys", KVCache(3, [a.tolist() for a in k], v), "keys"
    yield "not a cache", {"length": 0}, "cache must be a KVCache"


def test_decode_step_refuses_an_inconsistent_cache():
    model = _model()
    for label, cache, message in _bad_caches(model):
        with pytest.raises((ValueError, TypeError), match=message):
            model.decode_step(np.zeros(1, dtype=int), cache)
    good = _cache(model)
    assert model.decode_step(np.zeros(1, dtype=int), good).shape == (1, CFG["vocab_size"]) and good.length == 4


def test_forward_with_zero_tokens_is_a_clear_error_and_zero_sequences_are_empty():
    model = _model()
    with pytest.raises(ValueError, match="at least one position"):
        model.forward(np.zeros((2, 0), dtype=int))
    assert model.forward(np.zeros((0, 3), dtype=int)).shape == (0, 3, CFG["vocab_size"])


# --------------------------------------------------------------------------- the study store

TINY = {"parts": ("tasks",), "training": ("fixed",), "seeds": 1, "encodings": ["none"], "fusions": ("add",),
        "tasks": ["copy"], "train_len": 2, "alphabet": 4, "d_model": 8, "n_heads": 2, "n_layers": 1, "d_ff": 8,
        "steps": 2, "batch_size": 4, "eval_sequences": 4, "eval_factors": (1, 2), "jobs": 1}


def test_study_files_that_are_not_regular_files_read_as_missing(tmp_path):
    for label, path in _hostile_paths(tmp_path):
        assert read_json(path) is None, label
    for label, data in (("NaN", b'{"a": NaN}'), ("not UTF-8", b"\xff"), ("deep", b"[" * 100000),
                        ("duplicate key", b'{"a": 1, "a": 1}'), ("empty", b"")):
        (tmp_path / "f.json").write_bytes(data)
        assert read_json(tmp_path / "f.json") is None, label


def test_a_directory_in_place_of_a_cell_file_is_named_before_any_cell_runs(tmp_path):
    from posenc_np.study import grid

    cfg = StudyConfig(**TINY).validate()
    store = ResultStore(tmp_path, {})
    cell = grid(cfg)[0]
    os.makedirs(store.path(cell))
    with pytest.raises(ValueError, match="is a directory, not a file; remove it"):
        run_extrapolation(tmp_path, StudyConfig(**TINY), progress=False)


def test_hostile_cell_files_are_rerun_and_replaced(tmp_path):
    run_extrapolation(tmp_path, StudyConfig(**TINY), progress=False)
    cell = next((tmp_path / "cells").iterdir())
    good = json.loads(cell.read_bytes())
    for label in ("fifo", "zero", "garbage"):
        cell.unlink()
        if label == "fifo":
            os.mkfifo(cell)
        elif label == "zero":
            cell.symlink_to("/dev/zero")
        else:
            cell.write_bytes(os.urandom(512))
        run_extrapolation(tmp_path, StudyConfig(**TINY), progress=False)
        doc = json.loads(cell.read_bytes())
        assert cell.is_file() and not cell.is_symlink() and doc["status"] == "ok" and doc["cell"] == good["cell"], label


# --------------------------------------------------------------------------- the command line

def test_empty_parts_is_one_error_line(capsys, tmp_path):
    with pytest.raises(SystemExit) as exc:
        cli.main(["study", "extrapolation", "--out", str(tmp_path), "--parts", ""])
    err = capsys.readouterr().err.splitlines()
    assert exc.value.code == 2 and len(err) == 1 and "--parts: must name at least one entry" in err[0]


# --------------------------------------------------------------------------- scheduler endpoints

@pytest.mark.parametrize("address, message", [
    ("inproc://127.0.0.1/1/2", "only tcp://host:port"), ("ucx://127.0.0.1:8786", "only tcp://host:port"),
    ("tls://h:1", "only tcp://host:port"), ("garbage", "not an address"), ("tcp://:8786", "not an address"),
    ("tcp://h:99999", "not an address"), ("tcp://h:port", "not an address"), ("", "not an address")])
def test_scheduler_addresses_that_are_not_tcp_are_refused(address, message):
    with pytest.raises(ValueError, match=message):
        scheduler_endpoint(address)


def test_scheduler_address_errors_at_the_command_line_are_one_line(capsys, tmp_path):
    pytest.importorskip("distributed")
    for address in ("inproc://x", "ucx://h:1", "what?"):
        code = cli.main(["study", "extrapolation", "--out", str(tmp_path), "--quick", "--scheduler", address])
        err = capsys.readouterr().err.splitlines()
        assert code == 2 and len(err) == 1 and err[0].startswith("posenc-np: error: --scheduler"), err


class _Listener:
    """A local TCP server that accepts and then does ``behaviour(conn)`` in a thread."""

    def __init__(self, behaviour):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.address = f"tcp://127.0.0.1:{self.sock.getsockname()[1]}"
        self.conns = []
        self.thread = threading.Thread(target=self._serve, args=(behaviour,), daemon=True)
        self.thread.start()

    def _serve(self, behaviour):
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        self.conns.append(conn)
        behaviour(conn)

    def close(self):
        for conn in self.conns:
            conn.close()
        self.sock.close()


def _garbage(conn):
    conn.sendall(b"\xff" * 16)


def _closes(conn):
    conn.close()


def _short(conn):
    conn.sendall((100).to_bytes(8, "little") + b"x" * 10)  # promises 100 bytes, sends 10, then stays silent


@pytest.mark.parametrize("behaviour, message", [
    (lambda conn: None, "no Dask handshake .* within 0.5 s"),
    (_garbage, "is not a Dask scheduler"),
    (_closes, "closed the connection during the Dask handshake"),
    (_short, "no Dask handshake .* within 0.5 s")])
def test_a_server_that_is_not_a_dask_scheduler_fails_within_the_deadline(behaviour, message):
    server = _Listener(behaviour)
    try:
        with pytest.raises(ValueError, match=message):
            probe_scheduler(server.address, 0.5)
    finally:
        server.close()


def test_an_http_server_is_not_a_dask_scheduler():
    httpd = http.server.HTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        with pytest.raises(ValueError, match="no Dask handshake"):  # HTTP waits for a request
            probe_scheduler(f"tcp://127.0.0.1:{httpd.server_address[1]}", 0.5)
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_no_listener_is_cannot_reach():
    sock = socket.create_server(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    with pytest.raises(ValueError, match="cannot reach the Dask scheduler"):
        probe_scheduler(f"tcp://127.0.0.1:{port}", 0.5)
