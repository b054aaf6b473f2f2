r"""Read a Hugging Face ``config.json``: the positional setup of a model, in this library's terms.

The one reader of Hugging Face configurations in posenc_np. :func:`read_hf_config` takes a
path (read with a size bound, as a hostile file) or an already parsed dict and returns a
:class:`ModelConfig`: which family of positional encoding the model uses and its parameters,
with the context the model's positions reach.

RoPE (semantics of transformers 5.x ``RotaryEmbeddingConfigMixin``; every spelling it accepts):

* the rope dict is ``rope_parameters`` (5.x) or ``rope_scaling`` (4.x); both present and
  different is an error. It may be one dict, or one dict per layer type keyed by the names in
  ``layer_types`` (Gemma 3: ``full_attention`` / ``sliding_attention``) - one
  :class:`RopeConfig` per layer type then;
* ``rope_type`` or the legacy ``type`` (they must agree); a dict with neither is ``default``;
* the base: the dict's ``rope_theta``, else the top-level ``rope_theta``, else GPT-NeoX's
  ``rotary_emb_base``, else Gemma 3's ``rope_local_base_freq`` (for its sliding layers), else
  the model type's default (10000 for the LLaMA/Mistral/Phi/GPT-NeoX families); two of these
  that disagree are an error;
* the rotary fraction: ``partial_rotary_factor`` (dict or top level), GPT-NeoX's
  ``rotary_pct``, or ``rotary_dim`` (MiniMax, Phi-2's ``partial_rotary_factor``); the rotary
  dim is ``int(head_dim * factor)`` and must be even;
* the head dim: ``head_dim`` when given (and not null), else ``hidden_size //
  num_attention_heads`` (``n_embd``/``n_head`` spellings included);
* ``original_max_position_embeddings``: the top-level value takes priority (Phi-3), else the
  dict's, else ``max_position_embeddings`` (``llama3``/``yarn``/``longrope``);
* the context positions reach: ``max_position_embeddings``, or the scaled length when larger
  (``factor * original_max_position_embeddings`` for yarn/llama3/longrope, ``factor *
  max_position_embeddings`` for dynamic).

ALiBi: BLOOM (always), MPT (``attn_config.alibi``, ``alibi_bias_max``), Falcon
(``alibi: true``); context from ``seq_length``/``max_seq_len``/``max_position_embeddings``.
T5 (``relative_attention_num_buckets``, ``relative_attention_max_distance``, encoder
bidirectional and decoder unidirectional); DeBERTa (``relative_attention``,
``position_buckets``, ``max_relative_positions`` (-1: ``max_position_embeddings``),
``pos_att_type`` as a list or ``"p2c|c2p"``).

An unsupported or contradictory configuration is a ``ValueError`` naming the key.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

__all__ = ["ModelConfig", "RopeConfig", "read_hf_config"]

#: Largest config.json read (a config is a few KiB; Phi-3's, with its factor lists, 4 KiB).
MAX_CONFIG_BYTES = 1 << 22
#: Model types whose config classes default ``rope_theta`` to 10000 when the file has none.
DEFAULT_THETA = {"llama": 10000.0, "mistral": 10000.0, "mixtral": 10000.0, "phi": 10000.0, "phi3": 10000.0,
                 "gpt_neox": 10000.0, "gptj": 10000.0, "stablelm": 10000.0}
#: Model types whose config classes default the rotary fraction when the file has none (GPT-NeoX: 0.25).
DEFAULT_ROTARY_PCT = {"gpt_neox": 0.25}
ALIBI_MODELS = ("bloom", "mpt", "falcon", "RefinedWeb", "RefinedWebModel")
T5_MODELS = ("t5", "mt5", "umt5", "longt5", "switch_transformers")
DEBERTA_MODELS = ("deberta", "deberta-v2")
_SCALED_CONTEXT = ("yarn", "llama3", "longrope")


def _fail(where: str, key: str, msg: str):
    raise ValueError(f"{where}: {key!r} {msg}")


def _int(cfg: dict, key: str, where: str, *, minimum: int = 1, default=None):
    value = cfg.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        _fail(where, key, f"must be an integer >= {minimum}, got {value!r}")
    return value


def _real(value, key: str, where: str, *, positive: bool = True):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or (positive and value <= 0):
        _fail(where, key, f"must be a finite number{' > 0' if positive else ''}, got {value!r}")
    return float(value)


def _agree(where: str, key: str, values: dict):
    """The one value of ``key`` given under several spellings, or an error naming them."""
    given = {name: v for name, v in values.items() if v is not None}
    distinct = {float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else repr(v)
                for v in given.values()}
    if len(distinct) > 1:
        raise ValueError(f"{where}: contradictory {key}: " + ", ".join(f"{n} = {v!r}" for n, v in given.items()))
    return next(iter(given.values()), None)


@dataclass(frozen=True)
class RopeConfig:
    """One RoPE setup (a model has one per layer type when its rope dict is nested).

    ``scaling`` is a Hugging Face dict :func:`posenc_np.rope.inv_freq` accepts (never with
    ``rope_theta``; with ``partial_rotary_factor`` when the rotary dim is a fraction of the head
    dim), or ``None`` for plain RoPE. :attr:`dim_argument` is the ``dim`` to pass with it.
    """

    head_dim: int
    rotary_dim: int
    base: float
    scaling: dict | None
    max_position_embeddings: int | None
    context: int | None
    layer_type: str | None = None
    mrope_section: tuple | None = None
    mrope_interleaved: bool = False

    @property
    def rope_type(self) -> str:
        sc = self.scaling or {}
        return sc.get("rope_type") or sc.get("type") or "default"

    @property
    def dim_argument(self) -> int:
        """``posenc_np.rope.inv_freq``'s ``dim``: the head dim when ``scaling`` carries the rotary
        fraction (or is ``proportional``), else the rotary dim."""
        sc = self.scaling or {}
        partial = self.rope_type == "proportional" or sc.get("partial_rotary_factor") is not None
        return self.head_dim if partial else self.rotary_dim

    def inv_freq(self, seq_len: int | None = None):
        """``(inv_freq, attention_factor)`` at ``seq_len`` (for ``dynamic`` and ``longrope``)."""
        from . import rope

        return rope.inv_freq(self.dim_argument, base=self.base, scaling=self.scaling, seq_len=seq_len,
                             max_position_embeddings=self.max_position_embeddings)


@dataclass(frozen=True)
class ModelConfig:
    """The positional setup of one model: ``family`` is ``"rope"``, ``"alibi"``, ``"t5"`` or
    ``"deberta"``; ``context`` the largest position (or distance) its cases reach; the family's
    parameters are in ``rope`` (one :class:`RopeConfig` per layer type), ``alibi``
    (``num_heads``, ``max_bias``, ``form``), ``t5`` (``num_buckets``, ``max_distance``,
    ``num_heads``, ``bidirectional``: the directions the model uses) or ``deberta``
    (``position_buckets``, ``max_relative_positions``, ``span``, ``pos_att_type``, ``num_heads``,
    ``head_dim``). ``context`` is ``None`` for a RoPE config without ``max_position_embeddings``
    (its frequencies are known, how far its positions go is not)."""

    model_type: str
    family: str
    context: int | None
    rope: tuple[RopeConfig, ...] = ()
    alibi: dict = field(default_factory=dict)
    t5: dict = field(default_factory=dict)
    deberta: dict = field(default_factory=dict)
    source: str = "config"

    def describe(self) -> dict:
        """A JSON-able summary (what ``posenc-np golden generate --hf-config`` reports)."""
        out = {"model_type": self.model_type, "family": self.family, "context": self.context}
        if self.rope:
            out["rope"] = [{"layer_type": r.layer_type, "head_dim": r.head_dim, "rotary_dim": r.rotary_dim,
                            "base": r.base, "rope_type": r.rope_type, "scaling": r.scaling,
                            "max_position_embeddings": r.max_position_embeddings, "context": r.context}
                           for r in self.rope]
        for name in ("alibi", "t5", "deberta"):
            if getattr(self, name):
                out[name] = getattr(self, name)
        return out


# --------------------------------------------------------------------------- reading

def _load(source) -> tuple[dict, str]:
    if isinstance(source, dict):
        return source, "config"
    from .golden.safe_io import GoldenFormatError, parse_json, read_file

    where = os.fspath(source)
    try:
        cfg = parse_json(read_file(where, limit=MAX_CONFIG_BYTES), where)
    except GoldenFormatError as exc:
        raise ValueError(f"cannot read the Hugging Face config {exc}") from None
    if not isinstance(cfg, dict):  # a bad file is a ValueError like every other config problem
        raise ValueError(f"{where}: a config.json must hold a JSON object, got {type(cfg).__name__}")  # noqa: TRY004
    return cfg, where


def read_hf_config(source) -> ModelConfig:
    """The positional setup described by a Hugging Face ``config.json`` (path or parsed dict).

    See the module docstring for the keys read and their precedence. Raises ``ValueError``
    naming the key for a config that is unreadable, contradictory, or uses a positional
    encoding this library does not cover (e.g. learned absolute positions).
    """
    cfg, where = _load(source)
    text = cfg.get("text_config")
    if isinstance(text, dict) and not any(k in cfg for k in ("rope_theta", "rope_parameters", "rope_scaling")):
        cfg = {**text, "model_type": text.get("model_type", cfg.get("model_type"))}  # multimodal: the language model
    model_type = str(cfg.get("model_type") or "unknown")
    alibi = _alibi_flag(cfg, model_type)
    rope_keys = [k for k in ("rope_theta", "rope_parameters", "rope_scaling", "rotary_emb_base", "rotary_pct")
                 if cfg.get(k) is not None]
    if alibi and rope_keys:
        raise ValueError(f"{where}: contradictory positional setup: ALiBi (model_type {model_type!r}) and RoPE "
                         f"keys {rope_keys}")
    if alibi:
        return _alibi_config(cfg, model_type, where)
    if model_type in T5_MODELS or "relative_attention_num_buckets" in cfg:
        return _t5_config(cfg, model_type, where)
    if model_type in DEBERTA_MODELS:
        return _deberta_config(cfg, model_type, where)
    if rope_keys or model_type in DEFAULT_THETA:
        return _rope_config(cfg, model_type, where)
    raise ValueError(f"{where}: 'model_type' {model_type!r} has no RoPE, ALiBi, T5 or DeBERTa keys (rope_theta, "
                     "rope_parameters, rope_scaling, alibi, relative_attention_num_buckets, relative_attention): "
                     "not a positional setup this library covers")


# --------------------------------------------------------------------------- RoPE

def _heads(cfg: dict, where: str) -> int:
    n = _agree(where, "head count", {k: cfg.get(k) for k in ("num_attention_heads", "n_head", "n_heads")})
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        _fail(where, "num_attention_heads", f"must be an integer >= 1, got {n!r}")
    return n


def _head_dim(cfg: dict, where: str) -> int:
    if cfg.get("head_dim") is not None:
        return _int(cfg, "head_dim", where, minimum=2)
    hidden = _agree(where, "hidden size", {k: cfg.get(k) for k in ("hidden_size", "n_embd", "d_model")})
    if hidden is None:
        _fail(where, "head_dim", "is missing, and so are hidden_size and num_attention_heads to derive it")
    if isinstance(hidden, bool) or not isinstance(hidden, int) or hidden < 2:
        _fail(where, "hidden_size", f"must be an integer >= 2, got {hidden!r}")
    if all(cfg.get(k) is None for k in ("num_attention_heads", "n_head", "n_heads")):
        _fail(where, "head_dim", "is missing, and so is num_attention_heads to derive it from hidden_size")
    return hidden // _heads(cfg, where)


def _rope_dicts(cfg: dict, where: str) -> dict:
    """``{layer_type or None: dict}`` from rope_parameters / rope_scaling (copies)."""
    params, legacy = cfg.get("rope_parameters"), cfg.get("rope_scaling")
    if params and legacy and params != legacy:
        raise ValueError(f"{where}: contradictory 'rope_parameters' and 'rope_scaling' (transformers 5.x reads "
                         "rope_scaling first; give one of them)")
    chosen = legacy or params or {}
    if not isinstance(chosen, dict):
        _fail(where, "rope_parameters", f"must be an object, got {chosen!r}")
    layer_types = set(cfg.get("layer_types") or ()) | set(cfg.get("_rope_type_labels") or ())
    nested = [k for k in chosen if k in layer_types]
    if nested:
        if set(chosen) - set(nested):
            _fail(where, "rope_parameters", f"mixes per-layer-type entries {nested} with global keys "
                                            f"{sorted(set(chosen) - set(nested))}")
        return {k: dict(chosen[k]) for k in sorted(nested) if chosen[k] is not None}
    if model_type_is_gemma3(cfg) and cfg.get("rope_local_base_freq") is not None:
        # transformers 4.x Gemma 3: rope_scaling/rope_theta for full attention, rope_local_base_freq for sliding
        return {"full_attention": dict(chosen), "sliding_attention": {"rope_type": "default"}}
    return {None: dict(chosen)}


def model_type_is_gemma3(cfg: dict) -> bool:
    return str(cfg.get("model_type", "")).startswith("gemma3")


def _rope_config(cfg: dict, model_type: str, where: str) -> ModelConfig:
    head_dim = _head_dim(cfg, where)
    max_pos = _int(cfg, "max_position_embeddings", where)
    top_theta = _agree(where, "rope_theta", {"rope_theta": cfg.get("rope_theta"),
                                             "rotary_emb_base": cfg.get("rotary_emb_base")})
    rotary_dim = cfg.get("rotary_dim")
    top_prf = _agree(where, "partial_rotary_factor", {
        "partial_rotary_factor": cfg.get("partial_rotary_factor"), "rotary_pct": cfg.get("rotary_pct"),
        "rotary_dim / head_dim": None if rotary_dim is None else rotary_dim / head_dim})
    top_l0 = _int(cfg, "original_max_position_embeddings", where)
    layers = []
    if top_prf is None and model_type in DEFAULT_ROTARY_PCT:
        top_prf = DEFAULT_ROTARY_PCT[model_type]
    for layer_type, sc in _rope_dicts(cfg, where).items():
        own_theta, own_prf = sc.pop("rope_theta", None), sc.pop("partial_rotary_factor", None)
        if layer_type is None:  # one dict: a top-level value that differs from the dict's is a contradiction
            theta = _agree(where, "rope_theta", {"rope_parameters.rope_theta": own_theta, "rope_theta": top_theta})
            prf = _agree(where, "partial_rotary_factor", {"rope_parameters.partial_rotary_factor": own_prf,
                                                          "top level": top_prf})
        else:  # one dict per layer type: its own values, the top-level ones are defaults
            local = cfg.get("rope_local_base_freq") if layer_type == "sliding_attention" else None
            theta = own_theta if own_theta is not None else local if local is not None else top_theta
            prf = own_prf if own_prf is not None else top_prf
        if theta is None:
            theta = DEFAULT_THETA.get(model_type)
        if theta is None:
            _fail(where, "rope_theta", f"is missing (and model_type {model_type!r} has no known default)")
        base = _real(theta, "rope_theta", where)
        kind = sc.get("rope_type") or sc.get("type") or "default"
        if kind == "su":
            _fail(where, "rope_scaling.type", "is 'su', the early Phi-3 spelling that transformers 5.x rejects; "
                                              "use 'longrope'")
        if kind in _SCALED_CONTEXT:
            l0 = _agree(where, "original_max_position_embeddings",
                        {"top level": top_l0, "rope dict": sc.get("original_max_position_embeddings")})
            if l0 is not None:
                sc["original_max_position_embeddings"] = l0
        mrope = sc.pop("mrope_section", None)
        interleaved = bool(sc.pop("mrope_interleaved", False))
        if prf is not None and float(prf) != 1.0:
            prf = _real(prf, "partial_rotary_factor", where)
            if prf > 1:
                _fail(where, "partial_rotary_factor", f"must lie in (0, 1], got {prf}")
            sc["partial_rotary_factor"] = prf
        rotary = head_dim if kind == "proportional" or "partial_rotary_factor" not in sc \
            else int(head_dim * sc["partial_rotary_factor"])
        if rotary < 2 or rotary % 2:
            _fail(where, "partial_rotary_factor", f"gives an odd or empty rotary dim int({head_dim} * {prf}) = "
                                                  f"{rotary}; RoPE rotates pairs")
        scaling = None if (kind == "default" and set(sc) <= {"rope_type", "type"}) else sc
        if kind == "mrope" and set(sc) <= {"rope_type", "type"}:
            scaling = None  # Qwen2-VL's legacy {"type": "mrope"}: default frequencies
        layer = RopeConfig(head_dim=head_dim, rotary_dim=rotary, base=base, scaling=scaling,
                           max_position_embeddings=max_pos, context=0, layer_type=layer_type,
                           mrope_section=None if mrope is None else tuple(mrope), mrope_interleaved=interleaved)
        try:
            layer.inv_freq()  # every key checked by the library's reader now, with its message
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}: rope parameters{'' if layer_type is None else f' of {layer_type}'}: "
                             f"{exc}") from None
        layers.append(_with_context(layer, where))
    contexts = [r.context for r in layers if r.context is not None]
    return ModelConfig(model_type=model_type, family="rope", context=max(contexts) if contexts else None,
                       rope=tuple(layers), source=where)


def _with_context(layer: RopeConfig, where: str) -> RopeConfig:
    sc, kind = layer.scaling or {}, layer.rope_type
    candidates = [layer.max_position_embeddings or 0]
    factor = sc.get("factor")
    if kind in _SCALED_CONTEXT and factor and sc.get("original_max_position_embeddings"):
        candidates.append(int(factor * sc["original_max_position_embeddings"]))
    if kind == "dynamic" and factor and layer.max_position_embeddings:
        candidates.append(int(factor * layer.max_position_embeddings))
    context = max(candidates)
    return RopeConfig(**{**layer.__dict__, "context": context if context >= 2 else None})


# --------------------------------------------------------------------------- ALiBi, T5, DeBERTa

def _alibi_flag(cfg: dict, model_type: str) -> bool:
    if model_type == "bloom":
        return True
    if model_type == "mpt":
        return bool((cfg.get("attn_config") or {}).get("alibi", False))
    return bool(cfg.get("alibi", False)) and model_type in ALIBI_MODELS


def _alibi_config(cfg: dict, model_type: str, where: str) -> ModelConfig:
    heads = _heads(cfg, where)
    attn = cfg.get("attn_config") or {}
    max_bias = _real(attn.get("alibi_bias_max", 8.0), "attn_config.alibi_bias_max", where)
    context = None
    for key in ("seq_length", "max_seq_len", "max_position_embeddings", "n_positions"):
        context = _int(cfg, key, where, minimum=2) or context
        if context:
            break
    if context is None:
        _fail(where, "seq_length", "is missing (also max_seq_len, max_position_embeddings): the context the "
                                   "positions must reach is unknown")
    form = "bloom" if model_type == "bloom" else "causal"
    return ModelConfig(model_type=model_type, family="alibi", context=context,
                       alibi={"num_heads": heads, "max_bias": max_bias, "form": form}, source=where)


def _t5_config(cfg: dict, model_type: str, where: str) -> ModelConfig:
    buckets = _int(cfg, "relative_attention_num_buckets", where, minimum=2, default=32)
    distance = _int(cfg, "relative_attention_max_distance", where, minimum=1, default=128)
    heads = _int(cfg, "num_heads", where, default=None) or _heads(cfg, where)
    context = _int(cfg, "n_positions", where, minimum=2) or 4 * distance
    directions = [True, False] if cfg.get("is_encoder_decoder", True) else [not cfg.get("is_decoder", False)]
    return ModelConfig(model_type=model_type, family="t5", context=context, t5={
        "num_buckets": buckets, "max_distance": distance, "num_heads": heads, "bidirectional": directions},
        source=where)


def _deberta_config(cfg: dict, model_type: str, where: str) -> ModelConfig:
    if not cfg.get("relative_attention", False):
        _fail(where, "relative_attention", "is false: this DeBERTa uses absolute positions only (nothing relative "
                                           "to compute)")
    max_pos = _int(cfg, "max_position_embeddings", where, default=512)
    buckets = cfg.get("position_buckets", -1)
    if isinstance(buckets, bool) or not isinstance(buckets, int) or buckets == 0 or buckets < -1:
        _fail(where, "position_buckets", f"must be -1 (no buckets) or an integer >= 1, got {buckets!r}")
    mrp = cfg.get("max_relative_positions", -1)
    if isinstance(mrp, bool) or not isinstance(mrp, int) or mrp == 0 or mrp < -1:
        _fail(where, "max_relative_positions", f"must be -1 (max_position_embeddings) or >= 1, got {mrp!r}")
    if mrp < 1:
        mrp = max_pos
    raw = cfg.get("pos_att_type", ["c2p", "p2c"])
    types = [t.strip() for t in raw.lower().split("|")] if isinstance(raw, str) else raw
    if not isinstance(types, list) or not types or not set(types) <= {"c2p", "p2c"}:
        _fail(where, "pos_att_type", f"must name c2p and/or p2c (a list or 'p2c|c2p'), got {raw!r}")
    return ModelConfig(model_type=model_type, family="deberta", context=max_pos, deberta={
        "position_buckets": buckets, "max_relative_positions": mrp, "span": buckets if buckets > 0 else mrp,
        "pos_att_type": sorted(set(types)), "num_heads": _heads(cfg, where), "head_dim": _head_dim(cfg, where)},
        source=where)
