r"""``posenc-np precision``: how accurate is a model's RoPE at long context in its dtype, and what fixes it.

For one configuration (a Hugging Face ``config.json`` or explicit parameters), a model dtype
``D`` and a maximum position, :func:`report` measures every recipe of
:func:`posenc_np.precision.recipe_names` and :func:`write_report` writes ``precision.json``,
``precision.md`` and ``precision.png`` (the plot needs the ``plot`` extra, matplotlib).

Three measurements:

*Error per position band* (exact double-double reference, :func:`posenc_np.precision.exact_tables`):
    at sampled positions (every position below 256, then :data:`PER_BIN` random positions in
    each of 8 log-spaced bins per factor of ten, plus the bin edges), the largest table-entry
    error and the largest logit error (below).
*First position past a threshold* (table entry ``> 1e-3``, logit ``> 1e-2`` by default):
    an exhaustive scan of every position in ``[0, scan_limit)`` against float64 tables
    (``rope.cos_sin(method="direct")``, error below ``1e-9`` there, far below any threshold).
    A recipe whose error cannot reach the threshold by a bound that does not depend on the
    position (exact tables in any dtype, the float32 split, float64) is reported as ``never``
    with that bound; recipes with such a bound above the threshold are scanned over the first
    :data:`STEADY_SCAN` positions only (their error does not grow). If the scan ends without a
    crossing, the first sampled position past the threshold (if any) is reported as an upper bound.
*Relative invariance*: :func:`posenc_np.precision.invariance_breakage` at shifts up to the
    maximum position.

The logit error at query position :math:`p`: for :data:`QK_PAIRS` fixed random standard-normal
``(q, k)`` pairs (seeded) and keys at :math:`p - \Delta`, :math:`\Delta \in` :data:`DELTAS`,
the largest :math:`|\langle \tilde R_p q, \tilde R_{p-\Delta} k\rangle - \langle R_p q, R_{p-\Delta} k\rangle| / \sqrt{d_{head}}`,
vectors stored in ``D`` and rotated in the recipe's arithmetic.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import math
import os
import platform
import secrets
import sys
import time
from collections.abc import Callable
from itertools import pairwise

import numpy as np

from . import _exact
from ._checks import check_choice, check_int, check_real
from ._files import read_bounded
from ._version import __version__
from .precision import (
    DTYPES,
    RECIPES,
    describe,
    entry_error,
    exact_tables,
    invariance_breakage,
    read_hf_config,
    recipe_names,
    rotate_as,
    rotate_exact,
    stored,
)
from .rope_scaling import Scaling, parse_scaling

__all__ = ["DELTAS", "OUTPUTS", "PER_BIN", "QK_PAIRS", "STEADY_SCAN", "report", "run_cli", "write_report"]

#: Key distances of the logit measurement.
DELTAS = (1, 7, 63, 511, 4095)
#: Random (q, k) pairs of the logit measurement.
QK_PAIRS = 2
#: Random positions per log-spaced bin.
PER_BIN = 40
#: Positions scanned for recipes whose error does not grow with the position (exact tables in any dtype).
STEADY_SCAN = 1 << 16
#: Files a report writes, in this order (``precision.json`` last: it is the manifest).
OUTPUTS = ("precision.png", "precision.md", "precision.json")
TOOL = "posenc-np precision"
#: Positions scanned per block (each block builds its tables).
SCAN_BLOCK = 8192
#: Largest earlier output read back (to hash it, or to read the files ``precision.json`` lists).
MAX_OUTPUT_BYTES = 64 << 20
_BAND_EDGES = (0, 4096, 32768, 131072, 1048576, 10 ** 7, 10 ** 8, 10 ** 9, 2 ** 53)
_SHIFTS = (0, 10 ** 3, 10 ** 4, 10 ** 5, 10 ** 6, 9 * 10 ** 6, 10 ** 8, 10 ** 9)
_BITS = {"float64": 53, "float32": 24, "float16": 11, "bfloat16": 8}


# --------------------------------------------------------------------------- positions

def _bins(max_position: int) -> list[tuple[int, int]]:
    """``[lo, hi)`` bins: one per position below 256, then 8 log-spaced bins per factor of ten."""
    top = max_position + 1
    edges = [0] + list(range(1, min(256, top) + 1))
    if top > 256:
        k = math.ceil(8 * math.log10(top / 256))
        edges += sorted({round(256 * 10 ** (j / 8)) for j in range(1, k + 1)} - {256})
        edges = [e for e in edges if e < top] + [top]
    return [(a, b) for a, b in pairwise(edges) if b > a]


def sample_positions(max_position: int, *, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Sorted sample positions in ``[0, max_position]`` and the bin index of each (see :func:`_bins`)."""
    rng = np.random.default_rng(seed)
    pos, which = [], []
    for i, (a, b) in enumerate(_bins(max_position)):
        inner = np.arange(a, b) if b - a <= PER_BIN + 2 else np.unique(
            np.r_[a, b - 1, rng.integers(a, b, PER_BIN)])
        pos.append(inner)
        which.append(np.full(inner.size, i))
    return np.concatenate(pos).astype(np.int64), np.concatenate(which)


