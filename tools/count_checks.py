r"""Count argument-check statements against all executable statements, per module.

Usage: ``python tools/count_checks.py [--json] [FILE ...]`` (default: the encoding modules,
:data:`ENCODING_MODULES`, and the check modules, :data:`CHECK_MODULES`). Prints one row per module:
executable statements, check statements and their share, then the *validation share*: check
statements of the encoding modules plus every statement of the check modules, over all their
statements. The target is at most 30 % (:data:`TARGET`).

A *statement* is an ``ast.stmt`` node, counted once however many lines it spans; compound
statements count once for their header and their bodies are counted statement by statement.
Not counted: ``def``/``class`` headers, imports, docstrings.

A statement is a *check* when

1. it lies inside a *validation function*: one whose name matches :data:`VALIDATOR` (``check_*``,
   ``_check*``, ``validate*``, ``_require*``, ``_normalise``, ``as_*``), nested functions included;
2. it is a ``raise``, or an ``if`` whose body is nothing but a ``raise`` (the header and the
   ``raise`` both count; a following ``elif`` is an ``if`` of its own);
3. its value is a call to a validation function: ``x = check_int(x, "x")``,
   ``check_alloc(...)``, ``return _check_tables(...)`` (the outermost call, also either branch
   of a conditional expression; ``return _formula(check_real(b))`` is *not* a check).

This is deliberately mechanical so that before/after numbers are comparable; it does not try
to understand what a statement does.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: The modules that implement encodings (and the attention core the logit-level ones plug into).
ENCODING_MODULES = (
    "posenc_np/absolute.py",
    "posenc_np/rope.py",
    "posenc_np/rope_scaling.py",
    "posenc_np/alibi.py",
    "posenc_np/attention.py",
    "posenc_np/positions.py",
    "posenc_np/relative/t5.py",
    "posenc_np/relative/shaw.py",
    "posenc_np/relative/bert.py",
    "posenc_np/relative/transformer_xl.py",
    "posenc_np/relative/deberta.py",
    "posenc_np/relative/kerple.py",
    "posenc_np/relative/sandwich.py",
    "posenc_np/relative/cope.py",
    "posenc_np/relative/fire.py",
    "posenc_np/relative/dpb.py",
)

#: Modules that hold argument checks only (every statement counts as validation), where they exist.
CHECK_MODULES = ("posenc_np/_checks.py", "posenc_np/_table_checks.py", "posenc_np/_attention_checks.py")

VALIDATOR = re.compile(r"^_?(check|validate|require|normali[sz]e|as_)")
TARGET = 0.30


def _is_validator_name(name: str | None) -> bool:
    return bool(name) and bool(VALIDATOR.match(name))


def _call_name(node) -> str | None:
    if isinstance(node, ast.Call):
        f = node.func
        if isinstance(f, ast.Name):
            return f.id
        if isinstance(f, ast.Attribute):
            return f.attr
    return None


def _is_check_value(value) -> bool:
    if value is None:
        return False
    if isinstance(value, ast.IfExp):
        return _is_check_value(value.body) or _is_check_value(value.orelse)
    if isinstance(value, ast.Await):
        value = value.value
    return _is_validator_name(_call_name(value))


def _only_raises(body) -> bool:
    return bool(body) and all(isinstance(s, ast.Raise) for s in body)


def _executable(node) -> bool:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)):
        return False
    # a docstring (or any bare string) is not executable
    return not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str))


def _bodies(node):
    for name in ("body", "orelse", "finalbody"):
        yield from getattr(node, name, []) or []
    for handler in getattr(node, "handlers", []) or []:
        yield from handler.body
    for case in getattr(node, "cases", []) or []:
        yield from case.body


def count(source: str, listing: list | None = None) -> tuple[int, int]:
    """``(executable statements, check statements)`` of one module's source; with ``listing``,
    the line numbers of the check statements are appended to it."""
    total = checks = 0

    def visit(stmts, in_validator: bool):
        nonlocal total, checks
        for node in stmts:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(node.body, in_validator or _is_validator_name(node.name))
                continue
            if isinstance(node, ast.ClassDef):
                visit(node.body, in_validator)
                continue
            if not _executable(node):
                continue
            total += 1
            is_check = (in_validator or isinstance(node, ast.Raise)
                        or (isinstance(node, ast.If) and _only_raises(node.body))
                        or (isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.Expr, ast.Return))
                            and _is_check_value(node.value)))
            checks += is_check
            if is_check and listing is not None:
                listing.append(node.lineno)
            if isinstance(node, ast.If) and _only_raises(node.body):
                total += len(node.body)
                checks += len(node.body)
                visit(node.orelse, in_validator)
            else:
                visit(list(_bodies(node)), in_validator)

    visit(ast.parse(source).body, False)
    return total, checks


def measure(files=()) -> list[dict]:
    """One row per module (default: the encoding and check modules that exist): ``module``,
    ``statements``, ``checks`` (every statement of a check module), ``share`` and the check ``lines``."""
    rows = []
    for name in files or [f for f in ENCODING_MODULES + CHECK_MODULES if (ROOT / f).exists()]:
        path = Path(name) if Path(name).is_absolute() else ROOT / name
        lines: list = []
        total, checks = count(path.read_text(), lines)
        if name in CHECK_MODULES:
            checks = total
        rows.append({"module": name, "statements": total, "checks": checks,
                     "share": round(checks / total, 3) if total else 0.0, "lines": lines})
    return rows


def validation_share(rows: list[dict]) -> float:
    """Check statements over all statements of ``rows`` (:func:`measure`)."""
    return sum(r["checks"] for r in rows) / max(sum(r["statements"] for r in rows), 1)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", help="modules to count (default: the encoding modules)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--list", action="store_true", help="also print the line numbers of the checks")
    args = parser.parse_args(argv)
    rows = measure(args.files)
    all_total = sum(r["statements"] for r in rows)
    all_checks = sum(r["checks"] for r in rows)
    if args.json:
        json.dump({"rows": rows, "statements": all_total, "checks": all_checks}, sys.stdout, indent=1)
        print()
        return 0
    print(f"{'module':40s} {'statements':>10s} {'checks':>7s} {'share':>6s}")
    for r in rows:
        flag = "" if r["share"] <= TARGET or r["module"] in CHECK_MODULES else f"  > {TARGET:.0%}"
        print(f"{r['module']:40s} {r['statements']:10d} {r['checks']:7d} {r['share']:6.0%}{flag}")
        if args.list:
            print("    check lines:", " ".join(map(str, r["lines"])))
    share = validation_share(rows)
    print(f"{'total (validation share)':40s} {all_total:10d} {all_checks:7d} {share:6.0%}"
          f"{'' if share <= TARGET else f'  > {TARGET:.0%}'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
