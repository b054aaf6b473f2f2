"""Running one cell: train a model and evaluate it (:func:`run_cell`, the function every executor runs).

A cell is a plain function of two JSON-able dicts (the study configuration and the cell) and
an optional *shared* payload that every executor ships once per worker (the LM corpus and the
encodings a user added with :func:`posenc_np.registry.register`), so any executor can run it in
another process or on another machine. It runs with BLAS pinned to one thread (threadpoolctl;
the count changes how OpenBLAS splits products, see ``docs/model.md``), so its numbers are the
same bit for bit in-process, in a pool worker or on a Dask worker of the same machine type and
NumPy/BLAS build. Every randomness comes from the cell's seeds.

Task cells train *until they fit*: up to ``fit_rounds`` rounds (``randomized_fit_rounds`` with
randomized positions) of ``steps`` steps (each round
a warm-up and cosine cycle, the optimizer state carried over), stopping after the first round
whose token accuracy at the training size, on a fit-check set drawn apart from the held-out
sets, reaches ``fit_accuracy``. Randomized-position cells (Ruoss et al. 2023) sample their
positions from ``0 .. randomized_range - 1`` in training *and* in evaluation.
"""

from __future__ import annotations

import os
import platform
import time
import traceback

import numpy as np

from .._version import __version__
from ..model import ModelConfig, Transformer
from ..optim import Adam
from ..train import Scores, train
from ..layers import softmax_cross_entropy
from .config import NGRAM, StudyConfig, eval_seed, fit_seed, scaling_dict
from .corpus import VOCAB_SIZE, LMWindows, corpus_digests, eval_windows, load_corpus
from .tasks import IGNORE, TASKS, TRAINING_OPTIONS, training_task

__all__ = ["environment", "run_cell", "warm_kernels"]

EVAL_MODES = ("nonoverlapping", "sliding")
_EVAL_TOKENS_PER_BATCH = 8192  # sequences x length of one evaluation batch (bounds the attention memory)
_RANDOMIZED_EVAL_BATCH = 16  # sequences sharing one sample of positions in a randomized evaluation


