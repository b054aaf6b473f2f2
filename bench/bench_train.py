"""Training throughput (tokens/s) of the NumPy transformer vs the same model in torch CPU, eager
and ``torch.compile``.

``run(quick, torch_python) -> dict`` returns JSON-able numbers and a Markdown table under
``"markdown"``. Run directly: ``python bench/bench_train.py [--quick] [--torch-python PATH]``.

Fixed tiny configuration (GPT-2 style): vocab 32, d_model 64, 4 heads, 2 layers, d_ff 256,
learned absolute positions (add), tied output, tanh GELU, batch 16 x 32 tokens, AdamW
(lr 1e-3, weight decay 0.01), global-norm clipping at 1.0, float32. One *step* is sampling
a batch, forward, cross-entropy, backward, clipping and the optimizer update.

torch (when ``--torch-python`` imports it) runs the same architecture with autograd (explicit
attention: matmul, masked_fill, softmax, matmul; ``torch.optim.AdamW``, ``clip_grad_norm_``),
``torch.set_num_threads(n)``, in eager mode and with the model compiled (``torch.compile``; the
first step, which compiles the forward and backward graphs, is reported separately and not
timed), in a separate process (``bench/torch_peers.py``: torch's OpenMP runtime must not share
a process with Numba's). Ours runs with its BLAS (OpenBLAS) limited to ``n`` threads via
threadpoolctl. Windows alternate: each round times one window of ours and then one window of
each torch mode (the torch worker waits for the next request between its windows), and the
report gives medians and the median of the per-round ratios.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

CONFIG = dict(vocab_size=32, d_model=64, n_heads=4, n_layers=2, d_ff=256, seq_len=32, batch_size=16,
              lr=1e-3, weight_decay=0.01, clip=1.0)


def batches(seed, n):
    rng = np.random.default_rng(seed)
    B, T, V = CONFIG["batch_size"], CONFIG["seq_len"], CONFIG["vocab_size"]
    x = rng.integers(0, V, size=(n, B, T + 1))
    return [(b[:, :-1], b[:, 1:]) for b in x]


# --------------------------------------------------------------------------- ours

def _ours_stepper():
    from posenc_np.layers import softmax_cross_entropy_backward
    from posenc_np.model import ModelConfig, Transformer

    c = CONFIG
    model = Transformer(ModelConfig(vocab_size=c["vocab_size"], d_model=c["d_model"], n_heads=c["n_heads"],
                                    n_layers=c["n_layers"], d_ff=c["d_ff"], max_len=c["seq_len"], position="learned",
                                    tied=True, dtype="float32", seed=0))
    ops = model.ops  # the fused kernels (posenc_np.fused), as train() uses them
    opt = ops.Adam(model.params, lr=c["lr"], weight_decay=c["weight_decay"])

    def step(tokens, targets):
        logits = model.forward(tokens)
        loss, cache = ops.softmax_cross_entropy(logits, targets)
        model.backward(softmax_cross_entropy_backward(cache))
        ops.clip_grad_norm(model.grads, c["clip"])
        opt.step(model.grads)
        return loss

    return step


# --------------------------------------------------------------------------- torch

def torch_stepper(threads, compiled=False):
    """The torch twin of :func:`_ours_stepper` (``compiled``: ``torch.compile`` of the model)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    c = CONFIG
    d, H, T = c["d_model"], c["n_heads"], c["seq_len"]

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc1, self.fc2 = nn.Linear(d, c["d_ff"]), nn.Linear(c["d_ff"], d)
            self.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)))

        def forward(self, x):
            B, L, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
            q, k, v = (t.view(B, L, H, d // H).transpose(1, 2) for t in (q, k, v))
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // H))
            att = att.masked_fill(~self.mask[:L, :L], float("-inf")).softmax(dim=-1)
            x = x + self.proj((att @ v).transpose(1, 2).reshape(B, L, d))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(c["vocab_size"], d)
            self.pos = nn.Embedding(T, d)
            self.blocks = nn.ModuleList([Block() for _ in range(c["n_layers"])])
            self.ln_f = nn.LayerNorm(d)

        def forward(self, idx):
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
            for b in self.blocks:
                x = b(x)
            return self.ln_f(x) @ self.tok.weight.T

    model = GPT()
    run_model = torch.compile(model, dynamic=False) if compiled else model
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": c["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}], lr=c["lr"])

    def step(tokens, targets):
        tok = torch.from_numpy(tokens)
        tgt = torch.from_numpy(targets)
        opt.zero_grad(set_to_none=True)
        logits = run_model(tok)
        loss = F.cross_entropy(logits.reshape(-1, c["vocab_size"]), tgt.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), c["clip"])
        opt.step()
        return loss.item()

    return step


# --------------------------------------------------------------------------- timing

def window(step, batches):
    t0 = time.perf_counter()
    for tok, tgt in batches:
        step(tok, tgt)
    return len(batches) * CONFIG["batch_size"] * CONFIG["seq_len"] / (time.perf_counter() - t0)


