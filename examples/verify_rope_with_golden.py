"""Verify your own RoPE with the golden vectors, using nothing but json and numpy.

A walkthrough in cells (``# %%``, runnable as a script or cell by cell in an editor). It plays
the part of the author of another implementation: the RoPE below is written from the paper in
the style of common third-party code (Hugging Face's ``rotate_half`` and Meta's complex
multiplication), does not import posenc_np, and is checked against the committed golden
suite (the newest ``vectors/v<N>/``) by reading the JSON files directly, exactly as a C or
Rust test suite would (the format is documented in ``docs/golden-format.md``).

It then shows what the suite catches: the same code with a classic bug (angles computed in
float32, as with float32 position tensors) fails the cases whose angles are large.

Run: ``python examples/verify_rope_with_golden.py`` from the repository root (under a second).
Exit status 0 when the correct implementation passes every case it supports and the buggy
one is caught.
"""

# %% [markdown]
# ## 1. An implementation under test (no posenc_np inside)

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np


def my_inv_freq(dim, base=10000.0):
    # omega_i = base^(-2i/d), i = 0 .. d/2 - 1   (RoFormer eq. 15)
    return 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)


def my_cos_sin(positions, dim, base=10000.0, layout="half", angle_dtype=np.float64):
    angles = np.asarray(positions, dtype=angle_dtype)[..., None] * my_inv_freq(dim, base).astype(angle_dtype)
    angles = angles.astype(np.float64)
    if layout == "half":                       # [w0 .. w_{n-1} | w0 .. w_{n-1}]
        angles = np.concatenate([angles, angles], axis=-1)
    else:                                      # [w0, w0, w1, w1, ...]
        angles = np.repeat(angles, 2, axis=-1)
    return np.cos(angles), np.sin(angles)


def rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def my_rope(x, positions, rotary_dim, base=10000.0, layout="half", inverse=False, angle_dtype=np.float64):
    """Rotate the first ``rotary_dim`` channels of x (positions along axis -2); ``inverse`` is R^T.

    Positions ``(seq,)``, or ``(batch, seq)`` shared by the heads of x ``(batch, heads, seq, head_dim)``."""
    cos, sin = my_cos_sin(positions, rotary_dim, base, layout, angle_dtype)
    if cos.ndim == x.ndim - 1:                 # per-batch positions: broadcast over the heads axis
        cos, sin = cos[..., None, :, :], sin[..., None, :, :]
    if inverse:
        sin = -sin
    rot, rest = x[..., :rotary_dim], x[..., rotary_dim:]
    if layout == "half":                       # Hugging Face: x * cos + rotate_half(x) * sin
        out = rot * cos + rotate_half(rot) * sin
    else:                                      # Meta: pairs (2i, 2i+1) as complex numbers times e^{i t}
        z = (rot[..., 0::2] + 1j * rot[..., 1::2]) * (cos[..., 0::2] + 1j * sin[..., 0::2])
        out = np.stack([z.real, z.imag], axis=-1).reshape(rot.shape)
    return np.concatenate([out, rest], axis=-1)


# %% [markdown]
# ## 2. Find and read the suite: JSON and NumPy only

def newest_suite(root: Path) -> Path:
    versions = sorted((int(d.name[1:]), d) for d in (root / "vectors").glob("v*")
                      if d.name[1:].isdigit() and (d / "index.json").is_file())
    if not versions:
        raise SystemExit(f"no golden suite under {root / 'vectors'}")
    return versions[-1][1]


def read_array(obj):
    # {"dtype": "float64" | "int64" | "bool", "shape": [...], "data": [... C order ...]}
    return np.array(obj["data"], dtype=obj["dtype"]).reshape(obj["shape"])


def read_case(data: bytes) -> dict:
    doc = json.loads(data)
    if doc.get("schema") != "posenc-np-golden":
        raise ValueError(f"{doc.get('name')}: not a posenc-np golden case")
    for group in ("inputs", "outputs"):
        doc[group] = {k: read_array(v) for k, v in doc[group].items()}
    return doc