def _cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``, read with the bounded reader), else ``platform.processor()``."""
    from .._files import read_bounded

    try:
        text = read_bounded("/proc/cpuinfo", 1 << 20).decode("utf-8", "replace")
    except ValueError:
        text = ""
    for line in text.splitlines():
        if line.lower().startswith("model name") and ":" in line:
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def environment() -> dict:
    """Versions and hardware a result depends on (no paths): Python, NumPy, Numba, SciPy, posenc_np,
    the CPU model and count, the host name and process id.

    Examples
    --------
    >>> import platform
    >>> from posenc_np.study.cells import environment
    >>> env = environment()
    >>> sorted(env)
    ['cpu', 'cpu_count', 'host', 'machine', 'numba', 'numpy', 'pid', 'posenc_np', 'python', 'scipy']
    >>> env["numpy"] == np.__version__, env["python"] == platform.python_version()
    (True, True)
    """
    import numba
    import scipy

    return {"host": platform.node(), "pid": os.getpid(), "python": platform.python_version(),
            "numpy": np.__version__, "numba": numba.__version__, "scipy": scipy.__version__,
            "posenc_np": __version__, "cpu": _cpu_model(), "cpu_count": os.cpu_count(), "machine": platform.machine()}


def install_shared(shared: dict | None) -> None:
    """Make the shared payload's user encodings known in this process (idempotent). A Dask
    payload carries them as cloudpickle bytes (:func:`posenc_np.study.executors.Dask.run`)."""
    import pickle

    from ..registry import register

    entries = (shared or {}).get("encodings", {})
    if isinstance(entries, bytes):
        entries = pickle.loads(entries)  # noqa: S301 - the driver's own payload
    for entry in entries.values():
        register(entry, replace=True)


def run_cell(cfg_dict: dict, cell: dict, shared: dict | None = None) -> dict:
    """Run one cell and report, never raise: ``{"cell", "status": "ok" | "error", "records",
    "error", "seconds", "worker"}`` (``error`` holds the exception and the end of its traceback;
    ``worker`` the :func:`environment` that ran it).

    ``KeyboardInterrupt`` and ``SystemExit`` propagate (the driver keeps what finished).

    Examples
    --------
    >>> from dataclasses import asdict
    >>> from posenc_np.study.cells import run_cell
    >>> from posenc_np.study.config import quick_config
    >>> result = run_cell(asdict(quick_config()), {"part": "tasks", "encoding": "rope"})   # a cell without a task
    >>> sorted(result), result["status"], result["records"]           # recorded, not raised
    (['cell', 'error', 'records', 'seconds', 'status', 'worker'], 'error', [])
    >>> result["error"].splitlines()[0]
    "KeyError: 'training'"
    """
    from threadpoolctl import threadpool_limits

    t0 = time.perf_counter()
    try:
        install_shared(shared)
        with threadpool_limits(1):
            records, status, error = _run_one(cfg_dict, cell, shared), "ok", ""
    except Exception as exc:  # noqa: BLE001 - one failing cell is recorded, not fatal
        records, status = [], "error"
        error = f"{type(exc).__name__}: {exc}\n" + traceback.format_exc(limit=-4)
    return {"cell": cell, "status": status, "records": records, "error": error,
            "seconds": time.perf_counter() - t0, "worker": environment()}


def _run_one(cfg_dict: dict, cell: dict, shared) -> list[dict]:
    cfg = StudyConfig(**cfg_dict)
    if cell["part"] == "tasks":
        return _tasks_cell(cfg, cell)
    corpus = _corpus_for(cfg, cell, shared)
    if cell["encoding"] == NGRAM:
        return _ngram_cell(cfg, cell, corpus)
    return {"lm": _lm_cell, "rope_scaling": _scaling_cell}[cell["part"]](cfg, cell, corpus)


def warm_kernels(cfg_dict: dict) -> None:
    """Compile (or load from the cache) every Numba kernel the study's models use: one training
    step and one evaluation of a small model per built-in encoding of the grid, at a task length
    and an LM length. The runner calls it in a separate process before any cell, so every cell
    loads the kernels from the cache.

    Examples
    --------
    >>> from dataclasses import asdict
    >>> from posenc_np.study.cells import warm_kernels
    >>> from posenc_np.study.config import quick_config
    >>> warm_kernels({**asdict(quick_config()), "encodings": []})     # no encoding: nothing to compile
    """
    from threadpoolctl import threadpool_limits

    from ..registry import BUILTIN

    cfg = StudyConfig(**cfg_dict)
    rng = np.random.default_rng(0)
    data = rng.integers(0, 256, size=4096)
    with threadpool_limits(1):
        for enc in [e for e in cfg.encodings if e in BUILTIN]:
            for T in sorted({2 * cfg.train_len + 1, cfg.lm_train_len, 2 * cfg.lm_train_len}):
                model = Transformer(ModelConfig(vocab_size=VOCAB_SIZE, d_model=cfg.d_model, n_heads=cfg.n_heads,
                                                n_layers=cfg.n_layers, d_ff=cfg.d_ff, max_len=2 * T, position=enc,
                                                embed_scale=cfg.embed_scale.get(enc, "none")))
                train(model, LMWindows(data, T), 1, batch_size=min(cfg.lm_batch_size, 4), progress=False,
                      blas_threads=1)
                tok, tgt = LMWindows(data, T).sample(rng, 2)
                _evaluate(model, tok, tgt, 2)


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


def _curve(history: list[dict], every: int, offset: int = 0) -> list[list[float]]:
    """``[[last step, mean loss]]`` per block of ``every`` steps (the stored training curve)."""
    out = []
    for i in range(0, len(history), every):
        block = history[i:i + every]
        out.append([offset + i + len(block), float(np.mean([h["loss"] for h in block]))])
    return out


def _final_loss(history: list[dict]) -> float:
    return float(np.mean([h["loss"] for h in history[-min(50, len(history)):]])) if history else float("nan")


def _train(model, task, steps, *, batch_size, lr, warmup, cfg, seed, rng=None, optimizer=None):
    t0 = time.perf_counter()
    hist = train(model, task, steps, batch_size=batch_size, lr=lr, warmup=min(warmup, steps), min_lr=cfg.min_lr,
                 weight_decay=cfg.weight_decay, clip=cfg.clip, seed=seed, rng=rng, optimizer=optimizer,
                 progress=False, blas_threads=1)
    return hist, time.perf_counter() - t0


def _evaluate(model, tokens, targets, batch_size: int, *, beyond: int | None = None, positions_rng=None,
              position_range: int | None = None, bins: int | None = None) -> dict:
    """Teacher-forced metrics over the scored positions (``targets != IGNORE``): token accuracy,
    exact match, loss (nats), counts; with ``beyond`` the accuracy at positions ``>= beyond``;
    with ``positions_rng`` every batch gets a sorted sample of positions from
    ``0 .. position_range - 1`` (randomized positions); with ``bins`` the mean loss per position
    bin (``bins`` equal bins of the window)."""
    scores = Scores(beyond)
    T = tokens.shape[1]
    pos_loss, pos_count = np.zeros(T), np.zeros(T)
    for i in range(0, len(tokens), batch_size):
        tok, tgt = tokens[i:i + batch_size], targets[i:i + batch_size]
        if positions_rng is not None:
            positions = np.sort(positions_rng.choice(position_range, size=T, replace=False))
            logits = model.forward(tok, positions=positions)
        else:
            logits = model.forward(tok)
        scores.add(logits, tgt, softmax_cross_entropy(logits, tgt)[0])
        if bins:
            keep = tgt != IGNORE
            z = logits.astype(np.float64)
            z = z - z.max(-1, keepdims=True)
            logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
            nll = -np.take_along_axis(logp, np.where(keep, tgt, 0)[..., None], -1)[..., 0]
            pos_loss += np.where(keep, nll, 0.0).sum(0)
            pos_count += keep.sum(0)
    out = scores.result()
    if bins:
        edges = np.linspace(0, T, bins + 1).astype(int)
        out["position_loss"] = [float(pos_loss[a:b].sum() / max(pos_count[a:b].sum(), 1)) for a, b in
                                zip(edges[:-1], edges[1:])]
        out["position_edges"] = [int(e) for e in edges]
    return out


def _ids(cell: dict) -> dict:
    return {k: cell[k] for k in ("part", "encoding", "fusion", "label", "seed_index", "seed", "embed_scale")}


def _attention(model, tokens, positions=None) -> list:
    """Attention probabilities of one sequence, ``[layer][head][query][key]`` rounded to 4 digits."""
    logits = model.forward(tokens[:1]) if positions is None else model.forward(tokens[:1], positions=positions)
    del logits
    maps = []
    for block in model.blocks:
        cache = block._attn_cache
        probs = cache.get("probs") if isinstance(cache, dict) else None
        if probs is None and isinstance(cache, dict) and isinstance(cache.get("attention"), dict):
            probs = cache["attention"].get("probs")
        if probs is None:
            return []
        maps.append(np.round(np.asarray(probs[0], dtype=np.float64), 4).tolist())
    return maps


# --------------------------------------------------------------------------- tasks

def _tasks_cell(cfg: StudyConfig, cell: dict) -> list[dict]:
    """Train on the cell's task under its training option at size ``train_len`` until it fits (see
    the module docstring); evaluate at every ``eval_factors`` multiple on held-out sets shared by
    every encoding and seed."""
    option = TRAINING_OPTIONS[cell["training"]]
    train_task = training_task(cell["training"], cell["task"], cfg.train_len, cfg.alphabet)
    kwargs = _model_kwargs(cfg, cell, train_task.vocab_size, train_task.seq_len)
    M = None
    if option.randomized_positions:  # Ruoss et al.: positions from a range far beyond every test length
        longest = max(TASKS[cell["task"]](cfg.train_len * f, cfg.alphabet).seq_len for f in cfg.eval_factors)
        M = max(cfg.randomized_range, longest)
        kwargs = {**kwargs, "max_len": max(kwargs["max_len"], M),
                  "position_options": {**kwargs["position_options"], "randomized_max_len": M}}
    model = Transformer(ModelConfig(**option.model_kwargs(kwargs, "train")))
    opt = Adam(model.params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    rng = np.random.default_rng(cell["seed"])
    fit_task = TASKS[cell["task"]](cfg.train_len, cfg.alphabet)
    fit_tokens, fit_targets = fit_task.sample(np.random.default_rng(fit_seed(cfg.seed, cell["task"], fit_task.n)),
                                              cfg.fit_sequences)
    history, seconds, fits = [], 0.0, []
    for _ in range(cfg.rounds(cell["training"])):
        hist, dt = _train(model, train_task, cfg.steps, batch_size=cfg.batch_size, lr=cfg.lr, warmup=cfg.warmup,
                          cfg=cfg, seed=cell["seed"], rng=rng, optimizer=opt)
        history += hist
        seconds += dt
        eval_model = _with_config(model, option.model_kwargs(kwargs, "eval"))
        m = _evaluate(eval_model, fit_tokens, fit_targets, _RANDOMIZED_EVAL_BATCH if M else 64,
                      positions_rng=np.random.default_rng(fit_seed(cfg.seed, "positions", fit_task.n)) if M else None,
                      position_range=M)
        fits.append(m["token_accuracy"])
        if m["token_accuracy"] is not None and m["token_accuracy"] >= cfg.fit_accuracy:
            break
    model = _with_config(model, option.model_kwargs(kwargs, "eval"))
    info = {"train_steps": len(history), "rounds": len(fits), "fit_check": fits, "fit_accuracy": fits[-1],
            "fitted": fits[-1] is not None and fits[-1] >= cfg.fit_accuracy, "final_train_loss": _final_loss(history),
            "train_seconds": seconds, "randomized_range": M}
    records = []
    for factor in cfg.eval_factors:
        task = TASKS[cell["task"]](cfg.train_len * factor, cfg.alphabet)
        tokens, targets = task.sample(np.random.default_rng(eval_seed(cfg.seed, cell["task"], task.n)),
                                      cfg.eval_sequences)
        rec = {**_ids(cell), "training": cell["training"], "task": cell["task"], "train_len": cfg.train_len,
               "eval_len": task.n, "eval_factor": factor, "train_seq_len": train_task.seq_len,
               "eval_seq_len": task.seq_len, **info}
        why = _past_table(cell["encoding"], task.seq_len, model.cfg.max_len)
        if why:
            rec.update(status="n/a", token_accuracy=None, exact_match=None, token_accuracy_beyond=None, loss=None,
                       n_scored=None, note=why)
        else:
            prng = np.random.default_rng(eval_seed(cfg.seed, "positions", task.n)) if M else None
            m = _evaluate(model, tokens, targets, _RANDOMIZED_EVAL_BATCH if M else 64, beyond=train_task.seq_len,
                          positions_rng=prng, position_range=M)
            rec.update(status="ok", token_accuracy=m["token_accuracy"], exact_match=m["exact_match"],
                       token_accuracy_beyond=m["token_accuracy_beyond"], loss=m["loss"],
                       n_sequences=m["n_sequences"], n_scored=m["n_scored"], note="")
        if factor == cfg.eval_factors[0]:
            rec["curve"] = _curve(history, cfg.curve_every)
        attention_factor = 2 if 2 in cfg.eval_factors else max(cfg.eval_factors)
        if (factor == attention_factor and cell["encoding"] in cfg.attention_maps and cell["seed_index"] == 0
                and cell["training"] == cfg.training[0] and cell["task"] == _attention_task(cfg) and not why):
            positions = (np.sort(np.random.default_rng(0).choice(M, size=task.seq_len, replace=False)) if M else None)
            rec["attention"] = _attention(model, tokens, positions)
        records.append(rec)
    return records


def _attention_task(cfg: StudyConfig) -> str:
    return "lag" if "lag" in cfg.tasks else cfg.tasks[0]


# --------------------------------------------------------------------------- language model

def _corpus_for(cfg: StudyConfig, cell: dict, shared) -> dict:
    """The corpus the cell was planned on: the shared payload's, else the standard library's;
    refused when its digests differ from the cell's."""
    corpus = (shared or {}).get("corpus")
    if corpus is None:
        if cfg.corpus != "stdlib":
            raise ValueError("this study's corpus is a file given to the driver; it reaches the workers only "
                             "through the executor (run it through posenc-np study extrapolation)")
        corpus = load_corpus()
    else:
        corpus = {"train": np.frombuffer(corpus["train"], dtype=np.uint8),
                  "held_out": np.frombuffer(corpus["held_out"], dtype=np.uint8), "identity": corpus["identity"]}
    mine = corpus_digests(corpus["identity"])
    if cell.get("corpus") != mine:
        raise ValueError(f"this worker's LM corpus {mine} differs from the study's {cell.get('corpus')} (another "
                         f"Python version's standard library: Python {corpus['identity'].get('python')}); run every "
                         "worker on the same Python version as the driver")
    return corpus


