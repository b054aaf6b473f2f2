"""Whole-model tests: float64 gradcheck for every registry entry, KV-cache decoding, registry."""

import numpy as np
import pytest

from posenc_np import absolute, alibi
from posenc_np import attention as attn
from posenc_np.model import REGISTRY, KVCache, ModelConfig, Transformer
from posenc_np.testing import gradcheck

ABSOLUTE = [n for n, a in REGISTRY.items() if a.absolute]
CASES = [(name, fusion) for name in REGISTRY for fusion in (absolute.FUSIONS if name in ABSOLUTE else ("add",))]


def tiny(position, fusion="add", *, causal=True, tied=True, n_layers=2, **kw):
    cfg = ModelConfig(vocab_size=7, d_model=8, n_heads=2, n_layers=n_layers, d_ff=12, max_len=16, causal=causal,
                      tied=tied, position=position, fusion=fusion, dtype="float64", seed=3, **kw)
    model = Transformer(cfg)
    # move every parameter away from its (often zero / one / tiny) initial value so that every
    # path through the network carries a non-trivial gradient
    rng = np.random.default_rng(11)
    for v in model.params.values():
        v += rng.normal(0.0, 0.4, size=v.shape)
    return model


def model_gradcheck(model, tokens, max_entries=10):
    names = list(model.params)

    def fun(**p):
        model.load_params(p)
        return model.forward(tokens)

    def bwd(g, **p):
        model.load_params(p)
        model.forward(tokens)
        model.backward(g)
        return {n: model.grads[n] for n in names}

    inputs = {n: model.params[n].copy() for n in names}
    return gradcheck(fun, bwd, inputs, max_entries=max_entries, tol=1e-6, seed=5)


@pytest.mark.slow
@pytest.mark.parametrize("causal", [True, False], ids=["decoder", "encoder"])
@pytest.mark.parametrize("name,fusion", CASES, ids=[f"{n}-{f}" for n, f in CASES])
def test_whole_model_gradcheck(name, fusion, causal):
    if not causal and REGISTRY[name].decoder_only:
        with pytest.raises(ValueError, match="causal=True"):
            tiny(name, fusion, causal=causal)
        return
    model = tiny(name, fusion, causal=causal, tied=(fusion != "multiply"))
    tokens = np.random.default_rng(1).integers(0, 7, size=(2, 5))
    res = model_gradcheck(model, tokens)
    assert res.checked >= len(model.params)  # every tensor was probed


@pytest.mark.parametrize("scaling", [{"rope_type": "linear", "factor": 2.0},
                                     {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4},
                                     {"rope_type": "dynamic", "factor": 2.0}],
                         ids=["linear", "yarn", "dynamic"])
def test_rope_scaling_gradcheck(scaling):
    model = tiny("rope", position_options={"scaling": scaling, "max_position_embeddings": 4})
    model_gradcheck(model, np.random.default_rng(2).integers(0, 7, size=(1, 6)), max_entries=6)


@pytest.mark.parametrize("name,fusion", [("sinusoidal", "add"), ("learned", "concat"), ("rope", "add")])
def test_embed_scale_sqrt_d_gradcheck(name, fusion):
    model = tiny(name, fusion, embed_scale="sqrt_d")
    model_gradcheck(model, np.random.default_rng(3).integers(0, 7, size=(2, 5)))


def test_embed_scale_sqrt_d_is_vaswani_scaling():
    """N(0, 1/d) table multiplied by sqrt(d) on input: an untied model equals the unscaled model
    whose table is sqrt(d) times larger."""
    cfg = ModelConfig(vocab_size=500, d_model=64, n_heads=2, n_layers=1, tied=False, position="sinusoidal",
                      embed_scale="sqrt_d", dtype="float64")
    m = Transformer(cfg)
    assert abs(m.params["tok_emb.weight"].std() - 1 / 8) < 0.005
    plain = Transformer(ModelConfig(**{**cfg.__dict__, "embed_scale": "none"}))
    plain.load_params({**m.params, "tok_emb.weight": 8.0 * m.params["tok_emb.weight"]})
    tok = np.array([[3, 4, 499]])
    np.testing.assert_allclose(m.forward(tok), plain.forward(tok), rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="embed_scale"):
        ModelConfig(vocab_size=7, embed_scale="sqrt").validate()


def test_gradcheck_detects_a_wrong_backward(monkeypatch):
    """The whole-model check is sharp enough to catch a slightly wrong layer backward."""
    from posenc_np import layers

    model = tiny("none")
    orig = layers.LayerNorm.backward

    def wrong(self, dy):
        out = orig(self, dy)
        self.grads["gamma"] = self.grads["gamma"] * 1.001
        return out

    monkeypatch.setattr(layers.LayerNorm, "backward", wrong)
    with pytest.raises(AssertionError, match="gradcheck FAILED"):
        model_gradcheck(model, np.random.default_rng(1).integers(0, 7, size=(2, 5)))


