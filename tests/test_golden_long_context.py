"""Long-context cases (positions to 10^7), the oracle's argument handling there, gradient and batched
coverage, and generation that does not depend on the number of processes."""

import json

import mpmath
import numpy as np
import pytest
from _golden_util import REPO

from posenc_np.golden import _mp, catalogue, runner

V2 = REPO / "vectors" / "v2"


def _case(name: str) -> dict:
    return json.loads((V2 / f"{name}.json").read_text())


def _array(obj) -> np.ndarray:
    return np.array(obj["data"], dtype=obj["dtype"]).reshape(obj["shape"])


def test_position_digits():
    assert _mp.position_digits([0, 1, 2]) == 1
    assert _mp.position_digits([10_000_000]) == 8
    assert _mp.position_digits(np.array([[-5.0e6]])) == 7


@pytest.mark.parametrize("name, base", [("rope.cos_sin.long.default.d128_base10000", 1e4),
                                        ("rope.cos_sin.long.default.d128_base500000", 5e5)])
def test_tables_at_ten_million_equal_a_200_digit_evaluation(name, base):
    """At p = 10^7 the angle has 8 more integer digits than at p = 1; the committed values must be the
    correctly rounded ones, as a 200-digit evaluation (far beyond any reduction loss) gives them."""
    doc = _case(name)
    pos, cos, sin = (_array(doc[g][k]) for g, k in (("inputs", "positions"), ("outputs", "cos"), ("outputs", "sin")))
    row = int(np.flatnonzero(pos == 10_000_000)[0])
    with mpmath.workdps(200):
        for i in range(64):
            angle = mpmath.mpf(10_000_000) * mpmath.power(mpmath.mpf(base), -mpmath.mpf(2 * i) / 128)
            assert cos[row, i] == float(mpmath.cos(angle)) == cos[row, i + 64], i
            assert sin[row, i] == float(mpmath.sin(angle)), i


def test_long_context_catalogue():
    names = {s.name: s for s in catalogue.cases()}
    for base in ("d128_base10000", "d128_base500000"):
        for kind in ("cos_sin", "apply"):
            pos = names[f"rope.{kind}.long.default.{base}"].inputs["positions"]
            for p in (8192, 32768, 131072, 1_000_000, 10_000_000):
                assert {p - 1, p, p + 1} <= set(pos.tolist()) or p == 10_000_000 and {p - 1, p} <= set(pos.tolist())
    for tag in ("llama3.llama3_1_8b", "yarn.qwen2_5_7b_f4", "yarn.gpt_oss_20b_f32", "longrope.phi3_mini_128k.short",
                "longrope.phi3_mini_128k.long", "dynamic.d128_f2.seq32768", "linear.d128_f8", "ntk.d128_alpha8",
                "proportional.d256_p0_25"):
        spec = names[f"rope.cos_sin.long.{tag}"]
        context = spec.params.get("seq_len") or 131072
        assert spec.inputs["positions"].max() >= (4097 if "short" in tag else min(context, 32768))
    assert names["rope.cos_sin.long.yarn.gpt_oss_20b_f32"].params["scaling"]["truncate"] is False
    assert names["rope.cos_sin.long.longrope.phi3_mini_128k.long"].params["seq_len"] > 4096
    assert names["rope.cos_sin.long.longrope.phi3_mini_128k.short"].params["seq_len"] == 4096
    for layout in ("interleaved", "concat"):
        assert names[f"sinusoidal.{layout}.d64.long"].inputs["positions"].max() == 10_000_000


def test_rope_cases_name_head_dim_and_rotary_dim_and_every_case_a_reference_call():
    for s in catalogue.cases(["rope.*"]):
        assert "dim" not in s.params, s.name
        if s.encoding != "rope.long_term_decay":
            assert {"head_dim", "rotary_dim"} <= set(s.params), s.name
    for s in catalogue.cases():
        assert s.reference_call and s.error_model, s.name


def test_gradient_and_batched_coverage():
    xpos = json.loads((V2 / "rope.xpos.none.half.d8.json").read_text())
    assert {"dq", "dk"} <= set(xpos["outputs"]) and "dscores" in xpos["inputs"]
    for s in catalogue.cases(["rope.axial.*", "rope.mrope.*", "rope.apply.*"]):
        assert "dy" in s.inputs, s.name
    assert any(s.inputs["x"].ndim == 4 and s.inputs["positions"].ndim == 2 for s in catalogue.cases(["rope.apply.*"]))


@pytest.mark.slow  # two generations of 40 cases (~8 s on 2 cores): the only check that --jobs cannot change bytes
def test_generation_does_not_depend_on_the_number_of_processes(tmp_path):
    only = ["rope.cos_sin.*", "alibi.*", "sinusoidal.*", "relative.t5.*"]
    runner.generate(tmp_path / "one", only=only, jobs=1)
    runner.generate(tmp_path / "two", only=only, jobs=2)
    one, two = sorted((tmp_path / "one").iterdir()), sorted((tmp_path / "two").iterdir())
    assert [p.name for p in one] == [p.name for p in two] and len(one) > 40
    for a, b in zip(one, two):
        assert a.read_bytes() == b.read_bytes(), a.name
