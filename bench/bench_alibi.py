"""ALiBi causal attention: materialised NumPy vs fused Numba vs torch SDPA with a float mask.

``run(quick) -> dict`` returns JSON-able numbers and a Markdown table under ``"markdown"``;
``bench/run.py`` calls it and writes ``docs/benchmarks.md``. Run directly:
``python bench/bench_alibi.py [--quick]``.

Problem: causal ALiBi attention, one batch, ``H = 8`` heads, ``D = 64``, float32,
``q``, ``k``, ``v`` of shape ``(1, H, T, D)``, ``T`` from 256 to 4096, slopes
``posenc_np.alibi.slopes(8)``, scale ``1/sqrt(D)``.

Methods

* ``numpy``: ``posenc_np.alibi.attention(q, k, v, backend="numpy")``, the reference: it builds
  the ``(H, T, T)`` bias and the attention core materialises logits and probabilities.
* ``numba``: ``posenc_np.kernels.alibi.alibi_attention_forward`` (fused, tiled, online softmax,
  causal tiles past the diagonal skipped), Numba's default thread count; its backward with
  ``method="auto"`` (one pass here: 8 heads fill 2 threads).
* at T = 2048 only: ``numba two-pass`` (the two-pass backward), ``numba float16`` and
  ``numba bfloat16`` (inputs in that dtype, computed in float32; bfloat16 when ``ml_dtypes`` is
  installed), ``numba GQA 8/2`` and ``numba MQA 8/1`` (keys and values with 2 or 1 heads).
* ``torch causal``: ``scaled_dot_product_attention(q, k, v, is_causal=True)`` without any bias:
  torch's fused causal (flash) CPU path, the speed a fused kernel can reach (ALiBi adds one
  multiply-add per kept score), the peer of the fused kernel's targets.
* ``torch`` and ``torch compile``: ``torch.nn.functional.scaled_dot_product_attention(q, k, v,
  attn_mask=M)`` with the float ALiBi mask ``M = bias`` (``-inf`` above the diagonal) on
  ``torch.from_numpy`` views, ``torch.set_num_threads(2)``, under ``torch.no_grad()`` (forward),
  eager and through ``torch.compile(dynamic=False)`` (its compile time, the first call at each
  size minus a steady call, is reported separately); run by ``--torch-python`` (default: this
  interpreter if torch imports there), only when torch is available. ``M`` is built once outside
  the timed call (a model would reuse it) but counted in the peak memory, since the method needs it.

Decoding (``decode(quick, torch_python)``): one or 16 queries against 4k-64k cached keys
(causal, the queries at the end), H = 1 and 8, D = 64: the fused forward as ``auto`` chooses
(flash-decoding key splits over the threads when the heads and query tiles are too few), the
same on one thread, the same without splits, and torch SDPA eager / compiled with the float
mask row(s). Interleaved rounds (ours) and a separate torch process.

Forward + backward (training step): ``numpy`` = ``attention`` + ``attention_backward``;
``numba`` = ``alibi_attention_forward`` + ``alibi_attention_backward``; ``torch`` = the same
SDPA call with ``requires_grad`` inputs and ``out.backward(dout)``.

Measurements, each (method, T) in a fresh subprocess:

* time: median (and min) wall time over ``repeats`` calls after one warm-up call;
* sgemm roofline: GFLOP/s of a 4096 x 4096 float32 NumPy matmul (BLAS's threads), measured in
  this process before and after the rows; the larger is the denominator of "% of sgemm";
* FLOP model: the forward does ``QK^T`` and ``PV`` over the ``T(T+1)/2 ~ T^2/2`` kept
  (query, key) pairs, ``2 * 2 * (T^2/2) * D * H = 2 T^2 D H`` FLOP ("useful" FLOP: the same
  count for every method, including torch, which computes the masked half too); forward +
  backward counts 3.5x that (the backward's five ``T x T x D`` products, FlashAttention-2's
  convention). GFLOP/s = FLOP / median time.
* peak memory: growth of the process's peak resident set caused by the first call at full
  size, measured after imports, a small warm-up call (T = 64: Numba cache load, torch
  start-up) and the allocation of the inputs. On Linux the high-water mark is reset
  (``/proc/self/clear_refs``) and peak = ``VmHWM`` - ``VmRSS`` at the reset; elsewhere the
  growth of ``getrusage(RUSAGE_SELF).ru_maxrss``. Outputs are included; torch's mask too.
  The forward + backward figure is measured the same way right after the forward one
  (baseline re-taken; the forward's output and torch's mask are part of it).

Half-precision cost (in this process): forward + backward of float32, float16 and bfloat16 inputs
at T = 2048 timed in the same interleaved rounds; their time ratios are the ``float16`` /
``bfloat16`` targets (the table's variant rows, one subprocess each, run minutes apart).

``auto`` threshold sweep (in this process): forward and forward + backward time of NumPy vs
Numba for small ``T`` (H = 8 and H = 1, D = 64, float32), timed in interleaved rounds (one
call of each per round, median); the recommended ``ALIBI_NUMBA_MIN_T`` is the smallest swept
``T`` from which the fused forward wins at every larger swept ``T`` for both head counts.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from roofline import sgemm_gflops
from timing import interleaved_rounds

H, D = 8, 64
SIZES = [256, 512, 1024, 2048, 4096]
QUICK_SIZES = [256, 1024]
SWEEP = [16, 32, 64, 96, 128, 192, 256, 512]
QUICK_SWEEP = [32, 64, 128, 256]
METHODS = ("numpy", "numba", "torch causal", "torch", "torch compile")
#: Extra kernel variants, measured at T = 2048 only.
VARIANTS_2048 = ("numba two-pass", "numba float16", "numba bfloat16", "numba GQA 8/2", "numba MQA 8/1")
TORCH_METHODS = ("torch causal", "torch", "torch compile")
DECODE = [(q, k, h) for q in (1, 16) for k in (4096, 16384, 65536) for h in (1, 8)]
QUICK_DECODE = [(1, 4096, 1), (1, 65536, 1), (16, 16384, 8)]


def _inputs(t, heads=H, d=D, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((1, heads, t, d), dtype=np.float32) for _ in range(4)]


def _flop_forward(t, heads=H, d=D):
    return 2.0 * t * t * d * heads


# --------------------------------------------------------------------------- one method

def _make_calls(method, q, k, v, do):
    """(forward, forward_backward, extra_setup) callables for ``method`` on these inputs."""
    from posenc_np import alibi

    heads, t, d = q.shape[1], q.shape[2], q.shape[3]
    scale = 1.0 / math.sqrt(d)
    m = alibi.slopes(heads)
    if method == "numpy":
        def fwd():
            return alibi.attention(q, k, v, causal=True, backend="numpy")[0]

        def fwd_bwd():
            out, cache = alibi.attention(q, k, v, causal=True, backend="numpy")
            return alibi.attention_backward(do, cache)
        return fwd, fwd_bwd, None
    if method.startswith("numba"):
        from posenc_np.kernels import alibi as kalibi

        backward = "two-pass" if method == "numba two-pass" else "auto"
        if method == "numba float16":
            q, k, v, do = (x.astype(np.float16) for x in (q, k, v, do))
        elif method == "numba bfloat16":
            import ml_dtypes

            q, k, v, do = (x.astype(ml_dtypes.bfloat16) for x in (q, k, v, do))
        elif method.startswith(("numba GQA", "numba MQA")):
            kv = int(method.split("/")[1])
            k, v = np.ascontiguousarray(k[:, :kv]), np.ascontiguousarray(v[:, :kv])

        def fwd():
            return kalibi.alibi_attention_forward(q, k, v, m, causal=True, scale=scale)[0]

        def fwd_bwd():
            out, lse = kalibi.alibi_attention_forward(q, k, v, m, causal=True, scale=scale)
            return kalibi.alibi_attention_backward(do, q, k, v, out, lse, m, causal=True, scale=scale,
                                                   method=backward)
        return fwd, fwd_bwd, None
    if method in TORCH_METHODS:
        import torch
        import torch.nn.functional as F

        tq, tk, tv, tdo = (torch.from_numpy(x) for x in (q, k, v, do))
        state = {}

        def attend(q, k, v, mask):
            if method == "torch causal":  # no bias: torch's fused causal (flash) path
                return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)

        if method == "torch compile":
            attend = torch.compile(attend, dynamic=False)

        def setup():  # the float ALiBi mask: (H, T, T), -inf above the diagonal
            if method == "torch causal":
                state["mask"] = None
                return
            bias = torch.from_numpy(alibi.bias(heads, t, t, form="causal", slopes=m, dtype=np.float32))
            state["mask"] = bias.masked_fill_(torch.ones(t, t, dtype=torch.bool).triu_(1), float("-inf"))

        def fwd():
            with torch.no_grad():
                return attend(tq, tk, tv, state["mask"])

        def fwd_bwd():
            gq, gk, gv = (x.detach().clone().requires_grad_(True) for x in (tq, tk, tv))
            out = attend(gq, gk, gv, state["mask"])
            out.backward(tdo)
            return gq.grad, gk.grad, gv.grad
        return fwd, fwd_bwd, setup
    raise ValueError(f"unknown method {method!r}")


def _proc_status_bytes(field):
    """``VmRSS`` / ``VmHWM`` of this process from /proc (Linux), in bytes, or None."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