#: (steps per window, windows, warm-up steps), by mode
SCHEDULE = {True: (10, 3, 3), False: (40, 7, 10)}


def _limits(threads):
    from threadpoolctl import threadpool_limits

    return threadpool_limits(threads)


def run(quick: bool = False, torch_python: str | None = None) -> dict:
    """Measure tokens/s; returns numbers and a Markdown table (key ``"markdown"``).

    Rounds alternate one window of ours with one window of each torch mode (a worker process,
    ``torch_peers.TrainPeer``), so a change in machine load hits every implementation alike;
    besides the medians, each ratio is also reported as the median of its per-round ratios.
    """
    steps, windows, warm = SCHEDULE[quick]
    data = batches(0, steps)
    results = {"config": dict(CONFIG), "steps_per_window": steps, "windows": windows, "torch": None,
               "tokens_per_s": {}, "paired_ratio": {}}
    peer = None
    if torch_python:
        import torch_peers

        peer = torch_peers.TrainPeer(torch_python, {"threads": [2, 1], "steps": steps, "warm": warm})
        results["torch"] = peer.ready.pop("torch")
    try:
        for threads in (2, 1):
            keys = [k for k, v in (peer.ready.items() if peer else ()) if k.endswith(f"@{threads}")
                    and "error" not in v]
            samples = {k: [] for k in [f"numpy@{threads}"] + keys}
            with _limits(threads):
                step = _ours_stepper()
                for tok, tgt in data[:warm]:
                    step(tok, tgt)
                for _ in range(windows):
                    samples[f"numpy@{threads}"].append(window(step, data))
                    for key in keys:
                        samples[key].append(peer.window(key))
            for key, xs in samples.items():
                first = peer.ready.get(key, {}) if peer else {}  # torch's compile step, when it has one
                results["tokens_per_s"][key] = {"median": statistics.median(xs), "min": min(xs), "max": max(xs),
                                                **first}
                if key in keys:
                    results["paired_ratio"][key] = statistics.median(
                        o / t for o, t in zip(samples[f"numpy@{threads}"], xs))
            for key in (peer.ready if peer else ()):
                if key.endswith(f"@{threads}") and "error" in peer.ready[key]:
                    results["tokens_per_s"][key] = peer.ready[key]
    finally:
        if peer:
            peer.close()
    results["markdown"] = _markdown(results)
    return results


def _markdown(results) -> str:
    tps = results["tokens_per_s"]
    lines = ["| implementation | threads | tokens/s (median) | range | posenc_np / this: medians (per round) "
             "| first step |",
             "|---|---|---|---|---|---|"]
    for threads in (2, 1):
        ours = tps[f"numpy@{threads}"]
        for key, label in ((f"numpy@{threads}", "posenc_np (NumPy, manual backprop)"),
                           (f"torch-eager@{threads}", f"torch {results['torch']} eager + autograd"),
                           (f"torch-compile@{threads}", f"torch {results['torch']} `torch.compile` + autograd")):
            v = tps.get(key)
            if v is None:
                continue
            if "error" in v:
                lines.append(f"| {label} | {threads} | failed: {v['error']} | | | |")
                continue
            paired = results.get("paired_ratio", {}).get(key)
            ratio = "" if key.startswith("numpy") else (f"{ours['median'] / v['median']:.2f}"
                                                        + (f" ({paired:.2f})" if paired else ""))
            if ratio:
                results[f"ratio_{key}"] = ours["median"] / v["median"]
            first = f"{v['first_step_s']:.1f} s" if "first_step_s" in v else ""
            lines.append(f"| {label} | {threads} | {v['median']:,.0f} | {v['min']:,.0f} - {v['max']:,.0f} | {ratio} "
                         f"| {first} |")
    if results["torch"] is None:
        lines.append("| torch | - | not measured (no `--torch-python` with torch) | | | |")
    c = CONFIG
    return (f"Training step throughput, vocab {c['vocab_size']}, d_model {c['d_model']}, {c['n_heads']} heads, "
            f"{c['n_layers']} layers, d_ff {c['d_ff']}, batch {c['batch_size']} x {c['seq_len']} tokens, float32, "
            f"learned positions, AdamW + clipping. {results['windows']} rounds of {results['steps_per_window']} "
            "steps; each round times one window of ours, then one of each torch mode (its own process, "
            "waiting for the next request between windows), so load changes hit all alike. Ratio: of the "
            "medians, and in brackets the median of the per-round ratios. `first step` = the untimed first "
            "step (for `torch.compile`: graph capture and C++ compilation of forward and backward).\n\n"
            + "\n".join(lines) + "\n")


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--torch-python", default=None)
    args = parser.parse_args()
    res = run(quick=args.quick, torch_python=args.torch_python)
    if args.json:  # one line for bench/run.py, which runs this in a fresh process
        print(json.dumps(res))
    else:
        print(res.pop("markdown"))
        print(json.dumps(res, indent=1))
