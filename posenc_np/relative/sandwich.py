r"""Sandwich: the parameter-free bias of sinusoidal inner products (Chi et al. 2023, arXiv 2212.10356,
"Latent Positional Information is in the Self-Attention Variance of Transformer Language Models
Without Positional Embeddings").

The inner product of two Vaswani sinusoids of width :math:`d'` depends only on the offset:
:math:`p_m^\top p_n = \sum_k \cos\!\big((m - n)\,\omega_k\big)`. Sandwich adds it to the logits as a
bias, shifted so that it is 0 at offset 0 and divided per head by an ALiBi-like compression ratio:

.. math::

    b_h(m, n) = \frac{1}{\rho_h}\Big(\sum_{k=1}^{d'/2} \cos\frac{m - n}{10000^{2k/d'}} - \frac{d'}{2}\Big),
    \qquad \rho_h = \frac{8h}{H}\ (h = 1 \dots H)

``compression="none"`` uses :math:`\rho_h = 1` (the paper's eq. for the bias alone). The shift by
:math:`d'/2` adds the same constant to every logit of a row, so it does not change the softmax; it
makes the bias :math:`\le 0` with its maximum 0 on the diagonal, as ALiBi's. The bias is even in
:math:`m - n`, so it serves encoders and decoders alike, and it has no parameters and no gradient.

Conventions (docs/relative.md, "Sandwich", lists the sources):

- :math:`k = 1 \dots d'/2` as in the paper's formula (exponents :math:`2/d' \dots 1`, so the slowest
  frequency is :math:`1/10000`); Vaswani's sinusoid runs :math:`k = 0 \dots d'/2 - 1`.
- :math:`d'` (``dim``) is a hyperparameter of the bias, not the model width; the paper uses
  :math:`d' = 128` (the default here).
- NVIDIA NeMo's ``sandwich_pos_bias`` divides by the same :math:`8h/H` and subtracts :math:`d'/2`,
  but sums :math:`(m - n)\,\omega_k` for :math:`k = 1 \dots d'/2 - 1` *without the cosine*: a bias
  linear in the offset, not this one.
- query :math:`i` at position :math:`i + k_{len} - q_{len}` (bottom-right, like the causal mask).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .._checks import MAX_ALLOC_BYTES, check_alloc, check_choice, check_even, check_int, check_lengths
from .._util import memo_table
from ..alibi import MAX_HEADS
from ..attention import Hook, check_hook_args
from ..positions import relative_grid

__all__ = ["SANDWICH_COMPRESSIONS", "SANDWICH_MAX_DIM", "SandwichBias", "sandwich_bias", "sandwich_compression",
           "sandwich_ratios", "sandwich_table"]

SANDWICH_COMPRESSIONS = ("alibi", "none")
BASE = 10000.0
#: Largest ``dim``: its ``dim // 2`` float64 frequencies stay within ``MAX_ALLOC_BYTES``.
SANDWICH_MAX_DIM = 2 * (MAX_ALLOC_BYTES // 8)


def sandwich_compression(num_heads: int, compression: str) -> np.ndarray:
    """:math:`\\rho_h = 8h/H` (``"alibi"``) or 1 (``"none"``), ``(heads,)``. Core of :func:`sandwich_ratios`.

    Examples
    --------
    >>> from posenc_np.relative import sandwich
    >>> sandwich.sandwich_compression(4, "alibi").tolist()   # 8h/H for h = 1 ... 4
    [2.0, 4.0, 6.0, 8.0]
    """
    if compression == "none":
        return np.ones(num_heads)
    return 8.0 * np.arange(1, num_heads + 1) / num_heads


@memo_table
def sandwich_table(num_heads: int, q_len: int, k_len: int, dim: int, compression: str) -> np.ndarray:
    """``(heads, q_len, k_len)`` float64 Sandwich bias (module docstring), kept (read-only) per configuration
    and lengths. Core of :func:`sandwich_bias`; arguments are not checked.

    Examples
    --------
    >>> from posenc_np.relative import sandwich
    >>> t = sandwich.sandwich_table(2, 3, 3, 8, "alibi")
    >>> t.shape, t.flags.writeable   # kept per configuration, read-only
    ((2, 3, 3), False)
    """
    offsets = np.arange(1 - k_len, q_len)  # every key - query of the grid (empty when a length is 0)
    k = np.arange(1, dim // 2 + 1)
    freqs = BASE ** (-2.0 * k / dim)
    per_offset = np.cos(np.multiply.outer(offsets.astype(np.float64), freqs)).sum(axis=-1) - dim / 2
    grid = relative_grid(q_len, k_len, k_len - q_len)  # key - query
    table = per_offset[grid - (1 - k_len)] if offsets.size else np.zeros((q_len, k_len))
    return table[None] / sandwich_compression(num_heads, compression)[:, None, None]


def sandwich_ratios(num_heads: int, *, compression: str = "alibi") -> np.ndarray:
    """The per-head compression ratios :math:`\\rho_h` (float64 ``(num_heads,)``).

    Examples
    --------
    >>> from posenc_np.relative import sandwich
    >>> sandwich.sandwich_ratios(4).tolist(), sandwich.sandwich_ratios(2, compression="none").tolist()
    ([2.0, 4.0, 6.0, 8.0], [1.0, 1.0])
    """
    num_heads = check_int(num_heads, "num_heads", minimum=1, maximum=MAX_HEADS)
    compression = check_choice(compression, "compression", SANDWICH_COMPRESSIONS)
    return sandwich_compression(num_heads, compression)


def sandwich_bias(num_heads: int, q_len: int, k_len: int, *, dim: int = 128, compression: str = "alibi") -> np.ndarray:
    r"""Sandwich bias ``(num_heads, q_len, k_len)``, float64 (see the module docstring).

    Parameters
    ----------
    num_heads : int
    q_len, k_len : int
        Query :math:`i` at :math:`i + k_{len} - q_{len}`, key :math:`j` at :math:`j`.
    dim : int
        :math:`d'`, even and at most :data:`SANDWICH_MAX_DIM`, the width of the sinusoids whose inner
        product is the bias (paper: 128).
    compression : {"alibi", "none"}
        Divide head :math:`h` by :math:`8h/H`, or by nothing.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import sandwich
    >>> b = sandwich.sandwich_bias(2, 3, 3, dim=8)   # rho = 4, 8
    >>> float(b.max()), bool(np.allclose(b, b.transpose(0, 2, 1))), bool(np.allclose(b[0], 2 * b[1]))
    (0.0, True, True)
    >>> round(float(b[1, 2, 0]), 6)   # m - n = 2: (cos 0.2 + cos 0.02 + cos 0.002 + cos 0.0002 - 4) / 8
    -0.002517
    """
    num_heads = check_int(num_heads, "num_heads", minimum=1, maximum=MAX_HEADS)
    q_len, k_len = check_lengths(q_len, k_len, "Sandwich bias (q_len, k_len)")
    dim = check_even(dim, "dim", maximum=SANDWICH_MAX_DIM)
    compression = check_choice(compression, "compression", SANDWICH_COMPRESSIONS)
    check_alloc((num_heads, q_len, k_len), np.float64, "Sandwich bias (num_heads, q_len, k_len)")
    check_alloc((q_len + k_len, dim // 2), np.float64, "Sandwich cosines (q_len + k_len, dim // 2)")
    return sandwich_table(num_heads, q_len, k_len, dim, compression).copy()


class SandwichBias(Hook):
    """Sandwich as an attention hook (no parameters; the bias is kept per lengths).

    Parameters
    ----------
    num_heads : int
    dim : int
        :math:`d'` (even; default 128 as in the paper).
    compression : {"alibi", "none"}

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import sandwich
    >>> q = k = np.zeros((1, 2, 3, 4), dtype=np.float32)   # (batch, heads, len, d)
    >>> term, cache = sandwich.SandwichBias(2, dim=8).logits(q, k, 0.5)
    >>> term.dtype, bool(np.allclose(term, sandwich.sandwich_bias(2, 3, 3, dim=8)))
    (dtype('float32'), True)
    """

    def __init__(self, num_heads: int, *, dim: int = 128, compression: str = "alibi") -> None:
        self.num_heads = check_int(num_heads, "num_heads", minimum=1, maximum=MAX_HEADS)
        self.dim = check_even(dim, "dim", maximum=SANDWICH_MAX_DIM)
        self.compression = check_choice(compression, "compression", SANDWICH_COMPRESSIONS)
        self.params, self.grads = {}, {}

    def logits(self, q: ArrayLike, k: ArrayLike, scale: float,
               mask: ArrayLike | None = None) -> tuple[np.ndarray | None, Any]:
        """Hook: the bias (cast to ``q``'s dtype), not multiplied by ``scale``."""
        q, k, scale, mask = check_hook_args(q, k, scale, mask, self.num_heads)
        check_alloc((q.shape[-2] + k.shape[-2], self.dim // 2), np.float64,
                    "Sandwich cosines (q_len + k_len, dim // 2)")
        b = sandwich_table(self.num_heads, q.shape[-2], k.shape[-2], self.dim, self.compression)
        return b.astype(q.dtype, copy=False), None

    def logits_backward(self, dlogits: np.ndarray, cache: Any) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Hook: nothing depends on ``q``, ``k`` or a parameter."""
        return None, None
