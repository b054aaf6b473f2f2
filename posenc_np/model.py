r"""A minimal transformer with hand-written backprop and a pluggable position encoding.

Architecture (GPT-2 style, pre-LayerNorm), for tokens :math:`t_1 \dots t_T`:

.. math::

    h^{(0)} &= \mathrm{fuse}(E[t], P) \quad\text{(absolute encodings; otherwise } E[t])\\
    a &= h + W_o\,\mathrm{Attn}(\mathrm{LN}_1(h)) \qquad
    h' = a + W_2\,\mathrm{GELU}(W_1\,\mathrm{LN}_2(a))\\
    \text{logits} &= \mathrm{LN}_f(h^{(L)})\,E^\top \ \text{(tied) or } \mathrm{LN}_f(h^{(L)})\,W_{out}

``causal=True`` is a decoder (causal self-attention, KV-cache decoding); ``causal=False`` an
encoder (bidirectional attention, same layers).

The position encoding is chosen by name from :data:`REGISTRY`; each entry is a small adapter
class that says *where* the encoding acts:

==================  =========  ==========================================================
name                level      what the adapter does
==================  =========  ==========================================================
``none``            none       NoPE: nothing (causal attention alone carries order)
``learned``         embedding  learned table, fused with the token embedding
``sinusoidal``      embedding  Vaswani sinusoid, fused with the token embedding
``rope``            q/k        rotates q and k (any Hugging Face scaling dict)
``xpos``            q/k        RoPE with the xPos scale (centre ``"none"``)
``alibi``           logits     :func:`posenc_np.alibi.attention` (fused kernel when wired)
``t5``              logits     :class:`~posenc_np.relative.T5RelativeBias` hook
``shaw``            logits     :class:`~posenc_np.relative.ShawRelativeAttention` hook
``transformer_xl``  logits     Transformer-XL relative hook
``deberta``         logits     DeBERTa disentangled hook, scale ``1/sqrt(d (1 + terms))``
==================  =========  ==========================================================

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

from . import absolute, alibi
from . import attention as attn
from ._checks import as_int_array, check_alloc, check_choice, check_float_dtype, check_int, check_real
from .layers import GELU, GELU_APPROXIMATIONS, Embedding, LayerNorm, Linear

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
        Encoding options (see each adapter), e.g. ``{"scaling": {"rope_type": "linear", "factor": 2}}``.
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
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        d, ff = self.d_model, self.d_ff or 4 * self.d_model
        per_layer = 4 * d * d + 2 * d * ff + ff + 9 * d  # qkv, proj, fc1, fc2 weights and biases, two LayerNorms
        check_alloc((self.n_layers, per_layer), check_float_dtype(self.dtype), "block parameters (n_layers, per layer)")
        for name in ("causal", "tied"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be a bool, got {getattr(self, name)!r}")
        check_choice(self.position, "position", tuple(REGISTRY))
        check_choice(self.fusion, "fusion", absolute.FUSIONS)
        if self.fusion != "add" and not REGISTRY[self.position].absolute:
            raise ValueError(f"fusion={self.fusion!r} only applies to absolute encodings "
                             f"{[n for n, a in REGISTRY.items() if a.absolute]}, not {self.position!r}")
        if not isinstance(self.position_options, dict):
            raise TypeError(f"position_options must be a dict, got {type(self.position_options).__name__}")
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
    """

    length: int = 0
    keys: list = field(default_factory=list)
    values: list = field(default_factory=list)
    extra: dict = field(default_factory=dict)


# --------------------------------------------------------------------------- position adapters

