"""In-run memory-bandwidth roofline: NumPy copy and a Numba STREAM triad, in GB/s.

Both count the bytes a kernel must move, not the hardware's extra traffic:

* copy ``np.copyto(dst, src)``: reads ``src``, writes ``dst`` -> ``2 N`` bytes for ``N``-byte
  arrays. One thread (NumPy does not thread a copy); glibc may use non-temporal stores.
* triad ``a[i] = b[i] + s * c[i]`` (Numba, ``prange`` over all cores, the kernels' compile
  settings): reads ``b`` and ``c``, writes ``a`` -> ``3 N`` bytes.
* scale in place ``a[i] = s * a[i]`` (Numba, all cores): reads and writes ``a`` -> ``2 N``.
* first touch (:func:`first_touch`): a new ``np.empty`` array of ``N`` bytes with one element
  per 4 KiB page written, the pages split in contiguous halves over the threads: the page
  faults (the kernel zeroing fresh pages) that any function returning a new array pays, the
  floor of an allocating call over the same call into a reused array.
* sgemm (:func:`sgemm_gflops`): a square float32 NumPy matmul on BLAS's own threads, the
  compute roofline of the attention kernels, whose work is tile products.

Write-allocate: a store to a line that is not in cache first reads it, so out-of-place
kernels move one array more than they count (copy really 3N, triad 4N); in place nothing is
added. The out-of-place roofline of a size is the better of copy and triad in counted bytes
(what this machine, in this run, reached moving that much memory, counted the same way as the
kernels count theirs); a kernel's "% of roofline" is its own counted bytes over this. The
in-place roofline is the in-place scale (no write-allocate on either side). The table also
gives the write-allocate-inclusive ("true") bandwidth of copy and triad.
Timings are the median of ``repeats`` calls after one warm-up call.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

_TRIAD = None


def _triad_kernel():
    global _TRIAD
    if _TRIAD is None:
        import numba

        from posenc_np.kernels._numba import njit_kernel

        @njit_kernel()
        def triad(a, b, c, s):
            for i in numba.prange(a.shape[0]):
                a[i] = b[i] + s * c[i]

        @njit_kernel()
        def scale(a, s):
            for i in numba.prange(a.shape[0]):
                a[i] = s * a[i]

        _TRIAD = (triad, scale)
    return _TRIAD


_READ = None


def _read_kernel():
    """``read(a, b, acc)``: reads two ``(rows, d)`` arrays once (``acc[chunk] += a[i] + b[i]``),
    chunks over the threads: the bandwidth a kernel that streams ``a`` and ``b`` cannot beat."""
    global _READ
    if _READ is None:
        import numba

        from posenc_np.kernels._numba import njit_kernel

        @njit_kernel()
        def read(a, b, acc):
            n, chunks = a.shape[0], acc.shape[0]
            for c in numba.prange(chunks):
                row = acc[c]
                for i in range(c * n // chunks, (c + 1) * n // chunks):
                    for j in range(a.shape[1]):
                        row[j] += a[i, j] + b[i, j]

        _READ = read
    return _READ


_TOUCH = None


def first_touch(nbytes: int) -> None:
    """Allocate ``nbytes`` of float32 (``np.empty``) and fault its pages in, each thread a
    contiguous range (a Numba ``prange`` over the threads writing one element per 4 KiB)."""
    global _TOUCH
    if _TOUCH is None:
        import numba

        from posenc_np.kernels._numba import njit_kernel

        @njit_kernel()
        def touch(a, chunks, step):
            n = a.shape[0]
            for c in numba.prange(chunks):
                for i in range(c * n // chunks // step * step, (c + 1) * n // chunks, step):
                    a[i] = 0

        _TOUCH = touch
    import numba

    _TOUCH(np.empty(max(1, nbytes // 4), np.float32), numba.get_num_threads(), 1024)


def sgemm_gflops(n: int = 4096, repeats: int = 5) -> float:
    """GFLOP/s (``2 n^3`` per product) of a square float32 ``a @ b``: median of ``repeats``."""
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
    out = np.empty((n, n), np.float32)
    seconds, _ = median_time(lambda: np.matmul(a, b, out=out), repeats)
    return 2.0 * n ** 3 / seconds / 1e9


def median_time(fn, repeats: int) -> tuple[float, list]:
    """Median wall time of ``fn()`` over ``repeats`` calls, after one untimed warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


def measure(nbytes: int, repeats: int = 7) -> dict:
    """Copy and triad bandwidth (GB/s) for float32 arrays of ``nbytes`` bytes each."""
    n = max(1, nbytes // 4)
    src = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    dst = np.empty_like(src)
    b, c = src, src[::-1].copy()
    triad, scale = _triad_kernel()
    t_copy, _ = median_time(lambda: np.copyto(dst, src), repeats)
    t_triad, _ = median_time(lambda: triad(dst, b, c, np.float32(0.5)), repeats)
    t_scale, _ = median_time(lambda: scale(dst, np.float32(-1.0)), repeats)
    copy_gbs = 2 * src.nbytes / t_copy / 1e9
    triad_gbs = 3 * src.nbytes / t_triad / 1e9
    scale_gbs = 2 * src.nbytes / t_scale / 1e9
    return {
        "array_bytes": int(src.nbytes),
        "copy_GBps": copy_gbs,
        "triad_GBps": triad_gbs,
        "scale_inplace_GBps": scale_gbs,
        "copy_true_GBps": 1.5 * copy_gbs,
        "triad_true_GBps": 4 / 3 * triad_gbs,
        "roofline_GBps": max(copy_gbs, triad_gbs),
        "inplace_roofline_GBps": scale_gbs,
        "repeats": repeats,
    }


def run(quick: bool = False, sizes=None) -> dict:
    """Roofline at a ladder of sizes (L2-resident to DRAM); returns JSON plus ``markdown``."""
    if sizes is None:
        sizes = [256 << 10, 4 << 20, 64 << 20] if quick else [256 << 10, 4 << 20, 64 << 20, 256 << 20]
    repeats = 5 if quick else 11
    rows = [measure(s, repeats) for s in sizes]
    lines = [
        "| array size | copy GB/s (NumPy, 1 thread; with write-allocate) | triad GB/s (Numba, all cores; with w-a) "
        "| out-of-place roofline GB/s | in-place scale GB/s (Numba) = in-place roofline |",
        "|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {_size(r['array_bytes'])} | {r['copy_GBps']:.1f} ({r['copy_true_GBps']:.1f}) | "
                     f"{r['triad_GBps']:.1f} ({r['triad_true_GBps']:.1f}) | {r['roofline_GBps']:.1f} | "
                     f"{r['scale_inplace_GBps']:.1f} |")
    md = ("Bytes counted: copy reads and writes one array (2N), triad reads two and writes one (3N), "
          "scale reads and writes one array in place (2N); float32 arrays of the size shown; "
          f"median of {repeats} after a warm-up. Write-allocate: an out-of-place store first reads its "
          "destination line, so copy really moves 3N and the triad 4N (in brackets); in place adds nothing. "
          "Out-of-place roofline = max(copy, triad) counted; in-place roofline = the in-place scale.\n\n"
          + "\n".join(lines))
    return {"rows": rows, "markdown": md}


def _size(nbytes: int) -> str:
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= div:
            return f"{nbytes / div:g} {unit}"
    return f"{nbytes} B"


if __name__ == "__main__":
    import json
    import sys

    out = run(quick="--quick" in sys.argv)
    print(out["markdown"])
    print(json.dumps({k: v for k, v in out.items() if k != "markdown"}, indent=1))
