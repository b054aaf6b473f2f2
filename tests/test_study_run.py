"""The study's cells and driver: the n-gram baseline against a naive implementation, training until
the model fits, randomized positions in evaluation, a user's registered encoding on pool and Dask
workers, a corpus file, results.csv, no absolute paths in results.json, the bounded reader, and a
cold Numba cache giving the bits of a warm one."""

import collections
import csv
import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from posenc_np.study import InProcess, ProcessPool, StudyConfig, grid, run_extrapolation
from posenc_np.study import cells as study_cells
from posenc_np.study.ngram import KneserNey

ROOT = Path(__file__).resolve().parents[1]
TINY = {"seeds": 2, "tasks": ["lag"], "train_len": 3, "alphabet": 4, "d_model": 8, "n_heads": 2, "n_layers": 1,
        "d_ff": 8, "steps": 3, "batch_size": 4, "eval_sequences": 4, "eval_factors": (1, 2), "fit_sequences": 4,
        "lm_train_len": 8, "lm_eval_factors": (1, 2), "lm_steps": 2, "lm_batch_size": 2, "lm_eval_tokens": 32,
        "randomized_range": 64, "jobs": 1, "fit_rounds": 1, "randomized_fit_rounds": 1}


# --------------------------------------------------------------------------- n-gram baseline

def _naive_kn(train, order, context, w):
    """Interpolated Kneser-Ney, written from the formula with dictionaries."""
    train = [int(x) for x in train]
    raw = {k: collections.Counter(tuple(train[i:i + k]) for i in range(len(train) - k + 1)) for k in range(1, order + 1)}
    cont = {k: collections.Counter(g[1:] for g in {tuple(train[i:i + k + 1]) for i in range(len(train) - k)})
            for k in range(1, order + 1)}
    top = min(order, len(context) + 1)

    def p(k, h, w):
        if k == 0:
            return 1 / 256
        c = raw[k] if k == top else cont[k]
        total = sum(v for g, v in c.items() if g[:-1] == h)
        types = sum(1 for g, v in c.items() if g[:-1] == h and v > 0)
        lower = p(k - 1, h[1:], w)
        if total == 0:
            return lower
        values = list(c.values())
        n1, n2 = values.count(1), values.count(2)
        D = n1 / (n1 + 2 * n2) if n1 + n2 else 0.5
        return max(c.get(h + (w,), 0) - D, 0) / total + D * types / total * lower

    return p(top, tuple(context[len(context) - (top - 1):]) if top > 1 else (), w)


def test_kneser_ney_matches_the_formula_and_normalises():
    rng = np.random.default_rng(0)
    train = rng.integers(0, 5, size=400)  # a small alphabet: every order has repeated contexts
    model = KneserNey(train, 4)
    tokens = rng.integers(0, 6, size=(3, 7))  # byte 5 never occurs in training
    targets = np.full_like(tokens, -100)
    targets[:, 1::2] = rng.integers(0, 6, size=(3, 3))
    for order in (1, 2, 4):
        got = np.exp(model.log_probs(tokens, targets, order))
        rows, cols = np.nonzero(targets != -100)
        want = [_naive_kn(train, order, list(tokens[r, :c + 1][-(order - 1):]) if order > 1 else [], targets[r, c])
                for r, c in zip(rows, cols)]
        np.testing.assert_allclose(got, want, rtol=1e-12)
    for context in ([1], [2, 3], [0, 4, 1], [5, 5, 5]):  # probabilities over the 256 bytes sum to 1
        tok = np.tile(context, (256, 1))
        tgt = np.full_like(tok, -100)
        tgt[:, -1] = np.arange(256)
        assert np.exp(model.log_probs(tok, tgt, 4)).sum() == pytest.approx(1.0, abs=1e-12)


# --------------------------------------------------------------------------- cells

def _task_cell(**over):
    cfg = StudyConfig(**{**TINY, "parts": ("tasks",), "training": ("varying",), "encodings": ["rope"], **over})
    cell = [c for c in grid(cfg.validate()) if c["seed_index"] == 0][0]
    return cfg, cell, json.loads(json.dumps(cfg.__dict__))


def test_tasks_train_until_they_fit_or_the_rounds_run_out():
    cfg, cell, d = _task_cell(fit_rounds=3, fit_accuracy=0.0, curve_every=1)
    recs = study_cells.run_cell(d, cell)["records"]
    assert recs[0]["rounds"] == 1 and recs[0]["train_steps"] == 3 and recs[0]["fitted"]
    cfg, cell, d = _task_cell(fit_rounds=3, fit_accuracy=1.5, curve_every=1)  # never fits
    recs = study_cells.run_cell(d, cell)["records"]
    assert recs[0]["rounds"] == 3 and recs[0]["train_steps"] == 9 and not recs[0]["fitted"]
    assert [s for s, _ in recs[0]["curve"]] == list(range(1, 10)) and len(recs[0]["fit_check"]) == 3
    cfg, cell, d = _task_cell(fit_rounds=3, randomized_fit_rounds=5, fit_accuracy=1.5, training=("randomized",))
    recs = study_cells.run_cell(d, cell)["records"]  # randomized positions: their own budget
    assert cell["training"] == "randomized" and recs[0]["rounds"] == 5 and recs[0]["train_steps"] == 15


