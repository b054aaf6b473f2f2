r"""Golden cases for the absolute encodings (sinusoidal, t2t timing signal, learned table).

Error models (:mod:`.tolerance`), in units of :math:`u = 2^{-53}` for the float64 frequencies:

* sinusoidal: :math:`w_i = b^{-2i/d}` carries :math:`\delta x_i \ln b + 3` (the exponent
  :math:`x_i = 2i/d` rounded when ``d`` is not a power of two, ``pow`` one ulp, a reciprocal or
  negation); then :func:`.tolerance.angle_tables`.
* timing signal: :math:`w_i = t_{min} e^{-i \ln(t_{max}/t_{min})/(n-1)}` carries
  :math:`4 \ln(t_{max}/t_{min}) + 3` (the ``exp`` argument's three roundings and the log's ulp,
  amplified by the argument's size, then ``exp`` and the product); positions ``p + start`` are
  exact.
* learned: the lookup copies (:func:`.tolerance.rounded` with no float64 error); the
  gradient sums at most ``c`` cotangent rows per table row (:func:`.tolerance.dot`).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from .. import absolute
from . import oracle_absolute as oracle
from . import tolerance as tol
from .spec import LONG_POSITIONS, CaseSpec, GoldenEncoding, conventions, exact_normals


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
    GoldenEncoding("sinusoidal", oracle.sinusoidal, _sinusoidal),
    GoldenEncoding("timing_signal", oracle.timing_signal, _timing),
    GoldenEncoding("learned", oracle.learned, _learned),
]

TABLE_MODEL = ("angle_tables: float64 frequencies (cases_absolute docstring), float64 p*w, libm sin/cos; "
               "other dtypes: that rounded once")
REFERENCE = {
    "interleaved": "PyTorch 'Language Modeling with nn.Transformer' PositionalEncoding (pe[:, 0::2] = sin, "
                   "pe[:, 1::2] = cos); transformers create_sinusoidal_embeddings (DistilBERT)",
    "concat": "Transformer-XL PositionalEmbedding [sin | cos] (kimiyoung/transformer-xl, transformers TransfoXL)",
}


def _sinusoidal_tol(dim: int, base: float, positions) -> dict:
    x = np.arange(0, dim, 2) / dim
    units = (0.0 if dim & (dim - 1) == 0 else 1.0) * x * math.log(base) + 3
    return tol.angle_tables(max_position=float(np.max(np.abs(positions))), inv_freq=base ** -x, freq_units=units)


def _sinusoidal_case(name, dim, base, layout, positions, description) -> CaseSpec:
    return CaseSpec(
        name=name, encoding="sinusoidal", params={"dim": dim, "base": base, "layout": layout},
        conventions=conventions(layout=layout, semantics="Vaswani et al. 2017, sec. 3.5"),
        inputs={"positions": positions}, tolerances=_sinusoidal_tol(dim, base, positions), error_model=TABLE_MODEL,
        reference_call=REFERENCE[layout], description=description)


def cases() -> list[CaseSpec]:
    out = []
    short = np.concatenate([np.arange(16), [100, 1000, 4095, -3]]).astype(np.int64)
    frac = np.array([0.0, 0.5, 1.25, 7.75, 1e4 + 0.5, 65535.0])
    long = np.array(LONG_POSITIONS, dtype=np.int64)
    for layout in absolute.SINUSOIDAL_LAYOUTS:
        for dim, pos, tag in ((8, short, "int"), (64, frac, "float")):
            out.append(_sinusoidal_case(f"sinusoidal.{layout}.d{dim}.{tag}", dim, 10000.0, layout, pos,
                                        f"sinusoidal encoding, {layout} layout, d={dim}, {tag} positions"))
        out.append(_sinusoidal_case(f"sinusoidal.{layout}.d64.long", 64, 10000.0, layout, long,
                                    f"sinusoidal encoding, {layout} layout, d=64, {long.size} positions up to 10^7 "
                                    "(4k/8k/32k/128k/1M/10M and neighbours)"))
    out.append(_sinusoidal_case("sinusoidal.interleaved.d6.base100.grid", 6, 100.0, "interleaved",
                                np.arange(12, dtype=np.int64).reshape(3, 4),
                                "non-default base and a 2-D positions array: output shape positions.shape + (dim,)"))
    for dim, start in ((8, 0), (7, 3)):
        pos = np.array([0, 1, 2, 10, 100, 2047], dtype=np.int64)
        n = dim // 2
        w = 1.0 * np.exp(-np.arange(n) * math.log(1.0e4) / max(n - 1, 1))
        units = np.full(n, 4 * math.log(1.0e4) + 3)
        out.append(CaseSpec(
            name=f"timing_signal.d{dim}.start{start}", encoding="timing_signal",
            params={"dim": dim, "min_timescale": 1.0, "max_timescale": 1.0e4, "start_index": start},
            conventions=conventions(layout="concat", semantics="tensor2tensor get_timing_signal_1d"),
            inputs={"positions": pos},
            tolerances=tol.angle_tables(max_position=float(pos.max() + start), inv_freq=w, freq_units=units),
            error_model=TABLE_MODEL.replace("cases_absolute docstring", "timing signal, cases_absolute docstring"),
            reference_call="tensor2tensor.layers.common_attention.get_timing_signal_1d(length, channels, "
                           "min_timescale, max_timescale, start_index)",
            description=f"t2t timing signal, d={dim} (odd widths end in a zero channel), start_index={start}"))
    rng = np.random.default_rng(20261130)
    pos = np.array([[0, 3, 3, 5], [5, 5, 1, 0]], dtype=np.int64)
    weight, dout = exact_normals(rng, (6, 3)), exact_normals(rng, (2, 4, 3))
    repeats = int(np.bincount(pos.ravel()).max())
    out.append(CaseSpec(
        name="learned.lookup_and_scatter_add", encoding="learned", params={"num_positions": 6, "dim": 3},
        conventions=conventions(semantics="BERT/GPT-2 learned table; gradient is a scatter-add"),
        inputs={"weight": weight, "positions": pos, "dout": dout},
        tolerances=tol.widest(tol.rounded(), tol.dot(repeats, repeats * float(np.abs(dout).max()),
                                                     rounded_factors=0)),
        error_model=f"rounded (the lookup copies); dot: sums of at most {repeats} cotangent rows per table row",
        reference_call="torch.nn.Embedding(num_positions, dim)(positions) and its autograd weight gradient",
        description="lookup y = W[p] and dW by scatter-add; repeated positions (3, 5) accumulate, row 2 and 4 get 0",
    ))
    return out


def v3_changes() -> tuple[dict, list]:
    """Version 3 (catalogue docstring): the sinusoid refuses odd widths (``dim`` must be even; a case cannot
    hold one), so its boundary is width 10, whose 5 frequencies are an odd count (the concat split at 5);
    the reference calls stop naming transformers' TransfoXL (removed in transformers 5)."""
    pos = np.concatenate([np.arange(8), [100, 1000, 4095, -3]]).astype(np.int64)
    new = [_sinusoidal_case(f"sinusoidal.{layout}.d10.int", 10, 10000.0, layout, pos,
                            f"sinusoidal encoding, {layout} layout, d=10: an odd number (5) of frequencies; odd "
                            "widths are refused") for layout in absolute.SINUSOIDAL_LAYOUTS]
    ref = "Transformer-XL PositionalEmbedding [sin | cos] (kimiyoung/transformer-xl pytorch/mem_transformer.py)"
    new = [replace(s, reference_call=ref) if s.reference_call == REFERENCE["concat"] else s for s in new]
    return {s.name: {"reference_call": ref} for s in cases() if s.reference_call == REFERENCE["concat"]}, new
