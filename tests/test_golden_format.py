"""The golden file format: documents, arrays, JSON/NPZ bytes, index and SHA256SUMS, the committed suites."""

import hashlib
import io
import json
import shutil
import subprocess
import zipfile

import _golden_util
import numpy as np
import pytest
from _golden_util import ONE, REPO, SMALL, case_doc, copy_suite

from posenc_np.golden import catalogue, runner
from posenc_np.golden import format as fmt
from posenc_np.golden.spec import ORACLE_DIGITS, finish_oracle_output
from posenc_np.testing import assert_golden, load_case
from _support import require_tool

small_suite = _golden_util.small_suite  # fixture

V1 = REPO / "vectors" / "v1"
V2 = REPO / "vectors" / "v2"
V3 = REPO / "vectors" / "v3"


def test_generated_suite_verifies(small_suite):
    rows = runner.verify(small_suite)
    assert [r.case for r in rows] == sorted(s.name for s in catalogue.cases(SMALL))
    assert all(r.ok for r in rows), runner.format_table(rows)


def test_json_and_npz_hold_identical_content(small_suite):
    a = fmt.parse_case((small_suite / f"{ONE}.json").read_bytes(), f"{ONE}.json")
    b = fmt.parse_case((small_suite / f"{ONE}.npz").read_bytes(), f"{ONE}.npz")
    assert fmt.canonical(a) == fmt.canonical(b)


def test_case_records_everything_the_format_promises(small_suite):
    doc = case_doc(small_suite)
    assert set(doc) == set(fmt.CASE_FIELDS)
    assert doc["schema_version"] == 3 and "sha256" not in doc  # digests live in the index
    assert set(doc["conventions"]) == {"layout", "sign", "scale_placement", "semantics"}
    assert doc["oracle"]["precision_digits"] >= 50
    assert doc["conventions"]["layout"] == doc["params"]["layout"] == "interleaved"


def test_index_lists_sha256_and_size_of_the_exact_bytes(small_suite):
    index = json.loads((small_suite / "index.json").read_text())
    assert index["schema"] == "posenc-np-golden-index" and index["schema_version"] == 3 and index["pending"] == []
    listed = {f["path"]: f for c in index["cases"] for f in c["files"]}
    on_disk = {p.name for p in small_suite.iterdir()} - {"index.json", "SHA256SUMS"}
    assert set(listed) == on_disk
    for name, rec in listed.items():
        data = (small_suite / name).read_bytes()
        assert rec["sha256"] == hashlib.sha256(data).hexdigest() and rec["size"] == len(data)


