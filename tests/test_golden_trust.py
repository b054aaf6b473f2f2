"""verify cannot be fooled: trust comes from the catalogue, the index is the manifest, the report
cannot be spoofed. Each test is one failure reported against the old tooling, or the property
that any accidental or deliberate edit is reported."""

import dataclasses
import json
import random
import re

import _golden_util
import numpy as np
import pytest
from _golden_util import (
    ONE,
    SMALL,
    bad_rows,
    case_doc,
    copy_suite,
    problems,
    reseal,
    rewrite_case,
)
from hypothesis import given
from hypothesis import strategies as st

from posenc_np import cli
from posenc_np.golden import catalogue, runner
from posenc_np.golden import format as fmt
from posenc_np.golden.spec import CaseSpec
from posenc_np.testing import assert_golden, load_case

small_suite = _golden_util.small_suite  # fixture
suite = _golden_util.suite  # fixture


# --------------------------------------------------------------------------- trust from the catalogue

def test_huge_tolerance_garbage_outputs_and_recomputed_digests_fail(suite):
    doc = case_doc(suite)
    doc["tolerances"]["float64"]["abs"] = 1e300
    out = doc["outputs"]["encoding"]
    out["data"] = [12345.0] * len(out["data"])
    rewrite_case(suite, doc)
    bad = bad_rows(suite)
    assert [r.case for r in bad] == [ONE]
    assert "tolerances differs from the catalogue" in bad[0].problem
    assert "values outside tolerance" in bad[0].problem  # judged within the catalogue's tolerance


@pytest.mark.parametrize("field, edit", [
    ("params", lambda d: d["params"].update(dim=6)),
    ("inputs", lambda d: d["inputs"]["positions"]["data"].__setitem__(0, 7)),
    ("conventions", lambda d: d["conventions"].update(semantics="something else")),
    ("description", lambda d: d.update(description="harmless?")),
    ("encoding", lambda d: d.update(encoding="learned")),
])
def test_any_field_other_than_the_catalogues_fails(suite, field, edit):
    doc = case_doc(suite)
    edit(doc)
    rewrite_case(suite, doc)
    if field == "encoding":  # the index names the encoding too
        index = json.loads((suite / "index.json").read_text())
        next(c for c in index["cases"] if c["name"] == ONE)["encoding"] = "learned"
        (suite / "index.json").write_text(json.dumps(index))
        reseal(suite)
    bad = bad_rows(suite)
    assert [r.case for r in bad] == [ONE] and f"{field} differs from the catalogue" in bad[0].problem


def test_outputs_within_tolerance_pass_but_not_with_oracle(suite):
    doc = case_doc(suite)
    v = doc["outputs"]["encoding"]["data"][3]
    doc["outputs"]["encoding"]["data"][3] = float(np.nextafter(v, 2.0))
    rewrite_case(suite, doc)
    assert not bad_rows(suite)
    bad = bad_rows(suite, oracle=True)
    assert [r.case for r in bad] == [ONE] and "1 of 160 values are not the oracle's float64 bits" in bad[0].problem


def test_negative_zero_is_not_zero_for_the_oracle_check(suite):
    doc = case_doc(suite)
    data = doc["outputs"]["encoding"]["data"]
    i = data.index(0.0)
    data[i] = -0.0
    rewrite_case(suite, doc)
    assert [r.case for r in bad_rows(suite, oracle=True)] == [ONE]


def test_unknown_case_is_reported_as_unknown_and_fails_the_exit_code(suite, capsys):
    doc = case_doc(suite)
    doc["name"] = "my.own.case"
    (suite / "my.own.case.json").write_bytes(fmt.case_json_bytes(doc))
    index = fmt.parse_index((suite / "index.json").read_bytes())
    index.cases["my.own.case"] = fmt.CaseEntry("my.own.case", doc["encoding"], {"my.own.case.json": ("0" * 64, 0)})
    (suite / "index.json").write_bytes(fmt.index_bytes(index))
    reseal(suite)
    rows = runner.verify(suite)
    row = next(r for r in rows if r.case == "my.own.case")
    assert row.status == runner.UNKNOWN and not row.ok and "checked for format only" in row.problem
    assert all(r.ok for r in rows if r is not row)
    assert cli.main(["golden", "verify", str(suite)]) == 1
    out = capsys.readouterr().out
    assert "1 unknown" in out and "--allow-unknown" in out
    assert cli.main(["golden", "verify", "--allow-unknown", str(suite)]) == 0


