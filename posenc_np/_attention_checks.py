"""The argument checks of the attention families: the attention core and its hooks, where
queries and keys sit, ALiBi and the relative encodings.

A public function validates at its door with one call per argument group, then computes with
unchecked functions (``docs/architecture.md``). These are the groups a family's public
functions share, or that a public function shares with its kernel (:func:`check_slopes` and
:func:`check_exact_distances` serve :func:`posenc_np.alibi.attention` and the fused kernel).
Messages name the argument, show the value and say what was expected (``docs/errors.md``). Like
:mod:`posenc_np._checks`, this module belongs to the foundation layer.
"""

from __future__ import annotations

import math

import numpy as np

from ._checks import (as_float_array, as_int_array, check_alloc, check_bool, check_choice, check_even,
                      check_float_dtype, check_grad, check_int, check_lengths, check_real)
from ._table_checks import check_sinusoid


# --------------------------------------------------------------------------- the attention core and its hooks

#: The methods of an attention hook (:class:`posenc_np.attention.Hook`).
HOOK_METHODS = ("logits", "logits_backward", "values", "values_backward")


def check_qkv(q, k, v):
    """``q, k, v`` of attention: float, ``(..., heads, len, d)`` with matching leading axes, key
    lengths and ``d``; returned in their common dtype."""
    q = as_float_array(q, "q", ndim_min=3)
    k = as_float_array(k, "k", ndim_min=3)
    v = as_float_array(v, "v", ndim_min=3)
    if q.shape[:-2] != k.shape[:-2] or k.shape[:-1] != v.shape[:-1]:
        raise ValueError(
            f"q, k, v must be (..., heads, len, d) with matching leading axes and k/v lengths; got "
            f"q {q.shape}, k {k.shape}, v {v.shape}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must share the last axis d; got q {q.shape}, k {k.shape}")
    dtype = np.result_type(q, k, v)
    return q.astype(dtype, copy=False), k.astype(dtype, copy=False), v.astype(dtype, copy=False)


def check_broadcast(arr, name: str, target: tuple, dtype):
    """A ``bias`` (float, cast to ``dtype``) or boolean ``mask``/``keep`` that broadcasts to
    ``target`` without enlarging it; None stays None."""
    if arr is None:
        return None
    if name in ("mask", "keep"):
        arr = np.asarray(arr)
        if arr.dtype != bool:
            raise TypeError(f"{name} must be a boolean array (True = keep), got dtype {arr.dtype}")
    else:
        arr = as_float_array(arr, name).astype(dtype, copy=False)
    try:
        shape = np.broadcast_shapes(arr.shape, target)
    except ValueError as exc:
        raise ValueError(f"{name} of shape {arr.shape} does not broadcast to {target}") from exc
    if shape != target:
        raise ValueError(f"{name} of shape {arr.shape} would enlarge the logits {target} to {shape}")
    return arr


def check_scale(scale, d: int) -> float:
    """The logit scale: ``scale`` (finite, > 0) or the default ``1/sqrt(d)`` (needs ``d >= 1``)."""
    if scale is not None:
        return check_real(scale, "scale", positive=True)
    if d == 0:
        raise ValueError("q and k have head dim d = 0: the default scale 1/sqrt(d) is undefined; pass scale "
                         "explicitly (every logit is then 0)")
    return 1.0 / math.sqrt(d)


def check_hooks(hooks) -> tuple:
    """``hooks`` as a tuple of objects with the four hook methods (``None`` = no hooks; one hook
    object alone is accepted)."""
    if hooks is None:
        return ()
    if all(callable(getattr(hooks, m, None)) for m in HOOK_METHODS):
        hooks = (hooks,)
    try:
        hooks = tuple(hooks)
    except TypeError as exc:
        raise TypeError(f"hooks must be a sequence of Hook objects (or None), got {type(hooks).__name__}") from exc
    for i, hook in enumerate(hooks):
        missing = [m for m in HOOK_METHODS if not callable(getattr(hook, m, None))]
        if missing:
            raise TypeError(f"hooks[{i}] ({type(hook).__name__}) lacks the Hook methods {missing}")
    return hooks


def check_hook_term(term, target: tuple, hook, method: str):
    """A hook's term must broadcast to ``target`` without enlarging it."""
    try:
        ok = np.broadcast_shapes(np.shape(term), target) == target
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"{type(hook).__name__}.{method} returned a term of shape {np.shape(term)}, which does "
                         f"not broadcast to {target}")
    return term


def check_hook_args(q, k, scale, mask=None):
    """What a hook's ``logits(q, k, scale, mask)`` receives from the attention core, checked for a
    direct call: float ``q``/``k`` of shape ``(..., heads, len, d)`` with equal leading axes and
    ``d``, a finite ``scale > 0``, and None or a boolean mask that broadcasts to the logits.
    Returns ``(q, k, scale, mask)`` (integers converted to float64)."""
    q = as_float_array(q, "q", ndim_min=3)
    k = as_float_array(k, "k", ndim_min=3)
    if q.shape[:-2] != k.shape[:-2] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must be (..., heads, len, d) with equal leading axes and d, got {q.shape} "
                         f"and {k.shape}")
    mask = check_broadcast(mask, "mask", q.shape[:-1] + (k.shape[-2],), q.dtype)
    return q, k, check_real(scale, "scale", positive=True), mask


