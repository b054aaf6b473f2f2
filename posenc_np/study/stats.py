r"""Intervals over seeds, the tests behind every verdict, and the smallest detectable differences.

**Measures** (:data:`MEASURES`). Each quantity the study compares is a :class:`Measure`: its
range, the scale it is compared on, and its *minimum effect size* :math:`\delta`:

``accuracy``
    token accuracy, in :math:`[0, 1]`, compared as a difference; :math:`\delta = 0.15`.
``ppl``
    perplexity per byte, :math:`\ge 1`, compared on the log scale (a ratio);
    :math:`\delta = 7\,\%`.
``ratio``
    the per-seed ratio of one model's perplexity at two lengths, :math:`> 0`, on the log
    scale, tested against 1; :math:`\delta = 2\,\%`.

**Intervals.** A mean over seeds with a two-sided 95 % Student-t interval computed on the
measure's scale, :math:`\bar x \pm t_{0.975,\,n-1}\, s/\sqrt n`, mapped back and clipped to the
measure's range (the true mean lies in the range, so clipping keeps the coverage). One seed
gives no interval. When every seed gives the same value (:math:`s = 0`), the interval is not
taken as exact: :math:`s` is replaced by the measure's floor, for accuracy the binomial standard
error of one evaluation, :math:`\sqrt{\tilde p(1-\tilde p)/(N+4)}` with
:math:`\tilde p = (k + 2)/(N + 4)` (Agresti–Coull) for :math:`k` of :math:`N` scored tokens right:
the seeds agree, and what remains is the finite evaluation set.

**Comparisons.** Two encodings (different seeds, so unpaired) are compared with Welch's t test
on the measure's scale; two conditions of the same models (lengths, scaling methods of one base
model) with a paired t test on the per-seed differences. A result is *clearly better* when the
test rejects "no difference" after Holm's correction over the comparisons of the claim
(:func:`holm`) **and** the estimated difference is at least :math:`\delta`. A claim that
something is *at least as good* (or *does not rise*) is a non-inferiority test: rejecting
"worse by :math:`\delta` or more", one-sided, after the same correction.

**Detectable differences** (:func:`detectable`): with :math:`n` seeds, a between-seed standard
deviation :math:`\sigma`, level :math:`\alpha` and power :math:`1-\beta`, a two-sample t test
detects a true difference of :math:`(t_{1-\alpha/2,\,\nu} + t_{1-\beta,\,\nu})\,\sigma\sqrt{2/n}`,
:math:`\nu = 2(n-1)`; :func:`seeds_for` is the smallest :math:`n` for which that is at most
:math:`\delta`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

__all__ = ["LEVEL", "MEASURES", "Interval", "Measure", "Test", "detectable", "fmt", "holm", "paired", "seeds_for",
           "t_interval", "welch"]

LEVEL = 0.95
ALPHA = 1 - LEVEL
POWER = 0.8


@dataclass(frozen=True)
class Measure:
    """A compared quantity: range ``[lo, hi]`` (None: unbounded), log scale or not, minimum effect
    ``delta`` (on the log scale a relative change: ``log(1 + delta)``).

    Examples
    --------
    >>> from posenc_np.study.stats import MEASURES, Measure
    >>> ppl = MEASURES["ppl"]                      # compared on the log scale, delta 7 %
    >>> round(ppl.margin, 6)                       # log(1.07)
    0.067659
    >>> ppl.clip(0.5), ppl.to_scale(np.array([1.0])).tolist()    # a perplexity is at least 1; log(1) = 0
    (1.0, [0.0])
    >>> Measure("score", 0.0, 10.0, False, 1.0).margin
    1.0
    """

    name: str
    lo: float | None
    hi: float | None
    log: bool
    delta: float
    binomial_floor: bool = False

    @property
    def margin(self) -> float:
        """``delta`` on the scale the tests use."""
        return math.log1p(self.delta) if self.log else self.delta

    def to_scale(self, x: np.ndarray) -> np.ndarray:
        return np.log(x) if self.log else x

    def from_scale(self, x: float) -> float:
        return math.exp(x) if self.log else x

    def clip(self, x: float) -> float:
        if self.lo is not None:
            x = max(x, self.lo)
        if self.hi is not None:
            x = min(x, self.hi)
        return x


MEASURES = {
    "accuracy": Measure("accuracy", 0.0, 1.0, False, 0.15, binomial_floor=True),
    "ppl": Measure("ppl", 1.0, None, True, 0.07),
    "ratio": Measure("ratio", 0.0, None, True, 0.02),
    "difference": Measure("difference", -1.0, 1.0, False, 0.15),  # of two accuracies, paired by seed
}


@functools.cache
def _t(q: float, df: float) -> float:
    r"""The Student-t quantile :math:`t_{q,\,df}` (``q`` in (0.5, 1), any real ``df > 0``), correctly
    rounded: the root of :math:`\tfrac12 I_{df/(df + t^2)}(df/2, 1/2) = 1 - q`, refined with mpmath at
    40 digits from SciPy's ``stdtrit``, which is off by about 1e-11 relative before SciPy 1.17
    (4.302652729696 for ``df=2, q=0.975`` against 4.302652729749)."""
    import mpmath

    with mpmath.workdps(40):
        half, df_ = mpmath.mpf(1) / 2, mpmath.mpf(df)

        def tail(t):
            return mpmath.betainc(df_ / 2, half, 0, df_ / (df_ + t * t), regularized=True) / 2

        from scipy.special import stdtrit  # a start within 1e-11: Newton's method takes it to the root

        return abs(float(mpmath.findroot(lambda t: tail(t) - (1 - mpmath.mpf(q)), mpmath.mpf(float(stdtrit(df, q))))))


def _sf(t: float, df: float) -> float:
    """``P(T > t)`` for Student's t with ``df`` degrees of freedom."""
    from scipy.special import stdtr

    return float(stdtr(df, -t))