def test_a_malformed_unknown_case_fails_rather_than_being_unknown(suite):
    doc = case_doc(suite)
    doc["name"] = "my.own.case"
    doc["params"] = {"q_len": 46000}
    (suite / "my.own.case.json").write_bytes(fmt.case_json_bytes(doc)[:-20])
    index = fmt.parse_index((suite / "index.json").read_bytes())
    index.cases["my.own.case"] = fmt.CaseEntry("my.own.case", doc["encoding"], {"my.own.case.json": ("0" * 64, 0)})
    (suite / "index.json").write_bytes(fmt.index_bytes(index))
    reseal(suite)
    row = next(r for r in runner.verify(suite) if r.case == "my.own.case")
    assert row.status == runner.FAIL and "not valid JSON" in row.problem


def test_verify_against_a_custom_catalogue(small_suite):
    """``known`` lets a caller (e.g. a suite generated for one model's config) supply the trusted specs."""
    rows = runner.verify(small_suite, known=lambda name: None)
    assert {r.status for r in rows} == {runner.UNKNOWN}
    def liar(name):
        spec = runner.catalogue.by_name()[name]
        return CaseSpec(**{**spec.__dict__, "tolerances": {"float64": {"abs": 0.0, "rel": 0.0}},
                           "params": {**spec.params}})
    assert any("tolerances differs" in r.problem for r in runner.verify(small_suite, known=liar))


# --------------------------------------------------------------------------- the index is the manifest

def test_missing_index_fails(suite):
    (suite / "index.json").unlink()
    bad = bad_rows(suite)
    assert bad[0].case == "index.json" and "missing" in bad[0].problem
    assert all(not r.ok for r in runner.verify(suite))


def test_deleted_case_is_named(suite):
    (suite / f"{ONE}.json").unlink()
    (suite / f"{ONE}.npz").unlink()
    bad = bad_rows(suite)
    assert [r.case for r in bad] == [ONE]
    assert f"{ONE}.json: listed in index.json but missing" in bad[0].problem


def test_json_gone_while_npz_remains(suite):
    (suite / f"{ONE}.json").unlink()
    bad = bad_rows(suite)
    assert [r.case for r in bad] == [ONE] and "json: listed in index.json but missing" in bad[0].problem


def test_wrong_index_schema_and_version(suite):
    index = json.loads((suite / "index.json").read_text())
    for key, value, message in (("schema", "posenc-np-golden", "schema must be"),
                                ("schema_version", 4, "schema_version must be one of")):
        (suite / "index.json").write_text(json.dumps({**index, key: value}))
        bad = bad_rows(suite)
        assert bad[0].case == "index.json" and message in bad[0].problem


def test_an_empty_suite_fails(tmp_path):
    index = fmt.Index(2)
    data = fmt.index_bytes(index)
    (tmp_path / "index.json").write_bytes(data)
    (tmp_path / "SHA256SUMS").write_bytes(fmt.sums_bytes(index, data))
    assert "lists no cases" in problems(tmp_path)


def test_duplicated_name_in_index(suite):
    index = json.loads((suite / "index.json").read_text())
    index["cases"].append(index["cases"][0])
    (suite / "index.json").write_text(json.dumps(index))
    assert "is listed twice" in bad_rows(suite)[0].problem


def test_index_cannot_point_outside_its_directory(suite):
    index = json.loads((suite / "index.json").read_text())
    index["cases"][0]["files"][0]["path"] = "../" + index["cases"][0]["files"][0]["path"]
    (suite / "index.json").write_text(json.dumps(index))
    assert "must be a case file name" in bad_rows(suite)[0].problem


def test_unlisted_files_fail(suite):
    (suite / "notes.txt").write_text("hello")
    (suite / "extra.json").write_text("{}")
    bad = bad_rows(suite)
    assert [r.case for r in bad] == ["extra.json", "notes.txt"]
    assert all("not listed in index.json" in r.problem for r in bad)


def test_pending_cases_are_named(suite):
    index = fmt.parse_index((suite / "index.json").read_bytes())
    entry = index.cases.pop(ONE)
    index.pending.append(ONE)
    for path in entry.files:
        (suite / path).unlink()
    (suite / "index.json").write_bytes(fmt.index_bytes(index))
    reseal(suite)
    bad = bad_rows(suite)
    assert [r.case for r in bad] == [ONE] and "pending" in bad[0].problem