def test_sha256sums_checks_with_the_standard_tool(small_suite):
    lines = (small_suite / "SHA256SUMS").read_text().splitlines()
    assert lines == sorted(lines, key=lambda s: s.split("  ")[1])
    assert {line.split("  ")[1] for line in lines} == {p.name for p in small_suite.iterdir()} - {"SHA256SUMS"}
    require_tool(shutil.which("sha256sum") is not None, "the sha256sum command", "install GNU coreutils")
    res = subprocess.run(["sha256sum", "--check", "--strict", "SHA256SUMS"], cwd=small_suite,
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_regeneration_is_byte_identical(small_suite, tmp_path):
    runner.generate(tmp_path / "again", only=SMALL)
    assert sorted(p.name for p in small_suite.iterdir()) == sorted(p.name for p in (tmp_path / "again").iterdir())
    for p in small_suite.iterdir():
        assert (tmp_path / "again" / p.name).read_bytes() == p.read_bytes(), p.name


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.pop("tolerances"), "missing keys"),
    (lambda d: d.update(tolerance={"abs": 0.0, "rel": 0.0}), 'unknown keys "tolerance"'),
    (lambda d: d["tolerances"].pop("float64"), 'must be an object with a "float64" entry'),
    (lambda d: d["tolerances"].update(float8={"abs": 0.0, "rel": 0.0}), "key \"float8\" must be one of"),
    (lambda d: d.update(reference_call=""), "reference_call must be a non-empty string"),
    (lambda d: d.update(known_divergences=[{"implementation": "x", "description": "", "inputs": {}}]),
     "known_divergences[0] is missing keys"),
    (lambda d: d["params"].update(dim=(1 << 53) + 1), "params.dim = 9007199254740993 is outside the integer range"),
    (lambda d: d["inputs"]["positions"]["data"].__setitem__(0, (1 << 53) + 1), "is not a int64"),
    (lambda d: d.update(extra=1), 'unknown keys "extra"'),
    (lambda d: d.update(sha256="0" * 64), 'unknown keys "sha256"'),
    (lambda d: d["conventions"].pop("sign"), "conventions is missing keys"),
    (lambda d: d["outputs"]["encoding"].update(data=[1.0]), "flat list"),
    (lambda d: d["outputs"]["encoding"].update(dtype="object"), "dtype must be one of"),
    (lambda d: d["outputs"]["encoding"].update(shape=[1] * 9), "must be a list of"),
    (lambda d: d["outputs"]["encoding"].update(shape=[1 << 20, 1 << 20]), "more than the limit"),
    (lambda d: d["inputs"]["positions"]["data"].__setitem__(0, "0"), "is not a int64"),
    (lambda d: d["inputs"]["positions"]["data"].__setitem__(0, 1 << 63), "is not a int64"),
    (lambda d: d["inputs"]["positions"]["data"].__setitem__(0, True), "is not a int64"),
    (lambda d: d["outputs"]["encoding"]["data"].__setitem__(0, (1 << 53) + 1), "is not a finite float64"),
    (lambda d: d["outputs"]["encoding"]["data"].__setitem__(5, float("nan")),
     "outputs.encoding.data value NaN is not a finite float64"),
    (lambda d: d["outputs"]["encoding"]["data"].__setitem__(5, float("-inf")), "value -Infinity is not a finite"),
    (lambda d: d["known_divergences"].append({"implementation": "x", "description": "", "inputs": {}, "outputs": {
        "y": {"dtype": "float64", "shape": [1], "data": [float("inf")]}}}),
     "known_divergences[0].outputs.y.data value Infinity is not a finite float64"),
    (lambda d: d["conventions"].update(layout="concat"), "disagrees with params.layout"),
    (lambda d: d["tolerances"]["float32"].update(abs=-1.0), "tolerances.float32.abs must be a number >= 0"),
    (lambda d: d["oracle"].update(precision_digits=15), "precision_digits must be an integer >= 50"),
    (lambda d: d.update(schema_version=4), "schema_version must be one of [1, 2, 3]"),
    (lambda d: d.update(schema_version=True), "schema_version must be one of"),
    (lambda d: d.update(name="Bad Name"), "name must be a case name"),
    (lambda d: d.update(outputs={}), "outputs must be an object with at least 1"),
])
def test_malformed_documents_are_rejected(small_suite, mutate, message):
    doc = case_doc(small_suite)
    mutate(doc)
    with pytest.raises(fmt.GoldenFormatError, match=message.replace("[", r"\[").replace("]", r"\]")):
        fmt.validate_case(doc)


@pytest.mark.parametrize("text, message", [
    ('{"a": NaN}', "NaN"),
    ('{"a": 1e400}', "overflows"),
    ('{"a": 1, "a": 2}', "duplicate key"),
    ("[" * 100 + "]" * 100, "nested too deeply"),
    ('{"a": ' + "7" * 30 + "}", "integer literal of 30 characters"),
    ("\xff", "not UTF-8"),
])
def test_json_limits(text, message):
    data = text.encode("latin-1")
    with pytest.raises(fmt.GoldenFormatError, match=message):
        fmt.parse_case(data, "x.json")


def _npz_with(small_suite, member, payload: bytes | None = None, array=None) -> bytes:
    """The NPZ of ONE with one member replaced (or added)."""
    if array is not None:
        buf = io.BytesIO()
        np.save(buf, array, allow_pickle=True)
        payload = buf.getvalue()
    out = io.BytesIO()
    with zipfile.ZipFile(small_suite / f"{ONE}.npz") as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            if info.filename != member:
                dst.writestr(info, src.read(info.filename))
        dst.writestr(member, payload)
    return out.getvalue()


def test_npz_with_pickled_object_is_rejected_without_unpickling(small_suite, tmp_path):
    sentinel = tmp_path / "executed"

    class Evil:
        def __reduce__(self):
            return (sentinel.touch, ())

    evil = np.array([Evil()], dtype=object)
    with pytest.raises(fmt.GoldenFormatError, match="dtype object"):
        fmt.parse_case(_npz_with(small_suite, "outputs.encoding.npy", array=evil), f"{ONE}.npz")
    with pytest.raises(fmt.GoldenFormatError, match='unexpected members "evil.npy"'):
        fmt.parse_case(_npz_with(small_suite, "evil.npy", array=evil), f"{ONE}.npz")
    assert not sentinel.exists()


