"""torch peers of the benchmarks, eager and ``torch.compile``, each section in its own subprocess.

The benchmark process never imports torch: with torch's OpenMP runtime loaded next to Numba's,
alternating parallel regions stall for milliseconds (measured: the fused ALiBi forward at
H = 8, T = 128 took 2.7-5.7 ms with torch imported, 0.6 ms without). So every torch number
comes from a fresh interpreter (``--torch-python``, default: the running one if torch imports
there) that imports torch and NumPy only, not posenc_np. One worker per section keeps
inductor's one-time start-up in a single process.

``torch.compile``: the same Python function compiled with ``dynamic=False`` (one graph per
shape, as a model with fixed shapes gets). Compile time = wall time of the first call of each
new shape (trace, lower, C++ build), reported separately; steady state = median of the calls
after it. When compilation fails (no C++ compiler, unsupported op) the row says so.

Usage (normally through ``bench/run.py``): ``python bench/torch_peers.py SECTION SPEC_JSON``
prints one JSON line. Sections: ``version``, ``rope``, ``decode``; ``train-serve`` is the
worker of :class:`TrainPeer` (training windows on request, interleaved with ours). (The ALiBi table's
torch rows run in ``bench/bench_alibi.py``'s per-size workers, which also measure peak memory.)
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


# --------------------------------------------------------------------------- caller side (no torch)

def torch_version(python: str | None) -> str | None:
    """torch's version in interpreter ``python`` (a subprocess), or None when it does not import."""
    if not python:
        return None
    try:
        return run(python, "version", {}, timeout=300).get("torch")
    except (OSError, RuntimeError, subprocess.SubprocessError, ValueError):
        return None


def run(python: str, section: str, spec: dict, timeout: float = 3600) -> dict:
    """Run one section in a fresh ``python``; returns its JSON result."""
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)  # torch under its own threading defaults
    proc = subprocess.run([python, os.path.abspath(__file__), section, json.dumps(spec)], capture_output=True,
                          text=True, env=env, cwd=HERE, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"torch peer {section} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- worker side

def _median_after_first(fn, repeats: int) -> tuple[float, float]:
    """(first-call seconds, median of ``repeats`` later calls)."""
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return first, statistics.median(times)


def _per_mode(torch, fn, measure) -> dict:
    """``{"eager": measure(fn, False), "compile": measure(torch.compile(fn), True)}``; a mode that
    fails (no C++ compiler, an unsupported op) is recorded as ``{"error": ...}``."""
    out = {}
    for mode, call in (("eager", fn), ("compile", torch.compile(fn, dynamic=False))):
        try:
            out[mode] = measure(call, mode == "compile")
        except Exception as exc:  # noqa: BLE001 - a peer that cannot run is a row that says why
            out[mode] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
    return out


def _rope(torch, spec):
    """Hugging Face's ``x * cos + rotate_half(x) * sin`` (interleaved: GPT-J's rotate_every_two)."""
    def rotate_half(x):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=-1)

    def rotate_every_two(x):
        x1, x2 = x[..., ::2], x[..., 1::2]
        return torch.stack((-x2, x1), dim=-1).flatten(-2)

    rows = []
    rng = np.random.default_rng(0)
    for case in spec["cases"]:
        shape, order, layout = tuple(case["shape"]), case["order"], case["layout"]
        t = shape[2] if order == "bhtd" else shape[1]
        d = shape[-1]
        x = torch.from_numpy(rng.standard_normal(shape, dtype=np.float32))
        ang = np.arange(t)[:, None] * 10000.0 ** (-np.arange(0, d, 2) / d)
        c, s = np.cos(ang), np.sin(ang)
        c, s = (np.concatenate([a, a], -1) if layout == "half" else np.repeat(a, 2, -1) for a in (c, s))
        if order == "bthd":
            c, s = c[:, None], s[:, None]
        tc, ts = (torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)) for a in (c, s))
        rot = rotate_half if layout == "half" else rotate_every_two

        def rope(x, c, s):
            return x * c + rot(x) * s

        def measure(fn, compiled, x=x, tc=tc, ts=ts, repeats=case["repeats"]):
            first, fwd = _median_after_first(lambda: fn(x, tc, ts), repeats)
            _, bwd = _median_after_first(lambda: fn(x, tc, -ts), repeats)  # the same graph with -sin
            return {"forward_s": fwd, "backward_s": bwd, **({"compile_s": max(0.0, first - fwd)} if compiled else {})}

        rows.append({**case, **_per_mode(torch, rope, measure)})
    return {"rows": rows}


