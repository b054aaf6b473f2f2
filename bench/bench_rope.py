"""RoPE rotation: NumPy reference vs the Numba kernel (and torch CPU eager when installed).

``run(quick) -> dict`` returns JSON-able numbers and a Markdown table under ``"markdown"``;
``threshold(quick) -> dict`` measures where the kernel starts to beat NumPy (the ``auto``
switch, ``posenc_np.kernels.rope.ROPE_NUMBA_MIN_ELEMENTS``). Run directly:
``python bench/bench_rope.py [--quick] [--threshold]``; normally via ``bench/run.py``.

Variants, each timed on the same arrays (float32, ``x`` of shape ``(B, H, T, 128)`` or
``(B, T, H, 128)``, tables ``(T, 128)`` from ``rope.cos_sin``):

* ``numpy``: ``posenc_np.rope.apply`` / ``apply_backward`` with ``backend="numpy"`` (the
  reference, including its argument checks);
* ``numba``: ``kernels.rope_apply(x, cos, sin, out=y)`` (out-of-place into a preallocated
  array; forward ``inverse=False``, backward ``inverse=True``);
* ``in-place``: ``kernels.rope_apply(x, cos, sin, out=x)``;
* ``angles``: ``kernels.rope_apply_angles(x, positions, inv_freq, out=y)`` (sin/cos computed
  on the fly in float64, no tables in memory);
* ``torch``: Hugging Face's ``x * cos + rotate_half(x) * sin`` (``interleaved``: GPT-J's
  ``rotate_every_two``) in eager mode on ``torch.from_numpy`` views, all cores.

Bytes-moved model (stated per row in the table): tables: read ``x`` + ``cos`` + ``sin``, write
``y``; in place: the same (``y`` is ``x``); angles: read ``x`` + positions + ``inv_freq``,
write ``y``. GB/s = bytes / median time; % of roofline = GB/s over the in-run roofline at ``x``'s size
(``bench/roofline.py``: the better of NumPy copy ``x -> y`` and the Numba triad
``y = x + 0.5 z``; for the in-place variant also the in-place scale ``y *= -1``); speed-up
= NumPy time over the variant's time. The variants *and the roofline kernels* are timed in
interleaved rounds (one call of each per round), so drift on a shared machine hits them
alike; warm-up rounds are not counted.
"""

from __future__ import annotations

import os
import statistics
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from posenc_np import rope  # noqa: E402
from timing import interleaved_rounds  # noqa: E402

HEAD_DIM = 128
# (label, shape, order): L2-resident, L3-resident, DRAM-sized (x alone >= 64 MiB; L3 is 32 MiB)
SIZES = [
    ("256 KiB (L2)", (1, 4, 128, HEAD_DIM), "bhtd"),
    ("4 MiB (L3)", (1, 8, 1024, HEAD_DIM), "bhtd"),
    ("64 MiB (DRAM)", (1, 32, 4096, HEAD_DIM), "bhtd"),
    ("64 MiB (DRAM), (B,T,H,D)", (1, 4096, 32, HEAD_DIM), "bthd"),
    ("256 MiB (DRAM)", (4, 32, 4096, HEAD_DIM), "bhtd"),
]
QUICK_SIZES = SIZES[:4]


def _torch_rotate(layout):
    import torch

    def rotate_half(x):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=-1)

    def rotate_every_two(x):
        x1, x2 = x[..., ::2], x[..., 1::2]
        return torch.stack((-x2, x1), dim=-1).flatten(-2)

    rot = rotate_half if layout == "half" else rotate_every_two
    return lambda x, c, s: x * c + rot(x) * s


def _torch():
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(os.cpu_count() or 1)
    return torch


def _case(shape, order, layout, rng):
    t = shape[2] if order == "bhtd" else shape[1]
    x = rng.standard_normal(shape, dtype=np.float32)
    freqs = 10000.0 ** (-np.arange(0, HEAD_DIM, 2, dtype=np.float64) / HEAD_DIM)
    positions = np.arange(t)
    cos, sin = rope.cos_sin(positions, freqs, layout=layout, dtype=np.float32)
    if order == "bthd":
        cos, sin, positions = cos[:, None], sin[:, None], positions[:, None]
    return x, cos, sin, positions, freqs


def _roofline_kernels():
    from roofline import _triad_kernel

    return _triad_kernel()


def _size(nbytes: int) -> str:
    from roofline import _size as size

    return size(nbytes)


