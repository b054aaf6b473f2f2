"""Golden-suite file format: case documents, their JSON and NPZ bytes, the index and SHA256SUMS.

Versions 3 (the default) and 2 are written (the same format; what differs is the catalogue a suite
is checked against); versions 1, 2 and 3 are read. This module is the reference implementation of
the specification in ``docs/golden-format.md``. A case document is checked against one schema
(:data:`CASE_FIELDS`, a new field is one line there) plus cross-field rules (:data:`CASE_RULES`).
Readers work on bytes read with a size bound (:mod:`.safe_io`) and check sizes, shapes and element
counts against the limits below *before* allocating; nothing read is executed or unpickled (NPZ
members are parsed from their ``.npy`` header, with a fixed list of dtypes). The index is the
manifest (each file's SHA-256 and size); ``SHA256SUMS`` repeats the digests, plus the index's.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import re
import struct
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .._files import npz_bytes
from .safe_io import GoldenFormatError, parse_json, short
from .tolerance import DTYPES as TOLERANCE_DTYPES

__all__ = ["GoldenFormatError"]  # the rest is reached as ``fmt.<name>``

SCHEMA = "posenc-np-golden"
INDEX_SCHEMA = "posenc-np-golden-index"
#: The version written by default; 2 is still written on request, 1 is still read.
SCHEMA_VERSION = 3
#: The versions generate writes (the catalogue's suites).
WRITTEN_VERSIONS = (2, 3)
INDEX = "index.json"
SUMS = "SHA256SUMS"

# --------------------------------------------------------------------------- limits
# Enforced by the readers before allocating, and by the writer on what it writes.
MAX_CASE_FILE_BYTES = 64 << 20   #: one .json or .npz file
MAX_INDEX_BYTES = 16 << 20       #: index.json and SHA256SUMS
MAX_CASE_VALUES = 1 << 22        #: elements over all arrays of one case
MAX_NDIM = 8                     #: dimensions of one array
MAX_NPZ_MEMBERS = 64             #: members of one .npz
MAX_ZIP_DIRECTORY_BYTES = 64 << 10  #: the zip central directory
MAX_NPY_HEADER_BYTES = 4096      #: one .npy header
MAX_DIVERGENCES = 16             #: known divergences listed in one case
#: A member may inflate to at most this many times its compressed size, plus 64 KiB.
MAX_COMPRESSION_RATIO = 200
_RATIO_FREE_BYTES = 64 << 10
#: Total declared uncompressed bytes of one .npz (all values as float64, plus headers and meta).
MAX_NPZ_UNCOMPRESSED = MAX_CASE_VALUES * 8 + MAX_NPZ_MEMBERS * MAX_NPY_HEADER_BYTES + (1 << 20)

#: dtype names allowed for arrays in a case, mapped to the NumPy dtype used in memory and in .npy.
ARRAY_DTYPES = {"float64": np.dtype("<f8"), "int64": np.dtype("<i8"), "bool": np.dtype("|b1")}
CONVENTION_KEYS = ("layout", "sign", "scale_placement", "semantics")
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.\-]*$")
_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_HEX_RE = re.compile(r"^[0-9a-f]{64}$")
_FILE_RE = re.compile(r"^[a-z0-9][a-z0-9_.\-]*\.(json|npz)$")
#: Largest integer magnitude anywhere in a case (int64 arrays, integers in params, integer
#: literals in float arrays): every value is then exact in a double, so a JavaScript reader
#: (or any reader parsing JSON numbers as doubles) recovers it.
MAX_EXACT_INT = 1 << 53


# A checker is ``check(value, path)``; it raises GoldenFormatError("<path> ...") or returns.
Check = Callable[[object, str], None]


def _fail(path: str, msg: str):
    raise GoldenFormatError(f"{path or 'the document'} {msg}")


def const(expected) -> Check:
    def check(v, path):
        if type(v) is not type(expected) or v != expected:
            _fail(path, f"must be {json.dumps(expected)}, got {short(v)}")
    return check


def text(pattern: re.Pattern | None = None, *, nonempty: bool = False, what: str = "") -> Check:
    def check(v, path):
        if not isinstance(v, str) or (nonempty and not v) or (pattern is not None and not pattern.match(v)):
            _fail(path, f"must be {what or ('a non-empty string' if nonempty else 'a string')}, got {short(v)}")
    return check


def integer(lo: int | None = None, hi: int | None = None) -> Check:
    def check(v, path):
        if type(v) is not int or (lo is not None and v < lo) or (hi is not None and v > hi):
            bounds = " and ".join(s for s in (lo is not None and f">= {lo}", hi is not None and f"<= {hi}") if s)
            _fail(path, f"must be an integer{' ' + bounds if bounds else ''}, got {short(v)}")
    return check


def number(lo: float | None = None) -> Check:
    def check(v, path):
        if type(v) not in (int, float) or (lo is not None and v < lo):
            _fail(path, f"must be a number{f' >= {lo}' if lo is not None else ''}, got {short(v)}")
    return check


def obj(fields: dict[str, Check], optional: dict[str, Check] | None = None) -> Check:
    """An object with exactly the keys of ``fields`` (plus any of ``optional``)."""
    optional = optional or {}

    def check(v, path):
        if not isinstance(v, dict):
            _fail(path, f"must be an object, got {short(v)}")
        missing = sorted(set(fields) - set(v))
        extra = sorted(set(v) - set(fields) - set(optional))
        if missing:
            _fail(path, f"is missing keys {missing}")
        if extra:
            _fail(path, f"has unknown keys {', '.join(short(k, 40) for k in extra)}")
        for key, value in v.items():
            (fields.get(key) or optional[key])(value, f"{path}.{key}" if path else key)
    return check


def any_object(v, path):
    if not isinstance(v, dict):
        _fail(path, f"must be an object, got {short(v)}")


def list_of(item: Check, *, min_items: int = 0, max_items: int | None = None) -> Check:
    def check(v, path):
        if not isinstance(v, list) or len(v) < min_items or (max_items is not None and len(v) > max_items):
            size = f"{min_items}..{max_items if max_items is not None else ''} items"
            _fail(path, f"must be a list of {size}, got {short(v)}")
        for i, x in enumerate(v):
            item(x, f"{path}[{i}]")
    return check


def map_of(value: Check, *, min_items: int = 0, keys: re.Pattern = _KEY_RE, what: str = "an identifier") -> Check:
    """An object whose keys match ``keys`` (identifiers) and whose values pass ``value``."""
    def check(v, path):
        if not isinstance(v, dict) or len(v) < min_items:
            _fail(path, f"must be an object with at least {min_items} entries, got {short(v)}")
        for key, x in v.items():
            if not keys.match(key):
                _fail(path, f"key {short(key, 40)} must be {what}")
            value(x, f"{path}.{key}")
    return check


def array(v, path):
    """``{"dtype", "shape", "data"}``: data flat in C order, within the limits."""
    obj({"dtype": text(), "shape": list_of(integer(lo=0), max_items=MAX_NDIM), "data": _any})(v, path)
    name, shape, data = v["dtype"], v["shape"], v["data"]
    if name not in ARRAY_DTYPES:
        _fail(f"{path}.dtype", f"must be one of {sorted(ARRAY_DTYPES)}, got {short(name)}")
    n = math.prod(shape)
    if n > MAX_CASE_VALUES:
        _fail(f"{path}.shape", f"{shape} holds {n} values, more than the limit of {MAX_CASE_VALUES}")
    if not isinstance(data, list) or len(data) != n:
        _fail(f"{path}.data", f"must be a flat list of prod(shape) = {n} values")
    fits = _FITS[name]
    for x in data:
        if not fits(x):
            _fail(f"{path}.data", f"value {short(x, 40)} is not a{' finite' if name == 'float64' else ''} {name}")


#: Which values an array of each dtype may hold: integers only within |v| <= 2^53, floats only finite
#: (JSON has no NaN or infinity, and an NPZ member holding one is refused the same way: an expected
#: NaN or infinity would make the tolerance ``abs + rel * |e|`` NaN or infinite, and pass anything).
_FITS = {
    "bool": lambda x: type(x) is bool,
    "int64": lambda x: type(x) is int and abs(x) <= MAX_EXACT_INT,
    "float64": lambda x: (type(x) is float and math.isfinite(x)) or (type(x) is int and abs(x) <= MAX_EXACT_INT),
}


def _any(v, path):
    pass


_HEX64 = text(_HEX_RE, what="64 lowercase hex digits")
_NAME = text(NAME_RE, what="a case name [a-z0-9][a-z0-9_.-]*")

def tolerances(v, path):
    """``{dtype: {"abs", "rel"}}`` for dtypes of :data:`.tolerance.DTYPES`, ``float64`` included."""
    entry = obj({"abs": number(lo=0), "rel": number(lo=0)})
    if not isinstance(v, dict) or "float64" not in v:
        _fail(path, f"must be an object with a \"float64\" entry, got {short(v)}")
    for key, tol in v.items():
        if key not in TOLERANCE_DTYPES:
            _fail(path, f"key {short(key, 40)} must be one of {list(TOLERANCE_DTYPES)}")
        entry(tol, f"{path}.{key}")


_DIVERGENCE = obj({"implementation": text(nonempty=True), "description": text(),
                   "inputs": map_of(array), "outputs": map_of(array, min_items=1)})

#: Fields of a version-2 (and version-3) case document (all required). Add a field here to extend the format.
CASE_FIELDS: dict[str, Check] = {
    "schema": const(SCHEMA),
    "schema_version": const(2),
    "name": _NAME,
    "encoding": text(nonempty=True),
    "description": text(),
    "params": any_object,
    "conventions": obj({k: text(nonempty=True) for k in CONVENTION_KEYS}),
    "inputs": map_of(array),
    "outputs": map_of(array, min_items=1),
    "dtype": const("float64"),
    "tolerances": tolerances,
    "error_model": text(nonempty=True),
    "reference_call": text(nonempty=True),
    "known_divergences": list_of(_DIVERGENCE, max_items=MAX_DIVERGENCES),
    "oracle": obj({"name": text(nonempty=True), "precision_digits": integer(lo=50)}),
    "library_version": text(nonempty=True),
}
#: Version 1: one float64 ``tolerance``, no error model, reference call or divergences, and an
#: in-document checksum.
CASE_FIELDS_V1 = {**{k: v for k, v in CASE_FIELDS.items()
                     if k not in ("tolerances", "error_model", "reference_call", "known_divergences")},
                  "schema_version": const(1), "tolerance": obj({"abs": number(lo=0), "rel": number(lo=0)}),
                  "sha256": _HEX64}
CASE_SCHEMAS = {1: obj(CASE_FIELDS_V1), 2: obj(CASE_FIELDS), 3: obj({**CASE_FIELDS, "schema_version": const(3)})}


def _conventions_agree_with_params(doc):
    for key in CONVENTION_KEYS[:3]:
        conv = doc["conventions"][key]
        if key in doc["params"] and conv != "n/a" and str(doc["params"][key]) != conv:
            _fail(f"conventions.{key}", f"= {short(conv)} disagrees with params.{key} = {short(doc['params'][key])}")


def _all_arrays(doc):
    groups = [doc[g] for g in ("inputs", "outputs")]
    groups += [d[g] for d in doc.get("known_divergences", ()) for g in ("inputs", "outputs")]
    return [a for group in groups for a in group.values()]


def _total_values_within_limit(doc):
    n = sum(math.prod(a["shape"]) for a in _all_arrays(doc))
    if n > MAX_CASE_VALUES:
        _fail("", f"holds {n} array values, more than the limit of {MAX_CASE_VALUES}")


def _params_integers_are_exact_doubles(doc):
    """Every integer in ``params`` is exact in a double (|v| <= 2^53), as every JSON reader needs."""
    stack = [(doc["params"], "params")]
    while stack:
        v, path = stack.pop()
        if type(v) is int and abs(v) > MAX_EXACT_INT:
            _fail(path, f"= {short(v)} is outside the integer range |v| <= 2^53 of the format")
        if isinstance(v, dict):
            stack.extend((x, f"{path}.{k}") for k, x in v.items())
        elif isinstance(v, list):
            stack.extend((x, f"{path}[{i}]") for i, x in enumerate(v))


#: Rules spanning several fields, run after the schema.
CASE_RULES = [_conventions_agree_with_params, _total_values_within_limit, _params_integers_are_exact_doubles]


def validate_case(doc) -> None:
    """Raise :class:`GoldenFormatError` unless ``doc`` is a well-formed case document (v1, v2 or v3)."""
    if not isinstance(doc, dict):
        _fail("", f"must be a JSON object, got {short(doc)}")
    const(SCHEMA)(doc.get("schema"), "schema")
    version = doc.get("schema_version")
    schema = CASE_SCHEMAS.get(version) if type(version) is int else None
    if schema is None:
        _fail("schema_version", f"must be one of {sorted(CASE_SCHEMAS)}, got {short(version)}")
    schema(doc, "")
    for rule in CASE_RULES:
        rule(doc)


def array_to_json(arr) -> dict:
    """``{"dtype", "shape", "data"}`` with ``data`` flat in C order (floats: shortest repr)."""
    arr = np.asarray(arr)
    name = dtype_name(arr.dtype)
    if name == "float64" and not np.all(np.isfinite(arr)):
        raise GoldenFormatError("golden arrays must be finite (JSON has no NaN/inf)")
    return {"dtype": name, "shape": list(arr.shape), "data": arr.astype(ARRAY_DTYPES[name]).ravel().tolist()}


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


def to_numpy(obj: dict) -> np.ndarray:
    """A validated array object as a NumPy array."""
    return np.array(obj["data"], dtype=ARRAY_DTYPES[obj["dtype"]]).reshape(obj["shape"])


def arrays(doc: dict, group: str) -> dict[str, np.ndarray]:
    """The ``inputs`` or ``outputs`` of a validated document as NumPy arrays."""
    return {k: to_numpy(v) for k, v in doc[group].items()}


def canonical(value) -> str:
    """Compact JSON with sorted keys: equal strings mean equal content (``-0.0`` differs from ``0.0``)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def build_document(*, fields: dict, outputs: dict, library_version: str, version: int = SCHEMA_VERSION) -> dict:
    """A version-``version`` (2 or 3) case from its catalogue ``fields`` (see :func:`catalogue_fields`) and outputs."""
    doc = {"schema": SCHEMA, "schema_version": version, **fields,
           "outputs": {k: array_to_json(v) for k, v in outputs.items()}, "library_version": library_version}
    validate_case(doc)
    return doc