def _alibi_mask(torch, heads, q_len, k_len, causal=True):
    """The float ALiBi mask ``-m_h (q - k)``, ``-inf`` above the diagonal (bottom-right aligned)."""
    m = 2.0 ** (-8.0 * np.arange(1, heads + 1) / heads)
    dist = (np.arange(q_len)[:, None] + (k_len - q_len)) - np.arange(k_len)[None, :]
    bias = -m[:, None, None] * dist
    if causal:
        bias = np.where(dist < 0, -np.inf, bias)
    return torch.from_numpy(bias.astype(np.float32))


def _decode(torch, spec):
    """Few queries (``q_len``) against a long cache (``K`` keys), float ALiBi mask row(s)."""
    import torch.nn.functional as F

    rows = []
    for case in spec["cases"]:
        heads, q_len, k_len, d = case["H"], case["q_len"], case["K"], spec["D"]
        rng = np.random.default_rng(0)
        q = torch.from_numpy(rng.standard_normal((1, heads, q_len, d), dtype=np.float32))
        k, v = (torch.from_numpy(rng.standard_normal((1, heads, k_len, d), dtype=np.float32)) for _ in range(2))
        mask = _alibi_mask(torch, heads, q_len, k_len)
        scale = 1.0 / math.sqrt(d)

        def attend(q, k, v, mask):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)

        def measure(fn, compiled, q=q, k=k, v=v, mask=mask, repeats=case["repeats"]):
            def go():
                with torch.no_grad():
                    return fn(q, k, v, mask)
            first, steady = _median_after_first(go, repeats)
            return {"seconds": steady, **({"compile_s": max(0.0, first - steady)} if compiled else {})}

        rows.append({**case, **_per_mode(torch, attend, measure)})
    return {"rows": rows}


class TrainPeer:
    """A torch worker that times one training window per request, so that ``bench/bench_train.py``
    can alternate its own windows with torch's (drift on a shared machine then hits both alike).

    ``TrainPeer(python, spec)`` starts ``python torch_peers.py train-serve SPEC`` (``spec``:
    ``threads``, ``steps``, ``warm``), which builds the eager and compiled steppers for every
    thread count, runs their first step (compile time) and warm-up, and reports them
    (:attr:`ready`: ``{key: {"first_step_s"} or {"error"}}``, keys ``torch-eager@2`` ...).
    :meth:`window` (key) returns the tokens/s of one window; :meth:`close` ends the worker.
    """

    def __init__(self, python: str, spec: dict, timeout: float = 900):
        env = dict(os.environ)
        env.pop("OMP_WAIT_POLICY", None)  # torch under its own threading defaults
        self._proc = subprocess.Popen([python, os.path.abspath(__file__), "train-serve", json.dumps(spec)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, env=env, cwd=HERE)
        self.ready = self._reply()

    def _reply(self) -> dict:
        line = self._proc.stdout.readline()
        if not line:
            err = self._proc.stderr.read()[-3000:]
            raise RuntimeError(f"torch train peer failed:\n{err}")
        return json.loads(line)

    def window(self, key: str) -> float:
        self._proc.stdin.write(key + "\n")
        self._proc.stdin.flush()
        return self._reply()["tokens_per_s"]

    def close(self):
        if self._proc.poll() is None:
            with contextlib.suppress(OSError, ValueError):
                self._proc.stdin.close()
            try:
                self._proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()


def _train_serve(torch, spec):
    """Worker side of :class:`TrainPeer`: the training step of ``bench/bench_train.py`` in torch,
    eager and with the model compiled, one timed window per line read from stdin."""
    sys.path.insert(0, HERE)
    import bench_train  # the model definition lives next to its posenc_np twin

    batches = bench_train.batches(0, spec["steps"])
    steppers, ready = {}, {}
    for threads in spec["threads"]:
        for mode in ("eager", "compile"):
            key = f"torch-{mode}@{threads}"
            try:
                step = bench_train.torch_stepper(threads, compiled=mode == "compile")
                t0 = time.perf_counter()
                step(*batches[0])  # compiles the forward and backward graphs
                ready[key] = {"first_step_s": time.perf_counter() - t0}
                for tok, tgt in batches[1:spec["warm"]]:
                    step(tok, tgt)
                steppers[key] = (threads, step)
            except Exception as exc:
                ready[key] = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
    ready["torch"] = torch.__version__
    print(json.dumps(ready), flush=True)
    for line in sys.stdin:
        threads, step = steppers[line.strip()]
        torch.set_num_threads(threads)
        print(json.dumps({"tokens_per_s": bench_train.window(step, batches)}), flush=True)
    return None


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    section, spec = argv[0], json.loads(argv[1]) if len(argv) > 1 else {}
    import torch

    if section == "version":
        print(json.dumps({"torch": torch.__version__}))
        return 0
    if section == "train-serve":
        _train_serve(torch, spec)
        return 0
    torch.set_num_threads(spec.get("torch_threads", os.cpu_count() or 1))
    work = {"rope": _rope, "decode": _decode}[section]
    result = work(torch, spec)
    result["torch"] = torch.__version__
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