def test_forward_matches_an_independent_single_layer_computation():
    """One layer, NoPE, untied: recompute the logits from the parameters with plain NumPy."""
    cfg = ModelConfig(vocab_size=5, d_model=4, n_heads=2, n_layers=1, d_ff=6, tied=False, dtype="float64", seed=0)
    model = Transformer(cfg)
    rng = np.random.default_rng(0)
    for v in model.params.values():
        v += rng.normal(0, 0.5, size=v.shape)
    tok = np.array([[1, 4, 0, 2]])
    p = model.params

    def ln(x, g, b):
        return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * g + b

    def gelu(x):
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))

    x = p["tok_emb.weight"][tok[0]]
    qkv = ln(x, p["blocks.0.ln1.gamma"], p["blocks.0.ln1.beta"]) @ p["blocks.0.attn.qkv.weight"] + p["blocks.0.attn.qkv.bias"]
    heads = []
    for h in range(2):
        q, k, v = (qkv[:, j * 4 + 2 * h: j * 4 + 2 * h + 2] for j in range(3))
        s = q @ k.T / np.sqrt(2)
        s = np.where(np.tril(np.ones((4, 4), bool)), s, -np.inf)
        a = np.exp(s - s.max(1, keepdims=True))
        heads.append((a / a.sum(1, keepdims=True)) @ v)
    x = x + np.concatenate(heads, 1) @ p["blocks.0.attn.proj.weight"] + p["blocks.0.attn.proj.bias"]
    m = ln(x, p["blocks.0.ln2.gamma"], p["blocks.0.ln2.beta"]) @ p["blocks.0.mlp.fc1.weight"] + p["blocks.0.mlp.fc1.bias"]
    x = x + gelu(m) @ p["blocks.0.mlp.fc2.weight"] + p["blocks.0.mlp.fc2.bias"]
    want = ln(x, p["ln_f.gamma"], p["ln_f.beta"]) @ p["lm_head.weight"]
    np.testing.assert_allclose(model.forward(tok)[0], want, rtol=1e-12, atol=1e-12)


def test_nope_decoder_is_order_sensitive_only_through_the_mask_and_encoder_is_permutation_equivariant():
    tok = np.array([[1, 2, 3, 4, 5]])
    perm = np.array([4, 2, 0, 3, 1])
    enc = tiny("none", causal=False)
    np.testing.assert_allclose(enc.forward(tok[:, perm]), enc.forward(tok)[:, perm], atol=1e-12)
    # with a position encoding the encoder is no longer permutation-equivariant
    enc = tiny("sinusoidal", causal=False)
    assert not np.allclose(enc.forward(tok[:, perm]), enc.forward(tok)[:, perm], atol=1e-6)


def test_tied_embedding_gradient_is_the_sum_of_both_uses():
    model = tiny("none")
    tok = np.array([[0, 1, 2, 3]])
    g = np.random.default_rng(0).standard_normal((1, 4, 7))
    model.forward(tok)
    model.backward(g)
    hf = model.ln_f.forward(model.blocks[-1].forward(model.blocks[0].forward(model.tok_emb.forward(tok), None), None))
    head_part = g[0].T @ hf[0]
    emb_part = model.grads["tok_emb.weight"] - head_part
    assert np.abs(emb_part[4:]).max() < 1e-12  # tokens 4..6 are not in the input: only the head uses them
    assert np.abs(emb_part[:4]).max() > 1e-6


def test_concat_sizes_and_fusion_validation():
    m = Transformer(ModelConfig(vocab_size=7, d_model=8, n_heads=2, position="learned", fusion="concat",
                                position_options={"dim": 2}))
    assert m.params["tok_emb.weight"].shape == (7, 6)
    assert m.params["pos_emb.weight"].shape == (128, 2)
    with pytest.raises(ValueError, match="only applies to absolute"):
        ModelConfig(vocab_size=7, position="rope", fusion="concat").validate()
    with pytest.raises(ValueError, match="position must be one of"):
        ModelConfig(vocab_size=7, position="no_such_encoding").validate()
    with pytest.raises(ValueError, match="unknown position_options"):
        Transformer(ModelConfig(vocab_size=7, position="alibi", position_options={"slope": 1}))
    with pytest.raises(ValueError, match="divisible"):
        ModelConfig(vocab_size=7, d_model=10, n_heads=4).validate()


