"""Extrapolation study: tasks, training options, grid and seeds, the LM corpus and its evaluation
windows, intervals and rankings, claim verdicts, generated documentation, and the --quick CLI run."""

import importlib.util
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from posenc_np import cli
from posenc_np.model import REGISTRY
from posenc_np.study import (
    BOS,
    IGNORE,
    SEP,
    TRAINING_OPTIONS,
    CopyTask,
    LagTask,
    ReverseTask,
    StudyConfig,
    TrainingOption,
    VaryingLength,
    cell_id,
    corpus,
    eval_windows,
    grid,
    quick_config,
    report,
    scaling_dict,
)

ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------- tasks

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


@pytest.mark.parametrize("cls", [CopyTask, ReverseTask, LagTask])
def test_varying_length_examples_are_whole_tasks_right_padded(cls):
    """Each row is a valid example of its own size followed by unscored BOS padding; sizes cover
    min_size..max_size (Kazemnejad et al.: lengths drawn up to the training maximum)."""
    task = VaryingLength(cls, 6, alphabet=5)
    tokens, targets = task.sample(np.random.default_rng(3), 400)
    assert tokens.shape == targets.shape == (400, 13)
    sizes = set()
    for tok, tgt in zip(tokens, targets):
        scored = np.flatnonzero(tgt != IGNORE)
        if cls is LagTask:
            n = (scored[-1] + 1) // 2  # the last scored position is the last symbol, index 2n
            np.testing.assert_array_equal(tgt[scored], tok[scored - 3])
        else:
            n = len(scored)
            assert tok[n + 1] == SEP and tok[0] == BOS
            x = tok[1:n + 1]
            answer = x if cls is CopyTask else x[::-1]
            np.testing.assert_array_equal(np.concatenate([tok[n + 2:2 * n + 1], tgt[2 * n:2 * n + 1]]), answer)
        assert np.all(tok[2 * n + 1:] == BOS) and np.all(tgt[2 * n + 1:] == IGNORE)  # padding, never scored
        sizes.add(int(n))
    assert sizes == set(range(cls.min_size(), 7))
    with pytest.raises(ValueError, match="max_size must be an integer >= 2"):
        VaryingLength(LagTask, 1, alphabet=4)  # lag 3 needs n >= 2


def test_training_option_registry_is_the_hook_for_new_options(monkeypatch):
    """A new training option is one registry entry: the grid makes its cells (only for the
    encodings it applies to) and the cell trains and evaluates with its model arguments."""
    seen = []

    def kwargs(kw, phase):
        seen.append((phase, kw["position"]))
        return kw

    option = TrainingOption("test option", model_kwargs=kwargs, applies=lambda enc: enc != "none")
    monkeypatch.setitem(TRAINING_OPTIONS, "probe", option)
    cfg = StudyConfig(parts=("tasks",), training=("probe",), encodings=["none", "alibi"], tasks=["lag"], seeds=1,
                      train_len=2, alphabet=4, d_model=8, n_heads=2, n_layers=1, d_ff=8, steps=1, batch_size=2,
                      eval_sequences=2, eval_factors=(1,), jobs=1)
    cells = grid(cfg.validate())
    assert [cell_id(c) for c in cells] == ["tasks__probe__alibi__lag__s0"]
    from posenc_np.study.cells import run_cell

    result = run_cell(json.loads(json.dumps(cfg.__dict__)), cells[0])
    assert result["status"] == "ok", result["error"]
    assert seen[0] == ("train", "alibi") and set(seen[1:]) == {("eval", "alibi")}  # fit checks and evaluation


# --------------------------------------------------------------------------- grid