def test_npz_member_with_wrong_dtype(small_suite):
    doc = case_doc(small_suite)
    data = _npz_with(small_suite, "outputs.encoding.npy", array=fmt.to_numpy(doc["outputs"]["encoding"]).astype("<f4"))
    with pytest.raises(fmt.GoldenFormatError, match="dtype float32"):
        fmt.parse_case(data, f"{ONE}.npz")


def test_npz_bool_member_holds_only_zero_and_one(small_suite):
    arr = np.frombuffer(b"\x02", dtype=np.uint8).view(bool)
    with pytest.raises(fmt.GoldenFormatError, match="bool data holds bytes other than 0 and 1"):
        fmt.parse_case(_npz_with(small_suite, "outputs.encoding.npy", array=arr), f"{ONE}.npz")


def test_not_a_zip():
    with pytest.raises(fmt.GoldenFormatError, match="not a zip archive"):
        fmt.parse_case(b"not a zip file", "x.npz")


def test_zero_dimensional_arrays_round_trip_through_npz():
    spec = catalogue.cases([ONE])[0]
    fields = {**catalogue.document_fields(spec), "inputs": {"a": fmt.array_to_json(np.array(2))}}
    doc = fmt.build_document(fields=fields, outputs={"b": np.array(0.1), "c": np.array([[True], [False]])},
                             library_version="0")
    back = fmt.parse_case(fmt.case_npz_bytes(doc), "x.npz")
    assert fmt.canonical(back) == fmt.canonical(fmt.parse_case(fmt.case_json_bytes(doc), "x.json"))
    assert back["outputs"]["b"] == {"dtype": "float64", "shape": [], "data": [0.1]}
    assert back["outputs"]["c"]["data"] == [True, False]


def test_every_case_field_is_documented():
    doc = (REPO / "docs" / "golden-format.md").read_text()
    for key in fmt.CASE_FIELDS:
        assert f"| `{key}` |" in doc, key
    for limit in ("MAX_CASE_FILE_BYTES", "MAX_INDEX_BYTES", "MAX_CASE_VALUES", "MAX_NDIM", "MAX_NPZ_MEMBERS",
                  "MAX_COMPRESSION_RATIO", "MAX_NPY_HEADER_BYTES"):
        assert f"`{limit}`" in doc, limit


# --------------------------------------------------------------------------- load_case / assert_golden

def test_load_case_and_assert_golden(small_suite):
    from posenc_np.absolute import sinusoidal

    case = load_case(small_suite / f"{ONE}.npz")
    assert case.sha256 == hashlib.sha256((small_suite / f"{ONE}.npz").read_bytes()).hexdigest()
    y = sinusoidal(case.inputs["positions"], case.params["dim"], layout=case.params["layout"])
    assert_golden(y, case)
    with pytest.raises(AssertionError, match="outside tolerance"):
        assert_golden(y + 1e-10, case)
    with pytest.raises(AssertionError, match="shape"):
        assert_golden(y[:-1], case)
    concat = sinusoidal(case.inputs["positions"], 8, layout="concat")
    with pytest.raises(AssertionError, match=ONE):
        assert_golden(concat, case)


def test_load_case_refuses_what_verify_refuses(small_suite, tmp_path):
    d = copy_suite(small_suite, tmp_path / "s")
    doc = case_doc(d)
    doc["tolerances"]["float64"]["abs"] = 1e300
    (d / f"{ONE}.json").write_bytes(fmt.case_json_bytes(doc))
    with pytest.raises(fmt.GoldenFormatError, match="differs from the one in"):
        load_case(d / f"{ONE}.json")
    (d / "index.json").unlink()  # a lone file: the catalogue still knows the case
    with pytest.raises(fmt.GoldenFormatError, match="tolerances differs from the catalogue"):
        load_case(d / f"{ONE}.json")


def test_load_case_reads_v1_files():
    case = load_case(V1 / f"{ONE}.json")
    assert case.document["schema_version"] == 1 and case.name == ONE