def case_json_bytes(doc: dict) -> bytes:
    return (json.dumps(doc, sort_keys=True, indent=1, ensure_ascii=True, allow_nan=False) + "\n").encode("ascii")


# NPZ: "meta.npy" holds the document's JSON (UTF-8 bytes as a uint8 vector) with each input and output
# array's "data" list removed; "inputs.<key>.npy" / "outputs.<key>.npy" hold the arrays.

def case_npz_bytes(doc: dict) -> bytes:
    meta = json.loads(json.dumps(doc))
    members = {}
    for group in ("inputs", "outputs"):
        for key, arr in doc[group].items():
            members[f"{group}.{key}"] = to_numpy(arr)
            del meta[group][key]["data"]
    meta_bytes = canonical(meta).encode()
    return npz_bytes({"meta": np.frombuffer(meta_bytes, dtype=np.uint8), **members})


def parse_case(data: bytes, file_name: str) -> dict:
    """Parse and validate the bytes of a ``.json`` or ``.npz`` case file; errors name the file."""
    try:
        if file_name.endswith(".json"):
            doc = parse_json(data, "JSON")
        elif file_name.endswith(".npz"):
            doc = _parse_npz(data)
        else:
            raise GoldenFormatError("unknown case file extension (expected .json or .npz)")
        validate_case(doc)
    except GoldenFormatError as exc:
        raise GoldenFormatError(f"{file_name}: {exc}") from None
    return doc


