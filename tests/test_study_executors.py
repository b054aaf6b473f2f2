"""One executor interface: the same cells give bit-identical results in-process, in a local process
pool and on a local Dask cluster (seeds travel with the cells; BLAS is pinned to one thread
inside each cell), and each executor hands back results as cells finish."""

import importlib.util

import pytest

from _support import require_module
from posenc_np.study import (
    Dask,
    InProcess,
    ProcessPool,
    StudyConfig,
    make_executor,
    run_extrapolation,
)

TINY = {"parts": ("tasks", "lm"), "training": ("fixed", "varying"), "seeds": 1, "encodings": ["rope", "alibi"],
        "fusions": ("add",), "tasks": ["lag"], "train_len": 3, "alphabet": 4, "d_model": 8, "n_heads": 2,
        "n_layers": 1, "d_ff": 8, "steps": 3, "batch_size": 4, "eval_sequences": 4, "eval_factors": (1, 2),
        "lm_train_len": 8, "lm_eval_factors": (1, 2), "lm_steps": 2, "lm_batch_size": 2, "lm_eval_tokens": 32,
        "jobs": 1}
TIMING = {"train_seconds", "finetune_seconds"}


def _numbers(results):
    return [{k: v for k, v in r.items() if k not in TIMING} for r in results["records"]]


def test_make_executor_picks_by_option():
    assert isinstance(make_executor(jobs=1), InProcess)
    pool = make_executor(jobs=3)
    assert isinstance(pool, ProcessPool) and pool.jobs == 3
    if importlib.util.find_spec("distributed"):
        assert isinstance(make_executor(jobs=2, dask_workers=1), Dask)
        assert make_executor(scheduler="tcp://127.0.0.1:1").address == "tcp://127.0.0.1:1"


@pytest.mark.slow  # starts 2 spawned worker processes and a 1-worker Dask cluster: ~10 s on 2 busy cores
def test_in_process_pool_and_dask_give_bit_identical_results(tmp_path):
    require_module("distributed", "dask")
    cfg = StudyConfig(**TINY)
    serial = run_extrapolation(tmp_path / "serial", cfg, progress=False, executor=InProcess())
    pooled = run_extrapolation(tmp_path / "pool", cfg, progress=False, executor=ProcessPool(2))
    dask = run_extrapolation(tmp_path / "dask", cfg, progress=False, executor=Dask(workers=1))
    assert serial["failed"] == pooled["failed"] == dask["failed"] == []
    # 4 task cells x 2 lengths; 2 LM cells and the n-gram baseline x 2 modes x 2 lengths
    assert len(serial["records"]) == 4 * 2 + 3 * 2 * 2
    assert _numbers(pooled) == _numbers(serial)
    assert _numbers(dask) == _numbers(serial)
    assert dask["meta"]["executor"] == "local dask cluster (1 workers)"


def test_an_executor_failure_is_recorded_per_cell(tmp_path):
    """A worker that dies (here: an executor reporting failure) becomes an error record of its
    cell, and the other cells still finish."""

    class Flaky(InProcess):
        name = "flaky"

        def run(self, fn, items, on_result, on_failure, shared=None):
            items = list(items)
            on_failure(items[0], "BrokenProcessPool: worker died (simulated)")
            super().run(fn, items[1:], on_result, on_failure, shared)

    cfg = StudyConfig(**{**TINY, "parts": ("tasks",), "training": ("fixed",)})
    res = run_extrapolation(tmp_path, cfg, progress=False, executor=Flaky())
    assert [f["cell"] for f in res["failed"]] == ["tasks__fixed__rope__lag__s0"]
    assert "worker died" in res["failed"][0]["error"]
    again = run_extrapolation(tmp_path, cfg, progress=False, executor=InProcess())  # resume runs only that cell
    assert again["failed"] == [] and len(again["records"]) == 4


def test_dask_refuses_multithreaded_workers(tmp_path):
    require_module("distributed", "dask")

    class Threaded(Dask):
        def _client(self):
            class Client:
                def nthreads(self):
                    return {"tcp://w1": 1, "tcp://w2": 4}

                def close(self):
                    pass
            return Client(), None

    with pytest.raises(ValueError, match=r"run more than one thread.*--nthreads 1"):
        run_extrapolation(tmp_path, StudyConfig(**{**TINY, "parts": ("tasks",)}), progress=False,
                          executor=Threaded(address="tcp://nowhere:1"))


def test_unreachable_scheduler_is_a_clear_error(tmp_path):
    require_module("distributed", "dask")
    with pytest.raises(ValueError, match="cannot reach the Dask scheduler at 'tcp://127.0.0.1:9'"):
        run_extrapolation(tmp_path, StudyConfig(**{**TINY, "parts": ("tasks",)}), progress=False,
                          executor=Dask(address="tcp://127.0.0.1:9", connect_timeout=1))
