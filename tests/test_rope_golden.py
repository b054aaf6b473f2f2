"""RoPE against the mpmath oracle: every rope.* golden case generated into a temp dir and
verified (float64 bounds per case), published points read back from the oracle's output, and
the library's float32 path against each case's float32 tolerance."""

import numpy as np
import pytest

from posenc_np import rope
from posenc_np.golden import cases_rope, catalogue, runner
from posenc_np.testing import assert_golden, load_case


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    out = tmp_path_factory.mktemp("rope_golden")
    rows = runner.generate(out, only=["rope.*"])
    return out, rows


def test_every_rope_case_passes_its_float64_bound(suite):
    out, rows = suite
    assert len(rows) >= 30
    bad = [f"{r.case}: {r.problem}" for r in rows if not r.ok]
    assert not bad, bad
    verified = runner.verify(out)
    assert all(r.ok for r in verified), [r.problem for r in verified if not r.ok]


def test_catalogue_covers_every_scaling_type_and_layout():
    names = [c.name for c in catalogue.cases(["rope.*"])]
    for kind in ("default", "linear", "ntk", "dynamic", "yarn", "longrope", "llama3", "proportional"):
        assert any(n.startswith(f"rope.inv_freq.{kind}.") for n in names), kind
    for prefix in ("rope.apply.half.", "rope.apply.interleaved.", "rope.apply.half.partial",
                   "rope.apply.interleaved.partial", "rope.apply.half.proportional", "rope.xpos.",
                   "rope.axial.", "rope.mrope.", "rope.convert_layout.", "rope.cos_sin."):
        assert any(n.startswith(prefix) for n in names), prefix
    for c in catalogue.cases(["rope.*"]):
        assert set(c.conventions) == {"layout", "sign", "scale_placement", "semantics"}
        assert all(v for v in c.conventions.values())


def test_oracle_reproduces_published_points(suite):
    out, _ = suite
    yarn = load_case(out / "rope.inv_freq.yarn.d64_base150000.json")
    np.testing.assert_allclose(yarn.outputs["correction_range_raw"], [8.0928, 17.3980], atol=5e-5)
    np.testing.assert_array_equal(yarn.outputs["correction_range"], [8, 18])
    assert yarn.outputs["attention_factor"][0] == pytest.approx(1.346574, abs=5e-7)
    yarn128 = load_case(out / "rope.inv_freq.yarn.d128_base10000.npz")
    np.testing.assert_allclose(yarn128.outputs["correction_range_raw"], [20.94, 45.03], atol=5e-3)
    np.testing.assert_array_equal(yarn128.outputs["correction_range"], [20, 46])
    llama = load_case(out / "rope.inv_freq.llama3.d128_base500000.json")
    np.testing.assert_array_equal(llama.outputs["band_counts"], [29, 6, 29])
    at_l0 = load_case(out / "rope.inv_freq.longrope.d16.seq4096_exactly_l0.json")
    after = load_case(out / "rope.inv_freq.longrope.d16.seq4097.json")
    w = 10000.0 ** (-np.arange(0, 16, 2) / 16)
    sc = at_l0.params["scaling"]
    np.testing.assert_allclose(at_l0.outputs["inv_freq"], w / np.array(sc["short_factor"]), rtol=1e-15)
    np.testing.assert_allclose(after.outputs["inv_freq"], w / np.array(sc["long_factor"]), rtol=1e-15)


def test_assert_golden_on_loaded_case(suite):
    out, _ = suite
    case = load_case(out / "rope.apply.interleaved.d8.json")
    assert case.params["head_dim"] == case.params["rotary_dim"] == 8
    inv, af = rope.inv_freq(case.params["rotary_dim"], base=case.params["base"])
    cos, sin = rope.cos_sin(case.inputs["positions"], inv, attention_factor=af, layout="interleaved")
    y = rope.apply(case.inputs["x"], cos, sin, layout="interleaved")
    dx = rope.apply_backward(case.inputs["dy"], cos, sin, layout="interleaved")
    assert_golden({"y": y, "dx": dx}, case)
    with pytest.raises(AssertionError):  # the wrong layout is caught by the golden values
        c2, s2 = rope.cos_sin(case.inputs["positions"], inv, layout="half")
        assert_golden({"y": rope.apply(case.inputs["x"], c2, s2), "dx": dx}, case)


@pytest.mark.parametrize("name", [c.name for c in catalogue.cases(["rope.cos_sin.*"])])
def test_float32_tables_meet_the_float32_tolerance(suite, name):
    """The library's float32 tables (angles in float64, cast once) are a correct float32 implementation."""
    out, _ = suite
    case = load_case(out / f"{name}.json")
    inv, af = cases_rope.frequencies(case.params)
    cos, sin = rope.cos_sin(case.inputs["positions"], inv, attention_factor=af, layout=case.params["layout"],
                            dtype=np.float32)
    assert cos.dtype == np.float32
    assert_golden({"cos": cos, "sin": sin}, case, dtype="float32")


@pytest.mark.parametrize("name", [c.name for c in catalogue.cases(["rope.apply.*"])])
def test_float32_apply_meets_the_float32_tolerance(suite, name):
    """float32 tables and a float32 rotation of the (exactly representable) inputs."""
    out, _ = suite
    case = load_case(out / f"{name}.json")
    p, x = case.params, case.inputs["x"]
    assert np.array_equal(x.astype(np.float32), x)
    inv, af = cases_rope.frequencies(p)
    cos, sin = rope.cos_sin(case.inputs["positions"], inv, attention_factor=af, layout=p["layout"], dtype=np.float32)
    cos, sin = cases_rope.tables_for(x, case.inputs["positions"], cos, sin)
    y = rope.apply(x.astype(np.float32), cos, sin, layout=p["layout"])
    dx = rope.apply_backward(case.inputs["dy"].astype(np.float32), cos, sin, layout=p["layout"])
    assert y.dtype == np.float32
    assert_golden({"y": y, "dx": dx}, case, dtype="float32")
