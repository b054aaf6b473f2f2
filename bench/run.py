"""One command for all benchmarks: ``python bench/run.py [--quick] [--only SECTION ...] [--torch-python PATH] [--note TEXT]``.

Works under any interpreter that has NumPy, Numba, SciPy, mpmath and threadpoolctl (the package
itself is found from this checkout); torch peers run in their own processes, under
``--torch-python`` (default: this interpreter when torch imports there; ``--torch-python ''``
skips them). Sections (all by default, in this order):

``roofline``   in-run memory bandwidth: NumPy copy, a Numba triad and an in-place scale, GB/s,
               with the write-allocate accounting stated (bench/roofline.py)
``rope``       RoPE forward/backward: NumPy reference vs the Numba kernel (allocating, into a
               reused ``out``, in place, the public ``rope.apply``, q and k in one launch), both layouts,
               L2-resident to DRAM-sized; torch eager and ``torch.compile``; plus the ``auto``
               threshold sweep (bench/bench_rope.py)
``alibi``      ALiBi causal attention: materialised NumPy vs fused Numba (and its one-pass /
               two-pass backward, float16, bfloat16, grouped-query variants) vs torch SDPA eager
               and compiled (bench/bench_alibi.py)
``decode``     ALiBi decoding: 1 and 16 queries against 4k-64k cached keys, flash-decoding key
               splits vs one thread, torch eager and compiled (bench/bench_alibi.py)
``train``      training throughput of the NumPy transformer vs torch eager and compiled (bench/bench_train.py)
``precision``  exact RoPE tables vs float64 ``direct`` and ``float32-split`` (bench/bench_precision.py)
``coldstart``  fresh subprocesses: ``import posenc_np`` time; first RoPE kernel call with an
               empty Numba cache (compile) and with a warm one (load), Numba's own floor and the
               library's share of it
``mechanisms`` what each kept kernel mechanism buys, switched off against on in interleaved rounds:
               the fused ALiBi forward's tile step, float16 conversions and small-query
               path (bench/alibi_mechanisms.py) and the RoPE kernel's memory-order path, in-place
               order, plan cache and serial copies (bench/rope_machinery.py), each in its own
               process

Writes ``bench/results/<UTC timestamp>.json`` and ``bench/results/latest.json`` (all numbers,
machine description, per-section Markdown) and ``docs/benchmarks.md`` (the tables), and prints
where. ``--quick`` is a smoke run (fewer sizes and repeats: numbers are indicative only).
Benchmarks are not tests: nothing here asserts a speed; the targets are reported as met or not.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time

#: The environment as the user started us (nothing above imports posenc_np.kernels, which
#: sets ``OMP_WAIT_POLICY``): the training comparison runs torch under the user's settings.
_USER_ENV = dict(os.environ)

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
for path in (BENCH, ROOT):
    if path not in sys.path:
        sys.path.insert(0, path)

SECTIONS = ("roofline", "rope", "alibi", "decode", "train", "precision", "coldstart", "mechanisms")


# --------------------------------------------------------------------------- machine

def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _caches() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    keep = [ln.split(":", 1) for ln in out.splitlines() if ln.strip().startswith(("L1d", "L2", "L3"))]
    return ", ".join(f"{k.strip()} {v.strip()}" for k, v in keep)


def _loadavg():
    try:
        return list(os.getloadavg())
    except OSError:
        return None


def default_torch_python() -> str | None:
    """This interpreter if torch is importable here (found without importing it), else None."""
    import importlib.util

    return sys.executable if importlib.util.find_spec("torch") is not None else None


def machine(torch_python: str | None = None) -> dict:
    import numba
    import numpy as np
    import torch_peers

    info = {
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "cpu": _cpu_model(),
        "caches": _caches(),
        "logical_cpus": os.cpu_count(),
        "numba_threads": numba.config.NUMBA_NUM_THREADS,
        "numba_threading_layer": None,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": numba.__version__,
        "torch": torch_peers.torch_version(torch_python),  # in a subprocess: never imported here
        "torch_python": torch_python,
        "interpreter": sys.executable,
        "platform": platform.platform(),
        "loadavg_start": _loadavg(),
    }
    return info


# --------------------------------------------------------------------------- cold start

def _python(code: str, env: dict) -> dict:
    full = dict(os.environ)
    full["PYTHONPATH"] = ROOT + os.pathsep + full.get("PYTHONPATH", "")
    full.update(env)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          env=full, cwd=ROOT, timeout=600)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"cold-start subprocess failed:\n{proc.stderr[-2000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["process_wall_s"] = wall
    return out


_IMPORT_CODE = """
    import json, sys, time
    t0 = time.perf_counter()
    import posenc_np
    t1 = time.perf_counter()
    print(json.dumps({"import_s": t1 - t0, "numba_imported": "numba" in sys.modules}))