def test_grid_covers_the_registry_every_option_and_seed_with_distinct_seeds():
    cfg = StudyConfig(training=("fixed", "varying", "randomized"), fusions=("add", "concat", "multiply"), seeds=3)
    cells = grid(cfg, {"train_sha256": "x", "held_out_sha256": "y"})
    n_abs = sum(a.absolute for a in REGISTRY.values())
    n_rel = len(REGISTRY) - n_abs
    per_task = (n_rel + 3 * n_abs) + (n_rel + n_abs) + 2  # fixed: every fusion; others: the first fusion
    assert sum(c["part"] == "tasks" for c in cells) == per_task * len(cfg.tasks) * 3  # randomized: learned, rope
    assert {c["encoding"] for c in cells if c.get("training") == "randomized"} == {"learned", "rope"}
    positional = [e for e, entry in REGISTRY.items() if "randomized_max_len" in entry.options]
    every = grid(StudyConfig(training=("randomized",), randomized_encodings=positional, parts=("tasks",)))
    assert {c["encoding"] for c in every} == set(positional)
    assert sum(c["part"] == "lm" for c in cells) == len(REGISTRY) * 3 + 1  # + the n-gram baseline
    assert [cell_id(c) for c in cells if c["encoding"] == "ngram"] == ["lm__ngram"]
    assert sum(c["part"] == "rope_scaling" for c in cells) == 3
    assert {c["encoding"] for c in cells if c["part"] == "lm"} == set(REGISTRY) | {"ngram"}
    ids = [cell_id(c) for c in cells]
    assert len(set(ids)) == len(ids)
    task_seeds = {(c["label"], c["task"], c["seed_index"]): c["seed"] for c in cells if c["part"] == "tasks"}
    assert len(set(task_seeds.values())) == len(task_seeds)  # distinct per encoding, task and seed
    for c in cells:  # fixed and varying of one encoding/task/seed share the initial weights
        if c["part"] == "tasks":
            assert c["seed"] == task_seeds[(c["label"], c["task"], c["seed_index"])]
    lm_rope = {c["seed_index"]: c["seed"] for c in cells if c["part"] == "lm" and c["encoding"] == "rope"}
    assert {c["seed_index"]: c["seed"] for c in cells if c["part"] == "rope_scaling"} == lm_rope
    assert [c["seed"] for c in grid(StudyConfig())] == [c["seed"] for c in grid(StudyConfig())]
    assert [c["seed"] for c in grid(StudyConfig(seed=1))] != [c["seed"] for c in grid(cfg)]


def test_config_refuses_bad_grids():
    with pytest.raises(ValueError, match=r"training has unknown entries \['random'\]"):
        StudyConfig(training=("random",)).validate()
    with pytest.raises(ValueError, match=r"parts has unknown entries \['xyz'\]"):
        StudyConfig(parts=("xyz",)).validate()
    with pytest.raises(ValueError, match="every LM evaluation length must be even .* 64 does not"):
        StudyConfig(lm_eval_tokens=1000).validate()
    with pytest.raises(ValueError, match="seeds must be an integer >= 1"):
        StudyConfig(seeds=0).validate()
    with pytest.raises(ValueError, match="lists an entry twice"):
        StudyConfig(encodings=["rope", "rope"]).validate()


def test_scaling_dicts_follow_the_methods():
    assert scaling_dict("none", 4, 64) is None
    assert scaling_dict("linear", 4, 64) == {"rope_type": "linear", "factor": 4.0}
    assert scaling_dict("ntk", 4, 64) == {"rope_type": "ntk", "alpha": 4.0}
    assert scaling_dict("dynamic", 4, 64) == {"rope_type": "dynamic", "factor": 1.0}
    assert scaling_dict("yarn", 4, 64) == {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
    from posenc_np.rope import inv_freq

    # dynamic with factor 1 is NTK with alpha = T / L at length T, and nothing at or below L
    for T, alpha in ((64, None), (128, 2.0), (256, 4.0)):
        dyn, _ = inv_freq(16, scaling=scaling_dict("dynamic", 4, 64), seq_len=T, max_position_embeddings=64)
        ref, _ = inv_freq(16, scaling=None if alpha is None else {"rope_type": "ntk", "alpha": alpha})
        np.testing.assert_allclose(dyn, ref, rtol=1e-15)


# --------------------------------------------------------------------------- corpus

def test_corpus_identity_and_digests():
    c = corpus.load_corpus()
    ident = c["identity"]
    assert len(c["train"]) == ident["train_bytes"] > 500_000 and len(c["held_out"]) == ident["held_out_bytes"] > 20_000
    import hashlib

    assert hashlib.sha256(c["train"].tobytes()).hexdigest() == ident["train_sha256"]
    assert [f["path"] for f in ident["files"]] == list(corpus.TRAIN_FILES + corpus.HELD_OUT_FILES)
    assert not set(corpus.TRAIN_FILES) & set(corpus.HELD_OUT_FILES)


def test_missing_corpus_file_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match=r"standard-library source file .*argparse.py"):
        corpus.load_corpus(tmp_path)


