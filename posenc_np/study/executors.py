"""Where cells run: one interface, three executors.

An executor runs ``fn(item)`` for every item and calls ``on_result(result)`` in the driver as
each finishes (in completion order), or ``on_failure(item, message)`` when the machinery
failed to run an item (a worker process died, a Dask worker was lost). ``fn`` itself never
raises for a failing cell (:func:`~posenc_np.study.cells.run_cell` records the error), so
``on_failure`` means the executor, not the cell, broke.

``InProcess``
    one cell after the other in this process (debugging, tests, a single core).
``ProcessPool(jobs)``
    ``jobs`` local worker processes (``spawn``), the default.
``Dask(address=None, workers=2, connect_timeout=20)``
    a Dask distributed cluster: the scheduler at ``address`` (``tcp://host:8786``), or a local
    cluster of ``workers`` single-threaded worker processes started for this run and stopped
    after it. Needs the ``dask`` extra (``pip install posenc-np[dask]``), and ``posenc_np`` plus
    the same NumPy/BLAS build on every worker. Workers must run one thread each (``dask worker
    --nthreads 1``): a cell pins BLAS to one thread, and that setting is per process.

Results do not depend on the executor: a cell carries its seeds, and its numbers are bit for
bit the same wherever it runs on the same kind of machine and NumPy/BLAS build
(``tests/test_study_executors.py`` checks in-process, pool and local Dask).
"""

from __future__ import annotations

import logging

__all__ = ["Dask", "InProcess", "ProcessPool", "make_executor"]


class InProcess:
    """Run every item here, one after the other."""

    name = "in-process"

    def run(self, fn, items, on_result, on_failure) -> None:
        for item in items:
            on_result(fn(item))


class ProcessPool:
    """Run items on ``jobs`` local worker processes (``spawn`` start method)."""

    def __init__(self, jobs: int = 2):
        self.jobs = jobs
        self.name = f"process pool ({jobs} workers)"

    def run(self, fn, items, on_result, on_failure) -> None:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor, as_completed

        pool = ProcessPoolExecutor(max_workers=self.jobs, mp_context=mp.get_context("spawn"))
        futures = {pool.submit(fn, item): item for item in items}
        try:
            for fut in as_completed(futures):
                try:
                    result = fut.result()
                except Exception as exc:  # noqa: BLE001 - e.g. BrokenProcessPool: the worker died
                    on_failure(futures[fut], f"{type(exc).__name__}: {exc} (the worker process failed)")
                else:
                    on_result(result)
        except BaseException:
            # Ctrl-C (or an error in on_result): stop now. Finished cells are already stored;
            # waiting for the running ones would only delay the exit, so their workers are ended.
            workers = list((getattr(pool, "_processes", None) or {}).values())
            pool.shutdown(wait=False, cancel_futures=True)
            for proc in workers:
                proc.terminate()
            raise
        pool.shutdown(wait=True)


class Dask:
    """Run items on a Dask distributed cluster (``address``), or on a local cluster of
    ``workers`` single-threaded processes when ``address`` is None."""

    def __init__(self, address: str | None = None, workers: int = 2, connect_timeout: float = 20.0):
        try:
            import distributed  # noqa: F401
        except ImportError as exc:
            raise ValueError("the Dask executor needs dask[distributed] (pip install 'posenc-np[dask]')") from exc
        self.address, self.workers, self.connect_timeout = address, workers, connect_timeout
        self.name = f"dask scheduler {address}" if address else f"local dask cluster ({workers} workers)"

    def _client(self):
        from distributed import Client, LocalCluster

        if self.address is None:
            cluster = LocalCluster(n_workers=self.workers, threads_per_worker=1, processes=True,
                                   dashboard_address=None, silence_logs=logging.ERROR)
            return Client(cluster), cluster
        try:
            client = Client(self.address, timeout=f"{self.connect_timeout}s")
        except (OSError, TimeoutError) as exc:
            raise ValueError(f"cannot reach the Dask scheduler at {self.address!r}: {exc}") from exc
        return client, None

    def run(self, fn, items, on_result, on_failure) -> None:
        from distributed import as_completed

        client, cluster = self._client()
        try:
            threads = client.nthreads()
            busy = {w: n for w, n in threads.items() if n != 1}
            if busy:
                raise ValueError(f"Dask workers {busy} run more than one thread; start them with --nthreads 1 "
                                 "(each cell pins BLAS to one thread, a per-process setting)")
            futures = {client.submit(fn, item, pure=False): item for item in items}
            keys = {fut.key: item for fut, item in futures.items()}
            try:
                for fut in as_completed(list(futures)):
                    try:
                        result = fut.result()
                    except Exception as exc:  # noqa: BLE001 - KilledWorker, a lost connection, ...
                        on_failure(keys[fut.key], f"{type(exc).__name__}: {exc} (the Dask worker failed)")
                    else:
                        on_result(result)
            finally:
                client.cancel(list(futures))
        finally:
            client.close()
            if cluster is not None:
                cluster.close()


def make_executor(*, jobs: int = 2, scheduler: str | None = None, dask_workers: int | None = None):
    """The executor the CLI options name: ``scheduler`` (a Dask scheduler address) wins, then
    ``dask_workers`` (a local Dask cluster), else ``jobs`` (1: in-process, more: a process pool)."""
    if scheduler is not None:
        return Dask(address=scheduler)
    if dask_workers is not None:
        return Dask(workers=dask_workers)
    return InProcess() if jobs <= 1 else ProcessPool(jobs)
