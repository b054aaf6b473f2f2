"""RoPE rotation: NumPy reference vs the Numba kernel, and torch eager / ``torch.compile``.

``run(quick, torch_python) -> dict`` returns JSON-able numbers and a Markdown table under
``"markdown"``; ``threshold(quick) -> dict`` measures where the kernel starts to beat NumPy (the
``auto`` switch, ``posenc_np._backend.ROPE_NUMBA_MIN_ELEMENTS``). Run directly:
``python bench/bench_rope.py [--quick] [--threshold] [--torch-python PATH]``; normally via
``bench/run.py``.

Variants, each timed on the same arrays (float32, ``x`` of shape ``(B, H, T, 128)`` or
``(B, T, H, 128)``, tables ``(T, 128)`` from ``rope.cos_sin``):

* ``numpy``: ``posenc_np.rope.apply`` / ``apply_backward`` with ``backend="numpy"`` (the
  reference, including its argument checks);
* ``apply``: the public ``rope.apply`` / ``apply_backward`` with ``backend="auto"`` (its checks,
  then the kernel), a fresh output per call;
* ``alloc``: ``kernels.rope_apply(x, cos, sin)``, a fresh output per call (what ``rope.apply``
  with ``backend="numba"`` does without ``out=``): its page faults are part of the time;
* ``out``: ``kernels.rope_apply(x, cos, sin, out=y)``, a preallocated output reused;
* ``in-place``: ``kernels.rope_apply(x, cos, sin, out=x)``;
* torch (when ``--torch-python`` imports it, in its own process, ``bench/torch_peers.py``):
  Hugging Face's ``x * cos + rotate_half(x) * sin`` (``interleaved``: GPT-J's
  ``rotate_every_two``) on ``torch.from_numpy`` views, all cores, eager and ``torch.compile``
  (compile time reported separately, excluded from the steady state).

Bytes and rooflines. Every variant counts the bytes it must move: read ``x`` + ``cos`` + ``sin``
and write ``y`` (``2|x| + |cos| + |sin|``).
The in-run roofline is timed in the same interleaved rounds, on flat arrays of ``x``'s size:
NumPy copy ``y = x`` (counted 2N), a Numba triad ``y = x + 0.5 z`` (counted 3N), and an in-place
scale ``x *= -1`` (counted 2N). Write-allocate: a store to a line not in cache first reads it,
so an out-of-place kernel really moves one more array than it counts (copy 3N, triad 4N, an
out-of-place rotation 3N, none of it for in place). Out-of-place variants are therefore
compared with the *out-of-place roofline* ``max(copy, triad)`` in counted bytes (same
accounting on both sides), the in-place variant with the *in-place roofline* = the in-place
scale (no write-allocate on either side). The table also gives the write-allocate-inclusive
("true") bandwidth of copy (3N) and triad (4N). Median of the rounds after a warm-up round.
"""

from __future__ import annotations

import os
import statistics
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from timing import interleaved_rounds

from posenc_np import rope

HEAD_DIM = 128


def cache_sizes() -> dict:
    """Data/unified cache size in bytes per level, of CPU 0 (Linux sysfs; empty elsewhere)."""
    root = "/sys/devices/system/cpu/cpu0/cache"
    sizes = {}
    try:
        entries = [e for e in os.listdir(root) if e.startswith("index")]
        for entry in entries:
            def read(name, entry=entry):
                with open(os.path.join(root, entry, name)) as f:
                    return f.read().strip()

            if read("type") == "Instruction":
                continue
            text = read("size")
            scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            sizes[int(read("level"))] = int(text.rstrip("KMG")) * scale
    except (OSError, ValueError):
        return {}
    return sizes


def where(nbytes: int, caches=None) -> str:
    """The smallest cache level an array of ``nbytes`` fits (by size alone), or ``DRAM``."""
    caches = cache_sizes() if caches is None else caches
    for level in sorted(caches):
        if level >= 2 and nbytes <= caches[level]:
            return f"L{level}"
    return "DRAM" if caches else "?"


def _sized(label, shape, order, suffix=""):
    return (f"{label} ({where(4 * int(np.prod(shape)))}){suffix}", shape, order)


# (label, shape, order): from L2-resident up; the level in brackets is this machine's (by size:
# the 64 and 256 MiB cases are DRAM-sized on a 32 MiB L3 but fit a 260 MiB one, which is
# shared with the host's other tenants)
SIZES = [
    _sized("256 KiB", (1, 4, 128, HEAD_DIM), "bhtd"),
    _sized("4 MiB", (1, 8, 1024, HEAD_DIM), "bhtd"),
    _sized("64 MiB", (1, 32, 4096, HEAD_DIM), "bhtd"),
    _sized("64 MiB", (1, 4096, 32, HEAD_DIM), "bthd", ", (B,T,H,D)"),
    _sized("256 MiB", (4, 32, 4096, HEAD_DIM), "bhtd"),
]
QUICK_SIZES = SIZES[:3]
VARIANTS = ("numpy", "apply", "alloc", "out", "in-place")


