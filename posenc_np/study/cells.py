"""Running one cell: train a model and evaluate it (:func:`run_cell`, the function every executor runs).

A cell is a plain function of two JSON-able dicts (the study configuration and the cell), so
any executor can ship it to another process or machine. It runs with BLAS pinned to one thread
(threadpoolctl; the count changes how OpenBLAS splits products, see ``docs/model.md``), so its
numbers are the same bit for bit in-process, in a pool worker or on a Dask worker of the same
machine type and NumPy/BLAS build. Every randomness comes from the cell's seeds.
"""

from __future__ import annotations

import os
import platform
import time
import traceback

import numpy as np

from .._version import __version__
from ..model import ModelConfig, Transformer
from ..train import evaluate, train
from .config import StudyConfig, eval_seed, scaling_dict
from .corpus import VOCAB_SIZE, LMWindows, corpus_digests, eval_windows, load_corpus
from .tasks import TASKS, TRAINING_OPTIONS, training_task

__all__ = ["run_cell"]

EVAL_MODES = ("nonoverlapping", "sliding")
_EVAL_TOKENS_PER_BATCH = 8192  # sequences x length of one evaluation batch (bounds the attention memory)


def run_cell(cfg_dict: dict, cell: dict) -> dict:
    """Run one cell and report, never raise: ``{"cell", "status": "ok" | "error", "records",
    "error", "seconds", "worker"}`` (``error`` holds the exception and the end of its traceback;
    ``worker`` the host, process and versions that ran it).

    ``KeyboardInterrupt`` and ``SystemExit`` propagate (the driver keeps what finished)."""
    from threadpoolctl import threadpool_limits

    t0 = time.perf_counter()
    try:
        with threadpool_limits(1):
            records, status, error = _run_one(cfg_dict, cell), "ok", ""
    except Exception as exc:  # noqa: BLE001 - one failing cell is recorded, not fatal
        records, status = [], "error"
        error = f"{type(exc).__name__}: {exc}\n" + traceback.format_exc(limit=-4)
    worker = {"host": platform.node(), "pid": os.getpid(), "python": platform.python_version(),
              "numpy": np.__version__, "posenc_np": __version__}
    return {"cell": cell, "status": status, "records": records, "error": error,
            "seconds": time.perf_counter() - t0, "worker": worker}


def _run_one(cfg_dict: dict, cell: dict) -> list[dict]:
    cfg = StudyConfig(**cfg_dict)
    return {"tasks": _tasks_cell, "lm": _lm_cell, "rope_scaling": _scaling_cell}[cell["part"]](cfg, cell)


# --------------------------------------------------------------------------- helpers

def _model_kwargs(cfg: StudyConfig, cell: dict, vocab_size: int, max_len: int, **options) -> dict:
    position_options = {**cfg.position_options.get(cell["encoding"], {}), **options}
    return {"vocab_size": vocab_size, "d_model": cfg.d_model, "n_heads": cfg.n_heads, "n_layers": cfg.n_layers,
            "d_ff": cfg.d_ff, "max_len": max_len, "causal": True, "tied": True, "position": cell["encoding"],
            "fusion": cell["fusion"] or "add", "position_options": position_options,
            "embed_scale": cell["embed_scale"], "seed": cell["seed"]}


def _with_config(model: Transformer, kwargs: dict) -> Transformer:
    """``model`` itself if it was built from ``kwargs``, else a model built from them holding a
    copy of its parameters (e.g. the same RoPE weights under another scaling dict)."""
    cfg = ModelConfig(**kwargs)
    if cfg.to_json() == model.cfg.to_json():
        return model
    other = Transformer(cfg)
    other.load_params(model.params)
    return other


def _past_table(encoding: str, seq_len: int, max_len: int) -> str | None:
    """Why ``encoding`` cannot run ``seq_len`` tokens (a learned table of ``max_len`` rows), or None."""
    if encoding == "learned" and seq_len > max_len:
        return (f"positions {max_len}..{seq_len - 1} are past the learned table of {max_len} rows (a learned table "
                "cannot extrapolate; not clamped)")
    return None


