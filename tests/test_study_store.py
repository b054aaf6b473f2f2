"""The study keeps what it finished (issue 13): cells stored atomically as they finish, resume,
failed cells recorded without stopping the grid, unwritable outputs found before the first cell,
and task arguments that would train on nothing refused."""

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from posenc_np import cli, study
from posenc_np.study import (
    CopyTask,
    LagTask,
    ReverseTask,
    StudyConfig,
    cell_id,
    grid,
    run_extrapolation,
)
from posenc_np.study import cells as study_cells

TINY = {"parts": ("tasks",), "training": ("fixed",), "seeds": 1, "encodings": ["none", "alibi"], "fusions": ("add",),
        "tasks": ["copy", "lag"], "train_len": 2, "alphabet": 4, "d_model": 8, "n_heads": 2, "n_layers": 1, "d_ff": 8,
        "steps": 2, "batch_size": 4, "eval_sequences": 4, "eval_factors": (1, 2), "jobs": 1}


def _strip(records):
    return [{k: v for k, v in r.items() if k != "train_seconds"} for r in records]


def test_tasks_refuse_arguments_that_train_on_nothing():
    with pytest.raises(ValueError, match=r"lag must be an integer <= 7"):
        LagTask(4, lag=10)  # no position i > lag: nothing scored
    with pytest.raises(ValueError, match="lag must be an integer >= 1"):
        LagTask(4, lag=-1)  # failed later with a broadcast error
    with pytest.raises(ValueError, match="n must be an integer >= 1"):
        CopyTask(0)
    with pytest.raises(ValueError, match="alphabet must be an integer >= 2"):
        ReverseTask(4, alphabet=1)
    with pytest.raises(ValueError, match="batch_size must be an integer >= 1"):
        CopyTask(2).sample(np.random.default_rng(0), 0)
    with pytest.raises(TypeError, match="rng must be a numpy.random.Generator"):
        CopyTask(2).sample(0, 2)
    tokens, targets = LagTask(4, lag=7).sample(np.random.default_rng(0), 2)  # the largest lag scores one position
    assert (targets != -100).sum(axis=1).tolist() == [1, 1]
    np.testing.assert_array_equal(targets[:, 8], tokens[:, 1])


def test_config_is_checked_before_anything_runs(tmp_path):
    with pytest.raises(ValueError, match=r"encodings has unknown entries \['nope'\]"):
        run_extrapolation(tmp_path, StudyConfig(**{**TINY, "encodings": ["nope"]}), progress=False)
    with pytest.raises(ValueError, match="alphabet must be an integer >= 2"):
        run_extrapolation(tmp_path, StudyConfig(**{**TINY, "alphabet": 1}), progress=False)
    assert not any(tmp_path.iterdir())


def test_unwritable_output_is_found_before_the_first_cell(tmp_path, monkeypatch):
    """results.json being a directory killed the study after all its runs."""
    ran = []
    monkeypatch.setattr(study_cells, "_run_one", lambda cfg, cell: ran.append(cell) or [])
    (tmp_path / "results.json").mkdir()
    with pytest.raises(ValueError, match="results.json' is a directory"):
        run_extrapolation(tmp_path, StudyConfig(**TINY), progress=False)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ValueError, match="cannot create the study output directory"):
        run_extrapolation(blocker, StudyConfig(**TINY), progress=False)
    assert ran == []
    assert cli.main(["study", "extrapolation", "--out", str(tmp_path), "--quick", "--no-progress"]) == 2


def test_foreign_or_different_outputs_are_not_clobbered(tmp_path):
    (tmp_path / "results.json").write_text('{"mine": true}')
    with pytest.raises(ValueError, match="was not written by posenc-np study extrapolation; refusing"):
        run_extrapolation(tmp_path, StudyConfig(**TINY), progress=False)
    assert (tmp_path / "results.json").read_text() == '{"mine": true}'
    out = tmp_path / "s"
    run_extrapolation(out, StudyConfig(**TINY), progress=False)
    with pytest.raises(ValueError, match=r"another configuration \(differs in \['steps'\]\)"):
        run_extrapolation(out, StudyConfig(**{**TINY, "steps": 3}), progress=False)
    run_extrapolation(out, StudyConfig(**{**TINY, "jobs": 2}), progress=False)  # jobs only schedules: same study


def test_a_grown_grid_reuses_the_stored_cells(tmp_path, monkeypatch):
    """Adding an encoding (or a seed) to a finished study runs only the new cells; the results
    equal a fresh run of the grown grid. Changing an encoding's options reruns its cells only."""
    small = StudyConfig(**{**TINY, "encodings": TINY["encodings"][:1]})
    run_extrapolation(tmp_path / "s", small, progress=False)
    grown = StudyConfig(**{**TINY, "encodings": TINY["encodings"][:2], "seeds": TINY["seeds"] + 1})
    real, ran = study_cells._run_one, []
    monkeypatch.setattr(study_cells, "_run_one", lambda cfg, cell, shared=None: ran.append(cell) or real(cfg, cell, shared))
    again = run_extrapolation(tmp_path / "s", grown, progress=False)
    new = [c for c in grid(grown) if c not in grid(small)]
    assert new and sorted(map(cell_id, ran)) == sorted(map(cell_id, new))
    monkeypatch.setattr(study_cells, "_run_one", real)
    fresh = run_extrapolation(tmp_path / "fresh", grown, progress=False)
    untimed = [[{k: v for k, v in r.items() if not k.endswith("seconds")} for r in doc["records"]]
               for doc in (again, fresh)]
    assert untimed[0] == untimed[1]


