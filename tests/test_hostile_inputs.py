"""Property-based sweep of the public API with hostile arguments (issue 13).

Every public function (and the methods of the public classes) is called with valid arguments
in which one or two are replaced by a value drawn from a hostile pool: wrong types, None,
strings, bools, NaN and infinities, huge and negative integers, empty and ragged arrays, wrong
ranks, and the valid array cast to every other dtype (int, uint, bool, float16, complex,
object). The property: the call either raises ``ValueError``/``TypeError`` or returns a result
whose arrays are finite and correctly shaped. Any other exception fails, and so does a NumPy
``RuntimeWarning`` (they are errors here): an overflow must be a named ``ValueError``, not an
inf with a warning.

Data arrays (``x``, ``q``, ``k``, ``v``, logits, gradients, and the ``scale`` or ``dloss`` that
multiplies them: declared per entry) are not range checked: NaN and inf in them propagate (IEEE), so when such an argument holds non-finite or
extreme (> 1e150, or integers past 2**53) values the result need not be finite and warnings are tolerated. Every other
argument (sizes, frequencies, factors, positions, tolerances) must be validated.

Bounded: 15 derandomised examples per entry and tiny arrays, so the module takes seconds. For
a deep run set ``SWEEP_EXAMPLES`` (the fixes of issue 13 came from runs with 300-500 examples per
entry under ``ulimit -v 12000000``, where a huge allocation is a ``MemoryError`` failure instead
of a swapping machine).
"""

from __future__ import annotations

import copy
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posenc_np import (
    absolute,
    alibi,
    attention,
    kernels,
    layers,
    optim,
    positions,
    precision,
    relative,
    rope,
    rope_scaling,
    study,
)
from posenc_np.model import ModelConfig, Transformer
from posenc_np.testing import gradcheck
from posenc_np.train import evaluate

RNG = np.random.default_rng(0)


def arr(*shape, dtype=np.float64):
    return RNG.standard_normal(shape).astype(dtype)


# ------------------------------------------------------------------ hostile values

SCALARS = [None, "x", b"1", True, False, -1, 0, 1, 3, 2**31, 2**63, 2**70, -2**70, 1.5, -0.5, float("nan"),
           float("inf"), -float("inf"), 1e308, 1e-320, 1j, [], [[1, 2], [3]], {}, (1,), object(), np.int64(-5),
           np.float32("nan"), np.bool_(True)]
ARRAYS = [np.array([]), np.zeros((0, 3)), np.zeros((2, 0)), np.array(np.nan), np.array(7.0), np.full(3, np.nan),
          np.full((2, 3), np.inf), np.array([2**63], dtype=np.uint64), np.array([1 + 2j]), np.array(["a", "b"]),
          np.array([None], dtype=object), np.arange(6).reshape(2, 3), np.array([-2**62, 2**62])]


def variants(valid) -> list:
    """Hostile versions of one valid argument: the pool plus casts and reshapes of ``valid``."""
    out = list(SCALARS) + list(ARRAYS)
    if isinstance(valid, np.ndarray):
        for dt in (np.int8, np.uint8, np.int64, np.uint64, np.bool_, np.float16, np.float32, np.complex64, object):
            with np.errstate(all="ignore"), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                out.append(valid.astype(dt))
        out += [valid[None], valid.reshape(-1), valid[..., :0], valid.T]
        if valid.dtype.kind in "iuf":
            out += [valid * 1000000, -np.abs(valid) - 1]
        if valid.ndim:
            out.append(valid[..., ::2])
            out.append(np.swapaxes(valid, 0, -1).copy())
        bad = valid.astype(np.float64)
        if bad.size:
            for v in (np.nan, np.inf, 1e300):
                b = bad.copy()
                b.flat[0] = v
                out.append(b)
    elif isinstance(valid, (bool, np.bool_)):
        out += [1, 0, np.array(True)]
    elif isinstance(valid, int):
        out += [valid + 1, -valid, valid * 1000, float(valid), np.int32(valid), np.uint64(max(valid, 0))]
    elif isinstance(valid, float):
        with np.errstate(over="ignore"):
            out += [-valid, valid * 1e300, valid / 1e300, int(valid) if np.isfinite(valid) else 0, np.float16(valid)]
    elif isinstance(valid, dict):
        out += [{**valid, "extra_key": 1}, {k: None for k in valid}, {k: float("nan") for k in valid},
                dict(list(valid.items())[:-1])]
    elif isinstance(valid, str):
        out += [valid.upper(), valid + " ", ""]
    return out


# ------------------------------------------------------------------ the registry


@dataclass
class Entry:
    """A public callable, its valid keyword arguments and what its result must look like.

    ``shape(kw, result)`` returns the expected shape(s) (a tuple, or a list matching a tuple
    result) or None to skip the check; ``data`` names the arguments whose NaN/inf propagate.
    """

    name: str
    fn: Callable
    args: dict
    shape: Callable | None = None
    data: tuple = ()
    fixed: tuple = field(default=())  # arguments never replaced (e.g. a cache produced by a forward)


def _fwd(q, k, v, **kw):
    return attention.forward(q, k, v, **kw)


def _attn_cache():
    q = arr(1, 2, 3, 4)
    return attention.forward(q, q, q)[1]


def _alibi_cache():
    q = arr(1, 2, 3, 4)
    return alibi.attention(q, q, q, backend="numpy")[1]


def _ce_cache():
    return layers.softmax_cross_entropy(arr(2, 5), np.array([1, 4]))[1]


def _learned_backward(dout):
    t = absolute.LearnedPositionalEmbedding(6, 3, seed=0)
    t.forward(np.array([0, 5]))
    return t.backward(dout)