def _case(shape, order, layout, rng):
    t = shape[2] if order == "bhtd" else shape[1]
    x = rng.standard_normal(shape, dtype=np.float32)
    cos, sin = rope.cos_sin(np.arange(t), rope.inv_freq(HEAD_DIM, base=10000.0)[0], layout=layout, dtype=np.float32)
    if order == "bthd":
        cos, sin = cos[:, None], sin[:, None]
    return x, cos, sin


def _roofline_kernels():
    from roofline import _triad_kernel

    return _triad_kernel()


def first_touch(nbytes):
    from roofline import first_touch as touch

    touch(nbytes)


def run(quick: bool = False, torch_python: str | None = None) -> dict:
    """Time every variant at every size, both layouts, forward and backward."""
    from posenc_np.kernels import rope_apply

    rng = np.random.default_rng(0)
    sizes = QUICK_SIZES if quick else SIZES
    rows = []
    for label, shape, order in sizes:
        big = np.prod(shape) * 4 >= (256 << 20)
        repeats = 3 if quick else (5 if big else 11)
        for layout in ("half", "interleaved"):
            x, cos, sin = _case(shape, order, layout, rng)
            y = np.empty_like(x)
            z = x.copy()  # rotated in place over and over (a rotation keeps it bounded)
            triad, scale = _roofline_kernels()
            cos1, sin1 = cos[:1], sin[:1]
            for direction in ("forward", "backward"):
                inverse = direction == "backward"
                reference = rope.apply_backward if inverse else rope.apply
                fns = {
                    "numpy": lambda: reference(x, cos, sin, layout=layout, backend="numpy"),
                    "apply": lambda: reference(x, cos, sin, layout=layout),
                    "alloc": lambda: rope_apply(x, cos, sin, layout=layout, inverse=inverse),
                    "out": lambda: rope_apply(x, cos, sin, layout=layout, inverse=inverse, out=y),
                    "in-place": lambda: rope_apply(z, cos, sin, layout=layout, inverse=inverse, out=z),
                    # diagnostic: the same in-place rotation with one table row for every row (the
                    # tables stay in L1), i.e. without the table traffic
                    "_in_place_1row": lambda: rope_apply(z, cos1, sin1, layout=layout, inverse=inverse, out=z),
                }
                # The roofline is timed in the same rounds, so drift hits it like the variants.
                # Its kernels loop over axis 0, so they get flat views (a 4-D x would make each
                # prange step an array expression with temporaries, far below bandwidth).
                yf, xf, zf = y.reshape(-1), x.reshape(-1), z.reshape(-1)
                fns["_copy"] = lambda: np.copyto(yf, xf)
                fns["_triad"] = lambda: triad(yf, xf, zf, np.float32(0.5))
                fns["_scale"] = lambda: scale(zf, np.float32(-1.0))
                fns["_touch"] = lambda: first_touch(x.nbytes)
                times = interleaved_rounds(fns, repeats)
                touch = times.pop("_touch")
                copy_gbs = 2 * x.nbytes / times.pop("_copy") / 1e9
                triad_gbs = 3 * x.nbytes / times.pop("_triad") / 1e9
                scale_gbs = 2 * x.nbytes / times.pop("_scale") / 1e9
                one_row = times.pop("_in_place_1row")
                roof, roof_inplace = max(copy_gbs, triad_gbs), scale_gbs
                table_bytes = cos.nbytes + sin.nbytes
                moved = {name: 2 * x.nbytes + table_bytes for name in VARIANTS}
                variants = {}
                for name, seconds in times.items():
                    gbs = moved[name] / seconds / 1e9
                    variants[name] = {
                        "seconds": seconds, "bytes": int(moved[name]), "GBps": gbs,
                        "pct_roofline": 100.0 * gbs / (roof_inplace if name == "in-place" else roof),
                        "speedup_vs_numpy": times["numpy"] / seconds,
                    }
                rows.append({
                    "size": label, "shape": list(shape), "order": order, "layout": layout,
                    "direction": direction, "dtype": "float32", "x_bytes": int(x.nbytes),
                    "table_bytes": int(table_bytes), "roofline_GBps": roof, "inplace_roofline_GBps": roof_inplace,
                    "copy_GBps": copy_gbs, "triad_GBps": triad_gbs, "scale_inplace_GBps": scale_gbs,
                    "copy_true_GBps": 1.5 * copy_gbs, "triad_true_GBps": 4 / 3 * triad_gbs,
                    "repeats": repeats, "variants": variants,
                    "in_place_one_row_pct": 100.0 * 2 * x.nbytes / one_row / 1e9 / roof_inplace,
                    "first_touch_s": touch,
                    "alloc_over_out": times["alloc"] / times["out"],
                    "first_touch_floor_over_out": (times["out"] + touch) / times["out"],
                })
    result = {"rows": rows, "head_dim": HEAD_DIM, "torch": None,
              "bytes_model": {
                  "numpy/apply/alloc/out/in-place/torch": "read x + cos + sin, write y (= 2|x| + |cos| + |sin|)",
                  "write-allocate": "not counted: out-of-place stores (copy, triad, kernels) also read y first"}}
    if torch_python:
        _torch_rows(result, sizes, quick, torch_python)
    result["targets"] = _targets(rows)
    result["markdown"] = _markdown(result)
    return result


