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

:func:`attention` is ALiBi attention built on :func:`posenc_np.attention.forward` with a
materialised bias (the NumPy reference); :func:`attention_backward` is its gradient with
respect to ``q``, ``k`` and ``v`` (slopes are fixed, not learned).
"""

from __future__ import annotations

import numpy as np

from . import attention as _attn
from ._checks import as_float_array, check_alloc, check_bool, check_choice, check_float_dtype, check_int, check_real

__all__ = ["BACKENDS", "FORMS", "MAX_BIAS_BYTES", "attention", "attention_backward", "bias", "slopes"]

FORMS = ("causal", "symmetric", "bloom")
BACKENDS = ("auto", "numpy", "numba")
#: Memory budget of the materialised ALiBi bias, in bytes (1 GiB): :func:`bias` refuses a
#: ``(heads, q_len, k_len)`` result larger than this, and the NumPy path of :func:`attention`
#: refuses inputs whose ``(..., heads, q_len, k_len)`` scores would be larger (that path holds
#: several arrays of that size at once, so its peak is a few times the budget). The fused
#: kernel (``backend="numba"``) never materialises either and has no such limit.
MAX_BIAS_BYTES = 1 << 30
#: Largest query-key distance whose float value is exact, by dtype the positions are computed in.
_EXACT_DISTANCE = {np.dtype(np.float16): 2**11, np.dtype(np.float32): 2**24, np.dtype(np.float64): 2**53}


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
        Number of heads :math:`n \ge 1`; any positive count.
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
    """
    num_heads = check_int(num_heads, "num_heads", minimum=1)
    check_alloc((num_heads,), np.float64, "slopes (num_heads,)")
    return _slopes(num_heads, check_real(max_bias, "max_bias", positive=True))


def _slopes(n: int, b: float) -> np.ndarray:
    # (the public name ``slopes`` is shadowed by the argument of the same name below)
    p = 1 << (n.bit_length() - 1)  # largest power of two <= n, computed without log2
    first = np.arange(1, p + 1, dtype=np.float64) / p  # exponents h / p
    extra = np.arange(1, 2 * (n - p), 2, dtype=np.float64) / (2 * p)  # (2j + 1) / (2p)
    return np.exp2(-b * np.concatenate([first, extra]))


def _max_distance(q_len: int, k_len: int, q_offset: int) -> int:
    """Largest ``|p_i - j|`` over queries ``p_i = i + q_offset`` (``i < q_len``) and keys ``j < k_len``."""
    if q_len == 0 or k_len == 0:
        return 0
    return max(abs(q_offset + q_len - 1), abs(q_offset - (k_len - 1)))


def _check_distances(q_len: int, k_len: int, q_offset: int, dtype) -> None:
    """Every query-key distance must be an exact integer in ``dtype`` (where positions are computed).

    Past that, neighbouring positions round to the same value and the bias silently loses
    them (float32 beyond 2^24; a float32 ALiBi at q_offset 2^24 differed from float64 by 0.58).
    """
    limit = _EXACT_DISTANCE[np.dtype(dtype)]
    dist = _max_distance(q_len, k_len, q_offset)
    if dist > limit:
        raise ValueError(f"q_offset={q_offset} with q_len={q_len}, k_len={k_len} puts a query {dist} positions from a "
                         f"key, more than {np.dtype(dtype)} represents exactly ({limit}); positions would round "
                         f"together. Use float64, or shift q_offset and the keys together (the causal and symmetric "
                         f"forms depend only on the distance)")


