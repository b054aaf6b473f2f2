"""Golden cases for the absolute encodings (sinusoidal, t2t timing signal, learned table)."""

from __future__ import annotations

import numpy as np

from .. import absolute
from . import oracle_absolute as oracle
from .spec import CaseSpec, Encoding, conventions, tolerance


def _sinusoidal(params, inputs):
    return {"encoding": absolute.sinusoidal(inputs["positions"], params["dim"], base=params["base"],
                                            layout=params["layout"])}


def _timing(params, inputs):
    return {"encoding": absolute.timing_signal(
        inputs["positions"], params["dim"], min_timescale=params["min_timescale"],
        max_timescale=params["max_timescale"], start_index=params["start_index"])}


def _learned(params, inputs):
    emb = absolute.LearnedPositionalEmbedding(*inputs["weight"].shape)
    emb.params["weight"] = inputs["weight"]
    y = emb.forward(inputs["positions"])
    emb.backward(inputs["dout"])
    return {"output": y, "dweight": emb.grads["weight"]}


ENCODINGS = [
    Encoding("sinusoidal", oracle.sinusoidal, _sinusoidal),
    Encoding("timing_signal", oracle.timing_signal, _timing),
    Encoding("learned", oracle.learned, _learned),
]


def _angle_tolerance(max_angle: float) -> dict:
    # float64 angle p*w carries ~2 ulp of |angle|; sin/cos add < 1 ulp of the result.
    return tolerance(abs_eps=4 * max_angle + 4, rel_eps=0)


def cases() -> list[CaseSpec]:
    out = []
    short = np.concatenate([np.arange(16), [100, 1000, 4095, -3]]).astype(np.int64)
    frac = np.array([0.0, 0.5, 1.25, 7.75, 1e4 + 0.5, 65535.0])
    for layout in absolute.SINUSOIDAL_LAYOUTS:
        for dim, pos, tag in ((8, short, "int"), (64, frac, "float")):
            out.append(CaseSpec(
                name=f"sinusoidal.{layout}.d{dim}.{tag}",
                encoding="sinusoidal",
                params={"dim": dim, "base": 10000.0, "layout": layout},
                conventions=conventions(layout=layout, semantics="Vaswani et al. 2017, sec. 3.5"),
                inputs={"positions": pos},
                tolerance=_angle_tolerance(float(np.max(np.abs(pos)))),
                description=f"sinusoidal encoding, {layout} layout, d={dim}, {tag} positions",
            ))
    out.append(CaseSpec(
        name="sinusoidal.interleaved.d6.base100.grid",
        encoding="sinusoidal",
        params={"dim": 6, "base": 100.0, "layout": "interleaved"},
        conventions=conventions(layout="interleaved", semantics="Vaswani et al. 2017, sec. 3.5"),
        inputs={"positions": np.arange(12, dtype=np.int64).reshape(3, 4)},
        tolerance=_angle_tolerance(11.0),
        description="non-default base and a 2-D positions array: output shape positions.shape + (dim,)",
    ))
    for dim, start in ((8, 0), (7, 3)):
        pos = np.array([0, 1, 2, 10, 100, 2047], dtype=np.int64)
        out.append(CaseSpec(
            name=f"timing_signal.d{dim}.start{start}",
            encoding="timing_signal",
            params={"dim": dim, "min_timescale": 1.0, "max_timescale": 1.0e4, "start_index": start},
            conventions=conventions(layout="concat", semantics="tensor2tensor get_timing_signal_1d"),
            inputs={"positions": pos},
            tolerance=_angle_tolerance(float(pos.max() + start)),
            description=f"t2t timing signal, d={dim} (odd widths end in a zero channel), start_index={start}",
        ))
    rng = np.random.default_rng(20261130)
    pos = np.array([[0, 3, 3, 5], [5, 5, 1, 0]], dtype=np.int64)
    out.append(CaseSpec(
        name="learned.lookup_and_scatter_add",
        encoding="learned",
        params={"num_positions": 6, "dim": 3},
        conventions=conventions(semantics="BERT/GPT-2 learned table; gradient is a scatter-add"),
        inputs={"weight": rng.standard_normal((6, 3)), "positions": pos, "dout": rng.standard_normal((2, 4, 3))},
        tolerance=tolerance(abs_eps=8, rel_eps=4),
        description="lookup y = W[p] and dW by scatter-add; repeated positions (3, 5) accumulate, row 2 and 4 get 0",
    ))
    return out