def test_randomized_positions_are_sampled_in_training_and_evaluation(monkeypatch):
    from posenc_np.model import Transformer

    seen = []
    real = Transformer.forward

    def spy(self, tokens, cache=None, *, positions=None):
        seen.append((tokens.shape[1], None if positions is None else int(np.max(positions))))
        return real(self, tokens, cache, positions=positions)

    monkeypatch.setattr(Transformer, "forward", spy)
    cfg, cell, d = _task_cell(training=("randomized",), randomized_range=500, eval_factors=(1, 4))
    result = study_cells.run_cell(d, cell)
    assert result["status"] == "ok", result["error"]
    longest = 2 * 4 * cfg.train_len + 1
    at_4L = [p for T, p in seen if T == longest]
    assert at_4L and all(p is not None and longest <= p < 500 for p in at_4L)  # evaluated on sampled positions
    assert result["records"][0]["randomized_range"] == 500
    assert StudyConfig().randomized_range == 2048  # Ruoss et al.'s range, far beyond every test length


# --------------------------------------------------------------------------- registered encodings

@pytest.mark.slow  # spawned pool workers and a one-worker Dask cluster
def test_a_registered_encoding_runs_on_pool_and_dask_workers(tmp_path):
    import study_plugin  # registers "sinusoid500"

    cfg = StudyConfig(**{**TINY, "parts": ("tasks",), "training": ("varying",), "encodings": ["sinusoid500", "rope"]})
    assert "sinusoid500" in StudyConfig().encodings  # a registered encoding joins the default grid
    serial = run_extrapolation(tmp_path / "serial", cfg, progress=False, executor=InProcess(), warm=False)
    pooled = run_extrapolation(tmp_path / "pool", cfg, progress=False, executor=ProcessPool(2), warm=False)
    assert serial["failed"] == pooled["failed"] == []
    untimed = [[{k: v for k, v in r.items() if not k.endswith("seconds")} for r in x["records"]] for x in (serial, pooled)]
    assert untimed[0] == untimed[1] and {r["encoding"] for r in serial["records"]} == {"sinusoid500", "rope"}
    from posenc_np.registry import REGISTRY

    REGISTRY.pop(study_plugin.ENTRY.name)  # leave the registry as the other tests expect it
    sys.modules.pop("study_plugin")


PLUGIN = """
from posenc_np.registry import Encoding, SinusoidTable, register


def build(cfg, options, rng):
    return SinusoidTable(cfg.d_model, 700.0, "interleaved", cfg.dtype)


register(Encoding("sinusoid700", "embedding", "a user's encoding", {}, build), replace=True)
"""


@pytest.mark.slow  # a one-worker Dask cluster
def test_dask_workers_need_not_have_the_users_module(tmp_path, monkeypatch):
    """The cluster starts before the user's module exists anywhere on its path; the entry's module
    travels by value."""
    distributed = pytest.importorskip("distributed")
    from posenc_np.registry import REGISTRY
    from posenc_np.study import Dask

    cluster = distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None)
    try:
        (tmp_path / "user_plugin_q7.py").write_text(PLUGIN)
        monkeypatch.syspath_prepend(str(tmp_path))
        importlib.import_module("user_plugin_q7")
        cfg = StudyConfig(**{**TINY, "parts": ("tasks",), "training": ("varying",), "encodings": ["sinusoid700"],
                             "seeds": 1})
        res = run_extrapolation(tmp_path / "out", cfg, progress=False, executor=Dask(cluster.scheduler_address),
                                warm=False)
        assert res["failed"] == [] and {r["encoding"] for r in res["records"]} == {"sinusoid700"}
    finally:
        cluster.close()
        REGISTRY.pop("sinusoid700", None)
        sys.modules.pop("user_plugin_q7", None)


def test_register_refuses_builtins_and_duplicates():
    from posenc_np.registry import REGISTRY, Encoding, register

    with pytest.raises(ValueError, match="built-in"):
        register(Encoding("rope", "none", "shadow"))
    with pytest.raises(TypeError, match="Encoding"):
        register({"name": "x"})
    entry = register(Encoding("probe_none", "none", "probe"))
    try:
        with pytest.raises(ValueError, match="already registered"):
            register(Encoding("probe_none", "none", "another"))
    finally:
        del REGISTRY["probe_none"]
    assert entry.name == "probe_none"


# --------------------------------------------------------------------------- corpus file, CSV, records

