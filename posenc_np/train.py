"""Training loop, per-step metrics, progress display, NPZ checkpoints with optimizer and RNG state.

Determinism: all randomness comes from ``numpy.random.Generator`` objects passed in or
created from a seed (never NumPy's global state). Model initialisation uses
``ModelConfig.seed``; batches use the ``rng`` of :func:`train`. With the same seeds, on the
same machine and NumPy/BLAS build *and the same number of BLAS threads*, the loss curve is
identical bit for bit, and resuming from a checkpoint reproduces the uninterrupted run bit
for bit (the checkpoint holds the parameters, Adam's moments and step count, and the data
generator's exact state). A different BLAS thread count changes how OpenBLAS splits some
matrix products (the weight gradients), so curves then agree only to rounding;
``train(blas_threads=1)`` fixes the count. See ``docs/model.md``.

A *task* is any object with ``sample(rng, batch_size) -> (tokens, targets)`` (integer arrays
``(B, T)``; targets use ``ignore_index=-100`` for unscored positions); see
:mod:`posenc_np.study` for copy, reverse and lag.

Checkpoint format (NPZ written with ``allow_pickle=False``, read with ``allow_pickle=False``):

``meta``
    uint8 array holding UTF-8 JSON: format name and version, model config, step, the bit
    generator's state (PCG64 state integers as JSON numbers), optimizer hyper-parameters and
    any ``extra`` dict (e.g. the training schedule).
``param.<name>`` / ``adam.m.<name>`` / ``adam.v.<name>``
    parameters and Adam moments, in the model's dtype.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import sys
import time
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TextIO

import numpy as np
from numpy.typing import ArrayLike

from ._checks import as_int_array, check_alloc, check_bool, check_int, check_real
from ._files import atomic_write, check_target, npz_bytes, open_regular
from .fused import NUMPY
from .layers import softmax_cross_entropy_backward
from .model import ModelConfig, Transformer
from .optim import Adam, check_betas, check_lrs, cosine_schedule

__all__ = ["Checkpoint", "Progress", "evaluate", "load_checkpoint", "save_checkpoint", "train"]

class Task(Protocol):
    """What :func:`train` samples batches from."""

    def sample(self, rng: np.random.Generator, batch_size: int) -> tuple[np.ndarray, np.ndarray]: ...


CHECKPOINT_FORMAT = "posenc_np.checkpoint"
CHECKPOINT_VERSION = 1


# --------------------------------------------------------------------------- progress

class Progress:
    """A progress bar on ``file`` (default stderr), drawn only when ``file`` is a terminal (a log
    or a pipe gets nothing) and ``enabled``: tqdm when installed, else a plain line printer (at
    most one line per ``min_interval`` seconds, and the last).

    ``update(n, **metrics)`` advances by ``n`` and shows the metrics.

    Examples
    --------
    >>> import io
    >>> from posenc_np.train import Progress
    >>> class Terminal(io.StringIO):        # a file that says it is a terminal (a log or a pipe gets nothing)
    ...     def isatty(self): return True
    >>> bar = Progress(10, desc="train", file=(out := Terminal()), use_tqdm=False)
    >>> bar.update(10, loss=0.5); bar.close(); out.getvalue().splitlines()
    ['train 10/10 loss=0.5']
    """

    def __init__(self, total: int, *, initial: int = 0, desc: str = "", enabled: bool = True, file: TextIO | None = None,
                 use_tqdm: bool | None = None, min_interval: float = 2.0) -> None:
        self.file = file or sys.stderr
        isatty = getattr(self.file, "isatty", None)
        enabled = bool(enabled and callable(isatty) and isatty())
        self.total, self.n, self.desc, self.enabled = total, initial, desc, enabled
        self.min_interval = min_interval
        self._bar = None
        self._last_print = -1.0
        if not enabled:
            return
        if use_tqdm is not False:
            try:
                from tqdm.auto import tqdm
            except ImportError:
                tqdm = None
            if tqdm is not None:
                self._bar = tqdm(total=total, initial=initial, desc=desc, file=self.file, leave=False,
                                 dynamic_ncols=True, mininterval=0.5)

    def update(self, n: int = 1, **metrics: object) -> None:
        if not self.enabled:
            return
        self.n += n
        text = " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in metrics.items())
        if self._bar is not None:
            self._bar.update(n)
            if metrics:
                self._bar.set_postfix_str(text, refresh=False)
            return
        now = time.perf_counter()
        if self.n >= self.total or now - self._last_print >= self.min_interval:
            self._last_print = now
            print(f"{self.desc} {self.n}/{self.total} {text}".strip(), file=self.file, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


# --------------------------------------------------------------------------- checkpoints

@dataclass
class Checkpoint:
    """What :func:`load_checkpoint` returns.

    Examples
    --------
    >>> import os, tempfile
    >>> import numpy as np
    >>> from posenc_np.model import ModelConfig, Transformer
    >>> from posenc_np.train import load_checkpoint, save_checkpoint
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     model = Transformer(ModelConfig(vocab_size=8, d_model=16, n_heads=2, n_layers=1))
    ...     state = np.random.default_rng(0).bit_generator.state
    ...     save_checkpoint(path := os.path.join(tmp, "c.npz"), model, model.ops.Adam(model.params), 5, state)
    ...     ckpt = load_checkpoint(path)
    >>> type(ckpt).__name__, ckpt.step, ckpt.optimizer.t, ckpt.extra, type(ckpt.rng).__name__
    ('Checkpoint', 5, 0, {}, 'Generator')
    """

    model: Transformer
    optimizer: Adam
    step: int
    rng: np.random.Generator
    extra: dict


_MAX_META_BYTES = 16 << 20  # the JSON header of a checkpoint; larger means a hostile or foreign file
_META_KEYS = {"format", "version", "model_config", "step", "rng_state", "optimizer", "extra"}
#: Bit generators whose state a checkpoint may carry (``Generator(<name>())``).
_BIT_GENERATORS = ("PCG64", "PCG64DXSM", "Philox", "SFC64", "MT19937")


def _json_array(obj) -> np.ndarray:
    return np.frombuffer(json.dumps(obj, sort_keys=True).encode("utf-8"), dtype=np.uint8).copy()


def _generator_from_state(state) -> np.random.Generator:
    """A new Generator in ``state`` (``bit_generator.state``); ``ValueError`` if it is not well-formed."""
    if not isinstance(state, dict) or state.get("bit_generator") not in _BIT_GENERATORS:
        name = state.get("bit_generator") if isinstance(state, dict) else type(state).__name__
        raise ValueError(f"rng_state must be the state dict of one of {list(_BIT_GENERATORS)}, got {name!r}")
    bit_generator = getattr(np.random, state["bit_generator"])()
    try:
        bit_generator.state = state
    except (TypeError, ValueError, KeyError, IndexError, OverflowError) as exc:
        raise ValueError(f"rng_state is not a valid {state['bit_generator']} state: {exc}") from exc
    return np.random.Generator(bit_generator)


def _is_checkpoint(path: str) -> bool:
    """True when ``path`` is a readable posenc_np checkpoint (only its ``meta`` entry is read)."""
    try:
        with open_regular(path, "checkpoint") as fh, zipfile.ZipFile(fh) as zf:
            meta = _read_member(zf, "meta", path, (None,), np.dtype(np.uint8), _MAX_META_BYTES)
        return json.loads(meta.tobytes().decode("utf-8")).get("format") == CHECKPOINT_FORMAT
    except (OSError, ValueError, zipfile.BadZipFile, NotImplementedError, AttributeError, KeyError):
        return False


def _check_checkpoint_target(path) -> str:
    """``path`` may receive a checkpoint: writable directory, and nothing there but a checkpoint."""
    path = check_target(path, "checkpoint_path")
    if os.path.exists(path) and not _is_checkpoint(path):
        raise ValueError(f"checkpoint_path {path!r} exists and is not a posenc_np checkpoint; refusing to overwrite "
                         "it (remove it or choose another path)")
    return path


def save_checkpoint(path: str | os.PathLike, model: Transformer, optimizer: Adam, step: int, rng_state: dict, *,
                    extra: dict | None = None) -> None:
    """Write model, optimizer, step and RNG state to ``path`` (NPZ, no pickle; atomic replace).

    ``rng_state`` is ``generator.bit_generator.state`` (a JSON-able dict). The file is written
    to ``<path>.tmp<pid>`` in the same directory, fsynced and renamed into place; on failure
    the temporary file is removed, and temporary files of earlier writers that were killed are
    swept first (see :mod:`posenc_np._files`). ``path`` must not hold anything but a checkpoint
    (it is never clobbered), and every parameter must be finite (a checkpoint
    :func:`load_checkpoint` would refuse is not written).

    Examples
    --------
    >>> import os, tempfile
    >>> import numpy as np
    >>> from posenc_np.model import ModelConfig, Transformer
    >>> from posenc_np.train import save_checkpoint
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     model = Transformer(ModelConfig(vocab_size=8, d_model=16, n_heads=2, n_layers=1))
    ...     state = np.random.default_rng(0).bit_generator.state
    ...     save_checkpoint(os.path.join(tmp, "c.npz"), model, model.ops.Adam(model.params), 5, state,
    ...                     extra={"note": "after 5 steps"})
    ...     names = sorted(os.listdir(tmp))
    >>> names                      # written atomically: no temporary file left behind
    ['c.npz']
    """
    if not isinstance(model, Transformer):
        raise TypeError(f"model must be a posenc_np.model.Transformer, got {type(model).__name__}")
    if not isinstance(optimizer, Adam) or optimizer.params is not model.params:
        raise TypeError("optimizer must be the posenc_np.optim.Adam created over model.params")
    step = check_int(step, "step", minimum=0)
    _generator_from_state(rng_state)
    if extra is not None and not isinstance(extra, dict):
        raise TypeError(f"extra must be a dict or None, got {type(extra).__name__}")
    for k, v in model.params.items():
        if not np.all(np.isfinite(v)):
            raise ValueError(f"parameter {k!r} holds NaN or inf; not writing a checkpoint that cannot be loaded")
    path = _check_checkpoint_target(path)
    opt = optimizer.state_dict()
    meta = {"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, "model_config": json.loads(model.cfg.to_json()),
            "step": step, "rng_state": rng_state, "optimizer": opt["hyper"], "extra": extra or {}}
    try:
        meta_array = _json_array(meta)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"rng_state and extra must be JSON-serialisable: {exc}") from exc
    arrays = {"meta": meta_array}
    arrays.update({f"param.{k}": v for k, v in model.params.items()})
    arrays.update({f"adam.{k}": v for k, v in opt["arrays"].items()})
    data = npz_bytes(arrays)
    atomic_write(path, lambda fh: fh.write(data))


def _read_member(zf: zipfile.ZipFile, name: str, path, shape, dtype: np.dtype, max_bytes: int | None = None):
    """Read NPY member ``name`` after checking its header against ``shape`` and ``dtype``.

    ``shape`` may hold ``None`` for a free axis (then ``max_bytes`` bounds the size). Only the
    expected number of bytes is ever read, so a hostile header cannot cause a large allocation.
    The member must be stored or deflated, not encrypted, and end where its array ends; reading to
    its end makes ``zipfile`` compare the CRC-32, so a damaged byte is refused, not loaded.
    """
    info = zf.getinfo(f"{name}.npy")
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED) or info.flag_bits & 0x1:
        raise ValueError(f"{path}: entry {name!r} is encrypted or uses a compression other than stored/deflate")
    try:
        member = zf.open(info)
    except (NotImplementedError, RuntimeError) as exc:  # a ZIP version or feature zipfile does not read
        raise ValueError(f"{path}: entry {name!r} cannot be read ({exc})") from exc
    with member as fh:
        try:
            version = np.lib.format.read_magic(fh)
            read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                np.lib.format.read_array_header_2_0
            got_shape, fortran, got_dtype = read_header(fh)
        except (ValueError, OSError, EOFError) as exc:
            raise ValueError(f"{path}: entry {name!r} is not a valid NPY array ({exc})") from exc
        ok = (got_dtype == dtype and len(got_shape) == len(shape)
              and all(e is None or e == g for e, g in zip(shape, got_shape)))
        if not ok:
            want = tuple("*" if e is None else e for e in shape)
            raise ValueError(f"{path}: entry {name!r} is {got_dtype} {got_shape}, expected {dtype} {want}")
        nbytes = dtype.itemsize * math.prod(got_shape)
        if max_bytes is not None and nbytes > max_bytes:
            raise ValueError(f"{path}: entry {name!r} holds {nbytes} bytes, more than the limit {max_bytes}")
        data = fh.read(nbytes)
        if len(data) != nbytes:
            raise ValueError(f"{path}: entry {name!r} is truncated ({len(data)} of {nbytes} bytes)")
        if fh.read(1):
            raise ValueError(f"{path}: entry {name!r} holds bytes after its {got_dtype} {got_shape} array")
    return np.frombuffer(data, dtype=dtype).reshape(got_shape, order="F" if fortran else "C").copy()


def _read_meta(zf: zipfile.ZipFile, path) -> dict:
    raw = _read_member(zf, "meta", path, (None,), np.dtype(np.uint8), _MAX_META_BYTES)
    try:
        meta = json.loads(raw.tobytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"{path}: the 'meta' entry is not UTF-8 JSON ({exc})") from exc
    if not isinstance(meta, dict) or meta.get("format") != CHECKPOINT_FORMAT or meta.get("version") != CHECKPOINT_VERSION:
        got = meta if not isinstance(meta, dict) else (meta.get("format"), meta.get("version"))
        raise ValueError(f"{path}: unsupported checkpoint format {got!r} (expected {CHECKPOINT_FORMAT!r} "
                         f"version {CHECKPOINT_VERSION})")
    if set(meta) != _META_KEYS:
        raise ValueError(f"{path}: 'meta' has keys {sorted(meta)}, expected {sorted(_META_KEYS)}")
    step = meta["step"]
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"{path}: step must be a non-negative integer, got {step!r}")
    if not isinstance(meta["model_config"], dict) or not isinstance(meta["extra"], dict):
        raise ValueError(f"{path}: 'model_config' and 'extra' must be JSON objects")  # noqa: TRY004 - a bad file
    return meta


def _model_for(meta: dict, model, path) -> Transformer:
    """The model to load into: ``model`` if its config matches the stored one, else a new one."""
    try:
        cfg = ModelConfig(**meta["model_config"]).validate()
        check_alloc((cfg.vocab_size, cfg.d_model), cfg.dtype, "token embedding (vocab_size, d_model)")
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: invalid model config: {exc}") from exc
    if model is None:
        return Transformer(cfg)
    if not isinstance(model, Transformer):
        raise TypeError(f"model must be a posenc_np.model.Transformer or None, got {type(model).__name__}")
    mine = {k: v for k, v in json.loads(model.cfg.to_json()).items() if k != "seed"}
    theirs = {k: v for k, v in json.loads(cfg.to_json()).items() if k != "seed"}  # seed only affects init
    if mine != theirs:
        raise ValueError(f"{path}: the checkpoint's model config {theirs} differs from the model's {mine}")
    return model


def load_checkpoint(path: str | os.PathLike, model: Transformer | None = None) -> Checkpoint:
    """Read a checkpoint written by :func:`save_checkpoint` (no pickle, bounded reads).

    With ``model=None`` a model is built from the stored config; otherwise the stored
    parameters are copied into ``model`` (configs must agree up to the seed). Returns the
    model, a restored :class:`~posenc_np.optim.Adam`, the step, a Generator in the saved state,
    and the ``extra`` dict.

    The whole file is checked before anything is assigned: every entry present and no other
    (``meta``, ``param.<name>``, ``adam.m.<name>``, ``adam.v.<name>``), dtypes and shapes equal
    to the model's, finite values, ``step`` a non-negative integer, a well-formed bit-generator
    state and optimizer hyper-parameters. Any problem, including a zero-byte, truncated or
    corrupt file, raises ``ValueError`` naming the path and the problem, and ``model`` is left
    untouched; so does anything but a regular file (a directory, a FIFO, a device, also behind a
    symbolic link) and a file larger than a checkpoint of the model can be. A missing file
    raises ``FileNotFoundError``.

    Examples
    --------
    >>> import os, tempfile
    >>> import numpy as np
    >>> from posenc_np.model import ModelConfig, Transformer
    >>> from posenc_np.train import load_checkpoint, save_checkpoint
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     model = Transformer(ModelConfig(vocab_size=8, d_model=16, n_heads=2, n_layers=1))
    ...     rng = np.random.default_rng(0)
    ...     save_checkpoint(path := os.path.join(tmp, "c.npz"), model, model.ops.Adam(model.params), 5,
    ...                     rng.bit_generator.state)
    ...     ckpt = load_checkpoint(path)          # a new model, built from the stored config
    >>> same = all(np.array_equal(ckpt.model.params[k], v) for k, v in model.params.items())
    >>> ckpt.step, same, ckpt.rng.random() == rng.random()     # the generator resumes where it was saved
    (5, True, True)
    """
    path = os.fspath(path)
    if not os.path.lexists(path):
        raise FileNotFoundError(errno.ENOENT, "no such checkpoint", path)
    try:
        with open_regular(path, "checkpoint") as fh, zipfile.ZipFile(fh) as zf:
            names = set(zf.namelist())
            if "meta.npy" not in names:
                raise ValueError(f"{path} is not a posenc_np checkpoint (no 'meta' entry)")
            meta = _read_meta(zf, path)
            target = _model_for(meta, model, path)
            expected = {"meta"} | {f"{prefix}{k}" for k in target.params for prefix in ("param.", "adam.m.", "adam.v.")}
            found = {n[:-4] for n in names if n.endswith(".npy")}
            if found != expected or len(found) != len(names):
                raise ValueError(f"{path}: entries differ from the model's: missing {sorted(expected - found)}, "
                                 f"unexpected {sorted(names - {n + '.npy' for n in expected})}")
            # ZIP and NPY headers and deflate's worst case add well under 1 % and 4 KiB per entry
            limit = (3 * sum(v.nbytes for v in target.params.values()) + _MAX_META_BYTES) * 101 // 100 \
                + 4096 * len(expected)
            size = os.fstat(fh.fileno()).st_size
            if size > limit:
                raise ValueError(f"checkpoint {path}: {size} bytes, more than the {limit} a checkpoint of this "
                                 "model takes")
            arrays = {}
            for key in sorted(expected - {"meta"}):
                ref = target.params[key.split(".", 1)[1] if key.startswith("param.") else key.split(".", 2)[2]]
                arrays[key] = _read_member(zf, key, path, ref.shape, ref.dtype)
    except (zipfile.BadZipFile, NotImplementedError) as exc:  # the latter: a ZIP version zipfile does not read
        raise ValueError(f"{path}: not a readable checkpoint (corrupt or truncated NPZ: {exc})") from exc
    except (EOFError, zlib.error, OSError) as exc:
        raise ValueError(f"{path}: not a readable checkpoint ({type(exc).__name__}: {exc})") from exc
    params = {k[len("param."):]: v for k, v in arrays.items() if k.startswith("param.")}
    for k, v in params.items():
        if not np.all(np.isfinite(v)):
            raise ValueError(f"{path}: parameter {k!r} holds NaN or inf")
    try:
        rng = _generator_from_state(meta["rng_state"])
        opt = target.ops.Adam(target.params)  # to validate the state against these parameters; nothing assigned yet
        opt_state = {"hyper": meta["optimizer"],
                     "arrays": {k[len("adam."):]: v for k, v in arrays.items() if k.startswith("adam.")}}
        opt.check_state(opt_state)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{path}: {exc}") from exc
    target.load_params(params)  # everything is valid: from here on nothing can fail half-way
    opt.load_state_dict(opt_state)
    return Checkpoint(model=target, optimizer=opt, step=meta["step"], rng=rng, extra=meta["extra"])


# --------------------------------------------------------------------------- training

def train(model: Transformer, task: Task, steps: int, *, batch_size: int = 32, lr: float = 1e-3, warmup: int = 0,
          min_lr: float = 0.0, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
          clip: float | None = 1.0, seed: int = 0, rng: np.random.Generator | None = None,
          optimizer: Adam | None = None, start_step: int = 0, progress: bool = True, desc: str = "train",
          checkpoint_path: str | os.PathLike | None = None, checkpoint_every: int | None = None,
          callback: Callable[[dict], None] | None = None,
          blas_threads: int | None = None) -> list[dict]:
    """Train ``model`` on batches from ``task`` with AdamW, clipping and a cosine schedule.

    Runs steps ``start_step .. steps - 1`` (``steps`` is the *total*, so the schedule is
    the same for a resumed run). Each step: sample a batch with ``rng`` (and, for a model with
    randomized positions, its positions: :meth:`~posenc_np.model.Transformer.training_positions`), forward,
    cross-entropy, backward, clip the global gradient norm to ``clip`` (None = no clipping),
    ``lr = cosine_schedule(step, total=steps, lr=lr, warmup=warmup, min_lr=min_lr)``, Adam step.

    Every argument is checked before the first step (a checkpoint path in a missing or
    unwritable directory, or holding something that is not a checkpoint, fails here). A step
    whose loss or gradient is not finite raises ``ValueError`` naming the step before the
    parameters are updated; the last checkpoint written stays valid.

    Parameters
    ----------
    rng : Generator, optional
        Data generator; default ``np.random.default_rng(seed)``. Pass the one from
        :func:`load_checkpoint` to resume.
    optimizer : Adam, optional
        Default a new ``Adam(model.params, lr, betas, eps, weight_decay)``.
    checkpoint_path, checkpoint_every : optional
        Save a checkpoint after every ``checkpoint_every`` steps (and after the last).
    callback : callable ``(metrics) -> None``, optional
        Called after each step.
    progress : bool
        Show a progress bar (tqdm if installed, else printed lines on stderr).
    blas_threads : int, optional
        Run the loop with BLAS limited to this many threads (threadpoolctl); default: as
        configured. The loss curve is bit-reproducible for a fixed BLAS thread count (see
        ``docs/model.md``); ``blas_threads=1`` fixes it whatever the environment says.

    Returns
    -------
    list of dict
        Per step: ``step``, ``loss``, ``grad_norm`` (before clipping), ``lr``, ``tokens``,
        ``tokens_per_s`` (wall clock, not deterministic).

    Examples
    --------
    >>> from posenc_np.model import ModelConfig, Transformer
    >>> from posenc_np.study.tasks import CopyTask
    >>> from posenc_np.train import train
    >>> task, cfg = CopyTask(n=3, alphabet=4), ModelConfig(vocab_size=6, d_model=16, n_heads=2, n_layers=1)
    >>> history = train(Transformer(cfg), task, 3, batch_size=4, lr=0.01, progress=False)
    >>> [h["step"] for h in history], round(history[-1]["lr"], 6)   # cosine: 0.01 (1 + cos(2 pi / 3)) / 2 at step 2
    ([0, 1, 2], 0.0025)
    """
    if not (callable(getattr(model, "forward", None)) and callable(getattr(model, "backward", None))
            and isinstance(getattr(model, "params", None), dict)):
        raise TypeError(f"model must be a Transformer (forward, backward, params), got {type(model).__name__}")
    if not callable(getattr(task, "sample", None)):
        raise TypeError(f"task must have a sample(rng, batch_size) method, got {type(task).__name__}")
    steps = check_int(steps, "steps", minimum=0)
    start_step = check_int(start_step, "start_step", minimum=0, maximum=steps)
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    lr, min_lr = check_lrs(lr, min_lr)
    warmup = check_int(warmup, "warmup", minimum=0)
    if clip is not None:
        clip = check_real(clip, "clip", positive=True)
    progress = check_bool(progress, "progress")
    if checkpoint_every is not None:
        checkpoint_every = check_int(checkpoint_every, "checkpoint_every", minimum=1)
        if checkpoint_path is None:
            raise ValueError("checkpoint_every needs checkpoint_path")
        if not isinstance(model, Transformer):
            raise TypeError("checkpoints need a posenc_np.model.Transformer model")
        checkpoint_path = _check_checkpoint_target(checkpoint_path)
    elif checkpoint_path is not None:
        raise ValueError("checkpoint_path needs checkpoint_every (save after every N steps)")
    if callback is not None and not callable(callback):
        raise TypeError(f"callback must be callable or None, got {type(callback).__name__}")
    if blas_threads is not None:
        blas_threads = check_int(blas_threads, "blas_threads", minimum=1)
    if rng is None:
        rng = np.random.default_rng(check_int(seed, "seed", minimum=0))
    elif not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator or None, got {type(rng).__name__}")
    ops = getattr(model, "ops", NUMPY)  # the model's choice of fused kernels (posenc_np.fused)
    if optimizer is None:
        opt = ops.Adam(model.params, lr=lr, betas=check_betas(betas), eps=eps, weight_decay=weight_decay)
    elif not isinstance(optimizer, Adam) or optimizer.params is not model.params:
        raise TypeError("optimizer must be a posenc_np.optim.Adam created over model.params")
    else:
        opt = optimizer
    schedule = {"total": steps, "lr": lr, "warmup": warmup, "min_lr": min_lr, "batch_size": batch_size, "clip": clip}
    limits = contextlib.nullcontext()
    if blas_threads is not None:
        from threadpoolctl import threadpool_limits

        limits = threadpool_limits(blas_threads, user_api="blas")
    bar = Progress(steps, initial=start_step, desc=desc, enabled=progress)
    history = []
    try:
        with limits:
            for step in range(start_step, steps):
                t0 = time.perf_counter()
                tokens, targets = task.sample(rng, batch_size)
                sample = getattr(model, "training_positions", None)  # randomized positions draw after the batch
                positions = sample(tokens.shape[1], rng) if sample is not None else None
                logits = model.forward(tokens) if positions is None else model.forward(tokens, positions=positions)
                loss, ce = ops.softmax_cross_entropy(logits, targets)
                if not math.isfinite(loss):
                    raise ValueError(f"step {step}: the loss is {loss} (diverged); parameters were not updated")
                model.backward(softmax_cross_entropy_backward(ce))
                try:
                    gnorm = ops.clip_grad_norm(model.grads, clip) if clip is not None else \
                        _finite_norm(model.grads, ops.global_norm)
                except ValueError as exc:
                    raise ValueError(f"step {step}: {exc}") from exc
                step_lr = cosine_schedule(step, total=steps, lr=lr, warmup=warmup, min_lr=min_lr)
                opt.step(model.grads, lr=step_lr)
                dt = time.perf_counter() - t0
                metrics = {"step": step, "loss": loss, "grad_norm": gnorm, "lr": step_lr, "tokens": int(tokens.size),
                           "tokens_per_s": tokens.size / dt if dt > 0 else float("inf")}
                history.append(metrics)
                if callback is not None:
                    callback(metrics)
                if checkpoint_every is not None and ((step + 1) % checkpoint_every == 0 or step + 1 == steps):
                    save_checkpoint(checkpoint_path, model, opt, step + 1, rng.bit_generator.state,
                                    extra={"schedule": schedule})
                bar.update(1, loss=loss, gnorm=gnorm)
    finally:
        bar.close()
    return history


def _finite_norm(grads, global_norm) -> float:
    """``global_norm(grads)``, refusing NaN/inf gradients like ``clip_grad_norm``."""
    total = global_norm(grads)
    if not math.isfinite(total):
        bad = next(k for k, g in grads.items() if not np.all(np.isfinite(g)))
        raise ValueError(f"grads[{bad!r}] holds NaN or inf (a diverged step: lower the learning rate or clip); "
                         "nothing was updated")
    return total


def evaluate(model: Transformer, tokens: ArrayLike, targets: ArrayLike, *, batch_size: int = 64, beyond: int | None = None) -> dict:
    """Teacher-forced metrics on scored positions (``targets != -100``).

    ``token_accuracy``: fraction of scored positions whose arg-max equals the target;
    ``exact_match``: fraction of sequences with every scored position right (under teacher
    forcing this equals greedy decoding reproducing the whole answer); ``loss``: mean
    cross-entropy. With ``beyond=P`` also ``token_accuracy_beyond``: the token accuracy over
    scored positions with index ``>= P`` (e.g. past the training length; None if there are none).

    ``tokens`` and ``targets`` are integer ``(N, T)`` arrays of the same shape; ``batch_size``
    >= 1. Metrics over no scored position (``n_scored == 0``) are None, not 0.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.model import ModelConfig, Transformer
    >>> from posenc_np.train import evaluate
    >>> model = Transformer(ModelConfig(vocab_size=8, d_model=16, n_heads=2, n_layers=1))
    >>> m = evaluate(model, np.array([[1, 2, 3], [3, 2, 1]]), np.array([[2, 3, -100], [2, 1, -100]]))
    >>> m["n_sequences"], m["n_scored"], 0 <= m["token_accuracy"] <= 1, m["exact_match"] in (0.0, 0.5, 1.0)
    (2, 4, True, True)
    """
    if not callable(getattr(model, "forward", None)):
        raise TypeError(f"model must have a forward(tokens) method (a Transformer), got {type(model).__name__}")
    tokens, targets = as_int_array(tokens, "tokens"), as_int_array(targets, "targets")
    if tokens.ndim != 2 or targets.shape != tokens.shape:
        raise ValueError(f"tokens and targets must be (sequences, length) arrays of one shape, got {tokens.shape} "
                         f"and {targets.shape}")
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    if beyond is not None:
        beyond = check_int(beyond, "beyond", minimum=0)
    ops = getattr(model, "ops", NUMPY)
    scores = Scores(beyond)
    for i in range(0, len(tokens), batch_size):
        tok, tgt = tokens[i:i + batch_size], targets[i:i + batch_size]
        logits = model.forward(tok)
        scores.add(logits, tgt, ops.softmax_cross_entropy(logits, tgt)[0])
    return scores.result()


class Scores:
    """Running teacher-forced metrics of :func:`evaluate` over batches: ``add(logits, targets, loss)`` per
    batch (``loss`` the batch's mean cross-entropy over the scored positions, ``targets != -100``), then
    ``result()``. The study's evaluation adds its own per-position loss to the same tally."""

    def __init__(self, beyond: int | None = None) -> None:
        self.beyond = beyond
        self.correct = self.scored = self.seq_ok = self.correct_beyond = self.scored_beyond = self.n_sequences = 0
        self.loss_sum = 0.0

    def add(self, logits: np.ndarray, targets: np.ndarray, loss: float) -> None:
        keep = targets != -100
        self.loss_sum += loss * keep.sum()
        hit = (logits.argmax(-1) == targets) & keep
        self.correct += int(hit.sum())
        self.scored += int(keep.sum())
        self.seq_ok += int(np.all(hit | ~keep, axis=1).sum())
        self.n_sequences += len(targets)
        if self.beyond is not None:
            self.correct_beyond += int(hit[:, self.beyond:].sum())
            self.scored_beyond += int(keep[:, self.beyond:].sum())

    def result(self) -> dict:
        scored = self.scored
        out = {"token_accuracy": self.correct / scored if scored else None,
               "exact_match": self.seq_ok / self.n_sequences if self.n_sequences else None,
               "loss": self.loss_sum / scored if scored else None, "n_sequences": self.n_sequences,
               "n_scored": scored}
        if self.beyond is not None:
            out["token_accuracy_beyond"] = self.correct_beyond / self.scored_beyond if self.scored_beyond else None
        return out
