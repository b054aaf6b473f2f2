"""Numba kernels: fast paths of reference NumPy functions (RoPE rotation, fused ALiBi attention).

Each kernel is an optimisation of a reference function and is tested against it; users
normally reach it through ``backend="auto" | "numba"`` (e.g. ``posenc_np.rope.apply``).

Nothing here is imported or compiled until used: ``import posenc_np.kernels`` does not even
import Numba. Accessing a name (``posenc_np.kernels.rope_apply``) imports its submodule
(and Numba); a kernel compiles on its first call and is cached on disk (see
:mod:`posenc_np.kernels._numba` for the cache directory and the shared compile settings).

Submodules: :mod:`~posenc_np.kernels.rope` (``rope_apply``, ``rope_apply_angles``,
``ROPE_NUMBA_MIN_ELEMENTS``) and, when present, :mod:`~posenc_np.kernels.alibi`.
"""

from __future__ import annotations

import importlib

# public name -> submodule that defines it
_EXPORTS = {
    "rope_apply": "rope",
    "rope_apply_angles": "rope",
    "ROPE_NUMBA_MIN_ELEMENTS": "rope",
}
_SUBMODULES = ("rope", "alibi")


def _alibi_exports() -> dict:
    """Names listed in ``alibi.__all__`` (imported on demand; the module may not exist yet)."""
    try:
        module = importlib.import_module(f"{__name__}.alibi")
    except ModuleNotFoundError as exc:
        if exc.name != f"{__name__}.alibi":
            raise
        return {}
    return {name: "alibi" for name in getattr(module, "__all__", ())}


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    module = _EXPORTS.get(name)
    if module is None and not name.startswith("_"):
        module = _alibi_exports().get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(_EXPORTS) | set(_SUBMODULES))
