"""Checkpoints and the training loop under faults (issue 13): nothing half-applied, hostile
files rejected with the path named, temporary files cleaned up, divergence stopped before it
reaches the parameters, and every argument checked before step 1."""

import io
import json
import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest

from posenc_np.model import ModelConfig, Transformer
from posenc_np.optim import Adam, clip_grad_norm, cosine_schedule
from posenc_np.study import CopyTask
from posenc_np.train import evaluate, load_checkpoint, save_checkpoint, train


def small_model(position="learned", seed=0):
    return Transformer(ModelConfig(vocab_size=10, d_model=8, n_heads=2, n_layers=1, d_ff=16, max_len=16,
                                   position=position, seed=seed))


@pytest.fixture
def checkpoint(tmp_path):
    """A real checkpoint after one step, and the model it was saved from."""
    model = small_model()
    opt = Adam(model.params, lr=0.01)
    model.loss(*CopyTask(3, alphabet=8).sample(np.random.default_rng(0), 4), backward=True)
    opt.step(model.grads)
    path = tmp_path / "ck.npz"
    save_checkpoint(path, model, opt, 1, np.random.default_rng(5).bit_generator.state, extra={"k": 1})
    return path, model


def _members(path) -> dict:
    with zipfile.ZipFile(path) as zf:
        return {name: zf.read(name) for name in zf.namelist()}


def _rewrite(path, out, *, drop=(), replace=None, meta=None):
    """Copy checkpoint ``path`` to ``out`` without members ``drop``, with members ``replace``
    (name -> array) and with ``meta`` (a function of the meta dict)."""
    members = _members(path)
    with zipfile.ZipFile(out, "w") as zf:
        for name, raw in members.items():
            key = name[:-4]
            if key in drop:
                continue
            if key == "meta" and meta is not None:
                doc = meta(json.loads(np.load(io.BytesIO(raw)).tobytes()))
                arr = np.frombuffer(json.dumps(doc).encode(), dtype=np.uint8)
                raw = _npy(arr)
            elif replace and key in replace:
                raw = _npy(replace.pop(key))
            zf.writestr(name, raw)
        for key, arr in (replace or {}).items():
            zf.writestr(key + ".npy", _npy(arr))
    return out


def _npy(arr) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=True)  # (the pickled-member case needs a pickle)
    return buf.getvalue()


