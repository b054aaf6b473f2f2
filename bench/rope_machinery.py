"""What the RoPE kernel's mechanisms buy, through the public API: an interleaved A/B in one process.

``python bench/rope_machinery.py [ROUNDS]``. Each mechanism of ``posenc_np/kernels/rope.py`` is
switched off by replacing it for the duration of a round (``off``) and left as it is (``on``);
rounds alternate which goes first, each times the median of a batch of calls (300 for small
shapes, 9 for the 128 MiB one) after warm-up calls, and the table gives the median over rounds.
Mechanisms:

* ``memory-order path`` (``_rows_geometry`` / ``_rows_kernel``): a call whose arrays are all
  C-contiguous rotates its rows in memory order with no plan; off: ``_rows_geometry`` returns
  None, so the call takes the planned path (row offsets, blocks of table rows) as strided calls do;
* ``heads at a time`` (``_rows_kernel``): a work item rotates its block of rows in up to
  ``_PERIODS_PER_ITEM`` periods of the tables (heads of ``(B, H, T, D)``), so each table row is read
  once for all of them; off: the same kernel compiled here with one period an item
  (``_PERIODS_PER_ITEM = 1``);
* ``prefetch`` (``prefetch_lines`` in ``_rows_kernel``): on more than one thread each row first
  prefetches the lines of the row ``_PREFETCH_ROWS`` ahead; off: the kernel compiled here with
  ``_PREFETCH_ROWS = 0`` (as its serial copy is);
* ``plan cache`` (``_cached_plan``): the row offsets and blocking of a small geometry are kept (the
  model's q and k are strided views of its qkv buffer, which take the planned path); off: every
  call plans afresh;
* ``serial copies`` (``_parallel_and_serial``): a call too small for two threads runs a copy of the
  kernel compiled without ``prange`` (and ``noalias``) on the calling thread; off: it runs the
  parallel kernel with Numba's thread count set to one for the call.

Shapes: ``rope.apply`` on ``(1, 4, 128, 128)``, ``(1, 8, 1024, 128)`` and ``(4, 16, 2048, 128)``
float32 (out of place, ``out=``, in place), in place on ``(64, 8, 256, 64)``, and on the
``(B, T, H, D)`` array ``(1, 4096, 32, 128)``; ``rope.apply_qk`` on q, k views of a fused
``(B, T, 3 H D)`` buffer rotated in place (what the model does); the serial copies on the calls of
these that run on one thread.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
import types

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from posenc_np import rope
from posenc_np.kernels import rope as krope


def _recompiled(name: str, **scope) -> tuple:
    """Kernel ``name`` of ``posenc_np/kernels/rope.py`` and its serial copy compiled again with the
    module globals in ``scope`` replaced (the switched-off variants); the serial copy without the
    prefetch, as the library's (``_parallel_and_serial``)."""
    from posenc_np.kernels._numba import njit_kernel

    body = getattr(krope, name).py_func
    globals_ = dict(body.__globals__, **scope)
    kernels = []
    for parallel in (True, False):
        copy = types.FunctionType(body.__code__, globals_ if parallel else dict(globals_, _PREFETCH_ROWS=0),
                                  f"{body.__name__}_off{'' if parallel else '_serial'}")
        kernels.append(njit_kernel(parallel=parallel, fastmath=krope._FASTMATH, noalias=not parallel,
                                   cache=False)(copy))
    return tuple(kernels)


def _parallel_only(kernels, use: int, threads: int, *args):
    """``krope._launch`` without the serial copy: the parallel kernel, on ``use`` threads."""
    with krope.launch_guard(), krope._num_threads(use, threads):
        kernels[0](*args)


_KERNELS = ("_rows_kernel", "_rows_kernel_serial")


def _switch(mechanism: str, on: bool, saved: dict) -> None:
    krope._rows_geometry, krope._cached_plan, krope._launch = saved["rows"], saved["plan"], saved["launch"]
    for name, kernel in zip(_KERNELS, saved["kernels"]):
        setattr(krope, name, kernel)
    if not on and mechanism == "memory-order path":
        krope._rows_geometry = lambda *args, **kwargs: None
    if not on and mechanism == "heads at a time":
        krope._rows_kernel, krope._rows_kernel_serial = saved["one period"]
    if not on and mechanism == "prefetch":
        for name, kernel in zip(_KERNELS, saved["no prefetch"]):
            setattr(krope, name, kernel)
    if not on and mechanism == "plan cache":
        krope._cached_plan = krope._plan
    if not on and mechanism == "serial copies":
        krope._launch = _parallel_only