@pytest.mark.parametrize("mode", ["nonoverlapping", "sliding"])
def test_eval_windows_score_every_prediction_once_with_its_context(mode):
    data = np.arange(1000) % 251
    N, T, S = 96, 32, 8
    tokens, targets = eval_windows(data, N, T, mode, S)
    scored = {}
    for w, (tok, tgt) in enumerate(zip(tokens, targets)):
        start = int(tok[0]) if w == 0 or mode == "nonoverlapping" else None
        for i in np.flatnonzero(tgt != IGNORE):
            pos = int(tok[i])  # data[k] = k here, so a token is its position
            assert tgt[i] == data[pos + 1]
            scored[pos] = i  # context: i earlier tokens in the window
        del start
    assert sorted(scored) == list(range(N))  # each of the N next-token predictions exactly once
    if mode == "sliding":
        assert all(ctx >= T - S for pos, ctx in scored.items() if pos >= T)
        assert len(tokens) == (N - T) // S + 1
    else:
        assert len(tokens) == N // T and all(scored[p] == p % T for p in scored)
    with pytest.raises(ValueError, match="must divide"):
        eval_windows(data, 100, 32, mode, 8)


def test_corpus_helpers_refuse_bad_arguments():
    data = np.arange(100)
    with pytest.raises(TypeError, match="data must be an integer array"):
        eval_windows(data.astype(float), 32, 8, "sliding", 4)
    with pytest.raises(ValueError, match="data must be a 1-D array"):
        eval_windows(data.reshape(10, 10), 32, 8, "sliding", 4)
    with pytest.raises(ValueError, match="mode must be 'nonoverlapping' or 'sliding'"):
        eval_windows(data, 32, 8, "strided", 4)
    with pytest.raises(ValueError, match="n_tokens must be an integer <= 99"):
        eval_windows(data, 100, 10, "nonoverlapping")
    with pytest.raises(ValueError, match="stride must be an integer <= 8"):
        eval_windows(data, 32, 8, "sliding", 9)
    with pytest.raises(ValueError, match="length must be an integer <= 99"):
        corpus.LMWindows(data, 100)
    with pytest.raises(TypeError, match="rng must be a numpy.random.Generator"):
        corpus.LMWindows(data, 10).sample(0, 2)
    with pytest.raises(TypeError, match="task_cls must be one of the task classes"):
        VaryingLength(dict, 4, 4)
    with pytest.raises(ValueError, match="min_size must be an integer <= 4"):
        VaryingLength(CopyTask, 4, 4, min_size=5)


def test_lm_windows_are_next_byte_pairs():
    data = np.arange(500) % 256
    tok, tgt = corpus.LMWindows(data, 16).sample(np.random.default_rng(0), 5)
    assert tok.shape == tgt.shape == (5, 16)
    np.testing.assert_array_equal(tgt[:, :-1], tok[:, 1:])
    np.testing.assert_array_equal(tgt[:, -1], (tok[:, -1] + 1) % 256)


# --------------------------------------------------------------------------- intervals and rankings

def test_fill_blocks_replaces_only_marked_text():
    text = ("intro 1.23\n<!-- BEGIN GENERATED: a -->\nold\n<!-- END GENERATED: a -->\nmiddle\n"
            "<!-- BEGIN GENERATED: b -->\n<!-- END GENERATED: b -->\nend\n")
    out = report.fill_blocks(text, {"a": "new A", "b": "new B\n"})
    assert out == ("intro 1.23\n<!-- BEGIN GENERATED: a -->\nnew A\n<!-- END GENERATED: a -->\nmiddle\n"
                   "<!-- BEGIN GENERATED: b -->\nnew B\n<!-- END GENERATED: b -->\nend\n")
    with pytest.raises(ValueError, match=r"missing \['c'\]"):
        report.fill_blocks(text, {"a": "", "b": "", "c": ""})
    with pytest.raises(ValueError, match="without its partner"):
        report.fill_blocks(text.replace("<!-- END GENERATED: b -->", ""), {"a": "", "b": ""})