class PositionEncoding:
    """Adapter base class: says where an encoding acts. The defaults contribute nothing (NoPE).

    Hooks a subclass may override:

    - embedding level: ``token_width``, ``embed(x, positions)``, ``embed_backward(dx)``;
    - q/k level: ``begin(start, length, cache)`` (per forward call), ``rotate(q, k)``,
      ``rotate_backward(dq, dk)``;
    - logits level: ``attend(layer, q, k, v, causal)`` and ``attend_backward(layer, dout, cache)``.

    Parameter holders (objects with ``params``/``grads``) are returned by ``modules()``
    (model-wide, e.g. ``{"pos_emb": table}``: parameters ``pos_emb.weight``) and
    ``layer_modules(i)`` (``{"pos": hook}``: parameters ``blocks.i.pos.*``).
    """

    name = "none"
    level = "none"
    absolute = False
    #: None when step-by-step decoding with a KV cache is defined, else the reason it is not.
    kv_cache_unsupported: str | None = None
    #: True when the encoding is only defined for a causal decoder.
    decoder_only = False

    def __init__(self, cfg: ModelConfig, rng: np.random.Generator):
        self.cfg = cfg
        self.options = dict(cfg.position_options)
        self.dtype = np.dtype(cfg.dtype)

    def _pop(self, key, default):
        return self.options.pop(key, default)

    def _done(self):
        if self.options:
            raise ValueError(f"unknown position_options for {self.name!r}: {sorted(self.options)}")

    # parameters
    def modules(self) -> dict:
        return {}

    def layer_modules(self, layer: int) -> dict:
        return {}

    # embedding level
    @property
    def token_width(self) -> int:
        return self.cfg.d_model

    def embed(self, x, positions):
        return x

    def embed_backward(self, dx):
        return dx

    # q/k level
    def begin(self, start: int, length: int, cache: KVCache | None) -> None:
        pass

    def rotate(self, q, k):
        return q, k

    def rotate_backward(self, dq, dk):
        return dq, dk

    # logits level
    def attend(self, layer: int, q, k, v, causal: bool):
        return attn.forward(q, k, v, causal=causal)

    def attend_backward(self, layer: int, dout, cache):
        g = attn.backward(dout, cache)
        return g["q"], g["k"], g["v"]


class NoPE(PositionEncoding):
    """``none``: no position information beyond the causal mask (Kazemnejad et al. 2023)."""

    def __init__(self, cfg, rng):
        super().__init__(cfg, rng)
        self._done()