def check_heads(x: np.ndarray, name: str, num_heads: int, head_dim: int | None = None, *,
                axes: str = "len, d") -> None:
    """``x`` must be ``(..., num_heads, <axes>)`` with a last axis of ``head_dim`` (any when None)."""
    if x.ndim < 3 or x.shape[-3] != num_heads or (head_dim is not None and x.shape[-1] != head_dim):
        want = f"(..., num_heads={num_heads}, {axes if head_dim is None else f'len, head_dim={head_dim}'})"
        raise ValueError(f"{name} must be {want}, got shape {x.shape}")


def check_qk_heads(q, k, scale, mask, num_heads: int, head_dim: int):
    """A hook's ``(q, k, scale, mask)`` (:func:`check_hook_args`) with ``num_heads`` heads of ``head_dim``."""
    q, k, scale, mask = check_hook_args(q, k, scale, mask)
    check_heads(q, "q", num_heads, head_dim)
    check_heads(k, "k", num_heads, head_dim)
    return q, k, scale, mask


_ATTENTION_CACHE_KEYS = {"q", "k", "v", "probs", "scale", "bias_shape", "hooks", "hook_caches"}


def check_attention_cache(cache):
    """``(q, k, v, probs, scale)`` of an attention forward cache, or ``TypeError`` for anything else."""
    ok = isinstance(cache, dict) and _ATTENTION_CACHE_KEYS <= set(cache)
    if ok:
        q, k, v, probs, scale = (cache[name] for name in ("q", "k", "v", "probs", "scale"))
        ok = (all(isinstance(a, np.ndarray) and a.ndim >= 3 for a in (q, k, v, probs))
              and probs.shape == q.shape[:-1] + (k.shape[-2],) and isinstance(scale, float)
              and len(cache["hooks"]) == len(cache["hook_caches"]))
    if not ok:
        raise TypeError("cache must be the dict returned by posenc_np.attention.forward")
    return q, k, v, probs, scale


def check_alignment(q_len, k_len, alignment, alignments, query_offset=None, *, alloc: bool = True):
    """``(q_len, k_len, alignment, query_offset or None)`` of a relative grid (with ``alloc`` the
    ``(q_len, k_len)`` grid and both position ranges within :data:`MAX_ALLOC_BYTES`)."""
    if alloc:
        q_len, k_len = check_lengths(q_len, k_len, "relative positions (q_len, k_len)")
    else:
        q_len, k_len = check_int(q_len, "q_len", minimum=0), check_int(k_len, "k_len", minimum=0)
    alignment = check_choice(alignment, "alignment", alignments)
    offset = None if query_offset is None else check_int(query_offset, "query_offset", minimum=-2**53, maximum=2**53)
    return q_len, k_len, alignment, offset


# --------------------------------------------------------------------------- ALiBi (posenc_np.alibi and posenc_np.kernels.alibi)

#: Largest query-key distance whose float value is exact, by dtype the positions are computed in.
_EXACT_DISTANCE = {np.dtype(np.float16): 2**11, np.dtype(np.float32): 2**24, np.dtype(np.float64): 2**53}


