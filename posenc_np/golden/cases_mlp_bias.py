r"""Golden cases for the MLP position biases, FIRE and the dynamic position bias: the MLP input
(normalised or log-scaled distance) and the per-head bias for given weights.

Error model (:mod:`.tolerance`; weights are :func:`.spec.exact_normals`, exact in every dtype; the
distances are exact integers). The MLP input carries :math:`\delta_x` (FIRE: two ``log1p`` of one
product each, a sum and a division, :math:`\gamma_8 X`; the dynamic bias: one ``log1p``,
:math:`\gamma_2 U`, or 0 for raw distances). Each affine layer :math:`z = hW + b` of :math:`n` inputs
adds :math:`\gamma_{n+1}(|h||W| + |b|)` to :math:`|W|^\top \delta_h`, bounded with the magnitudes
:math:`|h| \le |W|^\top |h_{prev}| + |b|`; ReLU is 1-Lipschitz and exact, SiLU is 1.1-Lipschitz with
:math:`\gamma_5` of its own. Float64 and float32 (sums of products, :data:`.tolerance.REDUCTION_DTYPES`).
"""

from __future__ import annotations

import numpy as np

from .. import relative
from . import oracle_mlp_bias as oracle
from . import tolerance as tol
from .spec import CaseSpec, GoldenEncoding, conventions, exact_normals


def _fire(params, inputs):
    weights = {k: inputs[k] for k in ("w1", "b1", "w2", "b2", "c", "L_multiplier")}
    kw = {"eps": params["eps"], "query_offset": params["query_offset"]}
    return {"distance": relative.fire_normalized_distance(
                params["q_len"], params["k_len"], c=float(inputs["c"][0]),
                L=abs(float(inputs["L_multiplier"][0])) * params["init_L"], **kw),
            "bias": relative.fire_bias(weights, params["q_len"], params["k_len"], init_L=params["init_L"], **kw)}


def _dpb(params, inputs):
    kw = {"log_distance": params["log_distance"], "query_offset": params["query_offset"]}
    return {"mlp_input": relative.dpb_inputs(params["q_len"], params["k_len"], **kw),
            "bias": relative.dpb_bias(dict(inputs), params["q_len"], params["k_len"], **kw)}


ENCODINGS = [GoldenEncoding("fire.bias", oracle.fire, _fire), GoldenEncoding("dpb.bias", oracle.dpb, _dpb)]


def _mlp_tol(weights: dict, x_max: float, x_err: dict, activation: str) -> dict:
    """Per dtype ``{"abs", "rel"}`` for the MLP's output and input (see the module docstring)."""
    n = 1
    while f"w{n + 1}" in weights:
        n += 1
    lip, act_ops = (1.0, 0) if activation == "relu" else (1.1, 5)
    out = {}
    for t, e_x in x_err.items():
        u = tol.UNIT_ROUNDOFF[t]
        h, e_h = np.array([x_max]), np.array([e_x])
        for layer in range(1, n + 1):
            w, b = np.abs(weights[f"w{layer}"]), np.abs(weights[f"b{layer}"])
            z = h @ w + b
            e_z = e_h @ w + tol.gamma(w.shape[0] + 1, u) * z
            if layer < n:
                h, e_h = z, lip * e_z + (tol.gamma(act_ops, u) * z if act_ops else 0.0)
        out[t] = tol.entry(max(float(e_z.max()), e_x), 0.0)
    return out


def _weights(rng, sizes) -> dict:
    out = {}
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:]), start=1):
        out[f"w{i}"], out[f"b{i}"] = exact_normals(rng, (a, b)), exact_normals(rng, b)
    return out


FIRE_ROWS = (
    (3, 8, 6, 6, 0, 0.5, 1.0, 3.0, "self-attention, threshold L = 3 inside the sequence: queries past it are "
                                  "normalised by their own position (progressive interpolation)"),
    (2, 4, 1, 9, 8, -0.25, 1.5, 4.0, "one decoding step at absolute position 8 (query_offset = k_len - q_len); "
                                     "negative c and L_multiplier 1.5 (|c|, |L_multiplier| init_L = 6)"),
    (2, 32, 4, 4, 0, 0.1, 1.0, 512.0, "the reference code's defaults (width 32, c 0.1, L 512): every query "
                                      "below the threshold"),
)
#: Version 3: queries between init_L and L = |L_multiplier| init_L, where ignoring the multiplier shows.
FIRE_ROWS_V3 = (
    (2, 4, 8, 8, 0, 0.3, 2.0, 4.0, "active threshold L = 2 * 4 = 8: queries 5..7 are normalised by L, not by "
                                   "their position (init_L alone would)"),
    (2, 6, 2, 10, 8, 0.2, 2.5, 4.0, "decoding at positions 8, 9 below the active threshold L = 2.5 * 4 = 10 "
                                    "(init_L alone would give 8, 9)"),
)