class _Absolute(PositionEncoding):
    """Embedding-level encodings: :math:`h^{(0)} = \\mathrm{fuse}(E[t], p(\\text{positions}))`."""

    level = "embedding"
    absolute = True

    def __init__(self, cfg, rng):
        super().__init__(cfg, rng)
        d = cfg.d_model
        if cfg.fusion == "concat":
            self.d_pos = check_int(self._pop("dim", d // 2), "position_options['dim']", minimum=1)
            if self.d_pos >= d:
                raise ValueError(f"concat position dim ({self.d_pos}) must be < d_model ({d})")
        else:
            self.d_pos = d
        self._saved = None

    @property
    def token_width(self) -> int:
        return self.cfg.d_model - self.d_pos if self.cfg.fusion == "concat" else self.cfg.d_model

    def vectors(self, positions):  # (T,) -> (T, d_pos)
        raise NotImplementedError

    def vectors_backward(self, dp):
        pass

    def embed(self, x, positions):
        p = self.vectors(positions)
        self._saved = (x, p)
        return absolute.fuse(x, p, self.cfg.fusion)

    def embed_backward(self, dx):
        x, p = self._saved
        dtok, dp = absolute.fuse_backward(dx, x, p, self.cfg.fusion)
        self.vectors_backward(dp)
        return dtok


class LearnedAbsolute(_Absolute):
    """``learned``: :class:`posenc_np.absolute.LearnedPositionalEmbedding` with ``max_len`` rows.

    Positions past the table raise ``ValueError`` (it cannot extrapolate)."""

    name = "learned"

    def __init__(self, cfg, rng):
        super().__init__(cfg, rng)
        self._done()
        self.table = absolute.LearnedPositionalEmbedding(cfg.max_len, self.d_pos, seed=rng, init_std=cfg.init_std)
        w = self.table.params["weight"].astype(self.dtype)
        if cfg.fusion == "multiply":
            w += 1.0
        self.table.params["weight"] = w
        self.table.grads["weight"] = np.zeros_like(w)

    def modules(self):
        return {"pos_emb": self.table}

    def vectors(self, positions):
        return self.table.forward(positions)

    def vectors_backward(self, dp):
        self.table.backward(dp)


class SinusoidalAbsolute(_Absolute):
    """``sinusoidal``: :func:`posenc_np.absolute.sinusoidal` (options ``base``, ``layout``)."""

    name = "sinusoidal"

    def __init__(self, cfg, rng):
        super().__init__(cfg, rng)
        self.base = check_real(self._pop("base", 10000.0), "position_options['base']", positive=True)
        self.layout = check_choice(self._pop("layout", "interleaved"), "position_options['layout']",
                                   absolute.SINUSOIDAL_LAYOUTS)
        self._done()
        if self.d_pos % 2:
            raise ValueError(f"the sinusoidal width must be even, got {self.d_pos}")

    def vectors(self, positions):
        return absolute.sinusoidal(positions, self.d_pos, base=self.base, layout=self.layout, dtype=self.dtype)


class Rotary(PositionEncoding):
    """``rope``: rotate q and k per head (Su et al. 2021) with :mod:`posenc_np.rope`.

    Options: ``base`` (10000), ``scaling`` (a Hugging Face rope dict, verbatim), ``layout``
    (``"half"``), ``rotary_dim`` (default the head dim; partial rotary below it),
    ``max_position_embeddings`` (default ``max_len``). Frequencies that depend on the
    current length (``dynamic``, ``longrope``) are recomputed per call with
    ``seq_len = start + length``; cached keys rotated with older frequencies are moved to
    the new ones with :func:`posenc_np.rope.rerotate`. That makes cached decoding equal to a
    recompute of the prefix for a one-layer model only: in deeper layers the cached keys and
    values of earlier tokens were *computed* under the old frequencies (Hugging Face has the
    same behaviour).
    """

    name = "rope"
    level = "qk"

    def __init__(self, cfg, rng):
        super().__init__(cfg, rng)
        from . import rope  # noqa: PLC0415 (lazy: keeps `import posenc_np.model` cheap)

        self._rope = rope
        self.base = self._pop("base", 10000.0)
        self.scaling = self._pop("scaling", None)
        self.layout = check_choice(self._pop("layout", "half"), "position_options['layout']", rope.LAYOUTS)
        self.rotary_dim = check_int(self._pop("rotary_dim", cfg.head_dim), "position_options['rotary_dim']", minimum=2)
        self.max_pos = check_int(self._pop("max_position_embeddings", cfg.max_len),
                                 "position_options['max_position_embeddings']", minimum=1)
        self._extra_options()
        self._done()
        if self.rotary_dim % 2 or self.rotary_dim > cfg.head_dim:
            raise ValueError(f"rotary_dim must be even and <= head_dim={cfg.head_dim}, got {self.rotary_dim}")
        self.inv_freq(cfg.max_len)  # validate the scaling dict now, not at the first forward
        self._tables = None

    def _extra_options(self):
        pass

    def inv_freq(self, seq_len: int):
        return self._rope.inv_freq(self.rotary_dim, base=self.base, scaling=self.scaling, seq_len=seq_len,
                                   max_position_embeddings=self.max_pos)

    def _cos_sin(self, positions, inv_freq, factor, role):
        return self._rope.cos_sin(positions, inv_freq, attention_factor=factor, layout=self.layout, dtype=self.dtype)

    def begin(self, start, length, cache):
        freq, factor = self.inv_freq(start + length)
        if cache is not None:
            old = cache.extra.get("inv_freq")
            if old is not None and not np.array_equal(old, freq):
                kpos = np.arange(start)
                cache.keys = [self._rope.rerotate(k, kpos, old, freq, layout=self.layout) for k in cache.keys]
            cache.extra["inv_freq"] = freq
        pos = np.arange(start, start + length)
        self._tables = (self._cos_sin(pos, freq, factor, "query"), self._cos_sin(pos, freq, factor, "key"))

    def rotate(self, q, k):
        (cq, sq), (ck, sk) = self._tables
        return (self._rope.apply(q, cq, sq, layout=self.layout), self._rope.apply(k, ck, sk, layout=self.layout))

    def rotate_backward(self, dq, dk):
        (cq, sq), (ck, sk) = self._tables
        return (self._rope.apply_backward(dq, cq, sq, layout=self.layout),
                self._rope.apply_backward(dk, ck, sk, layout=self.layout))


class XPos(Rotary):
    """``xpos``: RoPE times :math:`\\zeta_i^{\\pm p/B}` (Sun et al. 2022), centre ``"none"``.

    Option ``scale_base`` :math:`B` (512). The centre is 0 so that a key's scale does not
    depend on the total length (a KV cache stays valid); q·k only sees :math:`\\zeta^{(m-n)/B}`.
    Frequency scaling dicts are not combined with xPos here."""

    name = "xpos"

    def _extra_options(self):
        self.scale_base = check_real(self._pop("scale_base", 512.0), "position_options['scale_base']", positive=True)
        if self.scaling is not None:
            raise ValueError("xpos does not take a RoPE scaling dict here")

    def _cos_sin(self, positions, inv_freq, factor, role):
        return self._rope.xpos_cos_sin(positions, inv_freq, role=role, centre="none", scale_base=self.scale_base,
                                       layout=self.layout, dtype=self.dtype)


class ALiBi(PositionEncoding):
    """``alibi``: :func:`posenc_np.alibi.attention` (causal form for the decoder, symmetric for
    the encoder; fixed slopes :func:`posenc_np.alibi.slopes`)."""

    name = "alibi"
    level = "logits"

    def __init__(self, cfg, rng):
        super().__init__(cfg, rng)
        self._done()

    def attend(self, layer, q, k, v, causal):
        return alibi.attention(q, k, v, causal=causal)

    def attend_backward(self, layer, dout, cache):
        g = alibi.attention_backward(dout, cache)
        return g["q"], g["k"], g["v"]


class _RelativeHook(PositionEncoding):
    """Logits-level encodings given as a :class:`posenc_np.attention.Hook`, one per layer.

    Every hook here places query ``i`` at position ``i + k_len - q_len`` (bottom-right, like
    the causal mask), so the same hook serves a full forward and cached decoding."""

    level = "logits"

    def __init__(self, cfg, rng):
        super().__init__(cfg, rng)
        from . import relative  # noqa: PLC0415

        self._relative = relative
        self.configure()
        self._done()
        self.hooks = [self.make_hook(rng) for _ in range(cfg.n_layers)]
        for hook in self.hooks:  # hooks initialise in float64; train in the model's dtype
            for key in hook.params:
                hook.params[key] = np.asarray(hook.params[key], dtype=self.dtype)
                hook.grads[key] = np.zeros_like(hook.params[key])

    def configure(self):
        pass

    def make_hook(self, rng):
        raise NotImplementedError

    def scale(self):
        return None

    def layer_modules(self, layer):
        return {"pos": self.hooks[layer]}

    def attend(self, layer, q, k, v, causal):
        return attn.forward(q, k, v, causal=causal, scale=self.scale(), hooks=(self.hooks[layer],))


class T5Bias(_RelativeHook):
    """``t5``: learned bucketed bias :class:`~posenc_np.relative.T5RelativeBias` (Raffel et al. 2020).

    Options ``num_buckets`` (32), ``max_distance`` (128); bidirectional buckets for the
    encoder, unidirectional for the decoder (as T5's ``is_decoder``). The bias is added to
    logits scaled by ``1/sqrt(d)`` (T5 itself folds the scale into its initialisation)."""

    name = "t5"

    def configure(self):
        self.num_buckets = self._pop("num_buckets", 32)
        self.max_distance = self._pop("max_distance", 128)

    def make_hook(self, rng):
        return self._relative.T5RelativeBias(self.cfg.n_heads, num_buckets=self.num_buckets,
                                             max_distance=self.max_distance, bidirectional=not self.cfg.causal,
                                             seed=rng, init_std=self.cfg.init_std)


class Shaw(_RelativeHook):
    """``shaw``: relative keys and values clipped at ``max_relative_position`` (option, default 16;
    Shaw et al. 2018), :class:`~posenc_np.relative.ShawRelativeAttention`; option ``use_values`` (True)."""

    name = "shaw"

    def configure(self):
        self.max_rel = self._pop("max_relative_position", 16)
        self.use_values = self._pop("use_values", True)

    def make_hook(self, rng):
        return self._relative.ShawRelativeAttention(self.cfg.head_dim, self.max_rel, use_values=self.use_values,
                                                    seed=rng, init_std=self.cfg.init_std)


class TransformerXL(_RelativeHook):
    """``transformer_xl``: :class:`~posenc_np.relative.TransformerXLRelative` (Dai et al. 2019),
    sinusoid width ``d_model`` (option ``d_r``), per-layer ``u``, ``v``, ``W_r``. Decoder only:
    ``rel_shift`` leaves unrelated values above the diagonal that only a causal mask hides."""

    name = "transformer_xl"
    decoder_only = True

    def configure(self):
        self.d_r = self._pop("d_r", self.cfg.d_model)
        if not self.cfg.causal:
            raise ValueError("transformer_xl needs causal=True: its rel_shift fills future-key logits with values "
                             "of the next query row, which only the causal mask hides")

    def make_hook(self, rng):
        return self._relative.TransformerXLRelative(self.cfg.n_heads, self.cfg.head_dim, self.d_r, seed=rng,
                                                    init_std=self.cfg.init_std)


class DeBERTa(_RelativeHook):
    """``deberta``: disentangled c2p + p2c (He et al. 2021), :class:`~posenc_np.relative.DebertaDisentangled`
    with the paper's p2c index, logits scaled by ``1/sqrt(d (1 + 2))``. Options
    ``max_relative_positions`` (default ``max_len``, as HF falls back to
    ``max_position_embeddings``), ``position_buckets`` (-1: none), ``pos_att_type`` ("c2p|p2c")."""

    name = "deberta"

    def configure(self):
        self.max_rel = self._pop("max_relative_positions", self.cfg.max_len)
        self.buckets = self._pop("position_buckets", -1)
        self.att_type = self._pop("pos_att_type", "c2p|p2c")
        self._scale = self._relative.deberta_scale(self.cfg.head_dim, self.att_type)

    def scale(self):
        return self._scale

    def make_hook(self, rng):
        return self._relative.DebertaDisentangled(self.cfg.n_heads, self.cfg.head_dim, position_buckets=self.buckets,
                                                  max_relative_positions=self.max_rel, pos_att_type=self.att_type,
                                                  seed=rng, init_std=self.cfg.init_std)


#: Encoding name -> adapter class (see the module docstring for where each acts).
REGISTRY: dict[str, type[PositionEncoding]] = {
    "none": NoPE,
    "learned": LearnedAbsolute,
    "sinusoidal": SinusoidalAbsolute,
    "rope": Rotary,
    "xpos": XPos,
    "alibi": ALiBi,
    "t5": T5Bias,
    "shaw": Shaw,
    "transformer_xl": TransformerXL,
    "deberta": DeBERTa,
}


# --------------------------------------------------------------------------- blocks

class Block:
    """Pre-LN transformer block: ``h + Attn(LN1 h)``, then ``+ MLP(LN2 .)``."""

    def __init__(self, cfg: ModelConfig, pos: PositionEncoding, index: int, rng: np.random.Generator):
        d, dt = cfg.d_model, np.dtype(cfg.dtype)
        proj_std = cfg.init_std / math.sqrt(2 * cfg.n_layers)
        self.cfg, self.pos, self.index = cfg, pos, index
        self.ln1 = LayerNorm(d, dtype=dt)
        self.qkv = Linear(d, 3 * d, rng=rng, init_std=cfg.init_std, dtype=dt)
        self.proj = Linear(d, d, rng=rng, init_std=proj_std, dtype=dt)
        self.ln2 = LayerNorm(d, dtype=dt)
        self.fc1 = Linear(d, cfg.d_ff or 4 * d, rng=rng, init_std=cfg.init_std, dtype=dt)
        self.act = GELU(approximate=cfg.gelu)
        self.fc2 = Linear(cfg.d_ff or 4 * d, d, rng=rng, init_std=proj_std, dtype=dt)
        self._attn_cache = None

    def modules(self) -> dict:
        return {"ln1": self.ln1, "attn.qkv": self.qkv, "attn.proj": self.proj, "ln2": self.ln2,
                "mlp.fc1": self.fc1, "mlp.fc2": self.fc2}

    def forward(self, h, cache: KVCache | None):
        H = self.cfg.n_heads
        qkv = self.qkv.forward(self.ln1.forward(h))
        q, k, v = (attn.split_heads(t, H) for t in np.split(qkv, 3, axis=-1))
        q, k = self.pos.rotate(q, k)
        if cache is not None:
            i = self.index
            if len(cache.keys) <= i:
                cache.keys.append(k[..., :0, :])
                cache.values.append(v[..., :0, :])
            k = cache.keys[i] = np.concatenate([cache.keys[i], k], axis=-2)
            v = cache.values[i] = np.concatenate([cache.values[i], v], axis=-2)
        out, self._attn_cache = self.pos.attend(self.index, q, k, v, self.cfg.causal)
        a = h + self.proj.forward(attn.merge_heads(out))
        return a + self.fc2.forward(self.act.forward(self.fc1.forward(self.ln2.forward(a))))

    def backward(self, dh):
        da = dh + self.ln2.backward(self.fc1.backward(self.act.backward(self.fc2.backward(dh))))
        dout = attn.split_heads(self.proj.backward(da), self.cfg.n_heads)
        dq, dk, dv = self.pos.attend_backward(self.index, dout, self._attn_cache)
        dq, dk = self.pos.rotate_backward(dq, dk)
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

    Attributes
    ----------
    params : dict of str to ndarray
        Every parameter, flat; arrays are shared with the layers (update in place).
    grads : dict of str to ndarray
        Same keys, written by :meth:`backward`.
    pos : PositionEncoding
        The adapter chosen from :data:`REGISTRY`.
    """

    def __init__(self, cfg: ModelConfig):
        self.cfg = cfg.validate()
        rng = np.random.default_rng(cfg.seed)
        dt = np.dtype(cfg.dtype)
        self.pos = REGISTRY[cfg.position](cfg, rng)
        d_tok = self.pos.token_width
        self.embed_scale = math.sqrt(d_tok) if cfg.embed_scale == "sqrt_d" else 1.0
        self.tok_emb = Embedding(cfg.vocab_size, d_tok, rng=rng, dtype=dt,
                                 init_std=1.0 / self.embed_scale if cfg.embed_scale == "sqrt_d" else cfg.init_std)
        self.blocks = [Block(cfg, self.pos, i, rng) for i in range(cfg.n_layers)]
        self.ln_f = LayerNorm(cfg.d_model, dtype=dt)
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
        if not isinstance(values, dict):
            raise TypeError(f"values must be a dict of named arrays, got {type(values).__name__}")
        if set(values) != set(self.params):
            missing, extra = sorted(set(self.params) - set(values)), sorted(set(values) - set(self.params))
            raise ValueError(f"parameter names differ: missing {missing}, unexpected {extra}")
        arrays = {}
        for k, v in values.items():
            v = np.asarray(v)
            if v.dtype.kind != "f":
                raise TypeError(f"parameter {k!r} must be a float array, got dtype {v.dtype}")
            if v.shape != self.params[k].shape:
                raise ValueError(f"parameter {k!r} has shape {self.params[k].shape}, got {v.shape}")
            if not np.all(np.isfinite(v)):
                raise ValueError(f"parameter {k!r} holds NaN or inf")
            arrays[k] = v
        for k, v in arrays.items():
            self.params[k][...] = v

    def _collect_grads(self, dhead_weight):
        grads = {f"{p}.{k}": v for p, m in self._modules.items() for k, v in m.grads.items()}
        if self.cfg.tied:
            grads["tok_emb.weight"] = grads["tok_emb.weight"] + dhead_weight
        self.grads = grads

    # ---------------------------------------------------------------- forward / backward
    def forward(self, tokens, cache: KVCache | None = None) -> np.ndarray:
        """Logits ``(B, T, vocab)`` for integer tokens ``(B, T)``.

        With a :class:`KVCache` the tokens continue the cached sequence (positions
        ``cache.length ...``), the cache is extended in place, and :meth:`backward` is not
        available for this call.
        """
        tokens = as_int_array(tokens, "tokens")
        if tokens.ndim != 2:
            raise ValueError(f"tokens must be (batch, length), got shape {tokens.shape}")
        if cache is not None and not self.cfg.causal:
            raise ValueError("a KV cache needs a causal model: in a bidirectional encoder every position "
                             "attends to later tokens, so earlier states change as tokens arrive")
        if cache is not None and self.pos.kv_cache_unsupported:
            raise ValueError(f"KV-cache decoding is not defined for {self.cfg.position!r}: "
                             f"{self.pos.kv_cache_unsupported}")
        B, T = tokens.shape
        start = 0 if cache is None else cache.length
        positions = np.arange(start, start + T)
        x = self.tok_emb.forward(tokens)
        if self.embed_scale != 1.0:
            x = x * np.asarray(self.embed_scale, dtype=x.dtype)
        h = self.pos.embed(x, positions)
        self.pos.begin(start, T, cache)
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

    def backward(self, dlogits) -> None:
        """Backpropagate ``dL/dlogits`` (``(B, T, vocab)``) from the last uncached forward into
        :attr:`grads`."""
        if self._saved is None:
            raise RuntimeError("backward needs a preceding forward without a KV cache")
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

    def loss(self, tokens, targets, *, ignore_index: int = -100, backward: bool = False) -> float:
        """Mean cross-entropy of :meth:`forward` against ``targets`` (``ignore_index`` skipped);
        with ``backward=True`` also fills :attr:`grads`."""
        from .layers import softmax_cross_entropy, softmax_cross_entropy_backward

        logits = self.forward(tokens)
        loss, cache = softmax_cross_entropy(logits, targets, ignore_index=ignore_index)
        if backward:
            self.backward(softmax_cross_entropy_backward(cache))
        return loss

    # ---------------------------------------------------------------- decoding
    def init_cache(self) -> KVCache:
        """An empty :class:`KVCache` (for :meth:`decode_step` / ``forward(..., cache=)``)."""
        if not self.cfg.causal:
            raise ValueError("KV-cache decoding is defined for causal models only (causal=True)")
        if self.pos.kv_cache_unsupported:
            raise ValueError(f"KV-cache decoding is not defined for {self.cfg.position!r}: "
                             f"{self.pos.kv_cache_unsupported}")
        return KVCache()

    def decode_step(self, tokens, cache: KVCache) -> np.ndarray:
        """Feed one token per sequence (``(B,)``) after the cached ones; return its logits ``(B, vocab)``."""
        tokens = as_int_array(tokens, "tokens")
        if tokens.ndim != 1:
            raise ValueError(f"decode_step takes one token per sequence, shape (batch,), got {tokens.shape}")
        return self.forward(tokens[:, None], cache=cache)[:, -1]

    def generate(self, prompt, steps: int) -> np.ndarray:
        """Greedy continuation of ``prompt`` (``(B, T0)``) by ``steps`` tokens with the KV cache."""
        prompt = as_int_array(prompt, "prompt")
        if prompt.ndim != 2:
            raise ValueError(f"prompt must be (batch, length), got shape {prompt.shape}")
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