def _clean(values, counts=None):
    pairs = [(v, None if counts is None else c) for v, c in zip(values, counts or [None] * len(values))
             if v is not None and math.isfinite(v)]
    return np.asarray([v for v, _ in pairs], dtype=np.float64), [c for _, c in pairs]


def _floor(measure: Measure, x: np.ndarray, counts) -> float:
    """The standard deviation used when every seed gave the same value (see the module docstring)."""
    if measure.binomial_floor and not measure.log and counts and all(isinstance(c, int) and c > 0 for c in counts):
        n = int(np.mean(counts))
        p = (float(np.mean(x)) * n + 2) / (n + 4)
        return math.sqrt(p * (1 - p) / (n + 4))
    return 0.0


def _sd(measure: Measure, x: np.ndarray, counts) -> tuple[float, bool]:
    s = float(x.std(ddof=1)) if x.size > 1 else 0.0
    if x.size > 1 and s == 0.0:
        return _floor(measure, x, counts), True
    return s, False


@dataclass(frozen=True)
class Interval:
    """Mean of ``n`` values with its 95 % interval ``[lo, hi]`` (None when ``n < 2``); ``floored``:
    the seeds agreed exactly and the interval's width is the measure's floor.

    Examples
    --------
    >>> from posenc_np.study.stats import Interval
    >>> iv = Interval(0.7, 0.45, 0.95, 3)
    >>> iv.known, Interval(0.7, None, None, 1).known      # one seed gives no interval
    (True, False)
    """

    mean: float
    lo: float | None
    hi: float | None
    n: int
    floored: bool = False

    @property
    def known(self) -> bool:
        return self.lo is not None


