"""``posenc-np golden audit``: which cases catch each perturbation of each case parameter (the rules
and the results: ``docs/golden-format.md``, "The suite's teeth")."""

from __future__ import annotations

import warnings
from collections import defaultdict

import numpy as np

from . import catalogue, runner
from .spec import CaseSpec

#: Cases that must catch each perturbation.
MIN_CATCHES = 2


def _changes(value, choices: set) -> list[tuple[str, object]]:
    if isinstance(value, bool):
        return [("flipped", not value)]
    if isinstance(value, str):
        return [(f"-> {c}", c) for c in sorted(choices - {value})]
    if isinstance(value, int):
        return [("+1", value + 1)]
    if isinstance(value, float):
        return [("x (1 + 2^-10)", value * (1 + 2 ** -10) if value else 2 ** -10)]
    if isinstance(value, list) and value and not isinstance(value[0], (list, dict)):
        return [(f"[0] {label}", [new, *value[1:]]) for label, new in _changes(value[0], set())]
    return []


def _flat(params: dict):
    for key, value in params.items():
        yield from ((f"{key}.{k}", v) for k, v in value.items()) if isinstance(value, dict) else [(key, value)]


def _variants(params: dict, choices: dict):
    """``(parameter, change, perturbed params)`` of each perturbation of ``params``."""
    for path, value in _flat(params):
        key, _, sub = path.partition(".")
        for label, new in _changes(value, choices.get(path, set())):
            yield path, label, {**params, key: {**params[key], sub: new} if sub else new}


def audit(specs: list[CaseSpec] | None = None, suite: int = 3) -> dict[tuple[str, str, str], list[str]]:
    """``{(encoding, parameter, change): names of the cases that catch it}`` over ``specs``
    (default: the catalogue of suite version ``suite``); a key is present when at least one case could
    evaluate the change."""
    specs = catalogue.cases(suite=suite) if specs is None else specs
    choices: dict = defaultdict(lambda: defaultdict(set))
    for s in specs:
        for path, value in _flat(s.params):
            if isinstance(value, str):
                choices[s.encoding][path].add(value)
    caught: dict = {}
    for spec in specs:
        expected = runner.oracle_outputs(spec)
        for path, label, params in _variants(spec.params, choices[spec.encoding]):
            try:
                with warnings.catch_warnings(), np.errstate(all="ignore"):
                    warnings.simplefilter("ignore")
                    actual = runner.evaluate_library(spec.encoding, params, spec.inputs)
            except Exception:  # noqa: BLE001, S112 - refused (or broken by) the perturbed value: not applicable here
                continue
            names = caught.setdefault((spec.encoding, path, label), [])
            if runner.compare(actual, expected, spec.tolerances["float64"])[3]:
                names.append(spec.name)
    return caught


def format_audit(caught: dict) -> str:
    """One line per perturbation: catches, encoding, parameter, change, the first catching cases."""
    lines = [f"{len(v):>4}  {e:<28} {p:<40} {c:<18} {', '.join(v[:2])}" for (e, p, c), v in sorted(caught.items())]
    weak = sum(len(v) < MIN_CATCHES for v in caught.values())
    return "\n".join([*lines, f"{len(caught)} perturbations, {weak} caught by fewer than {MIN_CATCHES} cases"])