def _layer(cls_args, method, prime=None):
    """Call ``method`` of a fresh layer (primed with ``prime`` for backward methods)."""
    def call(**kw):
        layer = cls_args()
        if prime is not None:
            prime(layer)
        return getattr(layer, method)(**kw)
    return call


def _hook_call(make, method, prime=None):
    def call(**kw):
        hook = make()
        if prime is not None:
            return getattr(hook, method)(**kw, cache=prime(hook))
        return getattr(hook, method)(**kw)
    return call


def _t5():
    return relative.T5RelativeBias(2, num_buckets=8, max_distance=16, seed=0)


def _shaw():
    return relative.ShawRelativeAttention(4, 2, seed=0)


def _bert():
    return relative.BertRelativeKey(8, 4, seed=0)


def _txl():
    return relative.TransformerXLRelative(2, 4, 8, seed=0)


def _deberta():
    return relative.DebertaDisentangled(2, 4, max_relative_positions=8, seed=0)


def _fire_params():
    return {"w1": arr(1, 4), "b1": arr(4), "w2": arr(4, 2), "b2": arr(2), "c": np.array([0.3]),
            "L_multiplier": np.array([1.0])}


def _dpb_params():
    return {"w1": arr(1, 4), "b1": arr(4), "w2": arr(4, 4), "b2": arr(4), "w3": arr(4, 2), "b3": arr(2)}


def _cope_cache():
    q = arr(1, 2, 3, 4)
    return relative.cope_forward(q, q, arr(4, 4), gate_scale=0.5)[1]


def _bias_shape(kw, result):
    return (2, kw["q_len"], kw["k_len"])


def _model():
    return Transformer(ModelConfig(vocab_size=7, d_model=8, n_heads=2, n_layers=1, d_ff=8, max_len=8, position="rope",
                                   seed=0))


FREQS = rope.inv_freq(8)[0]
SETUP = rope_scaling.parse_scaling(8, base=1e4, scaling={"rope_type": "yarn", "factor": 4.0,
                                                        "original_max_position_embeddings": 16},
                                 max_position_embeddings=64)
COS, SIN = rope.cos_sin(np.arange(3), FREQS)
SCALING = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}
Q = arr(1, 2, 3, 4)


def _shape_of(*names, extra=()):
    def shape(kw, result):
        return tuple(np.shape(kw[names[0]])[: len(np.shape(kw[names[0]]))]) + tuple(extra)
    return shape