def test_publish_fills_the_page_and_copies_the_results(tmp_path):
    from posenc_np.study import run_extrapolation

    cfg = StudyConfig(parts=("tasks",), training=("fixed",), seeds=2, encodings=["none", "alibi"], fusions=("add",),
                      tasks=["lag"], train_len=2, alphabet=4, d_model=8, n_heads=2, n_layers=1, d_ff=8, steps=2,
                      batch_size=2, eval_sequences=4, eval_factors=(1, 2), jobs=1)
    run_extrapolation(tmp_path / "out", cfg, progress=False)
    docs = tmp_path / "docs"
    docs.mkdir()
    names = list(report.sections(json.loads((tmp_path / "out" / "results.json").read_text())))
    page = "intro\n" + "".join(f"<!-- BEGIN GENERATED: {n} -->\n<!-- END GENERATED: {n} -->\ntext\n" for n in names)
    (docs / "study.md").write_text(page.replace("GENERATED: claims -->\n<", "GENERATED: claims -->\nstale\n<"))
    (docs / "study_results").mkdir()
    (docs / "study_results" / "results.json").write_text("{}")  # not ours: refused, nothing written
    with pytest.raises(ValueError, match="was not written by the study"):
        report.publish(tmp_path / "out", docs)
    assert "stale" in (docs / "study.md").read_text()
    (docs / "study_results" / "results.json").unlink()
    written = report.publish(tmp_path / "out", docs)
    assert "study.md" in written and (docs / "study_results" / "results.json").exists()
    text = (docs / "study.md").read_text()
    assert "stale" not in text and "| source | claim | verdict | evidence |" in text and text.startswith("intro\n")
    assert report.fill_blocks(text, report.sections(json.loads((docs / "study_results" / "results.json").read_text()))) \
        == text  # publishing again changes nothing
    (docs / "study.md").write_text("intro without markers\n")
    with pytest.raises(ValueError, match="missing"):
        report.publish(tmp_path / "out", docs)


def test_committed_study_page_is_generated_from_the_committed_results():
    """docs/study.md's numbers are the generator's: its GENERATED blocks equal what the report
    makes of docs/study_results/results.json, and the hand-written text between them states no
    measured number."""
    doc = json.loads((ROOT / "docs" / "study_results" / "results.json").read_text())
    page = (ROOT / "docs" / "study.md").read_text()
    assert report.fill_blocks(page, report.sections(doc, report.load_probe(ROOT / "docs"))) == page
    prose = re.sub(r"<!-- BEGIN GENERATED: ([\w-]+) -->.*?<!-- END GENERATED: \1 -->", "", page, flags=re.DOTALL)
    prose = re.sub(r"```.*?```", "", prose, flags=re.DOTALL)  # commands
    decimals = set(re.findall(r"(?<![\w.])\d+\.\d+(?![\w.])", prose))
    # the t quantile's level, Adam, init, YaRN, the fit threshold, test level, power and minimum effect
    constants = {"0.975", "0.9", "0.999", "0.01", "0.02", "0.1", "0.05", "0.8", "0.15"}
    assert decimals <= constants, f"hand-written text states measured numbers: {sorted(decimals - constants)}"


def test_study_page_reads_as_documentation():
    """Results and method only: no work history, tracker references or placeholders, no CJK headings."""
    page = (ROOT / "docs" / "study.md").read_text()
    for word in ("issue", "seed document", "PLACEHOLDER", "TODO", "previous version", "first version", "v2", "v3"):
        assert word.lower() not in page.lower(), word
    assert not re.search(r"[\u3000-\u9fff\uac00-\ud7af]", page)


# --------------------------------------------------------------------------- the quick run

