"""The package's layers and what may import what (docs/architecture.md), read from the source with ast.

A module may import from its own layer or a lower one, never a higher one; the kernels import
only the foundation; an encoding module imports a kernel only inside a function (so that
``import posenc_np.rope`` does not load Numba); and no module-level import cycle exists.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1] / "posenc_np"

#: Layer of every module (by prefix: "golden" covers posenc_np.golden.*). Keep in step with
#: docs/architecture.md.
LAYERS = {
    0: ("_checks", "_table_checks", "_attention_checks", "_util", "_exact", "_files", "_version", "positions"),
    1: ("kernels",),
    2: ("absolute", "rope_scaling", "rope", "alibi", "attention", "relative", "layers"),
    3: ("registry", "model", "optim", "train"),
    4: ("golden", "hf_config", "precision", "precision_report", "sklearn", "study", "cli", "testing", "__main__",
        "__init__"),
}
NAMES = {name: layer for layer, names in LAYERS.items() for name in names}


def _module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)


def _layer(module: str) -> int:
    head = module.split(".")[0]
    if head not in NAMES:
        raise AssertionError(f"module posenc_np.{module} has no layer: add it to LAYERS and docs/architecture.md")
    return NAMES[head]


def _imports(path: pathlib.Path):
    """``(target module, top_level)`` of every package-internal import in ``path``."""
    tree = ast.parse(path.read_text())
    module = _module_name(path)
    package = module.split(".") if path.name == "__init__.py" and module != "__init__" else module.split(".")[:-1]
    top_level = {id(node) for node in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[: len(package) - node.level + 1]
            names = [node.module] if node.module else [a.name for a in node.names]
            for name in names:
                yield ".".join(base + name.split(".")) or "__init__", id(node) in top_level
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for name in names:
                if name == "posenc_np" or name.startswith("posenc_np."):
                    yield name[len("posenc_np."):] or "__init__", id(node) in top_level


FILES = sorted(ROOT.rglob("*.py"))


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_imports_go_down_the_layers(path):
    module = _module_name(path)
    own = _layer(module)
    for target, _ in _imports(path):
        assert _layer(target) <= own, (f"posenc_np.{module} (layer {own}) imports posenc_np.{target} "
                                       f"(layer {_layer(target)})")


@pytest.mark.parametrize("path", [p for p in FILES if _module_name(p).split(".")[0] == "kernels"],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_kernels_import_only_the_foundation(path):
    for target, _ in _imports(path):
        assert _layer(target) == 0 or target.split(".")[0] == "kernels", f"{path.name} imports posenc_np.{target}"


def test_encodings_load_kernels_lazily():
    """A kernel module (which imports Numba) only inside a function; the ``kernels`` package itself,
    which holds the ``backend="auto"`` thresholds and imports nothing, may be imported eagerly."""
    for path in FILES:
        if _layer(_module_name(path)) in (2, 3):
            eager = [t for t, top in _imports(path) if top and t.startswith("kernels.")]
            assert not eager, f"{path.name} imports {eager} at module level (Numba would load with it)"


def test_importing_the_encodings_and_the_model_loads_no_numba():
    code = ("import sys; import posenc_np.rope, posenc_np.alibi, posenc_np.relative, posenc_np.model; "
            "print('numba' in sys.modules)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         cwd=ROOT.parent)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "False"


def test_no_import_cycle_at_module_level():
    graph = {}
    for path in FILES:
        deps = {t for t, top in _imports(path) if top}
        graph[_module_name(path)] = {d for d in deps if d != _module_name(path)}
    state: dict = {}

    def visit(node, trail):
        if state.get(node) == "done":
            return
        assert state.get(node) != "open", f"import cycle: {' -> '.join(trail + [node])}"
        state[node] = "open"
        for dep in graph.get(node, ()):
            visit(dep, trail + [node])
        state[node] = "done"

    for node in graph:
        visit(node, [])


def test_the_rules_catch_a_violation(tmp_path, monkeypatch):
    """The checker is not vacuous: a kernel importing rope, or rope importing the model, is found."""
    kernel = tmp_path / "kernels" / "bad.py"
    kernel.parent.mkdir()
    kernel.write_text("from ..rope import apply\n")
    encoding = tmp_path / "rope.py"
    encoding.write_text("from .model import Transformer\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    with pytest.raises(AssertionError, match="imports posenc_np.rope"):
        test_kernels_import_only_the_foundation(kernel)
    with pytest.raises(AssertionError, match=r"layer 2\) imports posenc_np.model \(layer 3\)"):
        test_imports_go_down_the_layers(encoding)