def t_interval(values: Iterable[float | None], measure: Measure | str = "accuracy",
               counts: Iterable[int | None] | None = None) -> Interval | None:
    """The mean and 95 % interval of the finite ``values`` on ``measure``'s scale, clipped to its
    range (None if there are no values). ``counts``: scored tokens per value (the accuracy floor).

    Examples
    --------
    >>> from posenc_np.study.stats import t_interval
    >>> iv = t_interval([0.6, 0.7, 0.8])       # s = 0.1, n = 3: 0.7 +- 4.302653 * 0.1 / sqrt(3)
    >>> round(iv.mean, 6), round(iv.lo, 6), round(iv.hi, 6), iv.n
    (0.7, 0.451586, 0.948414, 3)
    >>> t_interval([0.9]), t_interval([])            # one seed: a mean without an interval; nothing: None
    (Interval(mean=0.9, lo=None, hi=None, n=1, floored=False), None)
    >>> iv = t_interval([0.5, 0.5, 0.5], counts=[100, 100, 100])   # agreeing seeds: sd sqrt(0.5 * 0.5 / 104)
    >>> round(iv.lo, 6), round(iv.hi, 6), iv.floored
    (0.378205, 0.621795, True)
    """
    measure = MEASURES[measure] if isinstance(measure, str) else measure
    x, counts = _clean(list(values), None if counts is None else list(counts))
    if x.size == 0:
        return None
    y = measure.to_scale(x)
    mean = measure.from_scale(float(y.mean())) if measure.log else float(y.mean())
    if x.size < 2:
        return Interval(mean, None, None, 1)
    s, floored = _sd(measure, y, counts)
    half = _t(0.5 + LEVEL / 2, x.size - 1) * s / math.sqrt(x.size)
    lo, hi = measure.from_scale(float(y.mean()) - half), measure.from_scale(float(y.mean()) + half)
    return Interval(mean, measure.clip(lo), measure.clip(hi), int(x.size), floored)


@dataclass(frozen=True)
class Test:
    """A comparison on a measure's scale: ``diff`` (first minus second, or the mean paired
    difference), its standard error and degrees of freedom, and the p-values it yields.

    Examples
    --------
    >>> from posenc_np.study.stats import Test
    >>> t = Test(diff=0.1, se=0.05, df=10.0, n=(6, 6))      # t = 2 with 10 degrees of freedom
    >>> round(t.p_two_sided(), 6), round(t.p_greater(0.0), 6)
    (0.073388, 0.036694)
    >>> Test(0.2, 0.0, 4.0, (3, 3)).p_two_sided()          # no spread at all: a difference is certain
    0.0
    """

    diff: float
    se: float
    df: float
    n: tuple

    def p_two_sided(self) -> float:
        """p of "no difference"."""
        if self.se == 0.0:
            return 0.0 if self.diff != 0.0 else 1.0
        return min(1.0, 2 * _sf(abs(self.diff) / self.se, self.df))

    def p_greater(self, bound: float) -> float:
        """One-sided p of "diff <= bound" (rejected when diff is clearly above ``bound``)."""
        if self.se == 0.0:
            return 0.0 if self.diff > bound else 1.0
        return _sf((self.diff - bound) / self.se, self.df)


def welch(a: Iterable[float | None], b: Iterable[float | None], measure: Measure | str,
          counts_a: Iterable[int | None] | None = None, counts_b: Iterable[int | None] | None = None) -> Test | None:
    """Welch's unpaired t test of ``a - b`` on ``measure``'s scale (None with fewer than two values each).

    Examples
    --------
    >>> from posenc_np.study.stats import welch
    >>> t = welch([0.6, 0.7, 0.8], [0.5, 0.6, 0.7], "accuracy")
    >>> round(t.diff, 6), round(t.se, 6), t.df, t.n         # se = sqrt(0.01/3 + 0.01/3); equal variances: df = 4
    (0.1, 0.08165, 4.0, (3, 3))
    >>> round(t.p_two_sided(), 6)                           # t = 1.224745
    0.287864
    >>> welch([0.6], [0.5, 0.6], "accuracy") is None          # fewer than two values on a side
    True
    """
    measure = MEASURES[measure] if isinstance(measure, str) else measure
    xa, ca = _clean(list(a), None if counts_a is None else list(counts_a))
    xb, cb = _clean(list(b), None if counts_b is None else list(counts_b))
    if xa.size < 2 or xb.size < 2:
        return None
    ya, yb = measure.to_scale(xa), measure.to_scale(xb)
    va = _sd(measure, ya, ca)[0] ** 2 / xa.size
    vb = _sd(measure, yb, cb)[0] ** 2 / xb.size
    se = math.sqrt(va + vb)
    if se == 0.0:
        df = float(xa.size + xb.size - 2)
    else:
        df = (va + vb) ** 2 / ((va ** 2 / (xa.size - 1) if va else 0.0) + (vb ** 2 / (xb.size - 1) if vb else 0.0))
    return Test(float(ya.mean() - yb.mean()), se, df, (int(xa.size), int(xb.size)))


