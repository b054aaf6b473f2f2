"""What the RoPE kernel's caches buy, through the public API: an interleaved A/B in one process.

``python bench/rope_machinery.py [ROUNDS]``. Each mechanism of ``posenc_np/kernels/rope.py`` is
switched off by replacing it for the duration of a round (``off``) and left as it is (``on``);
rounds alternate which goes first, each times the median of 300 calls after 5 warm-up calls, and
the table gives the median over rounds. Mechanisms:

* ``launch cache`` (``_LAUNCHES`` / ``_launch_key``): a C-contiguous call of a known geometry reuses
  its planned launch and only swaps in its arrays; off: ``_launch_key`` returns None;
* ``plan cache`` (``_PLANS``): the row offsets and blocking of a small geometry are kept (the
  model's q and k are strided views of its qkv buffer, which the launch cache does not take);
  off: nothing is kept.

Shapes: ``rope.apply`` on ``(1, 4, 128, 128)`` and ``(1, 8, 1024, 128)`` float32 (bench_rope's two
smallest); ``rope.apply_qk`` on q, k views of a fused ``(B, T, 3 H D)`` buffer rotated in place
(what the model does) and on contiguous ``(B, H, T, D)`` arrays.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from posenc_np import rope
from posenc_np.kernels import rope as krope


class _Forgetful(dict):
    def __setitem__(self, key, value):
        pass


def _switch(mechanism: str, on: bool, saved: dict) -> None:
    krope._launch_key, krope._PLANS = saved["launch_key"], saved["plans"]
    if not on and mechanism == "launch cache":
        krope._launch_key = lambda *args: None
    if not on and mechanism == "plan cache":
        krope._PLANS = _Forgetful()


def _cases(rng):
    out = []
    for shape in ((1, 4, 128, 128), (1, 8, 1024, 128)):
        x = rng.standard_normal(shape, dtype=np.float32)
        c, s = rope.cos_sin(np.arange(shape[2]), rope.inv_freq(128)[0], dtype=np.float32)
        y = np.empty_like(x)
        out.append(("launch cache", f"rope.apply {shape}", lambda x=x, c=c, s=s: rope.apply(x, c, s)))
        out.append(("launch cache", f"rope.apply {shape}, out=y", lambda x=x, c=c, s=s, y=y: rope.apply(x, c, s, out=y)))
        out.append(("plan cache", f"rope.apply {shape}", lambda x=x, c=c, s=s: rope.apply(x, c, s)))
    for B, T, H, D in ((16, 32, 4, 16), (8, 128, 4, 32), (1, 512, 8, 64)):
        qkv = rng.standard_normal((B, T, 3 * H * D), dtype=np.float32)
        c, s = rope.cos_sin(np.arange(T), rope.inv_freq(D)[0], dtype=np.float32)

        def model(qkv=qkv, c=c, s=s, B=B, T=T, H=H, D=D):
            q, k, _ = (a.reshape(B, T, H, D).transpose(0, 2, 1, 3) for a in np.split(qkv, 3, axis=-1))
            return rope.apply_qk(q, k, c, s, out_q=q, out_k=k)

        q = rng.standard_normal((B, H, T, D), dtype=np.float32)
        k = q.copy()
        out.append(("plan cache", f"rope.apply_qk, q and k views of qkv, in place, (B,H,T,D) = {(B, H, T, D)}", model))
        out.append(("launch cache", f"rope.apply_qk, contiguous (B,H,T,D) = {(B, H, T, D)}",
                    lambda q=q, k=k, c=c, s=s: rope.apply_qk(q, k, c, s)))
    return out


def main(rounds: int = 11) -> None:
    saved = {"launch_key": krope._launch_key, "plans": krope._PLANS}
    print("| mechanism | call (float32, layout half) | on (us) | off (us) | saved |\n|---|---|---:|---:|---:|")
    for mechanism, label, fn in _cases(np.random.default_rng(0)):
        times = {True: [], False: []}
        for r in range(rounds):
            for on in ((True, False) if r % 2 == 0 else (False, True)):
                _switch(mechanism, on, saved)
                for _ in range(5):
                    fn()
                calls = []
                for _ in range(300):
                    t0 = time.perf_counter()
                    fn()
                    calls.append(time.perf_counter() - t0)
                times[on].append(statistics.median(calls) * 1e6)
        _switch(mechanism, True, saved)
        on, off = statistics.median(times[True]), statistics.median(times[False])
        print(f"| {mechanism} | {label} | {on:.0f} | {off:.0f} | {100 * (1 - on / off):.0f} % |", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 11)
