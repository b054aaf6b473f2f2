r"""Absolute positional encodings: sinusoidal, tensor2tensor timing signal, learned table,
and the three ways of fusing a position vector with a token vector.

Sinusoidal (Vaswani et al. 2017, "Attention Is All You Need", section 3.5):

.. math::

    PE_{(p, 2i)} = \sin(p\,\omega_i), \qquad PE_{(p, 2i+1)} = \cos(p\,\omega_i),
    \qquad \omega_i = \mathrm{base}^{-2i/d}, \quad i = 0 \dots d/2 - 1.

Because each channel pair is :math:`(\sin p\omega_i, \cos p\omega_i)`, shifting the position
by :math:`k` is a fixed rotation of every pair by the angle :math:`k\omega_i`, every row has
norm :math:`\sqrt{d/2}`, and rows are distinct over any range shorter than the longest
wavelength :math:`2\pi\,\mathrm{base}`.

Tables are exact: each entry is within one ulp of :math:`\sin`/:math:`\cos` of the exact angle
(frequencies in extended precision, exact reduction modulo :math:`2\pi`; see
:mod:`posenc_np._exact`) for every position :math:`|p| < 2^{53}`.
"""

from __future__ import annotations

import numpy as np

from . import _exact
from ._checks import check_grad
from ._table_checks import (check_fusion, check_learned_table, check_sinusoid, check_sinusoid_table, check_table_rows,
                            check_timing_signal)
from ._util import normal_init, scatter_add_rows, sum_to_shape

__all__ = [
    "LearnedPositionalEmbedding",
    "fuse",
    "fuse_backward",
    "sinusoidal",
    "sinusoidal_frequencies",
    "timing_signal",
]

SINUSOIDAL_LAYOUTS = ("interleaved", "concat")
FUSIONS = ("add", "concat", "multiply")


def sinusoidal_frequencies(dim: int, *, base: float = 10000.0) -> np.ndarray:
    r"""Angular frequencies :math:`\omega_i = \mathrm{base}^{-2i/d}` of the sinusoidal encoding.

    Parameters
    ----------
    dim : int
        Encoding width :math:`d`; must be even and positive.
    base : float
        Wavelength base, 10000 in the paper.

    Returns
    -------
    ExactFrequencies (a float64 ndarray), shape ``(dim // 2,)``
        Each value correctly rounded; the array also carries the 256-bit values (see
        :func:`posenc_np.rope.inv_freq`).
    """
    return _frequencies(*check_sinusoid(dim, base))


def _frequencies(dim: int, base: float):
    r""":math:`\omega_i = \mathrm{base}^{-2i/d}` for checked ``dim`` (even) and ``base`` (> 0, not 1)."""
    return _exact.frequency_array(_exact.omega(dim, base))


