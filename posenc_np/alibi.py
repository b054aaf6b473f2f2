r"""ALiBi: attention with linear biases (Press, Smith & Lewis 2022, "Train Short, Test Long",
ICLR 2022, arXiv:2108.12409).

ALiBi adds no position vectors. Each head :math:`h` adds a fixed linear penalty to the
*scaled* attention logits (after :math:`1/\sqrt{d}`):

.. math::

    S_{h,q,k} = \frac{\langle Q_q, K_k\rangle}{\sqrt{d}} + B_{h,q,k}, \qquad
    B_{h,q,k} = -m_h\,(q - k) \quad (k \le q,\ \text{future keys masked}).

Slopes (paper, sec. 3 and its reference code): for :math:`n` a power of two,
:math:`m_h = 2^{-8h/n}`, :math:`h = 1 \dots n` (a geometric sequence starting and
stepping by :math:`2^{-8/n}`). Otherwise, with :math:`p = 2^{\lfloor \log_2 n \rfloor}`, the
first :math:`p` slopes are those of :math:`p` heads and the remaining :math:`n - p` are every
other slope of :math:`2p` heads: ``slopes(p) + slopes(2p)[0::2][:n-p]``. The result is
deliberately not monotone (n = 12 ends with 0.7071, 0.3536, 0.1768, 0.0884).

Bias forms (``form=``), with query position :math:`q` and key position :math:`k`:

==============  ==========================  =============================================
form            :math:`B_{h,q,k}`           use
==============  ==========================  =============================================
``causal``      :math:`-m_h (q - k)`        the paper's figure 3; decoder with causal mask
``symmetric``   :math:`-m_h |k - q|`        bidirectional (MPT ``full``, encoders)
``bloom``       :math:`+m_h\,k`             BLOOM ``build_alibi_tensor``, the paper's code
==============  ==========================  =============================================

``bloom`` differs from ``causal`` by :math:`m_h q`, a constant along each query row; softmax
is shift-invariant per row, so the two give identical attention after a causal softmax.
Masking is the attention's job: :func:`bias` returns finite values everywhere, including
the positive ``causal`` values at future keys.

:func:`attention` is ALiBi attention: the attention core with a materialised bias (the NumPy
reference) or the fused Numba kernel (:mod:`posenc_np.kernels.alibi`), chosen by the one backend
rule (:mod:`posenc_np._backend`); :func:`attention_backward` is its gradient with respect to
``q``, ``k`` and ``v`` (slopes are fixed, not learned).

The doors ``slopes``, ``bias``, ``attention`` check their arguments and call the cores
:func:`geometric_slopes`, :func:`linear_bias`, :func:`attend`, which the model and hooks call.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from . import attention as _attention
from ._backend import ALIBI_NUMBA_MIN_T, choose, kernels
from ._checks import (MAX_ALLOC_BYTES, as_float_array, check_alloc, check_bool, check_choice, check_exact_distances,
                      check_float_dtype, check_grouped_heads, check_int, check_real, check_slopes, require)
from .attention import Hook, check_hook_args, logit_scale
from .positions import relative_grid

__all__ = ["FORMS", "MAX_BIAS_BYTES", "MAX_HEADS", "ALiBiBias", "attend", "attention", "attention_backward", "bias",
           "geometric_slopes", "linear_bias", "slopes"]

FORMS = ("causal", "symmetric", "bloom")
#: Memory budget of the materialised ALiBi bias, in bytes (1 GiB): :func:`bias` refuses a
#: ``(heads, q_len, k_len)`` result larger than this, and the NumPy path of :func:`attention`
#: refuses inputs whose ``(..., heads, q_len, k_len)`` scores would be larger (that path holds
#: several arrays of that size at once, so its peak is a few times the budget). The fused
#: kernel (``backend="numba"``) never materialises either and has no such limit.
MAX_BIAS_BYTES = 1 << 30
#: Largest head count: the ``(num_heads,)`` float64 slopes stay within ``MAX_ALLOC_BYTES``.
MAX_HEADS = MAX_ALLOC_BYTES // 8
#: dtypes the fused kernel takes (by name; bfloat16 is ``ml_dtypes.bfloat16``); the NumPy path
#: computes in the inputs' dtype and has no bfloat16.
_KERNEL_DTYPES = ("float16", "bfloat16", "float32", "float64")


def _check_budget(shape: tuple, dtype, what: str) -> None:
    """A materialised bias or score array within :data:`MAX_BIAS_BYTES` (the doors of this module share it)."""
    check_alloc(shape, dtype, what, limit=MAX_BIAS_BYTES, limit_name="MAX_BIAS_BYTES",
                hint="use a shorter query block (query_offset), or the fused kernel (backend='numba')")


def slopes(num_heads: int, *, max_bias: float = 8.0) -> np.ndarray:
    r"""Per-head ALiBi slopes :math:`m_h`, float64 ``(num_heads,)``.

    With :math:`p = 2^{\lfloor \log_2 n \rfloor}` and :math:`b` = ``max_bias``:

    .. math::

        m_h = 2^{-b h / p} \quad (h = 1 \dots p), \qquad
        m_{p + j} = 2^{-b (2j + 1) / (2p)} \quad (j = 0 \dots n - p - 1).

    The second line is the paper's ``slopes(2p)[0::2][:n-p]`` written out: every other
    slope of :math:`2p` heads, starting with the first. For a power of two it reduces to
    :math:`2^{-bh/n}`.

    Parameters
    ----------
    num_heads : int
        Number of heads :math:`1 \le n \le` :data:`MAX_HEADS`; any positive count.
    max_bias : float
        :math:`b > 0`, 8 in the paper. This is MPT's ``alibi_bias_max``: MPT's
        ``gen_slopes`` computes :math:`2^{-b h/N}` for :math:`N = 2^{\lceil \log_2 n \rceil}`
        and takes ``concat(s[1::2], s[::2])[:n]``, which is the same set and order as the
        rule above, so no separate MPT mode is needed.

    Returns
    -------
    ndarray, float64, shape ``(num_heads,)``

    References
    ----------
    Press et al. 2022, sec. 3; ``get_slopes`` in ofirpress/attention_with_linear_biases.

    Examples
    --------
    >>> from posenc_np import alibi
    >>> alibi.slopes(8).tolist()          # 2**(-8 h / 8) = 1/2, 1/4, ..., 1/256
    [0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625]
    >>> alibi.slopes(12).round(4).tolist()[8:]   # slopes(8), then every other slope of 16 heads
    [0.7071, 0.3536, 0.1768, 0.0884]
    >>> alibi.slopes(4, max_bias=4.0).tolist()   # 2**(-4 h / 4)
    [0.5, 0.25, 0.125, 0.0625]
    """
    n = check_int(num_heads, "num_heads", minimum=1, maximum=MAX_HEADS)
    max_bias = check_real(max_bias, "max_bias", positive=True)
    return geometric_slopes(n, max_bias)


def geometric_slopes(n: int, max_bias: float = 8.0) -> np.ndarray:
    r"""The ALiBi slopes of :func:`slopes` for ``n >= 1`` heads: :math:`2^{-bh/p}` for
    :math:`h = 1 \dots p` then :math:`2^{-b(2j+1)/(2p)}`, :math:`p = 2^{\lfloor \log_2 n \rfloor}`.

    Core of :func:`slopes`; arguments are not checked.

    Examples
    --------
    >>> from posenc_np import alibi
    >>> alibi.geometric_slopes(3).tolist()   # p = 2: 2**-4, 2**-8, then 2**(-8 * 1 / 4)
    [0.0625, 0.00390625, 0.25]
    """
    p = 1 << (n.bit_length() - 1)  # largest power of two <= n, computed without log2
    first = np.arange(1, p + 1, dtype=np.float64) / p  # exponents h / p
    extra = np.arange(1, 2 * (n - p), 2, dtype=np.float64) / (2 * p)  # (2j + 1) / (2p)
    return np.exp2(-max_bias * np.concatenate([first, extra]))


def bias(num_heads: int, q_len: int, k_len: int | None = None, *, form: str = "causal", slopes: ArrayLike | None = None,
         query_offset: int = 0, dtype: DTypeLike | None = None) -> np.ndarray:
    r"""The ALiBi bias, ``(num_heads, q_len, k_len)``, to add to the scaled logits.

    Query ``i`` sits at position :math:`q = i + \text{query\_offset}`, key ``j`` at :math:`k = j`;
    the forms are the module docstring's table (``causal`` is positive at future keys: mask them).
    ``query_offset`` places the queries at the end of a longer key sequence, as when decoding
    with a KV cache: ``bias(H, c, K, query_offset=K - c)`` equals the last ``c`` rows of
    ``bias(H, K, K)``.

    Parameters
    ----------
    num_heads : int
        Heads :math:`n \ge 1`.
    q_len : int
        Number of queries (>= 0).
    k_len : int, optional
        Number of keys; default ``query_offset + q_len`` (keys up to the last query).
    form : {"causal", "symmetric", "bloom"}
        Bias form, see above.
    slopes : array_like, optional
        ``(num_heads,)`` finite slopes >= 0; default :func:`slopes` ``(num_heads)``.
    query_offset : int
        Position of the first query (may be negative).
    dtype : floating dtype, optional
        Output dtype; default the dtype of ``slopes`` when it is a float array, else
        float64. Values are computed in float64 and cast once.

    Returns
    -------
    ndarray, shape ``(num_heads, q_len, k_len)``

    Raises
    ------
    ValueError
        For a bias of more than :data:`MAX_BIAS_BYTES` bytes (the sizes are named), or a
        query-key distance that is not an exact integer in ``dtype`` (past 2^11 in float16, 2^24
        in float32, 2^53 in float64): neighbouring positions would round to one bias value, so
        it is refused as the kernel refuses it.

    Examples
    --------
    >>> from posenc_np import alibi
    >>> alibi.bias(1, 3, slopes=[0.5]).tolist()   # causal: m (k - q), positive at future keys (mask them)
    [[[0.0, 0.5, 1.0], [-0.5, 0.0, 0.5], [-1.0, -0.5, 0.0]]]
    >>> alibi.bias(1, 2, 3, form="bloom", slopes=[0.5]).tolist()   # m k, the same for every query
    [[[0.0, 0.5, 1.0], [0.0, 0.5, 1.0]]]
    >>> alibi.bias(1, 1, 4, query_offset=3, slopes=[0.5]).tolist()   # one query at position 3 (decoding)
    [[[-1.5, -1.0, -0.5, 0.0]]]
    >>> alibi.bias(2, 2, form="symmetric").tolist()   # -m |k - q| with the default slopes 1/16, 1/256
    [[[0.0, -0.0625], [-0.0625, 0.0]], [[0.0, -0.00390625], [-0.00390625, 0.0]]]
    """
    n = check_int(num_heads, "num_heads", minimum=1, maximum=MAX_HEADS)
    q_len = check_int(q_len, "q_len", minimum=0)
    query_offset = check_int(query_offset, "query_offset")
    k_len = check_int(query_offset + q_len if k_len is None else k_len, "k_len", minimum=0)  # (the default too)
    form = check_choice(form, "form", FORMS)
    m = None if slopes is None else check_slopes(slopes, n)
    dtype = check_float_dtype(dtype) if dtype is not None else np.dtype(np.float64) if m is None else m.dtype
    _check_budget((n, q_len, k_len), dtype, "bias (num_heads, q_len, k_len)")
    check_exact_distances(q_len, k_len, query_offset, dtype)
    return linear_bias(geometric_slopes(n) if m is None else m, q_len, k_len, form, query_offset, dtype)


def linear_bias(m: np.ndarray, q_len: int, k_len: int, form: str, query_offset: int, dtype: DTypeLike) -> np.ndarray:
    r""":math:`B_{h,i,j}`, ``(heads, q_len, k_len)`` in ``dtype``, for slopes ``m`` ``(heads,)``: with
    :math:`r_{ij} = j - (i + \text{query\_offset})` (:func:`posenc_np.positions.relative_grid`),
    ``causal`` :math:`m_h r_{ij}`, ``symmetric`` :math:`-m_h |r_{ij}|`, ``bloom`` :math:`m_h j`;
    computed in float64, cast once.

    Core of :func:`bias`; arguments are not checked (every distance exact in float64).

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import alibi
    >>> alibi.linear_bias(np.array([0.5]), 2, 3, "causal", 1, np.float64).tolist()   # queries at 1 and 2
    [[[-0.5, 0.0, 0.5], [-1.0, -0.5, 0.0]]]
    >>> alibi.linear_bias(np.array([0.5]), 2, 3, "symmetric", 1, np.float32).dtype
    dtype('float32')
    """
    m = m.astype(np.float64)[:, None, None]
    if form == "bloom":  # key position only, identical for every query row
        kpos = np.arange(k_len, dtype=np.float64)[None, :]
        return np.ascontiguousarray(np.broadcast_to(m * kpos, (m.shape[0], q_len, k_len)), dtype=dtype)
    r = relative_grid(q_len, k_len, query_offset, np.float64)  # key - query, exact: distances <= 2^53
    out = m * r if form == "causal" else -m * np.abs(r) + 0.0  # "+ 0.0" turns the diagonal's -0.0 into 0.0
    return np.ascontiguousarray(out, dtype=dtype)


class ALiBiBias(Hook):
    r"""ALiBi as an attention hook: adds :func:`bias` (``form``, bottom-right aligned: query ``i``
    at ``i + k_len - q_len``) to the scaled logits; nothing is learned.

    ``attention.forward(q, k, v, causal=True, hooks=[ALiBiBias(heads)])`` equals :func:`attention`.

    Parameters
    ----------
    num_heads : int
    form : {"causal", "symmetric", "bloom"}
        ``causal`` for a decoder (with ``causal=True``), ``symmetric`` for an encoder.
    slopes : array_like, optional
        ``(num_heads,)`` finite slopes >= 0; default :func:`slopes` ``(num_heads)``.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import alibi, attention
    >>> q, k, v = np.random.default_rng(0).standard_normal((3, 1, 2, 3, 4))
    >>> out, _ = attention.forward(q, k, v, causal=True, hooks=[alibi.ALiBiBias(2)])
    >>> bool(np.allclose(out, alibi.attention(q, k, v)[0]))
    True
    >>> alibi.ALiBiBias(1, slopes=[0.5]).logits(q[:, :1], k[:, :1], 0.5)[0].tolist()   # the bias, as alibi.bias
    [[[0.0, 0.5, 1.0], [-0.5, 0.0, 0.5], [-1.0, -0.5, 0.0]]]
    """

    def __init__(self, num_heads: int, *, form: str = "causal", slopes: ArrayLike | None = None) -> None:
        self.num_heads = check_int(num_heads, "num_heads", minimum=1, maximum=MAX_HEADS)
        self.form = check_choice(form, "form", FORMS)
        self.slopes = geometric_slopes(self.num_heads) if slopes is None else check_slopes(slopes, self.num_heads)
        self.params, self.grads = {}, {}

    def logits(self, q: ArrayLike, k: ArrayLike, scale: float,
               mask: ArrayLike | None = None) -> tuple[np.ndarray | None, Any]:
        """Hook: the bias ``(heads, q_len, k_len)`` in ``q``'s dtype (not multiplied by ``scale``)."""
        q, k, scale, mask = check_hook_args(q, k, scale, mask, self.num_heads)
        _check_budget(q.shape[:-1] + (k.shape[-2],), q.dtype, "scores (..., heads, q_len, k_len)")
        return linear_bias(self.slopes, q.shape[-2], k.shape[-2], self.form, k.shape[-2] - q.shape[-2], q.dtype), None


