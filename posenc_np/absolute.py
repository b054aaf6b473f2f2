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

The public functions are *doors* (they check their arguments) beside *cores* that hold the
formulas and check nothing: :func:`geometric_frequencies`, :func:`sinusoid_rows`,
:func:`sin_cos_layout`, :func:`combine` and :func:`combine_backward` (the model and
Transformer-XL call these).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from . import _exact
from ._checks import (as_float_array, as_int_array, as_positions, check_alloc, check_choice, check_even,
                      check_float_dtype, check_grad, check_int, check_real, require)
from ._util import normal_init, scatter_add_rows, sum_to_shape

__all__ = [
    "FUSIONS",
    "SINUSOIDAL_LAYOUTS",
    "LearnedPositionalEmbedding",
    "combine",
    "combine_backward",
    "fuse",
    "fuse_backward",
    "geometric_frequencies",
    "sin_cos_layout",
    "sinusoid_rows",
    "sinusoidal",
    "sinusoidal_frequencies",
    "timing_signal",
]

SINUSOIDAL_LAYOUTS = ("interleaved", "concat")
FUSIONS = ("add", "concat", "multiply")


# --------------------------------------------------------------------------- sinusoids: cores

def geometric_frequencies(dim: int, base: float) -> _exact.ExactFrequencies:
    r""":math:`\omega_i = \mathrm{base}^{-2i/d}`, ``i < dim // 2``, exactly (256-bit values and their
    correctly rounded doubles). The core of :func:`sinusoidal_frequencies`; arguments are not checked.

    Examples
    --------
    >>> from posenc_np import absolute
    >>> freqs = absolute.geometric_frequencies(4, 100.0)   # 100**(-2i/4): 1, 1/10
    >>> freqs.rounded.tolist()
    [1.0, 0.1]
    """
    return _exact.exact_frequencies(_exact.omega(dim, base))


def sin_cos_layout(s: np.ndarray, c: np.ndarray, layout: str) -> np.ndarray:
    """Per-pair ``sin``/``cos`` values ``(..., n)`` laid out as ``(..., 2n)`` float64:
    ``interleaved`` ``[s0, c0, s1, c1, ...]``, ``concat`` ``[s | c]``. Arguments are not checked.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import absolute
    >>> s, c = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    >>> absolute.sin_cos_layout(s, c, "interleaved").tolist()   # [s0, c0, s1, c1]
    [1.0, 3.0, 2.0, 4.0]
    >>> absolute.sin_cos_layout(s, c, "concat").tolist()        # [s0, s1 | c0, c1]
    [1.0, 2.0, 3.0, 4.0]
    """
    if layout == "concat":
        return np.concatenate([s, c], axis=-1)
    out = np.empty(s.shape[:-1] + (2 * s.shape[-1],), dtype=np.float64)
    out[..., 0::2] = s
    out[..., 1::2] = c
    return out


def sinusoid_rows(positions: ArrayLike, freqs: ArrayLike | _exact.ExactFrequencies, layout: str, *,
                  offset: int = 0) -> np.ndarray:
    r"""The float64 sinusoid :math:`\sin((p + o)\,\omega_i)`, :math:`\cos((p + o)\,\omega_i)` of integer
    or float ``positions`` (within :math:`2^{53}`), laid out for ``layout``; ``freqs`` an array (its
    doubles) or :class:`~posenc_np._exact.ExactFrequencies`. The core of :func:`sinusoidal`; arguments
    are not checked.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import absolute
    >>> rows = absolute.sinusoid_rows([0, 1], np.array([1.0, 0.5]), "interleaved")
    >>> rows.round(6).tolist()   # [sin 0, cos 0, ...], [sin 1, cos 1, sin 0.5, cos 0.5]
    [[0.0, 1.0, 0.0, 1.0], [0.841471, 0.540302, 0.479426, 0.877583]]
    """
    c, s = _exact.cos_sin(_exact.positions(positions, offset=offset), _exact.turn_constants(freqs))
    return sin_cos_layout(s, c, layout)


