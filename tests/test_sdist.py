"""The source distribution is the source tree: every file git tracks is in it and every test module
collects from it; it and the wheel built from it carry LICENSE, py.typed and the data the package reads,
and the installed wheel verifies the committed golden suites.

The sdist is built with the environment's setuptools (``setuptools.build_meta.build_sdist``, in a
subprocess, from a copy of the tree, so that the checkout gets no ``*.egg-info``); the wheel is built from
the unpacked sdist by ``pip wheel``, as ``pip install`` of an sdist does (with build isolation: it installs
the build requirements of ``pyproject.toml`` from the package index, like the README's install command).
"""

import configparser
import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from _support import require_tool

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow

#: Not part of the source: caches and build products a working tree may hold.
UNTRACKED = shutil.ignore_patterns(".git", "__pycache__", "*.egg-info", "build", "dist", ".pytest_cache",
                                   ".hypothesis", ".numba_cache", ".benchmarks", "golden-out", "_build")
PACKAGE_DATA = ["posenc_np/py.typed", "posenc_np/golden/v1_published.json"]


def _name_version() -> str:
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    from posenc_np import __version__

    return f"{cfg['metadata']['name']}-{__version__}"


def _run(args, **kwargs) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    res = subprocess.run(args, capture_output=True, text=True, timeout=600, env={**env, **kwargs.pop("env", {})},
                         **kwargs)
    assert res.returncode == 0, f"{args}:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res


@pytest.fixture(scope="module")
def sdist(tmp_path_factory) -> Path:
    # the build backend (python -m venv installs it on Python 3.11); found, not imported here: importing
    # setuptools replaces distutils in the test process, with a warning
    require_tool(importlib.util.find_spec("setuptools") is not None, "the Python package 'setuptools'",
                 "install it with python -m pip install '.[test]'")
    work = tmp_path_factory.mktemp("sdist")
    shutil.copytree(ROOT, work / "src", ignore=UNTRACKED, symlinks=True)
    code = "import sys; from setuptools import build_meta; print(build_meta.build_sdist(sys.argv[1]))"
    name = _run([sys.executable, "-c", code, str(work / "dist")], cwd=work / "src").stdout.strip().splitlines()[-1]
    return work / "dist" / name


@pytest.fixture(scope="module")
def members(sdist) -> dict[str, tarfile.TarInfo]:
    """The sdist's members by path inside its top directory."""
    with tarfile.open(sdist) as tar:
        infos = tar.getmembers()
    top = {m.name.split("/", 1)[0] for m in infos}
    assert len(top) == 1, top
    return {m.name.split("/", 1)[1]: m for m in infos if "/" in m.name}


@pytest.fixture(scope="module")
def unpacked(sdist, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("unpacked")
    with tarfile.open(sdist) as tar:
        tar.extractall(out, filter="data")
    (tree,) = out.iterdir()
    return tree


@pytest.fixture(scope="module")
def wheel(unpacked, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    require_tool(importlib.util.find_spec("pip") is not None, "pip",
                 "make the environment with python -m venv, which installs it")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(out), str(unpacked)])
    (built,) = out.glob("*.whl")
    return built


def test_sdist_is_named_for_the_project(sdist):
    assert sdist.name.replace("_", "-") == f"{_name_version()}.tar.gz"


def test_sdist_holds_every_file_git_tracks(members):
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout (an unpacked sdist): no list of tracked files to compare with")
    tracked = _run(["git", "ls-files"], cwd=ROOT).stdout.splitlines()
    tracked = [p for p in tracked if (ROOT / p).exists()]  # a file deleted in the working tree is gone
    assert len(tracked) > 500
    missing = sorted(set(tracked) - set(members))
    assert not missing, f"{len(missing)} tracked files are not in the sdist, e.g. {missing[:10]}"


def test_every_test_module_collects_from_the_unpacked_sdist(unpacked):
    """Once 8 modules failed to collect: the sdist had tests/test_*.py without conftest.py, the helpers,
    the fixtures and the vectors."""
    res = _run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
               cwd=unpacked)  # a module that fails to collect makes the exit status 2
    collected = {line.split("::", 1)[0] for line in res.stdout.splitlines() if "::" in line}
    here = {f"tests/{p.name}" for p in (ROOT / "tests").glob("test_*.py")}
    there = {f"tests/{p.name}" for p in (unpacked / "tests").glob("test_*.py")}
    assert here == there and collected == there, sorted(there ^ collected)


def test_license_and_package_data_are_in_the_sdist(members, unpacked):
    for path in ["LICENSE", "MANIFEST.in", *PACKAGE_DATA]:
        assert path in members, path
    assert (unpacked / "LICENSE").read_text() == (ROOT / "LICENSE").read_text()
    assert "License-File: LICENSE" in (unpacked / "PKG-INFO").read_text()


def test_license_and_package_data_are_in_the_wheel(wheel):
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        licenses = [n for n in names if ".dist-info/" in n and n.endswith("/LICENSE")]
        assert len(licenses) == 1, names
        assert zf.read(licenses[0]).decode() == (ROOT / "LICENSE").read_text()
        metadata = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    for path in PACKAGE_DATA:
        assert path in names, path
    assert "License-File: LICENSE" in metadata and "Provides-Extra: examples" in metadata
    assert not [n for n in names if not n.startswith(("posenc_np/", "posenc_np-"))], "only the package is installed"


def test_the_installed_wheel_verifies_the_committed_suites(wheel, tmp_path):
    """An installed package reads nothing from a source tree (the v1 digests ship with it)."""
    site = tmp_path / "site"
    _run([sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--target", str(site), str(wheel)])
    env = {"PYTHONPATH": str(site)}
    where = _run([sys.executable, "-c", "import posenc_np; print(posenc_np.__file__)"], cwd=tmp_path, env=env)
    assert Path(where.stdout.strip()).is_relative_to(site)
    for suite in ("v1", "v2"):
        res = _run([sys.executable, "-m", "posenc_np", "golden", "verify", str(ROOT / "vectors" / suite)],
                   cwd=tmp_path, env=env)
        assert " 0 failed, 0 unknown" in res.stdout.splitlines()[-1], res.stdout[-2000:]
