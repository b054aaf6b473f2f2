"""The package: its lazy submodules (every advertised name imports, nothing heavy at import) and the
metadata setup.cfg publishes (license, classifiers, package data, extras)."""

import ast
import configparser
import importlib
import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import posenc_np

ROOT = Path(__file__).resolve().parents[1]


def test_every_advertised_submodule_resolves():
    for name in posenc_np.__all__:
        if name != "__version__":
            assert getattr(posenc_np, name) is importlib.import_module(f"posenc_np.{name}")


def test_import_loads_no_submodule_numba_or_mpmath():
    code = ("import sys, posenc_np; heavy = [m for m in ('numba', 'mpmath', 'scipy', 'posenc_np.rope') "
            "if m in sys.modules]; print(heavy)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"


# --------------------------------------------------------------------------- metadata (setup.cfg)

def _setup_cfg() -> configparser.ConfigParser:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg", encoding="utf-8")
    return cfg


def _lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if line.strip()]


def test_the_license_file_is_the_mit_license_setup_cfg_names():
    meta = _setup_cfg()["metadata"]
    assert meta["license"] == "MIT" and _lines(meta["license_files"]) == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License\n\nCopyright (c) 2026 the posenc_np authors\n\nPermission is hereby granted")
    assert meta["author"] == "the posenc_np authors"


def test_classifiers_claim_only_the_python_versions_that_are_tested():
    """The README says which Python the suite ran on; the classifiers and python_requires say no more."""
    cfg = _setup_cfg()
    versions = [c.rsplit("::", 1)[1].strip() for c in _lines(cfg["metadata"]["classifiers"])
                if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)]
    tested = re.search(r"\*\*Tested with\*\* Python (3\.\d+)\.\d+", (ROOT / "README.md").read_text()).group(1)
    assert versions == [tested] == ["3.11"]
    assert cfg["options"]["python_requires"] == f">={tested}"


def test_py_typed_and_the_data_the_package_reads_are_package_data():
    from posenc_np.golden import runner

    data = {pkg: _lines(files) for pkg, files in _setup_cfg()["options.package_data"].items()}
    assert data == {"posenc_np": ["py.typed"], "posenc_np.golden": ["v1_published.json"]}
    assert (ROOT / "posenc_np" / "py.typed").read_bytes() == b""
    assert runner.V1_PUBLISHED_FILE.parent == ROOT / "posenc_np" / "golden" and runner.V1_PUBLISHED_FILE.is_file()


def test_the_examples_extra_installs_what_the_examples_import():
    cfg = _setup_cfg()
    base = {re.split(r"[<>=\[]", r)[0] for r in _lines(cfg["options"]["install_requires"])}
    extras = {name: {re.split(r"[<>=\[]", r)[0] for r in _lines(text)}
              for name, text in cfg["options.extras_require"].items()}
    modules = set()
    for script in (ROOT / "examples").glob("*.py"):
        for node in ast.walk(ast.parse(script.read_text())):
            if isinstance(node, ast.Import):
                modules |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                modules.add(node.module.split(".")[0])
    modules -= set(sys.stdlib_module_names) | {"posenc_np"}
    owners = importlib.metadata.packages_distributions()
    needed = {dist for m in modules for dist in owners[m]} - base
    assert needed == extras["examples"] == {"scikit-learn", "pandas", "statsmodels"}
    assert extras["examples"] <= extras["test"]  # the test suite runs the examples
