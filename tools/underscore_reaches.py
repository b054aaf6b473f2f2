"""List the places where a module of posenc_np uses another module's underscore name.

Usage: ``python tools/underscore_reaches.py`` (exit status 1 when there are any). A name with a
leading underscore is private to its module; other modules call the module's public cores
instead. Private *foundation modules* (:data:`FOUNDATION`: ``_checks``, ``_util``, ...) are
modules whose every name serves the package; importing from them, and the modules themselves,
is allowed. ``tests/test_architecture.py`` requires the list to be empty.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "posenc_np"
#: Private modules whose names the whole package uses.
FOUNDATION = {"_backend", "_checks", "_exact", "_files", "_util", "_version", "_numba", "_mp", "_mlp"}


def _module_of(path: Path) -> list[str]:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def reaches(path: Path) -> list[tuple[int, str]]:
    """``(line, text)`` of each underscore name of another package module that ``path`` uses."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    here = _module_of(path)
    package = here if path.name == "__init__.py" else here[:-1]
    modules = {}  # local name -> dotted module it is bound to
    found = []

    def private(name: str) -> bool:
        return name.startswith("_") and not name.startswith("__")

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - (node.level - 1)] if node.level else []
            module = ".".join(base + (node.module.split(".") if node.module else []))
            if not module.startswith("posenc_np"):
                continue
            for alias in node.names:
                target = f"{module}.{alias.name}"
                is_module = (ROOT / Path(*target.split("."))).with_suffix(".py").exists() or \
                    (ROOT / Path(*target.split("."))).is_dir()
                if is_module:
                    modules[alias.asname or alias.name] = target
                    if private(alias.name) and alias.name not in FOUNDATION:
                        found.append((node.lineno, f"from {module} import {alias.name}"))
                elif private(alias.name) and module.split(".")[-1] not in FOUNDATION:
                    found.append((node.lineno, f"from {module} import {alias.name}"))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("posenc_np"):
                    modules[alias.asname or alias.name.split(".")[0]] = alias.asname and alias.name or "posenc_np"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and private(node.attr):
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in modules:
                if modules[owner.id].split(".")[-1] not in FOUNDATION:
                    found.append((node.lineno, f"{owner.id}.{node.attr}"))
            elif isinstance(owner, ast.Attribute) and isinstance(owner.value, ast.Name) and \
                    owner.value.id == "self" and owner.attr.startswith("_") and \
                    any(isinstance(n, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr == owner.attr
                                                          for t in n.targets) and isinstance(n.value, ast.Name)
                        and n.value.id in modules for n in ast.walk(tree)):
                found.append((node.lineno, f"self.{owner.attr}.{node.attr}"))
    return sorted(set(found))


def main() -> int:
    rows = [(p, line, text) for p in sorted(PACKAGE.rglob("*.py")) for line, text in reaches(p)]
    for p, line, text in rows:
        print(f"{p.relative_to(ROOT)}:{line}: {text}")
    print(f"{len(rows)} cross-module underscore reaches")
    return 1 if rows else 0


if __name__ == "__main__":
    raise SystemExit(main())