# --------------------------------------------------------------------------- shared measurement core

def _qk(setup: Scaling, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed + 1)
    d = setup.rotary_dim
    return rng.standard_normal((QK_PAIRS, d)), rng.standard_normal((QK_PAIRS, d))


def _errors_at(rec, setup, queries, ref, rows, tables, vectors, cache):
    """Per query position: largest table error and largest logit error (keys at ``p - Delta``).

    ``ref``/``tables``: reference ``(c_hi, c_lo, s_hi, s_lo)`` and recipe ``(c, s)`` on a sorted
    position grid; ``rows(p)`` gives grid rows (an index array or a slice) of positions ``p``.
    ``vectors``: ``(q, k)``, each ``(pairs, d)``. ``cache`` holds the exact rotations per dtype.
    """
    c, s = tables
    c_hi, c_lo, s_hi, s_lo = ref
    r = rows(queries)
    table = np.maximum(entry_error(c[r], c_hi[r], c_lo[r]), entry_error(s[r], s_hi[r], s_lo[r])).max(axis=-1,
                                                                                                    initial=0.0)
    if rec.output not in cache:  # the stored vectors at every grid row, rotated exactly
        held = [stored(v, rec.output)[:, None, :] for v in vectors]
        cache[rec.output] = [(st, rotate_exact(st, ref)) for st in held]
    (sq, eq), (sk, ek) = cache[rec.output]
    yq, yk = rotate_as(rec, sq, c, s), rotate_as(rec, sk, c, s)
    logit = np.zeros(queries.size)
    for delta in DELTAS:
        ok = queries >= delta
        if not ok.any():
            continue
        qr, kr = rows(queries[ok]), rows(queries[ok] - delta)
        err = np.abs(np.einsum("prd,prd->pr", yq[:, qr], yk[:, kr]) - np.einsum("prd,prd->pr", eq[:, qr], ek[:, kr]))
        logit[ok] = np.maximum(logit[ok], np.where(np.isnan(err), np.inf, err).max(axis=0))
    return table, logit / math.sqrt(setup.head_dim)


def _with_keys(queries: np.ndarray) -> np.ndarray:
    """Sorted unique positions needed for ``queries`` and their keys at ``p - Delta``."""
    keys = [queries] + [queries[queries >= d] - d for d in DELTAS]
    return np.unique(np.concatenate(keys))


def _direct_reference(setup, positions):
    """float64 tables (``method="direct"``) as a double-double with zero low parts: the scan's reference."""
    from . import rope

    inv, af = setup.frequencies()
    c, s = rope.cos_sin(positions, inv, attention_factor=af, method="direct")
    zero = np.zeros_like(c[..., :inv.size])
    return c[..., :inv.size], zero, s[..., :inv.size], zero


# --------------------------------------------------------------------------- bounds

def _table_bound(name: str, setup: Scaling, max_position: int) -> float | None:
    """A position-independent bound on a table entry's error, or None if the recipe's error grows."""
    inv, af = setup.frequencies()
    amp = max(af, 1.0)
    if name.startswith("exact-"):
        return amp * 2.0 ** (1 - _BITS[RECIPES[name].table_dtype])  # one ulp of values up to af
    if name == "float32-split":
        return amp * 1.5e-7
    if name == "float64-direct":
        return amp * (2.0 ** -52) * (2.0 + max_position * float(np.max(np.abs(inv), initial=0.0)))
    return None