"""

_FIRST_CALL_CODE = """
    import json, time
    t0 = time.perf_counter()
    import numpy as np
    from posenc_np import rope
    x = np.ones((1, 8, 64, 128), dtype=np.float32)
    cos, sin = rope.cos_sin(np.arange(64), 10000.0 ** (-np.arange(0, 128, 2) / 128), dtype=np.float32)
    t1 = time.perf_counter()
    from posenc_np.kernels import rope_apply
    t2 = time.perf_counter()
    rope_apply(x, cos, sin, layout="half")
    t3 = time.perf_counter()
    rope_apply(x, cos, sin, layout="half")
    t4 = time.perf_counter()
    from posenc_np.kernels import _numba
    print(json.dumps({"setup_s": t1 - t0, "import_kernels_s": t2 - t1, "first_call_s": t3 - t2,
                      "import_plus_first_call_s": t3 - t1, "second_call_s": t4 - t3,
                      "cache_dir": _numba.cache_dir()}))
"""


_BREAKDOWN_CODE = """
    import json, time
    import numpy as np
    from posenc_np import rope
    x = np.ones((1, 8, 64, 128), dtype=np.float32)
    cos, sin = rope.cos_sin(np.arange(64), 10000.0 ** (-np.arange(0, 128, 2) / 128), dtype=np.float32)
    t0 = time.perf_counter()
    import numba
    t1 = time.perf_counter()
    from numba.core.registry import cpu_target
    cpu_target.target_context.refresh()  # Numba's own first-use set-up (lowering registries)
    t2 = time.perf_counter()
    from posenc_np.kernels import rope_apply
    rope_apply(x, cos, sin, layout="half")
    t3 = time.perf_counter()
    numba.get_num_threads()  # the first one starts Numba's thread pool
    t4 = time.perf_counter()
    print(json.dumps({"import_numba_s": t1 - t0, "numba_first_use_s": t2 - t1, "ours_s": t3 - t2,
                      "thread_pool_s": t4 - t3}))
