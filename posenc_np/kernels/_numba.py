"""Numba settings shared by every kernel in :mod:`posenc_np.kernels` (RoPE, ALiBi attention, the
model's fused layers), the vectorisable ``exp`` and maximum they share, and a software prefetch
(:func:`prefetch_lines`, used by the RoPE kernel) and the allocation of large new outputs on huge
pages (:func:`new_array`, used by the ALiBi kernels): one place decides how kernels are compiled
(:func:`njit_kernel`), cached (:func:`cache_dir`) and launched (:func:`launch_guard`,
:class:`blas_single_thread`).

``FASTMATH``
    ``{"nsz", "arcp", "contract", "afn", "reassoc"}``: everything in ``fastmath=True``
    *except* ``nnan`` and ``ninf``, so inf/NaN inputs, ``-inf`` masks and online softmax
    stay correct. ``afn`` (approximate functions) was measured on this build (llvmlite
    0.50, no SVML): ``math.sin``/``math.cos``/``math.exp`` give bit-identical results with
    and without it on 10^6 random float64 arguments (sin on [-1e4, 1e4], exp on [-80, 0]),
    and are 15-30 % faster. If Numba is built with Intel SVML, vectorised loops may use
    SVML's 4-ULP variants under ``afn``; the RoPE tests bound the on-the-fly-angle error
    against the float64 reference either way.
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

The cache directory is handed to Numba only while a kernel is being decorated (the cache
locator captures it then), so user code that also uses Numba keeps its own cache settings;
``import posenc_np`` and ``import posenc_np.kernels`` import none of this.
"""

from __future__ import annotations

import contextlib
import math
import os
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before Numba loads libgomp; see the docstring

import numba  # noqa: E402
import numpy as np  # noqa: E402
from llvmlite import ir  # noqa: E402
from numba import types  # noqa: E402
from numba.core import compiler as _numba_compiler  # noqa: E402
from numba.core import config as _numba_config  # noqa: E402
from numba.core.extending import intrinsic, overload  # noqa: E402

__all__ = ["FASTMATH", "blas_single_thread", "cache_dir", "exp", "from_order_key", "launch_guard", "new_array",
           "njit_kernel", "order_key", "prefetch_lines"]

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
    """The directory compiled kernels are cached in, or ``None`` when caching is off; resolved once.

    ``NUMBA_CACHE_DIR`` if set and writable; else Numba's default, the package's
    ``kernels/__pycache__``, if writable; else a private per-user directory under the system temp
    dir (``posenc_np-numba-<uid>``, mode 0700, owned by the user); else no caching. A read-only
    install or cache never makes an import or a call fail, nor does a damaged one
    (:func:`_tolerate_bad_cache`): either only costs a compile.
    """
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


def njit_kernel(**overrides: object) -> Callable[[Callable], Callable]:
    """``numba.njit`` with the shared kernel settings; keyword arguments override them.

    ``parallel=True``, ``cache=True`` (in :func:`cache_dir`), ``fastmath=FASTMATH``, ``nogil=True``,
    ``error_model="numpy"`` (``x / 0`` gives inf/NaN, not an exception); lazy compilation (no
    signatures). Helpers called from a kernel (no ``prange``) use ``njit_kernel(parallel=False)``.
    ``noalias=True`` marks every pointer argument ``noalias`` (the promise Numba makes for a
    ``prange`` body whose arrays it can tell apart): LLVM then vectorises loops that read one array
    and write another without run-time overlap checks (the RoPE row loop, L2-resident rows: 25-45 %
    less time per row, measured on the 2-core box). Only for functions whose callers guarantee
    that no array they write shares memory with another array argument.
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

    For a parallel region that calls BLAS (``np.dot`` in ``prange``): a threaded BLAS inside busy
    Numba threads oversubscribes, and OpenBLAS under OpenMP warns "Detect OpenMP Loop and this
    application may hang".

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
def launch_guard() -> Iterator[None]:
    """Around a parallel kernel call: a no-op under the thread-safe ``omp`` and ``tbb`` threading
    layers, a process-wide lock under ``workqueue`` (which two Python threads must not enter at once)."""
    if _threadsafe_known():
        yield
        return
    with _launch_lock:
        yield


# --------------------------------------------------------------------------- a vectorisable exp
#
# ``math.exp`` inside a loop is a call to libm, which keeps LLVM from vectorising the loop (this
# build has no SVML). ``exp`` below is a polynomial with a bit-built power of two: loops that use
# it vectorise on AVX2. The fused ALiBi attention and the model's fused layers (softmax,
# cross-entropy, tanh-GELU) share it, so their results do not depend on the libm of the machine.
# The helpers are compiled into (and cached with) the kernels that call them: ``cache=False`` here
# keeps ``import posenc_np.kernels._numba`` from resolving the cache directory (cache_dir()).

@intrinsic
def _bits_to_f32(typingctx, x):
    """Reinterpret int32 bits as float32 (LLVM ``bitcast``; vectorises)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())
    return types.float32(types.int32), codegen


