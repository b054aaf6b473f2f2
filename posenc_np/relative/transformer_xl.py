r"""Transformer-XL relative attention (Dai et al. 2019, "Transformer-XL: Attentive Language
Models Beyond a Fixed-Length Context", section 3.3, the "relative partial learnable" form).

For query :math:`i` and key :math:`j` with relative distance :math:`\Delta = p_i - p_j`,

.. math::

    S_{ij} = \frac{1}{\sqrt d}\Big[\underbrace{q_i^\top k_j}_{(a)} + \underbrace{u^\top k_j}_{(c)}
             + \underbrace{(q_i + v)^\top r_{\Delta}}_{(b)+(d)}\Big],
    \qquad r_{\Delta} = W_r^\top R_{\Delta},

per head, where :math:`u, v` are learned per-head vectors, :math:`W_r` a learned projection
and :math:`R_\Delta = [\sin(\Delta\omega_0) \dots \sin(\Delta\omega_{n-1}) \mid
\cos(\Delta\omega_0) \dots \cos(\Delta\omega_{n-1})]` the ``concat`` sinusoid of
:func:`posenc_np.absolute.sinusoidal` with the paper's :math:`\omega_i = \mathrm{base}^{-2i/d_r}`
(kimiyoung/transformer-xl ``PositionalEmbedding``: ``inv_freq = 1 / 10000 ** (arange(0, d, 2) / d)``,
``cat([sin, cos])``). All four terms share the :math:`1/\sqrt d` scale.

Alignment: key :math:`j` sits at position :math:`j`, query :math:`i` at position
:math:`i + (k_{len} - q_{len})` (the queries are the last positions, as with a memory or KV
cache), so :math:`\Delta_{ij} = i + k_{len} - q_{len} - j`, the same bottom-right alignment as
the attention core's causal mask. Transformer-XL is a causal model: the score is only defined
for :math:`\Delta \ge 0`; see :func:`rel_shift` for what the upper triangle holds and use
``causal=True``.

Instead of gathering :math:`r_{\Delta_{ij}}` per pair, Transformer-XL computes
:math:`X = (Q + v) [r_{k_{len}-1}, \dots, r_1, r_0]^\top` (distances in *descending* order,
shape ``(q_len, k_len)``) and realigns it with :func:`rel_shift`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .._checks import as_float_array, check_alloc, check_even, check_int, check_real, require
from .._util import memo_table, normal_init
from ..absolute import geometric_frequencies, sinusoid_rows
from ..attention import Hook, check_hook_args

__all__ = ["TransformerXLRelative", "rel_shift", "rel_shift_backward", "txl_relative_sinusoid", "txl_shift",
           "txl_shift_backward", "txl_sinusoid_table"]


def rel_shift(x: ArrayLike) -> np.ndarray:
    r"""Transformer-XL's relative shift on the last two axes (``_rel_shift`` in ``mem_transformer.py``).

    Pad one zero column on the left (``(Q, K) -> (Q, K+1)``), reinterpret the buffer as
    ``(K+1, Q)``, drop the first row (the first ``Q`` elements of the buffer) and
    reinterpret the rest as ``(Q, K)``. Written as a gather, with the flat position
    :math:`f = Q + iK + j` and :math:`(r, c) = \mathrm{divmod}(f, K+1)`:

    .. math::

        \mathrm{out}[i, j] = \begin{cases} 0 & c = 0 \\ x[r, c-1] & c > 0 \end{cases}

    In the lower region :math:`j \le i + (K - Q)` this is simply
    :math:`\mathrm{out}[i, j] = x[i,\ j + Q - 1 - i]`: if column :math:`m` of ``x`` holds
    relative distance :math:`K-1-m` (descending), ``out[i, j]`` holds distance
    :math:`i + K - Q - j = p_i - p_j` (bottom-right alignment). On the first superdiagonal
    :math:`j = i + K - Q + 1` the value is exactly 0 (the pad); further right it is
    :math:`x[i+1,\ j - i - (K - Q) - 2]`, a value from the *next* query row. Those entries
    are future keys, which Transformer-XL hides with its causal mask; they are garbage,
    not zeros.

    Parameters
    ----------
    x : array_like, shape ``(..., Q, K)``
        Any ``Q, K >= 0`` (Transformer-XL has ``K >= Q``).

    Returns
    -------
    ndarray, same shape and dtype as ``x`` (integers become float64).

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import transformer_xl as txl
    >>> x = np.array([[3.0, 2.0, 1.0], [3.0, 2.0, 1.0]])   # column m holds distance K-1-m, plus 1
    >>> txl.rel_shift(x).tolist()                           # out[i, j]: distance i + 1 - j, plus 1; 0 = the pad
    [[2.0, 1.0, 0.0], [3.0, 2.0, 1.0]]
    >>> txl.rel_shift(np.arange(1.0, 7.0).reshape(2, 3)).tolist()   # lower region: x[i, j + Q - 1 - i]
    [[2.0, 3.0, 0.0], [4.0, 5.0, 6.0]]
    """
    x = as_float_array(x, "x", ndim_min=2)
    return txl_shift(x)


def txl_shift(x: np.ndarray) -> np.ndarray:
    """Transformer-XL's relative shift of ``x`` ``(..., Q, K)``. Core of :func:`rel_shift`; not checked.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import transformer_xl as txl
    >>> txl.txl_shift(np.arange(1.0, 7.0).reshape(2, 3)).tolist()   # pad, reshape (3, 2), drop 2 slots
    [[2.0, 3.0, 0.0], [4.0, 5.0, 6.0]]
    """
    lead, (q_len, k_len) = x.shape[:-2], x.shape[-2:]
    padded = np.concatenate([np.zeros(lead + (q_len, 1), dtype=x.dtype), x], axis=-1)
    flat = padded.reshape(lead + (q_len * (k_len + 1),))
    return flat[..., q_len:].reshape(x.shape).copy()


def rel_shift_backward(dout: ArrayLike) -> np.ndarray:
    r"""Adjoint of :func:`rel_shift`: ``dx`` for ``dout`` of the same ``(..., Q, K)`` shape.

    Every output entry reads a distinct buffer slot, so the adjoint writes ``dout`` back into
    a zero ``(Q, K+1)`` buffer after its first ``Q`` slots and drops the pad column. Entries
    of ``x`` whose buffer slot precedes ``Q`` are never read and get zero gradient
    (``x[0, :Q-1]`` when ``Q <= K + 1``).

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import transformer_xl as txl
    >>> txl.rel_shift_backward(np.ones((2, 3))).tolist()   # x[0, 0] is never read
    [[0.0, 1.0, 1.0], [1.0, 1.0, 1.0]]
    >>> rng = np.random.default_rng(0)
    >>> x, dout = rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 3, 4))
    >>> bool(np.isclose((dout * txl.rel_shift(x)).sum(), (txl.rel_shift_backward(dout) * x).sum()))   # adjoint
    True
    """
    dout = as_float_array(dout, "dout", ndim_min=2)
    return txl_shift_backward(dout)


def txl_shift_backward(dout: np.ndarray) -> np.ndarray:
    """The adjoint of :func:`txl_shift`. Core of :func:`rel_shift_backward`; not checked.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import transformer_xl as txl
    >>> rng = np.random.default_rng(0)
    >>> x, dout = rng.normal(size=(3, 5)), rng.normal(size=(3, 5))
    >>> bool(np.isclose((dout * txl.txl_shift(x)).sum(), (txl.txl_shift_backward(dout) * x).sum()))   # adjoint
    True
    """
    lead, (q_len, k_len) = dout.shape[:-2], dout.shape[-2:]
    buf = np.zeros(lead + (q_len * (k_len + 1),), dtype=dout.dtype)
    buf[..., q_len:] = dout.reshape(lead + (q_len * k_len,))
    return buf.reshape(lead + (q_len, k_len + 1))[..., 1:].copy()


def _check_sinusoid(dim, base, clamp_len, dim_name: str):
    """``(dim, base, clamp_len)`` of ``R``: an even width, ``base > 0`` and not 1, ``clamp_len`` None or
    in ``[1, 2**62]`` (for :func:`txl_relative_sinusoid` and :class:`TransformerXLRelative`)."""
    dim = check_even(dim, dim_name)
    base = check_real(base, "base", positive=True)
    require(base != 1.0, "base must differ from 1 (every frequency would be 1)")
    clamp_len = None if clamp_len is None else check_int(clamp_len, "clamp_len", minimum=1, maximum=2**62)
    return dim, base, clamp_len


def txl_relative_sinusoid(k_len: int, dim: int, *, base: float = 10000.0, clamp_len: int | None = None) -> np.ndarray:
    r"""Transformer-XL's ``R``: ``[sin | cos]`` rows for the distances ``k_len-1, ..., 1, 0``.

    Row :math:`m` encodes distance :math:`\min(k_{len}-1-m,\ \mathrm{clamp\_len})` with
    :func:`posenc_np.absolute.sinusoidal` (``layout="concat"``, frequencies
    :math:`\mathrm{base}^{-2i/d}`). ``clamp_len`` is Transformer-XL's option of the same
    name (``None`` = no clamp).

    Returns
    -------
    ndarray, float64, shape ``(k_len, dim)``

    Examples
    --------
    >>> from posenc_np.relative import transformer_xl as txl
    >>> R = txl.txl_relative_sinusoid(3, 4)   # distances 2, 1, 0; frequencies 1, 0.01
    >>> R[2].tolist()                          # distance 0: [sin 0, sin 0 | cos 0, cos 0]
    [0.0, 0.0, 1.0, 1.0]
    >>> R[1].round(6).tolist()                 # distance 1: [sin 1, sin 0.01 | cos 1, cos 0.01]
    [0.841471, 0.01, 0.540302, 0.99995]
    >>> bool((txl.txl_relative_sinusoid(3, 4, clamp_len=1)[0] == R[1]).all())   # distance 2 clamped to 1
    True
    """
    k_len = check_int(k_len, "k_len", minimum=0)
    dim, base, clamp_len = _check_sinusoid(dim, base, clamp_len, "dim")
    check_alloc((max(k_len, 1), dim), np.float64, "sinusoidal table (k_len, dim)")  # (and dim // 2 frequencies)
    return txl_sinusoid_table(k_len, dim, base, clamp_len).copy()


@memo_table
def txl_sinusoid_table(k_len: int, dim: int, base: float, clamp_len: int | None) -> np.ndarray:
    """``R`` ``(k_len, dim)``, kept (read-only) per (length, configuration). Core of
    :func:`txl_relative_sinusoid`; arguments are not checked.

    Examples
    --------
    >>> from posenc_np.relative import transformer_xl as txl
    >>> R = txl.txl_sinusoid_table(3, 4, 10000.0, None)
    >>> R.shape, R[-1].tolist()                # the last row is distance 0
    ((3, 4), [0.0, 0.0, 1.0, 1.0])
    """
    dist = np.arange(k_len - 1, -1, -1, dtype=np.int64)
    if clamp_len is not None:
        dist = np.minimum(dist, clamp_len)
    return sinusoid_rows(dist, geometric_frequencies(dim, base), "concat")


def _sum_leading(x: np.ndarray, keep: int) -> np.ndarray:
    """Sum every axis but the last ``keep`` ones."""
    return x.reshape((-1,) + x.shape[x.ndim - keep:]).sum(axis=0)


class TransformerXLRelative(Hook):
    r"""Transformer-XL's relative terms as an attention hook.

    The attention core supplies :math:`s\,q_i^\top k_j`; this hook adds
    :math:`s\,[u^\top k_j + \mathrm{rel\_shift}((Q+v)\,r^\top)_{ij}]` with the scale
    :math:`s` the core was given (default :math:`1/\sqrt d`, as in the paper). Use it with
    ``causal=True``::

        hook = TransformerXLRelative(num_heads=2, head_dim=8, d_model_r=16, seed=0)
        out, cache = attention.forward(q, k, v, causal=True, hooks=[hook])
        grads = attention.backward(dout, cache)      # hook.grads holds du, dv, dW_r

    Parameters
    ----------
    num_heads, head_dim : int
        :math:`H` and :math:`d`; ``q``/``k`` must be ``(..., H, len, d)``.
    d_model_r : int
        Even width :math:`d_r` of the relative sinusoid (``d_model`` in Transformer-XL,
        whose ``r_net`` maps it to ``H * d``).
    base : float
        Sinusoid base, 10000 in the paper.
    clamp_len : int or None
        Clamp distances to at most this value (Transformer-XL's ``clamp_len``).
    seed : int or None
        Seed of the ``N(0, init_std^2)`` initialisation.
    init_std : float
        Standard deviation of the initial parameters (Transformer-XL's ``init_std`` 0.02).

    Attributes
    ----------
    params : dict
        ``u`` ``(H, d)`` (``r_w_bias``), ``v`` ``(H, d)`` (``r_r_bias``), ``W_r``
        ``(d_r, H*d)`` (``r_net.weight`` transposed; column ``h*d + e`` is head ``h``,
        channel ``e``).
    grads : dict
        Same keys, overwritten by each :meth:`logits_backward`.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import attention
    >>> from posenc_np.relative import transformer_xl as txl
    >>> hook = txl.TransformerXLRelative(num_heads=2, head_dim=4, d_model_r=8, seed=0)
    >>> q = k = v = np.random.default_rng(0).normal(size=(2, 3, 4))
    >>> attention.forward(q, k, v, causal=True, hooks=[hook])[0].shape, [a.shape for a in hook.relative_keys(3)]
    ((2, 3, 4), [(3, 8), (2, 3, 4)])
    """

    def __init__(self, num_heads: int, head_dim: int, d_model_r: int, *, base: float = 10000.0,
                 clamp_len: int | None = None, seed: int | np.random.Generator | None = None, init_std: float = 0.02):
        self.num_heads = check_int(num_heads, "num_heads", minimum=1)
        self.head_dim = check_int(head_dim, "head_dim", minimum=1)
        self.d_model_r, self.base, self.clamp_len = _check_sinusoid(d_model_r, base, clamp_len, "d_model_r")
        init_std = check_real(init_std, "init_std", nonnegative=True)
        check_alloc((self.d_model_r, self.num_heads * self.head_dim), np.float64,
                    "W_r (d_model_r, num_heads * head_dim)")
        rng = np.random.default_rng(seed)
        h, d = self.num_heads, self.head_dim
        self.params = {
            "u": normal_init(rng, init_std, (h, d)),
            "v": normal_init(rng, init_std, (h, d)),
            "W_r": normal_init(rng, init_std, (self.d_model_r, h * d)),
        }
        self.grads = {key: np.zeros_like(val) for key, val in self.params.items()}

    def relative_keys(self, k_len: int) -> tuple[np.ndarray, np.ndarray]:
        r"""``(R, r)``: the sinusoid ``(k_len, d_r)`` and per-head keys :math:`r = R W_r`,
        ``(H, k_len, d)``, row :math:`m` for distance :math:`k_{len}-1-m`."""
        k_len = check_int(k_len, "k_len", minimum=0)
        check_alloc((k_len, self.d_model_r), np.float64, "sinusoidal table (k_len, d_model_r)")
        return self._relative_keys(k_len)

    def _relative_keys(self, k_len: int):
        big_r = txl_sinusoid_table(k_len, self.d_model_r, self.base, self.clamp_len)
        r = (big_r @ self.params["W_r"]).reshape(k_len, self.num_heads, self.head_dim).transpose(1, 0, 2)
        return big_r, r

    def logits(self, q: ArrayLike, k: ArrayLike, scale: float,
               mask: ArrayLike | None = None) -> tuple[np.ndarray | None, Any]:
        """Return ``scale * (u.k_j + rel_shift((q + v) r^T))``, shape ``(..., H, q_len, k_len)``."""
        q, k, scale, mask = check_hook_args(q, k, scale, mask, self.num_heads, self.head_dim)
        dtype = q.dtype
        big_r, r = self._relative_keys(k.shape[-2])
        u = self.params["u"].astype(dtype, copy=False)
        v = self.params["v"].astype(dtype, copy=False)
        r = r.astype(dtype, copy=False)
        uk = np.einsum("hd,...hkd->...hk", u, k)[..., None, :]        # (c): u.k_j, same for every row
        qv = q + v[:, None, :]
        x = qv @ np.swapaxes(r, -1, -2)                                 # column m <-> distance k_len-1-m
        term = scale * (uk + txl_shift(x))                             # (b)+(d) realigned to distance i-j
        return term.astype(dtype, copy=False), (k, qv, big_r, r, scale)

    def logits_backward(self, dlogits: np.ndarray, cache: Any) -> tuple[np.ndarray | None, np.ndarray | None]:
        r"""``(dq, dk)`` contributions; writes ``du``, ``dv``, ``dW_r`` into :attr:`grads`.

        With :math:`G = s\,\partial L/\partial S` and :math:`G_x = \mathrm{rel\_shift}^\top(G)`:
        :math:`dq = G_x r`, :math:`dk_j = (\sum_i G_{ij})\,u`, :math:`du = \sum G_{ij} k_j`,
        :math:`dv = \sum_i (dq)_i`, :math:`dr = G_x^\top (Q + v)`, :math:`dW_r = R^\top dr`.
        """
        k, qv, big_r, r, scale = cache
        g = scale * np.asarray(dlogits)
        gk = g.sum(axis=-2)                                              # (..., H, K)
        dk = gk[..., None] * self.params["u"].astype(g.dtype, copy=False)[:, None, :]
        gx = txl_shift_backward(g)
        dq = gx @ r
        dr = _sum_leading(np.swapaxes(gx, -1, -2) @ qv, 3)                 # (H, K, d)
        k_len = k.shape[-2]
        pdt = self.params["W_r"].dtype
        self.grads = {
            "u": _sum_leading(np.einsum("...hk,...hkd->...hd", gk, k), 2).astype(pdt),
            "v": _sum_leading(dq.sum(axis=-2), 2).astype(pdt),
            "W_r": (big_r.T @ dr.transpose(1, 0, 2).reshape(k_len, -1)).astype(pdt),
        }
        return dq, dk
