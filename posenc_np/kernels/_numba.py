"""Numba settings shared by every kernel in :mod:`posenc_np.kernels` (RoPE, ALiBi attention).

One place decides how kernels are compiled, cached and launched, so that every kernel
gets the same guarantees:

``njit_kernel(**overrides)``
    Decorator factory: ``numba.njit`` with ``parallel=True``, ``cache=True`` (in the directory
    :func:`cache_dir` picks, or no caching when nothing is writable), ``fastmath=FASTMATH``,
    ``nogil=True``, ``error_model="numpy"`` (``x / 0`` gives inf/NaN, not an exception).
    Compilation is lazy (no signatures): a kernel compiles on its first call, for the
    argument types of that call, and later processes load it from the on-disk cache.
    ``noalias=True`` compiles the function with every pointer argument marked ``noalias`` (the
    promise Numba itself makes for a ``prange`` body whose arrays it can tell apart): LLVM then
    vectorises loops that read one array and write another without run-time overlap checks
    (the RoPE row loop, L2-resident rows: 25-45 % less time per row in place and out of
    place, measured on the 2-core box). Only for functions whose callers
    guarantee that no array they write shares memory with another array argument.
``FASTMATH``
    ``{"nsz", "arcp", "contract", "afn", "reassoc"}``: everything in ``fastmath=True``
    *except* ``nnan`` and ``ninf``, so inf/NaN inputs, ``-inf`` masks and online softmax
    stay correct. ``afn`` (approximate functions) was measured on this build (llvmlite
    0.50, no SVML): ``math.sin``/``math.cos``/``math.exp`` give bit-identical results with
    and without it on 10^6 random float64 arguments (sin on [-1e4, 1e4], exp on [-80, 0]),
    and are 15-30 % faster. If Numba is built with Intel SVML, vectorised loops may use
    SVML's 4-ULP variants under ``afn``; the RoPE tests bound the on-the-fly-angle error
    against the float64 reference either way.
``blas_single_thread()``
    Context manager: BLAS pools limited to one thread (threadpoolctl) for a parallel region
    that calls BLAS (``np.dot`` in ``prange``): two cores are already busy with Numba's
    threads, a threaded BLAS inside them oversubscribes, and OpenBLAS under an OpenMP
    parallel region warns "Detect OpenMP Loop and this application may hang". Thread-safe
    and re-entrant (reference-counted: the last caller out restores the setting).
``launch_guard()``
    Context manager around a parallel kernel call: a no-op under the thread-safe ``omp`` and
    ``tbb`` threading layers, a process-wide lock under ``workqueue`` (which must not be
    entered by two Python threads at once). Two Python threads may call any kernel.
``cache_dir()``
    The cache directory in use (``None`` = caching disabled), resolved once: ``NUMBA_CACHE_DIR``
    if set and writable; else Numba's default, the package's ``kernels/__pycache__``, if
    writable; else a private per-user directory under the system temp dir
    (``posenc_np-numba-<uid>``, mode 0700, must be owned by the user); else no caching. A
    read-only install or cache never makes an import or a call fail, it only costs a compile.
    Neither does a damaged cache: Numba's own loader lets a truncated or garbage index
    (``.nbi``) or data (``.nbc``) file raise ``UnpicklingError``/``EOFError`` from every call
    until the file is deleted by hand. Every kernel's cache is therefore wrapped
    (:func:`_tolerate_bad_cache`): a failed load counts as a miss (the kernel compiles), and the
    fresh result replaces the bad entry (an unreadable index is removed first).

``OMP_WAIT_POLICY``
    Set to ``PASSIVE`` (unless the user set it) before Numba can load its OpenMP runtime:
    idle OpenMP threads then sleep instead of spinning. With the default active wait, the
    OpenMP threads of a kernel and the pthreads of NumPy's OpenBLAS spin against each other
    on a small machine whenever kernels and BLAS calls alternate (as in attention followed by
    a projection): measured on the 2-core dev box, H = 8, D = 64 float32 ALiBi attention
    alternating with the NumPy path, the fused kernel took 3.5 ms at T = 96 and 2.6 ms at
    T = 128 with active waiting, 0.36 and 0.48 ms with passive waiting (the NumPy path
    4.5 -> 0.7 ms and 5.3 -> 1.7 ms). The cost is a thread wake-up per launch (~0.1 ms at
    T = 64). It has no effect if an OpenMP runtime is already loaded.

The chosen directory is handed to Numba only while a kernel is being decorated (the cache
locator captures it then), so user code that also uses Numba keeps its own cache settings;
``import posenc_np`` and ``import posenc_np.kernels`` import none of this.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
import threading

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before Numba loads libgomp; see the docstring

import numba  # noqa: E402
from numba.core import compiler as _numba_compiler  # noqa: E402
from numba.core import config as _numba_config  # noqa: E402

__all__ = ["FASTMATH", "blas_single_thread", "cache_dir", "launch_guard", "njit_kernel"]

FASTMATH = frozenset({"nsz", "arcp", "contract", "afn", "reassoc"})

_THREADSAFE_LAYERS = ("omp", "tbb")
_PACKAGE_CACHE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "__pycache__")
_UNRESOLVED = object()
_cache_dir = _UNRESOLVED
_cache_lock = threading.Lock()


def _writable_dir(path: str, *, private: bool = False) -> bool:
    """True when ``path`` exists (or can be created) and a file can be created in it.

    ``private`` (for the shared temp dir) also requires the directory to be owned by this
    user and not writable by group or others: a cache holds pickled machine code, so a
    directory someone else can write to must not be trusted.
    """
    try:
        os.makedirs(path, mode=0o700 if private else 0o777, exist_ok=True)
        if private and hasattr(os, "getuid"):
            st = os.stat(path)
            if st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                return False
        tempfile.TemporaryFile(dir=path).close()
        return True
    except OSError:
        return False


def _candidate_dirs():
    """``(path, private)`` in order of preference; see :func:`cache_dir`."""
    env = os.environ.get("NUMBA_CACHE_DIR", "")
    if env:
        yield env, False
    yield _PACKAGE_CACHE, False
    uid = os.getuid() if hasattr(os, "getuid") else os.environ.get("USERNAME", "user")
    yield os.path.join(tempfile.gettempdir(), f"posenc_np-numba-{uid}"), True


def _resolve_cache_dir(candidates) -> str | None:
    """First writable directory among ``candidates`` (``(path, private)`` pairs), else None."""
    for path, private in candidates:
        if _writable_dir(path, private=private):
            return path
    return None


def cache_dir() -> str | None:
    """The directory compiled kernels are cached in, or ``None`` when caching is off."""
    global _cache_dir
    with _cache_lock:
        if _cache_dir is _UNRESOLVED:
            _cache_dir = _resolve_cache_dir(_candidate_dirs())
        return _cache_dir


class _NoAliasCompiler(_numba_compiler.Compiler):
    """Numba's compiler, with every pointer argument of the compiled function marked
    ``noalias`` (the flag Numba sets itself on a ``prange`` body whose arrays it can tell
    apart). See ``noalias`` in :func:`njit_kernel`."""

    def define_pipelines(self):
        self.state.flags.noalias = True
        return super().define_pipelines()


def njit_kernel(**overrides):
    """``numba.njit`` with the shared kernel settings; keyword arguments override them.

    Usage::

        @njit_kernel()
        def _kernel(x, out):
            for i in numba.prange(x.shape[0]):
                ...

    Helpers called from a kernel (no ``prange``) use ``njit_kernel(parallel=False)``.
    """
    options = dict(parallel=True, cache=True, fastmath=set(FASTMATH), nogil=True, error_model="numpy")
    if overrides.pop("noalias", False):
        options["pipeline_class"] = _NoAliasCompiler
    options.update(overrides)

    def decorate(func):
        if not options.get("cache"):
            return numba.njit(**options)(func)
        directory = cache_dir()
        if directory is None:
            return numba.njit(**{**options, "cache": False})(func)
        saved = _numba_config.CACHE_DIR
        # Numba's locator reads config.CACHE_DIR when the dispatcher is created; the
        # package __pycache__ is what Numba's in-tree locator uses when it is "" anyway.
        _numba_config.CACHE_DIR = "" if directory == _PACKAGE_CACHE else directory
        try:
            return _tolerate_bad_cache(numba.njit(**options)(func))
        except RuntimeError:  # "cannot cache function ...: no locator available"
            return numba.njit(**{**options, "cache": False})(func)
        finally:
            _numba_config.CACHE_DIR = saved

    return decorate


def _tolerate_bad_cache(dispatcher):
    """Make a damaged on-disk cache cost a compile instead of failing every call.

    Numba's ``Cache.load_overload`` unpickles the index and data files and lets any error
    through; ``save_overload`` re-reads the index first, so a corrupt index also makes every
    save fail. Here a failed load is a miss, and a failed save removes the unreadable index
    and saves again (the other signatures it listed recompile once, then are cached again).
    """
    cache = getattr(dispatcher, "_cache", None)
    load, save = getattr(cache, "load_overload", None), getattr(cache, "save_overload", None)
    if load is None or save is None:
        return dispatcher

    def load_overload(sig, target_context):
        try:
            return load(sig, target_context)
        except Exception:  # noqa: BLE001 - truncated/garbage/foreign cache files: any unpickling error
            return None

    def save_overload(sig, data):
        try:
            save(sig, data)
        except Exception:  # noqa: BLE001 - the index could not be read back: start a fresh one
            index = getattr(getattr(cache, "_cache_file", None), "_index_path", None)
            if index:
                with contextlib.suppress(OSError):
                    os.unlink(index)
            with contextlib.suppress(Exception):
                save(sig, data)

    cache.load_overload = load_overload
    cache.save_overload = save_overload
    return dispatcher


class blas_single_thread:
    """Context manager: every loaded BLAS limited to one thread; thread-safe and re-entrant.

    The limit is process-wide (BLAS has no per-thread setting), so concurrent callers share
    it: the first one in sets it and the last one out restores the previous setting (a plain
    ``threadpool_limits`` per caller would let an early leaver re-enable BLAS threads under a
    running kernel, and a late leaver leave BLAS at one thread for good). scipy's BLAS, the
    one Numba's ``np.dot`` calls, is loaded before the first limit so that it is covered.
    One ``ThreadpoolController`` is reused: a new one rescans the loaded libraries (~1 ms).
    (Design from the ALiBi kernel, ``posenc_np/kernels/alibi.py``.)
    """

    _lock = threading.Lock()
    _depth = 0
    _controller = None
    _limiter = None

    def __enter__(self):
        cls = type(self)
        with cls._lock:
            if cls._depth == 0:
                if cls._controller is None:
                    try:
                        import scipy.linalg.cython_blas  # noqa: F401  (the BLAS Numba's np.dot uses)
                    except ImportError:  # pragma: no cover - scipy is a dependency
                        pass
                    from threadpoolctl import ThreadpoolController
                    cls._controller = ThreadpoolController()
                cls._limiter = cls._controller.limit(limits=1, user_api="blas")
            cls._depth += 1
        return self

    def __exit__(self, *exc):
        cls = type(self)
        with cls._lock:
            cls._depth -= 1
            if cls._depth == 0:
                cls._limiter.restore_original_limits()
                cls._limiter = None
        return False


_launch_lock = threading.RLock()
_layer_threadsafe = False


def _threadsafe_known() -> bool:
    """True once a parallel region has run under a thread-safe layer (omp/tbb)."""
    global _layer_threadsafe
    if not _layer_threadsafe:
        try:
            _layer_threadsafe = numba.threading_layer() in _THREADSAFE_LAYERS
        except ValueError:  # no parallel region has run yet, so no layer is chosen
            return False
    return _layer_threadsafe


@contextlib.contextmanager
def launch_guard():
    """Serialise kernel launches unless the threading layer is known to be thread-safe."""
    if _threadsafe_known():
        yield
        return
    with _launch_lock:
        yield