@pytest.mark.slow  # the whole --quick study: about 20 s of CPU, every part, encoding, fusion and option
def test_quick_cli_run_writes_valid_results(tmp_path, capsys):
    assert cli.main(["study", "extrapolation", "--out", str(tmp_path), "--quick", "--seed", "3"]) == 0
    err = capsys.readouterr().err
    assert "study:" in err and "ETA" in err and "done" in err  # progress with an ETA
    res = json.loads((tmp_path / "results.json").read_text())
    cfg = res["meta"]["config"]
    assert cfg == json.loads(json.dumps(quick_config(3).__dict__))
    assert res["failed"] == [] and res["meta"]["corpus"]["train_sha256"]
    cells = grid(quick_config(3))
    by_cell = {}
    for r in res["records"]:
        by_cell.setdefault((r["part"], r["label"], r.get("task"), r.get("training"), r["seed_index"]), []).append(r)
    assert len(by_cell) == len(cells)
    ngram = [r for r in res["records"] if r["encoding"] == "ngram"]
    assert len(ngram) == 2 * len(cfg["lm_eval_factors"]) and all(r["bpb"] == pytest.approx(math.log2(r["ppl"]))
                                                                 for r in ngram)
    L = cfg["train_len"]
    for r in res["records"]:
        if r["part"] == "tasks":
            assert r["eval_len"] == L * r["eval_factor"] and r["eval_seq_len"] == 2 * r["eval_len"] + 1
            if r["encoding"] == "learned" and r["eval_factor"] > 1 and r["training"] != "randomized":
                assert r["status"] == "n/a" and r["token_accuracy"] is None and "learned table" in r["note"]
            else:
                assert 0.0 <= r["exact_match"] <= r["token_accuracy"] <= 1.0
        else:
            if r["encoding"] == "learned" and r["eval_factor"] > 1:
                assert r["status"] == "n/a" and r["ppl"] is None
            else:
                assert r["ppl"] == pytest.approx(math.exp(r["loss"])) and 1 < r["ppl"] < 256
                assert r["bpb"] == pytest.approx(r["loss"] / math.log(2))
    # the scaling part's base model is the lm part's RoPE model, bit for bit
    lm_rope = {(r["seed_index"], r["eval_mode"], r["eval_factor"]): r["loss"] for r in res["records"]
               if r["part"] == "lm" and r["encoding"] == "rope"}
    unscaled = {(r["seed_index"], r["eval_mode"], r["eval_factor"]): r["loss"] for r in res["records"]
                if r["part"] == "rope_scaling" and r["method"] == "none" and r["phase"] == "zero_shot"}
    assert unscaled == lm_rope
    md = (tmp_path / "results.md").read_text()
    assert "A reduced run, not the study" in md and "steps 10 < 600" in md  # a smoke run says so
    for heading in ("Claims of the papers", "What the seeds can detect", "Synthetic tasks", "Varying-length",
                    "Language-model perplexity", "RoPE scaling", "Randomized positions"):
        assert heading in md
    # static scaling methods are evaluated zero-shot only at their design factor s = T / L
    for r in res["records"]:
        if r["part"] == "rope_scaling" and r["phase"] == "zero_shot" and r["method"] in ("linear", "ntk", "yarn"):
            assert r["design_factor"] == r["eval_factor"] > 1
            key = "alpha" if r["method"] == "ntk" else "factor"
            assert r["scaling"][key] == r["eval_factor"]
    # every task cell stores its training curve; the LM cells their per-position loss at the longest length
    first = cfg["eval_factors"][0]
    assert all(r.get("curve") for r in res["records"] if r["part"] == "tasks" and r["eval_factor"] == first)
    longest = [r for r in res["records"] if r["part"] == "lm" and r["encoding"] not in ("ngram", "learned")
               and r["eval_mode"] == "nonoverlapping" and r["eval_factor"] == cfg["lm_eval_factors"][-1]]
    assert longest and all(len(r["position_loss"]) == cfg["loss_bins"] for r in longest)
    assert any(r.get("attention") for r in res["records"] if r["part"] == "tasks")
    if importlib.util.find_spec("matplotlib") is not None:
        for name in ("tasks.png", "lm.png", "rope_scaling.png", "position_loss.png", "attention.png", "curves.png"):
            assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_command_regenerates_and_refuses_foreign_files(tmp_path, capsys):
    (tmp_path / "results.json").write_text('{"not": "ours"}')
    assert cli.main(["study", "report", str(tmp_path)]) == 2
    assert "not a results file of the study" in capsys.readouterr().err
    (tmp_path / "results.json").write_text("[1, 2")
    assert cli.main(["study", "report", str(tmp_path)]) == 2
    meta = {"tool": "posenc-np study extrapolation", "schema": 3, "config": {"seeds": 3}}
    (tmp_path / "results.json").write_text(json.dumps({"meta": meta, "records": [{"part": "lm", "x": 1}]}))
    assert cli.main(["study", "report", str(tmp_path)]) == 2
    assert "not a valid study results file" in capsys.readouterr().err
    (tmp_path / "results.json").write_text(json.dumps({"meta": {**meta, "schema": 2}, "records": []}))
    assert cli.main(["study", "report", str(tmp_path)]) == 2
    assert "schema 2" in capsys.readouterr().err