def _cases(rng):
    out = []
    for shape in ((1, 4, 128, 128), (1, 8, 1024, 128), (4, 16, 2048, 128)):
        calls = 9 if shape[0] == 4 else 300
        x = rng.standard_normal(shape, dtype=np.float32)
        c, s = rope.cos_sin(np.arange(shape[2]), rope.inv_freq(128)[0], dtype=np.float32)
        y = np.empty_like(x)
        out.append(("memory-order path", f"rope.apply {shape}", calls, lambda x=x, c=c, s=s: rope.apply(x, c, s)))
        out.append(("memory-order path", f"rope.apply {shape}, out=y", calls,
                    lambda x=x, c=c, s=s, y=y: rope.apply(x, c, s, out=y)))
        out.append(("memory-order path", f"rope.apply {shape}, out=x", calls,
                    lambda x=x, c=c, s=s: rope.apply(x, c, s, out=x)))
        out.append(("heads at a time", f"rope.apply {shape}, out=x", calls,
                    lambda x=x, c=c, s=s: rope.apply(x, c, s, out=x)))
        if shape[0] > 1 or shape[2] > 128:
            out.append(("heads at a time", f"rope.apply {shape}, out=y", calls,
                        lambda x=x, c=c, s=s, y=y: rope.apply(x, c, s, out=y)))
        if shape[0] == 4:
            out.append(("prefetch", f"rope.apply {shape}", calls, lambda x=x, c=c, s=s: rope.apply(x, c, s)))
            out.append(("prefetch", f"rope.apply {shape}, out=y", calls,
                        lambda x=x, c=c, s=s, y=y: rope.apply(x, c, s, out=y)))
            out.append(("prefetch", f"rope.apply {shape}, out=x", calls,
                        lambda x=x, c=c, s=s: rope.apply(x, c, s, out=x)))
        if x.size < 2 * krope._ELEMENTS_PER_THREAD:  # runs on one thread
            out.append(("serial copies", f"rope.apply {shape}, out=y", calls,
                        lambda x=x, c=c, s=s, y=y: rope.apply(x, c, s, out=y)))
            out.append(("serial copies", f"rope.apply {shape}, out=x", calls,
                        lambda x=x, c=c, s=s: rope.apply(x, c, s, out=x)))
    # in place with d = 64 and short tables: rows of 256 bytes, eight heads per table row
    x = rng.standard_normal((64, 8, 256, 64), dtype=np.float32)
    c, s = rope.cos_sin(np.arange(256), rope.inv_freq(64)[0], dtype=np.float32)
    for mechanism in ("heads at a time", "prefetch"):
        out.append((mechanism, "rope.apply (64, 8, 256, 64), out=x", 30,
                    lambda x=x, c=c, s=s: rope.apply(x, c, s, out=x)))
    # (B, T, H, D) with (T, 1, d) tables: the heads of a position share a table row already
    x = rng.standard_normal((1, 4096, 32, 128), dtype=np.float32)
    c, s = (t[:, None] for t in rope.cos_sin(np.arange(4096), rope.inv_freq(128)[0], dtype=np.float32))
    y = np.empty_like(x)
    out.append(("prefetch", "rope.apply (1, 4096, 32, 128) (B, T, H, D), out=y", 15,
                lambda x=x, c=c, s=s, y=y: rope.apply(x, c, s, out=y)))
    out.append(("prefetch", "rope.apply (1, 4096, 32, 128) (B, T, H, D), out=x", 15,
                lambda x=x, c=c, s=s: rope.apply(x, c, s, out=x)))
    for B, T, H, D in ((16, 32, 4, 16), (8, 128, 4, 32), (1, 512, 8, 64)):
        qkv = rng.standard_normal((B, T, 3 * H * D), dtype=np.float32)
        c, s = rope.cos_sin(np.arange(T), rope.inv_freq(D)[0], dtype=np.float32)

        def model(qkv=qkv, c=c, s=s, B=B, T=T, H=H, D=D):
            q, k, _ = (a.reshape(B, T, H, D).transpose(0, 2, 1, 3) for a in np.split(qkv, 3, axis=-1))
            return rope.apply_qk(q, k, c, s, out_q=q, out_k=k)

        out.append(("plan cache", f"rope.apply_qk, q and k views of qkv, in place, (B,H,T,D) = {(B, H, T, D)}",
                    300, model))
        if B * T * H * D < 2 * krope._ELEMENTS_PER_THREAD:  # each of q and k on one thread
            out.append(("serial copies", f"rope.apply_qk, q and k views of qkv, in place, (B,H,T,D) = "
                        f"{(B, H, T, D)}", 300, model))
    return out


def main(rounds: int = 11) -> None:
    saved = {"rows": krope._rows_geometry, "plan": krope._cached_plan, "launch": krope._launch,
             "kernels": tuple(getattr(krope, name) for name in _KERNELS),
             "one period": _recompiled("_rows_kernel", _PERIODS_PER_ITEM=1),
             "no prefetch": _recompiled("_rows_kernel", _PREFETCH_ROWS=0)}
    print("| mechanism | call (float32, layout half) | on (us) | off (us) | saved |\n|---|---|---:|---:|---:|")
    for mechanism, label, calls, fn in _cases(np.random.default_rng(0)):
        times = {True: [], False: []}
        for r in range(rounds):
            for on in ((True, False) if r % 2 == 0 else (False, True)):
                _switch(mechanism, on, saved)
                for _ in range(2 if calls < 300 else 5):
                    fn()
                batch = []
                for _ in range(calls):
                    t0 = time.perf_counter()
                    fn()
                    batch.append(time.perf_counter() - t0)
                times[on].append(statistics.median(batch) * 1e6)
        _switch(mechanism, True, saved)
        on, off = statistics.median(times[True]), statistics.median(times[False])
        print(f"| {mechanism} | {label} | {on:.0f} | {off:.0f} | {100 * (1 - on / off):.0f} % |", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 11)
