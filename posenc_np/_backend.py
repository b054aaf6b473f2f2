"""The one backend rule: which implementation of an operation runs.

An operation with a Numba kernel (the RoPE rotation, fused ALiBi attention, the model's fused
layers) is chosen by ``backend``, one of :data:`BACKENDS`:

``"numpy"``
    the reference: the NumPy function whose body is the formula;
``"numba"``
    the kernel in :mod:`posenc_np.kernels`, an optimisation of that reference tested against it
    (a ``TypeError`` when the inputs are of a kind the kernel does not take);
``"auto"``
    the kernel when it takes the inputs and the call is large enough for it to win (the
    thresholds below, measured by ``bench/run.py``), else the reference.

:func:`choose` is that rule; every door with a ``backend=`` argument and every model layer
calls it. :func:`kernels` imports a kernel module (and Numba) on first use, so that importing
an encoding never loads Numba.
"""

from __future__ import annotations

import functools
import importlib
import types

import numpy as np

from ._checks import check_choice, require

__all__ = ["ALIBI_NUMBA_MIN_T", "BACKENDS", "KERNEL_DTYPES", "ROPE_NUMBA_MIN_ELEMENTS", "choose", "kernel_dtype",
           "kernels"]

#: The implementations an operation may run.
BACKENDS = ("auto", "numpy", "numba")

#: ``"auto"`` rotates with the RoPE kernel from this many elements of ``x`` up. Measured by
#: ``bench/run.py`` (table "RoPE auto threshold" in ``docs/benchmarks.md``): the kernel wins from
#: 2^14 elements (interleaved) and 2^15 (half), forward and backward alike, and by 2-3x at
#: 2^16-2^17.
ROPE_NUMBA_MIN_ELEMENTS = 1 << 15

#: ``"auto"`` runs fused ALiBi attention from ``max(q_len, k_len) >= ALIBI_NUMBA_MIN_T`` up (the
#: ALiBi ``auto`` sweep in ``docs/benchmarks.md``: the fused forward wins from T = 32, forward +
#: backward from T = 96; below 64 a call gains or loses less than 0.3 ms).
ALIBI_NUMBA_MIN_T = 64

#: The dtypes (native byte order) of the fused layer kernels (LayerNorm, GELU, the softmaxes,
#: the cross-entropy, AdamW, sums of squares: :mod:`posenc_np.kernels.layers`).
KERNEL_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def choose(backend: str, *, kernel_takes: bool, large: bool = True, kernel_needs: str = "",
           numpy_takes: bool = True, numpy_needs: str = "") -> str:
    """``"numpy"`` or ``"numba"`` for the requested ``backend`` (see the module docstring).

    ``kernel_takes``/``numpy_takes``: whether each implementation takes these inputs (their
    dtype, layout); ``kernel_needs``/``numpy_needs`` say what it would need, for the error.
    ``large``: whether the call is past the kernel's ``"auto"`` threshold.
    """
    backend = check_choice(backend, "backend", BACKENDS)
    if backend == "numpy" or (backend == "auto" and numpy_takes and not (kernel_takes and large)):
        require(numpy_takes, f"backend='numpy' {numpy_needs}", TypeError)
        return "numpy"
    require(kernel_takes, f"backend={backend!r} needs {kernel_needs}", TypeError)
    return "numba"


@functools.cache
def kernels(name: str) -> types.ModuleType:
    """The kernel module :mod:`posenc_np.kernels.<name>`, imported (with Numba) on first use."""
    return importlib.import_module(f"posenc_np.kernels.{name}")


def kernel_dtype(*arrays: np.ndarray) -> bool:
    """Whether ``arrays`` all have one dtype of :data:`KERNEL_DTYPES` (what a fused layer kernel
    takes; otherwise its caller runs the reference). A plain loop: called ~100 times a training
    step, where a generator in ``all()`` costs twice as much."""
    dt = arrays[0].dtype
    if dt not in KERNEL_DTYPES:
        return False
    for a in arrays:
        if a.dtype != dt:
            return False
    return True