def test_size_options_choose_the_configuration(monkeypatch):
    """--quick, --full and --lm-large pick their presets (mutually exclusive); neither: the default;
    the grid and model options override the preset."""
    from posenc_np.study import full_config, lm_large_config, runner

    seen = []
    monkeypatch.setattr(runner, "run_extrapolation", lambda out, cfg, **kw: seen.append((cfg, kw)) or {"failed": []})
    for flags, want in (([], StudyConfig(seed=4)), (["--full"], full_config(4)), (["--quick"], quick_config(4)),
                        (["--lm-large"], lm_large_config(4))):
        assert cli.main(["study", "extrapolation", "--out", "unused", "--seed", "4", "--no-progress", *flags]) == 0
        assert seen[-1][0] == want
    args = ["study", "extrapolation", "--out", "unused", "--no-progress", "--encodings", "rope,alibi", "--tasks", "lag",
            "--steps", "7", "--fit-rounds", "2", "--lm-steps", "9", "--d-model", "32", "--n-heads", "2", "--n-layers",
            "3", "--d-ff", "48", "--seeds", "5", "--parts", "tasks,lm", "--training", "varying", "--jobs", "1"]
    assert cli.main(args) == 0
    cfg = seen[-1][0]
    assert (cfg.encodings, cfg.tasks, cfg.steps, cfg.fit_rounds, cfg.lm_steps, cfg.d_model, cfg.n_heads, cfg.n_layers,
            cfg.d_ff, cfg.seeds, cfg.parts, cfg.training, cfg.jobs) == (["rope", "alibi"], ["lag"], 7, 2, 9, 32, 2, 3,
                                                                         48, 5, ("tasks", "lm"), ("varying",), 1)
    assert cli.main(args + ["--randomized-fit-rounds", "30", "--randomized-encodings", "rope"]) == 0
    assert (seen[-1][0].randomized_fit_rounds, seen[-1][0].randomized_encodings) == (30, ["rope"])
    assert cli.main(args + ["--corpus", "some.txt"]) == 0
    assert seen[-1][0].corpus == "file" and seen[-1][1]["corpus_file"] == "some.txt"
    with pytest.raises(SystemExit):
        cli.main(["study", "extrapolation", "--out", "unused", "--quick", "--full"])
    assert cli.main(["study", "extrapolation", "--out", "unused", "--encodings", "nope"]) == 2  # names the entry


def test_default_seed_count_is_planned_from_the_detectable_difference():
    """The default seeds are the fewest whose detectable difference (planning SDs) is at most each
    measure's minimum effect; one seed fewer would not detect it."""
    from posenc_np.study import stats
    from posenc_np.study.config import PLANNING_SD

    n = StudyConfig().seeds
    for measure, sd in PLANNING_SD.items():
        assert stats.detectable(sd, n) <= stats.MEASURES[measure].margin
    assert any(stats.detectable(sd, n - 1) > stats.MEASURES[m].margin for m, sd in PLANNING_SD.items())