def _torch_rows(result, sizes, quick, torch_python):
    """torch eager and compiled, in a separate process, merged into the rows by size and layout."""
    import torch_peers

    cases = [{"label": label, "shape": list(shape), "order": order, "layout": layout,
              "repeats": 3 if quick else (5 if np.prod(shape) * 4 >= (256 << 20) else 11)}
             for label, shape, order in sizes for layout in ("half", "interleaved")]
    peer = torch_peers.run(torch_python, "rope", {"cases": cases})
    result["torch"] = peer["torch"]
    by_key = {(c["label"], c["layout"]): c for c in peer["rows"]}
    for r in result["rows"]:
        c = by_key[(r["size"], r["layout"])]
        key = "forward_s" if r["direction"] == "forward" else "backward_s"
        for mode in ("eager", "compile"):
            m = c.get(mode, {})
            if "error" in m:
                r[f"torch_{mode}"] = {"error": m["error"]}
                continue
            seconds = m[key]
            gbs = (2 * r["x_bytes"] + r["table_bytes"]) / seconds / 1e9
            r[f"torch_{mode}"] = {"seconds": seconds, "GBps": gbs, "pct_roofline": 100 * gbs / r["roofline_GBps"],
                                  "compile_s": m.get("compile_s"),
                                  "ours_out_speedup": seconds / r["variants"]["out"]["seconds"]}


def _targets(rows) -> dict:
    """Performance v3's targets on the arrays of >= 64 MiB, judged on the median over those rows
    (the minimum is reported beside it): in place >= 75 % of the in-place roofline, a reused
    ``out`` reported against the out-of-place one, the allocating kernel <= 1.6x the time of
    ``out`` (beside the first-touch floor: ``out`` plus faulting a fresh array's pages in); at
    least as fast as torch.compile on every shape."""
    dram = [r for r in rows if r["x_bytes"] >= (64 << 20)]
    out = {}
    if dram:
        for name, goal in (("in-place", 75.0), ("out", None), ("alloc", None), ("apply", None)):
            pct = [r["variants"][name]["pct_roofline"] for r in dram]
            median = statistics.median(pct)
            out[name] = {"min_pct_roofline": min(pct), "median_pct_roofline": median,
                         "target_pct": goal, "met": None if goal is None else median >= goal}
        pct = [r["in_place_one_row_pct"] for r in dram]
        out["in-place, one table row"] = {"min_pct_roofline": min(pct), "median_pct_roofline": statistics.median(pct),
                                          "target_pct": None, "met": None}
        ratio = [r["alloc_over_out"] for r in dram]
        floor = [r["first_touch_floor_over_out"] for r in dram]
        out["alloc_over_out"] = {"median": statistics.median(ratio), "max": max(ratio),
                                 "floor_median": statistics.median(floor), "target": 1.6,
                                 "met": statistics.median(ratio) <= 1.6}
    vs = [r["torch_compile"]["ours_out_speedup"] for r in rows if "ours_out_speedup" in r.get("torch_compile", {})]
    if vs:
        out["vs_torch_compile"] = {"min_speedup": min(vs), "met": min(vs) >= 1.0}
    return out