def check_slopes(slopes, num_heads: int) -> np.ndarray:
    """ALiBi slopes: ``(num_heads,)``, finite, ``>= 0`` (dtype kept; integers become float64)."""
    arr = as_float_array(slopes, "slopes")
    if arr.shape != (num_heads,):
        raise ValueError(f"slopes must have shape (num_heads,) = ({num_heads},), got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError("slopes must be finite (no NaN or inf)")
    if np.any(arr < 0):
        raise ValueError(f"slopes must be >= 0 (a negative slope flips the sign convention), "
                         f"got {float(arr[arr < 0][0])}")
    return arr


def check_exact_distances(q_len: int, k_len: int, q_offset: int, dtype) -> None:
    """Every query-key distance (query ``i`` at ``i + q_offset``, key ``j`` at ``j``) must be an
    exact integer in ``dtype``, where the positions are computed.

    Past that, neighbouring positions round to the same value and the bias silently loses
    them (float32 beyond 2^24; a float32 ALiBi at q_offset 2^24 differed from float64 by 0.58).
    """
    limit = _EXACT_DISTANCE[np.dtype(dtype)]
    dist = 0 if q_len == 0 or k_len == 0 else max(abs(q_offset + q_len - 1), abs(q_offset - (k_len - 1)))
    if dist > limit:
        raise ValueError(f"q_offset={q_offset} with q_len={q_len}, k_len={k_len} puts a query {dist} positions from a "
                         f"key, more than {np.dtype(dtype)} represents exactly ({limit}); positions would round "
                         f"together. Use float64, or shift q_offset and the keys together (the causal and symmetric "
                         f"forms depend only on the distance)")


def check_num_heads(num_heads) -> int:
    """A head count ``>= 1`` whose ``(num_heads,)`` slopes fit :data:`MAX_ALLOC_BYTES`."""
    num_heads = check_int(num_heads, "num_heads", minimum=1)
    check_alloc((num_heads,), np.float64, "slopes (num_heads,)")
    return num_heads


def check_bias_budget(shape, dtype, what: str, budget: int) -> None:
    """A materialised ALiBi bias or score array within ``budget`` bytes (``MAX_BIAS_BYTES``)."""
    check_alloc(shape, dtype, what, limit=budget, limit_name="MAX_BIAS_BYTES",
                hint="use a shorter query block (q_offset), or the fused kernel (backend='numba', float32/float64)")


def check_alibi_bias(num_heads, q_len, k_len, form, forms, slopes, q_offset, dtype, budget: int):
    """:func:`posenc_np.alibi.bias`'s arguments: ``(num_heads, q_len, k_len, form, slopes or None,
    q_offset, dtype)``; ``k_len`` defaults to ``q_offset + q_len``, the dtype to the slopes'
    (float64 without them); the bias fits ``budget`` and every distance is exact in float64."""
    n = check_num_heads(num_heads)
    q_len, q_offset = check_int(q_len, "q_len", minimum=0), check_int(q_offset, "q_offset")
    k_len = q_offset + q_len if k_len is None else check_int(k_len, "k_len", minimum=0)
    if k_len < 0:
        raise ValueError(f"k_len defaults to q_offset + q_len, which is {k_len} < 0; pass k_len explicitly")
    form = check_choice(form, "form", forms)
    m = None if slopes is None else check_slopes(slopes, n)
    out_dtype = check_float_dtype(dtype) if dtype is not None else np.dtype(np.float64) if m is None else m.dtype
    check_bias_budget((n, q_len, k_len), out_dtype, "bias (num_heads, q_len, k_len)", budget)
    check_exact_distances(q_len, k_len, q_offset, np.float64)
    return n, q_len, k_len, form, m, q_offset, out_dtype


def check_grouped_qkv(q, k, v):
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


def check_alibi_attention(q, k, v, slopes, causal, scale):
    """:func:`posenc_np.alibi.attention`'s arguments: ``(q, k, v, group, slopes or None, causal, scale)``
    (grouped-query heads and bfloat16 allowed, see :func:`check_grouped_qkv`)."""
    q, k, v, group = check_grouped_qkv(q, k, v)
    return (q, k, v, group, None if slopes is None else check_slopes(slopes, q.shape[-3]),
            check_bool(causal, "causal"), check_scale(scale, q.shape[-1]))


def check_alibi_cache(cache, backends) -> tuple[str, dict]:
    """``(backend, inner cache)`` of an ALiBi attention forward made by one of ``backends``."""
    if not isinstance(cache, dict) or "backend" not in cache or "inner" not in cache:
        raise TypeError("cache must be the dict returned by posenc_np.alibi.attention")
    if cache["backend"] not in backends:
        raise ValueError(f"cache was produced by backend {cache['backend']!r}, which has no backward here "
                         f"(known: {sorted(backends)})")
    return cache["backend"], cache["inner"]


# --------------------------------------------------------------------------- layers with learned tables

def check_param(params: dict, name: str, shape: tuple) -> np.ndarray:
    """A layer's parameter ``params[name]`` (replaceable by the user) must still have ``shape``."""
    w = np.asarray(params[name])
    if w.shape != shape:
        raise ValueError(f"params[{name!r}] must have shape {shape}, got {w.shape}")
    return w


def check_layer_init(init_std, shape: tuple, what: str) -> float:
    """A layer's ``init_std >= 0`` and the float64 parameters ``shape`` within :data:`MAX_ALLOC_BYTES`."""
    init_std = check_real(init_std, "init_std", nonnegative=True)
    check_alloc(shape, np.float64, what)
    return init_std


def check_table(table, name: str, *, odd_rows: bool = False, width=None, what: str = "") -> np.ndarray:
    """A non-empty 2-D float table; with ``odd_rows`` an odd row count (``2K + 1`` rows), with
    ``width`` that many columns. ``what`` describes the expected form in the message."""
    table = as_float_array(table, name)
    ok = table.ndim == 2 and table.shape[0] >= 1 and table.shape[1] >= 1 and not (odd_rows and table.shape[0] % 2 == 0)
    if not ok:
        raise ValueError(f"{name} must be a non-empty 2-D {what} table{' (odd row count)' if odd_rows else ''}, "
                         f"got shape {table.shape}")
    if width is not None and table.shape[1] != width:
        raise ValueError(f"{name} rows have width {table.shape[1]}, expected {width} to match the last axis "
                         "of the attention input")
    return table


# --------------------------------------------------------------------------- T5

def check_t5_buckets(num_buckets, max_distance, bidirectional) -> tuple[int, int, bool]:
    """T5's bucket parameters as ``(num_buckets, max_distance, bidirectional)``.

    Requirements (derived from the formula): the exact range ``e`` must be at least 1
    (otherwise ``ln(n/e)`` is undefined), so ``num_buckets >= 2`` unidirectional and
    ``>= 4`` bidirectional; bidirectional counts must be even (an odd count leaves the last
    bucket unreachable: each half has ``num_buckets // 2`` buckets); ``max_distance > e``
    (otherwise ``ln(max_distance / e) <= 0``).
    """
    bidirectional = check_bool(bidirectional, "bidirectional")
    num_buckets = check_int(num_buckets, "num_buckets")
    minimum = 4 if bidirectional else 2
    if num_buckets < minimum:
        raise ValueError(
            f"num_buckets must be >= {minimum} when bidirectional={bidirectional} (each direction needs "
            f"at least one exact bucket), got {num_buckets}")
    if bidirectional and num_buckets % 2:
        raise ValueError(
            f"num_buckets must be even when bidirectional=True (the two directions get num_buckets // 2 "
            f"buckets each, so bucket {num_buckets - 1} could never be used), got {num_buckets}")
    max_distance = check_int(max_distance, "max_distance", maximum=2**62)
    exact = (num_buckets // 2 if bidirectional else num_buckets) // 2
    if max_distance <= exact:
        rule = "num_buckets // 4" if bidirectional else "num_buckets // 2"
        raise ValueError(
            f"max_distance must exceed the exact range {rule} = {exact} for num_buckets={num_buckets}, "
            f"bidirectional={bidirectional}, got {max_distance}")
    return num_buckets, max_distance, bidirectional


def check_t5_layer(num_heads, num_buckets, max_distance, bidirectional, init_std):
    """``(num_heads, num_buckets, max_distance, bidirectional, init_std)`` of a T5 bias layer."""
    num_heads = check_int(num_heads, "num_heads", minimum=1)
    config = check_t5_buckets(num_buckets, max_distance, bidirectional)
    init_std = check_layer_init(init_std, (config[0], num_heads), "bias table (num_buckets, num_heads)")
    return (num_heads, *config, init_std)


def check_t5_bias(table, q_len, k_len, max_distance, bidirectional):
    """``(table, q_len, k_len, (num_buckets, max_distance, bidirectional))`` of :func:`posenc_np.relative.t5_bias`."""
    table = check_table(table, "table", what="(num_buckets, num_heads)")
    q_len, k_len = check_lengths(q_len, k_len, "relative positions (q_len, k_len)")
    return table, q_len, k_len, check_t5_buckets(table.shape[0], max_distance, bidirectional)


def check_t5_grad(dbias, num_buckets, max_distance, bidirectional, num_heads=None):
    """``(dbias, (num_buckets, max_distance, bidirectional))``: ``dbias`` ``(..., heads, q_len, k_len)``."""
    dbias = as_float_array(dbias, "dbias", ndim_min=3)
    if num_heads is not None:
        check_heads(dbias, "dbias", num_heads, axes="q_len, k_len")
    config = check_t5_buckets(num_buckets, max_distance, bidirectional)
    check_lengths(*dbias.shape[-2:], "relative positions (q_len, k_len)")
    return dbias, config


# --------------------------------------------------------------------------- Shaw et al.

_SHAW_TABLE = "(2*max_relative_position + 1, dim)"


def check_shaw_index(q_len, k_len, max_relative_position) -> tuple[int, int, int]:
    """``(q_len, k_len, K)`` of Shaw's clipped index (``0 <= K <= 2**62``)."""
    q_len, k_len = check_lengths(q_len, k_len, "relative index (q_len, k_len)")
    return q_len, k_len, check_int(max_relative_position, "max_relative_position", minimum=0, maximum=2**62)


def check_shaw_logits(q, table, scale, *, k_len=None, dlogits=None):
    """``(q, table, scale, k_len or dlogits)`` of Shaw's key term or its gradient: ``q``
    ``(..., q_len, d)``, a ``(2K+1, d)`` table, and ``dlogits`` ``(..., q_len, k_len)``."""
    q = as_float_array(q, "q", ndim_min=2)
    table = check_table(table, "table", odd_rows=True, width=q.shape[-1], what=_SHAW_TABLE)
    scale = check_real(scale, "scale", positive=True)
    if dlogits is None:
        return q, table, scale, check_lengths(q.shape[-2], k_len, "relative index (q_len, k_len)")[1]
    dlogits = as_float_array(dlogits, "dlogits", ndim_min=2)
    if dlogits.shape[:-1] != q.shape[:-1]:
        raise ValueError(f"dlogits must be (..., q_len, k_len) matching q {q.shape}, got {dlogits.shape}")
    return q, table, scale, dlogits


def check_shaw_values(probs, table, dout=None):
    """``(probs, table[, dout])`` of Shaw's value term (``dout``: ``(..., q_len, d_v)``)."""
    probs = as_float_array(probs, "probs", ndim_min=2)
    table = check_table(table, "table", odd_rows=True, what=_SHAW_TABLE)
    if dout is None:
        return probs, table
    return probs, table, check_grad(dout, "dout", probs.shape[:-1] + (table.shape[1],))


def check_shaw_layer(head_dim, max_relative_position, value_dim, use_values, init_std):
    """``(head_dim, K, value_dim, use_values, init_std)`` of a Shaw layer (tables ``(2K+1, dim)``)."""
    head_dim = check_int(head_dim, "head_dim", minimum=1)
    kmax = check_int(max_relative_position, "max_relative_position", minimum=0)
    value_dim = head_dim if value_dim is None else check_int(value_dim, "value_dim", minimum=1)
    use_values = check_bool(use_values, "use_values")
    init_std = check_layer_init(init_std, (2 * kmax + 1, max(head_dim, value_dim)),
                                "relative tables (2 * max_relative_position + 1, dim)")
    return head_dim, kmax, value_dim, use_values, init_std


# --------------------------------------------------------------------------- BERT relative_key

def check_bert_fit(q_len: int, k_len: int, max_position: int) -> None:
    """Every distance must have a row of the BERT table: both lengths ``<= P``."""
    if q_len > max_position or k_len > max_position:
        raise ValueError(
            f"q_len={q_len} and k_len={k_len} must be <= max_position_embeddings={max_position}: distances "
            f"must lie in [-{max_position - 1}, {max_position - 1}] and a learned distance table cannot "
            "extrapolate")


def check_bert_scores(q, k, table, mode, modes, scale, dscores=None):
    """``(q, k, table, mode, scale[, dscores])`` of BERT's relative scores: matching ``q``/``k``, a
    ``(2P - 1, d)`` table whose ``P`` covers both lengths, ``dscores`` ``(..., q_len, k_len)``."""
    mode = check_choice(mode, "mode", modes)
    q = as_float_array(q, "q", ndim_min=2)
    k = as_float_array(k, "k", ndim_min=2)
    if q.shape[:-2] != k.shape[:-2] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q (..., q_len, d) and k (..., k_len, d) must share leading axes and d; got q {q.shape}, "
                         f"k {k.shape}")
    table = as_float_array(table, "table")
    if table.ndim != 2 or table.shape[0] % 2 == 0 or table.shape[1] != q.shape[-1]:
        raise ValueError(f"table must be (2*max_position_embeddings - 1, d={q.shape[-1]}) (odd row count), "
                         f"got shape {table.shape}")
    check_bert_fit(q.shape[-2], k.shape[-2], (table.shape[0] + 1) // 2)
    out = (q, k, table, mode, check_real(scale, "scale", positive=True))
    return out if dscores is None else (*out, check_grad(dscores, "dscores", q.shape[:-1] + (k.shape[-2],)))


def check_bert_layer(max_position_embeddings, head_dim, mode, modes, init_std):
    """``(P, head_dim, mode, init_std)`` of a BERT relative layer (table ``(2P - 1, head_dim)``)."""
    max_pos = check_int(max_position_embeddings, "max_position_embeddings", minimum=1)
    head_dim = check_int(head_dim, "head_dim", minimum=1)
    mode = check_choice(mode, "mode", modes)
    init_std = check_layer_init(init_std, (2 * max_pos - 1, head_dim),
                                "distance table (2 * max_position_embeddings - 1, head_dim)")
    return max_pos, head_dim, mode, init_std


# --------------------------------------------------------------------------- Transformer-XL

def check_clamp_len(clamp_len):
    """Transformer-XL's ``clamp_len``: None or an int in ``[1, 2**62]``."""
    return None if clamp_len is None else check_int(clamp_len, "clamp_len", minimum=1, maximum=2**62)


def check_txl_sinusoid(k_len, dim, base, clamp_len):
    """``(k_len, dim, base, clamp_len)`` of Transformer-XL's ``R`` (``(k_len, dim)`` within
    :data:`MAX_ALLOC_BYTES`; an even ``dim``; ``base > 0``, not 1; ``clamp_len`` None or >= 1)."""
    k_len = check_int(k_len, "k_len", minimum=0)
    check_alloc((k_len,), np.int64, "relative distances (k_len,)")
    dim = check_int(dim, "dim", minimum=1)
    check_alloc((k_len, dim), np.float64, "sinusoidal table positions.shape + (dim,)")
    dim, base = check_sinusoid(dim, base)
    return k_len, dim, base, check_clamp_len(clamp_len)


def check_txl_layer(num_heads, head_dim, d_model_r, base, clamp_len, init_std):
    """``(num_heads, head_dim, d_model_r, base, clamp_len, init_std)`` of a Transformer-XL layer."""
    num_heads, head_dim = check_int(num_heads, "num_heads", minimum=1), check_int(head_dim, "head_dim", minimum=1)
    d_model_r = check_even(d_model_r, "d_model_r")
    base = check_real(base, "base", positive=True)
    clamp_len = check_clamp_len(clamp_len)
    check_sinusoid(d_model_r, base)
    init_std = check_layer_init(init_std, (d_model_r, num_heads * head_dim), "W_r (d_model_r, num_heads * head_dim)")
    return num_heads, head_dim, d_model_r, base, clamp_len, init_std


# --------------------------------------------------------------------------- DeBERTa

def check_deberta_buckets(bucket_size, max_position) -> tuple[int, int]:
    """DeBERTa's log-bucket parameters: ``bucket_size >= 2``, ``max_position > bucket_size // 2 + 1``."""
    bucket_size = check_int(bucket_size, "bucket_size", minimum=2)
    max_position = check_int(max_position, "max_position", minimum=1)
    mid = bucket_size // 2
    if max_position - 1 <= mid:
        raise ValueError(
            f"max_position must be > bucket_size // 2 + 1 = {mid + 1} so that ln((max_position - 1) / mid) > 0, "
            f"got max_position={max_position} with bucket_size={bucket_size}")
    return bucket_size, max_position


#: ``|relative_pos|`` above this is not exactly representable in float64.
_MAX_ABS_REL = 2 ** 53


def check_relative_pos(relative_pos, bucket_size, max_position):
    """``(relative_pos as int64, bucket_size, max_position)`` for DeBERTa's log buckets (``|r| <= 2**53``)."""
    rel = as_int_array(relative_pos, "relative_pos")
    bucket_size, max_position = check_deberta_buckets(bucket_size, max_position)
    if rel.size and (rel.max() > _MAX_ABS_REL or rel.min() < -_MAX_ABS_REL):  # (np.abs wraps int64's minimum)
        worst = int(rel.max()) if rel.max() > _MAX_ABS_REL else int(rel.min())
        raise ValueError(f"relative_pos must satisfy |relative_pos| <= 2**53, got {worst}")
    return rel, bucket_size, max_position


def check_deberta_positions(q_len, k_len, bucket_size, max_position, query_offset):
    """``(q_len, k_len, bucket_size, max_position, offset)`` of DeBERTa's relative positions
    (``bucket_size`` -1 or >= 2 with a ``max_position``; ``query_offset`` default ``k_len - q_len``)."""
    q_len, k_len = check_lengths(q_len, k_len, "relative positions (q_len, k_len)")
    bucket_size, max_position = check_int(bucket_size, "bucket_size"), check_int(max_position, "max_position")
    offset = k_len - q_len if query_offset is None else check_int(query_offset, "query_offset", minimum=-2**53,
                                                                   maximum=2**53)
    if bucket_size != -1 and bucket_size < 2:
        raise ValueError(f"bucket_size must be -1 (no buckets) or >= 2, got {bucket_size}")
    if max_position != -1 and max_position < 1:
        raise ValueError(f"max_position must be -1 or >= 1, got {max_position}")
    if bucket_size != -1 and max_position == -1:
        raise ValueError(f"bucket_size={bucket_size} needs max_position (max_relative_positions); got -1")
    return q_len, k_len, bucket_size, max_position, offset


def check_pos_att_type(value, choices=("c2p", "p2c")) -> tuple[str, ...]:
    """DeBERTa's ``pos_att_type``: ``"c2p|p2c"`` (Hugging Face's string) or a sequence, no repeats."""
    if isinstance(value, str):
        items = [p.strip().lower() for p in value.split("|") if p.strip()]
    else:
        try:
            items = list(value)
        except TypeError as exc:
            raise TypeError(f"pos_att_type must be a string like 'c2p|p2c' or a sequence of strings, "
                            f"got {type(value).__name__}") from exc
    for item in items:
        if item == "p2p":
            raise ValueError("pos_att_type 'p2p' is not supported: it is not part of the paper's score "
                             "(eq. 4) and Hugging Face DeBERTa-v2 does not add it to the scores")
        check_choice(item, "pos_att_type entry", choices)
    if len(set(items)) != len(items):
        raise ValueError(f"pos_att_type lists a term twice: {items}")
    return tuple(items)


def check_projection(rel_embeddings, weight, bias, num_heads):
    """``(E, W, b or None, num_heads)`` of DeBERTa's projected tables: ``E`` ``(2k, hidden)``, ``W``
    ``(num_heads * d, hidden)``, ``b`` ``(num_heads * d,)``."""
    e = as_float_array(rel_embeddings, "rel_embeddings", ndim_min=2)
    w = as_float_array(weight, "weight", ndim_min=2)
    num_heads = check_int(num_heads, "num_heads", minimum=1)
    if e.ndim != 2 or w.ndim != 2 or w.shape[1] != e.shape[1] or w.shape[0] % num_heads:
        raise ValueError(f"rel_embeddings must be (2k, hidden) and weight (num_heads*d, hidden) with "
                         f"num_heads={num_heads} dividing its rows; got {e.shape} and {w.shape}")
    b = None if bias is None else check_grad(bias, "bias", (w.shape[0],))
    return e, w, b, num_heads


def check_deberta_layer(num_heads, head_dim, position_buckets, max_relative_positions, pos_att_type, p2c_index,
                        p2c_choices, init_std):
    """``(num_heads, head_dim, buckets, max_relative_positions, pos_att_type, p2c_index, span,
    init_std)`` of a DeBERTa layer; ``span`` = buckets if > 0 else ``max_relative_positions``."""
    num_heads, head_dim = check_int(num_heads, "num_heads", minimum=1), check_int(head_dim, "head_dim", minimum=1)
    max_rel = check_int(max_relative_positions, "max_relative_positions", minimum=1)
    buckets = check_int(position_buckets, "position_buckets")
    if buckets != -1:
        if buckets < 2:
            raise ValueError(f"position_buckets must be -1 (no buckets) or >= 2, got {buckets}")
        check_deberta_buckets(buckets, max_rel)
    pos_att_type = check_pos_att_type(pos_att_type)
    p2c_index = check_choice(p2c_index, "p2c_index", p2c_choices)
    span = buckets if buckets > 0 else max_rel
    init_std = check_layer_init(init_std, (num_heads, 2 * span, head_dim),
                                "relative tables (num_heads, 2 * span, head_dim)")
    return num_heads, head_dim, buckets, max_rel, pos_att_type, p2c_index, span, init_std


def check_p2c(p2c_index: str, q_len: int, k_len: int) -> None:
    """Hugging Face's p2c index has no ``(q_len, k_len)`` form unless ``q_len == k_len``."""
    if p2c_index == "hf" and q_len != k_len:
        raise ValueError(f"p2c_index='hf' needs q_len == k_len (got {q_len} and {k_len}): Hugging Face's p2c term "
                         "is built from a (k_len, k_len) key-key table and has no (q_len, k_len) form; use 'paper'")


# --------------------------------------------------------------------------- FIRE, dynamic position bias (MLP biases)

def check_mlp_params(params, name: str, num_heads=None, *, extra=()) -> dict:
    """An MLP's ``params``: a dict with ``w1, b1, ..., wL, bL`` (``L >= 1``), float arrays,
    ``w1`` of shape ``(1, width)``, each ``b`` matching its ``w``'s columns, each ``w`` taking the
    previous width, and ``num_heads`` outputs when given; ``extra`` names further keys, each a
    float array of shape ``(1,)``. Returned as a dict of float arrays in one dtype."""
    if not isinstance(params, dict):
        raise TypeError(f"{name} must be a dict of arrays (w1, b1, ..., wL, bL), got {type(params).__name__}")
    n = 0
    while f"w{n + 1}" in params:
        n += 1
    expected = {f"{p}{i}" for i in range(1, n + 1) for p in "wb"} | set(extra)
    if n == 0 or set(params) != expected:
        raise ValueError(f"{name} must have the keys w1, b1, ..., wL, bL (L >= 1){' and ' if extra else ''}"
                         f"{', '.join(extra)}; got {sorted(map(str, params))}")
    out = {key: as_float_array(value, f"{name}[{key!r}]") for key, value in params.items()}
    width = 1
    for i in range(1, n + 1):
        w, b = out[f"w{i}"], out[f"b{i}"]
        if w.ndim != 2 or w.shape[0] != width or w.shape[1] < 1 or b.shape != (w.shape[1],):
            raise ValueError(f"{name}['w{i}'] must be ({width}, out) and {name}['b{i}'] (out,), got {w.shape} and "
                             f"{b.shape}")
        width = w.shape[1]
    if num_heads is not None and width != num_heads:
        raise ValueError(f"{name}['w{n}'] must have num_heads = {num_heads} columns, got {width}")
    for key in extra:
        if out[key].shape != (1,):
            raise ValueError(f"{name}[{key!r}] must have shape (1,), got {out[key].shape}")
    dtype = np.result_type(*out.values())
    return {key: value.astype(dtype, copy=False) for key, value in out.items()}


def check_mlp_grid(q_len, k_len, query_offset, width: int):
    """``(q_len, k_len, query_offset)`` of an MLP bias over the grid (the offset defaults to
    ``k_len - q_len``), whose hidden activations ``(q_len * k_len, width)`` fit :data:`MAX_ALLOC_BYTES`."""
    q_len, k_len, _, offset = check_alignment(q_len, k_len, "bottom-right", ("bottom-right",), query_offset)
    check_alloc((q_len * k_len, width), np.float64, "MLP hidden activations (q_len * k_len, width)")
    return q_len, k_len, k_len - q_len if offset is None else offset


def check_mlp_bias(params, q_len, k_len, query_offset, extra=()):
    """``(params, q_len, k_len, query_offset)`` of an MLP bias function (:func:`check_mlp_params`,
    :func:`check_mlp_grid`)."""
    params = check_mlp_params(params, "params", extra=extra)
    return (params, *check_mlp_grid(q_len, k_len, query_offset, params["w1"].shape[1]))


def check_mlp_bias_grad(dbias, params, query_offset, extra=()):
    """``(dbias, params, q_len, k_len, query_offset)`` of an MLP bias backward: ``dbias`` float
    ``(..., heads, q_len, k_len)`` with the MLP's head count."""
    params = check_mlp_params(params, "params", extra=extra)
    n = 1
    while f"w{n + 1}" in params:
        n += 1
    dbias = as_float_array(dbias, "dbias", ndim_min=3)
    check_heads(dbias, "dbias", params[f"w{n}"].shape[1], axes="q_len, k_len")
    return (dbias, params, *check_mlp_grid(*dbias.shape[-2:], query_offset, params["w1"].shape[1]))


def check_mlp_hook(q, k, scale, mask, params, num_heads: int, layers: int, extra=()):
    """``(q, params, q_len, k_len)`` of an MLP bias hook: its arguments (:func:`check_qk_heads`)
    and its ``params`` with ``layers`` affine layers and ``num_heads`` outputs."""
    q, k, scale, mask = check_qk_heads(q, k, scale, mask, num_heads, None)
    params = check_mlp_params(params, "params", num_heads, extra=extra)
    if f"w{layers}" not in params or f"w{layers + 1}" in params:
        raise ValueError(f"params must hold {layers} layers (w1 .. w{layers}), got {sorted(params)}")
    q_len, k_len, _ = check_mlp_grid(q.shape[-2], k.shape[-2], None, params["w1"].shape[1])
    return q, params, q_len, k_len


def check_fire_config(init_L, eps) -> tuple[float, float]:
    """FIRE's fixed threshold scale ``init_L > 0`` and ``eps >= 0``."""
    return check_real(init_L, "init_L", positive=True), check_real(eps, "eps", nonnegative=True)


def check_mlp_layer(num_heads, width, depth) -> tuple[int, int, int]:
    """``(num_heads, width, depth)`` of an MLP bias layer (``depth`` hidden layers of ``width``)."""
    num_heads = check_int(num_heads, "num_heads", minimum=1)
    width = check_int(width, "width", minimum=1)
    depth = check_int(depth, "depth", minimum=1, maximum=64)
    check_alloc((depth + 1, max(width, num_heads), max(width, num_heads)), np.float64,
                "MLP weights (depth + 1, width, width)")
    return num_heads, width, depth


def check_fire_layer(num_heads, width, init_c, init_L, eps):
    """``(num_heads, width, c, init_L, eps)`` of a FIRE layer, ``c`` as a float64 array ``(1,)``."""
    num_heads, width, _ = check_mlp_layer(num_heads, width, 1)
    return (num_heads, width, np.array([check_real(init_c, "init_c")]), *check_fire_config(init_L, eps))


def check_fire_distance(q_len, k_len, c, L, eps, query_offset):
    """``(q_len, k_len, query_offset, c (1,), L, eps)`` of FIRE's normalised distance; ``|c|`` times
    the largest position or distance must be finite."""
    q_len, k_len, offset = check_mlp_grid(q_len, k_len, query_offset, 1)
    c, (L, eps) = check_real(c, "c"), check_fire_config(L, eps)
    if not math.isfinite(abs(c) * max(L, abs(offset) + q_len + k_len)):
        raise ValueError(f"c * position overflows float64 (c = {c}, L = {L}, query_offset = {offset})")
    return q_len, k_len, offset, np.array([c]), L, eps


# --------------------------------------------------------------------------- CoPE

def check_cope_qk(q, k, mask, gate_scale):
    """``(q, k, mask, gate_scale)`` of CoPE's gates: ``q``/``k`` as a hook receives them (in their
    common dtype), a finite ``gate_scale > 0`` and ``(..., heads, q_len, k_len)`` positions within
    :data:`MAX_ALLOC_BYTES`."""
    q, k, gate_scale, mask = check_hook_args(q, k, gate_scale, mask)
    check_alloc(q.shape[:-1] + (k.shape[-2],), np.float64, "CoPE positions (..., heads, q_len, k_len)")
    dtype = np.result_type(q, k)
    return q.astype(dtype, copy=False), k.astype(dtype, copy=False), mask, gate_scale


def check_cope(q, k, table, mask, gate_scale):
    """``(q, k, table, mask, gate_scale)`` of CoPE (:func:`check_cope_qk`) with a ``(npos_max + 1, d)``
    table, ``npos_max >= 1``; all three arrays in their common dtype."""
    q, k, mask, gate_scale = check_cope_qk(q, k, mask, gate_scale)
    table = check_table(table, "table", width=q.shape[-1], what="(npos_max + 1, head_dim)")
    if table.shape[0] < 2:
        raise ValueError(f"table must have npos_max + 1 >= 2 rows, got {table.shape[0]}")
    check_alloc(q.shape[:-1] + (table.shape[0],), np.float64, "CoPE table logits (..., heads, q_len, npos_max + 1)")
    dtype = np.result_type(q, k, table)
    return q.astype(dtype, copy=False), k.astype(dtype, copy=False), table.astype(dtype, copy=False), mask, gate_scale


def check_cope_layer(head_dim, npos_max, gate_scale, init_std):
    """``(head_dim, npos_max, gate_scale or None, init_std)`` of a CoPE layer."""
    head_dim = check_int(head_dim, "head_dim", minimum=1)
    npos_max = check_int(npos_max, "npos_max", minimum=1)
    gate_scale = check_real(gate_scale, "gate_scale", positive=True, allow_none=True)
    init_std = check_layer_init(init_std, (npos_max + 1, head_dim), "CoPE table (npos_max + 1, head_dim)")
    return head_dim, npos_max, gate_scale, init_std


def check_cope_cache(cache) -> dict:
    """A cache of :func:`posenc_np.relative.cope_forward` (a dict with its keys)."""
    keys = {"q", "k", "table", "gate", "corners", "slope", "gate_scale"}
    if not isinstance(cache, dict) or set(cache) != keys:
        raise TypeError("cache must be the cache returned by cope_forward")
    return cache
# --------------------------------------------------------------------------- KERPLE and Sandwich (posenc_np.relative)

def check_kerple_params(r1, r2, variant, variants) -> tuple[np.ndarray, np.ndarray, str]:
    """KERPLE's per-head ``r1``, ``r2``: float ``(heads,)`` of one shape, finite, ``> 0`` (the
    paper's domain), and ``r2 <= 2`` for the power variant."""
    variant = check_choice(variant, "variant", variants)
    r1, r2 = as_float_array(r1, "r1"), as_float_array(r2, "r2")
    if r1.ndim != 1 or r1.shape != r2.shape or r1.size == 0:
        raise ValueError(f"r1 and r2 must be (num_heads,) arrays of one shape, got {r1.shape} and {r2.shape}")
    for name, x in (("r1", r1), ("r2", r2)):
        if not np.all(np.isfinite(x)) or np.any(x <= 0):
            raise ValueError(f"{name} must be finite and > 0 (KERPLE keeps its parameters positive), got {x}")
    if variant == "power" and np.any(r2 > 2):
        raise ValueError(f"r2 must be <= 2 for the power variant (0 < r2 <= 2 keeps -|m-n|^r2 conditionally "
                         f"positive definite), got {r2}")
    return r1, r2, variant


def check_kerple_bias(r1, r2, q_len, k_len, variant, variants):
    """:func:`posenc_np.relative.kerple_bias`'s arguments; the ``(heads, q_len, k_len)`` bias fits the budget."""
    r1, r2, variant = check_kerple_params(r1, r2, variant, variants)
    q_len, k_len = check_lengths(q_len, k_len, "KERPLE bias (q_len, k_len)")
    check_alloc((r1.size, q_len, k_len), np.float64, "KERPLE bias (num_heads, q_len, k_len)")
    return r1, r2, q_len, k_len, variant


def check_kerple_grad(dbias, r1, r2, variant, variants):
    """:func:`posenc_np.relative.kerple_bias_backward`'s arguments: ``dbias (..., heads, q_len, k_len)``."""
    r1, r2, variant = check_kerple_params(r1, r2, variant, variants)
    dbias = as_float_array(dbias, "dbias", ndim_min=3)
    if dbias.shape[-3] != r1.size:
        raise ValueError(f"dbias must be (..., num_heads={r1.size}, q_len, k_len), got shape {dbias.shape}")
    return dbias, r1, r2, variant


def check_sandwich(num_heads, q_len, k_len, dim, compression, compressions):
    """:func:`posenc_np.relative.sandwich_bias`'s arguments: heads, lengths, an even ``dim >= 2``
    (the paper's d'), a compression name; the bias fits :data:`MAX_ALLOC_BYTES`."""
    num_heads = check_num_heads(num_heads)
    q_len, k_len = check_lengths(q_len, k_len, "Sandwich bias (q_len, k_len)")
    dim = check_even(dim, "dim")
    compression = check_choice(compression, "compression", compressions)
    check_alloc((num_heads, q_len, k_len), np.float64, "Sandwich bias (num_heads, q_len, k_len)")
    return num_heads, q_len, k_len, dim, compression