def _final_loss(history: list[dict]) -> float:
    return float(np.mean([h["loss"] for h in history[-min(50, len(history)):]])) if history else float("nan")


def _train(model, task, steps, *, batch_size, lr, warmup, cfg, seed):
    t0 = time.perf_counter()
    hist = train(model, task, steps, batch_size=batch_size, lr=lr, warmup=min(warmup, steps), min_lr=cfg.min_lr,
                 weight_decay=cfg.weight_decay, clip=cfg.clip, seed=seed, progress=False, blas_threads=1)
    return _final_loss(hist), time.perf_counter() - t0


# --------------------------------------------------------------------------- tasks

def _tasks_cell(cfg: StudyConfig, cell: dict) -> list[dict]:
    """Train on the cell's task under its training option at size ``train_len``; evaluate at every
    ``eval_factors`` multiple on held-out sets shared by every encoding and seed."""
    option = TRAINING_OPTIONS[cell["training"]]
    train_task = training_task(cell["training"], cell["task"], cfg.train_len, cfg.alphabet)
    kwargs = _model_kwargs(cfg, cell, train_task.vocab_size, train_task.seq_len)
    if option.randomized_positions:  # Ruoss et al.: sample from the range of the longest evaluation sequence
        longest = max(TASKS[cell["task"]](cfg.train_len * f, cfg.alphabet).seq_len for f in cfg.eval_factors)
        kwargs = {**kwargs, "max_len": max(kwargs["max_len"], longest),
                  "position_options": {**kwargs["position_options"], "randomized_max_len": longest}}
    model = Transformer(ModelConfig(**option.model_kwargs(kwargs, "train")))
    final_loss, seconds = _train(model, train_task, cfg.steps, batch_size=cfg.batch_size, lr=cfg.lr,
                                 warmup=cfg.warmup, cfg=cfg, seed=cell["seed"])
    model = _with_config(model, option.model_kwargs(kwargs, "eval"))
    records = []
    for factor in cfg.eval_factors:
        task = TASKS[cell["task"]](cfg.train_len * factor, cfg.alphabet)
        tokens, targets = task.sample(np.random.default_rng(eval_seed(cfg.seed, cell["task"], task.n)),
                                      cfg.eval_sequences)
        rec = {**_ids(cell), "training": cell["training"], "task": cell["task"], "train_len": cfg.train_len,
               "eval_len": task.n, "eval_factor": factor, "train_seq_len": train_task.seq_len,
               "eval_seq_len": task.seq_len, "train_steps": cfg.steps, "final_train_loss": final_loss,
               "train_seconds": seconds}
        why = _past_table(cell["encoding"], task.seq_len, model.cfg.max_len)
        if why:
            rec.update(status="n/a", token_accuracy=None, exact_match=None, token_accuracy_beyond=None, loss=None,
                       note=why)
        else:
            m = evaluate(model, tokens, targets, batch_size=64, beyond=train_task.seq_len)
            rec.update(status="ok", token_accuracy=m["token_accuracy"], exact_match=m["exact_match"],
                       token_accuracy_beyond=m["token_accuracy_beyond"], loss=m["loss"],
                       n_sequences=m["n_sequences"], note="")
        records.append(rec)
    return records


def _ids(cell: dict) -> dict:
    return {k: cell[k] for k in ("part", "encoding", "fusion", "label", "seed_index", "seed", "embed_scale")}


# --------------------------------------------------------------------------- language model

def _corpus_for(cell: dict) -> dict:
    corpus = load_corpus()
    mine = corpus_digests(corpus["identity"])
    if cell.get("corpus") != mine:
        raise ValueError(f"this worker's LM corpus {mine} differs from the study's {cell.get('corpus')} (another "
                         f"Python version's standard library: Python {corpus['identity']['python']}); run every "
                         "worker on the same Python version as the driver")
    return corpus