def _markdown(result) -> str:
    rows = result["rows"]
    has_torch = result["torch"] is not None
    head = ("| x (float32, D=128) | layout | pass | roofline GB/s: out-of-place (in place) | NumPy GB/s "
            "| rope.apply | alloc | out | in place |"
            + (" torch eager | torch.compile (compile s) |" if has_torch else ""))
    sep = "|---|---|---|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if has_torch else "")
    lines = [head, sep]

    def cell(v):
        return f"{v['GBps']:.1f} ({v['pct_roofline']:.0f} %, {v['speedup_vs_numpy']:.1f}x)"

    def torch_cell(v, with_compile):
        if v is None:
            return "-"
        if "error" in v:
            return "failed"
        extra = f"; {v['compile_s']:.1f} s" if with_compile and v.get("compile_s") is not None else ""
        return f"{v['GBps']:.1f} ({v['pct_roofline']:.0f} %{extra})"

    for r in rows:
        v = r["variants"]
        line = (f"| {r['size']} | {r['layout']} | {r['direction'][:3]} | "
                f"{r['roofline_GBps']:.1f} ({r['inplace_roofline_GBps']:.1f}) | {v['numpy']['GBps']:.2f} | "
                f"{cell(v['apply'])} | {cell(v['alloc'])} | {cell(v['out'])} | {cell(v['in-place'])} |")
        if has_torch:
            line += f" {torch_cell(r.get('torch_eager'), False)} | {torch_cell(r.get('torch_compile'), True)} |"
        lines.append(line)
    repeats = sorted({r["repeats"] for r in rows})
    roof_lines = ["| x | copy GB/s counted (with write-allocate) | triad counted (with w-a) | in-place scale |",
                  "|---|---:|---:|---:|"]
    for r in rows:
        if r["direction"] == "forward" and r["layout"] == "half":
            roof_lines.append(f"| {r['size']} | {r['copy_GBps']:.1f} ({r['copy_true_GBps']:.1f}) | "
                              f"{r['triad_GBps']:.1f} ({r['triad_true_GBps']:.1f}) | {r['scale_inplace_GBps']:.1f} |")
    text = [
        "Cells: GB/s of the bytes the variant must move (`2|x| + |cos| + |sin|`), in brackets % of the roofline "
        "and speed-up over the NumPy reference (`rope.apply(..., backend=\"numpy\")`). `rope.apply` = the public "
        "call (its checks, then the kernel, a new output), `alloc` = kernel with a new output per call, `out` = into a "
        "reused array, `in place` = `out=x` (its % is of the in-place roofline). Roofline (out-of-place) = better of "
        "NumPy copy and Numba triad, in-place roofline = Numba in-place scale, on arrays of x's size, timed "
        "in the same rounds as the variants; write-allocate is not counted on either side (see below). "
        f"Median of {', '.join(map(str, repeats))} interleaved rounds after a warm-up round."
        + (" torch: its own process (not interleaved with these rounds); `torch.compile` steady state, "
           "compile time of the shape in brackets." if has_torch else " torch: not measured."),
        "",
        *lines,
        "",
        "Write-allocate accounting: an out-of-place store first reads the destination line, so copy really "
        "moves 3N bytes and the triad 4N (in brackets below); an out-of-place rotation really moves "
        "`3|x| + tables` and at the triad's true bandwidth tops out near (2/3)/(3/4) = 89 % of the "
        "counted out-of-place roofline. In place there is no such read on either side.",
        "",
        "Table traffic: the counted bytes include `cos` and `sin` once, but with `(B, H, T, D)` and `(T, d)` "
        "tables every head reads every table row, as much table traffic as `x` itself (each half-layout row "
        "also holds each value twice, the HF table format). These arrays are C-contiguous, so the kernel walks "
        "their rows in memory order (each thread one contiguous range of `x`), up to eight heads at a "
        "time, so that each table row is read from L2 or L3 once for eight rows of `x` (at T = 4096, d = 128 the "
        "tables are 4 MiB); on two threads both loops prefetch the row six rows ahead. "
        "`in-place, one table row` below is the same in-place rotation with `cos[:1]`, "
        "`sin[:1]` broadcast to every row (timed in the same rounds): the rotation without the table "
        "traffic, against the same in-place roofline.",
        "",
        *roof_lines,
    ]
    t = result.get("targets") or {}
    if t:
        caches = cache_sizes()
        l3 = f"{caches[3] >> 20} MiB" if 3 in caches else "unknown"
        text += ["", f"Targets on the arrays of >= 64 MiB (DRAM-sized where the L3 is smaller; this machine's L3: "
                     f"{l3}, shared with the host's other tenants, so they may be partly cache-resident):", ""]
        for name in ("in-place", "in-place, one table row", "out", "alloc", "apply"):
            v = t.get(name)
            if v is None:
                continue
            goal = "reported" if v["target_pct"] is None else (
                f">= {v['target_pct']:.0f} %: {'met' if v['met'] else 'NOT met'}")
            text.append(f"- {name}: median {v['median_pct_roofline']:.1f} %, min {v['min_pct_roofline']:.0f} % "
                        f"of its roofline ({goal})")
        if "alloc_over_out" in t:
            v = t["alloc_over_out"]
            text.append(f"- allocating kernel / `out` time: median {v['median']:.2f}x, max {v['max']:.2f}x "
                        f"(target <= {v['target']}: {'met' if v['met'] else 'NOT met'}); the first-touch floor, "
                        "`out` plus faulting in the pages of a new array of x's size (timed in the same rounds), is "
                        f"{v['floor_median']:.2f}x")
        if "vs_torch_compile" in t:
            v = t["vs_torch_compile"]
            text.append(f"- kernel `out` vs `torch.compile`, every shape: slowest ratio {v['min_speedup']:.2f}x "
                        f"(target >= 1: {'met' if v['met'] else 'NOT met'})")
    return "\n".join(text)


