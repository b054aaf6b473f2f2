"""A damaged Numba cache costs a compile, never a failed call (issue 13).

Before: a truncated or garbage cache file made every kernel call raise ``UnpicklingError``
until the cache was deleted by hand. The test runs fresh Python processes with a private
``NUMBA_CACHE_DIR`` (the suite's own cache is never touched), one tiny kernel per kind of
damage so that three processes cover them all.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

DAMAGE = [(target, how) for target in ("index", "data", "both") for how in ("truncate", "empty", "garbage")]

KERNEL = textwrap.dedent("""
    from posenc_np.kernels._numba import njit_kernel

    @njit_kernel(parallel=False)
    def add_one(x):
        return x + 1.0
""")

CALL = textwrap.dedent("""
    import importlib
    for i in range({n}):
        kernel = importlib.import_module(f"tiny{{i}}").add_one
        assert kernel(1.5) == 2.5
        print(sum(kernel.stats.cache_hits.values()), sum(kernel.stats.cache_misses.values()))
""").format(n=len(DAMAGE))


def _run(tmp_path: Path) -> list[tuple[int, int]]:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    proc = subprocess.run([sys.executable, "-c", CALL], env=env, capture_output=True, text=True, timeout=300,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    return [tuple(map(int, line.split())) for line in proc.stdout.splitlines()]


@pytest.mark.slow
def test_damaged_cache_files_are_recompiled_and_replaced(tmp_path):
    """~8-16 s: three fresh processes are the point (populate, load the damaged cache, load the
    repaired one), and each pays Numba's import and first-use set-up (1-3 s on the 2-core box)."""
    for i in range(len(DAMAGE)):
        (tmp_path / f"tiny{i}.py").write_text(KERNEL)
    assert _run(tmp_path) == [(0, 1)] * len(DAMAGE)  # compiled and saved
    for i, (target, how) in enumerate(DAMAGE):
        index = list((tmp_path / "cache").rglob(f"tiny{i}.add_one-*.nbi"))
        data = list((tmp_path / "cache").rglob(f"tiny{i}.add_one-*.nbc"))
        assert len(index) == 1 and len(data) == 1
        for f in {"index": index, "data": data, "both": index + data}[target]:
            raw = f.read_bytes()
            f.write_bytes({"truncate": raw[: len(raw) // 2], "empty": b"", "garbage": os.urandom(len(raw))}[how])
    assert _run(tmp_path) == [(0, 1)] * len(DAMAGE)  # each bad entry is a miss: recompiled, no error
    assert _run(tmp_path) == [(1, 0)] * len(DAMAGE)  # ... and the fresh entry replaced it


def _dispatchers():
    """``(module, name, dispatcher)`` of every Numba dispatcher in posenc_np.kernels."""
    import numba.core.registry

    from posenc_np.kernels import alibi, layers, rope

    for module in (alibi, layers, rope):
        for name, obj in vars(module).items():
            if isinstance(obj, numba.core.registry.CPUDispatcher):
                yield module.__name__, name, obj


def test_every_kernel_goes_through_the_tolerant_cache():
    """The wiring: each cached dispatcher in posenc_np.kernels has the tolerant load/save."""
    from posenc_np.kernels import _numba

    found = 0
    for module, name, obj in _dispatchers():
        cache = getattr(obj, "_cache", None)
        if type(cache).__name__ != "NullCache":
            found += 1
            assert "_tolerate_bad_cache" in cache.load_overload.__qualname__, (module, name)
            assert "_tolerate_bad_cache" in cache.save_overload.__qualname__, (module, name)
    assert found >= 20 or _numba.cache_dir() is None


def test_compiled_kernels_can_be_cached():
    """Numba silently skips caching a kernel that refers to a "dynamic global" (a ctypes
    pointer, e.g. ``numba.get_num_threads()`` called inside the kernel), so that every process
    compiles it again. Stop 21's flash-decoding kernel did. After a call of each public kernel
    family (the split decoding path included), no compiled overload may hold one."""
    import numpy as np

    from posenc_np.kernels import alibi, layers, rope

    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 1, n, 8)).astype(np.float32) for n in (1, 300, 300))
    alibi.alibi_attention_forward(q, k, v, np.array([0.5]), causal=True, scale=0.3, key_splits=2)
    x = rng.standard_normal((2, 3, 4, 8)).astype(np.float32)
    cos, sin = np.ones((4, 8), np.float32), np.zeros((4, 8), np.float32)
    rope.rope_apply(x, cos, sin, layout="half")
    layers.softmax_rows(x.reshape(-1, 8), None)
    compiled = 0
    for module, name, obj in _dispatchers():
        for cres in obj.overloads.values():
            compiled += 1
            assert not cres.library.has_dynamic_globals, (module, name)
    assert compiled >= 3
