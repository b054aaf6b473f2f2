"""Numba kernels: fast paths of reference NumPy functions (RoPE rotation, fused ALiBi attention).

Each kernel is an optimisation of a reference function and is tested against it; users
normally reach it through ``backend="auto" | "numba"`` (e.g. ``posenc_np.rope.apply``).

Nothing here is imported or compiled until used: ``import posenc_np.kernels`` does not even
import Numba. Accessing a name (``posenc_np.kernels.rope_apply``) imports its submodule
(and Numba); a kernel compiles on its first call and is cached on disk (see
:mod:`posenc_np.kernels._numba` for the cache directory and the shared compile settings).

Submodules: :mod:`~posenc_np.kernels.rope` (``rope_apply``, ``rope_apply_qk``, ``rope_apply_angles``),
:mod:`~posenc_np.kernels.alibi` (the names in its ``__all__``) and :mod:`~posenc_np.kernels.layers`
(fused LayerNorm, tanh-GELU, softmax, cross-entropy, AdamW and gradient norms for the model:
``backend=`` of those classes and functions). ``ROPE_NUMBA_MIN_ELEMENTS`` and
``ALIBI_NUMBA_MIN_T``, the ``backend="auto"`` switches, are defined here and need no Numba.
"""

from __future__ import annotations

import importlib

#: ``backend="auto"`` uses the RoPE kernel when ``x.size`` is at least this many elements
#: and NumPy below. Defined here rather than in ``rope`` so that reading it does not import
#: Numba (``posenc_np.kernels.rope`` re-exports it). Measured by ``python bench/run.py``
#: (table "RoPE auto threshold" in ``docs/benchmarks.md``): ``rope._rotate_numpy`` against
#: ``rope._rotate_numba``, ``(1, 8, T, 128)`` float32, median of 21, 2-core AMD EPYC, quiet
#: machine, 2026-11-30. The kernel wins from 2^14 elements (interleaved: 36 vs 31 us) and
#: from 2^15 (half: 42 vs 36 us; at 2^14: 25 vs 31 us), forward and backward alike, and by
#: 2-3x at 2^16-2^17.
ROPE_NUMBA_MIN_ELEMENTS = 1 << 15

#: ``backend="auto"`` of :func:`posenc_np.alibi.attention` uses the fused kernel when
#: ``max(q_len, k_len) >= ALIBI_NUMBA_MIN_T`` (and the dtype is float32/float64). Measured by
#: ``python bench/run.py`` (the ALiBi ``auto`` sweep in ``docs/benchmarks.md``, float32, D = 64,
#: H = 1 and 8, quiet machine, 2026-11-30): the fused forward wins from T = 32, forward +
#: backward from T = 96 (at T = 64, H = 8: forward 0.25 vs 0.37 ms, forward + backward 1.16
#: vs 0.92 ms). 64 splits the difference: below it a call gains or loses < 0.3 ms.
ALIBI_NUMBA_MIN_T = 64

# public name -> submodule that defines it
_EXPORTS = {
    "rope_apply": "rope",
    "rope_apply_angles": "rope",
    "rope_apply_qk": "rope",
}
_SUBMODULES = ("rope", "alibi", "layers")


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
    return sorted(set(_EXPORTS) | set(_SUBMODULES) | {"ROPE_NUMBA_MIN_ELEMENTS", "ALIBI_NUMBA_MIN_T"})
