r"""The position encodings of the model, one entry each: where it acts, its options, its defaults.

This is the one place that describes an encoding to :class:`posenc_np.model.Transformer`. An
:class:`Encoding` says where the encoding acts and how to build the object that does it:

``"none"``
    nothing (NoPE: a causal decoder still sees order through its mask).
``"embedding"``
    ``build(cfg, options, rng)`` returns position vectors ``p`` with ``forward(positions) ->
    (T, d_pos)``, ``backward(dp)`` and ``params``/``grads``; the model fuses them with the token
    embedding (``add``, ``multiply``, or ``concat`` with option ``dim``).
``"rotation"``
    ``build`` returns a :class:`RotaryTables`: the rotation's cos/sin tables for queries and
    keys, computed once per (frequencies, positions).
``"logits"``
    ``build`` is called once per layer and returns an :class:`posenc_np.attention.Hook` (a
    logit term, optionally a value term; it receives the attention mask). ``scale`` overrides
    the logit scale :math:`1/\sqrt{d}`; ``attention`` names a fused attention function (ALiBi's
    kernel) used instead of the attention core when given.

Options are declared with :class:`Option`: a default (a value or a function of the
:class:`~posenc_np.model.ModelConfig`) and a check; an option without a check is checked by the
constructor it is passed to (under its own name). ``ModelConfig.position_options`` may set any
of them; unknown keys are an error.

Adding an encoding is its module (the formula, forward and backward, a hook if it acts on the
logits) plus one entry in :data:`REGISTRY`; ``docs/architecture.md`` walks through it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ._checks import check_choice, check_even, check_int, check_real, require

if TYPE_CHECKING:  # annotations only: model imports this module
    from ._exact import ExactFrequencies
    from .model import KVCache, ModelConfig

__all__ = ["BUILTIN", "REGISTRY", "Encoding", "Option", "RotaryTables", "register", "registered"]

#: Where an encoding acts in the model.
ACTS = ("none", "embedding", "rotation", "logits")


@dataclass(frozen=True)
class Option:
    """A ``position_options`` key: its ``default`` (a value, or ``default(cfg)``), an optional
    ``check(value, name) -> value`` (``name`` is ``"position_options['key']"``), and ``when(cfg)``:
    the configurations that take it (others reject the key as unknown).

    Examples
    --------
    >>> from posenc_np.model import ModelConfig
    >>> from posenc_np.registry import Encoding, Option
    >>> demo = Encoding("demo", "none", "a demo", {"width": Option(lambda cfg: cfg.d_model // 2)})
    >>> demo.resolve(ModelConfig(vocab_size=8, d_model=64))      # default(cfg)
    {'width': 32}
    >>> demo.resolve(ModelConfig(vocab_size=8, position_options={"width": 5}))
    {'width': 5}
    """

    default: object = None
    check: Callable | None = None
    when: Callable | None = None


@dataclass(frozen=True)
class Encoding:
    """One encoding as the model uses it (see the module docstring).

    Examples
    --------
    >>> from posenc_np.model import ModelConfig
    >>> from posenc_np.registry import REGISTRY
    >>> t5 = REGISTRY["t5"]
    >>> t5.acts, t5.absolute
    ('logits', False)
    >>> t5.resolve(ModelConfig(vocab_size=8, position="t5", position_options={"num_buckets": 16}))
    {'num_buckets': 16, 'max_distance': 128}
    """

    name: str
    acts: str
    summary: str
    options: dict = field(default_factory=dict)
    build: Callable | None = None
    scale: Callable | None = None
    attention: Callable | None = None
    attention_backward: Callable | None = None
    #: True when the encoding is only defined for a causal decoder (``build`` raises otherwise).
    decoder_only: bool = False
    #: None when step-by-step decoding with a KV cache is defined, else the reason it is not.
    kv_cache_unsupported: str | None = None

    @property
    def absolute(self) -> bool:
        """Whether the encoding is fused with the token embedding (``ModelConfig.fusion`` applies)."""
        return self.acts == "embedding"

    def resolve(self, cfg: ModelConfig) -> dict:
        """``cfg.position_options`` with the defaults filled in and every checked option checked."""
        given = dict(cfg.position_options)
        taken = {k: o for k, o in self.options.items() if o.when is None or o.when(cfg)}
        unknown = sorted(set(given) - set(taken))
        require(not unknown, f"unknown position_options for {self.name!r}: {unknown}")
        out = {}
        for key, opt in taken.items():
            value = given[key] if key in given else (opt.default(cfg) if callable(opt.default) else opt.default)
            out[key] = value if opt.check is None else opt.check(value, f"position_options[{key!r}]")
        return out


# --------------------------------------------------------------------------- option checks

def _positive_real(value, name):
    return check_real(value, name, positive=True)


def _choice(choices):
    return lambda value, name: check_choice(value, name, choices)


def _positive_int(value, name):
    return check_int(value, name, minimum=1)


def _fraction(value, name):
    p = check_real(value, name, nonnegative=True)
    require(p <= 1.0, f"{name} must lie in [0, 1] (the fraction of frequencies kept), got {p}")
    return p


def _randomized_max_len(value, name):
    return None if value is None else check_int(value, name, minimum=1)


#: Randomized positions (Ruoss et al. 2023), for the encodings that take positions (embedding and
#: rotation): in training (:meth:`posenc_np.model.Transformer.training_positions`) a sequence of
#: length T gets a sorted sample of T distinct positions from ``0 .. randomized_max_len - 1``;
#: evaluation and decoding use ``0 .. T - 1``. None: off.
_RANDOMIZED = Option(None, _randomized_max_len)

#: Width of the position vector for ``fusion="concat"`` (the token embedding gets the rest).
_CONCAT_DIM = Option(lambda cfg: cfg.d_model // 2, _positive_int, when=lambda cfg: cfg.fusion == "concat")


# --------------------------------------------------------------------------- embedding encodings

def _d_pos(cfg, options) -> int:
    """The position vector's width: ``d_model``, or option ``dim`` (< d_model) for ``concat``."""
    if cfg.fusion != "concat":
        return cfg.d_model
    require(options["dim"] < cfg.d_model, f"concat position dim ({options['dim']}) must be < d_model ({cfg.d_model})")
    return options["dim"]


def _learned(cfg, options, rng):
    """``absolute.LearnedPositionalEmbedding`` with ``max_len`` rows in the model's dtype; for
    ``multiply`` it starts at ``1 + N(0, sigma^2)`` (the identity of the product)."""
    from . import absolute

    require((options["randomized_max_len"] or 0) <= cfg.max_len, f"position_options['randomized_max_len'] "
            f"({options['randomized_max_len']}) must be <= max_len ({cfg.max_len}), the rows of the learned table the "
            "sampled positions index")
    table = absolute.LearnedPositionalEmbedding(cfg.max_len, _d_pos(cfg, options), seed=rng, init_std=cfg.init_std)
    w = table.params["weight"].astype(np.dtype(cfg.dtype))
    if cfg.fusion == "multiply":
        w += 1.0
    table.params["weight"] = w
    table.grads["weight"] = np.zeros_like(w)
    return table


class SinusoidTable:
    """Fixed sinusoidal position vectors (:func:`posenc_np.absolute.sinusoidal`), in the model's
    dtype; rows for positions ``0 .. N-1`` are computed once and sliced."""

    def __init__(self, dim: int, base: float, layout: str, dtype):
        from . import absolute

        require(dim % 2 == 0, f"the sinusoidal width must be even, got {dim}")
        self._absolute, self.dim, self.layout, self.dtype = absolute, dim, layout, np.dtype(dtype)
        absolute.sinusoidal_frequencies(dim, base=base)  # the door's checks of dim and base
        self.freqs = absolute.geometric_frequencies(dim, float(base))
        self.params, self.grads = {}, {}
        self._rows = np.zeros((0, dim), dtype=self.dtype)

    def forward(self, positions: np.ndarray) -> np.ndarray:
        """Rows for integer ``positions`` (a range ``start .. start+T-1`` is served from the kept rows)."""
        end = int(positions[-1]) + 1 if positions.size else 0
        if positions.size and positions[0] >= 0 and np.array_equal(positions, np.arange(positions[0], end)):
            if end > len(self._rows):
                new = self._absolute.sinusoid_rows(np.arange(len(self._rows), end), self.freqs, self.layout)
                self._rows = np.concatenate([self._rows, new.astype(self.dtype)])
            return self._rows[positions[0]:end]
        return self._absolute.sinusoid_rows(positions, self.freqs, self.layout).astype(self.dtype)

    def backward(self, dp) -> None:
        """Nothing to learn."""


def _sinusoidal(cfg, options, rng):
    return SinusoidTable(_d_pos(cfg, options), options["base"], options["layout"], cfg.dtype)


# --------------------------------------------------------------------------- rotation encodings

class RotaryTables:
    """Per-model RoPE state: the scaling dict parsed once, frequencies kept per length key, cos/sin
    tables kept for the positions last asked for and extended as decoding goes on.

    :meth:`begin` prepares a forward call (and moves a KV cache to new frequencies);
    :meth:`rotate` rotates its queries and keys, in place when asked. :meth:`tables` returns
    ``((cos_q, sin_q), (cos_k, sin_k))`` for positions ``start .. start+length-1`` (the same
    arrays for both unless xPos scales them): the values of :func:`posenc_np.rope.cos_sin` (or
    :func:`~posenc_np.rope.xpos_cos_sin`) for exactly these positions, since every entry is a
    function of its own position only.

    Examples
    --------
    >>> from posenc_np.model import ModelConfig
    >>> from posenc_np.registry import REGISTRY, RotaryTables
    >>> cfg = ModelConfig(vocab_size=8, d_model=8, n_heads=2, position="rope", dtype="float64")
    >>> (cos, sin), _ = RotaryTables(cfg, REGISTRY["rope"].resolve(cfg)).tables(0, 3)
    >>> cos.shape, cos[0].tolist()        # 3 positions x head_dim 4; position 0: cos 0 = 1
    ((3, 4), [1.0, 1.0, 1.0, 1.0])
    >>> sin[1].round(6).tolist()          # position 1, half layout, inv_freq (1, 10000**-0.5): sin 1, sin 0.01
    [0.841471, 0.01, 0.841471, 0.01]
    """

    def __init__(self, cfg, options, *, xpos_scale_base: float | None = None):
        from . import rope, rope_scaling

        self._rope = rope
        self.layout, self.dtype = options["layout"], np.dtype(cfg.dtype)
        rotary_dim = options["rotary_dim"]
        require(rotary_dim % 2 == 0 and rotary_dim <= cfg.head_dim,
                f"rotary_dim must be even and <= head_dim={cfg.head_dim}, got {rotary_dim}")
        self.scaling = rope_scaling.parse_scaling(rotary_dim, base=options["base"], scaling=options["scaling"],
                                          max_position_embeddings=options["max_position_embeddings"])
        self.xpos_scale_base = xpos_scale_base
        self.p = options["p"]  # p-RoPE: the kept fraction of the highest frequencies (1 = RoPE)
        self._freqs = None  # (length key, (inv_freq, attention_factor))
        self._kept = None  # (length key, first position, tables)
        self._tables = None  # this call's
        self.frequencies(cfg.max_len)  # evaluate the formula once now: errors at construction, not first forward

    def frequencies(self, seq_len: int) -> tuple[ExactFrequencies | np.ndarray, float]:
        """``(inv_freq, attention_factor)`` for a length, computed once per length key."""
        key = self.scaling.length_key(seq_len)
        if self._freqs is None or self._freqs[0] != key:
            inv_freq, factor = self.scaling.exact_frequencies(seq_len)
            self._freqs = (key, (self._rope.zero_low_frequencies(inv_freq.rounded, self.p) if self.p != 1.0
                                 else inv_freq, factor))
        return self._freqs[1]

    def begin(self, start: int, length: int, cache: KVCache | None, positions: np.ndarray | None = None) -> None:
        """Tables for this call; cached keys rotated with other frequencies are moved to the current ones.

        ``positions`` (sorted, without a cache): tables for exactly these positions instead of
        ``start .. start + length - 1`` (randomized positions), computed directly."""
        if positions is not None:
            inv_freq, factor = self.frequencies(int(positions[-1]) + 1)
            pairs = self._compute(positions, inv_freq, factor)
            self._tables = (pairs[0], pairs[-1])
            return
        freq, _ = self.frequencies(start + length)
        freq = freq.rounded if isinstance(freq, self._rope.ExactFrequencies) else freq
        if cache is not None:
            old = cache.extra.get("inv_freq")
            if old is not None and not np.array_equal(old, freq):
                kpos = np.arange(start)
                cache.keys = [self._rope.rerotate(k, kpos, old, freq, layout=self.layout) for k in cache.keys]
            cache.extra["inv_freq"] = freq
        self._tables = self.tables(start, length)

    def rotate(self, q: np.ndarray, k: np.ndarray, *, inverse: bool = False,
               in_place: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Rotate ``q`` and ``k`` by the tables of :meth:`begin` (``inverse``: the backward;
        ``in_place``: into ``q`` and ``k``, which the caller owns)."""
        (cq, sq), (ck, sk) = self._tables
        rope, layout = self._rope, self.layout
        out_q, out_k = (q, k) if in_place else (None, None)
        if cq is ck:
            return rope.rotate_qk(q, k, cq, sq, layout, inverse, "auto", out_q, out_k)
        q = rope.rotate(q, cq, sq, layout, inverse, "auto", out_q)
        k = rope.rotate(k, ck, sk, layout, inverse, "auto", out_k)
        return q, k

    def _compute(self, positions, inv_freq, factor) -> list:
        """``[(cos, sin)]`` (RoPE) or ``[(cos_q, sin_q), (cos_k, sin_k)]`` (xPos) for ``positions``."""
        if self.xpos_scale_base is None:
            return [self._rope.cos_sin(positions, inv_freq, attention_factor=factor, layout=self.layout,
                                       dtype=self.dtype)]
        return [self._rope.xpos_cos_sin(positions, inv_freq, role=role, centre="none", scale_base=self.xpos_scale_base,
                                        layout=self.layout, dtype=self.dtype) for role in ("query", "key")]

    def tables(self, start: int, length: int) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
        """Tables for positions ``start .. start+length-1`` (see the class docstring)."""
        inv_freq, factor = self.frequencies(start + length)
        key, end = self.scaling.length_key(start + length), start + length
        if self._kept is not None and self._kept[0] == key:
            _, lo, kept = self._kept
            hi = lo + len(kept[0][0])
            if lo <= start <= hi < end:  # extend the kept rows by the new positions only
                new = self._compute(np.arange(hi, end), inv_freq, factor)
                kept = [(np.concatenate([c, nc]), np.concatenate([s, ns])) for (c, s), (nc, ns) in zip(kept, new)]
                self._kept = (key, lo, kept)
            if lo <= start and end <= lo + len(kept[0][0]):
                pairs = [(c[start - lo:end - lo], s[start - lo:end - lo]) for c, s in kept]
                return pairs[0], pairs[-1]
        pairs = self._compute(np.arange(start, end), inv_freq, factor)
        self._kept = (key, start, pairs)
        return pairs[0], pairs[-1]


def _rotary(cfg, options, rng):
    return RotaryTables(cfg, options)


def _xpos(cfg, options, rng):
    require(options["scaling"] is None, "xpos does not take a RoPE scaling dict here")
    return RotaryTables(cfg, options, xpos_scale_base=options["scale_base"])


#: Options of the rotary encodings.
_ROTARY = {
    "base": Option(10000.0),
    "scaling": Option(None),
    "layout": Option("half", _choice(("half", "interleaved"))),
    "rotary_dim": Option(lambda cfg: cfg.head_dim, lambda v, name: check_int(v, name, minimum=2)),
    "max_position_embeddings": Option(lambda cfg: cfg.max_len, _positive_int),
    "p": Option(1.0, _fraction),  # p-RoPE (Barbero et al. 2024): keep the highest fraction p of the frequencies
    "randomized_max_len": _RANDOMIZED,
}


# --------------------------------------------------------------------------- logit encodings

def _alibi_hook(cfg, options, rng):
    from . import alibi

    return alibi.ALiBiBias(cfg.n_heads, form="causal" if cfg.causal else "symmetric")


def _alibi_attention(q, k, v, *, causal, hook, scale):
    from . import alibi

    return alibi.attend(q, k, v, hook.slopes, causal, scale, "auto")


def _alibi_attention_backward(dout, cache):
    from . import alibi

    return alibi.attention_backward(dout, cache)


def _relative():
    from . import relative

    return relative


def _t5(cfg, options, rng):
    return _relative().T5RelativeBias(cfg.n_heads, num_buckets=options["num_buckets"],
                                      max_distance=options["max_distance"], bidirectional=not cfg.causal, seed=rng,
                                      init_std=cfg.init_std)


def _shaw(cfg, options, rng):
    return _relative().ShawRelativeAttention(cfg.head_dim, options["max_relative_position"],
                                             use_values=options["use_values"], seed=rng, init_std=cfg.init_std)


def _transformer_xl(cfg, options, rng):
    require(cfg.causal, "transformer_xl needs causal=True: its rel_shift fills future-key logits with values "
            "of the next query row, which only the causal mask hides")
    return _relative().TransformerXLRelative(cfg.n_heads, cfg.head_dim, options["d_r"], seed=rng,
                                             init_std=cfg.init_std)


def _deberta(cfg, options, rng):
    return _relative().DebertaDisentangled(cfg.n_heads, cfg.head_dim, position_buckets=options["position_buckets"],
                                           max_relative_positions=options["max_relative_positions"],
                                           pos_att_type=options["pos_att_type"], seed=rng, init_std=cfg.init_std)


def _deberta_scale(cfg, options):
    return _relative().deberta_scale(cfg.head_dim, options["pos_att_type"])


def _cope(cfg, options, rng):
    return _relative().CoPE(cfg.head_dim, options["npos_max"], gate_scale=options["gate_scale"], seed=rng,
                            init_std=cfg.init_std)


def _fire(cfg, options, rng):
    return _relative().FIREBias(cfg.n_heads, width=options["width"], init_c=options["init_c"],
                                init_L=options["init_L"], eps=options["eps"], seed=rng)


def _dpb(cfg, options, rng):
    return _relative().DynamicPositionBias(cfg.n_heads, width=options["width"], depth=options["depth"],
                                           log_distance=options["log_distance"], seed=rng)


def _kerple(cfg, options, rng):
    return _relative().KerpleBias(cfg.n_heads, variant=options["variant"], seed=rng)


def _sandwich(cfg, options, rng):
    return _relative().SandwichBias(cfg.n_heads, dim=options["dim"], compression=options["compression"])


def _even_int(value, name):
    return check_even(value, name)


# --------------------------------------------------------------------------- the registry

#: Encoding name -> :class:`Encoding` (the table in ``docs/model.md`` lists the same).
REGISTRY: dict[str, Encoding] = {e.name: e for e in (
    Encoding("none", "none", "NoPE: nothing (causal attention alone carries order)"),
    Encoding("learned", "embedding", "learned table of max_len rows, fused with the token embedding; cannot "
             "extrapolate", {"dim": _CONCAT_DIM, "randomized_max_len": _RANDOMIZED}, _learned),
    Encoding("sinusoidal", "embedding", "Vaswani sinusoid, fused with the token embedding",
             {"dim": _CONCAT_DIM, "base": Option(10000.0, _positive_real),
              "layout": Option("interleaved", _choice(("interleaved", "concat"))), "randomized_max_len": _RANDOMIZED},
             _sinusoidal),
    Encoding("rope", "rotation", "rotates q and k per head (any Hugging Face scaling dict)", _ROTARY, _rotary),
    Encoding("p_rope", "rotation", "RoPE keeping the highest fraction p of the frequencies (default 0.25), the "
             "rest unrotated (Barbero et al. 2024)", {**_ROTARY, "p": Option(0.25, _fraction)}, _rotary),
    Encoding("xpos", "rotation", "RoPE with the xPos scale, centre 'none'",
             {**_ROTARY, "scale_base": Option(512.0, _positive_real)}, _xpos),
    Encoding("alibi", "logits", "linear bias -m_h (q - k) (symmetric in the encoder), fixed slopes; the fused "
             "kernel when its backend picks it", {}, _alibi_hook, attention=_alibi_attention,
             attention_backward=_alibi_attention_backward),
    Encoding("t5", "logits", "learned bucketed bias per layer (bidirectional buckets in the encoder)",
             {"num_buckets": Option(32), "max_distance": Option(128)}, _t5),
    Encoding("shaw", "logits", "relative keys and values clipped at max_relative_position",
             {"max_relative_position": Option(16), "use_values": Option(True)}, _shaw),
    Encoding("transformer_xl", "logits", "u, v and W_r R terms with rel_shift",
             {"d_r": Option(lambda cfg: cfg.d_model)},
             _transformer_xl, decoder_only=True),
    Encoding("deberta", "logits", "disentangled c2p + p2c, logits scaled by 1/sqrt(d (1 + terms))",
             {"max_relative_positions": Option(lambda cfg: cfg.max_len), "position_buckets": Option(-1),
              "pos_att_type": Option("c2p|p2c")}, _deberta, scale=_deberta_scale),
    Encoding("cope", "logits", "contextual positions: sigmoid(q.k) gates summed over kept keys, clamped at npos_max, "
             "interpolated table term q.e[p]", {"npos_max": Option(lambda cfg: cfg.max_len),
                                               "gate_scale": Option(None)}, _cope),
    Encoding("fire", "logits", "MLP of psi(i-j)/psi(max(L, i)), psi(x) = log(|c| x + 1), learned c and L "
             "(threshold L0 = max_len)", {"width": Option(32), "init_c": Option(0.1),
                                          "init_L": Option(lambda cfg: float(cfg.max_len)), "eps": Option(1e-6)},
             _fire),
    Encoding("dpb", "logits", "dynamic position bias: SiLU MLP of sign(r) log(|r|+1) per head",
             {"width": Option(lambda cfg: max(cfg.d_model // 4, 1)), "depth": Option(2),
              "log_distance": Option(True)}, _dpb),
    Encoding("kerple", "logits", "KERPLE kernel bias -r1 log(1 + r2|m-n|) or -r1 |m-n|^r2, learned per head and "
             "layer, projected onto r >= 0.01 (power: r2 <= 2)", {"variant": Option("log", _choice(("log", "power")))},
             _kerple),
    Encoding("sandwich", "logits", "parameter-free bias: inner product of d'-wide sinusoids minus d'/2, divided by "
             "8h/H per head",
             {"dim": Option(128, _even_int), "compression": Option("alibi", _choice(("alibi", "none")))},
             _sandwich),
)}


def default_scale(cfg) -> float:
    """The logit scale :math:`1/\\sqrt{d}` of the attention core."""
    return 1.0 / math.sqrt(cfg.head_dim)


#: The encodings this module defines (:func:`register` adds others beside them, never over them).
BUILTIN = frozenset(REGISTRY)


def register(entry: Encoding, *, replace: bool = False) -> Encoding:
    """Add a user's encoding to :data:`REGISTRY`, where the model, the study's default grid and its
    workers find it; return it.

    ``entry.build`` (and ``scale``/``attention`` when given) must be importable module-level
    functions or picklable objects: the study ships registered entries to its pool and Dask
    workers. ``ValueError`` for a built-in name, a name already registered (unless ``replace``)
    or an unknown ``acts``; ``TypeError`` for a non-:class:`Encoding` or a missing ``build``.

    Examples
    --------
    >>> from posenc_np.registry import REGISTRY, Encoding, register
    >>> entry = register(Encoding("my_nope", "none", "NoPE under another name"))
    >>> REGISTRY["my_nope"] is entry
    True
    >>> del REGISTRY["my_nope"]           # (clean up: the registry is global)
    >>> register(Encoding("rope", "none", "a second rope"))
    Traceback (most recent call last):
        ...
    ValueError: 'rope' is a built-in encoding; register yours under another name
    """
    if not isinstance(entry, Encoding):
        raise TypeError(f"entry must be a posenc_np.registry.Encoding, got {type(entry).__name__}")
    if not isinstance(entry.name, str) or not entry.name.isidentifier():
        raise ValueError(f"entry.name must be an identifier, got {entry.name!r}")
    if entry.name in BUILTIN:
        raise ValueError(f"{entry.name!r} is a built-in encoding; register yours under another name")
    if entry.acts not in ACTS:
        raise ValueError(f"entry.acts must be one of {ACTS}, got {entry.acts!r}")
    if entry.acts != "none" and not callable(entry.build):
        raise TypeError(f"entry.build must be callable for an encoding that acts on {entry.acts!r}")
    if entry.name in REGISTRY and not replace and REGISTRY[entry.name] is not entry:
        raise ValueError(f"an encoding {entry.name!r} is already registered (pass replace=True to replace it)")
    REGISTRY[entry.name] = entry
    return entry


def registered() -> dict:
    """The encodings added with :func:`register` (name -> entry).

    Examples
    --------
    >>> from posenc_np.registry import REGISTRY, Encoding, register, registered
    >>> "rope" in registered()            # built-ins are not listed
    False
    >>> entry = register(Encoding("my_nope", "none", "NoPE under another name"))
    >>> registered()["my_nope"] is entry
    True
    >>> del REGISTRY["my_nope"]           # (clean up: the registry is global)
    """
    return {k: v for k, v in REGISTRY.items() if k not in BUILTIN}