def _zip_directory_is_small(data: bytes) -> None:
    """Bound the central directory before :mod:`zipfile` builds one object per entry."""
    eocd = data.rfind(b"PK\x05\x06", max(0, len(data) - 22 - 0xFFFF))
    if eocd < 0 or len(data) < eocd + 22:
        raise GoldenFormatError("not a zip archive (no end-of-central-directory record)")
    entries, cd_size = struct.unpack_from("<xxxxxxxxxxHI", data, eocd)
    if entries > MAX_NPZ_MEMBERS or cd_size > MAX_ZIP_DIRECTORY_BYTES:
        raise GoldenFormatError(f"zip directory of {entries} entries / {cd_size} bytes exceeds the limits "
                                f"({MAX_NPZ_MEMBERS} members, {MAX_ZIP_DIRECTORY_BYTES} bytes)")
    if eocd >= 20 and data[eocd - 20:eocd - 16] == b"PK\x06\x07":
        raise GoldenFormatError("zip64 archives are not used by the format")


def _zip_members(data: bytes) -> dict[str, bytes]:
    _zip_directory_is_small(data)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            infos = zf.infolist()
            names = [i.filename for i in infos]
            if len(infos) > MAX_NPZ_MEMBERS or len(set(names)) != len(names):
                raise GoldenFormatError(f"{len(infos)} members (limit {MAX_NPZ_MEMBERS}), names must be unique")
            total = sum(i.file_size for i in infos)
            if total > MAX_NPZ_UNCOMPRESSED:
                raise GoldenFormatError(f"members total {total} bytes uncompressed (limit {MAX_NPZ_UNCOMPRESSED})")
            for i in infos:
                if i.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED) or i.flag_bits & 0x1:
                    raise GoldenFormatError(f"member {short(i.filename)} is encrypted or uses an unsupported "
                                            "compression")
                if i.file_size > MAX_COMPRESSION_RATIO * i.compress_size + _RATIO_FREE_BYTES:
                    raise GoldenFormatError(f"member {short(i.filename)} inflates {i.compress_size} bytes to "
                                            f"{i.file_size} (limit: {MAX_COMPRESSION_RATIO}x + 64 KiB)")
            members = {}
            for i in infos:
                with zf.open(i) as f:
                    body = f.read(i.file_size + 1)
                if len(body) != i.file_size:
                    raise GoldenFormatError(f"member {short(i.filename)} is not of its declared size")
                members[i.filename] = body
            return members
    except GoldenFormatError:
        raise
    except Exception as exc:  # noqa: BLE001 - BadZipFile, zlib.error, EOFError, ...: a corrupt archive
        raise GoldenFormatError(f"not a readable zip archive: {type(exc).__name__}: {exc}") from None


