r"""A minimal transformer with hand-written backprop and a pluggable position encoding.

Architecture (GPT-2 style, pre-LayerNorm), for tokens :math:`t_1 \dots t_T`:

.. math::

    h^{(0)} &= \mathrm{fuse}(E[t], P) \quad\text{(absolute encodings; otherwise } E[t])\\
    a &= h + W_o\,\mathrm{Attn}(\mathrm{LN}_1(h)) \qquad
    h' = a + W_2\,\mathrm{GELU}(W_1\,\mathrm{LN}_2(a))\\
    \text{logits} &= \mathrm{LN}_f(h^{(L)})\,E^\top \ \text{(tied) or } \mathrm{LN}_f(h^{(L)})\,W_{out}

``causal=True`` is a decoder (causal self-attention, KV-cache decoding); ``causal=False`` an
encoder (bidirectional attention, same layers).

The position encoding is chosen by name from :data:`REGISTRY` (:mod:`posenc_np.registry`,
the one place that describes each encoding: where it acts, its options and defaults) and
wrapped in a :class:`PositionEncoding`, which applies it at its stage: the embedding, the
rotation of queries and keys, or the attention logits (a hook, or a fused attention).

Absolute encodings take ``fusion`` ``add`` (:math:`x + p`), ``multiply`` (:math:`x \odot p`)
or ``concat`` (:math:`[x, p]`). ``concat`` keeps the residual width ``d_model``: the token
embedding is ``d_model - d_pos`` wide and the position vector ``d_pos`` wide (option
``dim``, default ``d_model // 2``), so no projection is needed; with a tied output the
logits read the token slice of the final hidden state, :math:`\mathrm{LN}_f(h)_{:d_{tok}} E^\top`.
The learned table for ``multiply`` starts at :math:`1 + \mathcal N(0, \sigma^2)` (the identity
of the product) instead of :math:`\mathcal N(0, \sigma^2)`.

Parameters live in one flat dict ``model.params`` of named arrays (``"tok_emb.weight"``,
``"blocks.0.attn.qkv.weight"``, ``"blocks.0.pos.table"``, ...), views of the arrays the
layers use: updating them in place (Adam, checkpoint loading) updates the model.
``model.backward(dlogits)`` fills ``model.grads`` with the same keys (overwritten each
call; the tied embedding gets the sum of its two uses).

Relative-encoding parameters are per layer (T5 shares one table across layers; here every
layer has its own, which is a superset of the shared model).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field

import numpy as np
from numpy.typing import ArrayLike

from . import absolute, fused
from . import attention as attn
from ._checks import (as_int_array, check_alloc, check_bool, check_choice, check_float_dtype, check_int, check_real,
                      require)
from .layers import GELU_APPROXIMATIONS, Embedding, Linear, softmax_cross_entropy_backward
from .registry import REGISTRY, default_scale

EMBED_SCALES = ("none", "sqrt_d")

__all__ = ["REGISTRY", "KVCache", "ModelConfig", "PositionEncoding", "Transformer"]


# --------------------------------------------------------------------------- config

@dataclass
class ModelConfig:
    """Hyper-parameters of :class:`Transformer` (JSON-serialisable, stored in checkpoints).

    Attributes
    ----------
    vocab_size, d_model, n_heads, n_layers : int
    d_ff : int or None
        MLP width, default ``4 * d_model``.
    max_len : int
        Rows of a ``learned`` table; ``max_position_embeddings`` for RoPE scaling. Other
        encodings accept longer inputs.
    causal : bool
        Decoder (True) or bidirectional encoder (False).
    tied : bool
        Output projection is the token embedding transposed.
    position : str
        A key of :data:`REGISTRY`.
    position_options : dict
        Encoding options (see its :data:`REGISTRY` entry), e.g. ``{"scaling": {"rope_type": "linear", "factor": 2}}``.
    fusion : {"add", "concat", "multiply"}
        For absolute encodings only.
    gelu : {"tanh", "none"}
        GELU approximation (see :mod:`posenc_np.layers`).
    dtype : str
        Parameter and activation dtype ("float32" for training, "float64" for gradcheck).
    init_std : float
        Std of the normal initialisation (residual projections use ``init_std / sqrt(2 n_layers)``).
    embed_scale : {"none", "sqrt_d"}
        ``"none"`` (GPT-2): token embeddings ``N(0, init_std^2)`` used as they are.
        ``"sqrt_d"`` (Vaswani et al. 2017, sec. 3.4; fairseq): embeddings start at
        ``N(0, 1/d)`` and are multiplied by ``sqrt(d)`` before the position encoding is
        fused in, so token and sinusoid have comparable scale (the tied output uses the
        unscaled table). ``d`` is the token-embedding width.
    seed : int
        Initialisation seed.

    Examples
    --------
    >>> from posenc_np.model import ModelConfig
    >>> cfg = ModelConfig(vocab_size=16, d_model=32, n_heads=4, position="rope").validate()
    >>> cfg.head_dim, cfg.dtype, ModelConfig.from_json(cfg.to_json()) == cfg
    (8, 'float32', True)
    >>> ModelConfig(vocab_size=16, d_model=30, n_heads=4).validate()
    Traceback (most recent call last):
        ...
    ValueError: d_model (30) must be divisible by n_heads (4)
    """

    vocab_size: int
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    d_ff: int | None = None
    max_len: int = 128
    causal: bool = True
    tied: bool = True
    position: str = "none"
    position_options: dict = field(default_factory=dict)
    fusion: str = "add"
    gelu: str = "tanh"
    dtype: str = "float32"
    init_std: float = 0.02
    embed_scale: str = "none"
    seed: int = 0

    def validate(self) -> "ModelConfig":
        for name in ("vocab_size", "d_model", "n_heads", "n_layers", "max_len"):
            check_int(getattr(self, name), name, minimum=1)
        if self.d_ff is not None:
            check_int(self.d_ff, "d_ff", minimum=1)
        require(self.d_model % self.n_heads == 0,
                f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        d, ff = self.d_model, self.d_ff or 4 * self.d_model
        per_layer = 4 * d * d + 2 * d * ff + ff + 9 * d  # qkv, proj, fc1, fc2 weights and biases, two LayerNorms
        check_alloc((self.n_layers, per_layer), check_float_dtype(self.dtype), "block parameters (n_layers, per layer)")
        check_bool(self.causal, "causal")
        check_bool(self.tied, "tied")
        check_choice(self.position, "position", tuple(REGISTRY))
        check_choice(self.fusion, "fusion", absolute.FUSIONS)
        require(self.fusion == "add" or REGISTRY[self.position].absolute, f"fusion={self.fusion!r} only applies to "
                f"absolute encodings {[n for n, a in REGISTRY.items() if a.absolute]}, not {self.position!r}")
        require(isinstance(self.position_options, dict),
                f"position_options must be a dict, got {type(self.position_options).__name__}", TypeError)
        check_choice(self.gelu, "gelu", GELU_APPROXIMATIONS)
        check_float_dtype(self.dtype)
        check_real(self.init_std, "init_std", nonnegative=True)
        check_choice(self.embed_scale, "embed_scale", EMBED_SCALES)
        check_int(self.seed, "seed", minimum=0)
        return self

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "ModelConfig":
        return cls(**json.loads(text))


# --------------------------------------------------------------------------- KV cache

@dataclass
class KVCache:
    """Keys and values of the tokens seen so far, per layer, ``(B, heads, length, head_dim)``.

    Keys are stored *after* the position encoding's q/k transform (rotated for RoPE);
    ``extra`` holds what an encoding needs to keep them valid (the RoPE frequencies they
    were rotated with, so that dynamic scaling can re-rotate them).

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.model import KVCache, ModelConfig, Transformer
    >>> model = Transformer(ModelConfig(vocab_size=16, d_model=16, n_heads=2, position="rope", dtype="float64"))
    >>> cache = KVCache()       # model.init_cache() also checks that the model can decode with one
    >>> last = [model.decode_step(np.array([t]), cache) for t in (1, 2, 3)][-1]
    >>> cache.length, cache.keys[0].shape, bool(np.allclose(last, model.forward([[1, 2, 3]])[:, -1]))   # = full forward
    (3, (1, 2, 3, 8), True)
    """

    length: int = 0
    keys: list = field(default_factory=list)
    values: list = field(default_factory=list)
    extra: dict = field(default_factory=dict)


# --------------------------------------------------------------------------- the position encoding

class PositionEncoding:
    """The encoding ``cfg.position`` as the model applies it, built from its :data:`REGISTRY` entry.

    Every stage is a no-op unless the entry acts there:

    - embedding: ``token_width``, ``embed(x, positions)``, ``embed_backward(dx)``;
    - rotation: ``begin(start, length, cache)`` (per forward call: tables, KV-cache frequencies),
      ``rotate(q, k)``, ``rotate_backward(dq, dk)``;
    - attention: ``attend(layer, q, k, v, causal)`` and ``attend_backward(layer, dout, cache)``
      (the attention core with the layer's hook, or the entry's fused attention).

    Parameter holders (objects with ``params``/``grads``) are returned by ``modules()``
    (model-wide: ``{"pos_emb": table}``, parameters ``pos_emb.weight``) and ``layer_modules(i)``
    (``{"pos": hook}``: parameters ``blocks.i.pos.*``). The tables an encoding needs (frequencies,
    cos/sin, sinusoid rows, bucket maps) are computed once per configuration and length, not per
    forward.

    Rotary encodings recompute frequencies that depend on the current length (``dynamic``,
    ``longrope``) with ``seq_len = start + length``; cached keys rotated with older frequencies
    are moved to the new ones with :func:`posenc_np.rope.rerotate`. That makes cached decoding
    equal to a recompute of the prefix for a one-layer model only: in deeper layers the cached
    keys and values of earlier tokens were *computed* under the old frequencies (Hugging Face
    has the same behaviour). Logit encodings place query ``i`` at ``i + k_len - q_len``
    (bottom-right, like the causal mask), so one hook serves a full forward and cached decoding.

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.model import ModelConfig, PositionEncoding
    >>> cfg = ModelConfig(vocab_size=16, d_model=8, n_heads=2, position="sinusoidal", dtype="float64").validate()
    >>> pos = PositionEncoding(cfg, np.random.default_rng(0))
    >>> pos.level, pos.token_width, pos.embed(np.zeros((1, 2, 8)), np.arange(2))[0, 0].tolist()   # x + p(0)
    ('embedding', 8, [0.0, 1.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0])
    """

    def __init__(self, cfg: ModelConfig, rng: np.random.Generator, softmax=None):
        entry = REGISTRY[cfg.position]
        self.softmax = softmax  # the attention core's softmax pair (fused.Ops.softmax)
        self.entry, self.cfg, self.name, self.level = entry, cfg, entry.name, entry.acts
        self.dtype = np.dtype(cfg.dtype)
        self.options = entry.resolve(cfg)
        self.vectors = entry.build(cfg, self.options, rng) if entry.acts == "embedding" else None
        self.rotary = entry.build(cfg, self.options, rng) if entry.acts == "rotation" else None
        self.hooks = [entry.build(cfg, self.options, rng) for _ in range(cfg.n_layers)] if entry.acts == "logits" else []
        for hook in self.hooks:  # hooks initialise in float64; train in the model's dtype
            for key in hook.params:
                hook.params[key] = np.asarray(hook.params[key], dtype=self.dtype)
                hook.grads[key] = np.zeros_like(hook.params[key])
        self.scale = entry.scale(cfg, self.options) if entry.scale is not None else default_scale(cfg)
        self._saved = None

    @property
    def absolute(self) -> bool:
        return self.entry.absolute

    @property
    def decoder_only(self) -> bool:
        return self.entry.decoder_only

    @property
    def kv_cache_unsupported(self) -> str | None:
        return self.entry.kv_cache_unsupported

    # parameters
    def modules(self) -> dict:
        return {"pos_emb": self.vectors} if self.vectors is not None and self.vectors.params else {}

    def layer_modules(self, layer: int) -> dict:
        return {"pos": self.hooks[layer]} if self.hooks else {}

    # embedding: h = fuse(E[t], p)
    @property
    def token_width(self) -> int:
        concat = self.vectors is not None and self.cfg.fusion == "concat"
        return self.cfg.d_model - self.vectors.dim if concat else self.cfg.d_model

    def embed(self, x: np.ndarray, positions: np.ndarray) -> np.ndarray:
        if self.vectors is None:
            return x
        p = self.vectors.forward(positions)
        self._saved = (x, p)
        return absolute.combine(x, p, self.cfg.fusion)

    def embed_backward(self, dx: np.ndarray) -> np.ndarray:
        if self.vectors is None:
            return dx
        x, p = self._saved
        dtok, dp = absolute.combine_backward(dx, x, p, self.cfg.fusion)
        self.vectors.backward(dp)
        return dtok

    # rotation of queries and keys
    def begin(self, start: int, length: int, cache: KVCache | None, positions: np.ndarray | None = None) -> None:
        if self.rotary is not None:
            self.rotary.begin(start, length, cache, positions)

    # randomized positions (Ruoss et al. 2023)
    @property
    def randomized_max_len(self) -> int | None:
        return self.options.get("randomized_max_len")

    def sample_positions(self, length: int, rng: np.random.Generator) -> np.ndarray:
        """A sorted sample of ``length`` distinct positions from ``0 .. randomized_max_len - 1``."""
        M = self.randomized_max_len
        require(length <= M, f"randomized positions: a training sequence of {length} tokens needs "
                f"position_options['randomized_max_len'] >= {length}, got {M}")
        return np.sort(rng.choice(M, size=length, replace=False))

    def rotate(self, q: np.ndarray, k: np.ndarray, *, in_place: bool = False) -> tuple[np.ndarray, np.ndarray]:
        return self.rotary.rotate(q, k, in_place=in_place) if self.rotary is not None else (q, k)

    def rotate_backward(self, dq: np.ndarray, dk: np.ndarray, *,
                        in_place: bool = False) -> tuple[np.ndarray, np.ndarray]:
        return self.rotary.rotate(dq, dk, inverse=True, in_place=in_place) if self.rotary is not None else (dq, dk)

    # attention
    def attend(self, layer: int, q: np.ndarray, k: np.ndarray, v: np.ndarray,
               causal: bool) -> tuple[np.ndarray, dict]:
        hook = self.hooks[layer] if self.hooks else None
        if self.entry.attention is not None:
            return self.entry.attention(q, k, v, causal=causal, hook=hook, scale=self.scale)
        keep = attn.applied_mask(None, causal, q.shape[-2], k.shape[-2])
        return attn.attend(q, k, v, None, keep, self.scale, () if hook is None else (hook,), self.softmax)

    def attend_backward(self, layer: int, dout: np.ndarray,
                        cache: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        fused = self.entry.attention_backward
        g = fused(dout, cache) if fused is not None else attn.attend_backward(dout, cache)
        return g["q"], g["k"], g["v"]


# --------------------------------------------------------------------------- blocks

class Block:
    """Pre-LN transformer block: ``h + Attn(LN1 h)``, then ``+ MLP(LN2 .)``."""

    def __init__(self, cfg: ModelConfig, pos: PositionEncoding, index: int, rng: np.random.Generator, ops: fused.Ops):
        d, dt = cfg.d_model, np.dtype(cfg.dtype)
        proj_std = cfg.init_std / math.sqrt(2 * cfg.n_layers)
        self.cfg, self.pos, self.index = cfg, pos, index
        self.ln1 = ops.LayerNorm(d, dtype=dt)
        self.qkv = Linear(d, 3 * d, rng=rng, init_std=cfg.init_std, dtype=dt)
        self.proj = Linear(d, d, rng=rng, init_std=proj_std, dtype=dt)
        self.ln2 = ops.LayerNorm(d, dtype=dt)
        self.fc1 = Linear(d, cfg.d_ff or 4 * d, rng=rng, init_std=cfg.init_std, dtype=dt)
        self.act = ops.GELU(approximate=cfg.gelu)
        self.fc2 = Linear(cfg.d_ff or 4 * d, d, rng=rng, init_std=proj_std, dtype=dt)
        self._attn_cache = None

    def modules(self) -> dict:
        return {"ln1": self.ln1, "attn.qkv": self.qkv, "attn.proj": self.proj, "ln2": self.ln2,
                "mlp.fc1": self.fc1, "mlp.fc2": self.fc2}

    def forward(self, h, cache: KVCache | None):
        H = self.cfg.n_heads
        qkv = self.qkv.forward(self.ln1.forward(h))
        q, k, v = (attn.to_heads(t, H) for t in np.split(qkv, 3, axis=-1))
        q, k = self.pos.rotate(q, k, in_place=True)  # q, k are views of qkv, which the block owns
        if cache is not None:
            i = self.index
            if len(cache.keys) <= i:
                cache.keys.append(k[..., :0, :])
                cache.values.append(v[..., :0, :])
            k = cache.keys[i] = np.concatenate([cache.keys[i], k], axis=-2)
            v = cache.values[i] = np.concatenate([cache.values[i], v], axis=-2)
        out, self._attn_cache = self.pos.attend(self.index, q, k, v, self.cfg.causal)
        a = h + self.proj.forward(attn.from_heads(out))
        return a + self.fc2.forward(self.act.forward(self.fc1.forward(self.ln2.forward(a))))

    def backward(self, dh):
        da = dh + self.ln2.backward(self.fc1.backward(self.act.backward(self.fc2.backward(dh))))
        dout = attn.to_heads(self.proj.backward(da), self.cfg.n_heads)
        dq, dk, dv = self.pos.attend_backward(self.index, dout, self._attn_cache)
        dq, dk = self.pos.rotate_backward(dq, dk, in_place=True)  # fresh gradients of the attention
        # merge_heads of dq, dk, dv written straight into the (B, T, 3 * d_model) gradient:
        # dqkv[b, t, j*d + h*hd + e] = dj[b, h, t, e] for j = q, k, v (one copy each)
        B, H, T, hd = dq.shape
        dqkv = np.empty((B, T, 3, H, hd), dtype=np.result_type(dq, dk, dv))
        for j, g in enumerate((dq, dk, dv)):
            dqkv[:, :, j] = g.swapaxes(1, 2)
        return da + self.ln1.backward(self.qkv.backward(dqkv.reshape(B, T, 3 * H * hd)))


# --------------------------------------------------------------------------- model

class Transformer:
    """Decoder-only (or encoder) transformer; see the module docstring.

    Parameters
    ----------
    cfg : ModelConfig
    backend : {"auto", "numpy", "numba"}
        How the LayerNorms, GELUs, attention softmaxes run, and the cross-entropy, gradient norms
        and optimizer of its training (:func:`posenc_np.fused.ops`): ``"numpy"`` the references
        (:mod:`posenc_np.layers`, :mod:`posenc_np.optim`, :mod:`posenc_np.attention`),
        ``"numba"`` the fused kernels (:mod:`posenc_np.fused`), ``"auto"`` the kernels for a
        float32/float64 model. The position encodings choose their own kernels (their ``"auto"``).

    Attributes
    ----------
    params : dict of str to ndarray
        Every parameter, flat; arrays are shared with the layers (update in place).
    grads : dict of str to ndarray
        Same keys, written by :meth:`backward`.
    pos : PositionEncoding
        The encoding chosen from :data:`REGISTRY`.
    ops : posenc_np.fused.Ops
        What ``backend`` chose (also used by :func:`posenc_np.train.train` and
        :func:`~posenc_np.train.evaluate`).

    Examples
    --------
    >>> import numpy as np
    >>> from posenc_np.model import ModelConfig, Transformer
    >>> model = Transformer(ModelConfig(vocab_size=16, d_model=16, n_heads=2, n_layers=1, position="rope"))
    >>> model.num_params       # tied 16 x 16 embedding; 4*16*16 + 2*16*64 + 64 + 9*16 in the block; final LN 2*16
    3568
    >>> loss = model.loss([[1, 2, 3, 4]], [[2, 3, 4, 5]], backward=True)     # also fills model.grads
    >>> model.grads.keys() == model.params.keys(), model.generate([[1, 2]], 3).shape    # greedy: 3 more tokens
    (True, (1, 5))
    """

    def __init__(self, cfg: ModelConfig, *, backend: str = "auto"):
        self.cfg = cfg.validate()
        self.ops = ops = fused.ops(backend, cfg.dtype)
        rng = np.random.default_rng(cfg.seed)
        dt = np.dtype(cfg.dtype)
        self.pos = PositionEncoding(cfg, rng, ops.softmax)
        d_tok = self.pos.token_width
        self.embed_scale = math.sqrt(d_tok) if cfg.embed_scale == "sqrt_d" else 1.0
        self.tok_emb = Embedding(cfg.vocab_size, d_tok, rng=rng, dtype=dt,
                                 init_std=1.0 / self.embed_scale if cfg.embed_scale == "sqrt_d" else cfg.init_std)
        self.blocks = [Block(cfg, self.pos, i, rng, ops) for i in range(cfg.n_layers)]
        self.ln_f = ops.LayerNorm(cfg.d_model, dtype=dt)
        self.head = None if cfg.tied else Linear(cfg.d_model, cfg.vocab_size, bias=False, rng=rng,
                                                 init_std=cfg.init_std, dtype=dt)
        self._modules = {"tok_emb": self.tok_emb, **self.pos.modules()}
        for i, b in enumerate(self.blocks):
            self._modules.update({f"blocks.{i}.{k}": m for k, m in b.modules().items()})
            self._modules.update({f"blocks.{i}.{k}": m for k, m in self.pos.layer_modules(i).items()})
        self._modules["ln_f"] = self.ln_f
        if self.head is not None:
            self._modules["lm_head"] = self.head
        self.params = {f"{p}.{k}": v for p, m in self._modules.items() for k, v in m.params.items()}
        self.grads: dict = {}
        self._saved = None

    # ---------------------------------------------------------------- bookkeeping
    @property
    def num_params(self) -> int:
        return int(sum(v.size for v in self.params.values()))

    def load_params(self, values: dict) -> None:
        """Copy ``values`` into the parameters in place.

        Keys and shapes must match exactly, values must be finite floats; everything is checked
        before the first parameter is written, so a bad dict leaves the model unchanged.
        """
        require(isinstance(values, dict), f"values must be a dict of named arrays, got {type(values).__name__}",
                TypeError)
        missing, extra = sorted(set(self.params) - set(values)), sorted(set(values) - set(self.params))
        require(not missing and not extra, f"parameter names differ: missing {missing}, unexpected {extra}")
        arrays = {}
        for k, v in values.items():
            v = arrays[k] = np.asarray(v)
            require(v.dtype.kind == "f", f"parameter {k!r} must be a float array, got dtype {v.dtype}", TypeError)
            require(v.shape == self.params[k].shape, f"parameter {k!r} has shape {self.params[k].shape}, got {v.shape}")
            require(np.all(np.isfinite(v)), f"parameter {k!r} holds NaN or inf")
        for k, v in arrays.items():
            self.params[k][...] = v

    def _collect_grads(self, dhead_weight):
        grads = {f"{p}.{k}": v for p, m in self._modules.items() for k, v in m.grads.items()}
        if self.cfg.tied:
            grads["tok_emb.weight"] = grads["tok_emb.weight"] + dhead_weight
        self.grads = grads

    # ---------------------------------------------------------------- forward / backward
    def forward(self, tokens: ArrayLike, cache: KVCache | None = None, *,
                positions: ArrayLike | None = None) -> np.ndarray:
        """Logits ``(B, T, vocab)`` for integer tokens ``(B, T)``.

        With a :class:`KVCache` the tokens continue the cached sequence (positions
        ``cache.length ...``), the cache is extended in place, and :meth:`backward` is not
        available for this call.

        ``positions`` (optional, no cache): the positions of the ``T`` tokens, strictly
        increasing integers ``>= 0`` shared by the batch, instead of ``0 .. T-1`` (what
        :meth:`training_positions` samples; only encodings that take positions use them).
        """
        tokens = as_int_array(tokens, "tokens")
        if tokens.ndim != 2:  # (every forward: the message is formatted only on failure)
            raise ValueError(f"tokens must be (batch, length), got shape {tokens.shape}")
        B, T = tokens.shape
        require(T > 0, f"tokens must hold at least one position per sequence, got shape {tokens.shape}")
        if cache is not None:
            self._check_cache(cache, B)
        start = 0 if cache is None else cache.length
        given = None if positions is None else self._check_positions(positions, T, cache)
        positions = np.arange(start, start + T) if given is None else given
        x = self.tok_emb.forward(tokens)
        if self.embed_scale != 1.0:
            x = x * np.asarray(self.embed_scale, dtype=x.dtype)
        h = self.pos.embed(x, positions)
        self.pos.begin(start, T, cache, given)
        for block in self.blocks:
            h = block.forward(h, cache)
        hf = self.ln_f.forward(h)
        if self.head is not None:
            logits = self.head.forward(hf)
        else:
            hf = hf[..., : self.tok_emb.dim]
            logits = hf @ self.tok_emb.params["weight"].T
        if cache is not None:
            cache.length += T
        self._saved = None if cache is not None else hf
        return logits

    def _check_positions(self, positions, T: int, cache) -> np.ndarray:
        """``forward``'s ``positions``: ``(T,)`` strictly increasing integers ``>= 0`` (below ``max_len``
        for a learned table), without a cache."""
        positions = as_int_array(positions, "positions")
        require(cache is None, "positions and a KV cache do not mix: cached decoding continues at cache.length")
        require(positions.shape == (T,),
                f"positions must have shape (T,) = ({T},) for tokens of length {T}, got {positions.shape}")
        require(not T or (positions[0] >= 0 and np.all(np.diff(positions) > 0)),
                f"positions must be strictly increasing integers >= 0, got {positions}")
        require(not T or self.cfg.position != "learned" or positions[-1] < self.cfg.max_len,
                f"positions must be < max_len ({self.cfg.max_len}) for a learned table, got {positions[-1:]}")
        return positions

    def training_positions(self, length: int, rng: np.random.Generator) -> np.ndarray | None:
        """Positions for one training batch of sequences of ``length`` tokens: with
        ``position_options['randomized_max_len'] = M`` (Ruoss et al. 2023) a sorted sample of
        ``length`` distinct positions from ``0 .. M-1`` drawn with ``rng`` (one per batch), else
        None (the ordinary ``0 .. length-1``). Evaluation never calls this."""
        return None if self.pos.randomized_max_len is None else self.pos.sample_positions(length, rng)

    def backward(self, dlogits: ArrayLike) -> None:
        """Backpropagate ``dL/dlogits`` (``(B, T, vocab)``) from the last uncached forward into
        :attr:`grads`."""
        require(self._saved is not None, "backward needs a preceding forward without a KV cache", RuntimeError)
        hf = self._saved
        dlogits = np.asarray(dlogits)
        if dlogits.shape != hf.shape[:-1] + (self.cfg.vocab_size,):
            raise ValueError(f"dlogits must have shape {hf.shape[:-1] + (self.cfg.vocab_size,)}, got {dlogits.shape}")
        dhead = None
        if self.head is not None:
            dhf = self.head.backward(dlogits)
        else:
            V = self.cfg.vocab_size
            W = self.tok_emb.params["weight"]
            dhead = dlogits.reshape(-1, V).T @ hf.reshape(-1, hf.shape[-1])
            dhf = dlogits @ W
            if dhf.shape[-1] != self.cfg.d_model:  # concat + tied: only the token slice reaches the logits
                dhf = np.concatenate([dhf, np.zeros(dhf.shape[:-1] + (self.cfg.d_model - dhf.shape[-1],),
                                                    dtype=dhf.dtype)], axis=-1)
        dh = self.ln_f.backward(dhf)
        for block in reversed(self.blocks):
            dh = block.backward(dh)
        dx = self.pos.embed_backward(dh)
        if self.embed_scale != 1.0:
            dx = dx * np.asarray(self.embed_scale, dtype=dx.dtype)
        self.tok_emb.backward(dx)
        self._collect_grads(dhead)

    def loss(self, tokens: ArrayLike, targets: ArrayLike, *, ignore_index: int = -100,
             backward: bool = False) -> float:
        """Mean cross-entropy of :meth:`forward` against ``targets`` (``ignore_index`` skipped);
        with ``backward=True`` also fills :attr:`grads`."""
        logits = self.forward(tokens)
        loss, cache = self.ops.softmax_cross_entropy(logits, targets, ignore_index=ignore_index)
        if backward:
            self.backward(softmax_cross_entropy_backward(cache))
        return loss

    # ---------------------------------------------------------------- decoding
    def init_cache(self) -> KVCache:
        """An empty :class:`KVCache` (for :meth:`decode_step` / ``forward(..., cache=)``)."""
        self._check_cacheable()
        return KVCache()

    def _check_cacheable(self) -> None:
        """A KV cache needs a causal model and an encoding that defines cached decoding."""
        require(self.cfg.causal, "a KV cache needs a causal model (causal=True): in a bidirectional encoder every "
                "position attends to later tokens, so earlier states change as tokens arrive")
        require(not self.pos.kv_cache_unsupported,
                f"KV-cache decoding is not defined for {self.cfg.position!r}: {self.pos.kv_cache_unsupported}")

    def _check_cache(self, cache, batch: int) -> None:
        """``cache`` continues this model's sequences: one key and one value array per layer (none
        before the first call), each ``(batch, heads, cache.length, head_dim)`` in the model's
        dtype, and a dict ``extra``."""
        self._check_cacheable()
        require(isinstance(cache, KVCache), f"cache must be a KVCache, got {type(cache).__name__}", TypeError)
        n = cache.length
        require(isinstance(n, int) and not isinstance(n, bool) and n >= 0, f"cache.length must be an int >= 0, got {n!r}")
        require(isinstance(cache.keys, list) and isinstance(cache.values, list) and isinstance(cache.extra, dict),
                "cache.keys and cache.values must be lists and cache.extra a dict, got "
                f"{type(cache.keys).__name__}, {type(cache.values).__name__}, {type(cache.extra).__name__}", TypeError)
        layers = len(cache.keys)
        require(layers == len(cache.values) and layers in ((0, self.cfg.n_layers) if n == 0 else (self.cfg.n_layers,)),
                f"cache holds {layers} key and {len(cache.values)} value arrays for length {n}; this model has "
                f"{self.cfg.n_layers} layers")
        want = (batch, self.cfg.n_heads, n, self.cfg.head_dim)
        for i, (k, v) in enumerate(zip(cache.keys, cache.values)):
            ok = all(isinstance(a, np.ndarray) and a.shape == want and a.dtype == self.cfg.dtype for a in (k, v))
            require(ok, f"cache layer {i}: keys {getattr(k, 'shape', k)} {getattr(k, 'dtype', '')} and values "
                    f"{getattr(v, 'shape', v)} {getattr(v, 'dtype', '')}, expected {want} (batch, heads, cache.length, "
                    f"head_dim) {np.dtype(self.cfg.dtype)}")

    def decode_step(self, tokens: ArrayLike, cache: KVCache) -> np.ndarray:
        """Feed one token per sequence (``(B,)``) after the cached ones; return its logits ``(B, vocab)``."""
        tokens = as_int_array(tokens, "tokens")
        require(tokens.ndim == 1, f"decode_step takes one token per sequence, shape (batch,), got {tokens.shape}")
        require(cache is not None, "decode_step needs a KVCache (forward without one runs the whole sequence)", TypeError)
        return self.forward(tokens[:, None], cache=cache)[:, -1]

    def generate(self, prompt: ArrayLike, steps: int) -> np.ndarray:
        """Greedy continuation of ``prompt`` (``(B, T0)``) by ``steps`` tokens with the KV cache."""
        prompt = as_int_array(prompt, "prompt")
        require(prompt.ndim == 2 and prompt.shape[1] > 0, "prompt must be (batch, length) with length >= 1 (the "
                f"continuation starts from the last token's logits), got shape {prompt.shape}")
        steps = check_int(steps, "steps", minimum=0)
        check_alloc((prompt.shape[0], prompt.shape[1] + steps), np.int64, "generated tokens (batch, length + steps)")
        cache = self.init_cache()
        out = [prompt]
        logits = self.forward(prompt, cache=cache)[:, -1]
        for _ in range(steps):
            nxt = logits.argmax(-1)
            out.append(nxt[:, None])
            logits = self.decode_step(nxt, cache)
        return np.concatenate(out, axis=1)