def test_learned_multiply_table_starts_near_one():
    m = Transformer(ModelConfig(vocab_size=7, d_model=8, n_heads=2, position="learned", fusion="multiply"))
    assert abs(m.params["pos_emb.weight"].mean() - 1) < 0.01


def test_learned_cannot_extrapolate():
    m = tiny("learned")
    with pytest.raises(ValueError, match="cannot extrapolate"):
        m.forward(np.zeros((1, 17), dtype=int))


def test_alibi_adapter_equals_attention_core_with_explicit_bias():
    m = tiny("alibi")
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((2, 2, 5, 4)) for _ in range(3))
    out, _ = m.pos.attend(0, q, k, v, True)
    b = alibi.bias(2, 5, 5, form="causal")
    want, _ = attn.forward(q, k, v, bias=b, causal=True)
    np.testing.assert_allclose(out, want, atol=1e-13)


def test_rope_adapter_scores_depend_on_relative_position_only():
    m = tiny("rope")
    rng = np.random.default_rng(0)
    q1, k1 = rng.standard_normal((2, 1, 1, 1, 4))
    q = np.repeat(q1, 6, axis=2)
    k = np.repeat(k1, 6, axis=2)
    m.pos.begin(0, 6, None)
    qr, kr = m.pos.rotate(q, k)
    s = (qr @ np.swapaxes(kr, -1, -2))[0, 0]
    for d in range(-3, 4):
        diag = np.diagonal(s, offset=d)
        np.testing.assert_allclose(diag, diag[0], atol=1e-12)
    assert not np.allclose(np.diagonal(s, 0)[0], np.diagonal(s, 2)[0])


# --------------------------------------------------------------------------- KV cache

# KV-cache decoding of every entry equals its full forward: tests/test_registry_contract.py


def test_kv_cache_dynamic_rope_rerotates_stale_keys():
    """Dynamic NTK changes the frequencies with the length: decoding step t must equal a full
    forward of the prefix of length t+1 (not of the whole sequence, whose frequencies differ).

    Exact for one layer only: in deeper layers the cached keys/values of earlier tokens were
    *computed* (not just rotated) under the old frequencies, which no re-rotation can undo."""
    model = tiny("rope", n_layers=1, position_options={"scaling": {"rope_type": "dynamic", "factor": 2.0},
                                                       "max_position_embeddings": 3})
    tokens = np.random.default_rng(5).integers(0, 7, size=(1, 7))
    cache = model.init_cache()
    for t in range(7):
        step = model.decode_step(tokens[:, t], cache)
        np.testing.assert_allclose(step, model.forward(tokens[:, : t + 1])[:, -1], rtol=1e-10, atol=1e-11)
    assert not np.allclose(step, model.forward(tokens[:, :5])[:, -1])  # frequencies really changed
    # without the re-rotation the cached keys are stale and decoding drifts
    stale = model.init_cache()
    model.decode_step(tokens[:, 0], stale)
    model.decode_step(tokens[:, 1], stale)
    model.decode_step(tokens[:, 2], stale)
    stale.extra.pop("inv_freq")  # forget which frequencies the keys were rotated with
    got = model.decode_step(tokens[:, 3], stale)
    assert not np.allclose(got, model.forward(tokens[:, :4])[:, -1], atol=1e-6)


def test_kv_cache_refused_for_encoder_and_backward_after_cached_forward():
    with pytest.raises(ValueError, match="causal"):
        tiny("none", causal=False).init_cache()
    m = tiny("none")
    m.forward(np.zeros((1, 3), dtype=int), cache=KVCache())
    with pytest.raises(RuntimeError, match="without a KV cache"):
        m.backward(np.zeros((1, 3, 7)))


def test_generate_is_greedy_and_consistent():
    m = tiny("rope")
    prompt = np.array([[1, 2, 3]])
    with pytest.raises(ValueError, match="length >= 1"):  # was an IndexError
        m.generate(prompt[:, :0], 2)
    out = m.generate(prompt, 4)
    seq = prompt
    for _ in range(4):
        seq = np.concatenate([seq, m.forward(seq)[:, -1].argmax(-1)[:, None]], axis=1)
    np.testing.assert_array_equal(out, seq)


def test_init_is_seeded_and_params_are_shared_with_layers():
    a = Transformer(ModelConfig(vocab_size=7, d_model=8, n_heads=2, position="learned", seed=1))
    b = Transformer(ModelConfig(vocab_size=7, d_model=8, n_heads=2, position="learned", seed=1))
    c = Transformer(ModelConfig(vocab_size=7, d_model=8, n_heads=2, position="learned", seed=2))
    assert all(np.array_equal(a.params[k], b.params[k]) for k in a.params)
    assert not np.array_equal(a.params["tok_emb.weight"], c.params["tok_emb.weight"])
    assert a.params["blocks.0.attn.qkv.weight"] is a.blocks[0].qkv.params["weight"]
    tok = np.array([[1, 2]])
    before = a.forward(tok)
    a.params["ln_f.beta"] += 1.0  # in-place update reaches the layer
    assert not np.allclose(a.forward(tok), before)
    assert a.forward(tok).dtype == np.float32