def within_tolerance(actual, expected, tol) -> tuple[bool, float]:
    # the suite's rule: |a - e| <= abs + rel * |e| for every element
    err = np.abs(actual - expected)
    return bool(np.all(err <= tol["abs"] + tol["rel"] * np.abs(expected))), float(err.max(initial=0.0))


# %% [markdown]
# ## 3. Run every case this implementation supports
# It implements unscaled RoPE (``scaling`` null or plain ``default``): inverse frequencies, cos/sin tables, and the
# rotation with its backward (dx = R^T dy). Scaled cases (YaRN, LLaMA-3, ...) are listed as
# not supported rather than silently skipped.

def evaluate(doc, angle_dtype=np.float64) -> dict:
    p, inp = doc["params"], doc["inputs"]
    if doc["encoding"] == "rope.inv_freq":
        return {"inv_freq": my_inv_freq(p["rotary_dim"], p["base"]), "attention_factor": np.array([1.0])}
    if doc["encoding"] == "rope.cos_sin":
        cos, sin = my_cos_sin(inp["positions"], p["rotary_dim"], p["base"], p["layout"], angle_dtype)
        return {"cos": cos, "sin": sin}
    x, dy, pos = inp["x"], inp["dy"], inp["positions"]
    kw = {"rotary_dim": p["rotary_dim"], "base": p["base"], "layout": p["layout"], "angle_dtype": angle_dtype}
    return {"y": my_rope(x, pos, **kw), "dx": my_rope(dy, pos, inverse=True, **kw)}


def supported(doc) -> bool:
    scaling = doc["params"].get("scaling") or {}
    plain = set(scaling) <= {"rope_type"} and scaling.get("rope_type", "default") == "default"
    return doc["encoding"] in ("rope.inv_freq", "rope.cos_sin", "rope.apply") and plain


def run(suite: Path, angle_dtype=np.float64, label="", show_unsupported=True) -> tuple[int, int]:
    index = json.loads((suite / "index.json").read_text())
    passed = failed = 0
    print(f"\n{label} against {suite}:")
    for entry in index["cases"]:
        if not entry["name"].startswith("rope."):
            continue
        # index.json is the manifest: each file's SHA-256 over its exact bytes
        json_file = next(f for f in entry["files"] if f["path"].endswith(".json"))
        data = (suite / json_file["path"]).read_bytes()
        if hashlib.sha256(data).hexdigest() != json_file["sha256"]:
            raise SystemExit(f"{json_file['path']}: SHA-256 differs from index.json (damaged download?)")
        doc = read_case(data)
        if not supported(doc):
            scaling = doc["params"].get("scaling")
            why = f"scaling {scaling}" if scaling else f"encoding {doc['encoding']}"
            if show_unsupported:
                print(f"  n/a   {doc['name']}  (not implemented here: {why})")
            continue
        actual = evaluate(doc, angle_dtype)
        tol = doc["tolerances"]["float64"]  # this implementation computes in float64
        results = [within_tolerance(actual[k], doc["outputs"][k], tol) for k in doc["outputs"]]
        ok = all(r[0] for r in results)
        passed, failed = passed + ok, failed + (not ok)
        worst = max(r[1] for r in results)
        print(f"  {'PASS' if ok else 'FAIL'}  {doc['name']}  max |error| {worst:.2e}  "
              f"(tolerance abs {tol['abs']:.1e}, rel {tol['rel']:.1e}; "
              f"layout {doc['conventions']['layout']})")
    print(f"{label}: {passed} passed, {failed} failed")
    return passed, failed


# %% [markdown]
# ## 4. The correct implementation, then a classic bug

def main() -> int:
    suite = newest_suite(Path(__file__).resolve().parents[1])
    good_pass, good_fail = run(suite, np.float64, "float64 angles (correct)")
    _, bug_fail = run(suite, np.float32, "float32 angles (bug)", show_unsupported=False)
    ok = good_fail == 0 and good_pass > 0 and bug_fail > 0
    print("\nverdict: " + ("the implementation matches the golden suite, and the float32-angle bug is caught"
                           if ok else "UNEXPECTED: see the table above"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