def _logit_bound(name: str, setup: Scaling, max_position: int, q, k) -> float | None:
    """Table bound ``T`` -> logit bound: each rotated pair is within ``sqrt(2) (2T + 3u f)|x|`` of exact."""
    t = _table_bound(name, setup, max_position)
    if t is None:
        return None
    rec = RECIPES[name]
    af = setup.frequencies()[1]
    u = 2.0 ** (1 - min(_BITS[rec.rotation], _BITS[rec.output]))
    eps = math.sqrt(2) * (2 * t + 3 * u * af)
    n = q.shape[1] // 2
    pair_norms = [np.hypot(v[:, :n], v[:, n:]) for v in (q, k)]
    c = float((pair_norms[0] * pair_norms[1]).sum(axis=1).max()) / math.sqrt(setup.head_dim)
    return c * (2 * af * eps + eps * eps)


# --------------------------------------------------------------------------- the report

def _first(errors: np.ndarray, positions: np.ndarray, threshold: float):
    hit = np.flatnonzero(errors > threshold)
    return (int(positions[hit[0]]), float(errors[hit[0]])) if hit.size else None


def _num(v):
    """JSON-safe number: finite floats as they are, anything else as a string."""
    return float(v) if np.isfinite(v) else str(float(v))


def _sampled(setup, names, samples, vectors, tick):
    """Table and logit errors of every recipe at the sample positions (exact reference, computed once)."""
    grid = _with_keys(samples)
    ref = exact_tables(setup, grid)

    def rows(p):
        return np.searchsorted(grid, p)

    out, cache = {}, {}
    for name in names:
        rec = RECIPES[name]
        out[name] = _errors_at(rec, setup, samples, ref, rows, rec.tables(setup, grid), vectors, cache)
        tick(1, stage="samples", recipe=name)
    return out


