r"""scikit-learn transformers: sinusoidal time features and a RoPE-style rotation of feature pairs.

Needs the optional extra ``pip install "posenc-np[sklearn]"``; ``import posenc_np`` never
imports scikit-learn, only ``import posenc_np.sklearn`` does.

Both transformers are stateless: ``fit`` checks the parameters and records
``n_features_in_`` (and ``feature_names_in_`` for a DataFrame) and nothing else, so
``fit`` on a training split and ``transform`` on a test split never leak information. Both
support ``get_feature_names_out`` and ``set_output(transform="pandas")`` and work inside
``Pipeline`` and ``ColumnTransformer``.

A column value :math:`x` becomes a time :math:`t = (x - \text{offset}) / \text{scale}`
(float64), and :math:`n` pairs of angular frequencies are chosen by either

* ``base`` (``period=None``): :math:`\omega_i = \mathrm{base}^{-2i/d}`, :math:`i = 0 \dots n-1`,
  :math:`d = 2n` (Vaswani et al. 2017, sec. 3.5; RoFormer, Su et al. 2021, eq. 15): wavelengths
  from :math:`2\pi` to :math:`2\pi\,\mathrm{base}^{(d-2)/d}` time units, for positions and
  times with structure at many scales;
* ``period`` :math:`P`: :math:`\omega_k = 2\pi k / P`, :math:`k = 1 \dots n`: the first
  :math:`n` harmonics of a cycle of length :math:`P` (the Fourier terms of Harvey & Shephard
  1993 and of Prophet's seasonality, Taylor & Letham 2018, eq. 5), for seasonal data.
"""

from __future__ import annotations

import numbers

import numpy as np
from numpy.typing import ArrayLike

try:
    from sklearn.base import BaseEstimator, TransformerMixin
    from sklearn.utils.validation import check_is_fitted, validate_data
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError('posenc_np.sklearn needs scikit-learn >= 1.6: pip install "posenc-np[sklearn]"') from exc

from . import _exact, absolute, rope
from ._checks import check_alloc, check_choice, check_int, check_real, require

__all__ = ["RotaryEncoder", "SinusoidalEncoder"]


def _check_time_params(est) -> tuple[float, float | None, float, float]:
    """Validate ``base``, ``period``, ``offset``, ``scale`` of either transformer."""
    base = check_real(est.base, "base", positive=True)
    require(base != 1.0, "base must differ from 1 (every frequency would be 1)")
    period = check_real(est.period, "period", positive=True, allow_none=True)
    offset = check_real(est.offset, "offset")
    scale = check_real(est.scale, "scale", positive=True)
    return base, period, offset, scale


def _frequencies(n_pairs: int, base: float, period: float | None):
    r""":math:`\omega_i = \mathrm{base}^{-2i/(2n)}` (exactly: :func:`posenc_np.absolute.geometric_frequencies`)
    or, with a period, the array :math:`2\pi k/P`, k = 1..n."""
    if period is None:
        return absolute.geometric_frequencies(2 * n_pairs, base)
    return 2.0 * np.pi * np.arange(1, n_pairs + 1, dtype=np.float64) / period


def _input_names(est, n: int) -> np.ndarray:
    names = getattr(est, "feature_names_in_", None)
    return np.asarray(names if names is not None else [f"x{i}" for i in range(n)], dtype=object)


def _check_names_out(est, input_features) -> np.ndarray:
    """The input names ``get_feature_names_out`` works on (checked against the fitted ones)."""
    check_is_fitted(est, "n_features_in_")
    names = _input_names(est, est.n_features_in_)
    if input_features is None:
        return names
    given = np.asarray(input_features, dtype=object)
    if given.shape != (est.n_features_in_,):
        raise ValueError(f"input_features must have {est.n_features_in_} names, got {given.shape}")
    if getattr(est, "feature_names_in_", None) is not None and not np.array_equal(given, names):
        raise ValueError(f"input_features {list(given)} differ from the fitted feature_names_in_ {list(names)}")
    return given