# --------------------------------------------------------------------------- attention

def attention(q: ArrayLike, k: ArrayLike, v: ArrayLike, *, slopes: ArrayLike | None = None, causal: bool = True,
              scale: float | None = None, backend: str = "auto") -> tuple[np.ndarray, dict]:
    r"""Attention with ALiBi, forward: returns ``(out, cache)``.

    .. math::

        O = \mathrm{softmax}\Big(\frac{QK^\top}{\sqrt{d}} + B\Big) V

    with :math:`B` from :func:`bias`: ``causal=True`` uses the ``causal`` form and the
    causal mask, ``causal=False`` the ``symmetric`` form without a mask. Queries are aligned
    bottom-right like :func:`posenc_np.attention.forward`: query ``i`` is at position
    ``i + k_len - q_len`` (the last ``q_len`` positions, as when decoding with a cache).

    Parameters
    ----------
    q, k, v : ndarray
        ``(..., heads, q_len, d)``, ``(..., kv_heads, k_len, d)``, ``(..., kv_heads, k_len, d_v)``;
        ``kv_heads`` divides ``heads`` (grouped-query attention, 1 = multi-query: query head
        ``h`` uses key/value head ``h // (heads // kv_heads)``). float32 in gives float32 out;
        float16 and bfloat16 (``ml_dtypes.bfloat16``, kernel only) are computed in float32 by
        the kernel and returned in their dtype.
    slopes : array_like, optional
        ``(heads,)``; default :func:`slopes` ``(heads)``.
    causal : bool
        Decoder (``True``) or bidirectional (``False``) attention.
    scale : float, optional
        Logit scale, default :math:`1/\sqrt{d}`; the bias is added after it.
    backend : {"auto", "numpy", "numba"}
        ``"numpy"``: the reference, with a materialised bias; ``"numba"``: the fused kernel
        (:mod:`posenc_np.kernels.alibi`, never materialises bias or scores); ``"auto"``: the
        kernel from ``posenc_np._backend.ALIBI_NUMBA_MIN_T`` positions up and for bfloat16.

    Returns
    -------
    out : ndarray ``(..., heads, q_len, d_v)``
    cache : dict
        For :func:`attention_backward`; ``cache["backend"]`` names the implementation used.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import alibi, attention
    >>> q, k, v = np.random.default_rng(0).standard_normal((3, 1, 2, 3, 4))   # (batch, heads, len, d)
    >>> out, cache = alibi.attention(q, k, v)
    >>> out.shape, cache["backend"]   # 3 positions: the NumPy reference
    ((1, 2, 3, 4), 'numpy')
    >>> bool(np.allclose(out, attention.forward(q, k, v, bias=alibi.bias(2, 3), causal=True)[0]))
    True
    """
    bf16 = [isinstance(a, np.ndarray) and a.dtype.name == "bfloat16" for a in (q, k, v)]
    require(all(bf16) or not any(bf16), "q, k, v must all be bfloat16 when one is, got "
            f"{', '.join(str(np.asarray(a).dtype) for a in (q, k, v))}", TypeError)
    if not any(bf16):
        q = as_float_array(q, "q", ndim_min=3)
        k = as_float_array(k, "k", ndim_min=3)
        v = as_float_array(v, "v", ndim_min=3)
        q, k, v = (a.astype(np.result_type(q, k, v), copy=False) for a in (q, k, v))
    group = check_grouped_heads(q, k, v)
    m = None if slopes is None else check_slopes(slopes, q.shape[-3])
    causal = check_bool(causal, "causal")
    scale = logit_scale(scale, q.shape[-1])
    check_exact_distances(q.shape[-2], k.shape[-2], k.shape[-2] - q.shape[-2],
                          np.float64 if q.dtype == np.float64 else np.float32)
    if m is None:  # (no heads, a zero-size axis: nothing to bias)
        m = geometric_slopes(q.shape[-3]) if q.shape[-3] else np.zeros(0)
    return attend(q, k, v, m, causal, scale, backend, group)