def _perplexities(model, cfg: StudyConfig, held_out, encoding: str, factors) -> list[dict]:
    """Loss (nats per byte) and perplexity at every length ``lm_train_len * factor`` and both modes."""
    out = []
    for mode in EVAL_MODES:
        for factor in factors:
            T = cfg.lm_train_len * factor
            rec = {"eval_mode": mode, "eval_len": T, "eval_factor": factor}
            why = _past_table(encoding, T, model.cfg.max_len)
            if why:
                rec.update(status="n/a", loss=None, ppl=None, note=why)
            else:
                tokens, targets = eval_windows(held_out, cfg.lm_eval_tokens, T, mode, T // 2)
                m = evaluate(model, tokens, targets, batch_size=max(1, _EVAL_TOKENS_PER_BATCH // T))
                if m["n_scored"] != cfg.lm_eval_tokens:  # every prediction scored exactly once
                    raise AssertionError(f"{mode} at {T} scored {m['n_scored']} of {cfg.lm_eval_tokens} tokens")
                rec.update(status="ok", loss=m["loss"], ppl=float(np.exp(m["loss"])), note="")
            out.append(rec)
    return out


def _train_lm(cfg: StudyConfig, cell: dict, corpus: dict):
    kwargs = _model_kwargs(cfg, cell, VOCAB_SIZE, cfg.lm_train_len)
    model = Transformer(ModelConfig(**kwargs))
    final_loss, seconds = _train(model, LMWindows(corpus["train"], cfg.lm_train_len), cfg.lm_steps,
                                 batch_size=cfg.lm_batch_size, lr=cfg.lm_lr, warmup=cfg.lm_warmup, cfg=cfg,
                                 seed=cell["seed"])
    return model, kwargs, {"final_train_loss": final_loss, "train_seconds": seconds, "train_len": cfg.lm_train_len,
                           "train_steps": cfg.lm_steps}


def _lm_cell(cfg: StudyConfig, cell: dict) -> list[dict]:
    """A byte-level LM trained at ``lm_train_len`` on the corpus; perplexity at every length."""
    corpus = _corpus_for(cell)
    model, _, info = _train_lm(cfg, cell, corpus)
    return [{**_ids(cell), **info, **rec}
            for rec in _perplexities(model, cfg, corpus["held_out"], cell["encoding"], cfg.lm_eval_factors)]


def _scaling_cell(cfg: StudyConfig, cell: dict) -> list[dict]:
    """The LM part's RoPE model under every scaling method: zero-shot, then each fine-tuned for
    ``finetune_steps`` at ``scaling_factor * lm_train_len`` (same fine-tuning batches for every method)."""
    corpus = _corpus_for(cell)
    base, kwargs, info = _train_lm(cfg, cell, corpus)
    L, F = cfg.lm_train_len, cfg.scaling_factor
    records = []
    for method in cfg.scaling_methods:
        scaling = scaling_dict(method, F, L)
        scaled = {**kwargs, "position_options": {**kwargs["position_options"], "scaling": scaling}}
        zero = _with_config(base, scaled)
        for rec in _perplexities(zero, cfg, corpus["held_out"], "rope", cfg.lm_eval_factors):
            records.append({**_ids(cell), **info, "method": method, "scaling": scaling, "phase": "zero_shot",
                            "finetune_len": None, "finetune_steps": 0, **rec})
        tuned = Transformer(ModelConfig(**scaled))
        tuned.load_params(base.params)
        ft_loss, ft_seconds = _train(tuned, LMWindows(corpus["train"], F * L), cfg.finetune_steps,
                                     batch_size=cfg.finetune_batch_size, lr=cfg.finetune_lr,
                                     warmup=cfg.finetune_steps // 10, cfg=cfg, seed=cell["finetune_seed"])
        for rec in _perplexities(tuned, cfg, corpus["held_out"], "rope", cfg.lm_eval_factors):
            records.append({**_ids(cell), **info, "method": method, "scaling": scaling, "phase": "finetuned",
                            "finetune_len": F * L, "finetune_steps": cfg.finetune_steps,
                            "finetune_final_loss": ft_loss, "finetune_seconds": ft_seconds, **rec})
    return records