def run(quick: bool = False) -> dict:
    """Time every variant at every size, both layouts, forward and backward."""
    from posenc_np.kernels import rope_apply, rope_apply_angles

    torch = _torch()
    rng = np.random.default_rng(0)
    sizes = QUICK_SIZES if quick else SIZES
    rows = []
    for label, shape, order in sizes:
        big = np.prod(shape) * 4 >= (256 << 20)
        repeats = 3 if quick else (5 if big else 11)
        for layout in ("half", "interleaved"):
            x, cos, sin, positions, freqs = _case(shape, order, layout, rng)
            y = np.empty_like(x)
            z = x.copy()  # rotated in place over and over (a rotation keeps it bounded)
            triad, scale = _roofline_kernels()
            for direction in ("forward", "backward"):
                inverse = direction == "backward"
                reference = rope.apply_backward if inverse else rope.apply
                fns = {
                    "numpy": lambda: reference(x, cos, sin, layout=layout, backend="numpy"),
                    "numba": lambda: rope_apply(x, cos, sin, layout=layout, inverse=inverse, out=y),
                    "in-place": lambda: rope_apply(z, cos, sin, layout=layout, inverse=inverse, out=z),
                    "angles": lambda: rope_apply_angles(x, positions, freqs, layout=layout, inverse=inverse, out=y),
                }
                if torch is not None:
                    rotate = _torch_rotate(layout)
                    tx, tc = torch.from_numpy(x), torch.from_numpy(np.ascontiguousarray(cos))
                    ts = torch.from_numpy(np.ascontiguousarray(-sin if inverse else sin))
                    fns["torch"] = lambda: rotate(tx, tc, ts)
                # The roofline is timed in the same rounds, so drift hits it like the variants.
                # Its kernels loop over axis 0, so they get flat views (a 4-D x would make each
                # prange step an array expression with temporaries, far below bandwidth).
                yf, xf, zf = y.reshape(-1), x.reshape(-1), z.reshape(-1)
                fns["_copy"] = lambda: np.copyto(yf, xf)
                fns["_triad"] = lambda: triad(yf, xf, zf, np.float32(0.5))
                fns["_scale"] = lambda: scale(yf, np.float32(-1.0))
                times = interleaved_rounds(fns, repeats)
                copy_gbs = 2 * x.nbytes / times.pop("_copy") / 1e9
                triad_gbs = 3 * x.nbytes / times.pop("_triad") / 1e9
                scale_gbs = 2 * x.nbytes / times.pop("_scale") / 1e9
                roof = max(copy_gbs, triad_gbs)
                roof_inplace = max(roof, scale_gbs)
                table_bytes = cos.nbytes + sin.nbytes
                moved = {
                    "numpy": 2 * x.nbytes + table_bytes,
                    "numba": 2 * x.nbytes + table_bytes,
                    "in-place": 2 * x.nbytes + table_bytes,
                    "angles": 2 * x.nbytes + positions.nbytes + freqs.nbytes,
                    "torch": 2 * x.nbytes + table_bytes,
                }
                variants = {}
                for name, seconds in times.items():
                    gbs = moved[name] / seconds / 1e9
                    variants[name] = {
                        "seconds": seconds,
                        "bytes": int(moved[name]),
                        "GBps": gbs,
                        "pct_roofline": 100.0 * gbs / (roof_inplace if name == "in-place" else roof),
                        "speedup_vs_numpy": times["numpy"] / seconds,
                    }
                rows.append({
                    "size": label, "shape": list(shape), "order": order, "layout": layout,
                    "direction": direction, "dtype": "float32", "x_bytes": int(x.nbytes),
                    "table_bytes": int(table_bytes), "roofline_GBps": roof,
                    "inplace_roofline_GBps": roof_inplace, "copy_GBps": copy_gbs, "triad_GBps": triad_gbs,
                    "scale_inplace_GBps": scale_gbs, "repeats": repeats,
                    "variants": variants,
                })
    result = {"rows": rows, "torch": getattr(torch, "__version__", None), "head_dim": HEAD_DIM,
              "bytes_model": {
                  "numpy/numba/in-place/torch": "read x + cos + sin, write y (= 2|x| + |cos| + |sin|)",
                  "angles": "read x + positions + inv_freq, write y (= 2|x| + |positions| + |inv_freq|)"}}
    result["targets"] = _targets(rows)
    result["markdown"] = _markdown(result)
    return result


def _targets(rows) -> dict:
    """The issue's targets on DRAM-sized arrays: Numba >= 85 % of roofline and >= 8x NumPy."""
    dram = [r for r in rows if r["x_bytes"] >= (64 << 20)]
    if not dram:
        return {}
    out = {}
    for name in ("numba", "in-place", "angles"):
        pct = [r["variants"][name]["pct_roofline"] for r in dram]
        speed = [r["variants"][name]["speedup_vs_numpy"] for r in dram]
        out[name] = {"min_pct_roofline": min(pct), "median_pct_roofline": statistics.median(pct),
                     "min_speedup": min(speed), "median_speedup": statistics.median(speed),
                     "meets_85pct": min(pct) >= 85.0, "meets_8x": min(speed) >= 8.0}
    return out


