"""posenc-np golden audit: every perturbation of a case parameter is caught by two cases, or is a row
of the documented table in docs/golden-format.md ("The suite's teeth") that still holds."""

import re
from dataclasses import replace
from pathlib import Path

import pytest

from posenc_np import cli
from posenc_np.golden import audit, catalogue

DOC = Path(__file__).resolve().parent.parent / "docs" / "golden-format.md"


def table_rows() -> list[tuple]:
    """``(encoding, parameter, change, cases, why)`` of each row of the documented table."""
    section = DOC.read_text().split("## The suite's teeth", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("| `")]
    rows = [re.fullmatch(r"\| `([^`]+)` \| `([^`]+)` \| ([^|]+) \| (\d+) \| ([^|]+) \| ([^|]*) \|", line)
            for line in lines]
    assert all(rows), [line for line, row in zip(lines, rows) if not row]  # six columns, `why` last
    return [(e, p, c.strip().replace("/", "|"), int(n), why.strip()) for e, p, c, n, _, why in (r.groups() for r in rows)]


def documented() -> dict:
    return {(e, p, c): n for e, p, c, n, _ in table_rows()}


def test_every_documented_row_says_why():
    rows = table_rows()
    assert rows
    for e, p, c, n, why in rows:
        kind, _, reason = why.partition(": ")
        assert kind in ("no effect", "gap") and len(reason.strip()) > 10, (e, p, c, why)
        assert kind == "gap" or n == 0, (e, p, c, why)  # a caught parameter has an effect


@pytest.fixture(scope="module")
def caught():
    return audit.audit()


def test_every_perturbation_is_caught_twice_or_documented(caught):
    weak = {k: len(v) for k, v in caught.items() if len(v) < audit.MIN_CATCHES}
    assert weak == documented()  # a new weakness fails; a row that gained its second case must leave the table


def test_the_audit_has_teeth(caught):
    assert len(caught[("rope.apply", "layout", "-> interleaved")]) >= 2
    assert len(caught[("alibi.slopes", "num_heads", "+1")]) >= 2
    assert audit._changes(True, set()) == [("flipped", False)]
    assert audit._changes(0.0, set()) == [("x (1 + 2^-10)", 2 ** -10)]
    assert audit._changes("half", {"half", "interleaved"}) == [("-> interleaved", "interleaved")]


def test_a_case_that_ignores_a_parameter_is_not_counted():
    spec = next(s for s in catalogue.cases() if s.name == "alibi.slopes.n8")
    blind = replace(spec, name="blind", params={**spec.params, "unused": 3})
    result = audit.audit([blind])
    assert result[("alibi.slopes", "unused", "+1")] == []
    assert result[("alibi.slopes", "num_heads", "+1")] == ["blind"]  # 9 slopes: a shape change is caught


def test_the_command(caught, capsys, monkeypatch):
    monkeypatch.setattr(audit, "audit", lambda suite: caught)  # computed once (the fixture)
    assert cli.main(["golden", "audit"]) == 1  # while the documented table is not empty
    assert "caught by fewer than 2 cases" in capsys.readouterr().out