def _perplexities(model, cfg: StudyConfig, held_out, encoding: str, factors, bins: bool = False) -> list[dict]:
    """Loss (nats per byte), perplexity and bits per byte at every length ``lm_train_len * factor``
    and both modes; with ``bins`` the per-position loss of the longest non-overlapping windows."""
    out = []
    for mode in EVAL_MODES:
        for factor in factors:
            T = cfg.lm_train_len * factor
            rec = {"eval_mode": mode, "eval_len": T, "eval_factor": factor}
            why = _past_table(encoding, T, model.cfg.max_len)
            if why:
                rec.update(status="n/a", loss=None, ppl=None, bpb=None, note=why)
            else:
                tokens, targets = eval_windows(held_out, cfg.lm_eval_tokens, T, mode, T // 2)
                per_position = bins and mode == "nonoverlapping" and factor == max(factors)
                m = _evaluate(model, tokens, targets, max(1, _EVAL_TOKENS_PER_BATCH // T),
                              bins=cfg.loss_bins if per_position else None)
                if m["n_scored"] != cfg.lm_eval_tokens:  # every prediction scored exactly once
                    raise AssertionError(f"{mode} at {T} scored {m['n_scored']} of {cfg.lm_eval_tokens} tokens")
                rec.update(status="ok", loss=m["loss"], ppl=float(np.exp(m["loss"])), bpb=m["loss"] / np.log(2),
                           note="")
                if per_position:
                    rec.update(position_loss=m["position_loss"], position_edges=m["position_edges"])
            out.append(rec)
    return out


def _train_lm(cfg: StudyConfig, cell: dict, corpus: dict):
    kwargs = _model_kwargs(cfg, cell, VOCAB_SIZE, cfg.lm_train_len)
    model = Transformer(ModelConfig(**kwargs))
    hist, seconds = _train(model, LMWindows(corpus["train"], cfg.lm_train_len), cfg.lm_steps,
                           batch_size=cfg.lm_batch_size, lr=cfg.lm_lr, warmup=cfg.lm_warmup, cfg=cfg,
                           seed=cell["seed"])
    return model, kwargs, {"final_train_loss": _final_loss(hist), "train_seconds": seconds,
                           "train_len": cfg.lm_train_len, "train_steps": cfg.lm_steps}, hist


def _lm_cell(cfg: StudyConfig, cell: dict, corpus: dict) -> list[dict]:
    """A byte-level LM trained at ``lm_train_len`` on the corpus; perplexity at every length."""
    model, _, info, hist = _train_lm(cfg, cell, corpus)
    records = [{**_ids(cell), **info, **rec}
               for rec in _perplexities(model, cfg, corpus["held_out"], cell["encoding"], cfg.lm_eval_factors, True)]
    records[0]["curve"] = _curve(hist, cfg.curve_every)
    return records


def _ngram_cell(cfg: StudyConfig, cell: dict, corpus: dict) -> list[dict]:
    """The count-model baseline (:mod:`.ngram`) on the same scored bytes as every LM."""
    from .ngram import KneserNey

    t0 = time.perf_counter()
    model = KneserNey(corpus["train"], cfg.ngram_order)
    by_order = {}
    windows = {}
    for mode in EVAL_MODES:
        for factor in cfg.lm_eval_factors:
            T = cfg.lm_train_len * factor
            windows[mode, factor] = eval_windows(corpus["held_out"], cfg.lm_eval_tokens, T, mode, T // 2)
            for order in range(1, cfg.ngram_order + 1):
                by_order[mode, factor, order] = float(-model.log_probs(*windows[mode, factor], order).mean())
    first = cfg.lm_eval_factors[0]
    best = min(range(1, cfg.ngram_order + 1), key=lambda k: (by_order["sliding", first, k], k))
    seconds = time.perf_counter() - t0
    return [{**_ids(cell), "train_len": cfg.lm_train_len, "train_steps": 0, "train_seconds": seconds, "order": best,
             "eval_mode": mode, "eval_len": cfg.lm_train_len * factor, "eval_factor": factor, "status": "ok",
             "loss": by_order[mode, factor, best], "ppl": float(np.exp(by_order[mode, factor, best])),
             "bpb": by_order[mode, factor, best] / np.log(2), "note": "",
             "ppl_by_order": {str(k): float(np.exp(by_order[mode, factor, k])) for k in range(1, cfg.ngram_order + 1)}}
            for mode in EVAL_MODES for factor in cfg.lm_eval_factors]


def _scaling_cell(cfg: StudyConfig, cell: dict, corpus: dict) -> list[dict]:
    """The LM part's RoPE model under every scaling method. Zero-shot: ``none`` and ``dynamic`` at
    every length; ``linear``, ``ntk`` and ``yarn`` at each length ``fL`` past L with their design
    factor ``s = f``. Fine-tuned: each method with ``s = scaling_factor`` fine-tuned for
    ``finetune_steps`` at ``scaling_factor * lm_train_len`` (same batches for every method), at every length."""
    base, kwargs, info, _ = _train_lm(cfg, cell, corpus)
    L, F = cfg.lm_train_len, cfg.scaling_factor
    held = corpus["held_out"]
    records = []

    def scaled_kwargs(method, factor):
        scaling = scaling_dict(method, factor, L)
        return scaling, {**kwargs, "position_options": {**kwargs["position_options"], "scaling": scaling}}

    for method in cfg.scaling_methods:
        static = method in ("linear", "ntk", "yarn")
        plans = ([(f, [f]) for f in cfg.lm_eval_factors if f > 1] if static else [(F, list(cfg.lm_eval_factors))])
        for design, factors in plans:
            scaling, scaled = scaled_kwargs(method, design)
            zero = _with_config(base, scaled)
            for rec in _perplexities(zero, cfg, held, "rope", factors):
                records.append({**_ids(cell), **info, "method": method, "scaling": scaling, "phase": "zero_shot",
                                "design_factor": design if static else None, "finetune_len": None,
                                "finetune_steps": 0, **rec})
        scaling, scaled = scaled_kwargs(method, F)
        tuned = Transformer(ModelConfig(**scaled))
        tuned.load_params(base.params)
        ft_hist, ft_seconds = _train(tuned, LMWindows(corpus["train"], F * L), cfg.finetune_steps,
                                     batch_size=cfg.finetune_batch_size, lr=cfg.finetune_lr,
                                     warmup=cfg.finetune_steps // 10, cfg=cfg, seed=cell["finetune_seed"])
        for rec in _perplexities(tuned, cfg, held, "rope", cfg.lm_eval_factors):
            records.append({**_ids(cell), **info, "method": method, "scaling": scaling, "phase": "finetuned",
                            "design_factor": F if static else None, "finetune_len": F * L,
                            "finetune_steps": cfg.finetune_steps, "finetune_final_loss": _final_loss(ft_hist),
                            "finetune_seconds": ft_seconds, **rec})
    return records