def attend(q: np.ndarray, k: np.ndarray, v: np.ndarray, slopes: np.ndarray, causal: bool, scale: float, backend: str,
           group: int = 1) -> tuple[np.ndarray, dict]:
    r"""ALiBi attention ``(out, cache)``: the fused kernel or the attention core with a materialised bias.

    Core of :func:`attention`; arguments are not checked (``q``, ``k``, ``v`` in one dtype with
    ``group`` query heads per key/value head, ``slopes`` of the query heads). ``backend`` is
    resolved by :func:`posenc_np._backend.choose`: the kernel takes float16/bfloat16/float32/float64
    and wins from ``max(q_len, k_len) >= ALIBI_NUMBA_MIN_T`` (bfloat16 always goes to it); the NumPy
    path refuses scores past :data:`MAX_BIAS_BYTES`.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import alibi
    >>> q, k, v = np.random.default_rng(0).standard_normal((3, 1, 2, 3, 4))
    >>> out, cache = alibi.attend(q, k, v, alibi.slopes(2), True, 0.5, "numpy")
    >>> bool(np.allclose(out, alibi.attention(q, k, v)[0])), cache["backend"]   # attention's core
    (True, 'numpy')
    """
    q_len, k_len = q.shape[-2], k.shape[-2]
    bf16 = q.dtype.name == "bfloat16"
    impl = choose(backend, kernel_takes=q.dtype.name in _KERNEL_DTYPES,
                  large=bf16 or max(q_len, k_len) >= ALIBI_NUMBA_MIN_T,
                  kernel_needs=f"float16, bfloat16, float32 or float64 inputs, got {q.dtype}", numpy_takes=not bf16,
                  numpy_needs="cannot compute in bfloat16 (NumPy has no bfloat16 arithmetic); use backend='numba' "
                              "or 'auto', or cast to float32")
    if impl == "numba":  # the same bottom-right alignment as the NumPy path
        out, lse = kernels("alibi").fused_forward(q, k, v, slopes, causal, scale, k_len - q_len)
        return out, {"backend": impl, "inner": {"q": q, "k": k, "v": v, "out": out, "lse": lse, "slopes": slopes,
                                                "causal": causal, "scale": scale}}
    _check_budget(q.shape[:-1] + (k_len,), q.dtype, "scores (..., heads, q_len, k_len) of the NumPy path")
    if group > 1:  # grouped-query: each key/value head serves `group` query heads
        k, v = np.repeat(k, group, axis=-3), np.repeat(v, group, axis=-3)
    b = linear_bias(slopes, q_len, k_len, "causal" if causal else "symmetric", k_len - q_len, q.dtype)
    out, inner = _attention.attend(q, k, v, b, _attention.applied_mask(None, causal, q_len, k_len), scale, ())
    return out, {"backend": impl, "inner": {"attention": inner, "group": group}}


