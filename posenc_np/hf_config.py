r"""Read a Hugging Face ``config.json``: the positional setup of a model, in this library's terms.

The one reader of Hugging Face configurations in posenc_np. :func:`read_hf_config` takes a path
(read with :func:`posenc_np._files.read_bounded`) or a parsed dict and returns a
:class:`PositionalSetup` (RoPE layers are :class:`posenc_np.rope_scaling.Scaling` values). The
keys read per family (RoPE, ALiBi, T5, DeBERTa-v2), their precedence and the defaults per model
type (transformers 5.x semantics) are listed in ``docs/golden-format.md`` ("A suite for your own
model"). Every size is bounded (:data:`LIMITS`); a positional key (:data:`_POSITIONAL`) not read
here, or an unsupported or contradictory value, is one ``ValueError`` naming the key.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field, replace

from ._files import read_bounded
from .rope_scaling import Scaling, parse_scaling

__all__ = ["PositionalSetup", "read_hf_config"]

#: Largest config.json read (a config is a few KiB; Phi-3's, with its factor lists, 4 KiB).
MAX_CONFIG_BYTES = 1 << 22
#: Largest value of each size read from a config (the largest published models use 128-232 heads,
#: head dims up to 512, contexts up to 10M): a config past them is refused, so generation is bounded.
LIMITS = {"heads": 1024, "head_dim": 1024, "hidden_size": 1 << 20, "context": 1 << 24, "buckets": 4096,
          "distance": 1 << 16}
#: ``rope_theta`` of model types whose config classes have a default (transformers 5.x ``default_theta``).
DEFAULT_THETA = {**dict.fromkeys(
    ("llama", "mistral", "mixtral", "phi", "phi3", "gpt_neox", "gptj", "stablelm", "falcon", "olmo", "olmo2",
     "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "qwen2_vl", "gemma", "gemma2", "deepseek_v2", "deepseek_v3"),
    10000.0), "qwen2_5_vl": 1e6}
#: Context of model types whose config classes default it when the file has none (ALiBi: the training length).
DEFAULT_CONTEXT = {"falcon": 2048, "gptj": 2048, "bloom": 2048, "mpt": 2048}
#: Model types whose config classes default the rotary fraction when the file has none (GPT-NeoX: 0.25).
DEFAULT_ROTARY_PCT = {"gpt_neox": 0.25}
#: Model types that always pair channels (2i, 2i+1) (GPT-J rotate_every_two, DeepSeek-V2 complex multiply);
#: DeepSeek-V3 does unless ``rope_interleave`` is false.
INTERLEAVED = {"gptj": True, "deepseek_v2": True, "deepseek_v3": True}
ALIBI_MODELS = ("bloom", "mpt", "falcon", "RefinedWeb", "RefinedWebModel")
T5_MODELS = ("t5", "mt5", "umt5", "longt5", "switch_transformers")
DEBERTA_MODELS = ("deberta", "deberta-v2")
_SCALED_CONTEXT = ("yarn", "llama3", "longrope")
#: Names that say a key is positional: one of them that is not read here is an error, never ignored.
_POSITIONAL = re.compile(r"rope|rotary|alibi|position|pos_|relative|nope", re.IGNORECASE)
#: Positional keys read here, or read and known to have no effect (docs/golden-format.md lists them).
_READ = {"rope_theta", "rope_parameters", "rope_scaling", "rotary_emb_base", "rotary_pct", "rotary_dim", "rotary",
         "partial_rotary_factor", "max_position_embeddings", "original_max_position_embeddings", "rope_interleave",
         "rope_local_base_freq", "qk_rope_head_dim", "qk_nope_head_dim", "_rope_type_labels", "alibi", "alibi_bias_max",
         "offset_alibi", "learned_pos_emb", "n_positions", "max_seq_len", "relative_attention_num_buckets",
         "relative_attention_max_distance", "relative_attention", "position_buckets", "max_relative_positions",
         "pos_att_type", "position_biased_input"}


def _fail(where: str, key: str, msg: str):
    raise ValueError(f"{where}: {key!r} {msg}")


def _int(cfg: dict, key: str, where: str, *, minimum: int = 1, maximum: int = LIMITS["context"], default=None):
    value = cfg.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        _fail(where, key, f"must be an integer in [{minimum}, {maximum}], got {value!r}")
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


def _unread(cfg: dict, where: str, prefix: str = "") -> None:
    """An error naming the first positional key (by its name) this reader does not read."""
    for key, value in cfg.items():
        if value is not None and key not in _READ and _POSITIONAL.search(key):
            _fail(where, prefix + key, "is not read by posenc_np.hf_config and may change positions; the cases "
                                       "would not be this model's (remove it if it has no effect)")


@dataclass(frozen=True)
class PositionalSetup:
    """The positional setup of one model: ``family`` is ``"rope"``, ``"alibi"``, ``"t5"`` or
    ``"deberta"``; ``context`` the largest position (or distance) its cases reach; the family's
    parameters are in ``rope`` (one :class:`~posenc_np.rope_scaling.Scaling` per layer type, with
    its ``layer_type``, ``context`` and ``mrope_section``) and ``rope_layout`` (``half`` or
    ``interleaved``), ``alibi`` (``num_heads``, ``max_bias``, ``form``), ``t5`` (``num_buckets``,
    ``max_distance``, ``num_heads``, ``bidirectional``: the directions the model uses) or
    ``deberta`` (``position_buckets``, ``max_relative_positions``, ``span``, ``pos_att_type``,
    ``num_heads``, ``head_dim``). ``context`` is ``None`` for a RoPE config without
    ``max_position_embeddings`` (its frequencies are known, how far its positions go is not).

    Examples
    --------
    >>> from posenc_np.hf_config import PositionalSetup, read_hf_config
    >>> setup = read_hf_config({"model_type": "bloom", "n_head": 12, "seq_length": 2048})
    >>> isinstance(setup, PositionalSetup), setup.family, setup.context
    (True, 'alibi', 2048)
    >>> setup.alibi
    {'num_heads': 12, 'max_bias': 8.0, 'form': 'bloom'}
    """

    model_type: str
    family: str
    context: int | None
    rope: tuple[Scaling, ...] = ()
    alibi: dict = field(default_factory=dict)
    t5: dict = field(default_factory=dict)
    deberta: dict = field(default_factory=dict)
    source: str = "config"
    rope_layout: str = "half"


def _load(source) -> tuple[dict, str]:
    if isinstance(source, dict):
        return source, "config"
    from .golden.safe_io import parse_json

    where = os.fspath(source)
    try:  # a symbolic link is followed (the Hub cache links snapshots to blobs), to a regular file only
        cfg = parse_json(read_bounded(where, MAX_CONFIG_BYTES), where)
    except ValueError as exc:
        raise ValueError(f"cannot read the Hugging Face config {exc}") from None
    if not isinstance(cfg, dict):  # a bad file is a ValueError like every other config problem
        raise ValueError(f"{where}: a config.json must hold a JSON object, got {type(cfg).__name__}")  # noqa: TRY004
    return cfg, where


def read_hf_config(source: str | os.PathLike | dict, *, max_position: int | None = None) -> PositionalSetup:
    """The positional setup described by a Hugging Face ``config.json`` (path or parsed dict).

    See the module docstring for the keys read. ``max_position`` replaces the context the cases'
    positions reach (``--max-position``). Raises ``ValueError`` naming the key for a config that
    is unreadable, contradictory, out of bounds, carries a positional key this reader does not
    read, or uses a positional encoding this library does not cover (e.g. learned absolute positions).

    Examples
    --------
    >>> from posenc_np.hf_config import read_hf_config
    >>> llama = {"model_type": "llama", "head_dim": 64, "rope_theta": 500000.0, "max_position_embeddings": 8192}
    >>> setup = read_hf_config(llama)
    >>> setup.family, setup.context, setup.rope_layout, setup.rope[0].rotary_dim, setup.rope[0].base
    ('rope', 8192, 'half', 64, 500000.0)
    >>> gptj = read_hf_config({"model_type": "gptj", "n_embd": 256, "n_head": 4, "rotary_dim": 16, "n_positions": 2048})
    >>> gptj.rope_layout, gptj.rope[0].head_dim, gptj.rope[0].rotary_dim     # rotate_every_two, partial rotary
    ('interleaved', 64, 16)
    """
    cfg, where = _load(source)
    text = cfg.get("text_config")
    if isinstance(text, dict) and not any(k in cfg for k in ("rope_theta", "rope_parameters", "rope_scaling")):
        cfg = {**text, "model_type": text.get("model_type", cfg.get("model_type"))}  # multimodal: the language model
    model_type = str(cfg.get("model_type") or "unknown")
    _unread(cfg, where)
    if isinstance(cfg.get("attn_config"), dict):
        _unread(cfg["attn_config"], where, "attn_config.")
    alibi = _alibi_flag(cfg, model_type, where)
    rope_keys = [k for k in ("rope_theta", "rope_parameters", "rope_scaling", "rotary_emb_base", "rotary_pct")
                 if cfg.get(k) is not None]
    if alibi and rope_keys:
        raise ValueError(f"{where}: contradictory positional setup: ALiBi (model_type {model_type!r}) and RoPE "
                         f"keys {rope_keys}")
    if alibi:
        setup = _alibi_config(cfg, model_type, where)
    elif model_type in T5_MODELS or "relative_attention_num_buckets" in cfg:
        setup = _t5_config(cfg, model_type, where)
    elif model_type in DEBERTA_MODELS:
        setup = _deberta_config(cfg, model_type, where)
    elif rope_keys or model_type in DEFAULT_THETA:
        setup = _rope_config(cfg, model_type, where)
    else:
        raise ValueError(f"{where}: 'model_type' {model_type!r} has no RoPE, ALiBi, T5 or DeBERTa keys (rope_theta, "
                         "rope_parameters, rope_scaling, alibi, relative_attention_num_buckets, relative_attention): "
                         "not a positional setup this library covers")
    if max_position is None:
        return setup
    max_position = _int({"max_position": max_position}, "max_position", "--max-position", minimum=2)
    return replace(setup, context=max_position, rope=tuple(replace(r, context=max_position) for r in setup.rope))


def _heads(cfg: dict, where: str) -> int:
    n = _agree(where, "head count", {k: cfg.get(k) for k in ("num_attention_heads", "n_head", "n_heads")})
    if n is None:
        _fail(where, "num_attention_heads", "is missing")
    return _int({"num_attention_heads": n}, "num_attention_heads", where, maximum=LIMITS["heads"])


def _head_dim(cfg: dict, where: str) -> int:
    for key in ("qk_rope_head_dim", "head_dim"):  # DeepSeek MLA: only the qk_rope_head_dim channels rotate
        if cfg.get(key) is not None:
            return _int(cfg, key, where, minimum=2, maximum=LIMITS["head_dim"])
    hidden = _agree(where, "hidden size", {k: cfg.get(k) for k in ("hidden_size", "n_embd", "d_model")})
    if hidden is None:
        _fail(where, "head_dim", "is missing, and so are hidden_size and num_attention_heads to derive it")
    _int({"hidden_size": hidden}, "hidden_size", where, minimum=2, maximum=LIMITS["hidden_size"])
    if all(cfg.get(k) is None for k in ("num_attention_heads", "n_head", "n_heads")):
        _fail(where, "head_dim", "is missing, and so is num_attention_heads to derive it from hidden_size")
    return _int({"head_dim": hidden // _heads(cfg, where)}, "head_dim", where, minimum=2, maximum=LIMITS["head_dim"])


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
    if str(cfg.get("model_type", "")).startswith("gemma3") and cfg.get("rope_local_base_freq") is not None:
        # transformers 4.x Gemma 3: rope_scaling/rope_theta for full attention, rope_local_base_freq for sliding
        return {"full_attention": dict(chosen), "sliding_attention": {"rope_type": "default"}}
    return {None: dict(chosen)}


def _rope_config(cfg: dict, model_type: str, where: str) -> PositionalSetup:
    head_dim = _head_dim(cfg, where)
    max_pos = _int(cfg, "max_position_embeddings", where) or _int(cfg, "n_positions", where) \
        or DEFAULT_CONTEXT.get(model_type)
    top_theta = _agree(where, "rope_theta", {"rope_theta": cfg.get("rope_theta"),
                                             "rotary_emb_base": cfg.get("rotary_emb_base")})
    rotary_dim = cfg.get("rotary_dim")
    top_prf = _agree(where, "partial_rotary_factor", {
        "partial_rotary_factor": cfg.get("partial_rotary_factor"), "rotary_pct": cfg.get("rotary_pct"),
        "rotary_dim / head_dim": None if rotary_dim is None else _real(rotary_dim, "rotary_dim", where) / head_dim})
    top_l0 = _int(cfg, "original_max_position_embeddings", where)
    interleave = cfg.get("rope_interleave", INTERLEAVED.get(model_type, False))
    if not isinstance(interleave, bool) or (model_type == "deepseek_v2" and not interleave):
        _fail(where, "rope_interleave", f"must be true or false (DeepSeek-V2 always interleaves), got {interleave!r}")
    layers, top_prf = [], DEFAULT_ROTARY_PCT.get(model_type) if top_prf is None else top_prf
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
        theta = DEFAULT_THETA.get(model_type) if theta is None else theta
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
        interleaved = sc.pop("mrope_interleaved", False)
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
        scaling = None if (kind in ("default", "mrope") and set(sc) <= {"rope_type", "type"}) else sc
        if mrope is not None:
            _mrope_check(mrope, interleaved, scaling, rotary, head_dim, where)
        try:  # every key checked by the library's reader now, with its message
            layer = parse_scaling(head_dim, base=base, scaling=scaling, max_position_embeddings=max_pos)
            layer.exact_frequencies()
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}: rope parameters{'' if layer_type is None else f' of {layer_type}'}: "
                             f"{exc}") from None
        layers.append(replace(layer, layer_type=layer_type, context=_context(layer, where),
                              mrope_section=None if mrope is None else tuple(mrope), mrope_interleaved=interleaved))
    contexts = [r.context for r in layers if r.context is not None]
    return PositionalSetup(model_type=model_type, family="rope", context=max(contexts) if contexts else None,
                           rope=tuple(layers), source=where, rope_layout="interleaved" if interleave else "half")


def _mrope_check(section, interleaved, scaling, rotary: int, head_dim: int, where: str) -> None:
    """M-RoPE as the library's cases cover it: default frequencies over the whole head, sections summing to d/2."""
    if not isinstance(interleaved, bool):
        _fail(where, "mrope_interleaved", f"must be true or false, got {interleaved!r}")
    ints = isinstance(section, list) and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in section)
    if not (ints and len(section) == 3 and sum(section) == rotary // 2):
        _fail(where, "mrope_section", f"must be 3 integers >= 0 summing to rotary_dim / 2 = {rotary // 2}, got "
                                      f"{section!r}")
    if scaling is not None or rotary != head_dim:
        _fail(where, "mrope_section", f"with rope parameters {scaling} (rotary dim {rotary} of {head_dim}): M-RoPE "
                                      "cases cover default frequencies over the whole head only")


def _context(layer: Scaling, where: str) -> int | None:
    """The context the layer's positions reach: ``max_position_embeddings``, or the scaled length when larger."""
    sc, kind = layer.scaling or {}, layer.rope_type
    candidates = [layer.max_position_embeddings or 0]
    factor = sc.get("factor")
    if kind in _SCALED_CONTEXT and factor and sc.get("original_max_position_embeddings"):
        candidates.append(int(factor * sc["original_max_position_embeddings"]))
    if kind == "dynamic" and factor and layer.max_position_embeddings:
        candidates.append(int(factor * layer.max_position_embeddings))
    context = max(candidates)
    if context > LIMITS["context"]:
        _fail(where, "rope_parameters.factor", f"scales the context to {context}, past {LIMITS['context']}")
    return context if context >= 2 else None


def _alibi_flag(cfg: dict, model_type: str, where: str) -> bool:
    if model_type == "bloom":
        return True
    if model_type == "mpt":  # transformers' MptModel builds ALiBi whatever the flag (MptAttentionConfig: True)
        if (cfg.get("attn_config") or {}).get("alibi", True) is not True:
            _fail(where, "attn_config.alibi", "is not true, but transformers' MPT always uses ALiBi")
        return True
    return bool(cfg.get("alibi", False)) and model_type in ALIBI_MODELS


def _alibi_config(cfg: dict, model_type: str, where: str) -> PositionalSetup:
    heads = _heads(cfg, where)
    attn = cfg.get("attn_config") or {}
    max_bias = _real(attn.get("alibi_bias_max", 8.0), "attn_config.alibi_bias_max", where)
    context = DEFAULT_CONTEXT.get(model_type)
    for key in ("seq_length", "max_seq_len", "max_position_embeddings", "n_positions"):
        if cfg.get(key) is not None:
            context = _int(cfg, key, where, minimum=2)
            break
    if context is None:
        _fail(where, "seq_length", "is missing (also max_seq_len, max_position_embeddings): the context the "
                                   "positions must reach is unknown; give --max-position")
    form = "causal" if model_type == "mpt" else "bloom"  # Falcon builds BLOOM's bias (key position times slope)
    return PositionalSetup(model_type=model_type, family="alibi", context=context,
                           alibi={"num_heads": heads, "max_bias": max_bias, "form": form}, source=where)


def _t5_config(cfg: dict, model_type: str, where: str) -> PositionalSetup:
    buckets = _int(cfg, "relative_attention_num_buckets", where, minimum=2, maximum=LIMITS["buckets"], default=32)
    distance = _int(cfg, "relative_attention_max_distance", where, maximum=LIMITS["distance"], default=128)
    heads = _int(cfg, "num_heads", where, maximum=LIMITS["heads"]) or _heads(cfg, where)
    context = _int(cfg, "n_positions", where, minimum=2) or 4 * distance
    directions = [True, False] if cfg.get("is_encoder_decoder", True) else [not cfg.get("is_decoder", False)]
    return PositionalSetup(model_type=model_type, family="t5", context=context, t5={
        "num_buckets": buckets, "max_distance": distance, "num_heads": heads, "bidirectional": directions},
        source=where)


def _deberta_config(cfg: dict, model_type: str, where: str) -> PositionalSetup:
    if not cfg.get("relative_attention", False):
        _fail(where, "relative_attention", "is false: this DeBERTa uses absolute positions only (nothing relative "
                                           "to compute)")
    max_pos = _int(cfg, "max_position_embeddings", where, default=512)
    buckets, mrp = cfg.get("position_buckets", -1), cfg.get("max_relative_positions", -1)
    buckets = -1 if buckets == -1 else _int(cfg, "position_buckets", where, maximum=LIMITS["buckets"])
    mrp = min(max_pos, LIMITS["distance"]) if mrp == -1 else _int(cfg, "max_relative_positions", where,
                                                                   maximum=LIMITS["distance"])
    raw = cfg.get("pos_att_type", ["c2p", "p2c"])
    types = [t.strip() for t in raw.lower().split("|")] if isinstance(raw, str) else raw
    if not isinstance(types, list) or not types or not set(types) <= {"c2p", "p2c"}:
        _fail(where, "pos_att_type", f"must name c2p and/or p2c (a list or 'p2c|c2p'), got {raw!r}")
    return PositionalSetup(model_type=model_type, family="deberta", context=max_pos, deberta={
        "position_buckets": buckets, "max_relative_positions": mrp, "span": buckets if buckets > 0 else mrp,
        "pos_att_type": sorted(set(types)), "num_heads": _heads(cfg, where), "head_dim": _head_dim(cfg, where)},
        source=where)
