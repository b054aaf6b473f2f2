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
  causal tiles past the diagonal skipped), Numba's default thread count.
* ``torch``: ``torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=M)`` with the
  float ALiBi mask ``M = bias`` (``-inf`` above the diagonal) on ``torch.from_numpy`` views,
  ``torch.set_num_threads(2)``, under ``torch.no_grad()`` (forward); only when torch imports.
  ``M`` is built once outside the timed call (a model would reuse it) but counted in the
  peak memory, since the method needs it.

Forward + backward (training step): ``numpy`` = ``attention`` + ``attention_backward``;
``numba`` = ``alibi_attention_forward`` + ``alibi_attention_backward``; ``torch`` = the same
SDPA call with ``requires_grad`` inputs and ``out.backward(dout)``.

Measurements, each (method, T) in a fresh subprocess:

* time: median (and min) wall time over ``repeats`` calls after one warm-up call;
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

from timing import interleaved_rounds  # noqa: E402  (bench/ is on sys.path: script dir or run.py)

H, D = 8, 64
SIZES = [256, 512, 1024, 2048, 4096]
QUICK_SIZES = [256, 1024]
SWEEP = [16, 32, 64, 96, 128, 192, 256, 512]
QUICK_SWEEP = [32, 64, 128, 256]
METHODS = ("numpy", "numba", "torch")


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
    if method == "numba":
        from posenc_np.kernels import alibi as kalibi

        def fwd():
            return kalibi.alibi_attention_forward(q, k, v, m, causal=True, scale=scale)[0]

        def fwd_bwd():
            out, lse = kalibi.alibi_attention_forward(q, k, v, m, causal=True, scale=scale)
            return kalibi.alibi_attention_backward(do, q, k, v, out, lse, m, causal=True, scale=scale)
        return fwd, fwd_bwd, None
    if method == "torch":
        import torch
        import torch.nn.functional as F

        tq, tk, tv, tdo = (torch.from_numpy(x) for x in (q, k, v, do))
        state = {}

        def setup():  # the float ALiBi mask: (H, T, T), -inf above the diagonal
            bias = torch.from_numpy(alibi.bias(heads, t, t, form="causal", slopes=m, dtype=np.float32))
            state["mask"] = bias.masked_fill_(torch.ones(t, t, dtype=torch.bool).triu_(1), float("-inf"))

        def fwd():
            with torch.no_grad():
                return F.scaled_dot_product_attention(tq, tk, tv, attn_mask=state["mask"], scale=scale)

        def fwd_bwd():
            gq, gk, gv = (x.detach().clone().requires_grad_(True) for x in (tq, tk, tv))
            out = F.scaled_dot_product_attention(gq, gk, gv, attn_mask=state["mask"], scale=scale)
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
    if method == "torch":
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
    fwd()
    result = {"method": method, "T": t, "peak_bytes_forward": meter.growth(), "memory_method": meter.method}
    if backward:
        meter = _PeakMeter()  # (forward's output and torch's mask stay alive: part of the baseline)
        fwd_bwd()
        result["peak_bytes_forward_backward"] = meter.growth()
    result["forward_s"], result["forward_min_s"] = _timed(fwd, repeats)
    if backward:
        result["forward_backward_s"], result["forward_backward_min_s"] = _timed(fwd_bwd, max(1, repeats // 2))
    return result


def _run_worker(method, t, repeats, backward):
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    args = json.dumps({"method": method, "T": t, "repeats": repeats, "backward": backward})
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", args], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"bench_alibi worker {method} T={t} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _torch_available() -> bool:
    """Whether torch is installed (found without importing it into this process)."""
    import importlib.util

    return importlib.util.find_spec("torch") is not None


# --------------------------------------------------------------------------- checks, sweep

def _agreement(t=256):
    """Max |difference| of each method's forward output from NumPy's, at one size."""
    q, k, v, do = _inputs(t, seed=1)
    methods = ["numpy", "numba"] + (["torch"] if _torch_available() else [])
    outs = {}
    for name in methods:
        fwd, _, setup = _make_calls(name, q, k, v, do)
        if setup is not None:
            setup()
        outs[name] = np.asarray(fwd())
    return {name: float(np.max(np.abs(outs[name] - outs["numpy"]))) for name in methods if name != "numpy"}


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

    from posenc_np.kernels import alibi as kalibi

    result = {
        "rows": rows,
        "recommended_min_T_forward": crossover("numpy_forward_s", "numba_forward_s"),
        "recommended_min_T_forward_backward": crossover("numpy_forward_backward_s", "numba_forward_backward_s"),
        "current_ALIBI_NUMBA_MIN_T": kalibi.ALIBI_NUMBA_MIN_T,
    }
    return result


# --------------------------------------------------------------------------- run

def run(quick: bool = False) -> dict:
    """All sizes and methods; returns JSON-able numbers plus ``"markdown"``."""
    sizes = QUICK_SIZES if quick else SIZES
    repeats = 3 if quick else 7
    methods = [m for m in METHODS if m != "torch" or _torch_available()]
    # make sure the kernels are compiled and cached before the subprocesses load them
    _make_calls("numba", *_inputs(64))[1]()
    load_start = _loadavg()
    rows = []
    for t in sizes:
        for method in methods:
            # the NumPy backward at T = 4096 holds several (H, T, T) float32 arrays (~2.5 GB)
            rows.append(_run_worker(method, t, repeats, backward=True))
            print(f"  alibi {method:>5} T={t}: forward {1e3 * rows[-1]['forward_s']:.1f} ms", flush=True)
    for r in rows:
        r["forward_GFLOPs"] = _flop_forward(r["T"]) / r["forward_s"] / 1e9
        if "forward_backward_s" in r:
            r["forward_backward_GFLOPs"] = 3.5 * _flop_forward(r["T"]) / r["forward_backward_s"] / 1e9
    sweep = _threshold_in_subprocess(quick)
    result = {
        "problem": {"H": H, "D": D, "dtype": "float32", "causal": True, "batch": 1},
        "methods": methods,
        "torch_available": "torch" in methods,
        "repeats": repeats,
        "rows": rows,
        "agreement_max_abs_diff_vs_numpy_T256": _agreement(),
        "threshold": sweep,
        "loadavg_start": load_start,
        "loadavg_end": _loadavg(),
    }
    result["targets"] = _targets(rows, sizes)
    result["markdown"] = _markdown(result, quick)
    return result


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


def _targets(rows, sizes):
    out = {}
    nb, npy, tc = _row(rows, "numba", 2048), _row(rows, "numpy", 2048), _row(rows, "torch", 2048)
    if nb and npy:
        speed = npy["forward_s"] / nb["forward_s"]
        out["speedup_vs_numpy_T2048"] = {"value": speed, "target": ">= 1.8", "met": speed >= 1.8}
    if nb and tc:
        speed = tc["forward_s"] / nb["forward_s"]
        out["speedup_vs_torch_T2048"] = {"value": speed, "target": "> 1", "met": speed > 1.0}
    nb, npy = _row(rows, "numba", 4096), _row(rows, "numpy", 4096)
    if nb and npy:
        frac = nb["peak_bytes_forward"] / max(npy["peak_bytes_forward"], 1)
        out["memory_fraction_T4096"] = {"value": frac, "target": "<= 10 %", "met": frac <= 0.10}
    return out


def _markdown(res, quick):
    mib = lambda b: f"{b / 2**20:.1f}"  # noqa: E731
    lines = [
        f"Causal ALiBi attention, batch 1, H = {H}, D = {D}, float32. Forward: median of {res['repeats']} "
        "calls; forward + backward: median of "
        f"{max(1, res['repeats'] // 2)}. GFLOP/s counts the useful 2·T²·D·H forward FLOP (3.5x that "
        "for forward + backward) for every method. Peak memory = growth of the peak resident set "
        "(Linux `VmHWM` after a reset) caused by the first call, in a fresh subprocess per row "
        "(outputs included; torch's forward includes its (H, T, T) float mask). "
        "`numpy` = `alibi.attention(backend=\"numpy\")` (materialised bias, "
        "logits, probabilities); `numba` = fused kernel; `torch` = `scaled_dot_product_attention` with "
        "the float ALiBi mask, 2 threads" + ("" if res["torch_available"] else " (torch not installed: skipped)")
        + ".",
        "",
        "| T | method | forward ms | GFLOP/s | peak MiB | fwd+bwd ms | GFLOP/s | peak MiB | fwd speed-up vs numpy |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in res["rows"]:
        base = _row(res["rows"], "numpy", r["T"])
        speed = base["forward_s"] / r["forward_s"] if base else float("nan")
        lines.append(
            f"| {r['T']} | {r['method']} | {1e3 * r['forward_s']:.1f} | {r['forward_GFLOPs']:.1f} | "
            f"{mib(r['peak_bytes_forward'])} | {1e3 * r['forward_backward_s']:.1f} | "
            f"{r['forward_backward_GFLOPs']:.1f} | {mib(r['peak_bytes_forward_backward'])} | {speed:.2f}x |")
    lines += ["", "Targets:", ""]
    names = {
        "speedup_vs_numpy_T2048": "fused forward vs materialised NumPy at T = 2048",
        "speedup_vs_torch_T2048": "fused forward vs torch SDPA (float mask) at T = 2048",
        "memory_fraction_T4096": "fused peak memory / materialised peak memory at T = 4096",
    }
    for key, tgt in res["targets"].items():
        val = f"{tgt['value']:.2f}x" if key.startswith("speedup") else f"{100 * tgt['value']:.2f} %"
        lines.append(f"- {names[key]}: {val} (target {tgt['target']}): {'met' if tgt['met'] else 'NOT met'}")
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
              f"`posenc_np.kernels.alibi.ALIBI_NUMBA_MIN_T` = {thr['current_ALIBI_NUMBA_MIN_T']}."]
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
    res = run(quick="--quick" in argv)
    print(res["markdown"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
