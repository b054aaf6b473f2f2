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
from ._checks import check_choice, check_real
from ._attention_checks import (check_alibi_attention, check_alibi_bias, check_alibi_cache, check_bias_budget,
                                check_num_heads, check_qk_heads, check_slopes)
from .attention import Hook
from .positions import _grid

__all__ = ["BACKENDS", "FORMS", "MAX_BIAS_BYTES", "ALiBiBias", "attention", "attention_backward", "bias", "slopes"]

FORMS = ("causal", "symmetric", "bloom")
BACKENDS = ("auto", "numpy", "numba")
#: Memory budget of the materialised ALiBi bias, in bytes (1 GiB): :func:`bias` refuses a
#: ``(heads, q_len, k_len)`` result larger than this, and the NumPy path of :func:`attention`
#: refuses inputs whose ``(..., heads, q_len, k_len)`` scores would be larger (that path holds
#: several arrays of that size at once, so its peak is a few times the budget). The fused
#: kernel (``backend="numba"``) never materialises either and has no such limit.
MAX_BIAS_BYTES = 1 << 30


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
    return _slopes(check_num_heads(num_heads), check_real(max_bias, "max_bias", positive=True))


def _slopes(n: int, b: float) -> np.ndarray:
    # (the public name ``slopes`` is shadowed by the argument of the same name below)
    p = 1 << (n.bit_length() - 1)  # largest power of two <= n, computed without log2
    first = np.arange(1, p + 1, dtype=np.float64) / p  # exponents h / p
    extra = np.arange(1, 2 * (n - p), 2, dtype=np.float64) / (2 * p)  # (2j + 1) / (2p)
    return np.exp2(-b * np.concatenate([first, extra]))


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
    n, q_len, k_len, form, m, q_offset, dtype = check_alibi_bias(num_heads, q_len, k_len, form, FORMS, slopes, q_offset,
                                                                 dtype, MAX_BIAS_BYTES)
    return _bias(_slopes(n, 8.0) if m is None else m, q_len, k_len, form, q_offset, dtype)


def _bias(m: np.ndarray, q_len: int, k_len: int, form: str, q_offset: int, dtype) -> np.ndarray:
    r""":math:`B_{h,i,j}` for checked arguments: slopes ``m`` ``(heads,)``; with
    :math:`r_{ij} = j - (i + \text{q\_offset})` (:mod:`posenc_np.positions`), ``causal``
    :math:`m_h r_{ij}`, ``symmetric`` :math:`-m_h |r_{ij}|`, ``bloom`` :math:`m_h j`; computed in
    float64, cast once."""
    m = m.astype(np.float64)[:, None, None]
    if form == "bloom":  # key position only, identical for every query row
        kpos = np.arange(k_len, dtype=np.float64)[None, :]
        return np.ascontiguousarray(np.broadcast_to(m * kpos, (m.shape[0], q_len, k_len)), dtype=dtype)
    r = _grid(q_len, k_len, q_offset, np.float64)  # key - query, exact: distances <= 2^53
    out = m * r if form == "causal" else -m * np.abs(r) + 0.0  # "+ 0.0" turns the diagonal's -0.0 into 0.0
    return np.ascontiguousarray(out, dtype=dtype)


class ALiBiBias(Hook):
    r"""ALiBi as an attention hook: adds :func:`bias` (``form``, bottom-right aligned: query ``i``
    at ``i + k_len - q_len``) to the scaled logits; nothing is learned.

    ``attention.forward(q, k, v, causal=True, hooks=[ALiBiBias(heads)])`` is the reference of
    :func:`attention` (which uses this hook on its NumPy path, and the fused kernel otherwise).

    Parameters
    ----------
    num_heads : int
    form : {"causal", "symmetric", "bloom"}
        ``causal`` for a decoder (with ``causal=True``), ``symmetric`` for an encoder.
    slopes : array_like, optional
        ``(num_heads,)`` finite slopes >= 0; default :func:`slopes` ``(num_heads)``.
    """

    def __init__(self, num_heads: int, *, form: str = "causal", slopes=None):
        num_heads, form = check_num_heads(num_heads), check_choice(form, "form", FORMS)
        self._set(_slopes(num_heads, 8.0) if slopes is None else check_slopes(slopes, num_heads), form)

    def _set(self, slopes: np.ndarray, form: str) -> None:
        self.num_heads, self.slopes, self.form = slopes.size, slopes, form
        self.params, self.grads = {}, {}

    @classmethod
    def _from_checked(cls, slopes: np.ndarray, form: str) -> ALiBiBias:
        """The hook for slopes and form already checked (zero heads included)."""
        hook = cls.__new__(cls)
        hook._set(slopes, form)
        return hook

    def logits(self, q, k, scale, mask=None):
        """Hook: the bias ``(heads, q_len, k_len)`` in ``q``'s dtype (not multiplied by ``scale``)."""
        q, k, scale, mask = check_qk_heads(q, k, scale, mask, self.num_heads, None)
        check_bias_budget(q.shape[:-1] + (k.shape[-2],), q.dtype, "scores (..., heads, q_len, k_len)", MAX_BIAS_BYTES)
        return _bias(self.slopes, q.shape[-2], k.shape[-2], self.form, k.shape[-2] - q.shape[-2], q.dtype), None


# --------------------------------------------------------------------------- attention

#: dtypes the fused kernel takes (by name; bfloat16 is ``ml_dtypes.bfloat16``), and those of the
#: NumPy path (which computes in the inputs' dtype). bfloat16 goes to the kernel only.
_KERNEL_DTYPES = ("float16", "bfloat16", "float32", "float64")


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
    check_bias_budget(q.shape[:-1] + (k_len,), q.dtype, "scores (..., heads, q_len, k_len) of the NumPy path",
                      MAX_BIAS_BYTES)
    if group > 1:  # grouped-query: each key/value head serves `group` query heads
        k, v = np.repeat(k, group, axis=-3), np.repeat(v, group, axis=-3)
    hook = ALiBiBias._from_checked(m, "causal" if causal else "symmetric")
    out, inner = _attn._forward(q, k, v, None, _attn._keep(None, causal, q_len, k_len), scale, (hook,))
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
    q, k, v, group, m, causal, scale = check_alibi_attention(q, k, v, slopes, causal, scale)
    heads = q.shape[-3]
    if m is None:  # (no heads, a zero-size axis: nothing to bias)
        m = _slopes(heads, 8.0) if heads else np.zeros(0)
    return _attention(q, k, v, m, causal, scale, backend, group)


def _attention(q, k, v, m: np.ndarray, causal: bool, scale: float, backend: str, group: int = 1):
    """The body of :func:`attention` for checked arguments (slopes ``m``, ``group`` query heads per
    key/value head)."""
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
    backend, inner = check_alibi_cache(cache, _BACKWARD)
    return _BACKWARD[backend](dout, inner)