def test_index_digest_mismatch_names_the_file(suite):
    path = suite / f"{ONE}.json"
    path.write_text(path.read_text().replace("\n ", "\n\t", 1))  # same JSON and size, other bytes
    bad = bad_rows(suite)
    assert [r.case for r in bad] == [ONE] and f"{ONE}.json: " in bad[0].problem and "index.json lists" in bad[0].problem


def test_json_and_npz_disagree(suite):
    doc = case_doc(suite)
    doc["outputs"]["encoding"]["data"][0] = float(np.nextafter(doc["outputs"]["encoding"]["data"][0], 1.0))
    (suite / f"{ONE}.npz").write_bytes(fmt.case_npz_bytes(doc))
    reseal(suite)
    assert "hold different content" in bad_rows(suite)[0].problem


def test_sha256sums_must_match(suite):
    (suite / "SHA256SUMS").write_bytes((suite / "SHA256SUMS").read_bytes().replace(b"  ", b" *", 1))
    bad = bad_rows(suite)
    assert [r.case for r in bad] == ["SHA256SUMS"]
    (suite / "SHA256SUMS").unlink()
    assert "SHA256SUMS: missing" in problems(suite)


# --------------------------------------------------------------------------- non-finite expected values

NON_FINITE = [float("nan"), float("inf"), float("-inf")]


def _npz_doc(d, name=ONE) -> dict:
    return fmt.parse_case((d / f"{name}.npz").read_bytes(), f"{name}.npz")


def _set_npz_value(d, value, name=ONE) -> None:
    """Write ``value`` into the first expected output of the case's NPZ (the NPZ writer does not check),
    and reseal the manifest: what a careless script can do."""
    doc = _npz_doc(d, name)
    doc["outputs"]["encoding"]["data"][3] = value
    (d / f"{name}.npz").write_bytes(fmt.case_npz_bytes(doc))
    reseal(d)


@pytest.fixture(scope="module")
def npz_suite(tmp_path_factory):
    """ONE and the learned case, NPZ only (``generate --format npz``)."""
    out = tmp_path_factory.mktemp("golden") / "npz"
    runner.generate(out, only=[ONE, "learned.*"], formats=("npz",))
    return out


@pytest.mark.parametrize("value", NON_FINITE, ids=repr)
def test_non_finite_expected_value_in_an_npz_only_suite_is_one_fail_row(npz_suite, tmp_path, capsys, value):
    d = copy_suite(npz_suite, tmp_path / "s")
    assert cli.main(["golden", "verify", str(d)]) == 0
    capsys.readouterr()
    _set_npz_value(d, value)
    assert cli.main(["golden", "verify", str(d)]) == 1
    out = capsys.readouterr().out
    fail_rows = [line for line in out.splitlines() if line.endswith(" FAIL")]
    assert len(fail_rows) == 1 and fail_rows[0].startswith(ONE), out
    assert f"-> {ONE}.npz: outputs.encoding.data value {json.dumps(value)} is not a finite float64" in out
    assert "1 passed, 1 failed" in out


def test_nan_in_one_npz_of_a_json_and_npz_suite_fails_that_case_and_reports_every_other(suite, capsys):
    """Once an abort of the whole verify with rc 2 ("Out of range float values are not JSON compliant")."""
    _set_npz_value(suite, float("nan"))
    assert cli.main(["golden", "verify", str(suite)]) == 1
    captured = capsys.readouterr()
    assert captured.err == ""
    rows = runner.verify(suite)
    bad = [r for r in rows if not r.ok]
    assert [r.case for r in bad] == [ONE] and f"{ONE}.npz: outputs.encoding.data value NaN" in bad[0].problem
    assert [r.case for r in rows] == sorted(s.name for s in catalogue.cases(SMALL))


@pytest.mark.parametrize("value", NON_FINITE, ids=repr)
def test_load_case_refuses_a_non_finite_expected_value_naming_file_and_array(suite, value):
    (suite / "index.json").unlink()  # a lone file: only the format and the catalogue judge it
    _set_npz_value_without_index(suite, value)
    with pytest.raises(ValueError, match=rf"{re.escape(str(suite / ONE))}\.npz: outputs\.encoding\.data value "
                                         rf"{re.escape(json.dumps(value))} is not a finite float64"):
        load_case(suite / f"{ONE}.npz")