"""


def coldstart(quick: bool = False) -> dict:
    """Fresh interpreters: import time, first kernel call cold (empty cache) and warm."""
    repeats = 3 if quick else 7
    imports = [_python(_IMPORT_CODE, {}) for _ in range(repeats)]
    cache = tempfile.mkdtemp(prefix="posenc_np-bench-cache-")
    try:
        cold = _python(_FIRST_CALL_CODE, {"NUMBA_CACHE_DIR": cache})
        warm = [_python(_FIRST_CALL_CODE, {"NUMBA_CACHE_DIR": cache}) for _ in range(repeats)]
        parts = [_python(_BREAKDOWN_CODE, {"NUMBA_CACHE_DIR": cache}) for _ in range(repeats)]
    finally:
        shutil.rmtree(cache, ignore_errors=True)

    def med(rows, key):
        return statistics.median(r[key] for r in rows)

    result = {
        "repeats": repeats,
        "import_posenc_np_s": med(imports, "import_s"),
        "import_posenc_np_process_wall_s": med(imports, "process_wall_s"),
        "import_imports_numba": any(r["numba_imported"] for r in imports),
        "cold": cold,
        "warm_import_plus_first_call_s": med(warm, "import_plus_first_call_s"),
        "warm_first_call_s": med(warm, "first_call_s"),
        "warm_import_kernels_s": med(warm, "import_kernels_s"),
        "warm_second_call_s": med(warm, "second_call_s"),
        "warm_breakdown": {key: med(parts, key) for key in ("import_numba_s", "numba_first_use_s", "ours_s",
                                                                  "thread_pool_s")},
    }
    floor = result["warm_breakdown"]["import_numba_s"] + result["warm_breakdown"]["numba_first_use_s"]
    result["numba_floor_s"] = floor
    result["library_share_s"] = result["warm_breakdown"]["ours_s"]
    result["targets"] = {
        "import_under_0.3s": result["import_posenc_np_s"] < 0.3,
        "library_share_under_60ms": result["library_share_s"] <= 0.060,
    }
    ms = lambda s: f"{1e3 * s:.0f} ms"
    result["markdown"] = "\n".join([
        f"Fresh subprocesses, median of {repeats} (the cold compile runs once). "
        "'First call' = `from posenc_np.kernels import rope_apply` (imports Numba) + the first call "
        "on a (1, 8, 64, 128) float32 array; the NumPy import and table set-up are excluded.",
        "",
        "| measurement | time | target |",
        "|---|---:|---|",
        f"| `import posenc_np` (in-process) | {ms(result['import_posenc_np_s'])} | < 300 ms: "
        f"{'met' if result['targets']['import_under_0.3s'] else 'NOT met'}; imports Numba: "
        f"{'yes' if result['import_imports_numba'] else 'no'} |",
        f"| `python -c 'import posenc_np'` (whole process) | {ms(result['import_posenc_np_process_wall_s'])} | |",
        f"| first call, empty cache (compile, float32 kernel) | {ms(cold['import_plus_first_call_s'])} | |",
        f"| first call, warm cache | {ms(result['warm_import_plus_first_call_s'])} "
        f"(import {ms(result['warm_import_kernels_s'])} + call {ms(result['warm_first_call_s'])}) | reported |",
        f"| of which Numba's own floor: `import numba` + its first-use set-up | {ms(floor)} | |",
        f"| of which the library's share: importing `posenc_np.kernels.rope`, loading the cached kernel, the call "
        f"| {ms(result['library_share_s'])} | <= 60 ms: "
        f"{'met' if result['targets']['library_share_under_60ms'] else 'NOT met'} |",
        f"| second call, same process | {1e6 * result['warm_second_call_s']:.0f} us | |",
        "",
        "The floor and the share come from separate runs with the same warm cache: `import numba` "
        f"{ms(result['warm_breakdown']['import_numba_s'])}; Numba's own first-use set-up "
        "(`cpu_target.target_context.refresh()`: its lowering registries, which import "
        f"`scipy.linalg` for BLAS) {ms(result['warm_breakdown']['numba_first_use_s'])}; then the library's "
        f"share {ms(result['warm_breakdown']['ours_s'])}. A call this small runs on the calling thread and "
        "does not start Numba's thread pool (its first `numba.get_num_threads()`, "
        f"{ms(result['warm_breakdown']['thread_pool_s'])} right after, in the same runs); the first call large enough "
        "for two threads pays that too.",
    ])
    return result


# --------------------------------------------------------------------------- mechanisms

def mechanisms(quick: bool = False) -> dict:
    """bench/alibi_mechanisms.py and bench/rope_machinery.py, each in a fresh process."""
    rounds = "3" if quick else "11"
    tables = {}
    for name, script in (("alibi", "alibi_mechanisms.py"), ("rope", "rope_machinery.py")):
        env = dict(os.environ)
        env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
        proc = subprocess.run([sys.executable, os.path.join(BENCH, script), rounds], capture_output=True, text=True,
                              env=env, cwd=ROOT, timeout=3600)
        if proc.returncode != 0:
            raise RuntimeError(f"{script} failed:\n{proc.stderr[-3000:]}")
        tables[name] = proc.stdout.strip()
    markdown = "\n".join([
        "Each mechanism switched off (replaced by what it replaced) against on, in rounds that alternate "
        f"the order, {rounds} rounds, medians.",
        "",
        "**Fused ALiBi attention: per 64 x 64 tile step (forward and backward), the door's float16 conversions, "
        "the small-query path** (`python bench/alibi_mechanisms.py`: one thread; the tile table float32, d = 64, "
        "each variant a compiled loop of 4000 calls, the tile steps over 16 key tiles of one query tile; the "
        "forward step off: the row form with stored transposed key tiles; the backward step off: handed transposed "
        "views of Q and dO instead of C-contiguous transposed tiles; the conversions and the small-query path on "
        "whole calls, one "
        "call per variant and round; off: NumPy's casts, and the kernels compiled with `SMALL_Q = 0` so that every "
        "tile takes BLAS):",
        "",
        tables["alibi"],
        "",
        "**RoPE kernel: the memory-order path, several heads at a time in place, the prefetch, the plan cache and "
        "the serial copies, through the public API** (`python bench/rope_machinery.py`: median of a batch of calls "
        "per round; the memory-order path serves C-contiguous calls (off: they take the planned path); it "
        "rotates up to eight heads' rows per table row (off: one head an item); on two threads it prefetches "
        "the row six rows ahead (off: no prefetch); the plan cache serves the model's strided q and k "
        "views; a call too small for two threads runs a serial copy of the kernel (off: the parallel kernel with "
        "Numba's thread count set to one)):",
        "",
        tables["rope"],
    ])
    return {"rounds": int(rounds), "tables": tables, "markdown": markdown}


# --------------------------------------------------------------------------- sections

def _train_in_subprocess(quick: bool, torch_python: str | None) -> dict:
    """bench/bench_train.py in a fresh process with the user's environment (its torch peers run
    in processes of their own, with torch's threading defaults)."""
    env = dict(_USER_ENV)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    cmd = [sys.executable, os.path.join(BENCH, "bench_train.py"), "--json"] + (["--quick"] if quick else [])
    if torch_python:
        cmd += ["--torch-python", torch_python]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"bench_train failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _docs(results: dict, note: str | None) -> str:
    m = results["machine"]
    lines = [
        "# Benchmarks",
        "",
        "Generated by `python bench/run.py" + (" --quick" if results["quick"] else "") + "` "
        f"on {m['date_utc']}; raw numbers in `bench/results/latest.json`. Benchmarks are not tests: "
        "they report ratios measured side by side in one run (earlier runs: `bench/results/*.json`).",
        "",
    ]
    if note:
        lines += [f"> **{note}**", ""]
    if results["quick"]:
        lines += ["> Smoke run (`--quick`): fewer sizes and repeats; indicative only.", ""]
    lines += [
        "## Machine",
        "",
        f"- CPU: {m['cpu']} ({m['logical_cpus']} logical CPUs; {m['caches']})",
        f"- Numba {m['numba']} ({m['numba_threads']} threads, threading layer {m['numba_threading_layer']}), "
        f"NumPy {m['numpy']}, torch {m['torch'] or 'not available'}"
        + (f" (under {m['torch_python']})" if m.get("torch") else "") + f", Python {m['python']} ({m['interpreter']})",
        f"- {m['platform']}",
        f"- load average at start {_fmt_load(m['loadavg_start'])}, at end {_fmt_load(m.get('loadavg_end'))} "
        "(a busy machine lowers every figure, parallel ones most)",
        "",
    ]
    titles = {
        "roofline": "Memory-bandwidth roofline",
        "rope": "RoPE rotation (float32)",
        "rope_threshold": "RoPE `auto` threshold (NumPy vs Numba by size)",
        "alibi": "ALiBi causal attention",
        "decode": "ALiBi decoding (few queries, long cache)",
        "train": "Training throughput (hand-written backprop vs torch eager and torch.compile)",
        "precision": "Exact tables: cost of `rope.cos_sin` per method",
        "coldstart": "Cold start",
        "mechanisms": "Kernel mechanisms: what each buys",
    }
    for key, title in titles.items():
        section = results["sections"].get(key)
        if section is None:
            continue
        lines += [f"## {title}", "", section.get("markdown", "(no table)"), ""]
    lines += [
        "## Threads: what these numbers assume",
        "",
        "- `posenc_np.kernels` sets `OMP_WAIT_POLICY=PASSIVE` (unless you set it) before Numba loads "
        "its OpenMP runtime. With OpenMP's default active wait, a Numba kernel and NumPy's threaded "
        "OpenBLAS spin against each other on a 2-core machine whenever they alternate, and small "
        "calls stall for milliseconds (measured, ALiBi H = 8, T = 96-128: 2.6-3.5 ms instead of "
        "0.4-0.5 ms); see `posenc_np/kernels/_numba.py`.",
        "- Importing torch into the same process brings the stalls back (measured: fused ALiBi "
        "forward at H = 8, T = 128 took 2.7-5.7 ms with torch imported, 0.6 ms without). Every torch "
        "number (eager and `torch.compile`) therefore comes from a separate process "
        "(`bench/torch_peers.py`, or a per-size worker for the ALiBi table), never interleaved with "
        "ours: drift on a shared machine can bias those ratios. `torch.compile`'s compile time is "
        "reported separately and excluded from its steady-state timings.",
        "",
    ]
    return "\n".join(lines)


