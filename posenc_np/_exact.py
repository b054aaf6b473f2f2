r"""Exact angles: cos/sin of :math:`p\,\omega` within one ulp for every position :math:`|p| < 2^{53}`.

Where a float64 table loses accuracy, and what this module does about each step:

1. **Frequency rounding.** :math:`\omega_i = \mathrm{base}^{-2i/d}` stored as one double is off by
   up to half an ulp, which :math:`p` multiplies. Frequencies are evaluated once per call with
   mpmath at :data:`WORKING_BITS` bits (:func:`mp`, :func:`omega`; the scaling formulas of
   :mod:`posenc_np.rope_scaling` run on these values) and returned as :class:`ExactFrequencies`:
   the exact values with their correctly rounded doubles, an explicit value the table builders take.
2. **Product rounding and argument reduction.** The angle is never formed. Per frequency, the
   fraction of a turn :math:`u = \omega / 2\pi` is expanded once into 24-bit digits (Payne-Hanek:
   a 1,600-bit fixed-point :math:`1/2\pi` from Machin's formula, exact Python-integer
   arithmetic). For an integer position the turn count :math:`\mathrm{frac}(p\,u)` is then exact
   integer arithmetic on those digits (:math:`p = p_1 2^{24} + p_0`, every partial product below
   :math:`2^{54}` in int64) to :math:`2^{-139}` absolute. A float position is split into its
   integer part (the same digits) and its fraction, whose product with :math:`u` is a
   double-double (Dekker/Veltkamp two-product; NumPy has no FMA).
3. **cos/sin of the reduced argument.** The turn count picks one of 512 table angles
   :math:`2\pi j/512` (values as double-doubles, from an integer Taylor series) and a remainder
   :math:`|z| \le 2\pi/1024`; :math:`\cos z, \sin z` are short polynomials, and the angle-addition
   formula is evaluated with exact two-products, so the error before the final rounding is
   about :math:`2^{-67}` absolute and the table's zeros are exact: results are correctly rounded
   except within :math:`\sim 2^{-14}` ulp of a rounding boundary (at most 0.5001 ulp).

Cost, measured: see ``docs/benchmarks.md`` (section "Exact tables"). Positions must be
representable: ``|p| < 2**53``, and a float position must lie where its dtype still holds every
integer (float32 below :math:`2^{24}`, float16 below :math:`2^{11}`); anything else is a
``ValueError``, never a silent rounding. ``import posenc_np._exact`` imports neither mpmath nor
Numba; mpmath is loaded on the first frequency evaluation.

References: Payne & Hanek 1983, "Radian reduction for trigonometric functions"; Dekker 1971,
"A floating-point technique for extending the available precision"; Tang 1990 (table-driven
elementary functions); Muller et al., *Handbook of Floating-Point Arithmetic*, ch. 4 and 11.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from ._checks import as_positions

if TYPE_CHECKING:
    import mpmath

__all__ = [
    "FREQUENCY_BYTES",
    "MAX_POSITION",
    "WORKING_BITS",
    "ExactFrequencies",
    "Positions",
    "TurnConstants",
    "cos_sin",
    "dd_cos_sin",
    "exact_frequencies",
    "float32_split",
    "mp",
    "omega",
    "positions",
    "turn_constants",
]

#: Positions must satisfy ``|p| < MAX_POSITION`` (doubles hold every integer below it).
MAX_POSITION = 2 ** 53
#: Precision (bits) of the extended frequency evaluation.
WORKING_BITS = 256
#: Memory one extended frequency takes (its 256-bit value, exact ``(m, e)`` pair and turn constants;
#: 1.3 KB measured), for the allocation rule: ``check_alloc((n, FREQUENCY_BYTES), np.uint8, ...)``.
FREQUENCY_BYTES = 2048

_B = 24                      # bits per digit of a turn count
_MASK = (1 << _B) - 1
_K = 8                       # digits kept: frac(p u) to 2^-192 before truncation error
_INV2PI_BITS = 1600          # fixed-point 1/(2 pi): enough for any finite double frequency
_TABLE_BITS = 9              # 512 table angles per turn
_CHUNK = 1 << 15             # elements per kernel pass (keeps temporaries in cache)
_SPLITTER = float(2 ** 27 + 1)
_TINY = 2.0 ** -64           # angles below this (radians) take the tiny-angle path
_TINY_SCALE = 600            # S: tiny angles are formed as (p w 2^S) 2^-S, so subnormal ones stay exact


# --------------------------------------------------------------------------- double-double primitives

def two_sum(a, b):
    """``s + e == a + b`` exactly, ``s = fl(a + b)`` (Knuth)."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def fast_two_sum(a, b):
    """``s + e == a + b`` exactly when ``|a| >= |b|`` or ``a == 0`` (Dekker)."""
    s = a + b
    return s, b - (s - a)