class _PeakMeter:
    """Growth of the peak resident set over a baseline taken at construction.

    glibc's ``malloc_trim(0)`` first returns freed heap pages to the system (else a call could
    reuse resident pages unseen). Linux: reset the high-water mark
    (``echo 5 > /proc/self/clear_refs``), baseline = current ``VmRSS``, peak = ``VmHWM``.
    Elsewhere (or if the reset is refused): ``ru_maxrss`` after minus ``ru_maxrss`` at the
    baseline. (Not ``ru_maxrss`` alone on Linux: a child process inherits its parent's
    resident size as its starting ``ru_maxrss``.)
    """

    def __init__(self):
        import gc

        gc.collect()
        try:  # glibc: hand freed heap memory back, so the measured call cannot reuse it unseen
            import ctypes

            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):
            pass
        self.method = "ru_maxrss"
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")
            base = _proc_status_bytes("VmRSS")
            if base is not None and _proc_status_bytes("VmHWM") is not None:
                self.method, self.base = "VmHWM", base
        except OSError:
            pass
        if self.method == "ru_maxrss":
            self.base = self._maxrss()

    @staticmethod
    def _maxrss():
        import resource

        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return rss if sys.platform == "darwin" else rss * 1024  # Linux reports KiB

    def growth(self) -> int:
        peak = _proc_status_bytes("VmHWM") if self.method == "VmHWM" else self._maxrss()
        return max(0, peak - self.base)