def paired(a: dict, b: dict, measure: Measure | str) -> Test | None:
    """Paired t test of ``a - b`` over the seeds both dicts (``{seed: value}``) hold, on the
    measure's scale (None with fewer than two pairs).

    Examples
    --------
    >>> from posenc_np.study.stats import paired
    >>> t = paired({0: 0.8, 1: 0.9, 2: 0.7}, {0: 0.6, 1: 0.8, 2: 0.6}, "accuracy")   # differences 0.2, 0.1, 0.1
    >>> round(t.diff, 6), round(t.se, 6), t.df, t.n        # se = 0.057735 / sqrt(3)
    (0.133333, 0.033333, 2.0, (3,))
    >>> paired({0: 0.8, 1: 0.9}, {1: 0.8, 2: 0.6}, "accuracy") is None    # one common seed only
    True
    """
    measure = MEASURES[measure] if isinstance(measure, str) else measure
    seeds = sorted(s for s in set(a) & set(b) if a[s] is not None and b[s] is not None
                   and math.isfinite(a[s]) and math.isfinite(b[s]) and (not measure.log or (a[s] > 0 and b[s] > 0)))
    if len(seeds) < 2:
        return None
    d = measure.to_scale(np.array([a[s] for s in seeds])) - measure.to_scale(np.array([b[s] for s in seeds]))
    return Test(float(d.mean()), float(d.std(ddof=1)) / math.sqrt(len(seeds)), len(seeds) - 1.0, (len(seeds),))


def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values (same order as given): reject where ``adjusted < alpha``
    and the family-wise error rate is at most ``alpha``.

    Examples
    --------
    >>> from posenc_np.study.stats import holm
    >>> holm([0.01, 0.04, 0.03])     # sorted: 3 * 0.01, 2 * 0.03, max(1 * 0.04, 0.06)
    [0.03, 0.06, 0.06]
    """
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    out, running = [1.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out


def detectable(sd: float, n: int, *, alpha: float = ALPHA, power: float = POWER, paired_test: bool = False) -> float:
    """The smallest true difference a t test with ``n`` seeds per group detects with ``power``
    at two-sided level ``alpha`` (see the module docstring); ``paired_test``: one sample of ``n``
    paired differences with standard deviation ``sd``.

    Examples
    --------
    >>> from posenc_np.study.stats import detectable
    >>> round(detectable(1.0, 10), 6)      # (t_0.975,18 + t_0.8,18) * sqrt(2 / 10) = (2.100922 + 0.862093) * 0.447214
    1.325081
    >>> detectable(1.0, 1)                  # one seed detects nothing
    inf
    """
    if n < 2:
        return math.inf
    df = n - 1.0 if paired_test else 2.0 * (n - 1)
    factor = math.sqrt(1.0 / n) if paired_test else math.sqrt(2.0 / n)
    return (_t(1 - alpha / 2, df) + _t(power, df)) * sd * factor


def seeds_for(delta: float, sd: float, *, alpha: float = ALPHA, power: float = POWER, limit: int = 100) -> int:
    """The smallest seed count whose :func:`detectable` difference is at most ``delta``.

    Examples
    --------
    >>> from posenc_np.study.stats import detectable, seeds_for
    >>> seeds_for(0.5, 0.2)
    4
    >>> detectable(0.2, 3) > 0.5 >= detectable(0.2, 4)
    True
    """
    for n in range(2, limit + 1):
        if detectable(sd, n, alpha=alpha, power=power) <= delta:
            return n
    return limit


def fmt(iv: Interval | None, digits: int = 2) -> str:
    """``mean [lo, hi]``, ``mean`` alone for one seed, ``n/a`` for nothing; ``*`` marks a floored interval.

    Examples
    --------
    >>> from posenc_np.study.stats import Interval, fmt
    >>> fmt(Interval(0.7, 0.45, 0.95, 3)), fmt(Interval(0.7, None, None, 1)), fmt(None)
    ('0.70 [0.45, 0.95]', '0.70', 'n/a')
    >>> fmt(Interval(0.5, 0.378, 0.622, 3, floored=True), 3)
    '0.500 [0.378, 0.622]*'
    """
    if iv is None:
        return "n/a"
    if not iv.known:
        return f"{iv.mean:.{digits}f}"
    return f"{iv.mean:.{digits}f} [{iv.lo:.{digits}f}, {iv.hi:.{digits}f}]" + ("*" if iv.floored else "")
