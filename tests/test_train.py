"""Optimizer, clipping, schedule, training loop determinism, checkpoints and resume."""

import io
import json
import math
import zipfile

import numpy as np
import pytest

from posenc_np.model import ModelConfig, Transformer
from posenc_np.optim import Adam, clip_grad_norm, cosine_schedule, global_norm
from posenc_np.study import CopyTask
from posenc_np.train import Progress, evaluate, load_checkpoint, save_checkpoint, train


def small_model(position="rope", seed=0, **kw):
    return Transformer(ModelConfig(vocab_size=10, d_model=16, n_heads=2, n_layers=1, d_ff=32, max_len=16,
                                   position=position, seed=seed, **kw))


def test_adam_matches_a_scalar_reference():
    """Element-by-element AdamW (torch.optim.AdamW order) in plain Python floats."""
    rng = np.random.default_rng(0)
    params = {"w": rng.standard_normal((2, 3)), "b": rng.standard_normal(3)}
    ref = {k: [float(x) for x in v.ravel()] for k, v in params.items()}
    lr, b1, b2, eps, wd = 0.01, 0.8, 0.95, 1e-6, 0.1
    opt = Adam(params, lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
    m = {k: [0.0] * len(v) for k, v in ref.items()}
    v = {k: [0.0] * len(x) for k, x in ref.items()}
    for t in range(1, 6):
        grads = {k: rng.standard_normal(p.shape) for k, p in params.items()}
        step_lr = lr * (1 + 0.5 * t)
        opt.step(grads, lr=step_lr)
        for k in ref:
            decays = k == "w"  # default rule: ndim >= 2 decays, vectors do not
            for j, g in enumerate(grads[k].ravel()):
                m[k][j] = b1 * m[k][j] + (1 - b1) * g
                v[k][j] = b2 * v[k][j] + (1 - b2) * g * g
                mhat = m[k][j] / (1 - b1 ** t)
                vhat = v[k][j] / (1 - b2 ** t)
                if decays:
                    ref[k][j] -= step_lr * wd * ref[k][j]
                ref[k][j] -= step_lr * mhat / (math.sqrt(vhat) + eps)
    for k in ref:
        np.testing.assert_allclose(params[k].ravel(), ref[k], rtol=1e-12, atol=1e-12)
    assert opt.t == 5


def test_adam_first_step_moves_every_entry_by_lr():
    """With bias correction, step 1 moves each parameter by ~lr * sign(g) (|g| >> eps)."""
    p = {"w": np.zeros((3, 3), dtype=np.float32)}
    g = {"w": np.array([[1, -2, 3], [-4, 5, -6], [7, -8, 9]], dtype=np.float32)}
    Adam(p, lr=0.1).step(g)
    np.testing.assert_allclose(p["w"], -0.1 * np.sign(g["w"]), rtol=1e-5)
    assert p["w"].dtype == np.float32


def test_clip_grad_norm():
    g = {"a": np.array([3.0, 0.0]), "b": np.array([[4.0]])}
    assert global_norm(g) == 5.0
    assert clip_grad_norm(g, 10.0) == 5.0
    np.testing.assert_array_equal(g["a"], [3.0, 0.0])  # below the threshold: untouched
    assert clip_grad_norm(g, 1.0) == 5.0
    assert global_norm(g) == pytest.approx(1.0, rel=1e-6)
    np.testing.assert_allclose(g["a"], [0.6, 0.0], rtol=1e-6)


def test_cosine_schedule():
    kw = dict(total=110, lr=1.0, warmup=10, min_lr=0.1)
    assert cosine_schedule(0, **kw) == pytest.approx(0.1)
    assert cosine_schedule(9, **kw) == pytest.approx(1.0)
    assert cosine_schedule(10, **kw) == pytest.approx(1.0)
    assert cosine_schedule(60, **kw) == pytest.approx(0.55)
    assert cosine_schedule(110, **kw) == pytest.approx(0.1)


def test_training_learns():
    """Loss falls from ~ln(vocab) on copy; the model actually learns (not just runs)."""
    model = small_model("learned")
    task = CopyTask(4, alphabet=8)
    hist = train(model, task, 300, batch_size=32, lr=3e-3, warmup=20, seed=0, progress=False)
    first = np.mean([h["loss"] for h in hist[:10]])
    last = np.mean([h["loss"] for h in hist[-20:]])
    assert first > 1.8 and last < 0.6 * first
    tokens, targets = task.sample(np.random.default_rng(123), 64)
    m = evaluate(model, tokens, targets)
    assert m["token_accuracy"] > 0.5  # chance is 1/8
    assert set(hist[0]) >= {"step", "loss", "grad_norm", "lr", "tokens_per_s"}


def test_same_seed_same_curve_bit_for_bit():
    task = CopyTask(4, alphabet=8)
    runs = [train(small_model(seed=1), task, 15, batch_size=8, seed=7, progress=False) for _ in range(2)]
    assert [h["loss"] for h in runs[0]] == [h["loss"] for h in runs[1]]
    assert [h["grad_norm"] for h in runs[0]] == [h["grad_norm"] for h in runs[1]]
    other = train(small_model(seed=1), task, 15, batch_size=8, seed=8, progress=False)
    assert [h["loss"] for h in other] != [h["loss"] for h in runs[0]]


@pytest.mark.parametrize("position", ["learned", "t5"])
def test_resume_reproduces_uninterrupted_run(tmp_path, position):
    if position not in __import__("posenc_np.model", fromlist=["REGISTRY"]).REGISTRY:
        pytest.skip(f"{position} not registered yet")
    task = CopyTask(4, alphabet=8)
    kw = dict(batch_size=8, lr=3e-3, warmup=3, min_lr=1e-4, weight_decay=0.1, clip=0.5, seed=3, progress=False)
    full_model = small_model(position, seed=2)
    full = train(full_model, task, 12, **kw)

    class Interrupt(Exception):
        pass

    def stop_after_5(metrics):
        if metrics["step"] == 5:
            raise Interrupt

    path = tmp_path / "ck.npz"
    with pytest.raises(Interrupt):
        train(small_model(position, seed=2), task, 12, checkpoint_path=path, checkpoint_every=5,
              callback=stop_after_5, **kw)
    ck = load_checkpoint(path)
    assert ck.step == 5 and ck.optimizer.t == 5
    rest = train(ck.model, task, 12, start_step=ck.step, optimizer=ck.optimizer, rng=ck.rng, **kw)
    assert [h["step"] for h in rest] == list(range(5, 12))
    assert [h["loss"] for h in rest] == [h["loss"] for h in full[5:]]
    assert [h["grad_norm"] for h in rest] == [h["grad_norm"] for h in full[5:]]
    for k, v in full_model.params.items():
        np.testing.assert_array_equal(ck.model.params[k], v)


def test_checkpoint_is_plain_npz_without_pickle(tmp_path):
    model = small_model("sinusoidal", fusion="concat")
    opt = Adam(model.params, lr=0.01)
    model.loss(*CopyTask(4, alphabet=8).sample(np.random.default_rng(0), 4), backward=True)
    opt.step(model.grads)
    rng = np.random.default_rng(99)
    rng.integers(0, 10, 5)
    path = tmp_path / "c.npz"
    save_checkpoint(path, model, opt, 1, rng.bit_generator.state, extra={"note": "x"})
    with np.load(path, allow_pickle=False) as z:
        assert all(z[k].dtype != object for k in z.files)
        meta = json.loads(bytes(z["meta"]).decode())
        assert meta["step"] == 1 and meta["model_config"]["fusion"] == "concat"
        assert z["param.tok_emb.weight"].dtype == np.float32
    ck = load_checkpoint(path)
    assert ck.extra == {"note": "x"}
    assert ck.rng.integers(0, 1 << 30) == rng.integers(0, 1 << 30)
    for k in model.params:
        np.testing.assert_array_equal(ck.model.params[k], model.params[k])
        np.testing.assert_array_equal(ck.optimizer.m[k], opt.m[k])
        np.testing.assert_array_equal(ck.optimizer.v[k], opt.v[k])
    # into an existing model, and mismatches are refused
    other = small_model("sinusoidal", fusion="concat", seed=5)
    load_checkpoint(path, model=other)
    np.testing.assert_array_equal(other.params["tok_emb.weight"], model.params["tok_emb.weight"])
    with pytest.raises(ValueError, match="differs"):
        load_checkpoint(path, model=small_model("rope"))
    bad = tmp_path / "bad.npz"
    np.savez(bad, x=np.zeros(2))
    with pytest.raises(ValueError, match="not a posenc_np checkpoint"):
        load_checkpoint(bad)
    assert not [n for n in zipfile.ZipFile(path).namelist() if not n.endswith(".npy")]


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_draws_only_on_a_terminal(capsys):
    task = CopyTask(2, alphabet=4)
    train(small_model(), task, 3, batch_size=2, progress=False)
    train(small_model(), task, 3, batch_size=2, progress=True, desc="tq")  # stderr is captured: not a terminal
    assert capsys.readouterr().err == ""
    log, term = io.StringIO(), _Terminal()
    for file in (log, term):
        bar = Progress(3, desc="demo", use_tqdm=False, file=file)
        for _ in range(3):
            bar.update(1, loss=0.5)
        bar.close()
    assert log.getvalue() == "" and "demo 3/3 loss=0.5" in term.getvalue()
    bar = Progress(3, desc="tq", file=term)  # tqdm when installed, else the line printer
    bar.update(3)
    bar.close()
    assert "tq" in term.getvalue()


def test_evaluate_metrics_by_hand():
    class Fixed:  # a "model" whose arg-max is token 2 everywhere
        def forward(self, tok):
            out = np.zeros(tok.shape + (4,))
            out[..., 2] = 1.0
            return out

    tokens = np.zeros((2, 3), dtype=int)
    targets = np.array([[2, -100, 2], [2, 3, -100]])
    m = evaluate(Fixed(), tokens, targets, beyond=1)
    assert m["token_accuracy"] == pytest.approx(3 / 4)
    assert m["exact_match"] == pytest.approx(1 / 2)
    assert m["n_scored"] == 4
    assert m["token_accuracy_beyond"] == pytest.approx(1 / 2)  # positions 1, 2: hit, miss
    assert evaluate(Fixed(), tokens, targets, beyond=3)["token_accuracy_beyond"] is None
    assert "token_accuracy_beyond" not in evaluate(Fixed(), tokens, targets)
