"""Numba kernels: fast paths of reference NumPy functions (RoPE rotation, fused ALiBi attention,
the model's fused layers).

Each kernel is an optimisation of a reference function and is tested against it; users reach it
through the one backend rule, :mod:`posenc_np._backend` (``backend="auto" | "numba"`` of
``posenc_np.rope.apply``, ``posenc_np.alibi.attention`` and ``posenc_np.model.Transformer``),
which also holds the ``"auto"`` thresholds.

Nothing here is imported or compiled until used: ``import posenc_np.kernels`` does not import
Numba. Accessing a name (``posenc_np.kernels.rope_apply``) imports its submodule (and Numba); a
kernel compiles on its first call and is cached on disk (:mod:`posenc_np.kernels._numba`: the
cache directory and the shared compile settings).

Submodules: :mod:`~posenc_np.kernels.rope` (``rope_apply``), :mod:`~posenc_np.kernels.alibi` and
:mod:`~posenc_np.kernels.layers` (fused LayerNorm, tanh-GELU, softmax, cross-entropy, AdamW and
gradient norms for the model: :mod:`posenc_np.fused`). The ``backend="auto"`` thresholds are in
:mod:`posenc_np._backend`.
"""

from __future__ import annotations

import importlib

#: Public name -> the submodule that defines it.
_EXPORTS = {
    "rope_apply": "rope",
    "alibi_attention_forward": "alibi",
    "alibi_attention_backward": "alibi",
}
_SUBMODULES = ("rope", "alibi", "layers")


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(_EXPORTS) | set(_SUBMODULES))
