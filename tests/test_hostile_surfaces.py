"""Property-based sweep of the surfaces that read what a user or an earlier run left behind
(issue 26): the KV cache handed to ``decode_step``, checkpoint files, and the study's cell and
results files. ``tests/test_hostile_inputs.py`` does the same for the encodings' arguments (and
for the precision API, whose entries are in its registry).

Each example takes one valid object (a cache filled by a forward pass, a checkpoint written by
``save_checkpoint``, a cell file and a results file written by the study) and damages it the way
a careless or hostile user would: a field replaced by a value of the hostile pool, bytes flipped
or cut off, a JSON value swapped for another type, a file replaced by a FIFO, a directory or a
link to ``/dev/zero``. The property: the reader refuses with ``ValueError``/``TypeError`` (naming
the file, for files), or what it returns is what a valid object gives: finite logits of the
right shape, the very parameters that were saved, a cell or results document of the right form.
A refused checkpoint leaves the model untouched. Any other exception fails, and so does a NumPy
``RuntimeWarning``.

Bounded like the encodings' sweep: ``SWEEP_EXAMPLES`` (default 15) examples per property.
"""

from __future__ import annotations

import copy
import json
import os
import warnings
import zipfile
from collections import Counter
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from posenc_np.model import KVCache, ModelConfig, Transformer
from posenc_np.optim import Adam
from posenc_np.study import grid, quick_config
from posenc_np.study.report import load_results
from posenc_np.study.store import ResultStore
from posenc_np.train import load_checkpoint, save_checkpoint
from test_hostile_inputs import variants

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = int(os.environ.get("SWEEP_EXAMPLES", "15"))
SWEEP = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
CFG = {"vocab_size": 10, "d_model": 8, "n_heads": 2, "n_layers": 2, "d_ff": 16, "max_len": 16, "position": "rope",
       "seed": 0}

#: JSON values of every type, nested a little: what a hand-edited file may hold in any place
JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False)
                           | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                                     max_size=3),
                           max_leaves=6)