def _markdown(result) -> str:
    rows = result["rows"]
    has_torch = result["torch"] is not None
    head = ("| x (float32, D=128) | layout | pass | roofline GB/s (in place) | NumPy GB/s "
            "| Numba GB/s (% roof, speed-up) | in place | angles on the fly |" + (" torch eager |" if has_torch else ""))
    sep = "|---|---|---|---:|---:|---:|---:|---:|" + ("---:|" if has_torch else "")
    lines = [head, sep]

    def cell(v):
        return f"{v['GBps']:.1f} ({v['pct_roofline']:.0f} %, {v['speedup_vs_numpy']:.1f}x)"

    for r in rows:
        v = r["variants"]
        line = (f"| {r['size']} | {r['layout']} | {r['direction'][:3]} | "
                f"{r['roofline_GBps']:.1f} ({r['inplace_roofline_GBps']:.1f}) | "
                f"{v['numpy']['GBps']:.2f} | {cell(v['numba'])} | {cell(v['in-place'])} | {cell(v['angles'])} |")
        if has_torch:
            line += f" {cell(v['torch'])} |"
        lines.append(line)
    repeats = sorted({r["repeats"] for r in rows})
    text = [
        "Bytes moved per call: NumPy, Numba, in place and torch read `x`, `cos` and `sin` and write "
        "`y` (`2|x| + |cos| + |sin|`; the `(T, 128)` tables are 1/(B*H) of `x`); angles on the fly "
        "read `x`, the positions and `inv_freq` and write `y`. Speed-up is over the NumPy reference "
        "(`rope.apply(..., backend=\"numpy\")`). Roofline = better of NumPy copy and Numba triad on "
        "arrays the size of `x`, timed in the same rounds as the variants; the in-place column's % is of "
        "the in-place roofline (in brackets: best of copy, triad and an in-place scale). Median of "
        f"{', '.join(map(str, repeats))} interleaved rounds after a warm-up round.",
        "",
        *lines,
    ]
    t = result.get("targets") or {}
    if t:
        text += ["", "Targets on DRAM-sized arrays (>= 64 MiB): Numba >= 85 % of roofline and >= 8x NumPy.", "",
                 "| variant | min % of roofline | median % | min speed-up | median speed-up | 85 % met | 8x met |",
                 "|---|---:|---:|---:|---:|---|---|"]
        for name, v in t.items():
            text.append(f"| {name} | {v['min_pct_roofline']:.0f} | {v['median_pct_roofline']:.0f} | "
                        f"{v['min_speedup']:.1f}x | {v['median_speedup']:.1f}x | "
                        f"{'yes' if v['meets_85pct'] else 'no'} | {'yes' if v['meets_8x'] else 'no'} |")
        text += ["", "Reading the percentages: every figure counts the bytes a kernel must move. An "
                 "out-of-place store also reads its destination line first (write-allocate), so the "
                 "triad really moves 4 bytes per 3 counted and an out-of-place rotation 3 per 2 counted; "
                 "at the triad's true bandwidth an out-of-place rotation therefore tops out near "
                 "(2/3)/(3/4) = 89 % of this roofline. Rows of the same size vary by up to a third "
                 "between rounds (DRAM bandwidth on a shared host), which moves single percentages more "
                 "than any code change would."]
    return "\n".join(text)


# --------------------------------------------------------------------------- auto threshold

def threshold(quick: bool = False) -> dict:
    """Where the kernel beats NumPy, by number of elements of ``x``, both layouts and passes.

    Compared: the two implementations ``rope.apply`` dispatches to after validating its
    arguments, ``rope._rotate_numpy`` and ``rope._rotate_numba`` (``kernels.rope_apply``
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
                    "numpy": lambda: rope._rotate_numpy(x, cos, sin, layout, inverse),
                    "numba": lambda: rope._rotate_numba(x, cos, sin, layout, inverse),
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
    numpy_side = "rope._rotate_numpy"
    lines = ["| elements | " + " | ".join(combos) + " |", "|---:|" + "---:|" * len(combos)]
    for i, e in enumerate(exps):
        cells = []
        for c in combos.values():
            r = c["sizes"][i]
            cells.append(f"{r['numpy_us']:.0f} / {r['numba_us']:.0f} us ({r['speedup']:.1f}x)")
        lines.append(f"| 2^{e} | " + " | ".join(cells) + " |")
    md = (f"NumPy side: `{numpy_side}`; Numba side: `kernels.rope_apply` (allocates its output). "
          f"Shapes (1, 8, T, 128) float32, median of {repeats}. Cells: NumPy / Numba time (speed-up). "
          f"Crossings: " + ", ".join(f"{k}: {v['crossing_elements']}" for k, v in combos.items())
          + f". Recommended `ROPE_NUMBA_MIN_ELEMENTS` = {recommended}.\n\n" + "\n".join(lines))
    return {"combos": combos, "recommended": recommended, "numpy_side": numpy_side, "repeats": repeats,
            "markdown": md}


if __name__ == "__main__":
    import json

    quick = "--quick" in sys.argv
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    out = threshold(quick) if "--threshold" in sys.argv else run(quick)
    print(out["markdown"])
    print(json.dumps({k: v for k, v in out.items() if k != "markdown"}, indent=1)[:4000])
