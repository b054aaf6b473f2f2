"""The golden catalogue: every ``cases_<family>`` module in this package (discovered by name,
sorted), collected; importing it imports neither mpmath nor the families.

A suite version is a catalogue: version 2 is every family's ``cases()``; version 3 applies each
family's optional ``v3_changes()`` to it, ``(fields, new)``: ``{case name: {field: value}}`` replacing
fields of version-2 cases (reference calls, descriptions, tolerances, divergences) and the cases
version 3 adds. A version-2 case is never changed in place, so ``vectors/v2`` regenerates unchanged.

It is what a suite is trusted against: :func:`document_fields` gives every field of a known case's
document except its outputs (and the informational ``library_version``), never read from a file.
"""

from __future__ import annotations

import fnmatch
import importlib
import json
import pkgutil
from dataclasses import replace
from functools import cache

from . import format as fmt
from .spec import ORACLE, CaseSpec, GoldenEncoding


def family_modules() -> list[str]:
    from posenc_np import golden

    return sorted(m.name for m in pkgutil.iter_modules(golden.__path__) if m.name.startswith("cases_"))


@cache
def encodings() -> dict[str, GoldenEncoding]:
    """All registered encodings by name."""
    table: dict[str, GoldenEncoding] = {}
    for mod_name in family_modules():
        mod = importlib.import_module(f"posenc_np.golden.{mod_name}")
        for enc in mod.ENCODINGS:
            if enc.name in table:
                raise RuntimeError(f"encoding {enc.name!r} registered twice ({mod_name})")
            table[enc.name] = enc
    return table


def cases(only=None, suite: int = fmt.SCHEMA_VERSION) -> list[CaseSpec]:
    """All case specs of suite version ``suite`` (2 or 3), in catalogue order; ``only`` is a list of
    names or glob patterns."""
    if suite not in fmt.WRITTEN_VERSIONS:
        raise ValueError(f"suite version must be one of {list(fmt.WRITTEN_VERSIONS)}, got {suite!r}")
    result: list[CaseSpec] = []
    seen: set[str] = set()
    table = encodings()
    for mod_name in family_modules():
        mod = importlib.import_module(f"posenc_np.golden.{mod_name}")
        specs = mod.cases()
        if suite >= 3 and hasattr(mod, "v3_changes"):
            fields, new = mod.v3_changes()
            unknown = set(fields) - {s.name for s in specs}
            if unknown:
                raise RuntimeError(f"{mod_name}.v3_changes names unknown cases {sorted(unknown)}")
            specs = [replace(s, **fields.get(s.name, {})) for s in specs] + list(new)
        for spec in specs:
            if spec.name in seen:
                raise RuntimeError(f"case name {spec.name!r} used twice")
            if spec.encoding not in table:
                raise RuntimeError(f"case {spec.name!r} names unknown encoding {spec.encoding!r}")
            seen.add(spec.name)
            result.append(spec)
    return select(result, only)


def select(specs: list[CaseSpec], only=None) -> list[CaseSpec]:
    """The specs whose names match any of ``only`` (names or glob patterns); all when ``only`` is empty.

    Raises ``ValueError`` naming the patterns that match nothing.
    """
    if not only:
        return list(specs)
    unmatched = [p for p in only if not any(fnmatch.fnmatchcase(s.name, p) for s in specs)]
    if unmatched:
        raise ValueError(f"--only patterns matched no case: {unmatched}")
    return [s for s in specs if any(fnmatch.fnmatchcase(s.name, p) for p in only)]


@cache
def by_name(suite: int = fmt.SCHEMA_VERSION) -> dict[str, CaseSpec]:
    """Every case spec of suite version ``suite`` by name (built once per process; specs are read-only)."""
    return {s.name: s for s in cases(suite=suite)}


def document_fields(spec: CaseSpec) -> dict:
    """The case-document fields a spec determines, as JSON values (everything but outputs)."""
    def arrays(group: dict) -> dict:
        return {k: fmt.array_to_json(v) for k, v in group.items()}

    return json.loads(json.dumps({
        "name": spec.name, "encoding": spec.encoding, "description": spec.description, "params": spec.params,
        "conventions": spec.conventions, "inputs": arrays(spec.inputs), "dtype": "float64",
        "tolerances": spec.tolerances, "error_model": spec.error_model, "reference_call": spec.reference_call,
        "known_divergences": [{**d, "inputs": arrays(d["inputs"]), "outputs": arrays(d["outputs"])}
                              for d in spec.known_divergences],
        "oracle": ORACLE,
    }, allow_nan=False))
