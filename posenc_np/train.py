"""Training loop, per-step metrics, progress display, NPZ checkpoints with optimizer and RNG state.

Determinism: all randomness comes from ``numpy.random.Generator`` objects passed in or
created from a seed (never NumPy's global state). Model initialisation uses
``ModelConfig.seed``; batches use the ``rng`` of :func:`train`. The same seeds give the same
loss curve bit for bit, and resuming from a checkpoint reproduces the uninterrupted run
bit for bit (the checkpoint holds the parameters, Adam's moments and step count, and the
data generator's exact state).

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

import json
import os
import sys
import time
from dataclasses import dataclass

import numpy as np

from ._checks import check_int, check_real
from .layers import softmax_cross_entropy, softmax_cross_entropy_backward
from .model import ModelConfig, Transformer
from .optim import Adam, clip_grad_norm, cosine_schedule

__all__ = ["Checkpoint", "Progress", "evaluate", "load_checkpoint", "save_checkpoint", "train"]

CHECKPOINT_FORMAT = "posenc_np.checkpoint"
CHECKPOINT_VERSION = 1


# --------------------------------------------------------------------------- progress

class Progress:
    """A progress bar: tqdm when installed, else a plain line printer (at most one line per
    ``min_interval`` seconds, and the last); ``enabled=False`` is silent.

    ``update(n, **metrics)`` advances by ``n`` and shows the metrics.
    """

    def __init__(self, total: int, *, initial: int = 0, desc: str = "", enabled: bool = True, file=None,
                 use_tqdm: bool | None = None, min_interval: float = 2.0):
        self.total, self.n, self.desc, self.enabled = total, initial, desc, enabled
        self.min_interval = min_interval
        self.file = file or sys.stderr
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

    def update(self, n: int = 1, **metrics) -> None:
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
    """What :func:`load_checkpoint` returns."""

    model: Transformer
    optimizer: Adam
    step: int
    rng: np.random.Generator
    extra: dict


def _json_array(obj) -> np.ndarray:
    return np.frombuffer(json.dumps(obj, sort_keys=True).encode("utf-8"), dtype=np.uint8).copy()


def save_checkpoint(path, model: Transformer, optimizer: Adam, step: int, rng_state: dict, *,
                    extra: dict | None = None) -> None:
    """Write model, optimizer, step and RNG state to ``path`` (NPZ, no pickle; atomic replace).

    ``rng_state`` is ``generator.bit_generator.state`` (a JSON-able dict).
    """
    step = check_int(step, "step", minimum=0)
    opt = optimizer.state_dict()
    meta = {"format": CHECKPOINT_FORMAT, "version": CHECKPOINT_VERSION, "model_config": json.loads(model.cfg.to_json()),
            "step": step, "rng_state": rng_state, "optimizer": opt["hyper"], "extra": extra or {}}
    arrays = {"meta": _json_array(meta)}
    arrays.update({f"param.{k}": v for k, v in model.params.items()})
    arrays.update({f"adam.{k}": v for k, v in opt["arrays"].items()})
    path = os.fspath(path)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as fh:
        np.savez(fh, allow_pickle=False, **arrays)
    os.replace(tmp, path)


def load_checkpoint(path, model: Transformer | None = None) -> Checkpoint:
    """Read a checkpoint written by :func:`save_checkpoint` (``allow_pickle=False``).

    With ``model=None`` a model is built from the stored config; otherwise the stored
    parameters are copied into ``model`` (names and shapes must match). Returns the model, a
    restored :class:`~posenc_np.optim.Adam`, the step, a Generator in the saved state, and
    the ``extra`` dict.
    """
    with np.load(os.fspath(path), allow_pickle=False) as z:
        if "meta" not in z.files:
            raise ValueError(f"{path} is not a posenc_np checkpoint (no 'meta' entry)")
        meta = json.loads(bytes(z["meta"]).decode("utf-8"))
        if meta.get("format") != CHECKPOINT_FORMAT or meta.get("version") != CHECKPOINT_VERSION:
            raise ValueError(f"{path}: unsupported checkpoint format {meta.get('format')!r} "
                             f"version {meta.get('version')!r}")
        arrays = {k: z[k] for k in z.files if k != "meta"}
    cfg = ModelConfig(**meta["model_config"])
    if model is None:
        model = Transformer(cfg)
    else:
        mine = {k: v for k, v in json.loads(model.cfg.to_json()).items() if k != "seed"}
        theirs = {k: v for k, v in meta["model_config"].items() if k != "seed"}  # seed only affects init
        if mine != theirs:
            raise ValueError(f"{path}: the checkpoint's model config {theirs} differs from the model's {mine}")
    model.load_params({k[len("param."):]: v for k, v in arrays.items() if k.startswith("param.")})
    hyper = meta["optimizer"]
    opt = Adam(model.params, lr=hyper["lr"], betas=hyper["betas"], eps=hyper["eps"],
               weight_decay=hyper["weight_decay"])
    opt.load_state_dict({"hyper": hyper, "arrays": {k[len("adam."):]: v for k, v in arrays.items()
                                                    if k.startswith("adam.")}})
    rng = np.random.default_rng()
    rng.bit_generator.state = meta["rng_state"]
    return Checkpoint(model=model, optimizer=opt, step=int(meta["step"]), rng=rng, extra=meta["extra"])


# --------------------------------------------------------------------------- training

def train(model: Transformer, task, steps: int, *, batch_size: int = 32, lr: float = 1e-3, warmup: int = 0,
          min_lr: float = 0.0, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0.0,
          clip: float | None = 1.0, seed: int = 0, rng: np.random.Generator | None = None,
          optimizer: Adam | None = None, start_step: int = 0, progress: bool = True, desc: str = "train",
          checkpoint_path=None, checkpoint_every: int | None = None, callback=None) -> list[dict]:
    """Train ``model`` on batches from ``task`` with AdamW, clipping and a cosine schedule.

    Runs steps ``start_step .. steps - 1`` (``steps`` is the *total*, so the schedule is
    the same for a resumed run). Each step: sample a batch with ``rng``, forward,
    cross-entropy, backward, clip the global gradient norm to ``clip`` (None = no clipping),
    ``lr = cosine_schedule(step, total=steps, lr=lr, warmup=warmup, min_lr=min_lr)``, Adam step.

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

    Returns
    -------
    list of dict
        Per step: ``step``, ``loss``, ``grad_norm`` (before clipping), ``lr``, ``tokens``,
        ``tokens_per_s`` (wall clock, not deterministic).
    """
    steps = check_int(steps, "steps", minimum=0)
    start_step = check_int(start_step, "start_step", minimum=0)
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    lr = check_real(lr, "lr", nonnegative=True)
    if clip is not None:
        clip = check_real(clip, "clip", positive=True)
    if checkpoint_every is not None:
        checkpoint_every = check_int(checkpoint_every, "checkpoint_every", minimum=1)
        if checkpoint_path is None:
            raise ValueError("checkpoint_every needs checkpoint_path")
    rng = np.random.default_rng(seed) if rng is None else rng
    opt = optimizer or Adam(model.params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    schedule = {"total": steps, "lr": lr, "warmup": warmup, "min_lr": min_lr, "batch_size": batch_size, "clip": clip}
    bar = Progress(steps, initial=start_step, desc=desc, enabled=progress)
    history = []
    try:
        for step in range(start_step, steps):
            t0 = time.perf_counter()
            tokens, targets = task.sample(rng, batch_size)
            logits = model.forward(tokens)
            loss, ce = softmax_cross_entropy(logits, targets)
            model.backward(softmax_cross_entropy_backward(ce))
            gnorm = clip_grad_norm(model.grads, clip) if clip is not None else _norm(model.grads)
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


def _norm(grads):
    from .optim import global_norm

    return global_norm(grads)


def evaluate(model: Transformer, tokens, targets, *, batch_size: int = 64, beyond: int | None = None) -> dict:
    """Teacher-forced metrics on scored positions (``targets != -100``).

    ``token_accuracy``: fraction of scored positions whose arg-max equals the target;
    ``exact_match``: fraction of sequences with every scored position right (under teacher
    forcing this equals greedy decoding reproducing the whole answer); ``loss``: mean
    cross-entropy. With ``beyond=P`` also ``token_accuracy_beyond``: the token accuracy over
    scored positions with index ``>= P`` (e.g. past the training length; None if there are none).
    """
    tokens, targets = np.asarray(tokens), np.asarray(targets)
    correct = scored = seq_ok = correct_beyond = scored_beyond = 0
    loss_sum = 0.0
    for i in range(0, len(tokens), batch_size):
        tok, tgt = tokens[i:i + batch_size], targets[i:i + batch_size]
        logits = model.forward(tok)
        keep = tgt != -100
        loss, _ = softmax_cross_entropy(logits, tgt)
        loss_sum += loss * keep.sum()
        hit = (logits.argmax(-1) == tgt) & keep
        correct += int(hit.sum())
        scored += int(keep.sum())
        seq_ok += int(np.all(hit | ~keep, axis=1).sum())
        if beyond is not None:
            correct_beyond += int(hit[:, beyond:].sum())
            scored_beyond += int(keep[:, beyond:].sum())
    out = {"token_accuracy": correct / max(scored, 1), "exact_match": seq_ok / max(len(tokens), 1),
           "loss": loss_sum / max(scored, 1), "n_sequences": int(len(tokens)), "n_scored": scored}
    if beyond is not None:
        out["token_accuracy_beyond"] = correct_beyond / scored_beyond if scored_beyond else None
    return out