_NPY_DTYPES = {dt.str for dt in ARRAY_DTYPES.values()} | {"|u1"}


def _npy(body: bytes, member: str) -> np.ndarray:
    """An array from ``.npy`` bytes; dtype, order and size checked before any allocation."""
    fp = io.BytesIO(body)
    try:
        version = np.lib.format.read_magic(fp)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(fp, max_header_size=MAX_NPY_HEADER_BYTES)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(fp, max_header_size=MAX_NPY_HEADER_BYTES)
        else:
            raise GoldenFormatError(f"member {member}: .npy version {version} (1.0 and 2.0 are read)")
    except GoldenFormatError:
        raise
    except (ValueError, SyntaxError, TypeError, EOFError) as exc:
        raise GoldenFormatError(f"member {member}: not a valid .npy header: {exc}") from None
    if dtype.str not in _NPY_DTYPES or fortran or len(shape) > MAX_NDIM:
        raise GoldenFormatError(f"member {member}: dtype {dtype} (fortran_order={fortran}, {len(shape)} dims); "
                                f"only C-order {sorted(_NPY_DTYPES)} with <= {MAX_NDIM} dims are allowed")
    n = math.prod(shape)
    if n > MAX_CASE_VALUES or n * dtype.itemsize != len(body) - fp.tell():
        raise GoldenFormatError(f"member {member}: header claims shape {shape} ({n} values of {dtype.itemsize} "
                                f"bytes), the member holds {len(body) - fp.tell()} data bytes")
    arr = np.frombuffer(body, dtype=dtype, count=n, offset=fp.tell()).reshape(shape)
    if dtype.kind == "b" and n and arr.view(np.uint8).max() > 1:
        raise GoldenFormatError(f"member {member}: bool data holds bytes other than 0 and 1")
    return arr


