"""Where cells run: one interface, three executors.

An executor runs ``fn(item, shared)`` for every item (``shared``: one payload shipped once per
worker, not once per item: the LM corpus and the user's registered encodings) and calls ``on_result(result)`` in the driver as
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
from collections.abc import Callable, Iterable
from typing import Any

__all__ = ["Dask", "InProcess", "ProcessPool", "make_executor", "probe_scheduler", "scheduler_endpoint"]


class InProcess:
    """Run every item here, one after the other.

    Examples
    --------
    >>> from posenc_np.study.executors import InProcess
    >>> done = []
    >>> InProcess().run(lambda item, shared: {"item": item, "shared": shared}, [1, 2], done.append, print,
    ...                 shared={"corpus": None})
    >>> done                               # one result per item, in order, each with the shared payload
    [{'item': 1, 'shared': {'corpus': None}}, {'item': 2, 'shared': {'corpus': None}}]
    """

    name = "in-process"

    def run(self, fn: Callable[[Any, Any], dict], items: Iterable, on_result: Callable[[dict], None],
            on_failure: Callable[[Any, str], None], shared: dict | None = None) -> None:
        for item in items:
            on_result(fn(item, shared))


class ProcessPool:
    """Run items on ``jobs`` local worker processes (``spawn`` start method).

    Examples
    --------
    >>> from posenc_np.study.executors import ProcessPool
    >>> pool = ProcessPool(jobs=3)         # no process starts before run()
    >>> pool.jobs, pool.name
    (3, 'process pool (3 workers)')
    """

    def __init__(self, jobs: int = 2) -> None:
        self.jobs = jobs
        self.name = f"process pool ({jobs} workers)"

    def run(self, fn: Callable[[Any, Any], dict], items: Iterable, on_result: Callable[[dict], None],
            on_failure: Callable[[Any, str], None], shared: dict | None = None) -> None:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor, as_completed

        pool = ProcessPoolExecutor(max_workers=self.jobs, mp_context=mp.get_context("spawn"), initializer=_install,
                                   initargs=(shared,))
        futures = {pool.submit(_with_shared, fn, item): item for item in items}
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


_SHARED = None  # a pool worker's copy of the shared payload (set once by the pool's initializer)


def _install(shared) -> None:
    global _SHARED
    _SHARED = shared
    from .cells import install_shared

    install_shared(shared)  # before any item is unpickled: an item may name a registered encoding


def _with_shared(fn, item):
    return fn(item, _SHARED)


class Dask:
    """Run items on a Dask distributed cluster (``address``), or on a local cluster of
    ``workers`` single-threaded processes when ``address`` is None.

    Examples
    --------
    >>> from posenc_np.study.executors import Dask
    >>> Dask(address="tcp://127.0.0.1:8786").name     # needs the 'dask' extra; nothing is contacted before run()
    'dask scheduler tcp://127.0.0.1:8786'
    >>> Dask(workers=3).name
    'local dask cluster (3 workers)'
    >>> Dask(address="inproc://scheduler")
    Traceback (most recent call last):
        ...
    ValueError: --scheduler 'inproc://scheduler': only tcp://host:port addresses are supported, not inproc://
    """

    def __init__(self, address: str | None = None, workers: int = 2, connect_timeout: float = 20.0) -> None:
        try:
            import distributed  # noqa: F401
        except ImportError as exc:
            raise ValueError("the Dask executor needs dask[distributed] (pip install 'posenc-np[dask]')") from exc
        if address is not None:
            scheduler_endpoint(address)
        self.address, self.workers, self.connect_timeout = address, workers, connect_timeout
        self.name = f"dask scheduler {address}" if address else f"local dask cluster ({workers} workers)"

    def _client(self):
        from distributed import Client, LocalCluster

        if self.address is None:
            cluster = LocalCluster(n_workers=self.workers, threads_per_worker=1, processes=True,
                                   dashboard_address=None, silence_logs=logging.ERROR)
            return Client(cluster), cluster
        probe_scheduler(self.address, self.connect_timeout)
        try:
            client = Client(self.address, timeout=f"{self.connect_timeout}s")
        except (OSError, TimeoutError) as exc:
            raise ValueError(f"cannot reach the Dask scheduler at {self.address!r}: {exc}") from exc
        return client, None

    def run(self, fn: Callable[[Any, Any], dict], items: Iterable, on_result: Callable[[dict], None],
            on_failure: Callable[[Any, str], None], shared: dict | None = None) -> None:
        from distributed import as_completed

        if shared and shared.get("encodings"):
            shared = {**shared, "encodings": _by_value(shared["encodings"])}

        client, cluster = self._client()
        try:
            threads = client.nthreads()
            busy = {w: n for w, n in threads.items() if n != 1}
            if busy:
                raise ValueError(f"Dask workers {busy} run more than one thread; start them with --nthreads 1 "
                                 "(each cell pins BLAS to one thread, a per-process setting)")
            payload = client.scatter([shared], broadcast=True, hash=False)[0]  # once per worker, not per cell
            futures = {client.submit(fn, item, payload, pure=False): item for item in items}
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


def scheduler_endpoint(address: str) -> tuple[str, int]:
    """``(host, port)`` of a Dask scheduler address ``tcp://host:port`` (or ``host:port``);
    ``ValueError`` for another scheme (``inproc://`` lives in one process, ``ucx://`` and ``tls://``
    need a configuration this tool does not pass) or anything that is not such an address.

    Examples
    --------
    >>> from posenc_np.study.executors import scheduler_endpoint
    >>> scheduler_endpoint("tcp://10.0.0.5:8786"), scheduler_endpoint("[::1]:8786")    # tcp:// may be left out
    (('10.0.0.5', 8786), ('::1', 8786))
    >>> scheduler_endpoint("ucx://10.0.0.5:8786")
    Traceback (most recent call last):
        ...
    ValueError: --scheduler 'ucx://10.0.0.5:8786': only tcp://host:port addresses are supported, not ucx://
    """
    scheme, sep, rest = address.partition("://") if isinstance(address, str) else ("", "", "")
    if not sep:
        scheme, rest = "tcp", address
    if scheme != "tcp":
        raise ValueError(f"--scheduler {address!r}: only tcp://host:port addresses are supported, not {scheme}://")
    host, _, port = rest.rpartition(":") if isinstance(rest, str) else ("", "", "")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not host or not port.isdigit() or not 0 < int(port) < 65536 or "/" in host:
        raise ValueError(f"--scheduler {address!r} is not an address of the form tcp://host:port")
    return host, int(port)


#: Largest first message (the handshake) a Dask scheduler sends; its first 8 bytes give its length.
_MAX_HANDSHAKE_BYTES = 1 << 20


def probe_scheduler(address: str, timeout: float) -> None:
    """Check within ``timeout`` seconds, for the whole exchange, that a Dask scheduler answers at
    ``address``: connect, then read the handshake it sends first (a native ``uint64`` length, then
    that many bytes). A silent listener, a server of another protocol (HTTP waits for a request;
    its reply would read as an absurd length) or no listener at all is a ``ValueError``.

    Examples
    --------
    >>> import socket
    >>> from posenc_np.study.executors import probe_scheduler
    >>> with socket.create_server(("127.0.0.1", 0)) as server:     # a local listener that never speaks
    ...     probe_scheduler(f"tcp://127.0.0.1:{server.getsockname()[1]}", timeout=0.05)
    Traceback (most recent call last):
        ...
    ValueError: no Dask handshake from 'tcp://127.0.0.1:...' within 0.05 s (a silent server, or not a Dask scheduler)
    """
    import socket
    import struct
    import time

    host, port = scheduler_endpoint(address)
    deadline = time.monotonic() + timeout

    def recv(n: int) -> bytes:
        data = b""
        while len(data) < n:
            sock.settimeout(max(deadline - time.monotonic(), 1e-3))
            chunk = sock.recv(min(n - len(data), 1 << 16))
            if not chunk:
                raise ValueError(f"the server at {address!r} closed the connection during the Dask handshake "
                                 "(is it a Dask scheduler?)")
            data += chunk
        return data

    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            head = recv(8)
            (size,) = struct.unpack("Q", head)
            if size > _MAX_HANDSHAKE_BYTES:
                raise ValueError(f"the server at {address!r} is not a Dask scheduler (it sent {head!r})")
            recv(size)
    except TimeoutError:
        raise ValueError(f"no Dask handshake from {address!r} within {timeout:g} s (a silent server, or not a "
                         "Dask scheduler)") from None
    except OSError as exc:
        raise ValueError(f"cannot reach the Dask scheduler at {address!r}: {exc.strerror or exc}") from None


def _by_value(entries: dict) -> bytes:
    """The registered encodings as cloudpickle bytes, their users' modules pickled by value, so
    that Dask workers need not have those modules installed. (Dask pickles a payload with the
    standard pickle first, which stores functions by reference: hence the bytes.)"""
    import sys

    import cloudpickle

    for entry in entries.values():
        for fn in (entry.build, entry.scale, entry.attention, entry.attention_backward):
            mod = getattr(fn, "__module__", None)
            if mod and mod != "__main__" and mod.split(".")[0] != "posenc_np" and mod in sys.modules:
                cloudpickle.register_pickle_by_value(sys.modules[mod])
    return cloudpickle.dumps(entries)


def make_executor(*, jobs: int = 2, scheduler: str | None = None,
                  dask_workers: int | None = None) -> InProcess | ProcessPool | Dask:
    """The executor the CLI options name: ``scheduler`` (a Dask scheduler address) wins, then
    ``dask_workers`` (a local Dask cluster), else ``jobs`` (1: in-process, more: a process pool).

    Examples
    --------
    >>> from posenc_np.study.executors import make_executor
    >>> make_executor(jobs=1).name, make_executor(jobs=4).name
    ('in-process', 'process pool (4 workers)')
    """
    if scheduler is not None:
        return Dask(address=scheduler)
    if dask_workers is not None:
        return Dask(workers=dask_workers)
    return InProcess() if jobs <= 1 else ProcessPool(jobs)
