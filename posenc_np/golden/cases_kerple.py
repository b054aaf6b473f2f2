r"""Golden cases for the modern logit biases and p-RoPE: KERPLE (both variants, given parameters),
Sandwich (parameter-free) and p-RoPE's frequencies and tables for several fractions.

Error models (:mod:`.tolerance`; :math:`u = 2^{-53}`; parameters and positions are exact inputs):

* KERPLE log: ``r2 * d`` (1 rounding; ``log1p`` damps a relative error of its argument by
  :math:`x/((1+x)\log(1+x)) \le 1`), ``log1p`` (1 ulp, :math:`2u`), the product by ``r1``:
  :math:`6u` in float64. In a dtype ``t``: ``r1``, ``r2`` rounded to ``t`` and the three
  operations: :func:`.tolerance.rounded` with ``ops = 5``.
* KERPLE power: ``pow`` (1 ulp) and the product: :math:`6u`; in ``t`` rounding ``r2`` changes
  :math:`d^{r_2}` by a factor :math:`d^{r_2 \delta}`, i.e. :math:`r_2 \ln d` roundings:
  ``ops = 4 + ceil(max r2 ln max d)``.
* Sandwich: each frequency :math:`10000^{-2k/d'}` within :math:`4u`, the angle :math:`r\omega` one
  more, so each cosine is off by at most :math:`6u|r|\omega + 2u`; the sum of :math:`d'/2` terms
  adds :math:`\gamma_{d'/2+1} d'`, all divided by :math:`\rho_{min}`: an *absolute* bound (the
  subtraction of :math:`d'/2` cancels), then rounded once to ``t`` (computed in float64).
* p-RoPE: frequencies and tables as the RoPE cases (``cases_rope``: ``FREQ_MODEL`` and
  :func:`.tolerance.angle_tables`); zero frequencies are exact.
"""

from __future__ import annotations

import math

import numpy as np

from .. import relative, rope
from . import oracle_kerple as oracle
from . import tolerance as tol
from .cases_rope import (FREQ_MODEL, HF_COS_SIN, META_CIS, TABLE_MODEL, frequency_error_units, rope_conventions,
                         rope_params, table_tolerances)
from .spec import CaseSpec, GoldenEncoding, conventions

U = tol.UNIT_ROUNDOFF["float64"]
LAYOUT = "(heads, q_len, k_len); query i at position i + k_len - q_len, key j at j"
AFTER_SCALE = "bias added after 1/sqrt(d)"


def _kerple(params, inputs):
    return {"bias": relative.kerple_bias(inputs["r1"], inputs["r2"], params["q_len"], params["k_len"],
                                         variant=params["variant"])}


def _sandwich(params, inputs):
    return {"bias": relative.sandwich_bias(params["num_heads"], params["q_len"], params["k_len"], dim=params["dim"],
                                           compression=params["compression"])}


def _p_rope(params, inputs):
    inv = rope.p_rope_frequencies(rope.inv_freq(params["rotary_dim"], base=params["base"])[0], params["p"])
    cos, sin = rope.cos_sin(inputs["positions"], inv, layout=params["layout"])
    return {"inv_freq": inv, "cos": cos, "sin": sin}


ENCODINGS = [
    GoldenEncoding("kerple.bias", oracle.kerple_bias, _kerple),
    GoldenEncoding("sandwich.bias", oracle.sandwich_bias, _sandwich),
    GoldenEncoding("rope.p_rope", oracle.p_rope, _p_rope),
]