#: docs/benchmarks.md keeps everything from this line on when the run rewrites the page: the
#: sections measured by hand (tools/api_overhead.py and the like), not by this script.
KEPT_MARKER = "<!-- measured by hand, not by bench/run.py: kept when it rewrites the page -->"


def _kept_sections(path) -> str:
    """The hand-measured tail of the current page (from :data:`KEPT_MARKER`), or ``""``."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return ""
    at = text.find(KEPT_MARKER)
    return "" if at < 0 else "\n" + text[at:]


def _fmt_load(load) -> str:
    return "n/a" if not load else " / ".join(f"{v:.2f}" for v in load) + " (1/5/15 min)"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smoke run: fewer sizes and repeats")
    parser.add_argument("--only", action="append", choices=SECTIONS,
                        help="run only this section (repeatable)")
    parser.add_argument("--note", default=None, help="a line to print at the top of docs/benchmarks.md")
    parser.add_argument("--no-docs", action="store_true", help="do not rewrite docs/benchmarks.md")
    parser.add_argument("--torch-python", default=None, metavar="PATH",
                        help="interpreter for the torch peers (default: this one if torch imports here; '' = none)")
    args = parser.parse_args(argv)
    wanted = args.only or list(SECTIONS)
    torch_python = default_torch_python() if args.torch_python is None else (args.torch_python or None)

    results = {"quick": args.quick, "sections_run": wanted, "machine": machine(torch_python), "sections": {}}
    if torch_python and not results["machine"]["torch"]:
        print(f"torch does not import under {torch_python}: torch peers skipped", flush=True)
        torch_python = None
    t_start = time.perf_counter()
    if "roofline" in wanted:
        import roofline

        print("roofline ...", flush=True)
        results["sections"]["roofline"] = roofline.run(args.quick)
    if "rope" in wanted:
        import bench_rope

        print("rope ...", flush=True)
        results["sections"]["rope"] = bench_rope.run(args.quick, torch_python)
        print("rope threshold ...", flush=True)
        results["sections"]["rope_threshold"] = bench_rope.threshold(args.quick)
    if "alibi" in wanted:
        import bench_alibi

        print("alibi ...", flush=True)
        results["sections"]["alibi"] = bench_alibi.run(args.quick, torch_python)
    if "decode" in wanted:
        import bench_alibi

        print("decode ...", flush=True)
        results["sections"]["decode"] = bench_alibi.decode(args.quick, torch_python)
    if "train" in wanted:
        print("train ...", flush=True)
        results["sections"]["train"] = _train_in_subprocess(args.quick, torch_python)
    if "precision" in wanted:
        import bench_precision

        print("precision ...", flush=True)
        results["sections"]["precision"] = bench_precision.run(args.quick)
    if "coldstart" in wanted:
        print("coldstart ...", flush=True)
        results["sections"]["coldstart"] = coldstart(args.quick)
    if "mechanisms" in wanted:
        print("mechanisms ...", flush=True)
        results["sections"]["mechanisms"] = mechanisms(args.quick)
    try:
        import numba

        results["machine"]["numba_threading_layer"] = numba.threading_layer()
    except (ImportError, ValueError):
        pass
    results["machine"]["loadavg_end"] = _loadavg()
    results["elapsed_s"] = time.perf_counter() - t_start

    out_dir = os.path.join(BENCH, "results")
    os.makedirs(out_dir, exist_ok=True)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    text = json.dumps(results, indent=1, default=float)
    for name in (f"{stamp}.json", "latest.json"):
        tmp = os.path.join(out_dir, name + ".tmp")
        with open(tmp, "w") as f:
            f.write(text + "\n")
        os.replace(tmp, os.path.join(out_dir, name))
    if not args.no_docs:
        target = os.path.join(ROOT, "docs", "benchmarks.md")
        with open(target + ".tmp", "w") as f:
            f.write(_docs(results, args.note) + "\n" + _kept_sections(target))
        os.replace(target + ".tmp", target)
    for key, section in results["sections"].items():
        print(f"\n== {key}\n{section.get('markdown', '')}")
    written = [os.path.join(out_dir, f"{stamp}.json"), os.path.join(out_dir, "latest.json")]
    if not args.no_docs:
        written.append(os.path.join(ROOT, "docs", "benchmarks.md"))
    print(f"\nfinished in {results['elapsed_s']:.0f} s; wrote:\n  " + "\n  ".join(written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
