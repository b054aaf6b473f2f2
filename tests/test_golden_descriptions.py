"""Every derived number a version-3 case description quotes is the one its parameters give (issue 25:
descriptions are generated from the parameters, so none can go stale).

Each rule below finds one kind of quoted number (YaRN correction ranges and their truncation, YaRN
attention factors ``g(s)``, LongRoPE's attention factor, LLaMA-3 band counts and band edges, p-RoPE pair
counts, ALiBi slopes) and recomputes it here from the formula (docs/CONVENTIONS), not from the library;
the quoted digits must be the value rounded to them. A test also checks that the rules see every
description that quotes a decimal number, so a new kind of quoted number needs a rule.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from posenc_np.golden import catalogue

SPECS = catalogue.cases(suite=3)
DECIMAL = re.compile(r"(?<![\w.])-?\d+\.\d+")


def _quoted(text: str, value: float) -> bool:
    """``text`` (a decimal as written) is ``value`` rounded to its digits."""
    digits = len(text.split(".")[1])
    return f"{value:.{digits}f}" == text


def _yarn_dims(p, d):
    sc = p["scaling"]
    L0 = sc.get("original_max_position_embeddings") or p["max_position_embeddings"]
    base = p["base"]
    return [d * math.log(L0 / (2 * math.pi * r)) / (2 * math.log(base))
            for r in (sc.get("beta_fast") or 32.0, sc.get("beta_slow") or 1.0)]


def yarn_ranges(spec):
    """``range a/b``, ``ramp a/b``, ``raw a/b``: the correction dims from the rotary width; a second pair
    after "head width would give" from the head width; ``truncated to m/n``: floor and ceil."""
    p, text = spec.params, spec.description
    pairs = re.findall(r"(-?\d+\.\d+)/(-?\d+\.\d+)", text)
    widths = [p["rotary_dim"], p["head_dim"]][:len(pairs)]
    assert len(pairs) == 1 or "head width would give" in text
    for (lo, hi), d in zip(pairs, widths):
        c_lo, c_hi = _yarn_dims(p, d)
        assert _quoted(lo, c_lo) and _quoted(hi, c_hi), (spec.name, lo, hi, c_lo, c_hi)
    trunc = re.search(r"truncated to (\d+)/(\d+)", text)
    if trunc:
        c_lo, c_hi = _yarn_dims(p, p["rotary_dim"])
        assert (int(trunc[1]), int(trunc[2])) == (math.floor(c_lo), math.ceil(c_hi)), spec.name
    return len(pairs)


def yarn_g(spec):
    """``g(s) = v``: 0.1 ln s + 1."""
    found = re.findall(r"g\((\d+)\) = (\d+\.\d+)", spec.description)
    for s, v in found:
        assert _quoted(v, 0.1 * math.log(float(s)) + 1.0), (spec.name, s, v)
        assert float(s) == spec.params["scaling"]["factor"], spec.name
    return len(found)


def longrope_af(spec):
    """``af = v``: sqrt(1 + ln(factor) / ln(L0)), factor = max_position_embeddings / L0 when absent."""
    found = re.findall(r"af = (\d+\.\d+)", spec.description)
    for v in found:
        sc = spec.params["scaling"]
        L0 = sc["original_max_position_embeddings"]
        factor = sc.get("factor") or spec.params["max_position_embeddings"] / L0
        assert _quoted(v, math.sqrt(1 + math.log(factor) / math.log(L0))), (spec.name, v)
    return len(found)


def _llama3(spec):
    p = spec.params
    sc, d = p["scaling"], p["rotary_dim"]
    L0, lo, hi = sc["original_max_position_embeddings"], sc["low_freq_factor"], sc["high_freq_factor"]
    wavelen = 2 * math.pi * p["base"] ** (np.arange(0, d, 2) / d)
    counts = (int(np.sum(wavelen < L0 / hi)), int(np.sum((wavelen >= L0 / hi) & (wavelen <= L0 / lo))),
              int(np.sum(wavelen > L0 / lo)))
    # the pair index where the wavelength 2 pi base^(2i/d) crosses L0 / high_freq_factor and L0 / low_freq_factor
    edges = [d / 2 * math.log(L / (2 * math.pi)) / math.log(p["base"]) for L in (L0 / hi, L0 / lo)]
    return counts, edges, sc["factor"]


def llama3_bands(spec):
    """``k kept, b blended, n divided by f`` and ``band edges i = x and y``."""
    text, n = spec.description, 0
    counts = re.search(r"(\d+) kept, (\d+) blended, (\d+) divided by (\d+)", text)
    edges = re.search(r"band edges i ?= ?(\d+\.\d+) and (\d+\.\d+)", text)
    if counts or edges:
        want, where, factor = _llama3(spec)
        if counts:
            assert tuple(map(int, counts.groups()[:3])) == want and float(counts[4]) == factor, (spec.name, want)
            n += 1
        if edges:
            assert _quoted(edges[1], where[0]) and _quoted(edges[2], where[1]), (spec.name, where)
            n += 2
    return n


def p_rope_pairs(spec):
    """``N rotating pairs``: floor(p * d / 2) in float64; ``p d/2 = x``: that product."""
    if spec.encoding != "rope.p_rope":
        return 0
    p, d = spec.params["p"], spec.params["head_dim"]
    assert int(re.search(r"(\d+) rotating pairs", spec.description)[1]) == math.floor(p * d / 2), spec.name
    product = re.search(r"p d/2 = (\d+\.\d+)(\.\.\.)?", spec.description)
    if product:  # rounded, or cut short with "...": the leading digits of the float64 product
        value = p * d / 2
        assert (repr(value).startswith(product[1]) if product[2] else _quoted(product[1], value)), spec.name
    return 1 + bool(product)


def alibi_ends(spec):
    """``ends a, b, ...``: the last slopes of the paper's construction for n heads."""
    found = re.search(r"ends ((?:\d+\.\d+(?:, )?)+)", spec.description)
    if not found:
        return 0
    n = spec.params["num_heads"]
    k = 2 ** math.floor(math.log2(n))
    slopes = [2 ** (-8 * (i + 1) / k) for i in range(k)] + [2 ** (-8 * (i + 1) / (2 * k)) for i in range(0, 2 * (n - k), 2)]
    quoted = found[1].split(", ")
    assert all(_quoted(q, s) for q, s in zip(quoted, slopes[-len(quoted):])), (spec.name, quoted, slopes[-4:])
    return len(quoted)


