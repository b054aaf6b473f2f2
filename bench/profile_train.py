"""Where a training step of the NumPy transformer spends its time (cProfile), per position encoding.

``python bench/profile_train.py [--size study|big] [--position learned|rope|alibi] [--steps N] [--top K]``

Sizes: ``study`` is the configuration of ``bench/bench_train.py`` and the position study
(d_model 64, 4 heads, 2 layers, batch 16 x 32 tokens); ``big`` is d_model 256, 8 heads, 4 layers,
batch 8 x 256 tokens (where the RoPE and ALiBi kernels take over from NumPy). One step =
forward, cross-entropy, backward, clipping, AdamW, as in ``bench/bench_train.py``. Prints the
functions with the largest own time (``tottime``) and the share of the step spent in
``posenc_np/kernels`` (calls entering it from outside, Numba dispatch included). Not part of ``bench/run.py``: a tool for
deciding what to optimise.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

SIZES = {
    "study": dict(d_model=64, n_heads=4, n_layers=2, d_ff=256, seq_len=32, batch=16),
    "big": dict(d_model=256, n_heads=8, n_layers=4, d_ff=1024, seq_len=256, batch=8),
}


def stepper(size: str, position: str):
    from posenc_np.layers import softmax_cross_entropy_backward
    from posenc_np.model import ModelConfig, Transformer

    c = SIZES[size]
    model = Transformer(ModelConfig(vocab_size=64, d_model=c["d_model"], n_heads=c["n_heads"], n_layers=c["n_layers"],
                                    d_ff=c["d_ff"], max_len=c["seq_len"], position=position, tied=True,
                                    dtype="float32", seed=0))
    ops = model.ops  # the fused kernels (posenc_np.fused), as train() uses them
    opt = ops.Adam(model.params, lr=1e-3, weight_decay=0.01)
    rng = np.random.default_rng(0)

    def step():
        tokens = rng.integers(0, 64, size=(c["batch"], c["seq_len"] + 1))
        logits = model.forward(tokens[:, :-1])
        _, cache = ops.softmax_cross_entropy(logits, tokens[:, 1:])
        model.backward(softmax_cross_entropy_backward(cache))
        ops.clip_grad_norm(model.grads, 1.0)
        opt.step(model.grads)

    return step


def _in_kernels(filename: str) -> bool:
    return f"posenc_np{os.sep}kernels{os.sep}" in filename


def profile(size: str, position: str, steps: int, top: int) -> dict:
    step = stepper(size, position)
    for _ in range(3):  # compile / load kernels, warm caches
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    per_step = (time.perf_counter() - t0) / steps
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(steps):
        step()
    prof.disable()
    stats = pstats.Stats(prof)
    total = sum(v[2] for v in stats.stats.values())
    # time entering posenc_np/kernels from outside it (every entry point: rope, alibi, layers)
    kernels = sum(edge[3] for k, v in stats.stats.items() if _in_kernels(k[0])
                  for caller, edge in v[4].items() if not _in_kernels(caller[0]))
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:top]
    return {"size": size, "position": position, "step_ms": 1e3 * per_step, "kernel_share": kernels / total,
            "top": [(f"{os.path.relpath(k[0], ROOT) if k[0].startswith(ROOT) else k[0]}:{k[1]}({k[2]})",
                     v[2] / total, v[0]) for k, v in rows]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=tuple(SIZES), action="append")
    parser.add_argument("--position", choices=("learned", "rope", "alibi"), action="append")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--blas-threads", type=int, default=None,
                        help="limit BLAS to this many threads (threadpoolctl; default: BLAS's own setting)")
    args = parser.parse_args(argv)
    if args.blas_threads:
        from threadpoolctl import threadpool_limits

        threadpool_limits(args.blas_threads, user_api="blas")
    for size in args.size or list(SIZES):
        for position in args.position or ["learned", "rope", "alibi"]:
            r = profile(size, position, args.steps, args.top)
            print(f"\n== {size} / {position}: {r['step_ms']:.1f} ms per step (unprofiled); "
                  f"kernel entry points (own + callees): {100 * r['kernel_share']:.1f} % of the profiled step")
            for name, share, calls in r["top"]:
                print(f"  {100 * share:5.1f} %  {calls:6d} calls  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
