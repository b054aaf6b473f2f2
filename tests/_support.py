"""Helpers shared by the test modules.

:func:`naive_attention` is the one loop-by-loop attention every attention test compares with.

:func:`require_tool` skips a test whose outside tool (a browser, an optional package, a command)
is missing, saying how to get it; with ``POSENC_REQUIRE_TOOLS=1`` (set by ``.ci/run``, which
installs every tool the tests use) a missing tool fails the test instead of skipping it.
"""

import importlib
import math
import os

import numpy as np
import pytest


def require_tool(available: bool, what: str, how: str) -> None:
    """Skip (or, under ``POSENC_REQUIRE_TOOLS=1``, fail) unless ``available``; the message names
    the missing tool and how to install it."""
    if available:
        return
    message = f"{what} is not available; {how}"
    if os.environ.get("POSENC_REQUIRE_TOOLS") == "1":
        pytest.fail(f"POSENC_REQUIRE_TOOLS=1 but {message}")
    pytest.skip(message)


def require_module(name: str, extra: str = "test"):
    """``import name``, or :func:`require_tool` with the pip command that installs it."""
    try:
        return importlib.import_module(name)
    except ImportError:
        require_tool(False, f"the Python package {name!r}", f"install it with python -m pip install '.[{extra}]'")


def naive_attention(q, k, v, *, scale=None, bias=None, keep=None, causal=False, logits=None):
    r"""Attention written out with Python loops, the tests' one reference for every attention path:
    :math:`o_i = \sum_j p_{ij} v_j`, :math:`p_{ij} = e^{s_{ij} - m_i} / \sum_{j'} e^{s_{ij'} - m_i}`
    over the kept keys :math:`j` of row :math:`i`, with :math:`s_{ij} = \mathrm{scale}\,q_i \cdot k_j
    + b_{ij}` (``scale`` default :math:`1/\sqrt{d}`), or the given ``logits``.

    ``q`` ``(..., H, q_len, d)``, ``k`` ``(..., H, k_len, d)``, ``v`` ``(..., H, k_len, d_v)``;
    ``bias`` and the boolean ``keep`` (True = keep) broadcast to the logits ``(..., H, q_len,
    k_len)``; ``causal`` keeps key ``j`` for query ``i`` iff ``j <= i + k_len - q_len``; NaN or
    ``-inf`` logits count as masked. A row with no kept key is 0. Computed in float64 (Python
    floats and ``math.exp``), independent of NumPy's vectorised softmax.
    """
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    *lead, q_len, d = q.shape
    k_len = k.shape[-2]
    shape = tuple(lead) + (q_len, k_len)
    scale = 1 / math.sqrt(d) if scale is None else scale
    bias = np.zeros(shape) if bias is None else np.broadcast_to(bias, shape)
    keep = np.ones(shape, dtype=bool) if keep is None else np.broadcast_to(keep, shape)
    out = np.zeros(tuple(lead) + (q_len, v.shape[-1]))
    for idx in np.ndindex(*lead):
        for i in range(q_len):
            s = {}
            for j in range(k_len):
                x = (scale * math.fsum(q[idx][i] * k[idx][j]) + float(bias[idx][i, j]) if logits is None
                     else float(np.broadcast_to(logits, shape)[idx][i, j]))
                if keep[idx][i, j] and (not causal or j <= i + k_len - q_len) and not math.isnan(x) and x != -math.inf:
                    s[j] = x
            if s:
                m = max(s.values())
                w = {j: math.exp(x - m) for j, x in s.items()}
                total = math.fsum(w.values())
                out[idx][i] = sum(w[j] / total * v[idx][j] for j in w)
    return out