# --------------------------------------------------------------------------- sinusoids: doors

def _check_sinusoid(dim, base) -> tuple[int, float]:
    """A sinusoid's even width ``dim`` (its frequencies within ``MAX_ALLOC_BYTES``) and ``base > 0``, not 1."""
    dim = check_even(dim, "dim", minimum=1)  # (timing_signal zero-pads odd widths)
    check_alloc((dim // 2, _exact.FREQUENCY_BYTES), np.uint8, "extended frequencies (dim // 2, FREQUENCY_BYTES)")
    base = check_real(base, "base", positive=True)
    require(base != 1.0, "base must differ from 1 (every frequency would be 1)")
    return dim, base


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
    ndarray, float64, shape ``(dim // 2,)``
        Each value correctly rounded (evaluated at 256 bits); :func:`geometric_frequencies` keeps the
        unrounded values too.

    Examples
    --------
    >>> from posenc_np import absolute
    >>> absolute.sinusoidal_frequencies(8).tolist()   # 10000**(-2i/8) = 10**(-i)
    [1.0, 0.1, 0.01, 0.001]
    """
    return geometric_frequencies(*_check_sinusoid(dim, base)).rounded.copy()


def sinusoidal(positions: ArrayLike, dim: int, *, base: float = 10000.0, layout: str = "interleaved",
               dtype: DTypeLike = np.float64) -> np.ndarray:
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

    Examples
    --------
    >>> from posenc_np import absolute
    >>> pe = absolute.sinusoidal([0, 1], 4)   # omega = [1, 0.01]
    >>> pe.round(6).tolist()   # position 0: sin 0, cos 0; position 1: sin 1, cos 1, sin 0.01, cos 0.01
    [[0.0, 1.0, 0.0, 1.0], [0.841471, 0.540302, 0.01, 0.99995]]
    >>> absolute.sinusoidal([1], 4, layout="concat").round(6).tolist()
    [[0.841471, 0.01, 0.540302, 0.99995]]
    >>> absolute.sinusoidal([[0, 1, 2]], 6).shape
    (1, 3, 6)
    """
    layout = check_choice(layout, "layout", SINUSOIDAL_LAYOUTS)
    dtype = check_float_dtype(dtype)
    pos = as_positions(positions)
    dim, base = _check_sinusoid(dim, base)
    check_alloc(pos.shape + (dim,), np.float64, "sinusoidal table positions.shape + (dim,)")
    return sinusoid_rows(pos, geometric_frequencies(dim, base), layout).astype(dtype, copy=False)


def timing_signal(positions: ArrayLike, dim: int, *, min_timescale: float = 1.0, max_timescale: float = 1.0e4,
                  start_index: int = 0, dtype: DTypeLike = np.float64) -> np.ndarray:
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

    Examples
    --------
    >>> from posenc_np import absolute
    >>> absolute.timing_signal([0], 4).tolist()   # [sin block | cos block] at position 0
    [[0.0, 0.0, 1.0, 1.0]]
    >>> absolute.timing_signal([1], 5).round(6).tolist()   # omega = [1, 1e-4], one zero channel for odd d
    [[0.841471, 0.0001, 0.540302, 1.0, 0.0]]
    """
    dim = check_int(dim, "dim", minimum=1)
    lo = check_real(min_timescale, "min_timescale", positive=True)
    hi = check_real(max_timescale, "max_timescale", positive=True)
    require(hi >= lo, f"max_timescale ({hi}) must be >= min_timescale ({lo})")
    start_index = check_int(start_index, "start_index", minimum=-2**53, maximum=2**53)
    dtype = check_float_dtype(dtype)
    pos = as_positions(positions)
    check_alloc((max(pos.size, 1), dim), np.float64, "timing signal (positions.size, dim)")  # (and the timescales)
    n = dim // 2
    ctx = _exact.mp()  # the timescales in extended precision, rounded once
    increment = ctx.log(ctx.mpf(hi) / lo) / max(n - 1, 1)
    inv_timescales = _exact.exact_frequencies([lo * ctx.exp(-increment * i) for i in range(n)])
    signal = sinusoid_rows(pos, inv_timescales, "concat", offset=start_index)
    if dim % 2:
        signal = np.concatenate([signal, np.zeros(signal.shape[:-1] + (1,))], axis=-1)
    return signal.astype(dtype, copy=False)


# --------------------------------------------------------------------------- learned table

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

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.absolute import LearnedPositionalEmbedding
    >>> emb = LearnedPositionalEmbedding(4, 3, seed=0)
    >>> bool(np.array_equal(emb.forward([0, 2, 2]), emb.params["weight"][[0, 2, 2]]))   # y = W[p]
    True
    >>> emb.backward(np.ones((3, 3)))
    >>> emb.grads["weight"].tolist()   # row 2 was looked up twice: its gradient accumulates
    [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [2.0, 2.0, 2.0], [0.0, 0.0, 0.0]]
    """

    def __init__(self, num_positions: int, dim: int, *, seed: int | None = None, init_std: float = 0.02) -> None:
        self.num_positions = check_int(num_positions, "num_positions", minimum=1)
        self.dim = check_int(dim, "dim", minimum=1)
        init_std = check_real(init_std, "init_std", nonnegative=True)
        check_alloc((self.num_positions, self.dim), np.float64, "learned table (num_positions, dim)")
        rng = np.random.default_rng(seed)
        self.params = {"weight": normal_init(rng, init_std, (self.num_positions, self.dim))}
        self.grads = {"weight": np.zeros_like(self.params["weight"])}
        self._positions = None

    def forward(self, positions: ArrayLike) -> np.ndarray:
        """Look up rows: ``(...,)`` integer positions to ``(..., dim)``.

        The positions are copied: a caller may reuse its array before :meth:`backward`.
        """
        pos = as_int_array(positions, "positions")
        bad = pos[(pos < 0) | (pos >= self.num_positions)]
        require(bad.size == 0, f"positions must lie in [0, {self.num_positions}) for a learned table of "
                f"{self.num_positions} rows, got {int(bad.flat[0]) if bad.size else None}; a learned table cannot "
                "extrapolate")
        self._positions = pos.copy()
        return self.params["weight"][self._positions]

    def backward(self, dout: ArrayLike) -> None:
        """Scatter-add ``dout`` (shape ``positions.shape + (dim,)``) into ``grads["weight"]``.

        The gradient is overwritten, not accumulated across calls.
        """
        require(self._positions is not None, "backward called before forward", RuntimeError)
        dout = check_grad(dout, "dout", self._positions.shape + (self.dim,))
        self.grads["weight"] = scatter_add_rows(self._positions, dout.astype(self.params["weight"].dtype),
                                                self.num_positions)


# --------------------------------------------------------------------------- fusion of token and position

def combine(x: np.ndarray, p: np.ndarray, mode: str) -> np.ndarray:
    r"""``add`` :math:`x + p`, ``multiply`` :math:`x \odot p`, ``concat`` :math:`[x, p]` (``p`` broadcast
    to ``x``'s leading axes). The core of :func:`fuse`; arguments are not checked.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import absolute
    >>> x, p = np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([10.0, 20.0])
    >>> absolute.combine(x, p, "add").tolist()
    [[11.0, 22.0], [13.0, 24.0]]
    >>> absolute.combine(x, np.array([5.0]), "concat").tolist()   # p broadcast to every row
    [[1.0, 2.0, 5.0], [3.0, 4.0, 5.0]]
    """
    if mode == "add":
        return x + p
    if mode == "multiply":
        return x * p
    return np.concatenate([x, np.broadcast_to(p, x.shape[:-1] + p.shape[-1:])], axis=-1)


def combine_backward(dy: np.ndarray, x: np.ndarray, p: np.ndarray, mode: str) -> tuple[np.ndarray, np.ndarray]:
    """``(dx, dp)`` of :func:`combine`, ``dp`` summed back to ``p``'s shape. The core of
    :func:`fuse_backward`; arguments are not checked.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import absolute
    >>> x, p = np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([5.0])
    >>> dx, dp = absolute.combine_backward(np.arange(6.0).reshape(2, 3), x, p, "concat")
    >>> dx.tolist(), dp.tolist()   # dp = 2 + 5, summed over the rows p was broadcast to
    ([[0.0, 1.0], [3.0, 4.0]], [7.0])
    """
    if mode == "add":
        return dy, sum_to_shape(dy, p.shape)
    if mode == "multiply":
        return dy * p, sum_to_shape(dy * x, p.shape)
    d = x.shape[-1]
    return dy[..., :d], sum_to_shape(dy[..., d:], p.shape)


def _check_fusion(x, p, mode):
    """``(x, p, mode)`` of a fusion: ``p`` broadcasts to ``x`` (``add``/``multiply``) or to its leading
    axes (``concat``) without enlarging it."""
    mode = check_choice(mode, "mode", FUSIONS)
    x = as_float_array(x, "x", ndim_min=1)
    p = as_float_array(p, "p", ndim_min=1)
    xs, ps, what = (x.shape, p.shape, "x's shape") if mode != "concat" else (x.shape[:-1], p.shape[:-1],
                                                                             "x's leading axes")
    require(len(ps) <= len(xs) and all(n in (1, m) for n, m in zip(ps[::-1], xs[::-1])),
            f"p of shape {p.shape} must broadcast to {what} {xs} (mode {mode!r})")
    return x, p, mode


def fuse(x: ArrayLike, p: ArrayLike, mode: str = "add") -> np.ndarray:
    r"""Fuse token vectors ``x`` with position vectors ``p`` (the seed's fusion debate).

    ``add``: :math:`x + p`; ``concat``: :math:`[x, p]` along the last axis (the output is
    wider); ``multiply``: :math:`x \odot p`. ``p`` broadcasts against ``x``'s leading axes
    (typically ``p`` is ``(L, d_p)`` and ``x`` is ``(B, L, d)``).

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import absolute
    >>> x, p = np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([10.0, 20.0])
    >>> absolute.fuse(x, p).tolist()
    [[11.0, 22.0], [13.0, 24.0]]
    >>> absolute.fuse(x, p, "multiply").tolist()
    [[10.0, 40.0], [30.0, 80.0]]
    >>> absolute.fuse(x, np.array([[5.0], [6.0]]), "concat").tolist()
    [[1.0, 2.0, 5.0], [3.0, 4.0, 6.0]]
    """
    x, p, mode = _check_fusion(x, p, mode)
    return combine(x, p, mode)


def fuse_backward(dy: ArrayLike, x: ArrayLike, p: ArrayLike, mode: str = "add") -> tuple[np.ndarray, np.ndarray]:
    r"""Gradients ``(dx, dp)`` of :func:`fuse`; ``dp`` is summed back to ``p``'s shape.

    ``add``: :math:`(dy, dy)`; ``multiply``: :math:`(dy \odot p, dy \odot x)`;
    ``concat``: the two slices of ``dy``.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import absolute
    >>> x, p = np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([10.0, 20.0])
    >>> dx, dp = absolute.fuse_backward(np.ones((2, 2)), x, p, "multiply")
    >>> dx.tolist(), dp.tolist()   # dy * p, and dy * x summed over the rows
    ([[10.0, 20.0], [10.0, 20.0]], [4.0, 6.0])
    """
    x, p, mode = _check_fusion(x, p, mode)
    out_shape = x.shape[:-1] + (x.shape[-1] + p.shape[-1],) if mode == "concat" else x.shape
    dy = check_grad(dy, "dy", out_shape)  # fuse's output shape
    return combine_backward(dy, x, p, mode)