def _parse_npz(data: bytes) -> dict:
    members = _zip_members(data)
    if "meta.npy" not in members:
        raise GoldenFormatError("missing member meta.npy")
    meta_arr = _npy(members.pop("meta.npy"), "meta.npy")
    if meta_arr.dtype != np.uint8 or meta_arr.ndim != 1:
        raise GoldenFormatError("meta.npy must be a uint8 vector of UTF-8 JSON")
    doc = parse_json(meta_arr.tobytes(), "meta.npy")
    if not isinstance(doc, dict):
        raise GoldenFormatError("meta.npy must hold a JSON object")
    for group in ("inputs", "outputs"):
        described = doc.get(group)
        if not isinstance(described, dict):
            raise GoldenFormatError(f"meta.{group} must be an object")
        for key, meta in described.items():
            member = f"{group}.{key}.npy"
            if member not in members:
                raise GoldenFormatError(f"missing member {short(member)}")
            arr = _npy(members.pop(member), short(member))
            if not isinstance(meta, dict) or meta.get("dtype") not in ARRAY_DTYPES:
                raise GoldenFormatError(f"meta.{group}.{short(key)} must name a dtype in {sorted(ARRAY_DTYPES)}")
            if arr.dtype != ARRAY_DTYPES[meta["dtype"]] or list(arr.shape) != meta.get("shape") or "data" in meta:
                raise GoldenFormatError(f"member {member} has dtype {arr.dtype} shape {arr.shape}, "
                                        f"meta says {short(meta.get('dtype'))} {short(meta.get('shape'))}")
            meta["data"] = arr.ravel().tolist()
    if members:
        raise GoldenFormatError(f"unexpected members {', '.join(short(m, 40) for m in sorted(members))}")
    return doc