def _check_slopes(slopes_, num_heads: int) -> np.ndarray:
    arr = as_float_array(slopes_, "slopes")
    if arr.shape != (num_heads,):
        raise ValueError(f"slopes must have shape (num_heads,) = ({num_heads},), got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError("slopes must be finite (no NaN or inf)")
    if np.any(arr < 0):
        raise ValueError(f"slopes must be >= 0 (a negative slope flips the sign convention), "
                         f"got {float(arr[arr < 0][0])}")
    return arr


def bias(num_heads: int, q_len: int, k_len: int | None = None, *, form: str = "causal", slopes=None,
         q_offset: int = 0, dtype=None) -> np.ndarray:
    r"""The ALiBi bias, ``(num_heads, q_len, k_len)``, to add to the scaled logits.

    Query ``i`` sits at position :math:`q = i + \text{q\_offset}`, key ``j`` at :math:`k = j`:

    - ``causal``: :math:`B_{h,i,j} = -m_h (q - k)` (positive at future keys; mask them);
    - ``symmetric``: :math:`B_{h,i,j} = -m_h |k - q|`;
    - ``bloom``: :math:`B_{h,i,j} = m_h k` (independent of the query; equal to ``causal``
      after a per-row softmax).

    ``q_offset`` places the queries at the end of a longer key sequence, as when decoding
    with a KV cache: ``bias(H, c, K, q_offset=K - c)`` equals the last ``c`` rows of
    ``bias(H, K, K)``.

    Parameters
    ----------
    num_heads : int
        Heads :math:`n \ge 1`.
    q_len : int
        Number of queries (>= 0).
    k_len : int, optional
        Number of keys; default ``q_offset + q_len`` (keys up to the last query).
    form : {"causal", "symmetric", "bloom"}
        Bias form, see above.
    slopes : array_like, optional
        ``(num_heads,)`` finite slopes >= 0; default :func:`slopes` ``(num_heads)``.
    q_offset : int
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
        query-key distance past 2^53 (not exact in float64, where positions are computed).
    """
    n = check_int(num_heads, "num_heads", minimum=1)
    check_alloc((n,), np.float64, "slopes (num_heads,)")
    q_len = check_int(q_len, "q_len", minimum=0)
    q_offset = check_int(q_offset, "q_offset")
    k_len = q_offset + q_len if k_len is None else check_int(k_len, "k_len", minimum=0)
    if k_len < 0:
        raise ValueError(f"k_len defaults to q_offset + q_len, which is {k_len} < 0; pass k_len explicitly")
    form = check_choice(form, "form", FORMS)
    if slopes is None:
        m = _slopes(n, 8.0)
        out_dtype = np.dtype(np.float64)
    else:
        m = _check_slopes(slopes, n)
        out_dtype = m.dtype
    if dtype is not None:
        out_dtype = check_float_dtype(dtype)
    _check_budget((n, q_len, k_len), out_dtype, "bias (num_heads, q_len, k_len)")
    _check_distances(q_len, k_len, q_offset, np.float64)
    return _bias(m, q_len, k_len, form, q_offset, out_dtype)


def _bias(m: np.ndarray, q_len: int, k_len: int, form: str, q_offset: int, dtype) -> np.ndarray:
    """:func:`bias` for checked arguments: slopes ``m`` ``(heads,)``, computed in float64, cast once."""
    m = m.astype(np.float64)[:, None, None]
    qpos = (np.arange(q_len, dtype=np.float64) + q_offset)[:, None]  # (q_len, 1)
    kpos = np.arange(k_len, dtype=np.float64)[None, :]  # (1, k_len)
    if form == "causal":
        out = m * (kpos - qpos)  # = -m (q - k)
    elif form == "symmetric":
        out = -m * np.abs(kpos - qpos) + 0.0  # "+ 0.0" turns the diagonal's -0.0 into 0.0
    else:  # bloom: key position only, identical for every query row
        out = np.broadcast_to(m * kpos, (m.shape[0], q_len, k_len))
    return np.ascontiguousarray(out, dtype=dtype)


def _check_budget(shape, dtype, what: str) -> None:
    check_alloc(shape, dtype, what, limit=MAX_BIAS_BYTES, limit_name="MAX_BIAS_BYTES",
                hint="use a shorter query block (q_offset), or the fused kernel (backend='numba')")


# --------------------------------------------------------------------------- attention

#: dtypes the fused kernel takes (by name; bfloat16 is ``ml_dtypes.bfloat16``), and those of the
#: NumPy path (which computes in the inputs' dtype). bfloat16 goes to the kernel only.
_KERNEL_DTYPES = ("float16", "bfloat16", "float32", "float64")


def _check_qkv(q, k, v):
    """:func:`posenc_np.attention`'s checks, except that ``k``/``v`` may have fewer heads than
    ``q`` (a divisor: grouped-query attention, 1 = multi-query). Returns ``(q, k, v, group)``
    in their common dtype (bfloat16 arrays, which NumPy cannot promote, must all be bfloat16)."""
    names = ("q", "k", "v")
    arrays = [np.asarray(x) for x in (q, k, v)]
    bf16 = [a.dtype.name == "bfloat16" for a in arrays]
    if any(bf16) and not all(bf16):
        raise TypeError(f"q, k, v must all be bfloat16 when one is, got {', '.join(str(a.dtype) for a in arrays)}")
    if not any(bf16):
        arrays = [as_float_array(a, name) for a, name in zip(arrays, names)]
    for a, name in zip(arrays, names):
        if a.ndim < 3:
            raise ValueError(f"{name} must have at least 3 dimensions (..., heads, len, d), got shape {a.shape}")
    q, k, v = arrays
    heads, kv_heads = q.shape[-3], k.shape[-3]
    if (q.shape[:-3] != k.shape[:-3] or k.shape[:-1] != v.shape[:-1] or (kv_heads == 0) != (heads == 0)
            or (kv_heads and heads % kv_heads)):
        raise ValueError(f"q, k, v must be (..., heads, q_len, d), (..., kv_heads, k_len, d), (..., kv_heads, k_len, "
                         f"d_v) with matching leading axes, k/v lengths, and heads a multiple of kv_heads "
                         f"(grouped-query attention); got q {q.shape}, k {k.shape}, v {v.shape}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share the last axis d; got q {q.shape}, k {k.shape}")
    if not any(bf16):
        dtype = np.result_type(q, k, v)
        q, k, v = (a.astype(dtype, copy=False) for a in (q, k, v))
    return q, k, v, (heads // kv_heads if kv_heads else 1)


def _resolve_backend(backend, q, k) -> str:
    """Pick the implementation for :func:`attention`; the one place that decides.

    ``"numpy"``: the reference with a materialised bias (not bfloat16). ``"numba"``: the fused,
    tiled kernel (:mod:`posenc_np.kernels.alibi`; float16, bfloat16, float32, float64; it
    splits long key ranges over threads by itself when there are few queries, as in decoding).
    ``"auto"``: the kernel when the dtype allows it and ``max(q_len, k_len) >=
    ALIBI_NUMBA_MIN_T`` (measured crossover, see ``docs/benchmarks.md``), and always for
    bfloat16; NumPy below. Numba is imported only when the kernel is chosen.
    """
    backend = check_choice(backend, "backend", BACKENDS)
    bf16 = q.dtype.name == "bfloat16"
    if backend == "numpy":
        if bf16:
            raise TypeError("backend='numpy' cannot compute in bfloat16 (NumPy has no bfloat16 arithmetic); use "
                            "backend='numba' or 'auto', or cast to float32")
        return "numpy"
    kernel_dtype = q.dtype.name in _KERNEL_DTYPES
    if backend == "numba":
        if not kernel_dtype:
            raise TypeError(f"backend='numba' needs float16, bfloat16, float32 or float64 inputs, got {q.dtype}")
        return "numba"
    from .kernels import ALIBI_NUMBA_MIN_T  # does not import Numba

    if bf16:
        return "numba"
    return "numba" if kernel_dtype and max(q.shape[-2], k.shape[-2]) >= ALIBI_NUMBA_MIN_T else "numpy"


def _forward_numpy(q, k, v, m, causal, scale, group):
    q_len, k_len = q.shape[-2], k.shape[-2]
    _check_budget(q.shape[:-1] + (k_len,), q.dtype, "scores (..., heads, q_len, k_len) of the NumPy path")
    form = "causal" if causal else "symmetric"
    # Bottom-right alignment, as in posenc_np.attention: query i is at position i + k_len - q_len.
    b = _bias(m, q_len, k_len, form, k_len - q_len, q.dtype)
    if group > 1:  # grouped-query: each key/value head serves `group` query heads
        k, v = np.repeat(k, group, axis=-3), np.repeat(v, group, axis=-3)
    out, inner = _attn.forward(q, k, v, bias=b, causal=causal, scale=scale)
    return out, {"attention": inner, "group": group}


def _group_sum(g, group):
    """Sum the gradients of each group of ``group`` query heads into their key/value head."""
    if group == 1:
        return g
    return g.reshape(g.shape[:-3] + (g.shape[-3] // group, group) + g.shape[-2:]).sum(axis=-3)


def _backward_numpy(dout, inner):
    grads = _attn.backward(dout, inner["attention"])
    return {"q": grads["q"], "k": _group_sum(grads["k"], inner["group"]), "v": _group_sum(grads["v"], inner["group"])}


def _forward_numba(q, k, v, m, causal, scale, group):
    from .kernels.alibi import alibi_attention_forward

    # q_offset=None is the same bottom-right alignment as the NumPy path.
    out, lse = alibi_attention_forward(q, k, v, m, causal=causal, scale=scale)
    return out, {"q": q, "k": k, "v": v, "out": out, "lse": lse, "slopes": m, "causal": causal, "scale": scale}


def _backward_numba(dout, inner):
    from .kernels.alibi import alibi_attention_backward

    dq, dk, dv = alibi_attention_backward(dout, inner["q"], inner["k"], inner["v"], inner["out"], inner["lse"],
                                          inner["slopes"], causal=inner["causal"], scale=inner["scale"])
    return {"q": dq, "k": dk, "v": dv}


#: Forward/backward implementations by resolved backend name.
_FORWARD = {"numpy": _forward_numpy, "numba": _forward_numba}
_BACKWARD = {"numpy": _backward_numpy, "numba": _backward_numba}


def attention(q, k, v, *, slopes=None, causal: bool = True, scale=None, backend: str = "auto"):
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
        ``"numpy"`` is the reference with a materialised ``(heads, q_len, k_len)`` bias;
        ``"numba"`` the fused kernel (online softmax, never materialises the bias or the
        scores; float16/bfloat16/float32/float64; long key ranges with few queries are split
        over threads and combined exactly); ``"auto"`` the kernel from
        ``posenc_np.kernels.alibi.ALIBI_NUMBA_MIN_T`` positions up (and for bfloat16), NumPy below.

    Returns
    -------
    out : ndarray ``(..., heads, q_len, d_v)``
    cache : dict
        For :func:`attention_backward`; ``cache["backend"]`` names the implementation used.
    """
    q, k, v, group = _check_qkv(q, k, v)
    causal = check_bool(causal, "causal")
    scale = _attn._check_scale(scale, q.shape[-1])
    heads = q.shape[-3]
    if slopes is not None:
        m = _check_slopes(slopes, heads)
    else:  # no heads (a zero-size axis): nothing to bias
        m = _slopes(heads, 8.0) if heads else np.zeros(0)
    resolved = _resolve_backend(backend, q, k)
    out, inner = _FORWARD[resolved](q, k, v, m, causal, scale, group)
    return out, {"backend": resolved, "inner": inner}


def attention_backward(dout, cache) -> dict:
    r"""Gradient of :func:`attention`: ``{"q", "k", "v"}``.

    The bias is constant (slopes are not learned), so the gradient is that of plain
    attention: :math:`dV = P^\top G`, :math:`dS = P \odot (G V^\top - \mathrm{rowsum}(\cdot))`,
    :math:`dQ = s\,dS\,K`, :math:`dK = s\,dS^\top Q` (see :func:`posenc_np.attention.backward`).
    Dispatches on ``cache["backend"]``.
    """
    if not isinstance(cache, dict) or "backend" not in cache or "inner" not in cache:
        raise TypeError("cache must be the dict returned by posenc_np.alibi.attention")
    backend = cache["backend"]
    if backend not in _BACKWARD:
        raise ValueError(f"cache was produced by backend {backend!r}, which has no backward here "
                         f"(known: {sorted(_BACKWARD)})")
    return _BACKWARD[backend](dout, cache["inner"])