def _sin_cos(positions, freqs, *, offset: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Exact ``sin``/``cos`` of ``(p + offset) * freqs``, each ``positions.shape + (n,)``."""
    c, s = _exact.cos_sin(_exact.positions(positions, offset=offset), _exact.turn_constants(freqs))
    return s, c


def _sin_cos_layout(s: np.ndarray, c: np.ndarray, layout: str) -> np.ndarray:
    """Lay per-pair ``sin``/``cos`` values (``(..., n)``) out as ``(..., 2n)``."""
    if layout == "concat":
        return np.concatenate([s, c], axis=-1)
    out = np.empty(s.shape[:-1] + (2 * s.shape[-1],), dtype=np.float64)
    out[..., 0::2] = s
    out[..., 1::2] = c
    return out


def _sinusoid(positions, freqs, layout: str) -> np.ndarray:
    """The float64 sinusoid of ``positions`` for frequencies ``freqs``, laid out (the body of :func:`sinusoidal`)."""
    return _sin_cos_layout(*_sin_cos(positions, freqs), layout)


def sinusoidal(positions, dim: int, *, base: float = 10000.0, layout: str = "interleaved",
               dtype=np.float64) -> np.ndarray:
    r"""Sinusoidal position encoding of Vaswani et al. (2017).

    ``interleaved`` (the paper and the seed document):
    :math:`PE[p, 2i] = \sin(p\omega_i)`, :math:`PE[p, 2i+1] = \cos(p\omega_i)`;
    ``concat``: :math:`[\sin(p\omega_0) \dots \sin(p\omega_{d/2-1}) \mid \cos(p\omega_0) \dots]`
    with the same :math:`\omega_i = \mathrm{base}^{-2i/d}` (this is *not* tensor2tensor's
    exponent; see :func:`timing_signal`).

    Parameters
    ----------
    positions : array_like of int or float, any shape
        Positions :math:`p`; need not be integers, sorted or non-negative.
    dim : int
        Even encoding width :math:`d`.
    base : float
        Wavelength base.
    layout : {"interleaved", "concat"}
        Channel layout, see above.
    dtype : floating dtype
        Output dtype. Values are computed exactly (within one float64 ulp) and cast once.

    Returns
    -------
    ndarray, shape ``positions.shape + (dim,)``

    Raises
    ------
    ValueError
        For positions :math:`|p| \ge 2^{53}`, or float positions past the range where their
        dtype holds every integer (float32: :math:`2^{24}`).
    """
    pos, dim, base, layout, dtype = check_sinusoid_table(positions, dim, base, layout, SINUSOIDAL_LAYOUTS, dtype)
    return _sinusoid(pos, _frequencies(dim, base), layout).astype(dtype, copy=False)


def timing_signal(positions, dim: int, *, min_timescale: float = 1.0, max_timescale: float = 1.0e4,
                  start_index: int = 0, dtype=np.float64) -> np.ndarray:
    r"""tensor2tensor's ``get_timing_signal_1d``: concat layout with its own exponent.

    With :math:`n = \lfloor d/2 \rfloor` timescales,

    .. math::

        \omega_i = t_{min}\, \exp\!\Big(-i\,\frac{\ln(t_{max}/t_{min})}{\max(n-1, 1)}\Big), \qquad
        \mathrm{signal}(p) = [\sin((p+s)\,\omega) \mid \cos((p+s)\,\omega) \mid 0_{d \bmod 2}],

    where :math:`s` is ``start_index``. The lowest frequency is exactly
    :math:`t_{min}/t_{max}` (the paper's is :math:`\mathrm{base}^{-(d-2)/d}`); for
    :math:`d=8`: t2t ``[1, 0.0464, 0.00215, 1e-4]`` vs the paper's ``[1, 0.1, 0.01, 0.001]``.
    Reference: tensor2tensor ``layers/common_attention.py``.

    Parameters
    ----------
    positions : array_like of int or float, any shape
    dim : int
        Channels :math:`d \ge 1`; an odd width gets one zero channel at the end.
    min_timescale, max_timescale : float
        Shortest and longest timescales, ``0 < min_timescale <= max_timescale``.
    start_index : int
        Offset added to every position.
    dtype : floating dtype

    Returns
    -------
    ndarray, shape ``positions.shape + (dim,)``
    """
    pos, dim, lo, hi, start_index, dtype = check_timing_signal(positions, dim, min_timescale, max_timescale,
                                                               start_index, dtype)
    n = dim // 2
    ctx = _exact.mp()  # the timescales in extended precision, rounded once
    increment = ctx.log(ctx.mpf(hi) / lo) / max(n - 1, 1)
    inv_timescales = _exact.frequency_array([lo * ctx.exp(-increment * i) for i in range(n)])
    signal = _sin_cos_layout(*_sin_cos(pos, inv_timescales, offset=start_index), "concat")
    if dim % 2:
        signal = np.concatenate([signal, np.zeros(signal.shape[:-1] + (1,))], axis=-1)
    return signal.astype(dtype, copy=False)


class LearnedPositionalEmbedding:
    r"""A learned absolute position table (BERT, GPT-2): :math:`y = W[p]`.

    The gradient of a lookup is a scatter-add: :math:`\partial L/\partial W[r] =
    \sum_{p_j = r} \partial L/\partial y_j`, so repeated positions accumulate. The table
    cannot extrapolate: positions outside ``[0, num_positions)`` raise ``ValueError``.

    Parameters
    ----------
    num_positions : int
        Rows of the table (the longest sequence the model can see).
    dim : int
        Width of each position vector.
    seed : int or None
        Seed for the ``N(0, init_std^2)`` initialisation (GPT-2 uses 0.02).
    init_std : float
        Standard deviation of the initial weights.

    Attributes
    ----------
    params : dict
        ``{"weight": ndarray (num_positions, dim)}``.
    grads : dict
        Same keys; written by :meth:`backward`.
    """

    def __init__(self, num_positions: int, dim: int, *, seed=None, init_std: float = 0.02):
        self.num_positions, self.dim, init_std = check_learned_table(num_positions, dim, init_std)
        rng = np.random.default_rng(seed)
        self.params = {"weight": normal_init(rng, init_std, (self.num_positions, self.dim))}
        self.grads = {"weight": np.zeros_like(self.params["weight"])}
        self._positions = None

    def forward(self, positions) -> np.ndarray:
        """Look up rows: ``(...,)`` integer positions to ``(..., dim)``.

        The positions are copied: a caller may reuse its array before :meth:`backward`.
        """
        self._positions = check_table_rows(positions, self.num_positions).copy()
        return self.params["weight"][self._positions]

    def backward(self, dout) -> None:
        """Scatter-add ``dout`` (shape ``positions.shape + (dim,)``) into ``grads["weight"]``.

        The gradient is overwritten, not accumulated across calls.
        """
        if self._positions is None:
            raise RuntimeError("backward called before forward")
        dout = check_grad(dout, "dout", self._positions.shape + (self.dim,))
        self.grads["weight"] = scatter_add_rows(self._positions, dout.astype(self.params["weight"].dtype),
                                                self.num_positions)


def fuse(x, p, mode: str = "add") -> np.ndarray:
    r"""Fuse token vectors ``x`` with position vectors ``p`` (the seed's fusion debate).

    ``add``: :math:`x + p`; ``concat``: :math:`[x, p]` along the last axis (the output is
    wider); ``multiply``: :math:`x \odot p`. ``p`` broadcasts against ``x``'s leading axes
    (typically ``p`` is ``(L, d_p)`` and ``x`` is ``(B, L, d)``).
    """
    return _fuse(*check_fusion(x, p, mode, FUSIONS))


def _fuse(x: np.ndarray, p: np.ndarray, mode: str) -> np.ndarray:
    if mode == "add":
        return x + p
    if mode == "multiply":
        return x * p
    return np.concatenate([x, np.broadcast_to(p, x.shape[:-1] + p.shape[-1:])], axis=-1)


def fuse_backward(dy, x, p, mode: str = "add") -> tuple[np.ndarray, np.ndarray]:
    r"""Gradients ``(dx, dp)`` of :func:`fuse`; ``dp`` is summed back to ``p``'s shape.

    ``add``: :math:`(dy, dy)`; ``multiply``: :math:`(dy \odot p, dy \odot x)`;
    ``concat``: the two slices of ``dy``.
    """
    x, p, mode, dy = check_fusion(x, p, mode, FUSIONS, dy)
    return _fuse_backward(dy, x, p, mode)


def _fuse_backward(dy: np.ndarray, x: np.ndarray, p: np.ndarray, mode: str) -> tuple[np.ndarray, np.ndarray]:
    if mode == "add":
        return dy, sum_to_shape(dy, p.shape)
    if mode == "multiply":
        return dy * p, sum_to_shape(dy * x, p.shape)
    d = x.shape[-1]
    return dy[..., :d], sum_to_shape(dy[..., d:], p.shape)