def test_oracle_rounds_once_to_nearest():
    import mpmath

    with mpmath.workdps(ORACLE_DIGITS):
        third = mpmath.mpf(1) / 3
        # 1/3 correctly rounded to double is the double nearest to 1/3
        assert finish_oracle_output(np.array([third], dtype=object))[0] == 1 / 3
        # a value just above a rounding midpoint rounds up, which double-rounding via a
        # shorter intermediate would get wrong
        x = mpmath.mpf(1) + mpmath.mpf(2) ** -53 + mpmath.mpf(2) ** -120
        assert finish_oracle_output(np.array([x], dtype=object))[0] == 1 + 2.0 ** -52
    with pytest.raises(TypeError):
        finish_oracle_output(np.array([0.5]))  # float64 oracle output: not from the oracle


@pytest.mark.parametrize("suite, directory", [(2, V2), (3, V3)])
def test_catalogue_names_are_unique_and_valid(suite, directory):
    specs = catalogue.cases(suite=suite)
    names = [s.name for s in specs]
    assert len(names) == len(set(names))
    committed = json.loads((directory / "index.json").read_text())["cases"]
    assert names == [c["name"] for c in sorted(committed, key=lambda c: names.index(c["name"]))]
    for s in specs:
        assert fmt.NAME_RE.match(s.name)
        assert set(s.conventions) == set(fmt.CONVENTION_KEYS)


# --------------------------------------------------------------------------- the committed suites

# Regenerating vectors/v2 byte for byte is checked by test_golden_generate's README test, which
# runs the README's main job twice and compares its output with the committed suite.


def test_committed_v1_suite_still_verifies_bit_for_bit_against_the_oracle():
    """Version 1 is trusted through the digests of its published files (golden/v1_published.json, read with
    the bounded reader), then checked on its own parameters and tolerance against the library and bit for bit
    against the oracle."""
    rows = runner.verify(V1, oracle=True)
    assert len(rows) == 89 and all(r.ok for r in rows), runner.format_table([r for r in rows if not r.ok])
    published = runner.published_v1()["files"]
    assert runner.V1_PUBLISHED_FILE == REPO / "posenc_np" / "golden" / "v1_published.json"
    assert len(published) == 178 and set(published) == {p.name for p in V1.iterdir()} - {"index.json"}
    assert published == {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in V1.iterdir()
                         if p.name != "index.json"}


def test_an_edited_v1_file_is_not_trusted_even_with_its_checksums_recomputed(tmp_path):
    d = copy_suite(V1, tmp_path / "v1")
    doc = json.loads((d / f"{ONE}.json").read_text())
    doc["tolerance"]["abs"] = 1e300
    doc["outputs"]["encoding"]["data"][0] = 12345.0
    doc["sha256"] = hashlib.sha256(fmt.canonical({k: v for k, v in doc.items() if k != "sha256"}).encode()).hexdigest()
    (d / f"{ONE}.json").write_text(json.dumps(doc))
    index = json.loads((d / "index.json").read_text())
    next(c for c in index["cases"] if c["name"] == ONE)["sha256"] = doc["sha256"]
    (d / "index.json").write_text(json.dumps(index))
    bad = [r for r in runner.verify(d) if not r.ok]
    assert [r.case for r in bad] == [ONE] and "not a published version-1 file" in bad[0].problem
    with pytest.raises(fmt.GoldenFormatError, match="not a published version-1 file"):
        load_case(d / f"{ONE}.json")


def test_v1_trust_is_read_from_its_own_file_with_the_bounded_reader(tmp_path, monkeypatch):
    """Without golden/v1_published.json (or with a link in its place) every v1 case fails, naming the file."""
    link = tmp_path / "v1_published.json"
    link.symlink_to(runner.V1_PUBLISHED_FILE)
    monkeypatch.setattr(runner, "V1_PUBLISHED_FILE", link)
    runner.published_v1.cache_clear()
    try:
        rows = runner.verify(V1)
        assert len(rows) == 89 and not any(r.ok for r in rows)
        assert all("v1_published.json: is a symbolic link" in r.problem for r in rows), rows[0].problem
        with pytest.raises(fmt.GoldenFormatError, match="is a symbolic link"):
            load_case(V1 / f"{ONE}.json")
    finally:
        runner.published_v1.cache_clear()


@pytest.mark.parametrize("suite, directory", [(2, V2), (3, V3)])
def test_committed_suites_verify(suite, directory):
    rows = runner.verify(directory)
    assert len(rows) == len(catalogue.cases(suite=suite)) and all(r.ok for r in rows), \
        runner.format_table([r for r in rows if not r.ok])
