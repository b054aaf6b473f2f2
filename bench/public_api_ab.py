"""The public API's speed in two source trees, interleaved in one run (before/after a change).

``python bench/public_api_ab.py --before TREE --after TREE [--rounds 7] [--json FILE]``

Each tree runs in its own worker process (``PYTHONPATH=TREE``, so the two never share an
import), kept alive for the whole run: the workers warm up (Numba compiles or loads its
cache) and then, round after round, each times one window of every case in turn. The report
gives per-case medians over the rounds and the median of the per-round ratios after/before
(< 1 is faster). The cases use only functions both trees export under the same name:

* ``rope.apply`` (allocating and ``out=x``) on ``(4, 8, 1024, 128)`` float32, half layout, and
  allocating on ``(1, 4, 128, 128)`` (a call where the launch costs count);
* ``alibi.attention`` forward and ``alibi.attention_backward``, ``backend="numba"``, causal,
  ``B=1, H=8, T=2048, D=64`` float32;
* decoding: ``Transformer.generate`` of 64 tokens after a 256-token prompt, RoPE and ALiBi,
  d_model 128, 4 heads, 2 layers, float32 (time per generated token);
* training: ``train.train`` for 20 steps of the copy task (``bench/bench_train.py``'s model
  size: d_model 64, 4 heads, 2 layers, batch 16), learned absolute positions (time per step).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

WORKER = r'''
import json, sys, time
import numpy as np
from posenc_np import alibi, rope
from posenc_np.model import ModelConfig, Transformer
from posenc_np.study.tasks import CopyTask
from posenc_np.train import train

rng = np.random.default_rng(0)
x = rng.standard_normal((4, 8, 1024, 128)).astype(np.float32)
freqs = rope.inv_freq(128)  # the tree before the redesign returned (inv_freq, attention_factor)
freqs = freqs[0] if isinstance(freqs, tuple) else freqs
cos, sin = rope.cos_sin(np.arange(1024), freqs, dtype=np.float32)
xs = rng.standard_normal((1, 4, 128, 128)).astype(np.float32)
cs, ss = cos[:128], sin[:128]
q, k, v = (rng.standard_normal((1, 8, 2048, 64)).astype(np.float32) for _ in range(3))
dout = rng.standard_normal((1, 8, 2048, 64)).astype(np.float32)
_, acache = alibi.attention(q, k, v, causal=True, backend="numba")

def decoder(position):
    cfg = ModelConfig(vocab_size=64, d_model=128, n_heads=4, n_layers=2, d_ff=512, max_len=512, position=position,
                      dtype="float32", seed=0)
    return Transformer(cfg), rng.integers(0, 64, size=(1, 256))

dec = {p: decoder(p) for p in ("rope", "alibi")}
task = CopyTask(15, alphabet=16)

def trainer():
    cfg = ModelConfig(vocab_size=task.vocab_size, d_model=64, n_heads=4, n_layers=2, d_ff=256, max_len=task.seq_len,
                      position="learned", dtype="float32", seed=0)
    return Transformer(cfg)

CASES = {
    "rope.apply": (lambda: rope.apply(x, cos, sin), 20, 1),
    "rope.apply out=x": (lambda: rope.apply(x, cos, sin, out=x), 20, 1),
    "rope.apply (1, 4, 128, 128)": (lambda: rope.apply(xs, cs, ss), 300, 1),
    "alibi forward T=2048": (lambda: alibi.attention(q, k, v, causal=True, backend="numba"), 5, 1),
    "alibi backward T=2048": (lambda: alibi.attention_backward(dout, acache), 3, 1),
    "decode rope (per token)": (lambda: dec["rope"][0].generate(dec["rope"][1], 64), 1, 64),
    "decode alibi (per token)": (lambda: dec["alibi"][0].generate(dec["alibi"][1], 64), 1, 64),
    "train (per step)": (lambda: train(trainer(), task, 20, batch_size=16, progress=False), 1, 20),
}
for fn, reps, _ in CASES.values():
    fn()
print(json.dumps(sorted(CASES)), flush=True)
for line in sys.stdin:
    name = json.loads(line)
    fn, reps, per = CASES[name]
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    print(json.dumps((time.perf_counter() - t0) / reps / per), flush=True)
'''


def _worker(tree: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree), OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    return subprocess.Popen([sys.executable, "-c", WORKER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env=env, cwd=os.path.abspath(tree))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--json", help="write the numbers here")
    args = ap.parse_args(argv)
    workers = {"before": _worker(args.before), "after": _worker(args.after)}
    names = [json.loads(w.stdout.readline()) for w in workers.values()][0]
    times = {side: {n: [] for n in names} for side in workers}
    for r in range(args.rounds):
        for n in names:
            order = ("before", "after") if r % 2 == 0 else ("after", "before")
            for side in order:
                w = workers[side]
                w.stdin.write(json.dumps(n) + "\n")
                w.stdin.flush()
                times[side][n].append(json.loads(w.stdout.readline()))
    for w in workers.values():
        w.stdin.close()
        w.wait()
    rows = []
    print(f"| case | before | after | after/before (median of {args.rounds} rounds) |\n| --- | ---: | ---: | ---: |")
    for n in names:
        b, a = times["before"][n], times["after"][n]
        ratio = statistics.median(y / x for x, y in zip(b, a))
        rows.append({"case": n, "before_s": statistics.median(b), "after_s": statistics.median(a), "ratio": ratio})
        print(f"| {n} | {statistics.median(b) * 1e3:.3f} ms | {statistics.median(a) * 1e3:.3f} ms | {ratio:.3f} |")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"rounds": args.rounds, "rows": rows, "raw": times}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