@intrinsic
def _bits_to_f64(typingctx, x):
    """Reinterpret int64 bits as float64."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())
    return types.float64(types.int64), codegen


@njit_kernel(parallel=False, fastmath=False, cache=False)
def _reduce32(x, nf):
    """``x - nf ln2`` in float32 with ln2 in two parts (Cody and Waite: the high part has 9
    significant bits, so ``nf * hi`` and its subtraction are exact for |nf| < 2^15), compiled
    without fast-math so that LLVM cannot merge the two subtractions (see :func:`_reduce64`)."""
    return (x - nf * np.float32(0.693359375)) - nf * np.float32(-2.12194440e-4)


@njit_kernel(parallel=False, cache=False)
def _exp32(x):
    # e^x for float32 x <= ~88 (also -inf and NaN), all in float32 (16 lanes of AVX-512, 8 of
    # AVX2): x = n ln2 + r with |r| <= ln2/2 (_reduce32), e^r by its degree-7 Taylor polynomial
    # (truncation < 5.3e-9 relative), 2^n built from the exponent bits. Max error measured
    # 0.91 ulp on [-86.9, 88.0] (the same polynomial evaluated in float64 measured 0.58 ulp and
    # took 1.3x the time per tile of the ALiBi forward's score loop); exp(x) = 0 for x < -87
    # (below float32's normal range), NaN in gives NaN out. n stays a float (np.floor) until
    # the int32 conversion: float -> int64 has no AVX2 instruction and kept loops scalar.
    lo = np.float32(-87.0)
    xc = lo if x < lo else x
    xc = np.float32(0.0) if xc != xc else xc  # NaN: keep n finite; r below stays NaN
    nf = np.floor(xc * np.float32(1.4426950408889634) + np.float32(0.5))
    r = _reduce32(x, nf)
    p = np.float32(1.0 / 5040.0)
    p = p * r + np.float32(1.0 / 720.0)
    p = p * r + np.float32(1.0 / 120.0)
    p = p * r + np.float32(1.0 / 24.0)
    p = p * r + np.float32(1.0 / 6.0)
    p = p * r + np.float32(0.5)
    p = p * r + np.float32(1.0)
    p = p * r + np.float32(1.0)
    res = p * _bits_to_f32((np.int32(nf) + np.int32(127)) << np.int32(23))
    return np.float32(0.0) if x < lo else res


@njit_kernel(parallel=False, fastmath=False, cache=False)
def _reduce64(x, nf):
    """``x - nf ln2`` with ln2 in two parts, evaluated as written: compiled without fast-math so
    that LLVM cannot reassociate the two subtractions into one (which loses the low part:
    ~200 ulp at |x| ~ 700). Small enough that LLVM inlines it into the vectorised loops; the
    instructions keep their own (strict) flags there."""
    return (x - nf * 0.6931471803691238) - nf * 1.9082149292705877e-10


@njit_kernel(parallel=False, cache=False)
def _exp64(x):
    # float64 version of _exp32: degree-12 Taylor polynomial (truncation < 6e-17 relative),
    # Cody-Waite reduction with a two-part ln2 (_reduce64); n converted through int32
    # (float64 -> int32 vectorises on AVX2, float64 -> int64 does not). Max error measured
    # 2.0 ulp against mpmath on [-707, 709].
    lo = -708.0
    xc = lo if x < lo else x
    xc = 0.0 if xc != xc else xc
    nf = np.floor(xc * 1.4426950408889634 + 0.5)
    r = _reduce64(x, nf)
    p = 1.0 / 479001600.0
    p = p * r + 1.0 / 39916800.0
    p = p * r + 1.0 / 3628800.0
    p = p * r + 1.0 / 362880.0
    p = p * r + 1.0 / 40320.0
    p = p * r + 1.0 / 5040.0
    p = p * r + 1.0 / 720.0
    p = p * r + 1.0 / 120.0
    p = p * r + 1.0 / 24.0
    p = p * r + 1.0 / 6.0
    p = p * r + 0.5
    p = p * r + 1.0
    p = p * r + 1.0
    res = p * _bits_to_f64((np.int64(np.int32(nf)) + np.int64(1023)) << np.int64(52))
    return 0.0 if x < lo else res


def exp(x: float) -> float:
    """Vectorisable e^x in the dtype of ``x`` (dispatches to :func:`_exp32` / :func:`_exp64`); callable
    from kernels only."""
    raise NotImplementedError("only callable from Numba kernels")


@overload(exp, jit_options={"fastmath": set(FASTMATH)})
def _exp_overload(x):
    if x == types.float32:
        return lambda x: _exp32(x)
    return lambda x: _exp64(x)


# --------------------------------------------------------------------------- a vectorisable maximum
#
# Without fast-math's ``nnan`` LLVM keeps a float max reduction (``m = x if x > m else m``)
# scalar: reordering it could change which NaN wins. An integer max reduction has no such
# question and vectorises, so a row maximum is taken over the floats' *order keys*: the bits of
# a float as a signed integer, the magnitude bits flipped when the sign is set, an integer that
# orders like the float (-inf < -1 < -0 < +0 < 1 < inf < +NaN). NaN needs its own test (a
# negative NaN orders below -inf); the ALiBi forward keeps one. The flip is its own inverse.

def _flip_sign_magnitude(builder, bits, width):
    mask = builder.and_(builder.ashr(bits, ir.Constant(bits.type, width - 1)),
                        ir.Constant(bits.type, (1 << (width - 1)) - 1))
    return builder.xor(bits, mask)


@intrinsic
def order_key(typingctx, x):
    """The order key of float32 / float64 ``x``: an int32 / int64 ordered like ``x`` (see above)."""
    if not isinstance(x, types.Float):
        return None
    width = x.bitwidth

    def codegen(context, builder, signature, args):
        return _flip_sign_magnitude(builder, builder.bitcast(args[0], ir.IntType(width)), width)
    return getattr(types, f"int{width}")(x), codegen


@intrinsic
def from_order_key(typingctx, key):
    """The float whose :func:`order_key` is the int32 / int64 ``key``."""
    if not isinstance(key, types.Integer) or key.bitwidth not in (32, 64):
        return None
    width = key.bitwidth

    def codegen(context, builder, signature, args):
        bits = _flip_sign_magnitude(builder, args[0], width)
        return builder.bitcast(bits, ir.FloatType() if width == 32 else ir.DoubleType())
    return getattr(types, f"float{width}")(key), codegen


# --------------------------------------------------------------------------- software prefetch
#
# A streaming loop whose body does more than load and store (the RoPE rotation: table loads,
# products, sums) leaves the hardware prefetchers too few cache misses in flight to keep up with
# a fast L3 or DRAM: it stalls on each new line. ``prefetch_lines`` asks for the lines of a row a
# few rows ahead (LLVM ``llvm.prefetch``: a hint, which never faults, so addresses past a page the
# process owns are harmless). What it buys is on ``docs/benchmarks.md`` ("Kernel mechanisms").

def _prefetch(rw: int):
    @intrinsic
    def prefetch(typingctx, arr, index):
        """Prefetch the cache line of ``arr[index]`` (``arr`` 1-D, C-contiguous) into all cache levels,
        for reading (rw 0) or for writing (rw 1)."""
        if not isinstance(arr, types.Array) or not isinstance(index, types.Integer):
            return None

        def codegen(context, builder, signature, args):
            data = context.make_array(signature.args[0])(context, builder, args[0]).data
            byte_ptr = ir.IntType(8).as_pointer()
            i32 = ir.IntType(32)
            fn = builder.module.declare_intrinsic("llvm.prefetch", [byte_ptr],
                                                  ir.FunctionType(ir.VoidType(), [byte_ptr, i32, i32, i32]))
            # rw, locality 3 (keep in every level), cache type 1 (data)
            builder.call(fn, [builder.bitcast(builder.gep(data, [args[1]]), byte_ptr), ir.Constant(i32, rw),
                              ir.Constant(i32, 3), ir.Constant(i32, 1)])
            return context.get_dummy_value()
        return types.void(arr, index), codegen
    return prefetch


_prefetch_read, _prefetch_write = _prefetch(0), _prefetch(1)


@njit_kernel(parallel=False, cache=False, inline="always")
def prefetch_lines(buf, start, count, write):
    """Prefetch every 64-byte line of ``buf[start:start + count]`` (``buf`` 1-D, C-contiguous, ``start >= 0``),
    for writing when ``write`` (a line that will be stored to arrives exclusive) else for reading."""
    step = max(1, 64 // buf.itemsize)
    for k in range(start, start + count, step):
        if write:
            _prefetch_write(buf, numba.uint64(k))
        else:
            _prefetch_read(buf, numba.uint64(k))


# --------------------------------------------------------------------------- outputs on huge pages
#
# NumPy asks Linux for transparent huge pages (``madvise``) on arrays of 4 MiB and more, but a
# 2 MiB page can only back a 2 MiB-aligned stretch of an allocation, and malloc's large blocks
# start just past a 4 KiB page boundary: a fresh 4 MiB array gets almost none, and each of its
# 4 KiB pages is a page fault (about 8 us each on the virtual machine of docs/benchmarks.md). The
# fused ALiBi kernels' outputs of that size therefore start on a 2 MiB boundary: in a loop of
# forward + backward calls at (1, 8, 2048, 64), 3458 -> 119 page faults a call. What it buys is on
# docs/benchmarks.md ("Kernel mechanisms"). (The RoPE kernel's new outputs measured no gain: an
# array of 64 MiB and more is mostly huge pages anyway.)

#: Alignment of a large new output, bytes (x86-64's transparent huge page).
HUGE_PAGE = 2 << 20
#: From this size NumPy asks for huge pages (and :func:`new_array` aligns).
_ALIGN_FROM = 4 << 20


def new_array(shape: tuple[int, ...], dtype, *, zero: bool = False) -> np.ndarray:
    """A new C-contiguous array for a kernel's output (``np.empty``, or ``np.zeros`` if ``zero``)
    whose data start on a :data:`HUGE_PAGE` boundary from 4 MiB on.

    A large one is a view of a ``uint8`` buffer up to 2 MiB longer (its ``base``); the unused head
    and tail are never written, so their pages are never faulted in.
    """
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    make = np.zeros if zero else np.empty
    if nbytes < _ALIGN_FROM:
        return make(shape, dtype)
    buf = make(nbytes + HUGE_PAGE, np.uint8)
    start = -buf.__array_interface__["data"][0] % HUGE_PAGE
    return buf[start:start + nbytes].view(dtype).reshape(shape)
