r"""Per-dtype tolerances from written error models of a *correct* implementation.

A case's tolerance for a dtype ``t`` bounds ``|a - e| <= abs_t + rel_t |e|`` for the outputs of a
correct implementation in ``t`` against the oracle's exact values ``e``, derived from the
documented operations, never from this library's measured error. The models (:func:`rounded`,
:func:`rotation`, :func:`dot`, :func:`attention`), the unit roundoffs (float16: subnormal below
2^-14, :data:`F16_UNDERFLOW`), Higham's :func:`gamma` and which dtypes a case gets
(:data:`REDUCTION_DTYPES`: float64 and float32 for sums) are specified in ``docs/golden-format.md``
("The error model"); each function states its own bound.
"""

from __future__ import annotations

import math

import numpy as np

#: dtype names of a case's ``tolerances``, in the order they are written.
DTYPES = ("float64", "float32", "bfloat16", "float16")
UNIT_ROUNDOFF = {"float64": 2.0 ** -53, "float32": 2.0 ** -24, "bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}
#: Dtypes of the reduction models (sums of products, softmax attention).
REDUCTION_DTYPES = ("float64", "float32")
#: Half the float16 subnormal spacing: the absolute error of rounding a value below 2^-14.
F16_UNDERFLOW = 2.0 ** -25
#: Largest finite float16.
F16_MAX = 65504.0
#: A model is used for a dtype only while ``n u`` stays below this (first-order bounds hold).
_SMALL = 0.1


def gamma(n: float, u: float) -> float:
    """Higham's ``gamma_n = n u / (1 - n u)``: bounds ``|prod (1 + d_k) - 1|`` over ``n`` roundings."""
    nu = n * u
    if nu >= 1:
        raise ValueError(f"gamma_{n} undefined for u = {u}")
    return nu / (1 - nu)


def _up(x: float) -> float:
    """``x`` rounded *up* to 4 significant digits (a bound stays a bound and reads well)."""
    if x <= 0:
        return 0.0
    e = math.floor(math.log10(x)) - 3
    m = math.ceil(x / 10.0 ** e)
    while float(f"{m - 1}e{e}") >= x:  # ceil of an inexact quotient may overshoot by one
        m -= 1
    while float(f"{m}e{e}") < x:
        m += 1
    return float(f"{m}e{e}")


def entry(abs_: float, rel: float) -> dict:
    """``{"abs", "rel"}`` with both rounded up to 4 significant digits."""
    return {"abs": _up(abs_), "rel": _up(rel)}


def _usable(dtype: str, n: float, magnitude: float) -> bool:
    """Whether a model with ``n`` roundings on values up to ``magnitude`` holds in ``dtype``."""
    return n * UNIT_ROUNDOFF[dtype] <= _SMALL and not (dtype == "float16" and magnitude > F16_MAX)


def rounded(*, abs64: float = 0.0, rel64: float = 0.0, ops: int = 1, magnitude: float = 1.0,
            dtypes=DTYPES) -> dict:
    r"""Values computed in float64 with error ``abs64 + rel64 |e|``, then rounded once to ``t``.

    In ``t`` the correct implementation computes what an ordinary float64 implementation
    computes (angles in float64 or better) and rounds the result once; ``ops`` counts that
    rounding plus any further rounding in ``t`` of the documented operation (e.g. the product
    by an attention factor done in ``t``: ``ops = 3`` for rounding the factor, the value and
    the product). Model, for ``t != float64``:

    .. math:: |a - e| \le abs_{64} + (rel_{64} + \gamma_{ops}(u_t)(1 + rel_{64}))\,|e|
              \;[+\; ops \cdot 2^{-25} \text{ in float16}]

    and for float64 the float64 model alone (``abs64``, ``rel64``).
    """
    out = {}
    for t in dtypes:
        if t == "float64":
            out[t] = entry(abs64, rel64)
        elif _usable(t, ops, magnitude):
            g = gamma(ops, UNIT_ROUNDOFF[t])
            out[t] = entry(abs64 + (ops * F16_UNDERFLOW if t == "float16" else 0.0), rel64 + g * (1 + rel64))
    return out


def angle_tables(*, max_position: float, inv_freq, freq_units, amplitude: float = 1.0, dtypes=DTYPES) -> dict:
    r"""``A cos(p w_i)``, ``A sin(p w_i)`` of an ordinary float64 implementation, rounded once to ``t``.

    float64 (:math:`u = 2^{-53}`): the frequency :math:`w_i` carries a relative error of
    ``freq_units[i]`` units of ``u`` (the family states its formula), the product :math:`p w_i`
    one more, libm ``cos``/``sin`` one ulp (:math:`2u` relative) and the product by ``A`` (when
    :math:`A \ne 1`) two more roundings:

    .. math:: abs_{64} = A\,u\,\max|p|\,\max_i w_i (k_i + 1),\qquad rel_{64} = 2u\ (4u \text{ if } A \ne 1).

    Other dtypes: :func:`rounded` of that (``ops = 1``, or 3 when ``A`` multiplies in ``t``).
    ``inv_freq`` may be upper bounds of the frequencies.
    """
    u = UNIT_ROUNDOFF["float64"]
    units = [w * (k + 1) for w, k in zip(inv_freq, freq_units)]
    abs64 = amplitude * u * float(max_position) * float(max(units, default=0.0))
    one = amplitude == 1.0
    return rounded(abs64=abs64, rel64=(2 if one else 4) * u, ops=1 if one else 3, magnitude=amplitude, dtypes=dtypes)


def rotation(tables: dict, *, amplitude: float, pair_sum: float, inputs_exact: bool) -> dict:
    r"""``y = a c - b s`` (and ``a s + b c``) in ``t`` on tables whose error is ``tables[t]``.

    With ``|a| + |b| <= M`` (``pair_sum``, the largest over the case's pairs), tables
    ``c~ = c + dc``, ``|dc| <= T_abs + T_rel |c|``, ``|c|, |s| <= A`` (``amplitude``), inputs
    rounded once to ``t`` (relative ``u_t``; none when they are exactly representable,
    ``inputs_exact``) and two products and one sum rounded in ``t``:

    .. math:: |y~ - y| \le M\,\big(T_{abs}(1 + \gamma_3) + A\,(T_{rel} + \gamma_{3 + r})\big),
              \qquad r = 0 \text{ if inputs are exact in } t \text{ else } 1.

    A fused multiply-add only removes roundings. ``tables`` maps dtypes to ``{"abs", "rel"}``
    (from :func:`rounded`); only those dtypes are returned.
    """
    out = {}
    for t, tab in tables.items():
        u = UNIT_ROUNDOFF[t]
        r = 0 if (inputs_exact or t == "float64") else 1
        if _usable(t, 3 + r, pair_sum * amplitude):
            out[t] = entry(pair_sum * (tab["abs"] * (1 + gamma(3, u)) + amplitude * (tab["rel"] + gamma(3 + r, u))),
                            0.0)
    return out


def dot(n: int, magnitude: float, *, extra: int = 0, rounded_factors: int = 2, dtypes=REDUCTION_DTYPES) -> dict:
    r"""Sums of ``n`` products (any order, with or without FMA) of float64 inputs.

    ``magnitude`` bounds ``sum_k |x_k y_k|`` over the case's outputs. In ``t`` each input factor
    is rounded once (``rounded_factors`` per product; 0 when they are exact in ``t``), then ``n``
    products and sums plus ``extra`` further roundings (a scale, an addition):

    .. math:: |a - e| \le \gamma_{n + extra + k}(u_t)\ \text{magnitude},\qquad k = \text{rounded factors (0 in float64)}.
    """
    out = {}
    for t in dtypes:
        k = n + extra + (0 if t == "float64" else rounded_factors)
        if _usable(t, k, magnitude):
            out[t] = entry(gamma(k, UNIT_ROUNDOFF[t]) * magnitude, 0.0)
    return out


def max_abs_dot(a, b) -> float:
    """``max_{..., i, j} sum_c |a_ic| |b_jc|`` over the last two axes: bounds ``|a b^T|`` entrywise and
    the sum of the magnitudes of its terms."""
    return float(np.max(np.abs(a) @ np.swapaxes(np.abs(b), -1, -2), initial=0.0))


def attention(*, q, k, v, g, scale: float, logit_error: dict) -> dict[str, dict]:
    r"""Softmax attention ``out = P V`` and its backward, for each dtype with a ``logit_error`` bound.

    ``q, k, v, g`` are the case's queries, keys, values and output cotangent, ``(..., len, dim)``;
    ``logit_error[t]`` bounds the error of each logit ``s_ij`` in ``t`` (from :func:`dot` plus
    the position term). With ``delta = logit_error[t]``, ``u = u_t``, ``Q, K, V, G`` the largest
    entries and ``D = max_ij sum_c |G_ic| |V_jc|`` (which bounds ``|dP|``):

    * probabilities ``p~ = p (1 + e)``, ``|e| <= E_p = 2 delta + gamma_{k_len + 4}`` (the shift
      by the row maximum is exact; ``exp`` 1 ulp, the sum, the division);
    * ``out``: ``V (E_p + gamma_{k_len + 2})`` since ``sum_j p_ij = 1``;
    * ``dP = G V^T``: error ``E_1 = gamma_{d_v + 2} D``;
    * ``dS = P (dP - rowsum(dP P))``: error ``p_ij E_2``, ``E_2 = 3 D E_p + 3 E_1 + D gamma_{k_len + 3}``;
    * ``dq = s dS K``: ``s K (E_2 + 2 D gamma_{k_len + 2})``;
    * ``dk = s dS^T Q``: ``s Q q_len (E_2 + 2 D gamma_{q_len + 2})`` (``sum_i p_ij <= q_len``);
    * ``dv = P^T G``: ``G q_len (E_p + gamma_{q_len + 2})``.

    Returns ``{"out": tolerances, "dq": ..., "dk": ..., "dv": ...}`` (float64 and float32 at most).
    """
    q_len, d = q.shape[-2:]
    k_len, d_v = v.shape[-2:]
    Q, K, V, G = (float(np.max(np.abs(x), initial=0.0)) for x in (q, k, v, g))
    D = max_abs_dot(g, v)
    res: dict[str, dict] = {"out": {}, "dq": {}, "dk": {}, "dv": {}}
    for t in REDUCTION_DTYPES:
        if t not in logit_error:
            continue
        u = UNIT_ROUNDOFF[t]
        if not _usable(t, max(k_len, q_len, d, d_v) + 4, 0.0) or 2 * logit_error[t] > _SMALL:
            continue
        e_p = 2 * logit_error[t] + gamma(k_len + 4, u)
        e_1 = gamma(d_v + 2, u) * D
        e_2 = 3 * D * e_p + 3 * e_1 + D * gamma(k_len + 3, u)
        res["out"][t] = entry(V * (e_p + gamma(k_len + 2, u)), 0.0)
        res["dq"][t] = entry(scale * K * (e_2 + 2 * D * gamma(k_len + 2, u)), 0.0)
        res["dk"][t] = entry(scale * Q * q_len * (e_2 + 2 * D * gamma(q_len + 2, u)), 0.0)
        res["dv"][t] = entry(G * q_len * (e_p + gamma(q_len + 2, u)), 0.0)
    return res


def exact(dtypes=DTYPES) -> dict:
    """Integer and boolean outputs (buckets, counts): equal in every dtype."""
    return {t: {"abs": 0.0, "rel": 0.0} for t in dtypes}


def widest(*tolerance_sets: dict) -> dict:
    """For a case whose outputs follow different models: per dtype present in *every* set, the
    larger ``abs`` and the larger ``rel`` (one tolerance per case and dtype)."""
    common = set.intersection(*(set(s) for s in tolerance_sets))
    return {t: {"abs": max(s[t]["abs"] for s in tolerance_sets), "rel": max(s[t]["rel"] for s in tolerance_sets)}
            for t in DTYPES if t in common}
