"""How OpenMP's wait policy trades decoding scaling against kernel / BLAS alternation.

``python bench/omp_wait.py`` runs two probes in a fresh process per setting of the OpenMP
runtime's environment (``posenc_np.kernels`` sets ``OMP_WAIT_POLICY=PASSIVE`` unless the user
set a value; see ``posenc_np/kernels/_numba.py``) and prints a Markdown table:

* ``decode``: the fused ALiBi forward, one query, one head, ``D = 64``, 64k cached keys, on
  all Numba threads (``key_splits`` auto) against one thread: the issue's decoding target.
* ``alternate``: the fused ALiBi forward at ``H = 8``, ``T = 96`` and ``T = 512`` followed by
  a threaded BLAS projection and the NumPy attention path, the pattern of a model that mixes
  kernels and NumPy (where spinning OpenMP threads and OpenBLAS threads compete for the cores).

Both are medians of interleaved rounds in that process. Not part of ``bench/run.py``: it is a
by-hand study of one setting, summarised in ``docs/benchmarks.md``.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))

SETTINGS = {
    "PASSIVE (posenc_np's default)": {},
    "ACTIVE": {"OMP_WAIT_POLICY": "ACTIVE"},
    "PASSIVE, GOMP_SPINCOUNT=20000": {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "20000"},
}


def probe(repeats: int = 31) -> dict:
    """Both probes in this process (call it in a fresh one: the wait policy is read at load)."""
    import numba
    import numpy as np

    from posenc_np import alibi
    from posenc_np.kernels import alibi as kalibi
    from timing import interleaved_rounds

    rng = np.random.default_rng(0)
    d, threads = 64, numba.get_num_threads()
    q = rng.standard_normal((1, 1, 1, d), dtype=np.float32)
    k, v = (rng.standard_normal((1, 1, 65536, d), dtype=np.float32) for _ in range(2))
    m1, scale = alibi.slopes(1), 1.0 / math.sqrt(d)

    def decode():
        kalibi.alibi_attention_forward(q, k, v, m1, causal=True, scale=scale)

    def one_thread():
        numba.set_num_threads(1)
        try:
            decode()
        finally:
            numba.set_num_threads(threads)

    t = interleaved_rounds({"all": decode, "one": one_thread}, repeats, warmup=2)
    out = {"decode_all_ms": 1e3 * t["all"], "decode_one_ms": 1e3 * t["one"], "decode_gain": t["one"] / t["all"]}
    m8 = alibi.slopes(8)
    for n in (96, 512):
        qa, ka, va = (rng.standard_normal((1, 8, n, d), dtype=np.float32) for _ in range(3))
        w = rng.standard_normal((8 * d, 8 * d), dtype=np.float32)
        fns = {"kernel": lambda: kalibi.alibi_attention_forward(qa, ka, va, m8, causal=True, scale=scale),
               "numpy": lambda: (qa.reshape(n, 8 * d) @ w,
                                 alibi.attention(qa, ka, va, slopes=m8, causal=True, backend="numpy"))}
        t = interleaved_rounds(fns, repeats, warmup=2)
        out[f"T{n}_kernel_ms"], out[f"T{n}_numpy_ms"] = 1e3 * t["kernel"], 1e3 * t["numpy"]
    return out


def main() -> int:
    if sys.argv[1:] == ["--probe"]:
        print(json.dumps(probe()))
        return 0
    rows = []
    for name, extra in SETTINGS.items():
        env = {key: val for key, val in os.environ.items() if key not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
        env.update(extra)
        env["PYTHONPATH"] = os.pathsep.join([ROOT, HERE, env.get("PYTHONPATH", "")])
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--probe"], capture_output=True,
                              text=True, env=env, cwd=ROOT, timeout=900)
        if proc.returncode != 0:
            print(f"{name}: failed\n{proc.stderr[-2000:]}", file=sys.stderr)
            return 1
        rows.append((name, json.loads(proc.stdout.strip().splitlines()[-1])))
    print("| OpenMP setting | decode 64k: all threads ms (1 thread) | gain | alternate T=96: kernel ms, "
          "NumPy + projection ms | T=512: kernel ms, NumPy + projection ms |")
    print("|---|---:|---:|---:|---:|")
    for name, r in rows:
        print(f"| {name} | {r['decode_all_ms']:.2f} ({r['decode_one_ms']:.2f}) | {r['decode_gain']:.2f}x | "
              f"{r['T96_kernel_ms']:.2f}, {r['T96_numpy_ms']:.2f} | {r['T512_kernel_ms']:.2f}, "
              f"{r['T512_numpy_ms']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
