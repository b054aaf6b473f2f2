"""The package's lazy submodules: every advertised name imports, and nothing heavy at import."""

import importlib
import subprocess
import sys

import posenc_np


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
