r"""Intervals over seeds and the only comparisons the reports make from them.

Every number the study reports is a mean over seeds with a two-sided 95 % Student-t
interval, :math:`\bar x \pm t_{0.975,\,n-1}\, s/\sqrt n` (``s`` the sample standard
deviation). With three seeds :math:`t_{0.975,2} = 4.303`: the intervals are wide, and they are
meant to be; a bootstrap of three values would pretend to a precision it does not have. One
seed gives no interval, and no comparison is made from it.

Comparisons (:func:`tiers`): two results are *separated* when their intervals do not overlap.
A ranking is a list of tiers in which every member of a tier is separated from, and better
than, every member of every later tier; results that cannot be split that way share a tier.
Changes of one model between two lengths (:func:`change`) use the interval of the per-seed
ratio, a paired comparison.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["Interval", "change", "direction", "fmt", "separated", "t_interval", "tiers"]

LEVEL = 0.95


@dataclass(frozen=True)
class Interval:
    """Mean of ``n`` values with its 95 % t interval ``[lo, hi]`` (None when ``n < 2``)."""

    mean: float
    lo: float | None
    hi: float | None
    n: int

    @property
    def known(self) -> bool:
        return self.lo is not None


def t_interval(values) -> Interval | None:
    """The mean and 95 % Student-t interval of the finite ``values`` (None if there are none)."""
    x = np.asarray([v for v in values if v is not None and math.isfinite(v)], dtype=np.float64)
    if x.size == 0:
        return None
    mean = float(x.mean())
    if x.size < 2:
        return Interval(mean, None, None, 1)
    from scipy.special import (
        stdtrit,  # the t quantile (lighter to import than scipy.stats)
    )

    half = float(stdtrit(x.size - 1, 0.5 + LEVEL / 2) * x.std(ddof=1) / math.sqrt(x.size))
    return Interval(mean, mean - half, mean + half, int(x.size))


def separated(a: Interval | None, b: Interval | None) -> bool:
    """True when both intervals are known and do not overlap."""
    return bool(a and b and a.known and b.known and (a.lo > b.hi or b.lo > a.hi))


def tiers(items: dict, *, higher_is_better: bool) -> list[list[str]]:
    """Split ``{name: Interval}`` into tiers, best first (see the module docstring).

    Names are sorted by mean; a cut is made between two neighbours only when every interval
    before it lies entirely on the better side of every interval after it. Unknown intervals
    (one seed) never allow a cut. Missing results (None) are left out."""
    known = {k: v for k, v in items.items() if v is not None}
    order = sorted(known, key=lambda k: (-known[k].mean if higher_is_better else known[k].mean, k))
    out, current = [], []
    for i, name in enumerate(order):
        current.append(name)
        before, after = order[: i + 1], order[i + 1:]
        if not after:
            break
        if all(known[k].known for k in order):
            if higher_is_better:
                cut = min(known[k].lo for k in before) > max(known[k].hi for k in after)
            else:
                cut = max(known[k].hi for k in before) < min(known[k].lo for k in after)
            if cut:
                out.append(current)
                current = []
    out.append(current)
    return [t for t in out if t]


def change(before, after) -> Interval | None:
    """Interval of the per-seed ratio ``after / before`` (paired by position in the lists)."""
    ratios = [b / a for a, b in zip(before, after) if a is not None and b is not None and a > 0]
    return t_interval(ratios)


def direction(iv: Interval | None, neutral: float = 1.0) -> str:
    """``"up"`` / ``"down"`` when the interval lies entirely above / below ``neutral``, ``"flat"``
    when it contains it, ``"unknown"`` without an interval."""
    if iv is None or not iv.known:
        return "unknown"
    if iv.lo > neutral:
        return "up"
    if iv.hi < neutral:
        return "down"
    return "flat"


def fmt(iv: Interval | None, digits: int = 2) -> str:
    """``mean [lo, hi]``, ``mean`` alone for one seed, ``n/a`` for nothing."""
    if iv is None:
        return "n/a"
    if not iv.known:
        return f"{iv.mean:.{digits}f}"
    return f"{iv.mean:.{digits}f} [{iv.lo:.{digits}f}, {iv.hi:.{digits}f}]"