def _fire_cases(rng, rows=FIRE_ROWS) -> list[CaseSpec]:
    specs = []
    for heads, width, ql, kl, off, c, lmult, init_L, why in rows:
        inputs = {**_weights(rng, (1, width, heads)), "c": np.array([c]), "L_multiplier": np.array([lmult])}
        params = {"q_len": ql, "k_len": kl, "query_offset": off, "init_L": init_L, "eps": 1e-6}
        grid = np.abs(np.arange(ql)[:, None] + off - np.arange(kl)[None, :])
        top = np.maximum(np.arange(ql) + off, abs(lmult) * init_L)[:, None]
        x_max = float(np.max(np.log1p(abs(c) * grid) / np.log1p(abs(c) * top)))
        x_err = {t: tol.gamma(8, tol.UNIT_ROUNDOFF[t]) * x_max for t in tol.REDUCTION_DTYPES}
        specs.append(CaseSpec(
            name=f"fire.bias.h{heads}_w{width}_q{ql}_k{kl}_off{off}_thr{init_L:g}",
            encoding="fire.bias",
            params=params,
            conventions=conventions(
                layout="w1 (1, width), b1, w2 (width, heads), b2 (x @ w); c, L_multiplier (1,); bias (heads, q_len, "
                       "k_len)",
                sign="distance i - j (query - key), |i - j| for keys after the query; query i at i + query_offset",
                scale_placement="bias added to the scaled logits, not scaled",
                semantics="Li et al. 2023 (FIRE) reference code: psi(x) = log(|c| x + 1), L = |L_multiplier| init_L, "
                          "x = psi(|i-j|) / (psi(max(L, i)) + eps), one hidden ReLU layer"),
            inputs=inputs,
            tolerances=_mlp_tol(inputs, x_max, x_err, "relu"),
            error_model="MLP bias: input psi ratio within gamma_8, each affine layer per tolerance.dot on magnitude "
                        "bounds, ReLU exact",
            reference_call="FIRE(num_heads, mlp_width, init_c, init_L, eps) of the paper's appendix code, with the "
                           "threshold's L_multiplier and the MLP's Linear weights transposed",
            description=f"FIRE normalised distance and bias: {why}",
        ))
    return specs


def _dpb_cases(rng) -> list[CaseSpec]:
    specs = []
    for heads, width, depth, ql, kl, log_distance, why in (
        (4, 8, 2, 5, 5, True, "x-transformers' defaults: depth 2, log distance, self-attention"),
        (2, 6, 1, 2, 7, False, "raw signed distance, one hidden layer, 2 queries against 7 keys (bottom-right)"),
        (3, 4, 3, 6, 6, True, "three hidden layers"),
    ):
        inputs = _weights(rng, (1,) + (width,) * depth + (heads,))
        off = kl - ql
        r = np.abs(np.arange(ql)[:, None] + off - np.arange(kl)[None, :])
        u_max = float(np.max(np.log1p(r) if log_distance else r))
        x_err = {t: (tol.gamma(2, tol.UNIT_ROUNDOFF[t]) * u_max if log_distance else 0.0)
                 for t in tol.REDUCTION_DTYPES}
        specs.append(CaseSpec(
            name=f"dpb.bias.h{heads}_w{width}_depth{depth}_q{ql}_k{kl}" + ("" if log_distance else ".raw"),
            encoding="dpb.bias",
            params={"q_len": ql, "k_len": kl, "query_offset": off, "log_distance": log_distance},
            conventions=conventions(
                layout="w1 (1, width), b1, ..., w{depth+1} (width, heads), b{depth+1} (x @ w); bias (heads, q_len, "
                       "k_len)",
                sign="r = i - j (query - key), signed; query i at i + query_offset",
                scale_placement="bias added to the scaled logits, not scaled",
                semantics="x-transformers DynamicPositionBias(dim=width, heads, depth, log_distance, norm=False): "
                          "u = sign(r) log(|r| + 1) or r, SiLU hidden layers, linear output"),
            inputs=inputs,
            tolerances=_mlp_tol(inputs, u_max, x_err, "silu"),
            error_model="MLP bias: input log1p within gamma_2 (raw distances exact), each affine layer per "
                        "tolerance.dot on magnitude bounds, SiLU 1.1-Lipschitz with gamma_5",
            reference_call="x_transformers.x_transformers.DynamicPositionBias(dim, heads=heads, depth=depth, "
                           "log_distance=log_distance)(i, j) with the Linear weights transposed",
            description=f"Dynamic position bias, MLP input and bias: {why}",
        ))
    return specs


def cases() -> list[CaseSpec]:
    rng = np.random.default_rng(20231006)
    return _fire_cases(rng) + _dpb_cases(rng)


def v3_changes() -> tuple[dict, list]:
    """Version 3 (catalogue docstring): FIRE cases where the learned threshold multiplier matters."""
    return {}, _fire_cases(np.random.default_rng(20261202), FIRE_ROWS_V3)