ENTRIES = [
    # absolute
    Entry("absolute.sinusoidal_frequencies", absolute.sinusoidal_frequencies, {"dim": 8, "base": 10000.0},
          lambda kw, r: (kw["dim"] // 2,)),
    Entry("absolute.sinusoidal", absolute.sinusoidal,
          {"positions": np.arange(4), "dim": 6, "base": 10000.0, "layout": "interleaved", "dtype": np.float32},
          lambda kw, r: np.shape(kw["positions"]) + (kw["dim"],)),
    Entry("absolute.timing_signal", absolute.timing_signal,
          {"positions": np.arange(4), "dim": 7, "min_timescale": 1.0, "max_timescale": 1e4, "start_index": 0,
           "dtype": np.float64}, lambda kw, r: np.shape(kw["positions"]) + (kw["dim"],)),
    Entry("absolute.LearnedPositionalEmbedding", absolute.LearnedPositionalEmbedding,
          {"num_positions": 6, "dim": 3, "seed": 0, "init_std": 0.02}),
    Entry("absolute.LearnedPositionalEmbedding.forward",
          lambda positions: absolute.LearnedPositionalEmbedding(6, 3, seed=0).forward(positions),
          {"positions": np.array([0, 5])}, lambda kw, r: np.shape(kw["positions"]) + (3,)),
    Entry("absolute.LearnedPositionalEmbedding.backward", _learned_backward, {"dout": arr(2, 3)}, data=("dout",)),
    Entry("absolute.fuse", absolute.fuse, {"x": arr(2, 3, 4), "p": arr(3, 4), "mode": "add"}, data=("x", "p")),
    Entry("absolute.fuse_backward", absolute.fuse_backward,
          {"dy": arr(2, 3, 4), "x": arr(2, 3, 4), "p": arr(3, 4), "mode": "multiply"},
          lambda kw, r: [np.shape(kw["x"]), np.shape(kw["p"])], data=("dy", "x", "p")),
    # rope
    Entry("rope.inv_freq", rope.inv_freq,
          {"dim": 8, "base": 10000.0, "scaling": SCALING, "seq_len": 32, "max_position_embeddings": 64}),
    Entry("rope.inv_freq.dynamic", rope.inv_freq,
          {"dim": 8, "scaling": {"rope_type": "dynamic", "factor": 2.0}, "seq_len": 32, "max_position_embeddings": 16}),
    Entry("rope.inv_freq.longrope", rope.inv_freq,
          {"dim": 4, "scaling": {"rope_type": "longrope", "short_factor": [1.0, 2.0], "long_factor": [2.0, 4.0],
                                 "original_max_position_embeddings": 8}, "seq_len": 16, "max_position_embeddings": 32}),
    Entry("rope.inv_freq.llama3", rope.inv_freq,
          {"dim": 8, "scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                 "original_max_position_embeddings": 64}}),
    Entry("rope.cos_sin", rope.cos_sin,
          {"positions": np.arange(3), "inv_freq": FREQS, "attention_factor": 1.0, "layout": "half",
           "dtype": np.float32}, lambda kw, r: [np.shape(kw["positions"]) + (2 * np.size(kw["inv_freq"]),)] * 2),
    Entry("rope.apply", rope.apply, {"x": arr(2, 3, 8), "cos": COS, "sin": SIN, "layout": "half", "backend": "numpy"},
          lambda kw, r: np.shape(kw["x"]), data=("x",)),
    Entry("rope.apply.numba", rope.apply,
          {"x": arr(2, 3, 8), "cos": COS, "sin": SIN, "layout": "half", "backend": "numba"},
          lambda kw, r: np.shape(kw["x"]), data=("x",)),
    Entry("rope.apply_backward", rope.apply_backward,
          {"dy": arr(2, 3, 8), "cos": COS, "sin": SIN, "layout": "half", "backend": "auto"},
          lambda kw, r: np.shape(kw["dy"]), data=("dy",)),
    Entry("rope.apply.out", rope.apply,
          {"x": arr(2, 3, 8), "cos": COS, "sin": SIN, "layout": "half", "backend": "numpy", "out": arr(2, 3, 8)},
          lambda kw, r: np.shape(kw["x"]), data=("x",)),
    Entry("rope.apply_qk", rope.apply_qk,
          {"q": arr(2, 3, 8), "k": arr(1, 3, 8), "cos": COS, "sin": SIN, "layout": "half", "backend": "numba",
           "out_q": None, "out_k": arr(1, 3, 8)},
          lambda kw, r: [np.shape(kw["q"]), np.shape(kw["k"])], data=("q", "k")),
    Entry("rope.apply_qk_backward", rope.apply_qk_backward,
          {"dq": arr(2, 3, 8), "dk": arr(2, 3, 8), "cos": COS, "sin": SIN, "layout": "half", "backend": "auto",
           "out_q": arr(2, 3, 8), "out_k": None},
          lambda kw, r: [np.shape(kw["dq"]), np.shape(kw["dk"])], data=("dq", "dk")),
    Entry("rope_scaling.parse_scaling", rope_scaling.parse_scaling,
          {"dim": 8, "base": 10000.0, "scaling": SCALING, "max_position_embeddings": 64}),
    Entry("rope.rerotate", rope.rerotate,
          {"x": arr(2, 3, 8), "positions": np.arange(3), "old_inv_freq": FREQS, "new_inv_freq": FREQS / 2,
           "layout": "interleaved"}, lambda kw, r: np.shape(kw["x"]), data=("x",)),
    Entry("rope.convert_layout", rope.convert_layout,
          {"w": arr(8, 3), "num_heads": 2, "src": "interleaved", "dst": "half", "rotary_dim": 2},
          lambda kw, r: np.shape(kw["w"]), data=("w",)),
    Entry("rope.xpos_scale", rope.xpos_scale,
          {"positions": np.arange(3), "dim": 8, "role": "key", "centre": "torchscale", "seq_len": 3,
           "scale_base": 512.0}, lambda kw, r: np.shape(kw["positions"]) + (kw["dim"] // 2,)),
    Entry("rope.xpos_cos_sin", rope.xpos_cos_sin,
          {"positions": np.arange(3), "inv_freq": FREQS, "role": "query", "centre": 1.5, "scale_base": 64.0,
           "layout": "half", "dtype": np.float16}),
    Entry("rope.axial_cos_sin", rope.axial_cos_sin,
          {"positions": rope.patch_positions(2, 2), "inv_freq": FREQS[:2], "attention_factor": 2.0, "layout": "half",
           "dtype": np.float64}),
    Entry("rope.patch_positions", rope.patch_positions, {"height": 2, "width": 3},
          lambda kw, r: (2, kw["height"] * kw["width"])),
    Entry("rope.mrope_cos_sin", rope.mrope_cos_sin,
          {"positions": np.tile(np.arange(3), (3, 1)), "inv_freq": FREQS, "mrope_section": [2, 1, 1],
           "variant": "qwen3-vl", "attention_factor": 1.0, "layout": "half", "dtype": np.float32}),
    Entry("rope.long_term_decay", rope.long_term_decay, {"distances": np.arange(4), "inv_freq": FREQS},
          lambda kw, r: np.shape(kw["distances"])),
    Entry("rope.llama3_bands", rope.llama3_bands,
          {"dim": 8, "base": 5e5, "scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                               "high_freq_factor": 4.0, "original_max_position_embeddings": 64}}),
    # precision lab (the emulations refuse what float32 cannot hold; data values propagate)
    Entry("precision.llama_cpp_cos_sin", precision.llama_cpp_cos_sin,
          {"positions": np.arange(3), "dim": 8, "base": 1e4, "freq_scale": 0.5, "freq_factors": np.ones(4),
           "attention_factor": 1.5}, lambda kw, r: [np.shape(kw["positions"]) + (kw["dim"] // 2,)] * 2),
    Entry("precision.to_bfloat16", precision.to_bfloat16, {"x": arr(2, 3)}, lambda kw, r: np.shape(kw["x"]),
          data=("x",)),
    Entry("precision.round_to", precision.round_to, {"x": arr(2, 3), "dtype": "float32"},
          lambda kw, r: np.shape(kw["x"]), data=("x",)),
    Entry("precision.stored", precision.stored, {"x": arr(2, 3), "dtype": "bfloat16"},
          lambda kw, r: np.shape(kw["x"]), data=("x",)),
    Entry("precision.rotate", precision.rotate, {"a": arr(3, 4), "b": arr(3, 4), "c": arr(3, 4), "s": arr(3, 4),
                                                 "dtype": "bfloat16"},
          lambda kw, r: [np.broadcast_shapes(*(np.shape(kw[n]) for n in "abcs"))] * 2,
          data=("a", "b", "c", "s")),
    Entry("precision.hf_cos_sin", precision.hf_cos_sin,
          {"positions": np.arange(3), "inv_freq": FREQS, "attention_factor": 1.5, "inv_freq_dtype": "float32",
           "position_dtype": "float32", "angle_dtype": "float32", "table_dtype": "bfloat16"},
          lambda kw, r: [np.shape(kw["positions"]) + np.shape(kw["inv_freq"])] * 2),
    Entry("precision.meta_freqs_cis", precision.meta_freqs_cis, {"positions": np.arange(3), "inv_freq": FREQS},
          lambda kw, r: np.shape(kw["positions"]) + np.shape(kw["inv_freq"])),
    Entry("precision.read_hf_config", precision.read_hf_config,
          {"source": {"hidden_size": 64, "num_attention_heads": 8, "rope_theta": 1e4,
                      "rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "seq_len": 16, "layer_type": None}),
    Entry("precision.recipe_names", precision.recipe_names, {"dtype": "float16", "setup": SETUP}),
    Entry("precision.describe", precision.describe, {"setup": SETUP}),
    Entry("precision.hf_inv_freq", precision.hf_inv_freq, {"setup": SETUP}, lambda kw, r: [(4,), ()]),
    Entry("precision.exact_tables", precision.exact_tables, {"setup": SETUP, "positions": np.arange(3)},
          lambda kw, r: [np.shape(kw["positions"]) + (4,)] * 4),
    Entry("precision.recipe_tables", precision.recipe_tables,
          {"recipe": "meta-complex64>bfloat16", "setup": SETUP, "positions": np.arange(3)},
          lambda kw, r: [np.shape(kw["positions"]) + (4,)] * 2),
    Entry("precision.table_error", precision.table_error,
          {"recipe": "hf-float32>bfloat16", "setup": SETUP, "positions": np.arange(3)},
          lambda kw, r: np.shape(kw["positions"])),
    Entry("precision.apply_error", precision.apply_error,
          {"recipe": "meta-complex64>float32", "setup": SETUP, "x": arr(3, 8), "positions": np.arange(3)},
          lambda kw, r: np.shape(kw["positions"]), data=("x",)),
    Entry("precision.logit_error", precision.logit_error,
          {"recipe": "hf-float32>float32", "setup": SETUP, "q": arr(3, 8), "k": arr(3, 8),
           "query_positions": np.arange(3), "key_positions": np.arange(3)}, lambda kw, r: (3,), data=("q", "k")),
    Entry("precision.invariance_breakage", precision.invariance_breakage,
          {"recipe": "float32-split", "setup": SETUP, "shifts": np.array([0, 7]), "window": 4, "seed": 0},
          lambda kw, r: (np.size(kw["shifts"]),)),
    Entry("rope.yarn_correction_dim", rope.yarn_correction_dim,
          {"num_rotations": 32.0, "dim": 64, "base": 1e4, "original_max_position_embeddings": 4096}),
    Entry("rope.yarn_correction_range", rope.yarn_correction_range,
          {"dim": 64, "base": 1e4, "original_max_position_embeddings": 4096, "beta_fast": 32.0, "beta_slow": 1.0,
           "truncate": True}),
    Entry("rope.p_rope_frequencies", rope.p_rope_frequencies, {"inv_freq": FREQS, "p": 0.5},
          lambda kw, r: np.shape(kw["inv_freq"])),
    Entry("rope.yarn_get_mscale", rope.yarn_get_mscale, {"scale": 4.0, "mscale": 1.0}),
    # alibi
    Entry("alibi.slopes", alibi.slopes, {"num_heads": 6, "max_bias": 8.0}, lambda kw, r: (kw["num_heads"],)),
    Entry("alibi.bias", alibi.bias,
          {"num_heads": 2, "q_len": 3, "k_len": 4, "form": "symmetric", "slopes": np.array([0.5, 0.25]),
           "query_offset": 1, "dtype": np.float32},
          lambda kw, r: (kw["num_heads"], kw["q_len"], kw["q_len"] + kw["query_offset"] if kw["k_len"] is None
                         else kw["k_len"])),
    Entry("alibi.attention", alibi.attention,
          {"q": Q, "k": Q, "v": Q, "slopes": np.array([0.5, 0.25]), "causal": True, "scale": 0.5,
           "backend": "numpy"}, data=("q", "k", "v", "scale")),
    Entry("alibi.attention.numba", alibi.attention,
          {"q": Q, "k": Q, "v": Q, "slopes": None, "causal": False, "scale": None, "backend": "numba"},
          data=("q", "k", "v", "scale")),
    Entry("alibi.attention_backward", alibi.attention_backward, {"dout": arr(1, 2, 3, 4), "cache": _alibi_cache()},
          data=("dout",)),
    Entry("alibi.ALiBiBias", alibi.ALiBiBias, {"num_heads": 2, "form": "bloom", "slopes": np.array([0.5, 0.25])}),
    Entry("alibi.ALiBiBias.logits", _hook_call(lambda: alibi.ALiBiBias(2), "logits"),
          {"q": Q, "k": Q, "scale": 0.5, "mask": np.tril(np.ones((3, 3), bool))}, data=("q", "k", "scale")),
    # positions
    Entry("positions.relative_positions", positions.relative_positions,
          {"q_len": 2, "k_len": 5, "alignment": "top-left", "query_offset": 1}, lambda kw, r: (kw["q_len"], kw["k_len"])),
    Entry("positions.query_offset", positions.query_offset, {"q_len": 2, "k_len": 5, "alignment": "bottom-right"}),
    # attention
    Entry("attention.causal_mask", attention.causal_mask, {"q_len": 3, "k_len": 5},
          lambda kw, r: (kw["q_len"], kw["k_len"])),
    Entry("attention.softmax", attention.softmax, {"logits": arr(2, 5), "keep": np.ones((2, 5), bool), "axis": -1},
          lambda kw, r: np.shape(kw["logits"]), data=("logits",)),
    Entry("attention.forward", _fwd,
          {"q": Q, "k": Q, "v": Q, "bias": arr(2, 3, 3), "mask": np.ones((3, 3), bool), "causal": True, "scale": 0.5,
           "hooks": ()}, data=("q", "k", "v", "bias", "scale")),
    Entry("attention.backward", attention.backward, {"dout": arr(1, 2, 3, 4), "cache": _attn_cache()},
          data=("dout",)),
    Entry("attention.split_heads", attention.split_heads, {"x": arr(2, 3, 8), "num_heads": 2},
          lambda kw, r: np.shape(kw["x"])[:-2] + (kw["num_heads"], np.shape(kw["x"])[-2],
                                                   np.shape(kw["x"])[-1] // kw["num_heads"]), data=("x",)),
    Entry("attention.merge_heads", attention.merge_heads, {"x": arr(2, 2, 3, 4)}, data=("x",)),
    # layers
    Entry("layers.Linear", layers.Linear,
          {"in_features": 3, "out_features": 4, "bias": True, "rng": 0, "init_std": 0.02, "dtype": np.float32}),
    Entry("layers.Linear.forward", _layer(lambda: layers.Linear(3, 4, rng=0), "forward"), {"x": arr(2, 3)},
          lambda kw, r: np.shape(kw["x"])[:-1] + (4,), data=("x",)),
    Entry("layers.Linear.backward", _layer(lambda: layers.Linear(3, 4, rng=0), "backward",
                                           lambda layer: layer.forward(arr(2, 3))), {"dy": arr(2, 4)},
          lambda kw, r: (2, 3), data=("dy",)),
    Entry("layers.LayerNorm", layers.LayerNorm, {"dim": 4, "eps": 1e-5, "dtype": np.float64}),
    Entry("layers.LayerNorm.forward", _layer(lambda: layers.LayerNorm(4), "forward"), {"x": arr(2, 4)},
          lambda kw, r: np.shape(kw["x"]), data=("x",)),
    Entry("layers.LayerNorm.backward", _layer(lambda: layers.LayerNorm(4), "backward",
                                              lambda layer: layer.forward(arr(2, 4))), {"dy": arr(2, 4)},
          lambda kw, r: (2, 4), data=("dy",)),
    Entry("layers.gelu", layers.gelu, {"x": arr(5), "approximate": "none"}, lambda kw, r: np.shape(kw["x"]),
          data=("x",)),
    Entry("layers.gelu_backward", layers.gelu_backward, {"dy": arr(5), "x": arr(5), "approximate": "tanh"},
          lambda kw, r: np.shape(kw["x"]), data=("dy", "x")),
    Entry("layers.GELU.forward", _layer(lambda: layers.GELU(), "forward"), {"x": arr(3, 2)},
          lambda kw, r: np.shape(kw["x"]), data=("x",)),
    Entry("layers.Embedding", layers.Embedding, {"num_embeddings": 5, "dim": 3, "rng": 0, "init_std": 0.02}),
    Entry("layers.Embedding.forward", _layer(lambda: layers.Embedding(5, 3, rng=0), "forward"),
          {"ids": np.array([[0, 4]])}, lambda kw, r: np.shape(kw["ids"]) + (3,)),
    Entry("layers.Embedding.backward", _layer(lambda: layers.Embedding(5, 3, rng=0), "backward",
                                              lambda layer: layer.forward(np.array([0, 4]))), {"dy": arr(2, 3)},
          data=("dy",)),
    Entry("layers.softmax_cross_entropy", layers.softmax_cross_entropy,
          {"logits": arr(2, 5), "targets": np.array([1, -100]), "ignore_index": -100}, data=("logits",)),
    Entry("layers.softmax_cross_entropy_backward", layers.softmax_cross_entropy_backward,
          {"cache": _ce_cache(), "dloss": 1.0}, data=("dloss",)),
    # relative: T5
    Entry("relative.t5_relative_position_bucket", relative.t5_relative_position_bucket,
          {"relative_position": np.arange(-5, 5), "bidirectional": True, "num_buckets": 8, "max_distance": 16},
          lambda kw, r: np.shape(kw["relative_position"])),
    Entry("relative.t5_relative_positions", relative.t5_relative_positions, {"q_len": 2, "k_len": 3},
          lambda kw, r: (kw["q_len"], kw["k_len"])),
    Entry("relative.t5_bias", relative.t5_bias,
          {"table": arr(8, 2), "q_len": 2, "k_len": 3, "bidirectional": False, "max_distance": 16},
          lambda kw, r: (np.shape(kw["table"])[1], kw["q_len"], kw["k_len"]), data=("table",)),
    Entry("relative.t5_bias_backward", relative.t5_bias_backward,
          {"dbias": arr(1, 2, 2, 3), "num_buckets": 8, "bidirectional": True, "max_distance": 16},
          lambda kw, r: (kw["num_buckets"], 2), data=("dbias",)),
    Entry("relative.T5RelativeBias", relative.T5RelativeBias,
          {"num_heads": 2, "num_buckets": 8, "max_distance": 16, "bidirectional": True, "seed": 0, "init_std": 0.02}),
    Entry("relative.T5RelativeBias.bias", _hook_call(_t5, "bias"), {"q_len": 2, "k_len": 3},
          lambda kw, r: (2, kw["q_len"], kw["k_len"])),
    Entry("relative.T5RelativeBias.bias_backward", _hook_call(_t5, "bias_backward"), {"dbias": arr(2, 2, 3)},
          data=("dbias",)),
    # relative: Shaw
    Entry("relative.shaw_relative_index", relative.shaw_relative_index,
          {"q_len": 2, "k_len": 3, "max_relative_position": 1}, lambda kw, r: (kw["q_len"], kw["k_len"])),
    Entry("relative.shaw_logits", relative.shaw_logits, {"q": arr(2, 3, 4), "table": arr(5, 4), "k_len": 3,
                                                         "scale": 0.5}, data=("q", "table", "scale")),
    Entry("relative.shaw_logits_backward", relative.shaw_logits_backward,
          {"dlogits": arr(2, 3, 3), "q": arr(2, 3, 4), "table": arr(5, 4), "scale": 0.5},
          data=("dlogits", "q", "table", "scale")),
    Entry("relative.shaw_values", relative.shaw_values, {"probs": np.full((2, 3, 3), 1 / 3), "table": arr(5, 4)},
          data=("probs", "table")),
    Entry("relative.shaw_values_backward", relative.shaw_values_backward,
          {"dout": arr(2, 3, 4), "probs": np.full((2, 3, 3), 1 / 3), "table": arr(5, 4)},
          data=("dout", "probs", "table")),
    Entry("relative.ShawRelativeAttention", relative.ShawRelativeAttention,
          {"head_dim": 4, "max_relative_position": 2, "value_dim": 3, "use_values": True, "seed": 0,
           "init_std": 0.02}),
    Entry("relative.ShawRelativeAttention.logits", _hook_call(_shaw, "logits"),
          {"q": Q, "k": Q, "scale": 0.5, "mask": np.ones((3, 3), bool)}, data=("q", "k", "scale")),
    Entry("relative.ShawRelativeAttention.values", _hook_call(_shaw, "values"), {"probs": np.full((1, 2, 3, 3), 1 / 3)},
          data=("probs",)),
    # relative: BERT
    Entry("relative.bert_relative_distance", relative.bert_relative_distance, {"q_len": 2, "k_len": 3},
          lambda kw, r: (kw["q_len"], kw["k_len"])),
    Entry("relative.bert_relative_scores", relative.bert_relative_scores,
          {"q": Q, "k": Q, "table": arr(15, 4), "mode": "relative_key_query", "scale": 0.5},
          data=("q", "k", "table", "scale")),
    Entry("relative.bert_relative_scores_backward", relative.bert_relative_scores_backward,
          {"dscores": arr(1, 2, 3, 3), "q": Q, "k": Q, "table": arr(15, 4), "mode": "relative_key", "scale": 0.5},
          data=("dscores", "q", "k", "table", "scale")),
    Entry("relative.BertRelativeKey", relative.BertRelativeKey,
          {"max_position_embeddings": 8, "head_dim": 4, "mode": "relative_key", "seed": 0, "init_std": 0.02}),
    Entry("relative.BertRelativeKey.logits", _hook_call(_bert, "logits"), {"q": Q, "k": Q, "scale": 0.5},
          data=("q", "k", "scale")),
    # relative: Transformer-XL
    Entry("relative.rel_shift", relative.rel_shift, {"x": arr(2, 3, 4)}, lambda kw, r: np.shape(kw["x"]),
          data=("x",)),
    Entry("relative.rel_shift_backward", relative.rel_shift_backward, {"dout": arr(2, 3, 4)},
          lambda kw, r: np.shape(kw["dout"]), data=("dout",)),
    Entry("relative.txl_relative_sinusoid", relative.txl_relative_sinusoid,
          {"k_len": 4, "dim": 6, "base": 10000.0, "clamp_len": 2}, lambda kw, r: (kw["k_len"], kw["dim"])),
    Entry("relative.TransformerXLRelative", relative.TransformerXLRelative,
          {"num_heads": 2, "head_dim": 4, "d_model_r": 8, "base": 10000.0, "clamp_len": None, "seed": 0,
           "init_std": 0.02}),
    Entry("relative.TransformerXLRelative.logits", _hook_call(_txl, "logits"), {"q": Q, "k": Q, "scale": 0.5},
          data=("q", "k", "scale")),
    # relative: DeBERTa
    Entry("relative.deberta_log_bucket_position", relative.deberta_log_bucket_position,
          {"relative_pos": np.arange(-20, 20), "bucket_size": 8, "max_position": 32},
          lambda kw, r: np.shape(kw["relative_pos"])),
    Entry("relative.deberta_relative_positions", relative.deberta_relative_positions,
          {"q_len": 2, "k_len": 5, "bucket_size": 4, "max_position": 8, "query_offset": 1},
          lambda kw, r: (kw["q_len"], kw["k_len"])),
    Entry("relative.deberta_scale", relative.deberta_scale, {"head_dim": 16, "pos_att_type": "c2p|p2c"}),
    Entry("relative.deberta_project_relative_embeddings", relative.deberta_project_relative_embeddings,
          {"rel_embeddings": arr(6, 5), "weight": arr(8, 5), "bias": arr(8), "num_heads": 2},
          data=("rel_embeddings", "weight", "bias")),
    Entry("relative.DebertaDisentangled", relative.DebertaDisentangled,
          {"num_heads": 2, "head_dim": 4, "position_buckets": 4, "max_relative_positions": 8,
           "pos_att_type": ("c2p", "p2c"), "p2c_index": "paper", "seed": 0, "init_std": 0.02}),
    Entry("relative.DebertaDisentangled.logits", _hook_call(_deberta, "logits"), {"q": Q, "k": Q, "scale": 0.5},
          data=("q", "k", "scale")),
    # relative: CoPE, FIRE, dynamic position bias
    Entry("relative.cope_positions", relative.cope_positions,
          {"q": Q, "k": Q, "gate_scale": 0.5, "mask": np.tril(np.ones((3, 3), bool))},
          lambda kw, r: np.shape(kw["q"])[:-1] + (np.shape(kw["k"])[-2],), data=("q", "k", "gate_scale")),
    Entry("relative.cope_forward", lambda **kw: relative.cope_forward(**kw)[0],
          {"q": Q, "k": Q, "table": arr(4, 4), "gate_scale": 0.5, "mask": None},
          lambda kw, r: np.shape(kw["q"])[:-1] + (np.shape(kw["k"])[-2],), data=("q", "k", "table", "gate_scale")),
    Entry("relative.cope_backward", relative.cope_backward, {"dterm": arr(1, 2, 3, 3), "cache": _cope_cache()},
          data=("dterm",), fixed=("cache",)),
    Entry("relative.CoPE", relative.CoPE,
          {"head_dim": 4, "npos_max": 3, "gate_scale": None, "seed": 0, "init_std": 0.02}),
    Entry("relative.CoPE.logits", _hook_call(lambda: relative.CoPE(4, 3, seed=0), "logits"),
          {"q": Q, "k": Q, "scale": 0.5, "mask": np.ones((3, 3), bool)}, data=("q", "k", "scale")),
    Entry("relative.fire_bias", relative.fire_bias,
          {"params": _fire_params(), "q_len": 2, "k_len": 3, "init_L": 2.0, "eps": 1e-6, "query_offset": None},
          _bias_shape, data=("params",)),
    Entry("relative.fire_bias_backward", relative.fire_bias_backward,
          {"dbias": arr(2, 2, 3), "params": _fire_params(), "init_L": 2.0, "eps": 1e-6, "query_offset": 4},
          data=("dbias", "params")),
    Entry("relative.fire_normalized_distance", relative.fire_normalized_distance,
          {"q_len": 2, "k_len": 3, "c": 0.1, "L": 2.0, "eps": 1e-6, "query_offset": None},
          lambda kw, r: (kw["q_len"], kw["k_len"])),
    Entry("relative.FIREBias", relative.FIREBias,
          {"num_heads": 2, "width": 4, "init_c": 0.1, "init_L": 8.0, "eps": 1e-6, "seed": 0}),
    Entry("relative.FIREBias.logits", _hook_call(lambda: relative.FIREBias(2, width=4, seed=0), "logits"),
          {"q": Q, "k": Q, "scale": 0.5, "mask": None}, data=("q", "k", "scale")),
    Entry("relative.dpb_inputs", relative.dpb_inputs, {"q_len": 2, "k_len": 3, "log_distance": True,
                                                       "query_offset": None}, lambda kw, r: (kw["q_len"], kw["k_len"])),
    Entry("relative.dpb_bias", relative.dpb_bias,
          {"params": _dpb_params(), "q_len": 2, "k_len": 3, "log_distance": False, "query_offset": 1}, _bias_shape,
          data=("params",)),
    Entry("relative.dpb_bias_backward", relative.dpb_bias_backward,
          {"dbias": arr(2, 2, 3), "params": _dpb_params(), "log_distance": True, "query_offset": None},
          data=("dbias", "params")),
    Entry("relative.DynamicPositionBias", relative.DynamicPositionBias,
          {"num_heads": 2, "width": 4, "depth": 2, "log_distance": True, "seed": 0}),
    Entry("relative.DynamicPositionBias.logits",
          _hook_call(lambda: relative.DynamicPositionBias(2, width=4, seed=0), "logits"),
          {"q": Q, "k": Q, "scale": 0.5, "mask": None}, data=("q", "k", "scale")),
    # optim
    Entry("optim.Adam", optim.Adam,
          {"params": {"w": arr(2, 2)}, "lr": 1e-3, "betas": (0.9, 0.99), "eps": 1e-8, "weight_decay": 0.1,
           "decay": None}),
    Entry("optim.Adam.step", lambda grads, lr: optim.Adam({"w": np.zeros((2, 2))}).step(grads, lr=lr),
          {"grads": {"w": arr(2, 2)}, "lr": 0.1}),
    Entry("optim.clip_grad_norm", lambda grads, max_norm: optim.clip_grad_norm(copy.deepcopy(grads), max_norm),
          {"grads": {"w": arr(2, 2)}, "max_norm": 1.0}),
    Entry("optim.cosine_schedule", optim.cosine_schedule,
          {"step": 3, "total": 10, "lr": 1e-3, "warmup": 2, "min_lr": 1e-5}),
    Entry("optim.global_norm", optim.global_norm, {"grads": {"w": arr(2, 2), "b": arr(3)}}),
    # kernels called directly
    Entry("kernels.rope_apply", kernels.rope_apply,
          {"x": arr(2, 3, 8), "cos": COS, "sin": SIN, "layout": "interleaved", "inverse": True, "out": None},
          lambda kw, r: np.shape(kw["x"]), data=("x", "cos", "sin")),  # the fast path does not check table values
    Entry("kernels.alibi_attention_forward", lambda **kw: kernels.alibi_attention_forward(**kw)[0],  # (lse = -inf
          # is the documented value of a fully masked row)
          {"q": Q, "k": Q, "v": Q, "slopes": np.array([0.5, 0.25]), "causal": True, "scale": 0.5, "query_offset": 2},
          data=("q", "k", "v", "scale")),
    # relative: KERPLE and Sandwich
    Entry("relative.kerple_bias", relative.kerple_bias,
          {"r1": np.array([0.5, 1.0]), "r2": np.array([0.5, 1.5]), "q_len": 2, "k_len": 3, "variant": "power"},
          lambda kw, r: (2, kw["q_len"], kw["k_len"])),
    Entry("relative.kerple_bias_backward", relative.kerple_bias_backward,
          {"dbias": arr(1, 2, 2, 3), "r1": np.array([0.5, 1.0]), "r2": np.array([0.5, 1.5]), "variant": "log"},
          lambda kw, r: [(2,), (2,)], data=("dbias",)),
    Entry("relative.KerpleBias", relative.KerpleBias, {"num_heads": 2, "variant": "power", "seed": 0}),
    Entry("relative.KerpleBias.logits", _hook_call(lambda: relative.KerpleBias(2, seed=0), "logits"),
          {"q": Q, "k": Q, "scale": 0.5, "mask": np.tril(np.ones((3, 3), bool))}, data=("q", "k", "scale")),
    Entry("relative.sandwich_bias", relative.sandwich_bias,
          {"num_heads": 2, "q_len": 2, "k_len": 3, "dim": 8, "compression": "alibi"},
          lambda kw, r: (kw["num_heads"], kw["q_len"], kw["k_len"])),
    Entry("relative.sandwich_ratios", relative.sandwich_ratios, {"num_heads": 3, "compression": "alibi"},
          lambda kw, r: (kw["num_heads"],)),
    Entry("relative.SandwichBias", relative.SandwichBias, {"num_heads": 2, "dim": 8, "compression": "none"}),
    Entry("relative.SandwichBias.logits", _hook_call(lambda: relative.SandwichBias(2, dim=8), "logits"),
          {"q": Q, "k": Q, "scale": 0.5, "mask": np.tril(np.ones((3, 3), bool))}, data=("q", "k", "scale")),
    # training and testing helpers
    Entry("train.evaluate", lambda tokens, targets, batch_size, beyond: evaluate(
        _model(), tokens, targets, batch_size=batch_size, beyond=beyond),
          {"tokens": np.array([[1, 2, 3]]), "targets": np.array([[2, 3, -100]]), "batch_size": 4, "beyond": 1}),
    Entry("testing.gradcheck", lambda inputs, eps, tol, max_entries, seed: gradcheck(
        lambda x: 2 * x, lambda g, x: {"x": 2 * g}, inputs, eps=eps, tol=tol, max_entries=max_entries, seed=seed,
        raise_on_failure=False),
          {"inputs": {"x": arr(3)}, "eps": 1e-6, "tol": 1e-6, "max_entries": 2, "seed": 0},
          data=("eps",)),  # (a huge eps overflows the probed function, not gradcheck)
    # model and study
    Entry("model.ModelConfig", lambda **kw: Transformer(ModelConfig(**kw)),
          {"vocab_size": 7, "d_model": 8, "n_heads": 2, "n_layers": 1, "d_ff": 8, "max_len": 8, "position": "alibi",
           "fusion": "add", "dtype": "float64", "init_std": 0.02, "seed": 0}),
    Entry("model.Transformer.forward", lambda tokens: _model().forward(tokens), {"tokens": np.array([[1, 2, 3]])},
          lambda kw, r: np.shape(kw["tokens"]) + (7,)),
    Entry("model.Transformer.forward.positions", lambda tokens, positions: _model().forward(tokens, positions=positions),
          {"tokens": np.array([[1, 2, 3]]), "positions": np.array([0, 4, 9])},
          lambda kw, r: np.shape(kw["tokens"]) + (7,)),
    Entry("model.Transformer.generate", lambda prompt, steps: _model().generate(prompt, steps),
          {"prompt": np.array([[1, 2]]), "steps": 2}),
    Entry("study.LagTask", lambda n, alphabet, lag, batch_size: study.LagTask(n, alphabet, lag).sample(
        np.random.default_rng(0), batch_size), {"n": 3, "alphabet": 4, "lag": 2, "batch_size": 2}),
]


# ------------------------------------------------------------------ the property


def _walk(obj):
    """Every ndarray / float in a (nested) result."""
    if isinstance(obj, np.ndarray):
        yield obj
    elif isinstance(obj, (float, np.floating)):
        yield np.asarray(obj)
    elif isinstance(obj, (tuple, list)):
        for item in obj:
            yield from _walk(item)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _walk(item)


def _extreme(value) -> bool:
    """Non-finite or huge entries in a data argument (their propagation is IEEE's business)."""
    try:
        a = np.asarray(value)
    except Exception:  # noqa: BLE001 - ragged and the like
        return False
    if a.dtype.kind == "O":
        return True
    if a.dtype.kind in "iu" and a.size:  # integers past float64's exact range: huge once they are floats
        return bool(np.max(np.abs(a.astype(np.float64))) > 2.0**53)
    if a.dtype.kind not in "fc" or a.size == 0:
        return False
    with np.errstate(all="ignore"):
        return bool(not np.all(np.isfinite(a)) or np.max(np.abs(a)) > 1e150)


def _check(entry: Entry, kw: dict) -> None:
    lax = any(_extreme(kw[name]) for name in entry.data if name in kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore" if lax else "error", RuntimeWarning)
        try:
            result = entry.fn(**kw)
        except (ValueError, TypeError):
            return
    if lax:
        return
    for a in _walk(result):
        if a.dtype.kind in "fc":
            assert np.all(np.isfinite(a)), f"{entry.name} returned non-finite values for {kw!r}"
    if entry.shape is not None:
        want = entry.shape(kw, result)
        got = [np.shape(r) for r in result] if isinstance(want, list) else np.shape(result)
        assert got == (want if not isinstance(want, list) else [tuple(w) for w in want]), \
            f"{entry.name} returned shape {got}, expected {want}, for {kw!r}"


@pytest.mark.slow
@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.name)
@settings(max_examples=int(os.environ.get("SWEEP_EXAMPLES", "15")))
@given(data=st.data())
def test_hostile_arguments_are_refused_or_handled(entry, data):
    names = [n for n in entry.args if n not in entry.fixed]
    chosen = data.draw(st.lists(st.sampled_from(names), min_size=1, max_size=min(2, len(names)), unique=True))
    kw = copy.deepcopy(entry.args)
    for name in chosen:
        kw[name] = copy.deepcopy(data.draw(st.sampled_from(variants(entry.args[name])), label=name))
    _check(entry, kw)


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e.name)
def test_valid_arguments_pass_the_property(entry):
    """The registry's valid calls themselves succeed with finite, correctly shaped results."""
    kw = copy.deepcopy(entry.args)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        result = entry.fn(**kw)
    _check(entry, kw)
    assert result is not None or entry.name.endswith(("backward", ".step", "bias_backward"))
