"""Extrapolation study: task construction, grid, and the --quick CLI run's output files."""

import importlib.util
import json
import time

import numpy as np
import pytest

from posenc_np import cli
from posenc_np.model import REGISTRY
from posenc_np.study import (BOS, IGNORE, SEP, CopyTask, LagTask, ReverseTask, StudyConfig, grid, quick_config,
                             run_extrapolation)


def test_copy_and_reverse_layout():
    rng = np.random.default_rng(0)
    for cls, answer in ((CopyTask, lambda x: x), (ReverseTask, lambda x: x[::-1])):
        task = cls(5, alphabet=6)
        tokens, targets = task.sample(rng, 3)
        assert tokens.shape == targets.shape == (3, 11) == (3, task.seq_len)
        for tok, tgt in zip(tokens, targets):
            x = tok[1:6]
            assert tok[0] == BOS and tok[6] == SEP and np.all((x >= 2) & (x < 8))
            assert np.all(tgt[:6] == IGNORE)
            full = np.concatenate([tok, tgt[-1:]])  # the whole sequence BOS x SEP y
            np.testing.assert_array_equal(full[7:], answer(x))
            np.testing.assert_array_equal(tgt[6:], full[7:])  # next-token targets on the answer only


def test_lag_targets_are_three_back():
    tokens, targets = LagTask(4, alphabet=5).sample(np.random.default_rng(1), 2)
    assert tokens.shape == (2, 9) and np.all(tokens[:, 0] == BOS)
    for i in range(9):
        if i >= 4:
            np.testing.assert_array_equal(targets[:, i], tokens[:, i - 3])
        else:
            assert np.all(targets[:, i] == IGNORE)


def test_grid_covers_every_encoding_and_fusion_with_stable_seeds():
    cfg = StudyConfig()
    runs = grid(cfg)
    n_abs = sum(a.absolute for a in REGISTRY.values())
    assert len(runs) == (len(REGISTRY) - n_abs + 3 * n_abs) * 3
    assert {r["encoding"] for r in runs} == set(REGISTRY)
    assert len({r["seed"] for r in runs}) == len(runs)
    assert [r["seed"] for r in grid(StudyConfig())] == [r["seed"] for r in runs]
    assert [r["seed"] for r in grid(StudyConfig(seed=1))] != [r["seed"] for r in runs]


def test_quick_cli_run_writes_valid_results(tmp_path, capsys):
    t0 = time.perf_counter()
    assert cli.main(["study", "extrapolation", "--out", str(tmp_path), "--quick", "--seed", "3"]) == 0
    elapsed = time.perf_counter() - t0
    assert elapsed < 60
    err = capsys.readouterr().err
    assert "study:" in err and "done" in err  # progress is printed
    res = json.loads((tmp_path / "results.json").read_text())
    cfg = res["meta"]["config"]
    assert cfg["seed"] == 3 and cfg == json.loads(json.dumps(quick_config(3).__dict__))
    runs = grid(quick_config(3))
    recs = res["records"]
    assert len(recs) == len(runs) * len(cfg["eval_factors"])
    seeds = {(r["label"], r["task"]): r["seed"] for r in runs}
    L = cfg["train_len"]
    for r in recs:
        assert r["seed"] == seeds[(r["label"], r["task"])]
        assert r["eval_len"] == L * r["eval_factor"] and r["eval_seq_len"] == 2 * r["eval_len"] + 1
        if r["encoding"] == "learned" and r["eval_factor"] > 1:
            assert r["status"] == "n/a" and r["token_accuracy"] is None and "learned table" in r["note"]
        else:
            assert r["status"] == "ok"
            assert 0.0 <= r["exact_match"] <= r["token_accuracy"] <= 1.0
            if r["eval_factor"] == 1:
                assert r["token_accuracy_beyond"] is None  # nothing lies past the training length
            else:
                assert 0.0 <= r["token_accuracy_beyond"] <= 1.0
                if r["task"] != "lag":  # every copy/reverse answer token lies past 2L+1 >= train length
                    assert r["token_accuracy_beyond"] == r["token_accuracy"]
            assert np.isfinite(r["loss"]) and r["loss"] > 0
    md = (tmp_path / "results.md").read_text()
    for task in ("copy", "reverse", "lag"):
        assert f"### {task}" in md
    assert md.count("| learned+concat |") == 3 and "n/a / n/a" in md and "2L beyond" in md
    if importlib.util.find_spec("matplotlib") is not None:  # the plot is the optional `plot` extra
        assert (tmp_path / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    else:
        assert not (tmp_path / "results.png").exists() and "matplotlib not installed" in err


def test_study_is_deterministic_and_silenceable(tmp_path, capsys):
    cfg = StudyConfig(encodings=["rope", "learned"], fusions=("add",), tasks=["lag"], train_len=3, alphabet=4,
                      d_model=8, n_heads=2, n_layers=1, d_ff=8, steps=5, batch_size=4, eval_sequences=4, jobs=1)
    a = run_extrapolation(tmp_path / "a", cfg, progress=False)
    b = run_extrapolation(tmp_path / "b", cfg, progress=False)
    assert capsys.readouterr().err == ""
    strip = [{k: v for k, v in r.items() if k != "train_seconds"} for r in a["records"]]
    assert strip == [{k: v for k, v in r.items() if k != "train_seconds"} for r in b["records"]]


@pytest.mark.parametrize("jobs", [2])
def test_parallel_workers_give_the_same_numbers(tmp_path, jobs):
    cfg = StudyConfig(encodings=["alibi"], fusions=("add",), tasks=["copy", "lag"], train_len=3, alphabet=4,
                      d_model=8, n_heads=2, n_layers=1, d_ff=8, steps=4, batch_size=4, eval_sequences=4, jobs=1)
    serial = run_extrapolation(tmp_path / "s", cfg, progress=False)["records"]
    cfg.jobs = jobs
    par = run_extrapolation(tmp_path / "p", cfg, progress=False)["records"]
    key = ("label", "task", "eval_len", "token_accuracy", "exact_match", "loss", "seed")
    assert [[r[k] for k in key] for r in serial] == [[r[k] for k in key] for r in par]


def test_position_options_reach_the_model(tmp_path):
    base = dict(encodings=["rope"], fusions=("add",), tasks=["lag"], train_len=3, alphabet=4, d_model=8, n_heads=2,
                n_layers=1, d_ff=8, steps=3, batch_size=4, eval_sequences=8, jobs=1)
    plain = run_extrapolation(tmp_path / "a", StudyConfig(**base), progress=False)["records"]
    yarn = {"rope": {"scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 7}}}
    scaled = run_extrapolation(tmp_path / "b", StudyConfig(**base, position_options=yarn), progress=False)["records"]
    assert [r["loss"] for r in plain] != [r["loss"] for r in scaled]
