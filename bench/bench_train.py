"""Training throughput (tokens/s) of the NumPy transformer vs the same model in torch CPU eager.

``run(quick) -> dict`` returns JSON-able numbers and a Markdown table under ``"markdown"``.
Run directly: ``python bench/bench_train.py [--quick]``.

Fixed tiny configuration (GPT-2 style): vocab 32, d_model 64, 4 heads, 2 layers, d_ff 256,
learned absolute positions (add), tied output, tanh GELU, batch 16 x 32 tokens, AdamW
(lr 1e-3, weight decay 0.01), global-norm clipping at 1.0, float32. One *step* is sampling
a batch, forward, cross-entropy, backward, clipping and the optimizer update.

torch (when importable) runs the same architecture in eager mode with autograd
(explicit attention: matmul, masked_fill, softmax, matmul; ``torch.optim.AdamW``,
``clip_grad_norm_``), ``torch.set_num_threads(n)``. Ours runs with its BLAS (OpenBLAS) limited
to ``n`` threads via threadpoolctl. Measurements alternate between the two and report the
median of several timed windows, to damp drift on a shared machine.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import time

import numpy as np

CONFIG = dict(vocab_size=32, d_model=64, n_heads=4, n_layers=2, d_ff=256, seq_len=32, batch_size=16,
              lr=1e-3, weight_decay=0.01, clip=1.0)


def _batches(seed, n):
    rng = np.random.default_rng(seed)
    B, T, V = CONFIG["batch_size"], CONFIG["seq_len"], CONFIG["vocab_size"]
    x = rng.integers(0, V, size=(n, B, T + 1))
    return [(b[:, :-1], b[:, 1:]) for b in x]


# --------------------------------------------------------------------------- ours

def _ours_stepper():
    from posenc_np.layers import softmax_cross_entropy, softmax_cross_entropy_backward
    from posenc_np.model import ModelConfig, Transformer
    from posenc_np.optim import Adam, clip_grad_norm

    c = CONFIG
    model = Transformer(ModelConfig(vocab_size=c["vocab_size"], d_model=c["d_model"], n_heads=c["n_heads"],
                                    n_layers=c["n_layers"], d_ff=c["d_ff"], max_len=c["seq_len"], position="learned",
                                    tied=True, dtype="float32", seed=0))
    opt = Adam(model.params, lr=c["lr"], weight_decay=c["weight_decay"])

    def step(tokens, targets):
        logits = model.forward(tokens)
        loss, cache = softmax_cross_entropy(logits, targets)
        model.backward(softmax_cross_entropy_backward(cache))
        clip_grad_norm(model.grads, c["clip"])
        opt.step(model.grads)
        return loss

    return step


# --------------------------------------------------------------------------- torch

def _torch_stepper(threads):
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
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": c["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}], lr=c["lr"])

    def step(tokens, targets):
        tok = torch.from_numpy(tokens)
        tgt = torch.from_numpy(targets)
        opt.zero_grad(set_to_none=True)
        logits = model(tok)
        loss = F.cross_entropy(logits.reshape(-1, c["vocab_size"]), tgt.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), c["clip"])
        opt.step()
        return loss.item()

    return step


# --------------------------------------------------------------------------- timing

def _window(step, batches):
    t0 = time.perf_counter()
    for tok, tgt in batches:
        step(tok, tgt)
    return len(batches) * CONFIG["batch_size"] * CONFIG["seq_len"] / (time.perf_counter() - t0)


def _limits(threads):
    from threadpoolctl import threadpool_limits

    return threadpool_limits(threads)


def run(quick: bool = False) -> dict:
    """Measure tokens/s; returns numbers and a Markdown table (key ``"markdown"``)."""
    steps, windows, warm = (10, 3, 3) if quick else (40, 7, 10)
    batches = _batches(0, steps)
    try:
        import torch  # noqa: F401

        torch_version = torch.__version__
    except ImportError:
        torch_version = None
    results = {"config": dict(CONFIG), "steps_per_window": steps, "windows": windows, "torch": torch_version,
               "tokens_per_s": {}}
    for threads in (2, 1):
        contenders = {"numpy": lambda: _ours_stepper()}
        if torch_version is not None:
            contenders["torch"] = lambda threads=threads: _torch_stepper(threads)
        steppers = {}
        with _limits(threads):
            for name, make in contenders.items():
                steppers[name] = make()
                for tok, tgt in batches[:warm]:
                    steppers[name](tok, tgt)
            samples = {name: [] for name in steppers}
            for _ in range(windows):  # alternate to share any drift in machine load
                for name, step in steppers.items():
                    samples[name].append(_window(step, batches))
        for name, s in samples.items():
            results["tokens_per_s"][f"{name}@{threads}"] = {"median": statistics.median(s), "min": min(s), "max": max(s)}
    tps = results["tokens_per_s"]
    lines = ["| implementation | threads | tokens/s (median) | range | ours / torch |", "|---|---|---|---|---|"]
    for key, v in tps.items():
        name, threads = key.split("@")
        ratio = ""
        if name == "numpy" and f"torch@{threads}" in tps:
            ratio = f"{v['median'] / tps[f'torch@{threads}']['median']:.2f}"
            results[f"ratio@{threads}"] = v["median"] / tps[f"torch@{threads}"]["median"]
        label = "posenc_np (NumPy, manual backprop)" if name == "numpy" else f"torch {torch_version} eager + autograd"
        lines.append(f"| {label} | {threads} | {v['median']:,.0f} | {v['min']:,.0f} - {v['max']:,.0f} | {ratio} |")
    if torch_version is None:
        lines.append("| torch | - | not installed | | |")
    c = CONFIG
    results["markdown"] = (f"Training step throughput, vocab {c['vocab_size']}, d_model {c['d_model']}, "
                           f"{c['n_heads']} heads, {c['n_layers']} layers, d_ff {c['d_ff']}, batch "
                           f"{c['batch_size']} x {c['seq_len']} tokens, float32, learned positions, AdamW + clipping.\n\n"
                           + "\n".join(lines) + "\n")
    return results


if __name__ == "__main__":
    res = run(quick="--quick" in sys.argv)
    if "--json" in sys.argv:  # one line for bench/run.py, which runs this in a fresh process
        print(json.dumps(res))
    else:
        print(res.pop("markdown"))
        print(json.dumps(res, indent=1))
