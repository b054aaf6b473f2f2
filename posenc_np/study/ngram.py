r"""The LM part's count-model baseline: an interpolated Kneser–Ney byte n-gram model.

Trained by counting on the LM's training bytes, scored on exactly the predictions the
transformer LMs are scored on (:func:`~posenc_np.study.corpus.eval_windows`, every mode and
length), with the context cut at the window's start as the transformer's is. For an order
:math:`N` model and context :math:`h` (the last :math:`\min(N-1, \text{available})` bytes),
interpolated Kneser–Ney (Chen & Goodman 1999, one discount per order):

.. math::

    P_k(w \mid h) = \frac{\max(c_k(hw) - D_k, 0)}{\sum_v c_k(hv)}
                    + \frac{D_k\, N_{1+}(h\,\cdot)}{\sum_v c_k(hv)}\, P_{k-1}(w \mid h'),
    \qquad P_0(w) = 1/256,

with :math:`h'` the context without its first byte, :math:`c_k` the raw counts at the highest
order used and the continuation counts :math:`N_{1+}(\cdot\, h w)` (distinct left neighbours)
below it, :math:`D_k = n_1 / (n_1 + 2 n_2)` from the count-of-counts of those counts, and
:math:`P_k = P_{k-1}` for a context never seen. Orders 1 to ``max_order`` are scored; the
reported baseline is the order with the lowest perplexity on the sliding windows at
:math:`L` (chosen on the evaluation bytes themselves: a baseline that errs on the strong
side).
"""

from __future__ import annotations

import numpy as np

from .tasks import IGNORE

__all__ = ["KneserNey"]

_V = 256


def _keys(data: np.ndarray, k: int) -> np.ndarray:
    """Integer keys of every k-gram of ``data`` (big-endian base 256)."""
    n = len(data) - k + 1
    key = np.zeros(max(n, 0), dtype=np.int64)
    for j in range(k):
        key = key * _V + data[j:j + n]
    return key


def _discount(counts: np.ndarray) -> float:
    n1, n2 = int(np.sum(counts == 1)), int(np.sum(counts == 2))
    return n1 / (n1 + 2 * n2) if n1 + n2 else 0.5


class _Table:
    """Counts of the k-grams (sorted keys), per-context totals and types, and the discount."""

    def __init__(self, keys: np.ndarray, counts: np.ndarray):
        self.keys, self.counts = keys, counts.astype(np.float64)
        ctx = keys // _V
        self.ctx_keys, inverse = np.unique(ctx, return_inverse=True)
        self.ctx_total = np.bincount(inverse, weights=self.counts)
        self.ctx_types = np.bincount(inverse).astype(np.float64)
        self.D = _discount(counts)

    @staticmethod
    def _find(sorted_keys, values, query):
        i = np.clip(np.searchsorted(sorted_keys, query), 0, max(len(sorted_keys) - 1, 0))
        hit = (sorted_keys[i] == query) if len(sorted_keys) else np.zeros(len(query), bool)
        return np.where(hit, values[i] if len(sorted_keys) else 0.0, 0.0)

    def step(self, ctx: np.ndarray, gram: np.ndarray, lower: np.ndarray) -> np.ndarray:
        c_hw = self._find(self.keys, self.counts, gram)
        total = self._find(self.ctx_keys, self.ctx_total, ctx)
        types = self._find(self.ctx_keys, self.ctx_types, ctx)
        safe = np.where(total > 0, total, 1.0)
        p = np.maximum(c_hw - self.D, 0.0) / safe + self.D * types / safe * lower
        return np.where(total > 0, p, lower)


class KneserNey:
    """Interpolated Kneser–Ney byte model of every order up to ``max_order`` (see the module docstring).

    Examples
    --------
    >>> from posenc_np.study.ngram import KneserNey
    >>> model = KneserNey(np.frombuffer(b"abababababcabab", dtype=np.uint8), max_order=2)
    >>> tokens, targets = np.full((3, 1), ord("a")), np.array([[ord("a")], [ord("b")], [ord("c")]])
    >>> np.exp(model.log_probs(tokens, targets, 1)).round(6).tolist()   # counts 7, 7, 1 of 15; D = 1
    [0.400781, 0.400781, 0.000781]
    >>> round((7 - 1) / 15 + 1 * 3 / 15 / 256, 6), round((1 - 1) / 15 + 1 * 3 / 15 / 256, 6)  # (c-D + D types/256) / N
    (0.400781, 0.000781)
    >>> every_byte = np.arange(256)[:, None]                          # P(w | "a") of order 2 over all 256 bytes
    >>> round(float(np.exp(model.log_probs(np.full((256, 1), ord("a")), every_byte, 2)).sum()), 6)
    1.0
    """

    def __init__(self, data, max_order: int = 5):
        data = np.asarray(data, dtype=np.int64)
        if data.ndim != 1 or len(data) <= max_order:
            raise ValueError(f"data must be a 1-D byte array longer than max_order ({max_order})")
        self.max_order = int(max_order)
        self.raw, self.cont = {}, {}
        for k in range(1, self.max_order + 1):
            keys, counts = np.unique(_keys(data, k), return_counts=True)
            self.raw[k] = _Table(keys, counts)
            longer = np.unique(_keys(data, k + 1))  # distinct (left neighbour, k-gram) pairs
            ckeys, ccounts = np.unique(longer % (_V ** k), return_counts=True)
            self.cont[k] = _Table(ckeys, ccounts)

    def log_probs(self, tokens: np.ndarray, targets: np.ndarray, order: int) -> np.ndarray:
        """``log P(target | context)`` of every scored target (``targets != IGNORE``), row-major,
        for windows ``tokens`` (context cut at the start of each row)."""
        tokens, targets = np.asarray(tokens, dtype=np.int64), np.asarray(targets, dtype=np.int64)
        rows, cols = np.nonzero(targets != IGNORE)
        w = targets[rows, cols]
        avail = cols + 1  # tokens 0..col of the row are the context
        p = np.full(len(w), 1.0 / _V)
        ctx = np.zeros(len(w), dtype=np.int64)  # the context key of length k - 1
        for k in range(1, order + 1):
            if k > 1:  # extend the context by one byte on the left, where the row has it
                back = cols - (k - 2)
                has = back >= 0
                byte = tokens[rows, np.where(has, back, 0)]
                ctx = np.where(has, byte * _V ** (k - 2) + ctx, ctx)
            usable = avail >= k - 1
            table = self.raw[k] if k == order else self.cont[k]
            top = (avail == k - 1) if k < order else np.ones(len(w), bool)  # the highest order this query reaches
            gram = ctx * _V + w
            lower = p
            p_raw = self.raw[k].step(ctx, gram, lower)
            p_cont = table.step(ctx, gram, lower)
            p = np.where(usable, np.where(top, p_raw, p_cont), p)
        return np.log(p)