def _timed(fn, repeats):
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times)


def worker(method: str, t: int, repeats: int, backward: bool) -> dict:
    """Measure one method at one size; runs in a fresh subprocess (see the module docstring)."""
    if method in TORCH_METHODS:
        import torch

        torch.set_num_threads(2)
    small = _make_calls(method, *_inputs(64))  # warm-up: Numba cache load / torch start-up
    if small[2] is not None:
        small[2]()
    small[0]()
    small[1]()
    del small
    q, k, v, do = _inputs(t)
    fwd, fwd_bwd, setup = _make_calls(method, q, k, v, do)
    meter = _PeakMeter()
    if setup is not None:
        setup()
    t0 = time.perf_counter()
    fwd()
    first_forward = time.perf_counter() - t0
    result = {"method": method, "T": t, "peak_bytes_forward": meter.growth(), "memory_method": meter.method}
    if backward:
        meter = _PeakMeter()  # (forward's output and torch's mask stay alive: part of the baseline)
        t0 = time.perf_counter()
        fwd_bwd()
        first_backward = time.perf_counter() - t0
        result["peak_bytes_forward_backward"] = meter.growth()
    result["forward_s"], result["forward_min_s"] = _timed(fwd, repeats)
    if backward:
        result["forward_backward_s"], result["forward_backward_min_s"] = _timed(fwd_bwd, max(1, repeats // 2))
    if method == "torch compile":  # the first call at this size compiles; a steady call is subtracted
        result["compile_s"] = max(0.0, first_forward - result["forward_s"])
        if backward:
            result["compile_s"] += max(0.0, first_backward - result["forward_backward_s"])
    return result


def _run_worker(method, t, repeats, backward, python=None):
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    if method in TORCH_METHODS:
        env.pop("OMP_WAIT_POLICY", None)  # torch under its own threading defaults
    args = json.dumps({"method": method, "T": t, "repeats": repeats, "backward": backward})
    proc = subprocess.run([python or sys.executable, os.path.abspath(__file__), "--worker", args],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"bench_alibi worker {method} T={t} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- checks, sweep

def _agreement(t=256):
    """Max |difference| of the kernel's forward output from NumPy's, at one size (torch's is in
    its own process: see the table's torch rows)."""
    q, k, v, do = _inputs(t, seed=1)
    outs = {name: np.asarray(_make_calls(name, q, k, v, do)[0]()) for name in ("numpy", "numba")}
    return {"numba": float(np.max(np.abs(outs["numba"] - outs["numpy"])))}


def dtype_ratios(t: int, repeats: int, variants) -> dict:
    """Forward + backward time of each half-precision variant over float32's, the calls timed in
    the same interleaved rounds in this process (the table's rows run in a subprocess each, one
    after another, so their ratio also holds whatever the machine did in between)."""
    q, k, v, do = _inputs(t)
    calls = {name: _make_calls(name, q, k, v, do)[1] for name in ("numba", *variants)}
    times = interleaved_rounds(calls, repeats)
    return {"T": t, "repeats": repeats, "seconds": times,
            "ratio": {name: times[name] / times["numba"] for name in variants}}


def threshold(quick: bool) -> dict:
    """NumPy vs fused Numba at small T (see the module docstring)."""
    sizes = QUICK_SWEEP if quick else SWEEP
    repeats = 7 if quick else 21
    rows = []
    for heads in (8, 1):
        for t in sizes:
            q, k, v, do = _inputs(t, heads=heads)
            calls = {name: _make_calls(name, q, k, v, do) for name in ("numpy", "numba")}
            fwd = interleaved_rounds({name: c[0] for name, c in calls.items()}, repeats)
            both = interleaved_rounds({name: c[1] for name, c in calls.items()}, max(3, repeats // 2))
            rows.append({"H": heads, "T": t, "numpy_forward_s": fwd["numpy"], "numba_forward_s": fwd["numba"],
                         "numpy_forward_backward_s": both["numpy"], "numba_forward_backward_s": both["numba"]})

    def crossover(key_np, key_nb):
        best = None
        for t in sorted(sizes, reverse=True):
            if all(r[key_nb] < r[key_np] for r in rows if r["T"] == t):
                best = t
            else:
                break
        return best

    from posenc_np import _backend

    result = {
        "rows": rows,
        "recommended_min_T_forward": crossover("numpy_forward_s", "numba_forward_s"),
        "recommended_min_T_forward_backward": crossover("numpy_forward_backward_s", "numba_forward_backward_s"),
        "current_ALIBI_NUMBA_MIN_T": _backend.ALIBI_NUMBA_MIN_T,
    }
    return result


# --------------------------------------------------------------------------- run

def run(quick: bool = False, torch_python: str | None = None) -> dict:
    """All sizes and methods; returns JSON-able numbers plus ``"markdown"``."""
    import importlib.util

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch_peers

    sizes = QUICK_SIZES if quick else SIZES
    repeats = 3 if quick else 7
    torch_version = torch_peers.torch_version(torch_python)
    methods = [m for m in METHODS if m not in TORCH_METHODS or torch_version]
    variants = [m for m in VARIANTS_2048 if m != "numba bfloat16" or importlib.util.find_spec("ml_dtypes")]
    # make sure the kernels are compiled and cached before the subprocesses load them
    _make_calls("numba", *_inputs(64))[1]()
    load_start = _loadavg()
    sgemm = [sgemm_gflops(2048 if quick else 4096)]
    rows = []
    for t in sizes:
        for method in methods + (variants if t == 2048 or (quick and t == sizes[-1]) else []):
            # the NumPy backward at T = 4096 holds several (H, T, T) float32 arrays (~2.5 GB)
            python = torch_python if method in TORCH_METHODS else None
            rows.append(_run_worker(method, t, repeats, backward=True, python=python))
            print(f"  alibi {method:>15} T={t}: forward {1e3 * rows[-1]['forward_s']:.1f} ms", flush=True)
    sgemm.append(sgemm_gflops(2048 if quick else 4096))
    for r in rows:
        r["forward_GFLOPs"] = _flop_forward(r["T"]) / r["forward_s"] / 1e9
        r["forward_pct_sgemm"] = 100 * r["forward_GFLOPs"] / max(sgemm)
        if "forward_backward_s" in r:
            r["forward_backward_GFLOPs"] = 3.5 * _flop_forward(r["T"]) / r["forward_backward_s"] / 1e9
            r["forward_backward_pct_sgemm"] = 100 * r["forward_backward_GFLOPs"] / max(sgemm)
    halves = [m for m in variants if m in ("numba float16", "numba bfloat16")]
    ratios = dtype_ratios(sizes[-1] if quick else 2048, repeats, halves) if halves else None
    sweep = _threshold_in_subprocess(quick)
    result = {
        "problem": {"H": H, "D": D, "dtype": "float32", "causal": True, "batch": 1},
        "methods": methods,
        "variants_T2048": variants,
        "torch": torch_version,
        "torch_available": torch_version is not None,
        "repeats": repeats,
        "rows": rows,
        "agreement_max_abs_diff_vs_numpy_T256": _agreement(),
        "threshold": sweep,
        "dtype_ratios": ratios,
        "sgemm_GFLOPs": {"before": sgemm[0], "after": sgemm[1], "denominator": max(sgemm),
                         "n": 2048 if quick else 4096},
        "loadavg_start": load_start,
        "loadavg_end": _loadavg(),
    }
    result["targets"] = _targets(rows, ratios)
    result["markdown"] = _markdown(result, quick)
    return result


def decode(quick: bool = False, torch_python: str | None = None) -> dict:
    """Few queries against a long cache: auto (key splits), one thread, no splits, torch."""
    import numba

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch_peers

    from posenc_np import alibi
    from posenc_np.kernels import alibi as kalibi

    from roofline import _read_kernel

    read_kernel = _read_kernel()
    cases = QUICK_DECODE if quick else DECODE
    repeats = 7 if quick else 21
    threads = numba.get_num_threads()
    rows = []
    for q_len, k_len, heads in cases:
        q, k, v = _inputs(k_len, heads=heads)[:3]
        q = np.ascontiguousarray(q[:, :, -q_len:])
        m, scale = alibi.slopes(heads), 1.0 / math.sqrt(D)

        def call(splits=None):
            return lambda: kalibi.alibi_attention_forward(q, k, v, m, causal=True, scale=scale, key_splits=splits)

        def on_one_thread(fn):
            def run():
                numba.set_num_threads(1)
                try:
                    fn()
                finally:
                    numba.set_num_threads(threads)
            return run

        # The read roofline: one pass over k and v (what the kernel must stream), all threads / one.
        k2, v2 = k.reshape(-1, D), v.reshape(-1, D)
        acc = np.zeros((64, D), np.float32)
        read = lambda: read_kernel(k2, v2, acc)  # noqa: E731
        times = interleaved_rounds({"auto": call(), "no_splits": call(1), "one_thread": on_one_thread(call()),
                                    "read": read, "read_one_thread": on_one_thread(read)}, repeats, warmup=2)
        rows.append({"q_len": q_len, "K": k_len, "H": heads, "splits": kalibi._key_splits(
            None, heads * -(-q_len // kalibi.BLOCK_Q), k_len, min(q_len, kalibi.BLOCK_Q)), **{f"{k}_s": t for k, t in times.items()}})
        print(f"  decode q={q_len} K={k_len} H={heads}: auto {1e3 * times['auto']:.2f} ms, "
              f"1 thread {1e3 * times['one_thread']:.2f} ms; read of k, v {1e3 * times['read']:.2f} / "
              f"{1e3 * times['read_one_thread']:.2f} ms", flush=True)
    torch_version = None
    if torch_peers.torch_version(torch_python):
        peer = torch_peers.run(torch_python, "decode", {"D": D, "torch_threads": 2, "cases": [
            {"q_len": r["q_len"], "K": r["K"], "H": r["H"], "repeats": repeats} for r in rows]})
        torch_version = peer["torch"]
        for r, p in zip(rows, peer["rows"]):
            r["torch"], r["torch_compile"] = p.get("eager"), p.get("compile")
    result = {"rows": rows, "threads": threads, "repeats": repeats, "torch": torch_version}
    target = [r for r in rows if r["q_len"] == 1 and r["K"] == 65536 and r["H"] == 1]
    if target:
        t = target[0]
        gain = t["one_thread_s"] / t["auto_s"]
        result["targets"] = {"q1_H1_64k_speedup_vs_one_thread": {
            "value": gain, "target": ">= 1.7", "met": gain >= 1.7,
            "read_scaling": t["read_one_thread_s"] / t["read_s"],
            "auto_share_of_read_roofline": t["read_s"] / t["auto_s"],
            "one_thread_share_of_read_roofline": t["read_one_thread_s"] / t["one_thread_s"]}}
    result["markdown"] = _decode_markdown(result)
    return result


def _decode_markdown(res) -> str:
    def torch_cell(v, compiled=False):
        if not v:
            return "-"
        if "error" in v:
            return "failed"
        return f"{1e3 * v['seconds']:.2f}" + (f" ({v['compile_s']:.1f} s)" if compiled else "")

    has_torch = res["torch"] is not None
    lines = [f"Causal ALiBi forward, q_len queries at the end of K cached keys, D = {D}, float32, batch 1, "
             f"median of {res['repeats']} interleaved rounds (ms). `auto` = the fused kernel as "
             "`alibi.attention` runs it (flash-decoding: `splits` key ranges over the threads, combined exactly); "
             f"`1 thread` = the same with Numba on one thread; `no splits` = `key_splits=1` ({res['threads']} "
             "threads). `read` = the in-run read roofline: one pass over `k` and `v` (a Numba sum, "
             "`bench/roofline.py`), all threads and one thread; `read scaling` = its one-thread / all-threads "
             "time, the most any kernel that streams `k` and `v` from memory can gain from the threads." + (" torch SDPA with the float mask row(s), 2 threads, its own process; "
                            "`torch.compile` compile time in brackets." if has_torch else ""),
             "",
             "| q_len | K | H | splits | auto ms | 1 thread ms | auto speed-up vs 1 thread | no splits ms "
             "| read ms: all threads (1 thread) | read scaling |"
             + (" torch eager ms | torch.compile ms |" if has_torch else ""),
             "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if has_torch else "")]
    for r in res["rows"]:
        line = (f"| {r['q_len']} | {r['K']} | {r['H']} | {r['splits']} | {1e3 * r['auto_s']:.2f} | "
                f"{1e3 * r['one_thread_s']:.2f} | {r['one_thread_s'] / r['auto_s']:.2f}x | "
                f"{1e3 * r['no_splits_s']:.2f} | {1e3 * r['read_s']:.2f} ({1e3 * r['read_one_thread_s']:.2f}) | "
                f"{r['read_one_thread_s'] / r['read_s']:.2f}x |")
        if has_torch:
            line += f" {torch_cell(r.get('torch'))} | {torch_cell(r.get('torch_compile'), True)} |"
        lines.append(line)
    for key, t in (res.get("targets") or {}).items():
        lines += ["", f"Target: q_len 1, H = 1, 64k keys on all threads vs one thread: {t['value']:.2f}x "
                      f"({t['target']}: {'met' if t['met'] else 'NOT met'}). In the same rounds, reading `k` and "
                      f"`v` once (32 MiB) gains {t['read_scaling']:.2f}x from the threads; the kernel runs at "
                      f"{100 * t['auto_share_of_read_roofline']:.0f} % of that read roofline on all threads and "
                      f"{100 * t['one_thread_share_of_read_roofline']:.0f} % on one."
                      + (" A decoding kernel that streams k and v at the read roofline gains what the read "
                         "gains; ours gains " + ("more" if t["value"] > t["read_scaling"] else "less")
                         + " here because on one thread it is still partly compute-bound, and the closer it "
                         "gets to the read roofline there, the closer its gain gets to the read's, which is "
                         "below the target on this machine."
                         if not t["met"] and t["read_scaling"] < 1.7 else "")]
    return "\n".join(lines)


def _loadavg():
    try:
        return list(os.getloadavg())
    except OSError:
        return None


def _row(rows, method, t):
    for r in rows:
        if r["method"] == method and r["T"] == t:
            return r
    return None


def _targets(rows, ratios):
    out = {}
    for t in (2048, 4096):  # performance v3: against the in-run sgemm and torch's bias-free causal path
        nb, flash = _row(rows, "numba", t), _row(rows, "torch causal", t)
        if nb:
            pct = nb["forward_pct_sgemm"]
            out[f"forward_pct_sgemm_T{t}"] = {"value": pct, "target": ">= 45 %", "met": pct >= 45}
            pct = nb["forward_backward_pct_sgemm"]
            out[f"fwd_bwd_pct_sgemm_T{t}"] = {"value": pct, "target": ">= 40 %", "met": pct >= 40}
        if nb and flash:
            speed = flash["forward_s"] / nb["forward_s"]
            out[f"forward_vs_torch_causal_T{t}"] = {"value": speed, "target": ">= 0.9", "met": speed >= 0.9}
            speed = flash["forward_backward_s"] / nb["forward_backward_s"]
            out[f"fwd_bwd_vs_torch_causal_T{t}"] = {"value": speed, "target": "reported", "met": None}
    nb, npy, tc = _row(rows, "numba", 2048), _row(rows, "numpy", 2048), _row(rows, "torch", 2048)
    if nb and npy:
        speed = npy["forward_s"] / nb["forward_s"]
        out["speedup_vs_numpy_T2048"] = {"value": speed, "target": ">= 1.8", "met": speed >= 1.8}
    if nb and tc:
        speed = tc["forward_s"] / nb["forward_s"]
        out["speedup_vs_torch_T2048"] = {"value": speed, "target": "> 1", "met": speed > 1.0}
        speed = tc["forward_backward_s"] / nb["forward_backward_s"]
        out["fwd_bwd_speedup_vs_torch_T2048"] = {"value": speed, "target": ">= 3", "met": speed >= 3.0}
    tcc = _row(rows, "torch compile", 2048)
    if nb and tcc:
        speed = tcc["forward_backward_s"] / nb["forward_backward_s"]
        out["fwd_bwd_speedup_vs_torch_compile_T2048"] = {"value": speed, "target": "reported", "met": None}
    for dtype, goal in (("float16", 1.3), ("bfloat16", None)):  # (interleaved rounds: dtype_ratios)
        ratio = ratios["ratio"].get(f"numba {dtype}") if ratios and ratios["T"] == 2048 else None
        if ratio is not None:
            out[f"{dtype}_time_ratio_T2048"] = {"value": ratio, "target": f"<= {goal}" if goal else "reported",
                                                "met": None if goal is None else ratio <= goal}
    two = _row(rows, "numba two-pass", 2048)
    if nb and two:
        speed = two["forward_backward_s"] / nb["forward_backward_s"]
        out["one_pass_speedup_T2048"] = {"value": speed, "target": "reported", "met": None}
    nb, npy = _row(rows, "numba", 4096), _row(rows, "numpy", 4096)
    if nb and npy:
        frac = nb["peak_bytes_forward"] / max(npy["peak_bytes_forward"], 1)
        out["memory_fraction_T4096"] = {"value": frac, "target": "<= 10 %", "met": frac <= 0.10}
    return out


def _markdown(res, quick):
    mib = lambda b: f"{b / 2**20:.1f}"
    lines = [
        f"Causal ALiBi attention, batch 1, H = {H}, D = {D}, float32. Forward: median of {res['repeats']} "
        "calls; forward + backward: median of "
        f"{max(1, res['repeats'] // 2)}. GFLOP/s counts the useful 2·T²·D·H forward FLOP (3.5x that "
        "for forward + backward) for every method. Peak memory = growth of the peak resident set "
        "(Linux `VmHWM` after a reset) caused by the first call, in a fresh subprocess per row "
        "(outputs included; torch's forward includes its (H, T, T) float mask). "
        "`numpy` = `alibi.attention(backend=\"numpy\")` (materialised bias, "
        "logits, probabilities); `numba` = fused kernel (one-pass backward; variants at T = 2048: two-pass "
        "backward, float16/bfloat16 inputs computed in float32, 2 or 1 key/value heads for the 8 query heads); "
        "`torch causal` = `scaled_dot_product_attention(..., is_causal=True)` without a bias (torch's fused "
        "causal path: the speed a fused ALiBi kernel can reach); "
        "`torch` / `torch compile` = `scaled_dot_product_attention` with the float ALiBi mask, 2 threads, "
        "eager / `torch.compile` (compile time of the size in its own column, not in the timings)"
        + (f", torch {res['torch']}" if res["torch_available"] else " (torch not available: skipped)") + ". "
        f"% sgemm: of the in-run sgemm roofline, {res['sgemm_GFLOPs']['denominator']:.0f} GFLOP/s (a "
        f"{res['sgemm_GFLOPs']['n']}^2 float32 NumPy matmul on BLAS's threads: "
        f"{res['sgemm_GFLOPs']['before']:.0f} before the rows, {res['sgemm_GFLOPs']['after']:.0f} after; the larger "
        "is used).",
        "",
        "| T | method | forward ms | GFLOP/s | % sgemm | peak MiB | fwd+bwd ms | GFLOP/s | % sgemm | peak MiB "
        "| fwd speed-up vs numpy | compile s |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in res["rows"]:
        base = _row(res["rows"], "numpy", r["T"])
        speed = base["forward_s"] / r["forward_s"] if base else float("nan")
        compile_s = f"{r['compile_s']:.1f}" if "compile_s" in r else ""
        lines.append(
            f"| {r['T']} | {r['method']} | {1e3 * r['forward_s']:.1f} | {r['forward_GFLOPs']:.1f} | "
            f"{r['forward_pct_sgemm']:.0f} | {mib(r['peak_bytes_forward'])} | {1e3 * r['forward_backward_s']:.1f} | "
            f"{r['forward_backward_GFLOPs']:.1f} | {r['forward_backward_pct_sgemm']:.0f} | "
            f"{mib(r['peak_bytes_forward_backward'])} | {speed:.2f}x | {compile_s} |")
    lines += ["", "Targets:", ""]
    names = {
        **{f"forward_pct_sgemm_T{t}": f"fused forward, % of the in-run sgemm at T = {t}" for t in (2048, 4096)},
        **{f"fwd_bwd_pct_sgemm_T{t}": f"fused forward + backward, % of the in-run sgemm at T = {t}"
           for t in (2048, 4096)},
        **{f"forward_vs_torch_causal_T{t}": f"fused ALiBi forward vs torch's bias-free causal SDPA at T = {t}"
           for t in (2048, 4096)},
        **{f"fwd_bwd_vs_torch_causal_T{t}": f"fused ALiBi forward + backward vs torch's bias-free causal SDPA "
           f"at T = {t}" for t in (2048, 4096)},
        "speedup_vs_numpy_T2048": "fused forward vs materialised NumPy at T = 2048",
        "speedup_vs_torch_T2048": "fused forward vs torch SDPA (float mask) at T = 2048",
        "fwd_bwd_speedup_vs_torch_T2048": "fused forward + backward vs torch SDPA forward + backward at T = 2048",
        "fwd_bwd_speedup_vs_torch_compile_T2048": "fused forward + backward vs torch.compile SDPA at T = 2048",
        "float16_time_ratio_T2048": "float16 inputs / float32 inputs, forward + backward time at T = 2048 "
                                    "(interleaved rounds in one process)",
        "bfloat16_time_ratio_T2048": "bfloat16 inputs / float32 inputs, forward + backward time at T = 2048 "
                                     "(interleaved rounds in one process)",
        "one_pass_speedup_T2048": "one-pass backward: two-pass / one-pass forward + backward time at T = 2048",
        "memory_fraction_T4096": "fused peak memory / materialised peak memory at T = 4096",
    }
    for key, tgt in res["targets"].items():
        val = (f"{100 * tgt['value']:.2f} %" if key.startswith("memory") else
               f"{tgt['value']:.0f} %" if "pct_sgemm" in key else f"{tgt['value']:.2f}x")
        verdict = "reported" if tgt["met"] is None else ("met" if tgt["met"] else "NOT met")
        lines.append(f"- {names[key]}: {val} (target {tgt['target']}): {verdict}")
    if not res["targets"]:
        lines.append("- (T = 2048 / 4096 not run in this mode)")
    agree = ", ".join(f"{k} {v:.1e}" for k, v in res["agreement_max_abs_diff_vs_numpy_T256"].items())
    lines += ["", f"Agreement with NumPy at T = 256 (max |difference| of the output): {agree}.", ""]
    thr = res["threshold"]
    lines += [
        "`auto` threshold sweep (interleaved rounds, median; ms):",
        "",
        "| H | T | numpy fwd | numba fwd | numpy fwd+bwd | numba fwd+bwd |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in thr["rows"]:
        lines.append(f"| {r['H']} | {r['T']} | {1e3 * r['numpy_forward_s']:.3f} | {1e3 * r['numba_forward_s']:.3f} | "
                     f"{1e3 * r['numpy_forward_backward_s']:.3f} | {1e3 * r['numba_forward_backward_s']:.3f} |")
    lines += ["", f"Fused forward wins from T = {thr['recommended_min_T_forward']} (forward + backward from "
              f"T = {thr['recommended_min_T_forward_backward']}) in this run; "
              f"`posenc_np._backend.ALIBI_NUMBA_MIN_T` = {thr['current_ALIBI_NUMBA_MIN_T']}."]
    return "\n".join(lines)


def _threshold_in_subprocess(quick: bool) -> dict:
    """:func:`threshold` in a fresh process without torch: with torch loaded in the same
    process, alternating Numba parallel regions and NumPy's threaded BLAS calls stall for
    milliseconds (measured: the fused forward at H = 8, T = 128 took 2.7-5.7 ms with torch
    imported, 0.6 ms without), which would make the sweep measure torch's presence."""
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--sweep", "quick" if quick else "full"],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"bench_alibi threshold sweep failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:
        spec = json.loads(argv[1])
        print(json.dumps(worker(spec["method"], spec["T"], spec["repeats"], spec["backward"])))
        return 0
    if argv[:1] == ["--sweep"]:
        print(json.dumps(threshold(argv[1] == "quick")))
        return 0
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--decode", action="store_true")
    parser.add_argument("--torch-python", default=None)
    args = parser.parse_args(argv)
    res = (decode if args.decode else run)(args.quick, args.torch_python)
    print(res["markdown"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