def _bad_checkpoints(path, tmp_path):
    """(label, file, expected message) for every way a checkpoint can be wrong."""
    w = np.load(path)["param.tok_emb.weight"]
    nan = w.copy()
    nan[0, 0] = np.nan
    yield "missing Adam moment", _rewrite(path, tmp_path / "a.npz", drop={"adam.v.ln_f.beta"}), "missing.*adam.v.ln_f.beta"
    yield "unknown member", _rewrite(path, tmp_path / "b.npz", replace={"junk": np.zeros(2)}), "unexpected.*junk"
    yield "foreign RNG state", _rewrite(path, tmp_path / "c.npz", meta=lambda m: {
        **m, "rng_state": {"bit_generator": "Mystery", "state": {}}}), "rng_state must be the state dict"
    yield "malformed RNG state", _rewrite(path, tmp_path / "d.npz", meta=lambda m: {
        **m, "rng_state": {**m["rng_state"], "state": {"state": "x"}}}), "not a valid PCG64 state"
    yield "NaN parameter", _rewrite(path, tmp_path / "e.npz", replace={"param.tok_emb.weight": nan}), "NaN or inf"
    yield "integer parameter", _rewrite(path, tmp_path / "f.npz", replace={
        "param.tok_emb.weight": w.astype(np.int32)}), "int32.*expected float32"
    yield "wrong shape", _rewrite(path, tmp_path / "g.npz", replace={"param.tok_emb.weight": w[:3]}), r"\(3, 8\)"
    yield "negative step", _rewrite(path, tmp_path / "h.npz", meta=lambda m: {**m, "step": -5}), "step must be"
    yield "fractional step", _rewrite(path, tmp_path / "i.npz", meta=lambda m: {**m, "step": 3.7}), "step must be"
    yield "boolean step", _rewrite(path, tmp_path / "j.npz", meta=lambda m: {**m, "step": True}), "step must be"
    yield "bad optimizer", _rewrite(path, tmp_path / "k.npz", meta=lambda m: {
        **m, "optimizer": {**m["optimizer"], "betas": [0.9, 1.5]}}), r"betas must lie in \[0, 1\)"
    yield "NaN moment", _rewrite(path, tmp_path / "l.npz", replace={"adam.m.tok_emb.weight": nan}), "NaN or inf"
    yield "unknown config key", _rewrite(path, tmp_path / "m.npz", meta=lambda m: {
        **m, "model_config": {**m["model_config"], "wings": 2}}), "invalid model config"
    yield "pickled member", _rewrite(path, tmp_path / "n.npz", replace={
        "param.tok_emb.weight": np.array([{"a": 1}], dtype=object)}), "object.*expected float32"
    raw = path.read_bytes()
    for label, data in (("zero bytes", b""), ("truncated", raw[: len(raw) // 2]), ("garbage", os.urandom(4096)),
                        ("flipped byte", raw[:2000] + bytes([raw[2000] ^ 0xFF]) + raw[2001:])):
        bad = tmp_path / f"{label.replace(' ', '_')}.npz"
        bad.write_bytes(data)
        yield label, bad, "not a readable checkpoint|is truncated|not a valid NPY|entry|CRC"


def test_every_bad_checkpoint_is_a_value_error_naming_the_path_and_changes_nothing(checkpoint, tmp_path):
    path, saved = checkpoint
    cases = list(_bad_checkpoints(path, tmp_path))
    assert len(cases) == 18
    for label, bad, message in cases:
        target = small_model(seed=9)
        before = {k: v.copy() for k, v in target.params.items()}
        with pytest.raises(ValueError, match=message) as info:
            load_checkpoint(bad, model=target)
        assert str(bad) in str(info.value), label
        for k, v in before.items():  # nothing assigned
            np.testing.assert_array_equal(target.params[k], v, err_msg=label)
        with pytest.raises(ValueError):
            load_checkpoint(bad)
    with pytest.raises(FileNotFoundError):
        load_checkpoint(tmp_path / "missing.npz")
    # the intact file still loads
    ck = load_checkpoint(path)
    assert ck.step == 1 and ck.extra == {"k": 1}
    for k, v in saved.params.items():
        np.testing.assert_array_equal(ck.model.params[k], v)


def _dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    return int(proc.stdout)


def test_save_sweeps_temporaries_of_dead_writers_and_keeps_live_ones(checkpoint, tmp_path):
    """A killed save left ck.npz.tmp<pid> behind forever (6 of 30 kills)."""
    path, model = checkpoint
    dead = tmp_path / f"ck.npz.tmp{_dead_pid()}"
    live = tmp_path / f"ck.npz.tmp{os.getppid()}"  # our parent is alive: its file may be in progress
    other = tmp_path / "other.npz.tmp1"
    for f in (dead, live, other):
        f.write_bytes(b"partial")
    save_checkpoint(path, model, Adam(model.params), 2, np.random.default_rng(0).bit_generator.state)
    assert not dead.exists() and live.exists() and other.exists()
    assert load_checkpoint(path).step == 2


def test_failed_save_removes_its_temporary_and_keeps_the_old_file(checkpoint, monkeypatch):
    path, model = checkpoint
    before = path.read_bytes()

    def broken(fd):  # the bytes are written, the disk is full when they are flushed
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", broken)
    with pytest.raises(OSError, match="No space"):
        save_checkpoint(path, model, Adam(model.params), 3, np.random.default_rng(0).bit_generator.state)
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == ["ck.npz"]


def test_save_refuses_to_clobber_and_refuses_bad_state(checkpoint, tmp_path):
    path, model = checkpoint
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    rng_state = np.random.default_rng(0).bit_generator.state
    with pytest.raises(ValueError, match="not a posenc_np checkpoint; refusing to overwrite"):
        save_checkpoint(notes, model, Adam(model.params), 1, rng_state)
    assert notes.read_text() == "mine"
    with pytest.raises(ValueError, match="is a directory"):
        save_checkpoint(tmp_path, model, Adam(model.params), 1, rng_state)
    with pytest.raises(ValueError, match="does not exist"):
        save_checkpoint(tmp_path / "no" / "ck.npz", model, Adam(model.params), 1, rng_state)
    with pytest.raises(ValueError, match="rng_state"):
        save_checkpoint(path, model, Adam(model.params), 1, {"bit_generator": "PCG64"})
    with pytest.raises(ValueError, match="step must be an integer >= 0"):
        save_checkpoint(path, model, Adam(model.params), -1, rng_state)
    with pytest.raises(TypeError, match="optimizer must be the posenc_np.optim.Adam created over model.params"):
        save_checkpoint(path, model, Adam(small_model().params), 1, rng_state)
    with pytest.raises(TypeError, match="JSON"):
        save_checkpoint(path, model, Adam(model.params), 1, rng_state, extra={"x": object()})


def test_train_checks_everything_before_step_one(tmp_path):
    """train(min_lr=nan) reported 'lr' after a step; a checkpoint path in a missing directory failed
    only after checkpoint_every steps."""
    task = CopyTask(3, alphabet=8)
    steps_run = []
    kw = {"progress": False, "callback": lambda m: steps_run.append(m["step"])}
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    bad = [
        ({"min_lr": float("nan")}, ValueError, "min_lr must be finite"),
        ({"min_lr": 1.0, "lr": 0.1}, ValueError, r"min_lr \(1.0\) must be <= lr"),
        ({"warmup": -1}, ValueError, "warmup must be an integer >= 0"),
        ({"betas": 0.9}, TypeError, "betas must be a pair"),
        ({"eps": 0.0}, ValueError, "eps must be > 0"),
        ({"start_step": 9}, ValueError, "start_step must be an integer <= 5"),
        ({"checkpoint_path": tmp_path / "missing" / "ck.npz", "checkpoint_every": 3}, ValueError, "does not exist"),
        ({"checkpoint_path": notes, "checkpoint_every": 3}, ValueError, "refusing to overwrite"),
        ({"checkpoint_path": tmp_path / "ck.npz"}, ValueError, "checkpoint_path needs checkpoint_every"),
        ({"rng": 3}, TypeError, "rng must be a numpy.random.Generator"),
        ({"optimizer": Adam(small_model().params)}, TypeError, "created over model.params"),
        ({"blas_threads": 0}, ValueError, "blas_threads must be an integer >= 1"),
        ({"callback": 3}, TypeError, "callback must be callable"),
    ]
    for args, exc, message in bad:
        model = small_model()
        before = {k: v.copy() for k, v in model.params.items()}
        with pytest.raises(exc, match=message):
            train(model, task, 5, **{**kw, **args})
        assert steps_run == [], args
        assert all(np.array_equal(model.params[k], v) for k, v in before.items())
    with pytest.raises(TypeError, match="task must have a sample"):
        train(small_model(), object(), 5, **kw)
    assert notes.read_text() == "mine"


def test_divergence_stops_before_the_parameters_change(tmp_path):
    """NaN/inf gradients passed clip_grad_norm and turned every parameter into NaN."""
    grads = {"a": np.array([np.nan, 1.0]), "b": np.ones(2)}
    with pytest.raises(ValueError, match=r"grads\['a'\] holds NaN or inf"):
        clip_grad_norm(grads, 1.0)
    assert grads["b"].tolist() == [1.0, 1.0]  # nothing scaled
    params = {"a": np.zeros(2), "b": np.zeros(2)}
    opt = Adam(params)
    with pytest.raises(ValueError, match=r"grads\['a'\] holds NaN or inf"):
        opt.step(grads)
    assert opt.t == 0 and not params["a"].any() and not opt.m["b"].any()

    class Exploding:  # a task whose second batch carries an out-of-range embedding gradient
        def __init__(self):
            self.calls = 0

        def sample(self, rng, batch_size):
            self.calls += 1
            return CopyTask(3, alphabet=8).sample(rng, batch_size)

    model = small_model()
    original_backward = model.backward

    def backward(dlogits):
        original_backward(dlogits)
        if task.calls == 2:
            model.grads["ln_f.gamma"][0] = np.inf

    model.backward = backward
    task = Exploding()
    path = tmp_path / "ck.npz"
    for clip in (1.0, None):
        task.calls = 0
        with pytest.raises(ValueError, match=r"step 1: grads\['ln_f.gamma'\] holds NaN or inf"):
            train(model, task, 4, clip=clip, progress=False, checkpoint_path=path, checkpoint_every=1)
        assert all(np.all(np.isfinite(v)) for v in model.params.values())
        assert load_checkpoint(path).step == 1  # the last good checkpoint is intact


def test_schedule_and_evaluate_arguments():
    with pytest.raises(ValueError, match="lr must be finite"):
        cosine_schedule(0, total=10, lr=float("nan"))
    with pytest.raises(ValueError, match="min_lr must be finite"):
        cosine_schedule(0, total=10, lr=1.0, min_lr=float("inf"))
    model = small_model()
    tokens, targets = CopyTask(3, alphabet=8).sample(np.random.default_rng(0), 4)
    for bs in (-1, 0):
        with pytest.raises(ValueError, match="batch_size must be an integer >= 1"):
            evaluate(model, tokens, targets, batch_size=bs)
    with pytest.raises(ValueError, match="one shape"):
        evaluate(model, tokens, targets[:, :-1])
    none_scored = evaluate(model, tokens, np.full_like(targets, -100))
    assert none_scored["n_scored"] == 0 and none_scored["token_accuracy"] is None and none_scored["loss"] is None


def test_load_params_is_all_or_nothing():
    model = small_model()
    before = {k: v.copy() for k, v in model.params.items()}
    values = {k: np.ones_like(v) for k, v in model.params.items()}
    values["ln_f.beta"] = np.ones(3, np.float32)  # the last key alphabetically is wrong
    with pytest.raises(ValueError, match="ln_f.beta"):
        model.load_params(values)
    values["ln_f.beta"] = np.full(8, np.nan, np.float32)
    with pytest.raises(ValueError, match="NaN"):
        model.load_params(values)
    for k, v in before.items():
        np.testing.assert_array_equal(model.params[k], v)


def test_blas_threads_fixes_the_curve_whatever_the_environment():
    """The loss curve depends on the BLAS thread count (OpenBLAS splits the weight-gradient products
    differently); blas_threads=1 makes it independent of the caller's setting."""
    from threadpoolctl import threadpool_limits

    curves = []
    for outer in (1, 2):
        with threadpool_limits(outer, user_api="blas"):
            hist = train(small_model("rope", seed=3), CopyTask(8, alphabet=8), 4, batch_size=16, seed=1,
                         progress=False, blas_threads=1)
        curves.append([(h["loss"], h["grad_norm"]) for h in hist])
    assert curves[0] == curves[1]