def test_interrupted_study_keeps_finished_cells_and_resumes(tmp_path, monkeypatch):
    cfg = StudyConfig(**TINY)
    fresh = run_extrapolation(tmp_path / "fresh", cfg, progress=False)
    cells = grid(cfg)
    real = study_cells._run_one
    calls = []

    def stop_at_third(cfg_dict, cell, shared=None):
        calls.append(cell_id(cell))
        if len(calls) == 3:
            raise KeyboardInterrupt  # Ctrl-C in the middle of the grid
        return real(cfg_dict, cell, shared)

    monkeypatch.setattr(study_cells, "_run_one", stop_at_third)
    out = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        run_extrapolation(out, cfg, progress=False)
    stored = sorted(p.stem for p in (out / "cells").iterdir())
    assert stored == sorted(cell_id(c) for c in cells[:2])  # the two finished cells were kept
    assert not (out / "results.json").exists()
    calls.clear()
    monkeypatch.setattr(study_cells, "_run_one",
                        lambda c, cell, shared=None: calls.append(cell_id(cell)) or real(c, cell, shared))
    resumed = run_extrapolation(out, cfg, progress=False)
    assert calls == [cell_id(c) for c in cells[2:]]  # only the missing cells ran
    assert _strip(resumed["records"]) == _strip(fresh["records"]) and resumed["failed"] == []
    calls.clear()
    run_extrapolation(out, cfg, progress=False)
    assert calls == []  # everything was done
    plot = ["tasks.png", "curves.png", "attention.png"] if importlib.util.find_spec("matplotlib") else []
    assert sorted(os.listdir(out)) == sorted(["cells", "results.json", "results.md", "results.csv", "study.json",
                                              *plot])


def test_a_failing_cell_is_recorded_and_the_grid_goes_on(tmp_path, monkeypatch, capsys):
    cfg = StudyConfig(**TINY)
    real = study_cells._run_one
    bad = cell_id(grid(cfg)[1])

    def flaky(cfg_dict, cell, shared=None):
        if cell_id(cell) == bad:
            raise FloatingPointError("simulated divergence")
        return real(cfg_dict, cell, shared)

    monkeypatch.setattr(study_cells, "_run_one", flaky)
    res = run_extrapolation(tmp_path, cfg, progress=True)
    assert [f["cell"] for f in res["failed"]] == [bad]
    assert "FloatingPointError: simulated divergence" in res["failed"][0]["error"]
    assert {cell_id(c) for c in grid(cfg)} - {f"tasks__fixed__{r['label']}__{r['task']}__s0" for r in res["records"]} \
        == {bad}
    on_disk = json.loads((tmp_path / "results.json").read_text())
    assert on_disk["failed"][0]["cell"] == bad
    assert "1 cell(s) FAILED" in capsys.readouterr().err
    assert json.loads((tmp_path / "cells" / f"{bad}.json").read_text())["status"] == "error"
    monkeypatch.setattr(study_cells, "_run_one", real)
    res = run_extrapolation(tmp_path, cfg, progress=False)  # a rerun retries the failed cell
    assert res["failed"] == [] and len(res["records"]) == len(grid(cfg)) * 2


def test_corrupt_cell_file_is_recomputed(tmp_path):
    cfg = StudyConfig(**TINY)
    first = run_extrapolation(tmp_path, cfg, progress=False)
    victim = tmp_path / "cells" / f"{cell_id(grid(cfg)[0])}.json"
    victim.write_bytes(b'{"cell": trunc')
    again = run_extrapolation(tmp_path, cfg, progress=False)
    assert _strip(again["records"]) == _strip(first["records"])
    assert json.loads(victim.read_text())["status"] == "ok"


@pytest.mark.slow
def test_sigkill_keeps_finished_cells(tmp_path):
    """Killed mid-way (SIGKILL, no cleanup at all) nothing was kept: a study in a fresh process is
    killed once its first cell is on disk (~3 s)."""
    out = tmp_path / "out"
    cfg = {**TINY, "encodings": ["none", "alibi", "rope", "t5"], "steps": 30}
    script = (f"from posenc_np.study import StudyConfig, run_extrapolation\n"
              f"run_extrapolation({str(out)!r}, StudyConfig(**{cfg!r}), progress=False)\n")
    env = {**os.environ, "PYTHONPATH": str(Path(study.__file__).parent.parent.parent)}
    proc = subprocess.Popen([sys.executable, "-c", script], env=env)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not list((out / "cells").glob("*.json")):
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    kept = {p.stem for p in (out / "cells").glob("*.json")}
    assert kept and all(json.loads((out / "cells" / f"{k}.json").read_text())["status"] == "ok" for k in kept)
    res = run_extrapolation(out, StudyConfig(**cfg), progress=False)
    assert res["failed"] == [] and len(res["records"]) == len(grid(StudyConfig(**cfg))) * 2
    assert not [p for p in out.rglob("*") if ".tmp" in p.name]  # temporaries of the killed writer swept
