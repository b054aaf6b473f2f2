"""Golden-case file format, version 1: canonical content, checksum, JSON and NPZ I/O.

The format is specified for readers in other languages in ``docs/golden-format.md``;
this module is its reference implementation. Nothing read from a case file is ever
executed or unpickled: JSON is parsed with :func:`json.loads` and validated field by
field, NPZ members are loaded with ``allow_pickle=False`` and their dtypes checked.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import re
import zipfile
from pathlib import Path

import numpy as np

SCHEMA = "posenc-np-golden"
SCHEMA_VERSION = 1

#: dtype names allowed for arrays in a case, mapped to the NumPy dtype used in memory.
ARRAY_DTYPES = {"float64": np.dtype("<f8"), "int64": np.dtype("<i8"), "bool": np.dtype("bool")}
CONVENTION_KEYS = ("layout", "sign", "scale_placement", "semantics")
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.\-]*$")
#: Fixed timestamp for NPZ members, so that regenerating a suite is byte-identical.
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)
_TOP_KEYS = {
    "schema", "schema_version", "name", "encoding", "description", "params", "conventions",
    "inputs", "outputs", "dtype", "tolerance", "oracle", "library_version", "sha256",
}


class GoldenFormatError(ValueError):
    """A case file that does not follow the format (or fails its checksum)."""


# --------------------------------------------------------------------------- arrays

def array_to_json(arr: np.ndarray) -> dict:
    """``{"dtype", "shape", "data"}`` with ``data`` flat in C order (floats: shortest repr)."""
    arr = np.asarray(arr)
    name = dtype_name(arr.dtype)
    if name == "float64":
        if not np.all(np.isfinite(arr)):
            raise GoldenFormatError("golden arrays must be finite (JSON has no NaN/inf)")
        data = [float(v) for v in arr.ravel()]
    elif name == "int64":
        data = [int(v) for v in arr.ravel()]
    else:
        data = [bool(v) for v in arr.ravel()]
    return {"dtype": name, "shape": list(arr.shape), "data": data}


def dtype_name(dt) -> str:
    dt = np.dtype(dt)
    if dt.kind == "f":
        if dt.itemsize != 8:
            raise GoldenFormatError(f"golden float arrays must be float64, got {dt}")
        return "float64"
    if dt.kind in "iu":
        return "int64"
    if dt.kind == "b":
        return "bool"
    raise GoldenFormatError(f"unsupported array dtype {dt} (allowed: {sorted(ARRAY_DTYPES)})")


def array_from_json(obj, where: str) -> np.ndarray:
    if not isinstance(obj, dict) or set(obj) != {"dtype", "shape", "data"}:
        raise GoldenFormatError(f"{where}: an array must be an object with keys dtype, shape, data")
    name, shape, data = obj["dtype"], obj["shape"], obj["data"]
    if name not in ARRAY_DTYPES:
        raise GoldenFormatError(f"{where}: dtype {name!r} not one of {sorted(ARRAY_DTYPES)}")
    if not isinstance(shape, list) or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape):
        raise GoldenFormatError(f"{where}: shape must be a list of non-negative integers")
    if not isinstance(data, list) or len(data) != math.prod(shape):
        raise GoldenFormatError(f"{where}: data must be a flat list of prod(shape) = {math.prod(shape)} values")
    kinds = {"float64": (int, float), "int64": (int,), "bool": (bool,)}[name]
    for v in data:
        if not isinstance(v, kinds) or (name != "bool" and isinstance(v, bool)):
            raise GoldenFormatError(f"{where}: value {v!r} is not a {name}")
    return np.array(data, dtype=ARRAY_DTYPES[name]).reshape(shape)


# --------------------------------------------------------------------------- canonical content

def canonical_bytes(doc: dict) -> bytes:
    """UTF-8 of the case as compact JSON with sorted keys and no ``sha256`` field."""
    body = {k: v for k, v in doc.items() if k != "sha256"}
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()


def checksum(doc: dict) -> str:
    return hashlib.sha256(canonical_bytes(doc)).hexdigest()


def build_document(*, name, encoding, description, params, conventions, inputs, outputs,
                   tolerance, oracle, library_version) -> dict:
    """Assemble a case document (arrays as JSON objects) and stamp its checksum."""
    doc = {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "name": name,
        "encoding": encoding,
        "description": description,
        "params": params,
        "conventions": conventions,
        "inputs": {k: array_to_json(v) for k, v in inputs.items()},
        "outputs": {k: array_to_json(v) for k, v in outputs.items()},
        "dtype": "float64",
        "tolerance": tolerance,
        "oracle": oracle,
        "library_version": library_version,
    }
    # Round-trip through JSON so that tuples become lists etc. before hashing.
    doc = json.loads(json.dumps(doc, allow_nan=False))
    validate_document(doc, where=name, check_sum=False)
    doc["sha256"] = checksum(doc)
    return doc


# --------------------------------------------------------------------------- validation

def _need(cond: bool, where: str, msg: str) -> None:
    if not cond:
        raise GoldenFormatError(f"{where}: {msg}")


def validate_document(doc, *, where: str, check_sum: bool = True) -> None:
    """Raise :class:`GoldenFormatError` unless ``doc`` is a well-formed v1 case."""
    _need(isinstance(doc, dict), where, "top level must be a JSON object")
    _need(doc.get("schema") == SCHEMA, where, f"schema must be {SCHEMA!r}, got {doc.get('schema')!r}")
    _need(doc.get("schema_version") == SCHEMA_VERSION, where,
          f"schema_version must be {SCHEMA_VERSION}, got {doc.get('schema_version')!r}")
    required = _TOP_KEYS - ({"sha256"} if not check_sum else set())
    missing = required - set(doc)
    extra = set(doc) - _TOP_KEYS
    _need(not missing, where, f"missing keys {sorted(missing)}")
    _need(not extra, where, f"unknown keys {sorted(extra)}")
    _need(isinstance(doc["name"], str) and bool(NAME_RE.match(doc["name"])), where,
          "name must match [a-z0-9][a-z0-9_.-]*")
    for key in ("encoding", "library_version"):
        _need(isinstance(doc[key], str) and doc[key] != "", where, f"{key} must be a non-empty string")
    _need(isinstance(doc["description"], str), where, "description must be a string")
    _need(isinstance(doc["params"], dict), where, "params must be an object")
    conv = doc["conventions"]
    _need(isinstance(conv, dict) and set(conv) == set(CONVENTION_KEYS)
          and all(isinstance(v, str) and v for v in conv.values()), where,
          f"conventions must be an object with string values for exactly {list(CONVENTION_KEYS)}")
    for key in CONVENTION_KEYS[:3]:
        if key in doc["params"] and conv[key] != "n/a":
            _need(str(doc["params"][key]) == conv[key], where,
                  f"conventions.{key}={conv[key]!r} disagrees with params.{key}={doc['params'][key]!r}")
    _need(doc["dtype"] == "float64", where, "dtype must be 'float64'")
    tol = doc["tolerance"]
    _need(isinstance(tol, dict) and set(tol) == {"abs", "rel"}
          and all(isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in tol.values()),
          where, "tolerance must be {'abs': number >= 0, 'rel': number >= 0}")
    orc = doc["oracle"]
    _need(isinstance(orc, dict) and set(orc) == {"name", "precision_digits"}
          and isinstance(orc["name"], str) and isinstance(orc["precision_digits"], int)
          and orc["precision_digits"] >= 50, where,
          "oracle must be {'name': str, 'precision_digits': int >= 50}")
    for group in ("inputs", "outputs"):
        arrays = doc[group]
        _need(isinstance(arrays, dict), where, f"{group} must be an object of arrays")
        for k, v in arrays.items():
            _need(isinstance(k, str) and bool(re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", k)), where,
                  f"{group} key {k!r} must be an identifier")
            array_from_json(v, f"{where}: {group}.{k}")
    _need(len(doc["outputs"]) > 0, where, "a case needs at least one output")
    if check_sum:
        _need(isinstance(doc["sha256"], str) and re.match(r"^[0-9a-f]{64}$", doc["sha256"]) is not None,
              where, "sha256 must be 64 lowercase hex digits")
        actual = checksum(doc)
        _need(actual == doc["sha256"], where,
              f"checksum mismatch: file says {doc['sha256'][:16]}..., content hashes to {actual[:16]}... "
              "(the file was modified after it was generated)")


# --------------------------------------------------------------------------- JSON files

def write_json(doc: dict, path: Path) -> None:
    text = json.dumps(doc, sort_keys=True, indent=1, ensure_ascii=True, allow_nan=False)
    Path(path).write_text(text + "\n", encoding="ascii")


def read_json(path: Path) -> dict:
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise GoldenFormatError(f"{path}: not valid JSON: {exc}") from exc
    validate_document(doc, where=str(path))
    return doc


def _reject_constant(name):
    raise GoldenFormatError(f"non-standard JSON constant {name} (NaN/Infinity are not allowed)")


# --------------------------------------------------------------------------- NPZ files
# Members: "meta.npy" holds the document's JSON (UTF-8 bytes as a uint8 vector) with every
# array's "data" list removed; "inputs.<key>.npy" / "outputs.<key>.npy" hold the arrays.

def _npy_bytes(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.asarray(arr, order="C"), allow_pickle=False)  # keeps 0-d shape
    return buf.getvalue()


def write_npz(doc: dict, path: Path) -> None:
    meta = json.loads(json.dumps(doc))
    members = {}
    for group in ("inputs", "outputs"):
        for key, obj in doc[group].items():
            members[f"{group}.{key}.npy"] = array_from_json(obj, f"{group}.{key}")
            del meta[group][key]["data"]
    meta_bytes = json.dumps(meta, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()
    members = {"meta.npy": np.frombuffer(meta_bytes, dtype=np.uint8), **members}
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for member, arr in members.items():
            info = zipfile.ZipInfo(member, date_time=_ZIP_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            zf.writestr(info, _npy_bytes(arr), compresslevel=9)


def read_npz(path: Path) -> dict:
    """Read an NPZ case back into the same document a JSON file would give."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as npz:
            names = list(npz.files)
            if "meta" not in names:
                raise GoldenFormatError(f"{path}: missing member meta.npy")
            arrays = {}
            for name in names:
                try:
                    arrays[name] = npz[name]
                except ValueError as exc:  # numpy refuses object arrays without pickle
                    raise GoldenFormatError(f"{path}: member {name}.npy cannot be loaded without pickle "
                                            f"({exc}); case files never contain pickled objects") from exc
    except GoldenFormatError:
        raise
    except (OSError, zipfile.BadZipFile, ValueError, EOFError) as exc:
        raise GoldenFormatError(f"{path}: not a readable NPZ file: {exc}") from exc
    meta_arr = arrays.pop("meta")
    if meta_arr.dtype != np.uint8 or meta_arr.ndim != 1:
        raise GoldenFormatError(f"{path}: meta.npy must be a uint8 vector of UTF-8 JSON")
    try:
        doc = json.loads(meta_arr.tobytes().decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise GoldenFormatError(f"{path}: meta.npy is not valid JSON: {exc}") from exc
    if not isinstance(doc, dict):
        raise GoldenFormatError(f"{path}: meta.npy must hold a JSON object")
    for group in ("inputs", "outputs"):
        described = doc.get(group)
        if not isinstance(described, dict):
            raise GoldenFormatError(f"{path}: meta.{group} must be an object")
        for key, obj in described.items():
            member = f"{group}.{key}"
            if member not in arrays:
                raise GoldenFormatError(f"{path}: missing member {member}.npy")
            arr = arrays.pop(member)
            if not isinstance(obj, dict) or obj.get("dtype") not in ARRAY_DTYPES:
                raise GoldenFormatError(f"{path}: meta.{member} must name a dtype in {sorted(ARRAY_DTYPES)}")
            if arr.dtype != ARRAY_DTYPES[obj["dtype"]] or list(arr.shape) != obj.get("shape"):
                raise GoldenFormatError(f"{path}: member {member}.npy has dtype {arr.dtype} shape {arr.shape}, "
                                        f"meta says {obj.get('dtype')} {obj.get('shape')}")
            described[key] = array_to_json(arr)
    if arrays:
        raise GoldenFormatError(f"{path}: unexpected members {sorted(a + '.npy' for a in arrays)}")
    validate_document(doc, where=str(path))
    return doc


def read_case_file(path) -> dict:
    """Read and validate a ``.json`` or ``.npz`` case file."""
    path = Path(os.fspath(path))
    if path.suffix == ".json":
        return read_json(path)
    if path.suffix == ".npz":
        return read_npz(path)
    raise GoldenFormatError(f"{path}: unknown case file extension {path.suffix!r} (expected .json or .npz)")


def arrays(doc: dict, group: str) -> dict[str, np.ndarray]:
    """The ``inputs`` or ``outputs`` of a validated document as NumPy arrays."""
    return {k: array_from_json(v, f"{doc['name']}: {group}.{k}") for k, v in doc[group].items()}
