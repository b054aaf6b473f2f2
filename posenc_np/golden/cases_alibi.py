r"""Golden cases for ALiBi: slopes (powers of two and not), the three bias forms, attention.

Error models (:mod:`.tolerance`; :math:`u = 2^{-53}`):

* slopes :math:`2^{-bh/n}`: an ordinary float64 implementation (``start = 2 ** (-b/p)``,
  ``start ** h``, at most one more product) is within :math:`5u`; other dtypes round that once.
* bias ``slope * distance``: :math:`6u` in float64 (the product adds one), and in a dtype the
  slope, the integer distance (not exact in bfloat16 past 256) and the product each round.
* attention: :func:`.tolerance.attention` with the logit error of a :math:`d`-term dot product
  times :math:`1/\sqrt{d}` plus the bias error.
"""

from __future__ import annotations

import math

import numpy as np

from .. import alibi
from . import oracle_alibi as oracle
from . import tolerance as tol
from .spec import CaseSpec, GoldenEncoding, conventions, divergence

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
                               slopes=m, query_offset=params["q_offset"])}


def _attention(params, inputs):
    out, cache = alibi.attention(inputs["q"], inputs["k"], inputs["v"], slopes=inputs.get("slopes"),
                                 causal=params["causal"], scale=params["scale"], backend="numpy")
    g = alibi.attention_backward(inputs["dout"], cache)
    return {"out": out, "dq": g["q"], "dk": g["k"], "dv": g["v"]}


ENCODINGS = [
    GoldenEncoding("alibi.slopes", oracle.slopes, _slopes),
    GoldenEncoding("alibi.bias", oracle.bias, _bias),
    GoldenEncoding("alibi.attention", oracle.attention, _attention),
]


SLOPE_REL64 = 5 * tol.UNIT_ROUNDOFF["float64"]
BIAS_REL64 = 6 * tol.UNIT_ROUNDOFF["float64"]
REF_SLOPES = ("transformers.models.bloom.modeling_bloom.build_alibi_tensor (its slopes); ALiBi (ofirpress) "
              "get_slopes(n)")
REF_BIAS = {
    "causal": "ALiBi (ofirpress/attention_with_linear_biases, fairseq) buffered future mask + slopes * relative position",
    "symmetric": "MPT (llm-foundry) build_alibi_bias(n_heads, seq_len, full=True, alibi_bias_max)",
    "bloom": "transformers.models.bloom.modeling_bloom.build_alibi_tensor(attention_mask, num_heads, dtype)",
}


def _bloom_float32_slopes(n: int) -> np.ndarray:
    """BLOOM's ``build_alibi_tensor`` slopes: float32 bases ``2^(-2^-(log2 p - 3))`` raised to integer
    powers in float32 (each power of the *rounded* base, correctly rounded)."""
    p = 1 << (n.bit_length() - 1)
    base = np.float32(2.0 ** (-(2.0 ** -(math.log2(p) - 3))))
    values = [np.float64(base) ** h for h in range(1, p + 1)]
    if p != n:
        extra = np.float32(2.0 ** (-(2.0 ** -(math.log2(2 * p) - 3))))
        values += [np.float64(extra) ** h for h in range(1, 2 * (n - p), 2)]
    return np.array(values).astype(np.float32).astype(np.float64)


def _slope_divergences(n: int, max_bias: float) -> tuple:
    if max_bias != 8.0 or n & (n - 1) == 0:
        return ()
    bloom = _bloom_float32_slopes(n)
    exact32 = alibi.slopes(n).astype(np.float32).astype(np.float64)
    heads = np.flatnonzero(bloom != exact32)
    if heads.size == 0:
        return ()
    return (divergence(
        "BLOOM build_alibi_tensor in float32 (torch.pow of a float32 base)",
        "the base 2^(-2^-(log2 p - 3)) is rounded to float32 before the power: slope h carries about h ulp "
        "instead of half an ulp; here the heads whose float32 slope differs from the exact slope rounded once "
        "(values emulated exactly; torch's powf may differ in the last ulp)",
        {"heads": heads}, {"slopes": bloom[heads]}),)


def v3_slope_units(n: int) -> int:
    """Version 3's float64 bound, in units ``u``, of the paper's slopes for ``n`` heads as BLOOM's
    ``build_alibi_tensor`` and the paper's ``get_slopes`` compute them: the rounded base (relative error
    ``u``) raised to powers up to ``P = max(2^k, 2 (n - 2^k) - 1)``, ``2^k <= n < 2^(k+1)`` (``P u``), then
    ``pow`` and the product (``3u``). ``alibi.slopes.n20``: ``P = 16``, 19u."""
    k = 1 << (n.bit_length() - 1)
    return max(k, 2 * (n - k) - 1) + 3


def slopes_case(name: str, n: int, max_bias: float, description: str, *, units: int | None = None) -> CaseSpec:
    """An ``alibi.slopes`` case for ``n`` heads (float64 bound 5u, or ``units`` u: :func:`v3_slope_units`)."""
    return CaseSpec(
        name=name,
        encoding="alibi.slopes",
        params={"num_heads": n, "max_bias": max_bias},
        conventions=conventions(layout="(num_heads,)", sign="m_h > 0, subtracted per unit distance",
                                semantics=PAPER if max_bias == 8.0 else PAPER + "; MPT gen_slopes alibi_bias_max"),
        inputs={},
        tolerances=tol.rounded(rel64=SLOPE_REL64 if units is None else units * tol.UNIT_ROUNDOFF["float64"]),
        error_model=_slope_model(units),
        reference_call=REF_SLOPES if max_bias == 8.0 else "MPT (llm-foundry) gen_slopes(n_heads, alibi_bias_max)",
        known_divergences=_slope_divergences(n, max_bias),
        description=description,
    )