def _strict(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` with NumPy RuntimeWarnings as errors; ValueError/TypeError -> the exception."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        try:
            return fn(*args, **kwargs), None
        except (ValueError, TypeError) as exc:
            return None, exc


def _mutate_json(doc, data, label: str):
    """``doc`` (a JSON tree) with one value somewhere replaced, or one key removed or added."""
    doc = copy.deepcopy(doc)
    node, path = doc, []
    while True:  # walk down a random path
        keys = list(node) if isinstance(node, dict) else list(range(len(node))) if isinstance(node, list) else []
        if not keys or (path and data.draw(st.booleans(), label=f"{label}: stop at {path}")):
            break
        key = data.draw(st.sampled_from(keys[:50]), label=f"{label}: key")
        if not isinstance(node[key], (dict, list)) or not node[key]:
            break
        node, path = node[key], path + [key]
    keys = list(node) if isinstance(node, dict) else list(range(len(node)))
    if not keys:
        return doc
    key = data.draw(st.sampled_from(keys[:50]), label=f"{label}: changed key")
    action = data.draw(st.sampled_from(["replace", "remove", "add"] if isinstance(node, dict) else ["replace"]),
                       label=f"{label}: action")
    if action == "replace":
        node[key] = data.draw(JSON_VALUES, label=f"{label}: new value")
    elif action == "remove":
        del node[key]
    else:
        node[data.draw(st.text(min_size=1, max_size=6), label=f"{label}: new key")] = data.draw(JSON_VALUES)
    return doc


def _damage_bytes(raw: bytes, data, label: str) -> bytes:
    """``raw`` cut short, with bytes flipped, or with junk appended."""
    how = data.draw(st.sampled_from(["truncate", "flip", "append"]), label=f"{label}: damage")
    if how == "truncate":
        return raw[:data.draw(st.integers(0, len(raw) - 1), label=f"{label}: length")]
    if how == "append":
        return raw + data.draw(st.binary(min_size=1, max_size=64), label=f"{label}: junk")
    out = bytearray(raw)
    for _ in range(data.draw(st.integers(1, 4), label=f"{label}: flips")):
        i = data.draw(st.integers(0, len(out) - 1), label=f"{label}: offset")
        out[i] ^= data.draw(st.integers(1, 255), label=f"{label}: mask")
    return bytes(out)


def _place(path: Path, data, content: bytes, label: str) -> None:
    """Put ``content`` at ``path``, or (sometimes) something that is not a regular file."""
    kind = data.draw(st.sampled_from(["file"] * 6 + ["directory", "fifo", "dev-zero link", "dangling link"]),
                     label=f"{label}: kind")
    if kind == "file":
        path.write_bytes(content)
    elif kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero" if kind == "dev-zero link" else path.with_name("missing"))


def _fresh(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("hostile")


# ----------------------------------------------------------------------------------- KV cache


def _filled_cache(model: Transformer) -> KVCache:
    cache = KVCache()
    model.forward(np.array([[1, 2, 3], [4, 5, 6]]), cache=cache)
    return cache


@pytest.mark.slow
@SWEEP
@given(data=st.data())
def test_a_damaged_kv_cache_is_refused_or_decodes_finite_logits(data):
    model = Transformer(ModelConfig(**CFG))
    cache = _filled_cache(model)
    assert np.all(np.isfinite(model.decode_step(np.array([7, 8]), copy.deepcopy(cache))))  # undamaged: decodes
    field = data.draw(st.sampled_from(["length", "keys", "values", "keys item", "values item", "extra", "cache"]))
    if field == "length":
        cache.length = data.draw(st.sampled_from(variants(cache.length)), label="length")
    elif field in ("keys", "values"):
        arrays = getattr(cache, field)
        how = data.draw(st.sampled_from(["drop", "repeat", "swap", "none", "tuple"]), label=f"{field}: how")
        new = {"drop": arrays[:-1], "repeat": arrays + arrays[-1:], "swap": arrays[::-1], "none": None,
               "tuple": tuple(arrays)}[how]
        setattr(cache, field, new)
    elif field in ("keys item", "values item"):
        arrays = getattr(cache, field.split()[0])
        i = data.draw(st.integers(0, len(arrays) - 1), label="layer")
        arrays[i] = data.draw(st.sampled_from(variants(arrays[i])), label="array")
    elif field == "extra":
        cache.extra = data.draw(st.sampled_from(variants(dict(cache.extra) or {"inv_freq": 1.0})), label="extra")
    else:
        cache = data.draw(st.sampled_from(variants(cache.length)), label="cache")
    length = getattr(cache, "length", None)
    logits, exc = _strict(model.decode_step, np.array([7, 8]), cache)
    if exc is not None:
        return
    assert logits.shape == (2, CFG["vocab_size"]) and logits.dtype.kind == "f", logits
    assert np.all(np.isfinite(logits)), f"{field}: non-finite logits {logits}"
    assert cache.length == length + 1
    assert len(cache.keys) == len(cache.values) == CFG["n_layers"]
    assert all(k.shape[-2] == cache.length and k.dtype.kind == "f" for k in (*cache.keys, *cache.values))


# ----------------------------------------------------------------------------------- checkpoints


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """(bytes of a valid checkpoint, the parameters it holds)."""
    model = Transformer(ModelConfig(**CFG))
    path = _fresh(tmp_path_factory) / "model.npz"
    save_checkpoint(path, model, Adam(model.params), 3, np.random.default_rng(0).bit_generator.state,
                    extra={"note": "x"})
    return path.read_bytes(), {k: v.copy() for k, v in model.params.items()}


@pytest.mark.slow
@SWEEP
@given(data=st.data())
def test_a_damaged_checkpoint_is_refused_naming_the_file_and_leaves_the_model_alone(checkpoint, data,
                                                                                   tmp_path_factory):
    raw, saved = checkpoint
    path = _fresh(tmp_path_factory) / "model.npz"
    _place(path, data, _damage_bytes(raw, data, "checkpoint"), "checkpoint")
    model = Transformer(ModelConfig(**{**CFG, "seed": 1}))
    before = {k: v.copy() for k, v in model.params.items()}
    got, exc = _strict(load_checkpoint, path, model)
    if exc is not None:
        assert str(path) in str(exc), f"the error does not name the file: {exc}"
        for k, v in model.params.items():
            np.testing.assert_array_equal(v, before[k], err_msg=f"a refused checkpoint changed parameter {k}")
        return
    # the damage did not touch what is read (e.g. junk after the archive): the saved values, exactly
    for k, v in got.model.params.items():
        np.testing.assert_array_equal(v, saved[k], err_msg=f"a damaged checkpoint loaded other values for {k}")


#: (what is damaged, ZIP record signature, byte offset in the record, new 16-bit value): fields a
#: random flip reaches about once in a hundred examples, which ``zipfile`` answers with
#: NotImplementedError or RuntimeError rather than BadZipFile
ZIP_FIELDS = [
    ("version needed, central directory", b"PK\x01\x02", 6, 0x94),
    ("compression method, central directory", b"PK\x01\x02", 10, 99),
    ("encryption flag, central directory", b"PK\x01\x02", 8, 0x1),
]


@pytest.mark.parametrize("what, signature, offset, value", ZIP_FIELDS, ids=[f[0] for f in ZIP_FIELDS])
def test_a_checkpoint_with_an_unreadable_zip_feature_is_refused(checkpoint, tmp_path, what, signature, offset,
                                                                value):
    raw, _ = checkpoint
    at = raw.rindex(signature) + offset  # the last member's record
    path = tmp_path / "model.npz"
    path.write_bytes(raw[:at] + value.to_bytes(2, "little") + raw[at + 2:])
    got, exc = _strict(load_checkpoint, path, Transformer(ModelConfig(**CFG)))
    assert got is None and isinstance(exc, ValueError) and str(path) in str(exc), (what, got, exc)


def test_a_checkpoint_member_longer_than_its_array_is_refused(checkpoint, tmp_path):
    """The reader reads each member to its end, which is also what makes zipfile check the CRC-32."""
    raw, _ = checkpoint
    src, path = tmp_path / "src.npz", tmp_path / "model.npz"
    src.write_bytes(raw)
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(path, "w") as zout:
        for info in zin.infolist():
            body = zin.read(info)
            zout.writestr(info, body + b"\0" * 8 if info.filename == "param.tok_emb.weight.npy" else body)
    got, exc = _strict(load_checkpoint, path, Transformer(ModelConfig(**CFG)))
    assert got is None and "holds bytes after" in str(exc), exc


# ----------------------------------------------------------------------------------- study files


@pytest.fixture(scope="module")
def results_doc():
    """The published study results, cut to two seeds per cell (the report still builds from it)."""
    doc = json.loads((ROOT / "docs" / "study_results" / "results.json").read_text())
    seen, records = Counter(), []
    for r in doc["records"]:
        key = (r["part"], r.get("encoding"), r.get("task"), r.get("training"))
        if seen[key] < 2:
            records.append(r)
            seen[key] += 1
    return {**doc, "records": records}


@pytest.mark.slow
@SWEEP
@given(data=st.data())
def test_a_damaged_results_file_is_refused_naming_the_file_or_reads_as_a_results_file(results_doc, data,
                                                                                     tmp_path_factory):
    out = _fresh(tmp_path_factory)
    path = out / "results.json"
    if data.draw(st.booleans(), label="damage the bytes (else the JSON)"):
        content = _damage_bytes(json.dumps(results_doc).encode(), data, "results")
    else:
        content = json.dumps(_mutate_json(results_doc, data, "results")).encode()
    _place(path, data, content, "results")
    doc, exc = _strict(load_results, out)
    if exc is not None:
        assert str(path) in str(exc), f"the error does not name the file: {exc}"
        return
    assert isinstance(doc, dict) and isinstance(doc["records"], list)


@pytest.mark.slow
@SWEEP
@given(data=st.data())
def test_a_damaged_cell_file_counts_as_not_finished_or_is_refused_naming_it(data, tmp_path_factory):
    cfg = json.loads(json.dumps(asdict(quick_config())))  # as the runner stores it
    cell = grid(quick_config())[0]
    good = {"cell": cell, "records": [{"loss": 1.0}], "status": "ok"}
    store = ResultStore(_fresh(tmp_path_factory), cfg)
    store.prepare()
    store.save(good)
    path = Path(store.path(cell))
    assert store.load(cell)["records"] == good["records"]  # the undamaged file is a finished cell
    valid = json.loads(path.read_text())
    if data.draw(st.booleans(), label="damage the bytes (else the JSON)"):
        content = _damage_bytes(path.read_bytes(), data, "cell")
    else:
        content = json.dumps(_mutate_json(valid, data, "cell")).encode()
    path.unlink()
    _place(path, data, content, "cell")
    got, exc = _strict(store.load, cell)
    if exc is not None:
        assert str(path) in str(exc), f"the error does not name the file: {exc}"
        return
    assert got is None or (got["cell"] == cell and got["status"] in ("ok", "error")
                           and isinstance(got["records"], list)), got
