"""Numba kernels: fast paths of reference NumPy functions (RoPE rotation, fused ALiBi attention).

Each kernel is an optimisation of a reference function and is tested against it; users
normally reach it through ``backend="auto" | "numba"`` (e.g. ``posenc_np.rope.apply``).

Nothing here is imported or compiled until used: ``import posenc_np.kernels`` does not even
import Numba. Accessing a name (``posenc_np.kernels.rope_apply``) imports its submodule
(and Numba); a kernel compiles on its first call and is cached on disk (see
:mod:`posenc_np.kernels._numba` for the cache directory and the shared compile settings).

Submodules: :mod:`~posenc_np.kernels.rope` (``rope_apply``, ``rope_apply_angles``) and
:mod:`~posenc_np.kernels.alibi` (the names in its ``__all__``). ``ROPE_NUMBA_MIN_ELEMENTS`` and
``ALIBI_NUMBA_MIN_T``, the ``backend="auto"`` switches, are defined here and need no Numba.
"""

from __future__ import annotations

import importlib

#: ``backend="auto"`` uses the RoPE kernel when ``x.size`` is at least this many elements
#: and NumPy below. Defined here rather than in ``rope`` so that reading it does not import
#: Numba (``posenc_np.kernels.rope`` re-exports it). Measured with ``bench/bench_rope.py``
#: (``threshold``; the same sweep runs in ``python bench/run.py --only rope``): NumPy's
#: rotation (``rope._rotate_numpy``) against ``rope_apply`` (with its ~25 us of Python
#: planning), ``(1, 8, T, 128)`` float32, median of 21, on the 2-core AMD EPYC (znver4) dev
#: box, numpy 2.4.6, numba 0.68.1, 2026-11-30. The kernel wins from 2^14 elements
#: (interleaved: 35 vs 29 us) and from 2^15 (half: 40 vs 34 us; at 2^14: 24 vs 30 us),
#: forward and backward alike, and by 2-3x at 2^16-2^17. Preliminary: the machine was shared
#: (load 2-4), which distorts only the 2-thread calls (>= 2^18); re-measure on a quiet machine.
ROPE_NUMBA_MIN_ELEMENTS = 1 << 15

#: ``backend="auto"`` of :func:`posenc_np.alibi.attention` should use this kernel when
#: ``max(q_len, k_len) >= ALIBI_NUMBA_MIN_T`` (and the dtype is float32/float64). Measured with
#: ``bench/bench_alibi.py`` (2-core AMD EPYC, float32, D = 64, H = 1 and 8, busy machine): the
#: fused forward beat the materialised NumPy forward from T = 16 on, forward + backward from
#: T = 64 (H = 8) to 96 (H = 1). Below 64 a call gains < 0.1 ms, which does not repay the
#: first-use compile of the kernels (~10-20 s per dtype without a warm on-disk cache).
ALIBI_NUMBA_MIN_T = 64

# public name -> submodule that defines it
_EXPORTS = {
    "rope_apply": "rope",
    "rope_apply_angles": "rope",
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
    return sorted(set(_EXPORTS) | set(_SUBMODULES) | {"ROPE_NUMBA_MIN_ELEMENTS", "ALIBI_NUMBA_MIN_T"})