# --------------------------------------------------------------------------- the registry: once per model

def test_every_entry_says_where_it_acts_and_resolves_its_defaults():
    from posenc_np.registry import ACTS

    for name, entry in REGISTRY.items():
        assert entry.name == name and entry.acts in ACTS and entry.summary
        cfg = ModelConfig(vocab_size=7, d_model=8, n_heads=2, position=name)
        assert set(entry.resolve(cfg)) == {k for k, o in entry.options.items() if o.when is None or o.when(cfg)}
    cfg = ModelConfig(vocab_size=7, d_model=8, n_heads=2, position="rope", position_options={"layout": "interleaved"})
    assert REGISTRY["rope"].resolve(cfg) == {"base": 10000.0, "scaling": None, "layout": "interleaved",
                                             "rotary_dim": 4, "max_position_embeddings": 128, "p": 1.0,
                                             "randomized_max_len": None}
    with pytest.raises(ValueError, match=r"position_options\['layout'\] must be one of"):
        Transformer(ModelConfig(vocab_size=7, d_model=8, n_heads=2, position="rope", position_options={"layout": "x"}))
    with pytest.raises(ValueError, match="unknown position_options for 'learned'"):  # dim only with concat
        Transformer(ModelConfig(vocab_size=7, d_model=8, n_heads=2, position="learned", position_options={"dim": 2}))


def test_scaling_dict_parsed_and_tables_built_once_per_model(monkeypatch):
    from posenc_np import rope, rope_scaling

    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4}
    model = tiny("rope", n_layers=2, position_options={"scaling": yarn})
    calls = {"parse": 0, "formula": 0, "tables": []}
    parse, formula, cos_sin = rope_scaling.parse_scaling, rope_scaling._SCALINGS["yarn"].formula, rope.cos_sin
    monkeypatch.setattr(rope_scaling, "parse_scaling", lambda *a, **k: calls.__setitem__("parse", calls["parse"] + 1)
                        or parse(*a, **k))
    monkeypatch.setitem(rope_scaling._SCALINGS, "yarn", rope_scaling._SCALINGS["yarn"].__class__(
        "yarn", rope_scaling._SCALINGS["yarn"].keys,
        lambda *a: calls.__setitem__("formula", calls["formula"] + 1) or formula(*a)))
    monkeypatch.setattr(rope, "cos_sin", lambda pos, *a, **k: calls["tables"].append(list(pos)) or cos_sin(pos, *a, **k))
    tokens = np.random.default_rng(0).integers(0, 7, size=(2, 6))
    first = model.forward(tokens)
    model.backward(np.ones_like(first))
    np.testing.assert_array_equal(model.forward(tokens), first)
    model.forward(tokens[:, :4])  # a shorter input is a slice of the kept rows
    assert calls == {"parse": 0, "formula": 0, "tables": [list(range(6))]}
    cache = model.init_cache()
    model.forward(tokens[:, :3], cache=cache)
    for t in range(3, 8):
        model.decode_step(tokens[:, t % 6], cache)
    assert calls["tables"][1:] == [[6], [7]] and calls["parse"] == 0 and calls["formula"] == 0


def test_bucket_maps_built_once_per_configuration_and_length(monkeypatch):
    from posenc_np.relative import t5

    t5.t5_bucket_grid.cache_clear()
    seen = []
    bucket = t5.t5_buckets
    monkeypatch.setattr(t5, "t5_buckets", lambda *a: seen.append(a[0].shape) or bucket(*a))
    model = tiny("t5", n_layers=3)
    tokens = np.random.default_rng(0).integers(0, 7, size=(2, 6))
    for _ in range(2):
        model.backward(np.ones_like(model.forward(tokens)))
    assert seen == [(6, 6)]  # one map for three layers, two forwards and their backwards


@pytest.mark.parametrize("name", ["rope", "xpos"])
def test_model_rotates_in_place_exactly_like_a_copy(name):
    m = tiny(name, position_options={"layout": "interleaved"})
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((2, 2, 2, 6, 4))
    m.pos.begin(0, 6, None)
    want_q, want_k = m.pos.rotate(q, k)
    assert not np.array_equal(want_q, q)
    got_q, got_k = m.pos.rotate(q, k, in_place=True)
    assert got_q is q and got_k is k
    np.testing.assert_array_equal(q, want_q)
    np.testing.assert_array_equal(k, want_k)
