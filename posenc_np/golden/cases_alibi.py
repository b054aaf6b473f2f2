"""Golden cases for ALiBi: slopes (powers of two and not), the three bias forms, attention."""

from __future__ import annotations

import numpy as np

from .. import alibi
from . import oracle_alibi as oracle
from .spec import CaseSpec, Encoding, conventions, tolerance

PAPER = "Press et al. 2022 (ALiBi), get_slopes"
SIGNS = {
    "causal": "causal: -m*(q-k)",
    "symmetric": "symmetric: -m*|k-q|",
    "bloom": "bloom: +m*k",
}
SEMANTICS = {
    "causal": "Press et al. 2022, fig. 3",
    "symmetric": "bidirectional ALiBi, MPT build_alibi_bias(full=True)",
    "bloom": "BLOOM build_alibi_tensor (key position only; equals causal after a causal softmax)",
}
AFTER_SCALE = "bias added after 1/sqrt(d)"


def _slopes(params, inputs):
    return {"slopes": alibi.slopes(params["num_heads"], max_bias=params["max_bias"])}


def _bias(params, inputs):
    m = inputs["slopes"] if "slopes" in inputs else alibi.slopes(params["num_heads"], max_bias=params["max_bias"])
    return {"bias": alibi.bias(params["num_heads"], params["q_len"], params["k_len"], form=params["form"],
                               slopes=m, q_offset=params["q_offset"])}


def _attention(params, inputs):
    out, cache = alibi.attention(inputs["q"], inputs["k"], inputs["v"], slopes=inputs.get("slopes"),
                                 causal=params["causal"], scale=params["scale"], backend="numpy")
    g = alibi.attention_backward(inputs["dout"], cache)
    return {"out": out, "dq": g["q"], "dk": g["k"], "dv": g["v"]}


ENCODINGS = [
    Encoding("alibi.slopes", oracle.slopes, _slopes),
    Encoding("alibi.bias", oracle.bias, _bias),
    Encoding("alibi.attention", oracle.attention, _attention),
]


def cases() -> list[CaseSpec]:
    out = []
    # Slopes: exp2 of an exactly representable exponent (b*h/p with p a power of two) is
    # within 1 ulp; measured max rel error 0 (n <= 32). Bound 2 eps relative.
    for n, max_bias, why in (
        (8, 8.0, "published: 1/2, 1/4, ..., 1/256"),
        (12, 8.0, "published non-monotone case: ends 0.7071, 0.3536, 0.1768, 0.0884"),
        (1, 8.0, "one head: 2^-8"),
        (3, 8.0, "p = 2: [2^-4, 2^-8] + [2^-2]"),
        (20, 8.0, "p = 16 plus 4 interleaved slopes of 32 heads"),
        (6, 4.0, "MPT alibi_bias_max = 4 with a non-power-of-two head count"),
    ):
        suffix = "" if max_bias == 8.0 else f".max_bias{max_bias:g}"
        out.append(CaseSpec(
            name=f"alibi.slopes.n{n}{suffix}",
            encoding="alibi.slopes",
            params={"num_heads": n, "max_bias": max_bias},
            conventions=conventions(layout="(num_heads,)", sign="m_h > 0, subtracted per unit distance",
                                    semantics=PAPER if max_bias == 8.0 else PAPER + "; MPT gen_slopes alibi_bias_max"),
            inputs={},
            tolerance=tolerance(abs_eps=0, rel_eps=2),
            description=f"ALiBi slopes, {n} heads, max_bias {max_bias:g} ({why})",
        ))
    # Bias: slope (<= 1 ulp) times an exact integer distance, one rounding: <= 1.5 ulp of
    # |B|; measured max rel error 0.94 eps (h12 case, 0 elsewhere). Bound 4 eps relative,
    # no absolute slack: zeros (k == q, k == 0 for bloom, zero slopes) must be exact.
    bias_cases = [
        ("causal", 4, 5, 7, 2, None, "decoding block: queries are the last 5 of 7 positions"),
        ("symmetric", 4, 5, 7, 2, None, "bidirectional form, queries at positions 2..6"),
        ("bloom", 4, 5, 7, 2, None, "BLOOM's key-position form: every row identical"),
        ("causal", 12, 1, 9, 8, None, "one-token decode step, 12 heads (non-power-of-two slopes)"),
        ("symmetric", 3, 4, 4, 0, np.array([0.5, 0.0, 1.25]), "explicit slopes, including a zero slope"),
    ]
    for form, h, ql, kl, off, m, why in bias_cases:
        name = f"alibi.bias.{form}.h{h}_q{ql}_k{kl}" + (f"_off{off}" if off != kl - ql else "")
        if m is not None:
            name += ".slopes"
        out.append(CaseSpec(
            name=name,
            encoding="alibi.bias",
            params={"num_heads": h, "q_len": ql, "k_len": kl, "form": form, "q_offset": off, "max_bias": 8.0},
            conventions=conventions(layout="(heads, q_len, k_len); query i at position i + q_offset",
                                    sign=SIGNS[form], scale_placement=AFTER_SCALE, semantics=SEMANTICS[form]),
            inputs={} if m is None else {"slopes": m},
            tolerance=tolerance(abs_eps=0, rel_eps=4),
            description=f"ALiBi bias, {form} form, {h} heads, q_len {ql}, k_len {kl}, q_offset {off}: {why}",
        ))
    # Attention: output and gradients for a fixed cotangent. Errors come from the float64
    # matmuls, exp and the softmax sums on values of magnitude <= 3; measured max abs error
    # 4.4e-16 (2 eps) over all outputs. Bound 8 eps absolute + 8 eps relative (>= 4x).
    rng = np.random.default_rng(20240607)
    att_cases = [
        (True, (1, 4, 5, 5, 8), 8, "causal self-attention, 4 heads"),
        (True, (2, 3, 2, 6, 4), 4, "causal decode block: 2 queries against 6 keys (bottom-right), 3 heads"),
        (False, (1, 3, 4, 6, 4), 4, "bidirectional (symmetric form), 4 queries against 6 keys"),
    ]
    for causal, (b, h, ql, kl, d), dv, why in att_cases:
        kind = "causal" if causal else "symmetric"
        inputs = {
            "q": rng.standard_normal((b, h, ql, d)),
            "k": rng.standard_normal((b, h, kl, d)),
            "v": rng.standard_normal((b, h, kl, dv)),
            "dout": rng.standard_normal((b, h, ql, dv)),
        }
        out.append(CaseSpec(
            name=f"alibi.attention.{kind}.b{b}_h{h}_q{ql}_k{kl}_d{d}",
            encoding="alibi.attention",
            params={"causal": causal, "scale": None, "max_bias": 8.0},
            conventions=conventions(
                layout="(batch, heads, len, d); query i at position i + k_len - q_len (bottom-right)",
                sign=SIGNS[kind], scale_placement=AFTER_SCALE + " (scale = 1/sqrt(d))",
                semantics=SEMANTICS[kind] + ("; causal mask keeps keys j <= i + k_len - q_len" if causal else
                                             "; no mask")),
            inputs=inputs,
            tolerance=tolerance(abs_eps=8, rel_eps=8),
            description=f"ALiBi attention output and gradients (dq, dk, dv for cotangent dout): {why}",
        ))
    return out