def _set_npz_value_without_index(d, value) -> None:
    doc = _npz_doc(d)
    doc["outputs"]["encoding"]["data"][3] = value
    (d / f"{ONE}.npz").write_bytes(fmt.case_npz_bytes(doc))


@pytest.mark.parametrize("value", NON_FINITE, ids=repr)
def test_assert_golden_passes_nothing_at_a_non_finite_expected_position(small_suite, value):
    """Even for a GoldenCase built by hand (load_case refuses such a file): the bound abs + rel * |e| is then
    NaN or infinite, and no value may pass under it."""
    case = load_case(small_suite / f"{ONE}.npz")
    expected = case.outputs["encoding"].copy()
    expected.flat[3] = value
    tampered = dataclasses.replace(case, outputs={"encoding": expected})
    where = re.escape(str(tuple(map(int, np.unravel_index(3, expected.shape)))))
    for actual in (case.outputs["encoding"], expected):  # the right value, and the non-finite one itself
        with pytest.raises(AssertionError, match=rf"1 of \d+ values outside tolerance.*first at {where}"):
            assert_golden(actual, tampered)
    assert_golden(case.outputs["encoding"], case)  # the untampered case passes the same values


# --------------------------------------------------------------------------- the report cannot be spoofed

def test_control_characters_are_escaped_in_the_report(suite, capsys):
    evil = "x\x1b[2J\x1b[32mALL 89 CASES PASSED\x1b[0m\r\u202e.json"
    (suite / evil).write_text("{}")
    assert cli.main(["golden", "verify", str(suite)]) == 1
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\r" not in out and "\u202e" not in out
    assert "x\\x1b[2J\\x1b[32mALL 89 CASES PASSED\\x1b[0m\\x0d\\u202e.json" in out


# --------------------------------------------------------------------------- properties

def _all_files(d):
    return sorted(p.name for p in d.iterdir())


@given(data=st.data())
def test_any_single_byte_edit_is_reported(small_suite, tmp_path_factory, data):
    d = copy_suite(small_suite, tmp_path_factory.mktemp("edit") / "s")
    name = data.draw(st.sampled_from(_all_files(d)), label="file")
    blob = bytearray((d / name).read_bytes())
    pos = data.draw(st.integers(0, len(blob) - 1), label="position")
    blob[pos] = (blob[pos] + data.draw(st.integers(1, 255), label="delta")) % 256
    (d / name).write_bytes(bytes(blob))
    assert bad_rows(d), f"edit of byte {pos} of {name} went unnoticed"


def _leaves(value, path=()):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(value, list) and value and not isinstance(value[0], (dict, list)):
        for i in range(len(value)):
            yield (*path, i)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _leaves(v, (*path, i))
    else:
        yield path


def _changed(v, rnd: random.Random):
    if isinstance(v, bool):
        return not v
    if isinstance(v, int):
        return v + rnd.choice([-1, 1])
    if isinstance(v, float):
        return float(np.nextafter(v, rnd.choice([-np.inf, np.inf]))) if v != 0 else rnd.choice([-0.0, 1e-300])
    return 0 if v is None else v + "x"


@pytest.fixture(scope="module")
def json_suite(tmp_path_factory):
    """Three cases of three encodings (int, float and grid inputs), JSON only: a cheap --oracle."""
    out = tmp_path_factory.mktemp("golden") / "json"
    runner.generate(out, only=[ONE, "learned.*", "timing_signal.d7.*"], formats=("json",))
    return out


@given(data=st.data())
def test_any_single_value_edit_with_recomputed_digests_is_reported(json_suite, tmp_path_factory, data):
    """What an attacker (or a careless script) can do: change one value and rewrite every digest.
    Everything but the informational library_version is checked against the catalogue or, with
    --oracle, the oracle's bits."""
    d = copy_suite(json_suite, tmp_path_factory.mktemp("edit") / "s")
    name = data.draw(st.sampled_from(sorted(p.stem for p in d.glob("*.json") if p.name != "index.json")))
    doc = case_doc(d, name)
    leaves = [p for p in _leaves(doc) if p != ("library_version",)]
    path = data.draw(st.sampled_from(leaves), label="leaf")
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = _changed(parent[path[-1]], random.Random(data.draw(st.integers(0, 2**32))))
    rewrite_case(d, doc, name)
    assert name in [r.case for r in bad_rows(d, oracle=True)], f"edit of {path} in {name} went unnoticed"
