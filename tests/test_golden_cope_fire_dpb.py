"""The CoPE, FIRE and dynamic-position-bias golden cases: each dtype's tolerance admits the
library computing in that dtype, and float32's rejects a changed convention (CoPE's gate scale of
the other reading, FIRE with twice the threshold and eps 0.5, the raw distance where the log
distance is recorded and the reverse)."""

from __future__ import annotations

import numpy as np
import pytest
from test_golden_tolerances import load, outside  # the suite's reader and the tolerance test, shared

from posenc_np import relative
from posenc_np.golden import catalogue

NAMES = [s.name for s in catalogue.cases(["cope.*", "fire.*", "dpb.*"])]


def evaluate(doc, dtype, **change) -> dict:
    """The library's outputs for the case with every float input in ``dtype`` (and ``change`` applied)."""
    p, x = {**doc["params"], **change}, {k: (v.astype(dtype) if v.dtype.kind == "f" else v)
                                         for k, v in doc["inputs"].items()}
    if doc["encoding"] == "cope.forward":
        kw = {"gate_scale": p["gate_scale"], "mask": x["mask"]}
        return {"positions": relative.cope_positions(x["q"], x["k"], **kw),
                "term": relative.cope_forward(x["q"], x["k"], x["table"], **kw)[0]}
    if doc["encoding"] == "fire.bias":
        return {"bias": relative.fire_bias(x, p["q_len"], p["k_len"], init_L=p["init_L"], eps=p["eps"],
                                           query_offset=p["query_offset"])}
    return {"bias": relative.dpb_bias(x, p["q_len"], p["k_len"], log_distance=p["log_distance"],
                                      query_offset=p["query_offset"])}


@pytest.mark.parametrize("name", NAMES)
def test_each_dtype_admits_the_library_in_that_dtype(name):
    doc = load(name)
    assert set(doc["tolerances"]) == {"float64", "float32"}
    for dtype, tol in doc["tolerances"].items():
        for key, value in evaluate(doc, np.dtype(dtype)).items():
            assert value.dtype == np.dtype(dtype)
            assert outside(value, doc["outputs"][key], tol) == 0, (key, dtype)


@pytest.mark.parametrize("name", NAMES)
def test_float32_tolerance_rejects_the_other_convention(name):
    doc = load(name)
    tol = doc["tolerances"]["float32"]
    if doc["encoding"] == "cope.forward":
        s = doc["params"]["gate_scale"]
        wrong = evaluate(doc, np.float32, gate_scale=1.0 if s != 1.0 else 1 / np.sqrt(doc["inputs"]["q"].shape[-1]))
        assert outside(wrong["term"], doc["outputs"]["term"], tol) > 0
    elif doc["encoding"] == "fire.bias":
        wrong = evaluate(doc, np.float32, init_L=doc["params"]["init_L"] * 2, eps=0.5)
        assert outside(wrong["bias"], doc["outputs"]["bias"], tol) > 0
    else:
        wrong = evaluate(doc, np.float32, log_distance=not doc["params"]["log_distance"])
        assert outside(wrong["bias"], doc["outputs"]["bias"], tol) > 0