@pytest.mark.slow  # a pool of two workers
def test_corpus_file_csv_and_no_absolute_paths(tmp_path, capsys):
    from posenc_np import cli

    text = (ROOT / "posenc_np" / "study" / "claims.py").read_bytes() * 2
    corpus = tmp_path / "my corpus.txt"
    corpus.write_bytes(text)
    out = tmp_path / "out"
    args = ["study", "extrapolation", "--out", str(out), "--quick", "--parts", "lm", "--encodings", "alibi,rope",
            "--corpus", str(corpus), "--jobs", "2", "--no-progress"]
    assert cli.main(args) == 0
    raw = (out / "results.json").read_text()
    doc = json.loads(raw)
    ident = doc["meta"]["corpus"]
    assert ident["name"] == "my corpus.txt" and ident["bytes"] == len(text)
    import hashlib

    assert ident["train_sha256"] == hashlib.sha256(text[: len(text) - len(text) // 10]).hexdigest()
    for where in (str(tmp_path), sys.prefix, sys.base_prefix, str(ROOT), os.path.expanduser("~")):
        assert where not in raw  # no absolute path of this machine
    env = doc["meta"]["environment"]
    assert {"python", "numpy", "numba", "scipy", "cpu"} <= set(env) and env["cpu"]
    rows = list(csv.DictReader(io_lines((out / "results.csv").read_text())))
    assert len(rows) == len(doc["records"])
    for row, rec in zip(rows, doc["records"]):
        assert row["label"] == rec["label"] and (rec["ppl"] is None or float(row["ppl"]) == rec["ppl"])
    assert cli.main(args[:-3] + ["--jobs", "1", "--no-progress"] + ["--corpus", str(tmp_path / "missing")]) == 2
    assert "missing" in capsys.readouterr().err


def io_lines(text):
    return text.splitlines()


def test_result_files_are_read_with_the_bounded_reader(tmp_path):
    from posenc_np.study.store import read_json

    good = tmp_path / "good.json"
    good.write_text('{"a": 1}')
    assert read_json(good) == {"a": 1}
    (tmp_path / "link.json").symlink_to(good)
    assert read_json(tmp_path / "link.json") is None  # links are not followed
    os.mkfifo(tmp_path / "fifo.json")
    assert read_json(tmp_path / "fifo.json") is None  # and a FIFO does not block the reader
    (tmp_path / "dup.json").write_text('{"a": 1, "a": 2}')
    assert read_json(tmp_path / "dup.json") is None


# --------------------------------------------------------------------------- Numba cache

@pytest.mark.slow  # compiles the ALiBi and layer kernels into an empty cache: about a minute
def test_a_cold_numba_cache_gives_the_bits_of_a_warm_one(tmp_path):
    """An ALiBi LM long enough for the fused kernel (64 tokens), run twice from the command line with
    the same NUMBA_CACHE_DIR: first on an empty cache (the runner warms it before any cell), then
    on the filled one. The records agree bit for bit."""
    cache = tmp_path / "numba"
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache), "PYTHONPATH": str(ROOT)}
    script = ("import sys; from posenc_np.study import ProcessPool, quick_config, run_extrapolation; "
              "cfg = quick_config(); cfg.parts = ('lm',); cfg.encodings = ['alibi']; cfg.lm_train_len = 64; "
              "cfg.lm_eval_factors = (1, 2); cfg.lm_steps = 3; cfg.lm_batch_size = 2; "
              "run_extrapolation(sys.argv[1], cfg, progress=False, executor=ProcessPool(2))")
    docs = []
    for run in ("cold", "warm"):
        out = tmp_path / run
        done = subprocess.run([sys.executable, "-c", script, str(out)], env=env, capture_output=True, text=True,
                              timeout=900, cwd=tmp_path, check=False)
        assert done.returncode == 0, done.stderr[-2000:]
        docs.append(json.loads((out / "results.json").read_text()))
    assert any(cache.rglob("*.nbi"))
    strip = [[{k: v for k, v in r.items() if not k.endswith("seconds")} for r in d["records"]] for d in docs]
    assert strip[0] == strip[1]
    assert math.isfinite(docs[0]["meta"]["warm_seconds"])


def test_corpus_file_is_read_with_the_bounded_reader(tmp_path):
    from posenc_np.study.corpus import MAX_CORPUS_BYTES, load_corpus_file

    text = tmp_path / "text.txt"
    text.write_bytes(bytes(range(256)) * 40)
    c = load_corpus_file(text, min_held_out=100)
    assert len(c["held_out"]) == len(c["train"]) // 9 == 1024 and c["identity"]["name"] == "text.txt"
    (tmp_path / "link.txt").symlink_to(text)
    with pytest.raises(ValueError, match="symbolic link"):
        load_corpus_file(tmp_path / "link.txt")
    with pytest.raises(ValueError, match="directory"):
        load_corpus_file(tmp_path)
    with pytest.raises(ValueError, match="held-out bytes"):
        load_corpus_file(text, min_held_out=5000)
    assert MAX_CORPUS_BYTES == 256 << 20