def _slope_model(units: int | None) -> str:
    if units is None:
        return "rounded: float64 slopes within 5u, rounded once"
    return (f"rounded: float64 slopes within {units}u (the rounded base raised to powers up to {units - 3}, pow and "
            "one product), rounded once")


def bias_case(name: str, form: str, h: int, ql: int, kl: int, off: int, description: str, *, slopes=None,
              max_bias: float = 8.0, slope_units: int | None = None) -> CaseSpec:
    """An ``alibi.bias`` case: ``h`` heads, queries ``off .. off + ql - 1`` against keys ``0 .. kl - 1``
    (float64 bound 6u, or ``slope_units + 1`` u for slopes within ``slope_units`` u)."""
    largest = (1.0 if slopes is None else float(np.max(slopes))) * (kl + off + ql)
    rel64 = (tol.UNIT_ROUNDOFF["float64"] if slopes is not None  # given slopes are exact inputs
             else BIAS_REL64 if slope_units is None else (slope_units + 1) * tol.UNIT_ROUNDOFF["float64"])
    return CaseSpec(
        name=name,
        encoding="alibi.bias",
        params={"num_heads": h, "q_len": ql, "k_len": kl, "form": form, "q_offset": off, "max_bias": max_bias},
        conventions=conventions(layout="(heads, q_len, k_len); query i at position i + q_offset",
                                sign=SIGNS[form], scale_placement=AFTER_SCALE, semantics=SEMANTICS[form]),
        inputs={} if slopes is None else {"slopes": slopes},
        tolerances=tol.rounded(rel64=rel64, ops=3, magnitude=largest),
        error_model=f"rounded: slope times an exact integer distance ({6 if slope_units is None else slope_units + 1}u "
                    "in float64); in a dtype the slope, the distance and the product round",
        reference_call=REF_BIAS[form],
        description=description,
    )


def cases() -> list[CaseSpec]:
    out = []
    for n, max_bias, why in (
        (8, 8.0, "published: 1/2, 1/4, ..., 1/256"),
        (12, 8.0, "published non-monotone case: ends 0.7071, 0.3536, 0.1768, 0.0884"),
        (1, 8.0, "one head: 2^-8"),
        (3, 8.0, "p = 2: [2^-4, 2^-8] + [2^-2]"),
        (20, 8.0, "p = 16 plus 4 interleaved slopes of 32 heads"),
        (6, 4.0, "MPT alibi_bias_max = 4 with a non-power-of-two head count"),
    ):
        suffix = "" if max_bias == 8.0 else f".max_bias{max_bias:g}"
        out.append(slopes_case(f"alibi.slopes.n{n}{suffix}", n, max_bias,
                               f"ALiBi slopes, {n} heads, max_bias {max_bias:g} ({why})"))
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
        out.append(bias_case(name, form, h, ql, kl, off,
                             f"ALiBi bias, {form} form, {h} heads, q_len {ql}, k_len {kl}, q_offset {off}: {why}",
                             slopes=m))
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
            tolerances=_attention_tol(inputs, slope_max=float(alibi.slopes(h).max()), k_len=kl),
            error_model="attention: logits = d-term dot / sqrt(d) + bias (inputs rounded once to the dtype); "
                        "softmax, output and backward per tolerance.attention",
            reference_call="torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=alibi_bias) and "
                           "its autograd gradients",
            description=f"ALiBi attention output and gradients (dq, dk, dv for cotangent dout): {why}",
        ))
    return out


def _attention_tol(inputs, *, slope_max: float, k_len: int) -> dict:
    q, k = inputs["q"], inputs["k"]
    d = q.shape[-1]
    scale = 1 / math.sqrt(d)
    qk = scale * tol.max_abs_dot(q, k)
    bias = slope_max * (k_len - 1)
    logit = {}
    for t in tol.REDUCTION_DTYPES:
        dot = tol.dot(d, qk, extra=2, dtypes=(t,))[t]
        bias_t = tol.rounded(rel64=BIAS_REL64, ops=3, magnitude=bias, dtypes=(t,))[t]
        logit[t] = dot["abs"] + bias_t["rel"] * bias + bias_t["abs"] + tol.UNIT_ROUNDOFF[t] * (qk + bias)
    parts = tol.attention(q=q, k=k, v=inputs["v"], g=inputs["dout"], scale=scale, logit_error=logit)
    return tol.widest(*parts.values())


def v3_changes() -> tuple[dict, list]:
    """Version 3 (catalogue docstring): ``alibi.slopes.n20``'s float64 bound admits BLOOM's construction and
    the paper's ``get_slopes`` in float64: the base ``2^(-1/2)`` is rounded (``u``) and raised to powers up
    to 16 (``16u``), then ``pow`` and the paper's product (``3u``): ``19u`` (both reach ``10u``)."""
    spec = next(s for s in cases() if s.name == "alibi.slopes.n20")
    return {spec.name: {"tolerances": tol.rounded(rel64=v3_slope_units(20) * tol.UNIT_ROUNDOFF["float64"]),
                        "error_model": "rounded: float64 slopes within 19u (the rounded base 2^(-1/2) raised to "
                                       "powers up to 16, pow and one product), rounded once"}}, []