# --------------------------------------------------------------------------- auto threshold

def threshold(quick: bool = False) -> dict:
    """Where the kernel beats NumPy, by number of elements of ``x``, both layouts and passes.

    Compared: the two implementations ``rope.apply`` dispatches to after validating its
    arguments, the core ``rope.rotate`` with ``backend="numpy"`` and ``"numba"`` (the kernel
    allocating its output), so the shared validation cost is left out of both. Shapes ``(1, 8, T, 128)``, float32, tables ``(T, 128)``.
    The crossing of a combination is the smallest size from which the kernel is faster at
    every larger measured size; the recommended threshold is the largest crossing.
    """
    exps = range(10, 21, 2) if quick else range(10, 22)
    repeats = 7 if quick else 21
    rng = np.random.default_rng(1)
    freqs = 10000.0 ** (-np.arange(0, HEAD_DIM, 2, dtype=np.float64) / HEAD_DIM)
    combos = {}
    for layout in ("half", "interleaved"):
        for direction in ("forward", "backward"):
            inverse = direction == "backward"
            ratios = []
            for e in exps:
                n = 1 << e
                t = n // (8 * HEAD_DIM)
                x = rng.standard_normal((1, 8, t, HEAD_DIM), dtype=np.float32)
                cos, sin = rope.cos_sin(np.arange(t), freqs, layout=layout, dtype=np.float32)
                times = interleaved_rounds({
                    "numpy": lambda: rope.rotate(x, cos, sin, layout, inverse, "numpy"),
                    "numba": lambda: rope.rotate(x, cos, sin, layout, inverse, "numba"),
                }, repeats, warmup=2)
                ratios.append({"elements": n, "numpy_us": times["numpy"] * 1e6, "numba_us": times["numba"] * 1e6,
                               "speedup": times["numpy"] / times["numba"]})
            crossing = None
            for r in reversed(ratios):
                if r["speedup"] <= 1.0:
                    break
                crossing = r["elements"]
            combos[f"{layout}/{direction}"] = {"sizes": ratios, "crossing_elements": crossing}
    crossings = [c["crossing_elements"] for c in combos.values()]
    recommended = None if None in crossings else max(crossings)
    numpy_side = 'rope.rotate(..., backend="numpy")'
    lines = ["| elements | " + " | ".join(combos) + " |", "|---:|" + "---:|" * len(combos)]
    for i, e in enumerate(exps):
        cells = []
        for c in combos.values():
            r = c["sizes"][i]
            cells.append(f"{r['numpy_us']:.0f} / {r['numba_us']:.0f} us ({r['speedup']:.1f}x)")
        lines.append(f"| 2^{e} | " + " | ".join(cells) + " |")
    md = (f"NumPy side: `{numpy_side}`; Numba side: `rope.rotate(..., backend=\"numba\")` (allocates its output). "
          f"Shapes (1, 8, T, 128) float32, median of {repeats}. Cells: NumPy / Numba time (speed-up). "
          f"Crossings: " + ", ".join(f"{k}: {v['crossing_elements']}" for k, v in combos.items())
          + f". Recommended `ROPE_NUMBA_MIN_ELEMENTS` = {recommended}.\n\n" + "\n".join(lines))
    return {"combos": combos, "recommended": recommended, "numpy_side": numpy_side, "repeats": repeats,
            "markdown": md}


if __name__ == "__main__":
    import argparse
    import json

    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--threshold", action="store_true")
    parser.add_argument("--torch-python", default=None)
    args = parser.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    out = threshold(args.quick) if args.threshold else run(args.quick, args.torch_python)
    print(out["markdown"])
    print(json.dumps({k: v for k, v in out.items() if k != "markdown"}, indent=1)[:4000])