@dataclass
class CaseEntry:
    """One case of the index: its files (v2: ``path -> (sha256, size)``; v1: ``path -> None``)."""

    name: str
    encoding: str
    files: dict[str, tuple[str, int] | None]


@dataclass
class Index:
    version: int
    cases: dict[str, CaseEntry] = field(default_factory=dict)
    #: Cases planned by a generate run that has not written them yet (never in a finished suite).
    pending: list[str] = field(default_factory=list)


_FILE_RECORD = obj({"path": text(_FILE_RE, what="a case file name <name>.json or <name>.npz"), "sha256": _HEX64,
                    "size": integer(lo=0, hi=MAX_CASE_FILE_BYTES)})
INDEX_SCHEMAS = {
    1: obj({"schema": const(SCHEMA), "schema_version": const(1), "library_version": text(),
            "cases": list_of(obj({"name": _NAME, "encoding": text(nonempty=True), "sha256": _HEX64,
                                  "files": list_of(text(_FILE_RE, what="<name>.json or <name>.npz"),
                                                   min_items=1, max_items=2)}))}),
    **{v: obj({"schema": const(INDEX_SCHEMA), "schema_version": const(v), "pending": list_of(_NAME),
               "cases": list_of(obj({"name": _NAME, "encoding": text(nonempty=True),
                                     "files": list_of(_FILE_RECORD, min_items=1, max_items=2)}))})
       for v in WRITTEN_VERSIONS},
}

#: ``posenc_np/golden/v1_published.json``, shipped with the package: the SHA-256 of each published version-1 file,
#: and the parameters (under today's names) of the cases whose parameter names version 2 changed.
V1_PUBLISHED = obj({"schema": const("posenc-np-golden-v1-published"), "description": text(),
                    "files": map_of(_HEX64, min_items=1, keys=_FILE_RE, what="a case file name"),
                    "renamed_params": map_of(any_object, keys=NAME_RE, what="a case name")})


def parse_index(data: bytes) -> Index:
    """Parse and validate ``index.json`` (v1, v2 or v3); errors start with ``index.json:``."""
    try:
        raw = parse_json(data, "JSON")
        version = raw.get("schema_version") if isinstance(raw, dict) else None
        if type(version) is not int or version not in INDEX_SCHEMAS:
            _fail("schema_version", f"must be one of {sorted(INDEX_SCHEMAS)}, got {short(version)}")
        INDEX_SCHEMAS[version](raw, "")
        index = Index(version)
        for i, c in enumerate(raw["cases"]):
            if version == 1:
                files = dict.fromkeys(c["files"])
            else:
                files = {f["path"]: (f["sha256"], f["size"]) for f in c["files"]}
            if len(files) != len(c["files"]) or any(p.rsplit(".", 1)[0] != c["name"] for p in files):
                _fail(f"cases[{i}].files", f"must be {c['name']}.json and/or {c['name']}.npz, each at most once")
            if c["name"] in index.cases:
                _fail(f"cases[{i}].name", f"{c['name']} is listed twice")
            index.cases[c["name"]] = CaseEntry(c["name"], c["encoding"], files)
        for name in raw.get("pending", []):
            if name in index.cases or name in index.pending:
                _fail("pending", f"lists {name} twice (or as both written and pending)")
            index.pending.append(name)
    except GoldenFormatError as exc:
        raise GoldenFormatError(f"{INDEX}: {exc}") from None
    return index


def index_bytes(index: Index) -> bytes:
    """``index.json`` (version 2 or 3): cases sorted by name, files sorted by path."""
    doc = {
        "schema": INDEX_SCHEMA, "schema_version": index.version, "pending": sorted(index.pending),
        "cases": [{"name": e.name, "encoding": e.encoding,
                   "files": [{"path": p, "sha256": d[0], "size": d[1]} for p, d in sorted(e.files.items())]}
                  for _, e in sorted(index.cases.items())],
    }
    return (json.dumps(doc, sort_keys=True, indent=1, ensure_ascii=True) + "\n").encode("ascii")


def sums_bytes(index: Index, index_data: bytes) -> bytes:
    """``SHA256SUMS``: ``<sha256>  <file>`` for every case file and index.json, sorted by file name."""
    digests = {p: d[0] for e in index.cases.values() for p, d in e.files.items()}
    digests[INDEX] = sha256(index_data)
    return "".join(f"{d}  {p}\n" for p, d in sorted(digests.items())).encode("ascii")