def split(a):
    """Veltkamp: ``a == hi + lo`` with both halves on 26 bits, so their products are exact."""
    c = _SPLITTER * a
    hi = c - (c - a)
    return hi, a - hi


def two_prod(a, b, a_parts=None, b_parts=None):
    """``p + e == a * b`` exactly, ``p = fl(a * b)`` (Dekker's product without FMA)."""
    p = a * b
    ah, al = split(a) if a_parts is None else a_parts
    bh, bl = split(b) if b_parts is None else b_parts
    return p, ((ah * bh - p) + ah * bl + al * bh) + al * bl


# --------------------------------------------------------------------------- fixed-point constants

def _atan_inv(x: int, one: int) -> int:
    """``atan(1/x) * one`` by its Taylor series in integers."""
    total = term = one // x
    x2, k, sign = x * x, 3, -1
    while term:
        term //= x2
        total += sign * (term // k)
        sign, k = -sign, k + 2
    return total


@functools.cache
def _pi_fixed(bits: int) -> int:
    """:math:`\\pi 2^{bits}` within one unit (Machin: :math:`\\pi = 16\\,\\mathrm{atan}\\frac15 -
    4\\,\\mathrm{atan}\\frac1{239}`)."""
    guard = 32
    one = 1 << (bits + guard)
    return (16 * _atan_inv(5, one) - 4 * _atan_inv(239, one)) >> guard


@functools.cache
def _inv_two_pi_fixed() -> int:
    """:math:`\\lfloor 2^{1600} / 2\\pi \\rfloor` (to one unit)."""
    m = _INV2PI_BITS + 64
    return (1 << (_INV2PI_BITS + m)) // (2 * _pi_fixed(m))


def _words(num: int, shift: int, count: int) -> list[float]:
    """``count`` doubles, each correctly rounded, whose sum is ``num * 2**-shift`` up to the last word's rounding."""
    if shift < 0:
        num, shift = num << -shift, 0
    out = []
    for _ in range(count):
        w = num / (1 << shift)  # int / int is correctly rounded in Python, whatever the sizes
        out.append(w)
        n, d = w.as_integer_ratio()
        k = d.bit_length() - 1
        num, shift = (num << k) - (n << shift), shift + k  # the remainder, exactly
    return out


def _dd_of_fixed(x: int, bits: int) -> tuple[float, float]:
    """Double-double ``hi + lo`` of the fixed-point value ``x / 2**bits`` (hi correctly rounded)."""
    return tuple(_words(x, bits, 2))


@functools.cache
def _two_pi() -> tuple[float, float]:
    return _dd_of_fixed(2 * _pi_fixed(200), 200)


@functools.cache
def _turn_table() -> dict:
    """cos and sin of :math:`2\\pi j / 512`, ``j = 0..511``, as double-doubles (with Veltkamp halves).

    Quadrant 0 (``j <= 128``) by an integer Taylor series at 200 bits; the other quadrants by the
    exact symmetries, so every zero of cos and sin in the table is exactly 0.
    """
    bits = 200
    one, pi = 1 << bits, _pi_fixed(bits)
    quarter = 1 << (_TABLE_BITS - 2)
    c0, s0 = [], []
    for j in range(quarter + 1):
        theta = pi * j >> (_TABLE_BITS - 1)  # 2 pi j / 512 = pi j / 256
        c = s = 0
        term, n = one, 0
        while term:  # term = theta^n / n!
            sign = -1 if (n // 2) % 2 else 1
            if n % 2:
                s += sign * term
            else:
                c += sign * term
            n += 1
            term = term * theta // (one * n)
        c0.append(_dd_of_fixed(c, bits))
        s0.append(_dd_of_fixed(s, bits))
    ch, cl, sh, sl = (np.empty(1 << _TABLE_BITS) for _ in range(4))
    for j in range(1 << _TABLE_BITS):
        q, r = divmod(j, quarter)
        (a, b), (e, f) = c0[r], s0[r]
        (ch[j], cl[j]), (sh[j], sl[j]) = [((a, b), (e, f)), ((-e, -f), (a, b)),
                                          ((-a, -b), (-e, -f)), ((e, f), (-a, -b))][q]
    return {"ch": ch, "cl": cl, "sh": sh, "sl": sl, "ch_parts": split(ch), "sh_parts": split(sh)}


# --------------------------------------------------------------------------- extended frequencies

@functools.cache
def mp() -> mpmath.MPContext:
    """A private mpmath context at :data:`WORKING_BITS` bits (thread-safe: its precision never changes).

    Imported on first use only. Arithmetic between its ``mpf`` values and Python numbers stays
    in this context, so the formulas of :mod:`posenc_np.rope_scaling` run unchanged on object
    arrays of them.
    """
    import mpmath

    ctx = mpmath.MPContext()
    ctx.prec = WORKING_BITS
    return ctx


@functools.lru_cache(maxsize=64)
def _omega_values(dim: int, base) -> tuple:
    ctx = mp()
    ratio = ctx.power(ctx.mpf(base), ctx.mpf(-2) / dim)
    values, w = [], ctx.mpf(1)
    for _ in range(dim // 2):
        values.append(w)
        w = w * ratio
    return tuple(values)


def omega(dim: int, base: float | mpmath.mpf) -> np.ndarray:
    r""":math:`\omega_i = \mathrm{base}^{-2i/d}`, ``i < dim // 2``, as an object array of extended values.

    ``base`` may be a float or an extended value (the NTK bases are). :math:`\omega_i = r^i` with
    :math:`r = \mathrm{base}^{-2/d}` at :data:`WORKING_BITS` bits (relative error below
    :math:`2^{-248}` for :math:`d \le 512`). Unchecked: callers validate ``dim`` and ``base``.
    """
    out = np.empty(dim // 2, dtype=object)
    out[:] = _omega_values(dim, base)
    return out


def _man_exp(value) -> tuple[int, int]:
    """``(m, e)`` with ``value == m * 2**e`` exactly, for a Python/NumPy number or an mpmath value."""
    if isinstance(value, (int, np.integer)):
        return int(value), 0
    if isinstance(value, (float, np.floating)):
        n, d = float(value).as_integer_ratio()
        return n, -(d.bit_length() - 1)
    return tuple(int(v) for v in mp().mpf(value).man_exp)


@dataclass(frozen=True, eq=False)
class ExactFrequencies:
    """Frequencies known exactly, each ``m * 2**e`` (``exact``), with their float64 values ``rounded``
    (each correctly rounded, a read-only array).

    Returned by :func:`posenc_np.rope.exact_inv_freq` and :func:`posenc_np.absolute.geometric_frequencies`
    and taken by :func:`posenc_np.rope.cos_sin` and the other table builders, whose tables then do
    not inherit the half-ulp rounding of each frequency. It is not an array: an array of
    frequencies (``rounded`` included) is taken at its float64 values, so equal arrays give equal
    tables.
    """

    exact: tuple
    rounded: np.ndarray


def exact_frequencies(values: Iterable) -> ExactFrequencies:
    """:class:`ExactFrequencies` of extended values (mpmath numbers, ints or floats), rounded once to float64."""
    exact = tuple(_man_exp(v) for v in values)
    rounded = np.array([_words(m, -e, 1)[0] for m, e in exact], dtype=np.float64)
    rounded.flags.writeable = False
    return ExactFrequencies(exact, rounded)


# --------------------------------------------------------------------------- per-frequency constants

@dataclass(frozen=True)
class TurnConstants:
    r"""Per frequency :math:`\omega`: :math:`u = \omega/2\pi` as digits of :math:`u \bmod 1`
    (``digits[j]`` has weight :math:`2^{-24(j+1)}`) and as a triple-double ``u_hi + u_lo + u_lo2``;
    :math:`\omega\,2^{S}` (:data:`_TINY_SCALE`) as a double-double ``w_hi + w_lo`` for the tiny-angle
    path (:func:`_tiny_angles`)."""

    digits: np.ndarray  # (_K + 1, n) int64
    u_hi: np.ndarray
    u_lo: np.ndarray
    u_lo2: np.ndarray
    w_hi: np.ndarray
    w_lo: np.ndarray

    @property
    def size(self) -> int:
        return self.u_hi.size

    def take(self, index: ArrayLike) -> TurnConstants:
        return TurnConstants(self.digits[:, index], self.u_hi[index], self.u_lo[index], self.u_lo2[index],
                             self.w_hi[index], self.w_lo[index])


def _turn_one(man: int, exp: int) -> tuple[list[int], tuple[float, ...]]:
    """Digits of frac(u), the triple-double u and the double-double scaled frequency for ``man * 2**exp``."""
    t = man * _inv_two_pi_fixed()  # u = t * 2^(exp - _INV2PI_BITS)
    shift = _INV2PI_BITS - exp
    frac_bits = t & ((1 << shift) - 1) if shift > 0 else 0
    width = _B * (_K + 1)
    top = frac_bits >> (shift - width) if shift >= width else frac_bits << (width - shift)
    digits = [(top >> (_B * (_K - j))) & _MASK for j in range(_K + 1)]
    # w = man * 2^(exp + S): finite for the frequencies that can give tiny angles (|w| < 2^-60)
    w = _words(man, -(exp + _TINY_SCALE), 2) if exp + man.bit_length() < -60 else [0.0, 0.0]
    return digits, (*_words(t, shift, 3), *w)


@functools.lru_cache(maxsize=64)
def _turn_constants(exact: tuple) -> TurnConstants:
    rows = [_turn_one(m, e) for m, e in exact]
    digits = np.array([r[0] for r in rows], dtype=np.int64).reshape(len(rows), _K + 1).T.copy()
    words = np.array([r[1] for r in rows], dtype=np.float64).reshape(len(rows), 5).T.copy()
    return TurnConstants(digits, *words)


def turn_constants(freqs: ArrayLike | ExactFrequencies) -> TurnConstants:
    """Kernel constants for ``freqs``: its exact values if it is :class:`ExactFrequencies`, else each
    double of the array taken as exact. Frequencies must be finite."""
    if isinstance(freqs, ExactFrequencies):
        return _turn_constants(freqs.exact)
    return _turn_constants(tuple(_man_exp(v) for v in np.asarray(freqs, dtype=np.float64).ravel()))


# --------------------------------------------------------------------------- positions

@dataclass(frozen=True)
class Positions:
    """A validated position array as ``whole + frac``: ``whole`` int64, ``frac`` float64 in (-1, 1) or None."""

    whole: np.ndarray
    frac: np.ndarray | None

    @property
    def shape(self) -> tuple:
        return self.whole.shape


def positions(values: ArrayLike, name: str = "positions", *, offset: int = 0) -> Positions:
    r"""Check that every position is representable and split it exactly; ``offset`` is added exactly.

    Integer arrays: ``|p + offset| < 2**53``. Float arrays additionally need ``|p| < 2**(m+1)``
    for a dtype with ``m`` mantissa bits (float64 :math:`2^{53}`, float32 :math:`2^{24}`, float16
    :math:`2^{11}`): past it the dtype no longer holds every integer, so the stored value may
    not be the position that was meant (float32 stores 16777217 as 16777216).
    """
    arr = as_positions(values, name)
    if arr.dtype.kind == "f":
        if arr.dtype.itemsize > 8:
            as64 = arr.astype(np.float64)
            if not np.array_equal(as64.astype(arr.dtype), arr):
                raise ValueError(f"{name} ({arr.dtype}) hold values that float64 cannot represent exactly")
            arr = as64
        bits = np.finfo(arr.dtype).nmant + 1
        big = np.abs(arr) >= 2.0 ** bits
        if np.any(big):
            raise ValueError(f"{name} ({arr.dtype}) must satisfy |p| < 2**{bits} = {2 ** bits}: beyond it "
                             f"{arr.dtype} cannot hold every integer, so {float(arr[big].flat[0])!r} may not be "
                             "the position meant; pass int64 positions")
        x = arr.astype(np.float64)
        whole = np.trunc(x)
        frac = x - whole
        whole = whole.astype(np.int64)
        frac = frac if np.any(frac) else None
    else:
        if arr.dtype == np.uint64 and arr.size and int(arr.max()) >= MAX_POSITION:
            whole = None
        else:
            whole = arr.astype(np.int64)
        frac = None
    src = arr if whole is None else whole
    largest = max(-int(src.min()), int(src.max())) + abs(offset) if src.size else 0
    if whole is None or largest >= MAX_POSITION:
        raise ValueError(f"{name} must satisfy |p| < 2**53 = {MAX_POSITION} (got up to {largest}"
                         f"{' after adding the offset' if offset else ''}): larger positions cannot be "
                         "represented exactly as float64")
    return Positions(whole + offset if offset else whole, frac)


# --------------------------------------------------------------------------- the kernel

def _digits_of(x: np.ndarray) -> list[np.ndarray]:
    """Signed digits of doubles ``|x| < 1``: ``x = sum_j digit_j 2^(-24 (j+1))`` exactly (to ``2^-192``).

    Digits of ``|x|`` carry the sign of ``x``: taking ``floor`` of a negative value would need
    ``1 - |x|``, which a double cannot always hold.
    """
    sign = np.sign(x).astype(np.int64)
    x = np.abs(x)
    out = []
    for _ in range(_K):
        x = x * float(1 << _B)
        d = np.floor(x)
        out.append(sign * d.astype(np.int64))
        x = x - d
    return out


def _fraction_turns(frac, tc: TurnConstants):
    r""":math:`f\,u` for the fractional parts ``f`` as a double-double, whole turns removed exactly."""
    f = frac[:, None]
    g_hi, g_lo = two_prod(f, tc.u_hi)
    g_lo = g_lo + (f * tc.u_lo + f * tc.u_lo2)
    return g_hi - np.trunc(g_hi), g_lo  # trunc, not floor: 1 - |x| may not be a double


def _turns(whole, fraction, tc: TurnConstants) -> list[np.ndarray]:
    r"""Digits ``g[0..K-1]`` (each in ``[0, 2^24)``) of :math:`\mathrm{frac}(p\,u)` for rows ``p``.

    ``fraction``: the double-double of :func:`_fraction_turns` for non-integer positions, or None.
    """
    d = tc.digits
    p0 = (whole & _MASK)[:, None]
    p1 = (whole >> _B)[:, None]  # whole = p1 * 2^24 + p0, floor semantics
    use_p1 = bool(np.any(p1))
    c = [p0 * d[j] + p1 * d[j + 1] if use_p1 else p0 * d[j] for j in range(_K)]
    if fraction is not None:
        for part in fraction:
            for j, dj in enumerate(_digits_of(part)):
                c[j] = c[j] + dj
    for j in range(_K - 1, 0, -1):  # carries; what passes 2^0 is whole turns and is dropped
        c[j - 1] += c[j] >> _B
        c[j] &= _MASK
    c[0] &= _MASK
    return c


def _reduce_digits(g):
    """Nearest table angle ``j / 512`` turn and the remainder ``h + l`` (turns, ``|h| <= 2^-10``), exactly."""
    t = g[0] + (1 << (_B - _TABLE_BITS - 1))
    j = (t >> (_B - _TABLE_BITS)) & ((1 << _TABLE_BITS) - 1)
    a = (t & ((1 << (_B - _TABLE_BITS)) - 1)) - (1 << (_B - _TABLE_BITS - 1))
    z_a = ((a << _B) + g[1]).astype(np.float64) * 2.0 ** -48
    z_b = ((g[2] << _B) + g[3]).astype(np.float64) * 2.0 ** -96
    z_c = ((g[4] << _B) + g[5]).astype(np.float64) * 2.0 ** -144
    h, l = fast_two_sum(z_a, z_b)
    return j, h, l + z_c


def _reduce_double_double(hi, lo):
    """The same from a double-double turn count ``|hi| < 1``; keeps relative accuracy for tiny values."""
    k = np.rint(hi * (1 << _TABLE_BITS))
    h, l = fast_two_sum(hi - k / (1 << _TABLE_BITS), lo)  # the subtraction is exact
    return k.astype(np.int64) & ((1 << _TABLE_BITS) - 1), h, l


def _kernel(whole, frac, tc: TurnConstants, amplitude: float):
    """``(cos_hi, cos_lo, sin_hi, sin_lo)`` of ``amplitude * cis(2 pi frac(p u))`` for one chunk
    (``hi + lo`` is the value; the pairs are not renormalised)."""
    fraction = None if frac is None else _fraction_turns(frac, tc)
    j, h, l = _reduce_digits(_turns(whole, fraction, tc))
    if fraction is not None and np.any(whole == 0):
        # |p| < 1: the digits' absolute 2^-139 would not do for tiny p w; the product itself is exact enough
        small = np.broadcast_to((whole == 0)[:, None], h.shape)
        j2, h2, l2 = _reduce_double_double(*fraction)
        j, h, l = np.where(small, j2, j), np.where(small, h2, h), np.where(small, l2, l)
    tab = _turn_table()
    # radians: z = 2 pi (h + l), |z| <= 2 pi / 1024
    t_hi, t_lo = _two_pi()
    zh, zl = two_prod(h, t_hi)
    zh, zl = fast_two_sum(zh, zl + (h * t_lo + l * t_hi))
    z2 = zh * zh
    sin_rest = zl + zh * z2 * (-1.0 / 6 + z2 * (1.0 / 120 + z2 * (-1.0 / 5040)))  # sin z = zh + sin_rest
    q = z2 * (-0.5 + z2 * (1.0 / 24 + z2 * (-1.0 / 720))) - zh * zl                # cos z = 1 + q
    ch, cl, sh, sl = tab["ch"][j], tab["cl"][j], tab["sh"][j], tab["sl"][j]
    zparts = split(zh)
    p, pe = two_prod(sh, zh, (tab["sh_parts"][0][j], tab["sh_parts"][1][j]), zparts)
    r, re = two_prod(ch, zh, (tab["ch_parts"][0][j], tab["ch_parts"][1][j]), zparts)
    c_hi, c_lo = two_sum(ch, -p)  # cos(A + z) = C + C q - S sin z
    c_lo = c_lo + (cl + ch * q - pe - sh * sin_rest - sl * zh)
    s_hi, s_lo = two_sum(sh, r)   # sin(A + z) = S + S q + C sin z
    s_lo = s_lo + (sl + sh * q + re + ch * sin_rest + cl * zh)
    c_hi, c_lo, s_hi, s_lo = _tiny_angles(whole, frac, tc, (c_hi, c_lo, s_hi, s_lo))
    if amplitude != 1.0:
        c_hi, c_lo = _scale(c_hi, c_lo, amplitude)
        s_hi, s_lo = _scale(s_hi, s_lo, amplitude)
    return c_hi, c_lo, s_hi, s_lo


def _tiny_angles(whole, frac, tc: TurnConstants, parts):
    r"""Replace the entries whose angle :math:`|z| = |p\,\omega| < 2^{-64}` by :math:`\sin z = z`,
    :math:`\cos z = 1` (the next terms, :math:`z^3/6` and :math:`z^2/2`, are below :math:`2^{-128}`
    relative: they cannot move the rounding by more than a tiny fraction of an ulp).

    The turn digits hold :math:`p\,u` to :math:`2^{-139}` *absolute*, nothing for such angles
    (:math:`\sin(10^{-300})` came out 0). Here :math:`z` is the double-double product of the
    position with the exact frequency scaled by :math:`2^{S}`, then scaled back: exact for normal
    results, one rounding (half an ulp) for subnormal ones. Only frequencies below :math:`2^{-60}`
    can give such angles; for every other table this is a no-op.
    """
    cols = np.flatnonzero(tc.w_hi)
    if cols.size == 0:
        return parts
    c_hi, c_lo, s_hi, s_lo = (a.copy() for a in parts)
    p = whole.astype(np.float64)[:, None]  # exact: |p| < 2^53
    zh, zl = two_prod(p, tc.w_hi[cols])
    zl = zl + p * tc.w_lo[cols]
    if frac is not None:
        fh, fl = two_prod(frac[:, None], tc.w_hi[cols])
        zh, zl2 = two_sum(zh, fh)
        zl = zl + zl2 + fl + frac[:, None] * tc.w_lo[cols]
    zh, zl = fast_two_sum(zh, zl)
    tiny = np.abs(zh) < np.ldexp(_TINY, _TINY_SCALE)
    if not tiny.any():
        return parts
    z_hi, z_lo = np.ldexp(zh, -_TINY_SCALE), np.ldexp(zl, -_TINY_SCALE)
    for dst, value in ((c_hi, 1.0), (c_lo, 0.0), (s_hi, z_hi), (s_lo, z_lo)):
        block = dst[:, cols]
        block[tiny] = np.broadcast_to(value, tiny.shape)[tiny]
        dst[:, cols] = block
    return c_hi, c_lo, s_hi, s_lo


def _scale(hi, lo, factor: float):
    p, e = two_prod(hi, factor)
    return p, e + lo * factor


def _run(pos: Positions, tc: TurnConstants, amplitude: float, *, rounded: bool):
    """:func:`_kernel` over chunks of rows: ``(c_hi, c_lo, s_hi, s_lo)``, or the rounded ``(cos, sin)``,
    each of shape ``pos.shape + (n,)``."""
    n = tc.size
    whole = pos.whole.reshape(-1)
    frac = None if pos.frac is None else pos.frac.reshape(-1)
    if frac is not None and n and np.abs(tc.u_hi).max() >= 2.0 ** 57:
        raise ValueError("non-integer positions need frequencies |w| < 2**60 (a larger w turns more than "
                         "2**57 times per unit position)")
    out = [np.empty((whole.size, n)) for _ in range(2 if rounded else 4)]
    rows = max(1, _CHUNK // max(n, 1))
    for start in range(0, whole.size, rows):
        sl = slice(start, start + rows)
        c_hi, c_lo, s_hi, s_lo = _kernel(whole[sl], None if frac is None else frac[sl], tc, amplitude)
        parts = (c_hi + c_lo, s_hi + s_lo) if rounded else (*fast_two_sum(c_hi, c_lo), *fast_two_sum(s_hi, s_lo))
        for dst, src in zip(out, parts):
            dst[sl] = src
    return tuple(o.reshape(pos.shape + (n,)) for o in out)


def dd_cos_sin(pos: Positions, tc: TurnConstants, *,
               amplitude: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    r""":math:`f\cos(p\,\omega)` and :math:`f\sin(p\,\omega)` as double-doubles ``(c_hi, c_lo, s_hi, s_lo)``.

    Each has shape ``pos.shape + (n,)``; ``hi`` is the rounded value and ``hi + lo`` is within
    about :math:`2^{-67}` of the exact one (relative near the zeros). ``pos`` from
    :func:`positions`, ``tc`` from :func:`turn_constants`. Frequencies with
    :math:`|\omega| \ge 2^{60}` are refused for non-integer positions (the double-double
    product would lose the fraction).
    """
    return _run(pos, tc, amplitude, rounded=False)


def cos_sin(pos: Positions, tc: TurnConstants, *, amplitude: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """float64 ``amplitude * cos(p w)`` and ``amplitude * sin(p w)``, shape ``pos.shape + (n,)``:
    the double-doubles of :func:`dd_cos_sin` rounded once (within one ulp, almost always correctly rounded)."""
    return _run(pos, tc, amplitude, rounded=True)


def float32_split(pos: Positions, tc: TurnConstants) -> tuple[np.ndarray, np.ndarray]:
    r"""Tables built with float32 arithmetic only, from two small exact tables (angle addition).

    With :math:`p = a\,2^{12} + b`, :math:`0 \le b < 4096`:
    :math:`\cos p\omega = \cos A\cos B - \sin A\sin B`, :math:`\sin p\omega = \sin A\cos B + \cos A\sin B`,
    :math:`A = a 2^{12}\omega`, :math:`B = b\,\omega`. The small tables (the distinct :math:`b` and
    :math:`a` present) hold exact values rounded to float32; each entry then costs two float32
    products and one float32 sum, so the error does not grow with the position: at most
    :math:`4.83 \cdot 2^{-25} = 1.44 \cdot 10^{-7}` (five roundings of values up to 1; the measured
    maximum is in ``docs/precision.md``). Positions must be integers.
    """
    if pos.frac is not None:
        raise ValueError("method='float32-split' needs integer positions (it splits p = a*4096 + b)")
    whole = pos.whole.reshape(-1)
    low = whole & 4095

    def small_table(p):  # exact values at the distinct p, rounded to float32, gathered back
        values, index = np.unique(p, return_inverse=True)
        c, s = cos_sin(Positions(values, None), tc)
        return c.astype(np.float32)[index], s.astype(np.float32)[index]

    (ca, sa), (cb, sb) = small_table(whole - low), small_table(low)
    cos = ca * cb - sa * sb
    sin = sa * cb + ca * sb
    return cos.reshape(pos.shape + (tc.size,)), sin.reshape(pos.shape + (tc.size,))
