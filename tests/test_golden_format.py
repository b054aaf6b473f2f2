"""The golden-vector machinery: format, checksums, tampering, CLI, regeneration."""

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from posenc_np import cli
from posenc_np.golden import catalogue, format as fmt, runner
from posenc_np.golden.spec import ORACLE_DIGITS, finish_oracle_output
from posenc_np.testing import assert_golden, load_case

REPO = Path(__file__).resolve().parents[1]
SUITE = REPO / "vectors" / "v1"
ONE = "sinusoidal.interleaved.d8.int"


@pytest.fixture(scope="module")
def small_suite(tmp_path_factory):
    out = tmp_path_factory.mktemp("golden")
    rows = runner.generate(out, only=["sinusoidal.*", "learned.*"])
    assert rows and all(r.ok for r in rows)
    return out


def _copy_suite(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for p in src.iterdir():
        (dst / p.name).write_bytes(p.read_bytes())
    return dst


def _failures(directory):
    return [r for r in runner.verify(directory) if not r.ok]


def test_generated_suite_verifies(small_suite):
    rows = runner.verify(small_suite)
    assert len(rows) == len(catalogue.cases(["sinusoidal.*", "learned.*"]))
    assert all(r.ok for r in rows), runner.format_table(rows)


def test_json_and_npz_hold_identical_content(small_suite):
    a = fmt.read_case_file(small_suite / f"{ONE}.json")
    b = fmt.read_case_file(small_suite / f"{ONE}.npz")
    assert a == b
    assert a["sha256"] == fmt.checksum(a)


def test_case_records_everything_the_issue_lists(small_suite):
    doc = json.loads((small_suite / f"{ONE}.json").read_text())
    for key in ("encoding", "params", "conventions", "inputs", "outputs", "dtype", "tolerance",
                "schema_version", "library_version", "oracle", "sha256"):
        assert key in doc
    assert set(doc["conventions"]) == {"layout", "sign", "scale_placement", "semantics"}
    assert doc["oracle"]["precision_digits"] >= 50
    assert doc["conventions"]["layout"] == doc["params"]["layout"] == "interleaved"


def test_checksum_is_sha256_of_canonical_json(small_suite):
    import hashlib

    doc = json.loads((small_suite / f"{ONE}.json").read_text())
    body = {k: v for k, v in doc.items() if k != "sha256"}
    canon = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()
    assert hashlib.sha256(canon).hexdigest() == doc["sha256"]


def test_regeneration_is_byte_identical(small_suite, tmp_path):
    runner.generate(tmp_path, only=["sinusoidal.*", "learned.*"])
    for p in small_suite.iterdir():
        assert (tmp_path / p.name).read_bytes() == p.read_bytes(), p.name


def test_tampered_value_fails_checksum(small_suite, tmp_path):
    d = _copy_suite(small_suite, tmp_path / "s")
    path = d / f"{ONE}.json"
    doc = json.loads(path.read_text())
    doc["outputs"]["encoding"]["data"][3] += 1e-9
    path.write_text(json.dumps(doc))
    bad = _failures(d)
    assert [r.case for r in bad] == [f"{ONE}.json"]
    assert "checksum mismatch" in bad[0].problem and str(path) in bad[0].problem


def test_tampered_value_with_recomputed_checksum_fails_recomputation(small_suite, tmp_path):
    d = _copy_suite(small_suite, tmp_path / "s")
    for ext in (".json", ".npz"):
        (d / f"{ONE}{ext}").unlink()
    doc = json.loads((small_suite / f"{ONE}.json").read_text())
    doc["outputs"]["encoding"]["data"][3] += 1e-9
    doc["sha256"] = fmt.checksum(doc)
    fmt.write_json(doc, d / f"{ONE}.json")
    bad = _failures(d)
    assert len(bad) == 1 and bad[0].case == ONE
    assert "index.json lists sha256" in bad[0].problem and "outside tolerance" in bad[0].problem


def test_broken_checksum_field(small_suite, tmp_path):
    d = _copy_suite(small_suite, tmp_path / "s")
    path = d / f"{ONE}.json"
    doc = json.loads(path.read_text())
    doc["sha256"] = "0" * 64
    path.write_text(json.dumps(doc))
    assert "checksum mismatch" in _failures(d)[0].problem


def test_wrong_schema_version(small_suite, tmp_path):
    d = _copy_suite(small_suite, tmp_path / "s")
    path = d / f"{ONE}.json"
    doc = json.loads(path.read_text())
    doc["schema_version"] = 2
    path.write_text(json.dumps(doc))
    bad = _failures(d)
    assert "schema_version must be 1" in bad[0].problem and ONE in bad[0].problem


@pytest.mark.parametrize("mutate, message", [
    (lambda d: d.pop("tolerance"), "missing keys"),
    (lambda d: d.update(extra=1), "unknown keys"),
    (lambda d: d["conventions"].pop("sign"), "conventions must be"),
    (lambda d: d["outputs"]["encoding"].update(data=[1.0]), "flat list"),
    (lambda d: d["outputs"]["encoding"].update(dtype="object"), "dtype 'object'"),
    (lambda d: d["inputs"]["positions"]["data"].__setitem__(0, "0"), "is not a int64"),
    (lambda d: d["conventions"].update(layout="concat"), "disagrees with params.layout"),
])
def test_malformed_documents_are_rejected(small_suite, mutate, message):
    doc = json.loads((small_suite / f"{ONE}.json").read_text())
    mutate(doc)
    with pytest.raises(fmt.GoldenFormatError, match=message):
        fmt.validate_document(doc, where="x", check_sum=False)


def test_nan_constant_in_json_is_rejected(small_suite, tmp_path):
    text = (small_suite / f"{ONE}.json").read_text().replace('"rel": 0.0', '"rel": NaN', 1)
    assert "NaN" in text
    path = tmp_path / f"{ONE}.json"
    path.write_text(text)
    with pytest.raises(fmt.GoldenFormatError, match="NaN"):
        fmt.read_case_file(path)


def test_npz_with_pickled_object_is_rejected_without_unpickling(small_suite, tmp_path):
    import pickle

    sentinel = tmp_path / "executed"

    class Evil:
        def __reduce__(self):
            return (Path.touch, (sentinel,))

    path = tmp_path / f"{ONE}.npz"
    with zipfile.ZipFile(small_suite / f"{ONE}.npz") as src, zipfile.ZipFile(path, "w") as dst:
        for info in src.infolist():
            dst.writestr(info, src.read(info.filename))
        import io
        buf = io.BytesIO()
        np.save(buf, np.array([Evil()], dtype=object), allow_pickle=True)
        dst.writestr("evil.npy", buf.getvalue())
    assert pickle  # the payload above is a genuine pickle
    with pytest.raises(fmt.GoldenFormatError, match="pickle") as exc:
        fmt.read_case_file(path)
    assert str(path) in str(exc.value)
    assert not sentinel.exists()


def test_npz_member_with_wrong_dtype(small_suite, tmp_path):
    import io

    path = tmp_path / f"{ONE}.npz"
    with zipfile.ZipFile(small_suite / f"{ONE}.npz") as src, zipfile.ZipFile(path, "w") as dst:
        for info in src.infolist():
            data = src.read(info.filename)
            if info.filename == "outputs.encoding.npy":
                buf = io.BytesIO()
                arr = np.load(io.BytesIO(data)).astype(np.float32)
                np.save(buf, arr)
                data = buf.getvalue()
            dst.writestr(info, data)
    with pytest.raises(fmt.GoldenFormatError, match="outputs.encoding.npy has dtype float32"):
        fmt.read_case_file(path)


def test_not_a_zip(tmp_path):
    path = tmp_path / "x.npz"
    path.write_bytes(b"not a zip file")
    with pytest.raises(fmt.GoldenFormatError, match="not a readable NPZ"):
        fmt.read_case_file(path)


def test_json_and_npz_disagree(small_suite, tmp_path):
    d = _copy_suite(small_suite, tmp_path / "s")
    other = "sinusoidal.concat.d8.int"
    doc = fmt.read_case_file(small_suite / f"{other}.json")
    doc["name"] = ONE
    doc["sha256"] = fmt.checksum(doc)
    fmt.write_npz(doc, d / f"{ONE}.npz")
    problems = " ".join(r.problem for r in _failures(d))
    assert "hold different content" in problems


def test_missing_file_listed_in_index(small_suite, tmp_path):
    d = _copy_suite(small_suite, tmp_path / "s")
    (d / f"{ONE}.json").unlink()
    (d / f"{ONE}.npz").unlink()
    bad = _failures(d)
    assert [r.case for r in bad] == [ONE] and "no file found" in bad[0].problem


def test_cli_verify_exit_codes(small_suite, tmp_path, capsys):
    assert cli.main(["golden", "verify", str(small_suite)]) == 0
    assert "passed, 0 failed" in capsys.readouterr().out
    d = _copy_suite(small_suite, tmp_path / "s")
    (d / f"{ONE}.json").write_text("{}")
    assert cli.main(["golden", "verify", str(d)]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and f"{ONE}.json" in out


def test_cli_list_and_generate(tmp_path, capsys):
    assert cli.main(["golden", "list", "--only", "timing_signal.*"]) == 0
    assert "timing_signal.d7.start3" in capsys.readouterr().out
    assert cli.main(["golden", "generate", "--out", str(tmp_path), "--format", "npz", "--only", "learned.*",
                     "--quiet"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.json", "learned.lookup_and_scatter_add.npz"]
    assert cli.main(["golden", "generate", "--out", str(tmp_path), "--only", "no-such-case"]) == 2


def test_load_case_and_assert_golden(small_suite):
    from posenc_np.absolute import sinusoidal

    case = load_case(small_suite / f"{ONE}.npz")
    y = sinusoidal(case.inputs["positions"], case.params["dim"], layout=case.params["layout"])
    assert_golden(y, case)
    with pytest.raises(AssertionError, match="outside tolerance"):
        assert_golden(y + 1e-10, case)
    with pytest.raises(AssertionError, match="shape"):
        assert_golden(y[:-1], case)
    concat = sinusoidal(case.inputs["positions"], 8, layout="concat")
    with pytest.raises(AssertionError, match=ONE):
        assert_golden(concat, case)


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


def test_catalogue_names_are_unique_and_valid():
    specs = catalogue.cases()
    names = [s.name for s in specs]
    assert len(names) == len(set(names))
    for s in specs:
        assert fmt.NAME_RE.match(s.name)
        assert set(s.conventions) == set(fmt.CONVENTION_KEYS)


def test_committed_suite_is_byte_identical_to_regeneration(tmp_path):
    assert SUITE.is_dir(), "the committed golden suite is missing"
    runner.generate(tmp_path)
    committed = sorted(p.name for p in SUITE.iterdir())
    assert committed == sorted(p.name for p in tmp_path.iterdir()), "committed suite lists different files"
    changed = [n for n in committed if (SUITE / n).read_bytes() != (tmp_path / n).read_bytes()]
    assert not changed, f"regenerated files differ from the committed suite: {changed[:5]}"


def test_committed_suite_verifies_against_library():
    rows = runner.verify(SUITE)
    assert all(r.ok for r in rows), runner.format_table([r for r in rows if not r.ok])


def test_zero_dimensional_arrays_round_trip_through_npz(tmp_path):
    conv = {"layout": "n/a", "sign": "n/a", "scale_placement": "n/a", "semantics": "n/a"}
    doc = fmt.build_document(name="scalar", encoding="e", description="", params={}, conventions=conv,
                             inputs={"a": np.array(2)}, outputs={"b": np.array(0.1)},
                             tolerance={"abs": 0.0, "rel": 0.0}, oracle={"name": "mpmath", "precision_digits": 60},
                             library_version="0")
    fmt.write_npz(doc, tmp_path / "scalar.npz")
    fmt.write_json(doc, tmp_path / "scalar.json")
    back = fmt.read_case_file(tmp_path / "scalar.npz")
    assert back == fmt.read_case_file(tmp_path / "scalar.json")
    assert back["outputs"]["b"] == {"dtype": "float64", "shape": [], "data": [0.1]}
