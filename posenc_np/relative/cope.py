r"""CoPE: Contextual Position Encoding (Golovneva et al. 2024, arXiv 2405.18719).

Positions are counted by the content: each query decides, with a gate per key, which keys count.

.. math::

    g_{ij} = \sigma(s\, q_i \cdot k_j)\,[j \text{ kept}], \qquad
    p_{ij} = \sum_{t \ge j} g_{it} \;\;(= \textstyle\sum_{t=j}^{i} g_{it} \text{ under the causal mask}),

    \bar p_{ij} = \min(p_{ij}, P), \qquad
    e[\bar p] = (\lceil \bar p\rceil - \bar p)\, e[\lfloor \bar p\rfloor] + (\bar p - \lfloor \bar p\rfloor)\, e[\lceil \bar p\rceil],

    \text{term}_{ij} = q_i \cdot e[\bar p_{ij}]
    = (1 - w)\, z_i[\lfloor \bar p\rfloor] + w\, z_i[\lceil \bar p\rceil], \quad z_i = E\, q_i,\ w = \bar p - \lfloor \bar p\rfloor

(paper eqs. 3-5 and Appendix B). :math:`\sigma` is the logistic sigmoid, :math:`E` the learned
table of :math:`P + 1` rows (``npos_max`` :math:`= P`, rows ``0 .. P``) of head dimension, shared by
the heads of a layer, and the term is added to the attention logits *unscaled* (it is not
multiplied by :math:`1/\sqrt{d}`). At an integer :math:`\bar p` both rows coincide and
:math:`w = 0`.

Conventions (named arguments):

``gate_scale`` :math:`s`
    The paper's equation is :math:`\sigma(q_i^\top k_j)`; its Appendix B code (and x-transformers)
    take the sigmoid of the logits already divided by :math:`\sqrt{d}`. ``gate_scale=1.0`` is the
    equation, ``1/sqrt(d)`` the code; the hook's default (``None``) uses the attention's logit
    scale, i.e. the code.
the mask
    Gates of dropped keys are 0 (the paper's code adds ``log(mask)`` to the logits before the
    sigmoid; x-transformers fills them with ``-finfo.max``), so :math:`p_{ij}` counts kept keys
    only. The sum runs over every kept key at or after :math:`j`; with the causal mask that is
    :math:`t = j .. i`.
``npos_max`` :math:`P`
    The largest position; the table has :math:`P + 1` rows. The paper's code and x-transformers
    name the *row count* ``npos_max`` / ``max_pos`` and clamp at ``npos_max - 1``.

Backward, with :math:`G = \partial L/\partial \text{term}`: the table logits get
:math:`\partial z_i[\lfloor\bar p\rfloor] \mathrel{+}= (1 - w) G_{ij}`,
:math:`\partial z_i[\lceil\bar p\rceil] \mathrel{+}= w\, G_{ij}`, then :math:`dq_i \mathrel{+}= E^\top dz_i`
and :math:`dE \mathrel{+}= dz_i\, q_i^\top`; the positions get
:math:`\partial \bar p_{ij} = G_{ij}(z_i[\lceil\bar p\rceil] - z_i[\lfloor\bar p\rfloor])` (0 at integers,
as autograd gives), zero where the clamp is active (:math:`p > P`); the reversed cumulative sum's
adjoint is the forward cumulative sum, :math:`\partial g_{it} = \sum_{j \le t} \partial p_{ij}`; the
sigmoid gives :math:`\partial s_{ij} = \partial g_{ij}\, g_{ij}(1 - g_{ij})` on kept keys; and
:math:`dq \mathrel{+}= s\, \partial S\, K`, :math:`dk \mathrel{+}= s\, \partial S^\top Q`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .._checks import as_float_array, check_alloc, check_grad, check_int, check_real, require
from .._util import normal_init
from ..attention import Hook, check_hook_args
from ._mlp import sigmoid

__all__ = ["CoPE", "contextual_positions", "cope_backward", "cope_forward", "cope_gates", "cope_positions",
           "cope_term", "cope_term_backward"]

#: The keys of :func:`cope_term`'s cache.
_CACHE_KEYS = {"q", "k", "table", "gate", "corners", "slope", "gate_scale"}


# --------------------------------------------------------------------------- the formulas (cores)

def cope_gates(q: np.ndarray, k: np.ndarray, keep: np.ndarray | None, gate_scale: float) -> np.ndarray:
    r""":math:`g_{ij} = \sigma(s\, q_i \cdot k_j)`, 0 where ``keep`` is False. Arguments are not checked.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import cope
    >>> q, k = np.array([[np.log(3.0), 0.0]]), np.array([[0.0, 0.0], [1.0, 0.0]])   # q.k = 0, ln 3
    >>> cope.cope_gates(q, k, None, 1.0).tolist()                             # sigmoid: 1/2, 3/4
    [[0.5, 0.75]]
    >>> cope.cope_gates(q, k, np.array([[True, False]]), 1.0).tolist()        # a dropped key has gate 0
    [[0.5, 0.0]]
    """
    g = sigmoid(gate_scale * (q @ np.swapaxes(k, -1, -2)))
    return g if keep is None else np.where(keep, g, 0.0).astype(g.dtype, copy=False)


def contextual_positions(g: np.ndarray) -> np.ndarray:
    r""":math:`p_{ij} = \sum_{t \ge j} g_{it}`: the cumulative sum of the gates from the last key back.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import cope
    >>> cope.contextual_positions(np.array([[1.0, 0.5, 1.0]])).tolist()   # sums of the gates from j to the end
    [[2.5, 1.5, 1.0]]
    """
    return np.flip(np.cumsum(np.flip(g, -1), -1), -1)


def _corners(pos: np.ndarray, npos_max: int):
    """``(lo, hi, w)``: flat indices into the table logits ``z`` (shape ``pos.shape[:-1] + (npos_max + 1,)``,
    C order) of the rows either side of the clamped positions, and the weight of ``hi``."""
    p = np.minimum(pos, npos_max)
    floor = np.floor(p)
    w = p - floor
    floor = np.where(np.isnan(p), 0, floor)  # NaN from q or k: row 0 with a NaN weight, so that the NaN propagates
    rows = np.arange(math.prod(pos.shape[:-1])).reshape(pos.shape[:-1] + (1,)) * (npos_max + 1)
    lo = rows + floor.astype(np.intp)
    return lo, lo + (w > 0), w


def cope_term(q: np.ndarray, k: np.ndarray, table: np.ndarray, keep: np.ndarray | None,
              gate_scale: float) -> tuple[np.ndarray, dict]:
    """The logit term ``(..., heads, q_len, k_len)`` and the cache of :func:`cope_term_backward`.

    Core of :func:`cope_forward`; arguments are not checked (``q``, ``k``, ``table`` in one dtype).

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import cope
    >>> q, k = np.array([[[1.0, 0.0]]]), np.array([[[0.0, 1.0], [0.0, 2.0], [0.0, 3.0]]])   # q.k = 0: gates 1/2
    >>> table = np.array([[0.0, 0.0], [1.0, 0.0], [4.0, 0.0]])    # P = 2, q . e[p] = p**2
    >>> term, cache = cope.cope_term(q, k, table, None, 1.0)      # positions 1.5, 1, 0.5
    >>> term.tolist()                                             # (1 + 4)/2, 1, (0 + 1)/2
    [[[2.5, 1.0, 0.5]]]
    """
    g = cope_gates(q, k, keep, gate_scale)
    pos = contextual_positions(g)
    z = (q @ table.T).reshape(-1)  # z_i[p] = q_i . e[p], flat
    lo, hi, w = _corners(pos, table.shape[0] - 1)
    z_lo, z_hi = z[lo], z[hi]
    term = (1.0 - w) * z_lo + w * z_hi
    slope = (z_hi - z_lo) * (pos <= table.shape[0] - 1)  # d term / d p; 0 where the clamp is active
    cache = {"q": q, "k": k, "table": table, "gate": g, "corners": (lo, hi, w), "slope": slope,
             "gate_scale": gate_scale}
    return term, cache


def cope_term_backward(dterm: np.ndarray, cache: dict) -> dict:
    """Gradients of ``q``, ``k`` and ``table`` (the module docstring's backward). Core of :func:`cope_backward`.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import cope
    >>> q, k, table, g = np.random.default_rng(0).normal(size=(4, 3, 3))   # q_len = k_len = d = 3, P = 2
    >>> term, cache = cope.cope_term(q, k, table, None, 1.0)
    >>> grads = cope.cope_term_backward(g, cache)              # the term is linear in the table: <G, term> = <dE, E>
    >>> grads["k"].shape, bool(np.isclose((g * term).sum(), (grads["table"] * table).sum()))
    ((3, 3), True)
    """
    q, k, table, g, (lo, hi, w), slope, s = (cache[n] for n in ("q", "k", "table", "gate", "corners", "slope",
                                                               "gate_scale"))
    rows = q.shape[:-1] + (table.shape[0],)
    dterm = np.broadcast_to(dterm, w.shape)
    dz = np.bincount(lo.ravel(), (dterm * (1.0 - w)).ravel(), np.prod(rows)) + np.bincount(
        hi.ravel(), (dterm * w).ravel(), np.prod(rows))  # adjoint of the two gathers
    dz = dz.reshape(rows).astype(q.dtype, copy=False)
    ds = np.cumsum(dterm * slope, -1) * g * (1.0 - g)  # adjoint of the reversed cumsum; g = 0 on dropped keys
    dq = dz @ table + s * (ds @ k)
    dk = s * (np.swapaxes(ds, -1, -2) @ q)
    dtable = dz.reshape(-1, table.shape[0]).T @ q.reshape(-1, q.shape[-1])
    return {"q": dq, "k": dk, "table": dtable.astype(table.dtype, copy=False)}


# --------------------------------------------------------------------------- public functions

def _check_cope(q, k, table, mask, gate_scale, scale_name: str = "gate_scale"):
    """``(q, k, table, mask, gate_scale)`` of CoPE's term (:func:`cope_forward` and the hook): ``q``/``k``
    as a hook receives them, a ``(npos_max + 1, d)`` table with ``npos_max >= 1``, ``gate_scale > 0``,
    the positions and table logits within :data:`MAX_ALLOC_BYTES`; the arrays in their common dtype."""
    q, k, gate_scale, mask = check_hook_args(q, k, gate_scale, mask, scale_name=scale_name)
    table = as_float_array(table, "table")
    require(table.ndim == 2 and table.shape[0] >= 2 and table.shape[1] == q.shape[-1], f"table must have "
            f"npos_max + 1 >= 2 rows of width {q.shape[-1]} (the last axis of q), got shape {table.shape}")
    check_alloc(q.shape[:-1] + (max(k.shape[-2], table.shape[0]),), np.float64,
                "CoPE positions or table logits (..., heads, q_len, max(k_len, npos_max + 1))")
    dtype = np.result_type(q, k, table)
    return q.astype(dtype, copy=False), k.astype(dtype, copy=False), table.astype(dtype, copy=False), mask, gate_scale


def cope_positions(q: ArrayLike, k: ArrayLike, *, gate_scale: float, mask: ArrayLike | None = None) -> np.ndarray:
    r"""Contextual positions :math:`p_{ij} = \sum_{t \ge j,\ t \text{ kept}} \sigma(s\, q_i \cdot k_t)`, not clamped.

    Parameters
    ----------
    q, k : ndarray
        ``(..., heads, q_len, d)`` and ``(..., heads, k_len, d)``.
    gate_scale : float
        :math:`s > 0`: 1.0 for the paper's equation, ``1/sqrt(d)`` for its code (module docstring).
    mask : ndarray of bool, optional
        True = keep, broadcastable to ``(..., heads, q_len, k_len)``; None keeps every key.

    Returns
    -------
    ndarray ``(..., heads, q_len, k_len)`` in the common dtype of ``q`` and ``k``.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import cope
    >>> q, k = np.array([[[1.0, 0.0]]]), np.array([[[0.0, 1.0], [0.0, 2.0], [0.0, 3.0]]])   # q.k = 0: gates 1/2
    >>> cope.cope_positions(q, k, gate_scale=1.0).tolist()
    [[[1.5, 1.0, 0.5]]]
    >>> cope.cope_positions(q, k, gate_scale=1.0, mask=np.array([True, False, True])).tolist()   # key 1 not counted
    [[[1.0, 0.5, 0.5]]]
    """
    q, k, gate_scale, mask = check_hook_args(q, k, gate_scale, mask, scale_name="gate_scale")
    check_alloc(q.shape[:-1] + (k.shape[-2],), np.float64, "CoPE positions (..., heads, q_len, k_len)")
    dtype = np.result_type(q, k)
    return contextual_positions(cope_gates(q.astype(dtype, copy=False), k.astype(dtype, copy=False), mask,
                                           gate_scale))


def cope_forward(q: ArrayLike, k: ArrayLike, table: ArrayLike, *, gate_scale: float,
                 mask: ArrayLike | None = None) -> tuple[np.ndarray, dict]:
    r"""The CoPE logit term :math:`q_i \cdot e[\min(p_{ij}, P)]` and the cache of :func:`cope_backward`.

    Parameters
    ----------
    q, k, gate_scale, mask
        As in :func:`cope_positions`.
    table : ndarray ``(npos_max + 1, d)``
        The position embeddings :math:`e[0..P]`, ``npos_max >= 1``.

    Returns
    -------
    term : ndarray ``(..., heads, q_len, k_len)``
        Added to the attention logits as it is (not scaled).
    cache : dict

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import cope
    >>> q, k = np.array([[[1.0, 0.0]]]), np.array([[[0.0, 1.0], [0.0, 2.0], [0.0, 3.0]]])   # positions 1.5, 1, 0.5
    >>> table = np.array([[0.0, 0.0], [1.0, 0.0]])                # P = 1, q . e[p] = p: 1.5 is clamped to 1
    >>> cope.cope_forward(q, k, table, gate_scale=1.0)[0].tolist()
    [[[1.0, 1.0, 0.5]]]
    """
    q, k, table, mask, gate_scale = _check_cope(q, k, table, mask, gate_scale)
    return cope_term(q, k, table, mask, gate_scale)


def cope_backward(dterm: ArrayLike, cache: dict) -> dict:
    """Gradients ``{"q", "k", "table"}`` of :func:`cope_forward` for ``dterm`` of the term's shape.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.relative import cope
    >>> q, k, g, dq = np.random.default_rng(0).normal(size=(4, 1, 3, 3))   # one head, q_len = k_len = d = 3
    >>> f = lambda t: (g * cope.cope_forward(q + t * dq, k, np.eye(3), gate_scale=1.0)[0]).sum()   # L(q + t dq), P = 2
    >>> grads = cope.cope_backward(g, cope.cope_forward(q, k, np.eye(3), gate_scale=1.0)[1])
    >>> bool(np.isclose((grads["q"] * dq).sum(), (f(1e-6) - f(-1e-6)) / 2e-6))   # the directional derivative
    True
    """
    require(isinstance(cache, dict) and cache.keys() == _CACHE_KEYS, "cache must be the cache returned by "
            "cope_forward", TypeError)
    dterm = check_grad(dterm, "dterm", cache["slope"].shape)
    return cope_term_backward(dterm, cache)


class CoPE(Hook):
    r"""CoPE as an attention hook: adds :math:`q_i \cdot e[\bar p_{ij}]` to the scaled logits.

    The gates use the mask the attention core applies (``logits(..., mask=keep)``), so padding
    and the causal mask are respected; KV-cache decoding works unchanged (a new query's gates
    run over every cached key).

    Parameters
    ----------
    head_dim : int
        :math:`d`, the width of the table rows.
    npos_max : int
        :math:`P`; the table has ``npos_max + 1`` rows.
    gate_scale : float or None
        :math:`s`; None uses the attention's logit scale (the paper's code), 1.0 the paper's equation.
    seed : int or None
        Seed of the ``N(0, init_std^2)`` table (the paper and x-transformers start from zeros).
    init_std : float
        Standard deviation of the initial table.

    Attributes
    ----------
    params, grads : dict
        ``{"table": (npos_max + 1, head_dim)}``.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np import attention
    >>> from posenc_np.relative import cope
    >>> layer = cope.CoPE(head_dim=4, npos_max=3, seed=0)     # table rows e[0] .. e[3]
    >>> q = k = v = np.random.default_rng(0).normal(size=(2, 3, 4))
    >>> attention.forward(q, k, v, causal=True, hooks=[layer])[0].shape, layer.params["table"].shape
    ((2, 3, 4), (4, 4))
    """

    def __init__(self, head_dim: int, npos_max: int, *, gate_scale: float | None = None,
                 seed: int | np.random.Generator | None = None, init_std: float = 0.02):
        self.head_dim = check_int(head_dim, "head_dim", minimum=1)
        self.npos_max = check_int(npos_max, "npos_max", minimum=1)
        self.gate_scale = check_real(gate_scale, "gate_scale", positive=True, allow_none=True)
        init_std = check_real(init_std, "init_std", nonnegative=True)
        shape = check_alloc((self.npos_max + 1, self.head_dim), np.float64, "CoPE table (npos_max + 1, head_dim)")
        table = normal_init(np.random.default_rng(seed), init_std, shape)
        self.params, self.grads = {"table": table}, {"table": np.zeros_like(table)}

    def logits(self, q: ArrayLike, k: ArrayLike, scale: float,
               mask: ArrayLike | None = None) -> tuple[np.ndarray | None, Any]:
        """Hook: the term for the mask the softmax applies (gates use ``gate_scale`` or ``scale``)."""
        table = np.asarray(self.params["table"])
        require(table.shape == (self.npos_max + 1, self.head_dim), f"params['table'] must have shape "
                f"{(self.npos_max + 1, self.head_dim)}, got {table.shape}")
        gs, name = (scale, "scale") if self.gate_scale is None else (self.gate_scale, "gate_scale")
        q, k, table, mask, gs = _check_cope(q, k, table, mask, gs, name)
        return cope_term(q, k, table, mask, gs)

    def logits_backward(self, dlogits: np.ndarray, cache: Any) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Hook: ``(dq, dk)``; the table gradient goes to ``grads["table"]``."""
        grads = cope_term_backward(dlogits, cache)
        self.grads = {"table": grads["table"]}
        return grads["q"], grads["k"]