def _scan(setup, limits, thresholds, vectors, tick, block=SCAN_BLOCK):
    """First position below ``limits[name]`` past each threshold, per recipe:
    ``{name: {"table": (p, err) | None, "logit": ...}}``."""
    first = {name: {"table": None, "logit": None} for name in limits}
    scan_limit = max(limits.values(), default=0)
    for start in range(0, scan_limit, block):
        todo = [n for n in limits if None in first[n].values() and limits[n] > start]
        if not todo:
            tick(-(-(scan_limit - start) // block), stage="scan")
            break
        queries = np.arange(start, min(start + block, scan_limit))  # every todo limit is a multiple of block
        pos = np.arange(max(0, start - max(DELTAS)), queries[-1] + 1)  # contiguous: rows are slices
        ref = _direct_reference(setup, pos)

        def rows(p, lo=int(pos[0])):
            return slice(int(p[0]) - lo, int(p[-1]) - lo + 1)

        cache = {}
        for name in todo:
            rec = RECIPES[name]
            errors = _errors_at(rec, setup, queries, ref, rows, rec.tables(setup, pos), vectors, cache)
            for key, err in zip(("table", "logit"), errors):
                if first[name][key] is None:
                    first[name][key] = _first(err, queries, thresholds[key])
        tick(1, stage="scan", at=int(queries[-1]))
    return first


def _where_first(key, bound, scan_limit, found, sampled_err, samples, thresholds) -> dict:
    """The JSON record of where a recipe first passes the ``key`` threshold (see :func:`report`):
    ``never`` when a position-independent bound proves it, else the scan's (``scan_limit`` positions)
    or the samples' first crossing."""
    if bound is not None and bound <= thresholds[key]:
        return {"position": None, "how": "never", "bound": bound}
    if found is not None:
        return {"position": found[0], "error": _num(found[1]), "how": "scan"}
    late = _first(sampled_err, samples, thresholds[key])
    if late is not None:
        return {"position": late[0], "error": _num(late[1]), "how": "sampled", "scanned_below": scan_limit}
    return {"position": None, "how": "not found", "scanned_below": scan_limit, "samples": int(samples.size)}


def report(setup: Scaling, dtype: str, max_position: int, *, table_threshold: float = 1e-3,
           logit_threshold: float = 1e-2, scan_limit: int = 2 ** 18, seed: int = 0,
           progress: Callable[..., object] | None = None) -> dict:
    """Measure every recipe for ``setup`` in model dtype ``dtype`` up to ``max_position``; a JSON-ready dict.

    ``progress(n, **info)`` is called as work finishes (``n`` of :func:`work_units` units).

    Examples
    --------
    >>> from posenc_np.precision_report import report
    >>> from posenc_np.rope_scaling import parse_scaling
    >>> units = []
    >>> result = report(parse_scaling(8), "float32", 32, scan_limit=0, progress=lambda n, **info: units.append(n))
    >>> [r["name"] for r in result["recipes"]][:3], result["recipes"][0]["first"]["table"]["how"], sum(units)
    (['exact-float64', 'float64-direct', 'exact-float32'], 'never', 14)
    """
    dtype = check_choice(dtype, "dtype", DTYPES)
    max_position = check_int(max_position, "max_position", minimum=1)
    if max_position >= _exact.MAX_POSITION:
        raise ValueError(f"max_position must be < 2**53, got {max_position}")
    thresholds = {"table": check_real(table_threshold, "table_threshold", positive=True),
                  "logit": check_real(logit_threshold, "logit_threshold", positive=True)}
    scan_limit = min(check_int(scan_limit, "scan_limit", minimum=0), max_position + 1)
    tick = progress or (lambda n, **info: None)
    t0 = time.perf_counter()
    names = recipe_names(dtype, setup)
    vectors = _qk(setup, seed)
    samples, which = sample_positions(max_position, seed=seed)
    sampled = _sampled(setup, names, samples, vectors, tick)
    bounds = {name: {"table": _table_bound(name, setup, max_position),
                     "logit": _logit_bound(name, setup, max_position, *vectors)} for name in names}
    # recipes whose error cannot pass a threshold are not scanned; errors that do not grow with the
    # position are scanned over the first STEADY_SCAN positions only
    limits = {n: scan_limit if b["table"] is None else min(scan_limit, STEADY_SCAN)
              for n, b in bounds.items() if any(v is None or v > thresholds[k] for k, v in b.items())}
    first = _scan(setup, limits, thresholds, vectors, tick)
    shifts = [s for s in _SHIFTS if s + 32 <= max_position + 1]
    bins = _bins(max_position)
    bands = [(a, min(b, max_position + 1)) for a, b in pairwise(_BAND_EDGES) if a < max_position]
    bands[-1] = (bands[-1][0], max_position + 1)  # the last band ends at max_position, inclusive
    recipes = []
    for name in names:
        rec = RECIPES[name]
        errors = dict(zip(("table", "logit"), sampled[name]))
        invariance = invariance_breakage(name, setup, shifts, window=32, seed=seed)
        tick(1, stage="invariance", recipe=name)
        recipes.append({
            "name": name, "title": rec.title, "source": rec.source, "table_dtype": rec.table_dtype,
            "rotation_dtype": rec.rotation, "output_dtype": rec.output,
            "bins": [{"lo": a, "hi": b, **{k: _num(e[which == i].max()) for k, e in errors.items()}}
                     for i, (a, b) in enumerate(bins)],
            "bands": [{"lo": a, "hi": b, **{k: _num(e[(samples >= a) & (samples < b)].max()) for k, e in errors.items()}}
                      for a, b in bands],  # never empty: every bin's last position is sampled
            "first": {k: _where_first(k, bounds[name][k], limits.get(name, 0), first.get(name, {}).get(k),
                                      errors[k], samples, thresholds) for k in ("table", "logit")},
            "invariance": [{"shift": s, "logit": _num(v)} for s, v in zip(shifts, invariance)],
        })
    return {"tool": TOOL, "version": __version__, "setup": describe(setup), "dtype": dtype,
            "max_position": max_position, "thresholds": thresholds, "scan_limit": scan_limit, "seed": seed,
            "deltas": list(DELTAS), "qk_pairs": QK_PAIRS, "samples": int(samples.size), "recipes": recipes,
            "meta": {"elapsed_seconds": round(time.perf_counter() - t0, 2), "python": platform.python_version(),
                     "numpy": np.__version__,
                     "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")}}


def work_units(dtype: str, setup: Scaling, max_position: int, scan_limit: int) -> int:
    """How many ``progress`` units :func:`report` reports."""
    n = len(recipe_names(dtype, setup))
    return 2 * n + -(-min(scan_limit, max_position + 1) // 8192)


# --------------------------------------------------------------------------- writing

def _fmt(v) -> str:
    return v if isinstance(v, str) else f"{v:.1e}"


def _where(first: dict) -> str:
    how = first["how"]
    if how == "never":
        return f"never (bound {first['bound']:.1e})"
    if how == "scan":
        return f"**{first['position']:,}** ({_fmt(first['error'])})"
    if how == "sampled":
        return f"<= {first['position']:,} ({_fmt(first['error'])}; none below {first['scanned_below']:,})"
    return f"none (scanned below {first['scanned_below']:,}, {first['samples']} samples above)"


_EDGE_NAMES = {0: "0", 4096: "4k", 32768: "32k", 131072: "128k", 1048576: "1M", 10 ** 7: "10M", 10 ** 8: "100M",
               10 ** 9: "1G", 2 ** 53: "2^53"}


def _band_label(a: int, b: int) -> str:
    def name(v):
        return _EDGE_NAMES.get(v, f"{v:,}")

    return f"[{name(a)}, {name(b)})" if b in _EDGE_NAMES else f"[{name(a)}, {name(b - 1)}]"


def markdown(result: dict) -> str:
    """The human-readable report."""
    st, thr = result["setup"], result["thresholds"]
    recipes = result["recipes"]
    lines = [
        "# RoPE precision report", "",
        f"Configuration: head_dim {st['head_dim']}, rotary dim {st['rotary_dim']}, base {st['base']:g}, "
        f"rope_type `{st['rope_type']}`" + (f", scaling `{json.dumps(st['scaling'], sort_keys=True)}`"
                                           if st["scaling"] else "")
        + f", attention factor {st['attention_factor']:.6g}. Model dtype **{result['dtype']}**, positions up to "
        f"{result['max_position']:,}. Written by {result['tool']} {result['version']} in "
        f"{result['meta']['elapsed_seconds']:.1f} s.", "",
        f"## First position past the thresholds (table entry > {thr['table']:g}, logit > {thr['logit']:g})", "",
        "| recipe | what it is | table entry | logit |", "|---|---|---|---|",
    ]
    for r in recipes:
        lines.append(f"| `{r['name']}` | {r['title']} ({r['source']}) | {_where(r['first']['table'])} | "
                     f"{_where(r['first']['logit'])} |")
    lines += ["", (f"Positions in bold come from an exhaustive scan of every position below "
                   f"{result['scan_limit']:,} (below {min(STEADY_SCAN, result['scan_limit']):,} for recipes whose "
                   "error does not grow with the position), against float64 tables (error < 1e-9 there); `<=` "
                   "marks the first sampled position past the threshold when the scan found none; `never` is a "
                   "bound that holds at every position."), ""]
    for key, what in (("table", "largest table-entry error |table - exact|"),
                      ("logit", f"largest logit error (keys at p - {', '.join(map(str, result['deltas']))})")):
        bands = recipes[0]["bands"]
        lines += [f"## {what.capitalize()} per position band", "",
                  "| recipe | " + " | ".join(_band_label(b["lo"], b["hi"]) for b in bands) + " |",
                  "|---|" + "---:|" * len(bands)]
        for r in recipes:
            lines.append(f"| `{r['name']}` | " + " | ".join(_fmt(b[key]) for b in r["bands"]) + " |")
        lines.append("")
    inv = recipes[0]["invariance"]
    if inv:
        lines += ["## Relative invariance: largest logit change when every position is shifted by s", "",
                  "| recipe | " + " | ".join(f"s = {i['shift']:,}" for i in inv) + " |",
                  "|---|" + "---:|" * len(inv)]
        for r in recipes:
            lines.append(f"| `{r['name']}` | " + " | ".join(_fmt(i["logit"]) for i in r["invariance"]) + " |")
        lines.append("")
    lines += ["## How this was measured", "",
              (f"Errors per band: {result['samples']:,} sampled positions against exact double-double tables. "
               f"Logits: {result['qk_pairs']} fixed random standard-normal (q, k) pairs, stored in the model dtype "
               "and rotated in the recipe's arithmetic; the dot product is float64, so the figures are the "
               "positional error alone. Emulations are bit-faithful in the angle pipeline; float32 pow/cos/sin "
               "are correctly rounded here and may differ from torch's by an ulp. See docs/precision.md."), ""]
    return "\n".join(lines)


def plot(result: dict, path) -> bool:
    """Error versus position (table entries and logits) per recipe; False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        return False
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    tiny = {"table": 1e-18, "logit": 1e-18}
    styles = ["-", "--", ":", "-."]
    for ax, key in zip(axes, ("table", "logit")):
        for j, r in enumerate(result["recipes"]):
            x = [b["hi"] - 1 for b in r["bins"] if b["hi"] > 1]
            y = [b[key] for b in r["bins"] if b["hi"] > 1]
            y = [max(float(v) if not isinstance(v, str) else np.inf, tiny[key]) for v in y]
            ax.loglog(x, np.minimum(y, 1e3), styles[j % len(styles)], label=r["name"], lw=1.3)
        ax.axhline(result["thresholds"][key], color="k", ls="--", lw=0.8)
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel("position")
        ax.set_ylabel("max |table - exact|" if key == "table" else "max |logit - exact|")
        ax.grid(True, which="major", alpha=0.3)
    axes[0].set_title(f"table entries ({result['dtype']} model)")
    axes[1].set_title("attention logits")
    axes[1].legend(fontsize=7, loc="lower right")
    fig.subplots_adjust(left=0.07, right=0.98, bottom=0.12, top=0.92, wspace=0.22)
    fig.savefig(path, dpi=110, format="png")
    plt.close(fig)
    return True


def _sha256(path) -> str:
    return hashlib.sha256(read_bounded(path, MAX_OUTPUT_BYTES, "precision output")).hexdigest()


def _ours(out: str) -> dict:
    """``{file: sha256}`` that an earlier report in ``out`` wrote (its ``precision.json`` lists them)."""
    try:
        data = json.loads(read_bounded(os.path.join(out, "precision.json"), MAX_OUTPUT_BYTES))
        files = data.get("files", {}) if data.get("tool") == TOOL else {}
        return {k: v for k, v in files.items() if isinstance(k, str) and isinstance(v, str)}
    except (ValueError, AttributeError, RecursionError):
        return {}


def _check_clobber(out: str, force: bool) -> None:
    ours = _ours(out)
    for name in OUTPUTS:
        path = os.path.join(out, name)
        if not os.path.exists(path) or force:
            continue
        if name == "precision.json" and ours:
            continue
        if ours.get(name) != _sha256(path):
            raise ValueError(f"{path} exists and was not written by {TOOL} (or was changed since); "
                             "remove it or pass --force")


def _atomic_write(path: str, write) -> bool:
    """``write(tmp_path)`` into a temporary file next to ``path``, then rename it into place.

    If ``write`` returns False (nothing to write), ``path`` is left alone and False returned.
    """
    tmp = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        if write(tmp) is False:
            return False
        os.replace(tmp, path)
        return True
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def write_report(result: dict, out: str | os.PathLike, *, force: bool = False) -> list[str]:
    """Write ``precision.png`` (if matplotlib is installed), ``precision.md`` and ``precision.json`` into
    ``out`` atomically; refuse to overwrite files this tool did not write unless ``force``.
    Returns the paths written.

    Examples
    --------
    >>> import os, tempfile
    >>> from posenc_np.precision_report import report, write_report
    >>> from posenc_np.rope_scaling import parse_scaling
    >>> result = report(parse_scaling(8), "float32", 32, scan_limit=0)
    >>> with tempfile.TemporaryDirectory() as out:      # a precision.md this tool did not write is kept
    ...     with open(os.path.join(out, "precision.md"), "w") as fh:
    ...         _ = fh.write("my notes")
    ...     write_report(result, out)
    Traceback (most recent call last):
    ...
    ValueError: ...precision.md exists and was not written by posenc-np precision (or was changed since); remove it...
    """
    out = os.fspath(out)
    if os.path.exists(out) and not os.path.isdir(out):
        raise ValueError(f"--out {out} exists and is not a directory")
    os.makedirs(out, exist_ok=True)
    _check_clobber(out, force)
    written, files = [], {}
    png = os.path.join(out, "precision.png")
    if _atomic_write(png, lambda tmp: plot(result, tmp)):
        written.append(png)
        files["precision.png"] = _sha256(png)
    md = os.path.join(out, "precision.md")

    def write_md(tmp):
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(markdown(result) + "\n")

    _atomic_write(md, write_md)
    written.append(md)
    files["precision.md"] = _sha256(md)

    def write_json(tmp):
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump({**result, "files": files}, fh, indent=1, sort_keys=True, allow_nan=False)
            fh.write("\n")

    path = os.path.join(out, "precision.json")
    _atomic_write(path, write_json)
    written.append(path)
    return written


# --------------------------------------------------------------------------- command line

def _setup_from_args(args) -> tuple[Scaling, int]:
    try:
        if args.hf_config is not None:
            r = read_hf_config(args.hf_config)
            if args.base is not None or args.scaling is not None:
                raise ValueError("--base/--scaling go with --head-dim, not with --hf-config")
            head_dim, base, scaling, max_pos = r.head_dim, r.base, r.scaling, r.max_position_embeddings
        else:
            scaling = None
            if args.scaling is not None:
                try:
                    scaling = json.loads(args.scaling)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"--scaling is not valid JSON: {exc}") from None
                except RecursionError:
                    raise ValueError("--scaling nests too deeply to parse (a rope dict holds numbers, strings "
                                     "and lists)") from None
            head_dim = check_int(args.head_dim, "--head-dim", minimum=2)
            base = 10000.0 if args.base is None else check_real(args.base, "--base", positive=True)
            max_pos = args.max_position_embeddings
        max_position = args.max_position if args.max_position is not None else max_pos
        if max_position is None:
            raise ValueError("--max-position is needed (the configuration has no max_position_embeddings)")
        setup = parse_scaling(head_dim, base=base, scaling=scaling,
                              max_position_embeddings=args.max_position_embeddings or max_pos, seq_len=max_position)
        setup.exact_frequencies()
        return setup, max_position
    except TypeError as exc:  # a wrongly typed value in the configuration
        raise ValueError(str(exc)) from None


def run_cli(args: argparse.Namespace) -> int:
    """Entry point of ``posenc-np precision``.

    Examples
    --------
    >>> import argparse
    >>> from posenc_np.precision_report import run_cli
    >>> args = argparse.Namespace(hf_config=None, head_dim=8, base=None, scaling=None, max_position_embeddings=None,
    ...                           max_position=None, dtype="float32", out="precision-out")   # as parsed from the CLI
    >>> run_cli(args)                                    # no --max-position, and no max_position_embeddings
    Traceback (most recent call last):
    ...
    ValueError: --max-position is needed (the configuration has no max_position_embeddings)
    """
    setup, max_position = _setup_from_args(args)
    out = os.fspath(args.out)
    if os.path.exists(out) and not os.path.isdir(out):
        raise ValueError(f"--out {out} exists and is not a directory")
    if os.path.isdir(out):
        _check_clobber(out, args.force)  # fail before the work, not after
    total = work_units(args.dtype, setup, max_position, args.scan_limit)
    from .train import Progress

    bar = Progress(total, desc="precision", enabled=not args.no_progress, min_interval=2.0)
    result = report(setup, args.dtype, max_position, table_threshold=args.table_threshold,
                    logit_threshold=args.logit_threshold, scan_limit=args.scan_limit, seed=args.seed,
                    progress=bar.update)
    bar.close()
    written = write_report(result, out, force=args.force)
    if args.no_progress:
        return 0
    say = print
    say(f"precision: {len(result['recipes'])} recipes up to position {max_position:,} in "
        f"{result['meta']['elapsed_seconds']:.1f} s; wrote " + ", ".join(os.path.basename(p) for p in written)
        + ("" if any(p.endswith(".png") for p in written) else " (matplotlib not installed: no plot)"),
        file=sys.stderr)
    for r in result["recipes"]:
        say(f"  {r['name']:<24} table > {result['thresholds']['table']:g}: {_where(r['first']['table'])};  "
            f"logit > {result['thresholds']['logit']:g}: {_where(r['first']['logit'])}", file=sys.stderr)
    return 0