RULES = [yarn_ranges, yarn_g, longrope_af, llama3_bands, p_rope_pairs, alibi_ends]
#: Decimals that are parameters or exact constants the description repeats (not derived): by case prefix.
PARAMETERS = ("kerple.", "fire.", "relative.", "rope.inv_freq.default.", "rope.cos_sin.half.yarn.d16_explicit",
              "rope.apply.half.yarn.d16_explicit", "rope.cos_sin.half.yarn.d32_explicit",
              "rope.apply.half.yarn.d32_explicit", "rope.cos_sin.half.yarn.d16_mscale", "rope.apply.half.yarn.d16_mscale",
              "rope.cos_sin.half.yarn.d64_partial", "rope.apply.half.yarn.d64_partial")


def _is_yarn_with_range(spec):
    return (spec.params.get("scaling") or {}).get("rope_type") == "yarn" and re.search(r"\d/-?\d", spec.description)


@pytest.mark.parametrize("spec", [s for s in SPECS if DECIMAL.search(s.description)], ids=lambda s: s.name)
def test_the_numbers_a_description_quotes_are_its_parameters(spec):
    checked = sum(rule(spec) for rule in RULES if rule is not yarn_ranges or _is_yarn_with_range(spec))
    assert checked or spec.name.startswith(PARAMETERS), f"{spec.name}: no rule checks {spec.description!r}"


def test_the_rules_catch_a_stale_number():
    spec = next(s for s in SPECS if s.name == "rope.inv_freq.yarn.d128_base10000")
    for old, stale in (("20.94/45.03", "20.95/45.03"), ("truncated to 20/46", "truncated to 21/46")):
        assert old in spec.description
        bad = type(spec)(**{**spec.__dict__, "description": spec.description.replace(old, stale)})
        with pytest.raises(AssertionError):
            yarn_ranges(bad)
    llama = next(s for s in SPECS if s.name == "rope.inv_freq.llama3.d128_base500000")
    with pytest.raises(AssertionError):
        llama3_bands(type(llama)(**{**llama.__dict__, "description": llama.description.replace("29 kept", "28 kept")}))
