"""posenc_np: a reference NumPy implementation of transformer positional encodings.

Families (one module each): :mod:`posenc_np.absolute`, :mod:`posenc_np.rope`,
:mod:`posenc_np.alibi`, :mod:`posenc_np.relative`; the attention core
:mod:`posenc_np.attention` and where queries and keys sit, :mod:`posenc_np.positions`; the
model :mod:`posenc_np.model` and its encodings :mod:`posenc_np.registry`; golden vectors
:mod:`posenc_np.golden`; Hugging Face ``config.json`` reading :mod:`posenc_np.hf_config`;
test helpers :mod:`posenc_np.testing`; scikit-learn transformers :mod:`posenc_np.sklearn`
(optional extra ``sklearn``). Submodules load on first attribute access, so
``import posenc_np`` stays cheap and compiles nothing. How the modules fit together:
``docs/architecture.md``.
"""

from __future__ import annotations

import importlib

from ._version import __version__

_SUBMODULES = {
    "absolute", "alibi", "attention", "golden", "hf_config", "kernels", "layers", "model", "optim", "positions",
    "precision", "registry", "relative", "rope", "sklearn", "study", "testing", "train",
}

__all__ = ["__version__", *sorted(_SUBMODULES)]


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return __all__