def kerple_case(variant, r1, r2, q_len, k_len, why) -> CaseSpec:
    r1, r2 = np.asarray(r1, dtype=np.float64), np.asarray(r2, dtype=np.float64)
    d_max = max(q_len, k_len, 2) - 1  # the largest |m - n| of the grid
    if variant == "log":
        largest, ops = float(np.max(r1) * math.log1p(np.max(r2) * d_max)), 5
        formula = "-r1 log(1 + r2 |m - n|)"
    else:
        largest, ops = float(np.max(r1) * d_max ** np.max(r2)), 4 + math.ceil(float(np.max(r2)) * math.log(d_max))
        formula = "-r1 |m - n|^r2"
    heads = len(r1)
    return CaseSpec(
        name=f"kerple.bias.{variant}.h{heads}_q{q_len}_k{k_len}", encoding="kerple.bias",
        params={"variant": variant, "q_len": q_len, "k_len": k_len},
        conventions=conventions(layout=LAYOUT, sign=f"{formula} <= 0, distance |m - n| (the reference code uses "
                                                    "tril(m - n): equal on the keys a causal mask keeps)",
                                scale_placement=AFTER_SCALE,
                                semantics="Chi et al. 2022 (KERPLE) eq. 2; parameters given (the layer clips them "
                                          "to r >= 0.01, power r2 <= 2)"),
        inputs={"r1": r1, "r2": r2},
        tolerances=tol.rounded(rel64=6 * U, ops=ops, magnitude=largest),
        error_model=f"rounded: {formula} in float64 within 6u; in a dtype r1, r2 and {ops - 2} operations round",
        reference_call=f"chijames/KERPLE (gpt-neox) ParallelKerple{'Log' if variant == 'log' else 'Power'}.forward "
                       "(its bias term, with bias_p/bias_a set to r1/r2 as the conventions say)",
        description=f"KERPLE {variant} bias, {heads} heads, q_len {q_len}, k_len {k_len}: {why}")


