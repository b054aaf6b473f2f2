r"""Golden cases for CoPE: the contextual positions and the logit term for given ``q``, ``k``,
mask and table (Golovneva et al. 2024).

Error model (:mod:`.tolerance`; inputs are :func:`.spec.exact_normals`, exact in every dtype;
float64 and float32 only, as for every reduction). With :math:`S = s \max \sum_c |q_c k_c|`,
:math:`Z = \max \sum_c |q_c e_c|`, :math:`d` the head dimension and :math:`J` the key count, in a
dtype with unit roundoff :math:`u`:

* gate logits :math:`s\,q\cdot k`: :func:`.tolerance.dot` (:math:`d` terms and the scale), error
  :math:`\delta_s`; the sigmoid is 1/4-Lipschitz and evaluated with a few roundings:
  :math:`\delta_g = \delta_s/4 + \gamma_4`;
* positions, sums of at most :math:`J` gates in :math:`[0, 1]`: :math:`\delta_p = J\delta_g + J\gamma_J`;
* the term: the table logits :math:`z = E q` carry :math:`\gamma_d Z`; the interpolation is
  continuous and piecewise linear in :math:`\bar p` with slopes at most :math:`2Z` (and the clamp
  is 1-Lipschitz), so a position error moves it by at most :math:`2Z\delta_p`; the interpolation's
  own two products and sum add :math:`\gamma_3\,2Z`.

A rounding that moves :math:`p` across an integer changes the rows used but not the value beyond
that bound, since the interpolation is continuous there.
"""

from __future__ import annotations

import math

import numpy as np

from .. import attention, relative
from . import oracle_cope as oracle
from . import tolerance as tol
from .spec import CaseSpec, GoldenEncoding, conventions, exact_normals


def _forward(params, inputs):
    kw = {"gate_scale": params["gate_scale"], "mask": inputs["mask"]}
    term, _ = relative.cope_forward(inputs["q"], inputs["k"], inputs["table"], **kw)
    return {"positions": relative.cope_positions(inputs["q"], inputs["k"], **kw), "term": term}


ENCODINGS = [GoldenEncoding("cope.forward", oracle.forward, _forward)]


def _tolerances(inputs, gate_scale: float) -> dict:
    q, k, table = inputs["q"], inputs["k"], inputs["table"]
    d, n_k = q.shape[-1], k.shape[-2]
    S, Z = gate_scale * tol.max_abs_dot(q, k), tol.max_abs_dot(q, table[None])
    out = {}
    for t in tol.REDUCTION_DTYPES:
        u = tol.UNIT_ROUNDOFF[t]
        e_s = tol.dot(d, S, extra=1, rounded_factors=0, dtypes=(t,))[t]["abs"]
        e_p = n_k * (e_s / 4 + tol.gamma(4, u)) + n_k * tol.gamma(n_k, u)
        term = tol.gamma(d, u) * Z + 2 * Z * e_p + tol.gamma(3, u) * 2 * Z
        out[t] = tol.entry(max(e_p, term), 0.0)
    return out


def cases() -> list[CaseSpec]:
    rng = np.random.default_rng(20240528)
    specs = []
    for (b, h, ql, kl, d), npos_max, gate_scale, mask_kind, why in (
        ((1, 2, 5, 5, 4), 2, 0.5, "causal", "causal self-attention, gates of the scaled logits (Appendix B code, "
                                            "s = 1/sqrt(d)); npos_max 2, so the clamp is active"),
        ((1, 2, 2, 6, 4), 8, 1.0, "causal", "decode block: 2 queries against 6 keys (bottom-right causal mask), "
                                            "gates sigma(q.k) of the paper's equation (s = 1)"),
        ((2, 1, 4, 5, 3), 4, 1 / math.sqrt(3), "padding", "bidirectional attention with a key-padding mask "
                                                          "(dropped keys have gate 0)"),
    ):
        if mask_kind == "causal":
            mask = np.broadcast_to(attention.causal_mask(ql, kl), (b, h, ql, kl)).copy()
        else:
            mask = np.broadcast_to(rng.random((b, 1, 1, kl)) < 0.7, (b, h, ql, kl)).copy()
            mask[..., 0] = True
        inputs = {"q": exact_normals(rng, (b, h, ql, d)), "k": exact_normals(rng, (b, h, kl, d)),
                  "table": exact_normals(rng, (npos_max + 1, d)), "mask": mask}
        specs.append(CaseSpec(
            name=f"cope.forward.{mask_kind}.b{b}_h{h}_q{ql}_k{kl}_d{d}_npos{npos_max}",
            encoding="cope.forward",
            params={"gate_scale": gate_scale, "npos_max": npos_max},
            conventions=conventions(
                layout="q, k (batch, heads, len, d); table (npos_max + 1, d) shared by the heads; mask (batch, heads, "
                       "q_len, k_len), True = keep",
                sign="p_ij = sum of the gates of kept keys t >= j (reversed cumulative sum); clamped at npos_max",
                scale_placement="gates sigma(gate_scale * q.k); the term q.e[p] is added to the logits unscaled",
                semantics="Golovneva et al. 2024, eqs. 3-5; npos_max = largest position (the paper's code and "
                          "x-transformers name the row count npos_max / max_pos)"),
            inputs=inputs,
            tolerances=_tolerances(inputs, gate_scale),
            error_model="CoPE: gate logits per tolerance.dot, sigmoid 1/4-Lipschitz, positions sums of k_len gates, "
                        "term = table logits plus 2 max|z| times the position error (continuous interpolation)",
            reference_call="x_transformers.x_transformers.CoPE(dim, heads, max_pos = npos_max + 1)(query, "
                           "attn_logits) with attn_logits = gate_scale * q k^T masked to -finfo.max",
            description=f"CoPE positions and logit term: {why}",
        ))
    return specs