class SinusoidalEncoder(TransformerMixin, BaseEstimator):
    r"""Encode each numeric column as :math:`d` sinusoids of its value (positions or time).

    For a column value :math:`x`, with :math:`t = (x - \text{offset})/\text{scale}` and the
    frequencies :math:`\omega_i` of the module docstring (``base`` or ``period``):

    .. math::

        \text{interleaved:}\ [\sin\omega_0 t, \cos\omega_0 t, \sin\omega_1 t, \cos\omega_1 t, \dots]
        \qquad \text{concat:}\ [\sin\omega_0 t, \dots, \sin\omega_{n-1} t,
        \cos\omega_0 t, \dots, \cos\omega_{n-1} t]

    With the default ``base`` and ``offset=0, scale=1`` this is exactly
    :func:`posenc_np.absolute.sinusoidal` (Vaswani et al. 2017, sec. 3.5) of each column.
    A shift of :math:`t` by :math:`\delta` rotates every :math:`(\sin, \cos)` pair by
    :math:`\omega_i\delta`, so a linear model on these features can represent any periodic
    function band-limited to the chosen frequencies; with ``period=P`` they are the order-
    :math:`n` Fourier terms of a cycle of length :math:`P` (e.g. ``period=12`` for months).

    Parameters
    ----------
    dim : int
        Features per input column, :math:`d = 2n`; even, >= 2.
    base : float
        Wavelength base of the geometric frequencies (used when ``period`` is None).
    period : float or None
        Cycle length :math:`P` in units of :math:`t`; when given, the frequencies are its
        harmonics :math:`2\pi k/P`, :math:`k = 1 \dots n`, and ``base`` is ignored.
    layout : {"interleaved", "concat"}
        Order of the output channels of each column, see above.
    offset, scale : float
        :math:`t = (x - \text{offset})/\text{scale}`, ``scale > 0``: e.g. ``offset=1958,
        scale=1/12`` turns decimal years into months since 1958.

    Attributes
    ----------
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when fitted on a DataFrame with string column names.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.sklearn import SinusoidalEncoder
    >>> enc = SinusoidalEncoder(dim=4, period=12.0).fit(np.arange(24.0)[:, None])
    >>> enc.transform([[3.0]]).round(6).tolist()
    [[1.0, 0.0, 0.0, -1.0]]
    >>> enc.get_feature_names_out().tolist()
    ['x0_sin0', 'x0_cos0', 'x0_sin1', 'x0_cos1']
    """

    def __init__(self, dim=8, *, base=10000.0, period=None, layout="interleaved", offset=0.0, scale=1.0):
        self.dim = dim
        self.base = base
        self.period = period
        self.layout = layout
        self.offset = offset
        self.scale = scale

    def _checked_params(self):
        dim = check_int(self.dim, "dim", minimum=2)
        require(dim % 2 == 0, f"dim must be even (sin/cos pairs), got {dim}")
        check_alloc((dim // 2, _exact.FREQUENCY_BYTES), np.uint8, "extended frequencies (dim // 2, FREQUENCY_BYTES)")
        layout = check_choice(self.layout, "layout", absolute.SINUSOIDAL_LAYOUTS)
        return dim, layout, *_check_time_params(self)

    def fit(self, X: ArrayLike, y: ArrayLike | None = None) -> SinusoidalEncoder:
        """Check the parameters and ``X``; record ``n_features_in_`` (stateless otherwise)."""
        self._checked_params()
        validate_data(self, X, dtype=np.float64, reset=True)
        return self

    def transform(self, X: ArrayLike) -> np.ndarray:
        """Encode ``X`` of shape ``(n_samples, n_features)`` as ``(n_samples, n_features * dim)``."""
        check_is_fitted(self, "n_features_in_")
        dim, layout, base, period, offset, scale = self._checked_params()
        X = validate_data(self, X, dtype=np.float64, reset=False)
        check_alloc(X.shape + (dim,), np.float64, "encoding (n_samples, n_features, dim)")
        t = (X - offset) / scale
        _exact.positions(t, "times (X - offset) / scale")  # the rule of absolute.sinusoidal: |t| < 2**53
        w = _frequencies(dim // 2, base, period)
        angles = t[..., None] * (w if period is not None else w.rounded)
        return absolute.sin_cos_layout(np.sin(angles), np.cos(angles), layout).reshape(X.shape[0], -1)

    def get_feature_names_out(self, input_features: ArrayLike | None = None) -> np.ndarray:
        """``<column>_sin<i>`` / ``<column>_cos<i>`` in the output order (i = frequency index)."""
        names = _check_names_out(self, input_features)
        dim, layout = self._checked_params()[:2]
        idx = [str(i) for i in range(dim // 2)]
        if layout == "interleaved":
            suffixes = [f"{f}{i}" for i in idx for f in ("sin", "cos")]
        else:
            suffixes = [f"sin{i}" for i in idx] + [f"cos{i}" for i in idx]
        return np.asarray([f"{col}_{s}" for col in names for s in suffixes], dtype=object)


class RotaryEncoder(TransformerMixin, BaseEstimator):
    r"""Rotate pairs of feature columns by angles proportional to a time column (RoPE).

    ``X`` holds one time column and :math:`m` feature columns. With
    :math:`t = (x_{time} - \text{offset})/\text{scale}` and frequencies :math:`\omega_i`
    (module docstring), feature pair :math:`i` (layout ``half``: columns :math:`(i, i + r/2)`;
    ``interleaved``: :math:`(2i, 2i+1)`, among the first :math:`r` = ``rotary_dim`` feature
    columns) is rotated by :math:`\theta_i = \omega_i t` (Su et al. 2021, RoFormer, eq. 13-15;
    computed by :func:`posenc_np.rope.apply`):

    .. math::

        a' = a\cos\theta_i - b\sin\theta_i, \qquad b' = a\sin\theta_i + b\cos\theta_i .

    The time column is dropped; feature columns past ``rotary_dim`` pass through unchanged.

    Why: rotations compose, :math:`R(s)^\top R(t) = R(t - s)`, so the inner product of two
    encoded rows, :math:`\langle R(s)u, R(t)v\rangle = u^\top R(t-s)\,v`, depends on the
    *time difference* and not on absolute time. Use it in front of a method that compares rows
    by inner products or distances (nearest neighbours, kernel ridge with a linear or RBF
    kernel, clustering, retrieval of similar episodes) when similarity should be
    phase-relative: with ``period=P`` two rows half a cycle apart have their pairs rotated by
    :math:`\pi` (anti-aligned) and rows a whole cycle apart compare as if simultaneous. It
    preserves each pair's norm, so it is not a feature expansion and brings no information a
    tree model could not get from the time column itself; for plain regression on time use
    :class:`SinusoidalEncoder`.

    Parameters
    ----------
    time_column : int or str
        Position of the time column in ``X``, or its name (requires a DataFrame at ``fit``).
    rotary_dim : int or None
        Number :math:`r` of feature columns to rotate (even, >= 2); ``None``: all :math:`m`,
        which must then be even.
    base, period, offset, scale
        As in :class:`SinusoidalEncoder`; :math:`n = r/2` frequencies.
    layout : {"half", "interleaved"}
        Which columns pair (GPT-NeoX / Hugging Face ``half`` or GPT-J / Meta ``interleaved``).
    unpaired : {"zero", "error"}
        What an odd number :math:`r` of rotated columns means. ``"zero"``: the last rotated
        column is paired with an implicit zero channel appended after the rotated block (a
        real feature :math:`a` read as the complex number :math:`a + 0i`, giving
        :math:`(a\cos\theta, a\sin\theta)`), so the output has one more column, named
        ``"rope_pad"``. ``"error"``: an odd :math:`r` is a ``ValueError``.

    Attributes
    ----------
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when fitted on a DataFrame with string column names.
    time_index_ : int
        Position of the time column in ``X``.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.sklearn import RotaryEncoder
    >>> X = np.array([[0.0, 1.0, 0.0], [3.0, 1.0, 0.0]])          # (t, a, b)
    >>> RotaryEncoder(period=12.0).fit_transform(X).round(6).tolist()
    [[1.0, 0.0], [0.0, 1.0]]
    """

    def __init__(self, time_column=0, *, rotary_dim=None, base=10000.0, period=None, layout="half",
                 offset=0.0, scale=1.0, unpaired="zero"):
        self.time_column = time_column
        self.rotary_dim = rotary_dim
        self.base = base
        self.period = period
        self.layout = layout
        self.offset = offset
        self.scale = scale
        self.unpaired = unpaired

    def _checked_params(self, n_features: int):
        """(time index, rotary dim, layout, base, period, offset, scale) for ``n_features`` columns."""
        require(n_features >= 2, "RotaryEncoder needs a time column and at least 1 feature column, "
                f"got n_features = {n_features}")
        time_index = self._time_index(n_features)
        m = n_features - 1
        r = m if self.rotary_dim is None else check_int(self.rotary_dim, "rotary_dim", minimum=1)
        require(r <= m, f"rotary_dim must be <= {m} (the feature columns besides the time column), got {r}")
        unpaired = check_choice(self.unpaired, "unpaired", ("zero", "error"))
        require(unpaired == "zero" or r % 2 == 0, f"{r} rotated columns cannot all be paired (unpaired='error'); "
                "pass an even rotary_dim, or unpaired='zero' to pair the last one with an implicit zero")
        layout = check_choice(self.layout, "layout", rope.LAYOUTS)
        return time_index, r, layout, *_check_time_params(self)

    def _time_index(self, n_features: int) -> int:
        col = self.time_column
        if isinstance(col, str):
            names = getattr(self, "feature_names_in_", None)
            require(names is not None, f"time_column={col!r} is a name, but X has no column names "
                    "(fit on a DataFrame, or pass the column position)")
            matches = np.flatnonzero(names == col)
            require(matches.size == 1, f"time_column {col!r} is not a column of X (columns: {list(names)})")
            return int(matches[0])
        require(isinstance(col, numbers.Integral) and not isinstance(col, bool),
                f"time_column must be a column position (int) or name (str), got {col!r}", TypeError)
        require(-n_features <= col < n_features, f"time_column {col} is out of range for X with {n_features} columns")
        return int(col) % n_features

    def fit(self, X: ArrayLike, y: ArrayLike | None = None) -> RotaryEncoder:
        """Check the parameters against ``X``; record ``n_features_in_`` and ``time_index_``."""
        X = validate_data(self, X, dtype=np.float64, reset=True)
        self.time_index_ = self._checked_params(X.shape[1])[0]
        return self

    def transform(self, X: ArrayLike) -> np.ndarray:
        """Rotate the feature pairs of ``X``; returns ``(n_samples, n_features - 1)``."""
        check_is_fitted(self, "time_index_")
        X = validate_data(self, X, dtype=np.float64, reset=False)
        time_index, r, layout, base, period, offset, scale = self._checked_params(X.shape[1])
        t = (X[:, time_index] - offset) / scale
        features = np.delete(X, time_index, axis=1)
        if r % 2:  # unpaired="zero": an implicit zero partner right after the rotated block
            features = np.insert(features, r, 0.0, axis=1)
        cos, sin = rope.cos_sin(t, _frequencies((r + 1) // 2, base, period), layout=layout)
        return rope.apply(features, cos, sin, layout=layout, backend="numpy")

    def get_feature_names_out(self, input_features: ArrayLike | None = None) -> np.ndarray:
        """The input names without the time column (rotated columns keep their names; an implicit
        zero partner, see ``unpaired``, is ``"rope_pad"``)."""
        names = _check_names_out(self, input_features)
        check_is_fitted(self, "time_index_")
        r = self._checked_params(self.n_features_in_)[1]
        names = np.delete(names, self.time_index_)
        return np.insert(names, r, "rope_pad") if r % 2 else names