def sandwich_case(h, q_len, k_len, dim, compression, why) -> CaseSpec:
    freqs = 10000.0 ** (-2.0 * np.arange(1, dim // 2 + 1) / dim)
    r_max = max(k_len - 1, q_len - 1, 0)
    rho_min = 8.0 / h if compression == "alibi" else 1.0
    abs64 = (6 * U * r_max * float(freqs.sum()) + 2 * U * dim / 2 + tol.gamma(dim // 2 + 1, U) * dim) / rho_min
    largest = (dim / rho_min) if r_max else 1.0
    return CaseSpec(
        name=f"sandwich.bias.{compression}.h{h}_q{q_len}_k{k_len}_d{dim}", encoding="sandwich.bias",
        params={"num_heads": h, "q_len": q_len, "k_len": k_len, "dim": dim, "compression": compression},
        conventions=conventions(layout=LAYOUT, sign="(sum_k cos((m - n) w_k) - d'/2) / rho_h <= 0, 0 on the diagonal",
                                scale_placement=AFTER_SCALE,
                                semantics="Chi et al. 2023 (Sandwich): w_k = 10000^(-2k/d'), k = 1..d'/2; rho_h = "
                                          + ("8h/H" if compression == "alibi" else "1")),
        inputs={},
        tolerances=tol.rounded(abs64=abs64, rel64=2 * U, ops=1, magnitude=largest),
        error_model="rounded: absolute float64 bound (frequencies 4u, angles 1u, cos 1 ulp, a sum of d'/2 terms, "
                    "cancellation against d'/2), divided by rho; rounded once to the dtype",
        reference_call="n/a (NeMo sandwich_pos_bias sums (m - n) w_k without the cosine: a different bias)",
        description=f"Sandwich bias, {h} heads, q_len {q_len}, k_len {k_len}, d' = {dim}, compression "
                    f"{compression}: {why}")


def p_rope_case(d, p, layout, positions, why) -> CaseSpec:
    params = {**rope_params(d, 10000.0, layout=layout), "p": p}
    w, k = frequency_error_units(params)
    inv_tol = tol.rounded(rel64=max(float(np.max(k)), 12.0) * U, dtypes=("float64", "float32"))
    tables = table_tolerances(params, positions, amplitude=1.0)
    tolerance = {t: {"abs": max(tables[t]["abs"], inv_tol.get(t, tables[t])["abs"]),
                     "rel": max(tables[t]["rel"], inv_tol.get(t, tables[t])["rel"])} for t in tables}
    kept = int(p * d // 2)
    return CaseSpec(
        name=f"rope.p_rope.{layout}.d{d}_p{p:g}".replace("p0.", "p0_"),
        encoding="rope.p_rope", params=params,
        conventions=rope_conventions(layout, f"Barbero et al. 2024 (p-RoPE): the first floor(p d/2) = {kept} of "
                                             f"{d // 2} frequencies (the highest) kept, the rest 0 (identity "
                                             "rotation); floor of the float64 p times d/2, as Gemma apply_rope "
                                             "int(p * d // 2)"),
        inputs={"positions": positions}, tolerances=tolerance,
        error_model=f"{TABLE_MODEL}; inv_freq: {FREQ_MODEL}",
        reference_call="gemma apply_rope(inputs, positions, base_frequency, rope_proportion=p) / transformers "
                       "ROPE_INIT_FUNCTIONS['proportional'] (partial_rotary_factor=p); tables as "
                       + (HF_COS_SIN if layout == "half" else META_CIS),
        description=f"p-RoPE, head dim {d}, p = {p}: {kept} rotating pairs; {why}")


def cases() -> list[CaseSpec]:
    out = [
        kerple_case("log", [1.5, 0.2, 0.01], [0.8, 0.05, 1.0], 5, 5, "square, a clip-boundary r1 = 0.01"),
        kerple_case("log", [0.7, 1.9], [0.3, 2.5], 2, 7, "decoding block: the last 2 of 7 positions"),
        kerple_case("power", [0.5, 1.2, 0.01], [1.0, 0.5, 2.0], 5, 5, "r2 = 1 is ALiBi, r2 = 2 the upper bound"),
        kerple_case("power", [0.3, 0.9], [0.01, 1.7], 1, 9, "one-token decode step, an exponent at the clip bound"),
        sandwich_case(4, 6, 6, 128, "alibi", "the paper's d' = 128, 4 heads (ratios 2, 4, 6, 8)"),
        sandwich_case(3, 2, 9, 16, "alibi", "decoding block, 3 heads (ratios 8/3, 16/3, 8)"),
        sandwich_case(2, 5, 5, 8, "none", "no compression: the inner product minus d'/2"),
    ]
    positions = np.array([0, 1, 5, 17, 100])
    for d, p, layout, why in ((16, 0.25, "half", "p d/2 = 2 exactly"),
                              (16, 0.3, "half", "p d/2 = 2.4: floor keeps 2"),
                              (10, 0.5, "interleaved", "p d/2 = 2.5: floor keeps 2 of 5"),
                              (64, 0.75, "half", "24 of 32 pairs"),
                              (200, 0.29, "half", "0.29 is 0.28999... in float64: 28 pairs, not 29"),
                              (8, 0.0, "half", "p = 0: no rotation (NoPE)")):
        out.append(p_rope_case(d, p, layout, positions, why))
    return out


def v3_changes() -> tuple[dict, list]:
    """Version 3 (catalogue docstring): ``kerple.bias.log.h3_q5_k5``'s float64 bound admits the reference
    code's ``-p * log(1 + a * d)``: rounding ``1 + x`` is a relative error ``u`` of ``1 + x`` that the log
    turns into ``u / log(1 + x)`` of the result (20.5u at ``x = 0.05``), plus 3u (``log``, the products); new
    cases give the golden audit's KERPLE ``variant``, Sandwich ``compression`` and p-RoPE ``layout``/``p`` rows
    a second catching case."""
    spec = next(s for s in cases() if s.name == "kerple.bias.log.h3_q5_k5")
    units = 3 + 1 / math.log1p(float(np.min(spec.inputs["r2"])))
    largest = float(np.max(spec.inputs["r1"]) * math.log1p(np.max(spec.inputs["r2"]) * 4))
    return {spec.name: {
        "tolerances": tol.rounded(rel64=units * U, ops=5, magnitude=largest),
        "error_model": f"rounded: -r1 log(1 + r2 |m - n|) in float64 within (3 + 1/log(1 + min r2)) u = {units:.1f}u "
                       "(log of the rounded 1 + x; log1p gives 6u); in a dtype r1, r2 and 3 operations round"}}, [
        # second cases for the audit's variant, compression and p-RoPE rows (docs/golden-format.md, "The suite's teeth")
        kerple_case("log", [0.6, 1.1], [0.5, 1.5], 3, 4, "r2 <= 2, so the power variant is also defined here"),
        sandwich_case(3, 2, 6, 16, "none", "decoding block without compression"),
        p_rope_case(100, 0.58, "interleaved", np.array([0, 1, 5, 17, 100]),
                    "0.58 is 0.57999... in float64: p d/2 = 28.999..., floor keeps 28 pairs, not 29")]