def _group_sum(g: np.ndarray, group: int) -> np.ndarray:
    """Sum the gradients of each group of ``group`` query heads into their key/value head."""
    if group == 1:
        return g
    return g.reshape(g.shape[:-3] + (g.shape[-3] // group, group) + g.shape[-2:]).sum(axis=-3)


def attention_backward(dout: ArrayLike, cache: dict) -> dict:
    r"""Gradient of :func:`attention`: ``{"q", "k", "v"}``.

    The bias is constant (slopes are not learned), so the gradient is that of plain
    attention: :math:`dV = P^\top G`, :math:`dS = P \odot (G V^\top - \mathrm{rowsum}(\cdot))`,
    :math:`dQ = s\,dS\,K`, :math:`dK = s\,dS^\top Q` (see :func:`posenc_np.attention.backward`).
    Dispatches on ``cache["backend"]`` to :func:`posenc_np.attention.backward` or the kernel's
    :func:`posenc_np.kernels.alibi.alibi_attention_backward`, which check ``dout``.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import alibi
    >>> q, k, v, w, d = np.random.default_rng(0).standard_normal((5, 1, 2, 3, 4))
    >>> loss = lambda q: float((alibi.attention(q, k, v)[0] * w).sum())   # L = sum(w * out)
    >>> dq = alibi.attention_backward(w, alibi.attention(q, k, v)[1])["q"]
    >>> bool(np.isclose((loss(q + 1e-6 * d) - loss(q - 1e-6 * d)) / 2e-6, (dq * d).sum()))   # along direction d
    True
    """
    require(isinstance(cache, dict) and {"backend", "inner"} <= cache.keys() and isinstance(cache["inner"], dict),
            "cache must be the dict returned by posenc_np.alibi.attention", TypeError)
    require(cache["backend"] in ("numpy", "numba"), f"cache was produced by backend {cache['backend']!r}, which has "
            "no backward here (known: 'numba', 'numpy')")
    inner = cache["inner"]
    if cache["backend"] == "numba":
        dq, dk, dv = kernels("alibi").alibi_attention_backward(
            dout, inner["q"], inner["k"], inner["v"], inner["out"], inner["lse"], inner["slopes"],
            causal=inner["causal"], scale=inner["scale"])
        return {"q": dq, "k": dk, "v": dv}
    grads = _attention.backward(dout, inner["attention"])
    return {"q": grads["q"], "k": _group_sum(grads["k"], inner["group"]), "v": _group_sum(grads["v"], inner["group"])}
