"""Count the library's function calls in one forward of a one-layer model, per encoding.

Usage: ``python tools/count_calls.py [--encodings rope alibi ...] [--top N]``.

A *library call* is a Python function call whose code lives in the ``posenc_np`` package
(``sys.setprofile`` 'call' events; NumPy, Numba dispatchers and builtins are not counted).
The model is ``ModelConfig(vocab_size=16, d_model=32, n_heads=4, n_layers=1, max_len=64)``
in float32 on a ``(2, 16)`` batch, after one warm-up forward (so lazy imports and first-call
set-up are excluded). ``--top`` lists the most called functions.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys

import numpy as np

import posenc_np
from posenc_np.model import REGISTRY, ModelConfig, Transformer

PACKAGE = os.path.dirname(os.path.abspath(posenc_np.__file__))


def count_forward(name: str) -> collections.Counter:
    model = Transformer(ModelConfig(vocab_size=16, d_model=32, n_heads=4, n_layers=1, max_len=64, position=name))
    tokens = np.random.default_rng(0).integers(0, 16, size=(2, 16))
    model.forward(tokens)
    counts: collections.Counter = collections.Counter()

    def profile(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(PACKAGE):
            code = frame.f_code
            rel = os.path.relpath(code.co_filename, PACKAGE)
            counts[f"{rel}:{code.co_name}"] += 1

    sys.setprofile(profile)
    try:
        model.forward(tokens)
    finally:
        sys.setprofile(None)
    return counts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--encodings", nargs="*", default=list(REGISTRY))
    parser.add_argument("--top", type=int, default=0)
    args = parser.parse_args(argv)
    for name in args.encodings:
        counts = count_forward(name)
        print(f"{name:16s} {sum(counts.values()):5d} library calls")
        for fn, n in counts.most_common(args.top):
            print(f"    {n:4d}  {fn}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
