"""Hugging Face config.json: what posenc_np.hf_config reads from real public configs (published
values, tests/fixtures/hf_configs/README.md), every spelling transformers 5.x accepts, clear
errors naming the key, and suites generated for one model and verified against its config."""

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

from posenc_np import cli, hf_config, rope
from posenc_np.golden import format as fmt
from posenc_np.golden import model_cases, runner
from posenc_np.hf_config import read_hf_config

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "hf_configs"


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


# --------------------------------------------------------------------------- the published configs

def test_llama_3_1():
    c = read_hf_config(FIXTURES / "llama-3.1-8b.json")
    (r,) = c.rope
    assert (c.family, c.context, r.head_dim, r.rotary_dim, r.base, r.rope_type) == ("rope", 131072, 128, 128, 5e5,
                                                                                     "llama3")
    assert np.array_equal(np.bincount(rope.llama3_bands(128, r.base, r.scaling), minlength=3), [29, 6, 29])


def test_qwen2_5_yarn_context_is_factor_times_original():
    c = read_hf_config(FIXTURES / "qwen2.5-7b-instruct-yarn.json")
    (r,) = c.rope
    assert (r.head_dim, r.base, r.rope_type, r.max_position_embeddings, c.context) == (128, 1e6, "yarn", 32768, 131072)
    _, af = r.frequencies()
    assert af == pytest.approx(0.1 * math.log(4) + 1)


def test_phi3_longrope_takes_the_top_level_original_length_and_switches_after_it():
    c = read_hf_config(FIXTURES / "phi-3-mini-128k-instruct.json")
    (r,) = c.rope
    assert (r.head_dim, r.rotary_dim, r.scaling["original_max_position_embeddings"], c.context) == (96, 96, 4096,
                                                                                                    131072)
    short, af = r.frequencies(seq_len=4096)
    long, _ = r.frequencies(seq_len=4097)
    plain = 1e4 ** -(np.arange(0, 96, 2) / 96)
    np.testing.assert_allclose(short, plain / np.array(r.scaling["short_factor"]), rtol=1e-15)
    np.testing.assert_allclose(long, plain / np.array(r.scaling["long_factor"]), rtol=1e-15)
    assert af == pytest.approx(math.sqrt(1 + math.log(32) / math.log(4096)))  # 1.1902, as GGUF's attn_factor


@pytest.mark.parametrize("name", ["gpt-oss-20b", "gpt-oss-tiny-random-5x"])
def test_gpt_oss_yarn_without_truncation_in_both_spellings(name):
    c = read_hf_config(FIXTURES / f"{name}.json")
    (r,) = c.rope
    assert r.base == 150000.0 and r.scaling["truncate"] is False and r.rope_type == "yarn"
    assert r.head_dim == (64 if name == "gpt-oss-20b" else 16)  # the explicit head_dim, not 2880 // 64 = 45
    assert c.context == 131072


def test_gemma3_one_rope_per_layer_type():
    c = read_hf_config(FIXTURES / "gemma-3-270m-5x.json")
    assert [(r.layer_type, r.base, r.head_dim) for r in c.rope] == [("full_attention", 1e6, 256),
                                                                    ("sliding_attention", 1e4, 256)]


def test_gemma3_legacy_spelling_is_the_same_setup():
    legacy = {k: v for k, v in fixture("gemma-3-270m-5x").items() if k not in ("rope_parameters", "layer_types")}
    legacy.update(rope_theta=1e6, rope_local_base_freq=1e4, rope_scaling=None)
    assert [(r.layer_type, r.base) for r in read_hf_config(legacy).rope] == [("full_attention", 1e6),
                                                                              ("sliding_attention", 1e4)]


def test_pythia_gpt_neox_spellings():
    (r,) = read_hf_config(FIXTURES / "pythia-70m.json").rope
    assert (r.head_dim, r.rotary_dim, r.base, r.scaling["partial_rotary_factor"]) == (64, 16, 1e4, 0.25)
    assert r.frequencies()[0].size == 8
    cfg = {**fixture("pythia-70m"), "partial_rotary_factor": 0.25, "rope_theta": 10000}
    assert read_hf_config(cfg).rope[0].rotary_dim == 16  # agreeing duplicates (transformers 4.48 writes both)


def test_bloom_t5_deberta():
    bloom = read_hf_config(FIXTURES / "bloom-560m.json")
    assert (bloom.family, bloom.context, bloom.alibi) == ("alibi", 2048, {"num_heads": 16, "max_bias": 8.0,
                                                                          "form": "bloom"})
    t5 = read_hf_config(FIXTURES / "t5-small.json")
    assert (t5.family, t5.context, t5.t5) == ("t5", 512, {"num_buckets": 32, "max_distance": 128, "num_heads": 8,
                                                          "bidirectional": [True, False]})
    deb = read_hf_config(FIXTURES / "deberta-v3-base.json")
    assert deb.deberta == {"position_buckets": 256, "max_relative_positions": 512, "span": 256,
                           "pos_att_type": ["c2p", "p2c"], "num_heads": 12, "head_dim": 64}


def test_the_5x_spelling_equals_the_4x_one():
    old = fixture("llama-3.1-8b")
    new = {k: v for k, v in old.items() if k not in ("rope_scaling", "rope_theta")}
    new["rope_parameters"] = {**old["rope_scaling"], "rope_theta": old["rope_theta"]}
    assert read_hf_config(new).rope == read_hf_config(old).rope
    legacy_type = {**old, "rope_scaling": {**{k: v for k, v in old["rope_scaling"].items() if k != "rope_type"},
                                           "type": "llama3"}}
    assert (read_hf_config(legacy_type).rope[0].frequencies()[0].tolist()
            == read_hf_config(old).rope[0].frequencies()[0].tolist())


def test_multimodal_text_config_and_mrope_section():
    cfg = {"model_type": "qwen2_vl", "text_config": {
        "model_type": "qwen2_vl_text", "hidden_size": 1536, "num_attention_heads": 12, "rope_theta": 1e6,
        "max_position_embeddings": 32768, "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}}}
    (r,) = read_hf_config(cfg).rope
    assert (r.head_dim, r.scaling, r.mrope_section) == (128, None, (16, 24, 24))


# --------------------------------------------------------------------------- errors name the key

@pytest.mark.parametrize("edit, key", [
    (lambda c: c.update(rope_parameters={"rope_type": "linear", "factor": 2.0}), "rope_parameters"),
    (lambda c: c["rope_scaling"].update(rope_theta=10000.0), "rope_theta"),
    (lambda c: c["rope_scaling"].update(type="yarn"), "type"),
    (lambda c: c["rope_scaling"].update(rope_type="su"), "su"),
    (lambda c: c["rope_scaling"].update(rope_type="xpos2"), "unknown rope_type"),
    (lambda c: c["rope_scaling"].pop("low_freq_factor"), "low_freq_factor"),
    (lambda c: c["rope_scaling"].update(high_freq_factor=0.5), "high_freq_factor"),
    (lambda c: c["rope_scaling"].update(bogus=1), "bogus"),
    (lambda c: c.update(partial_rotary_factor=0.2), "partial_rotary_factor"),  # int(128 * 0.2) = 25: odd
    (lambda c: c.update(partial_rotary_factor=1.5), "partial_rotary_factor"),
    (lambda c: c.update(original_max_position_embeddings=4096), "original_max_position_embeddings"),
    (lambda c: c.update(head_dim="128"), "head_dim"),
    (lambda c: [c.pop("hidden_size"), c.pop("num_attention_heads")], "head_dim"),
    (lambda c: c.update(rope_theta=-1.0), "rope_theta"),
    (lambda c: c.update(max_position_embeddings=0), "max_position_embeddings"),
    (lambda c: c.update(alibi=True, model_type="falcon"), "ALiBi"),
])
def test_contradictory_or_unsupported_rope_configs_name_the_key(edit, key):
    cfg = fixture("llama-3.1-8b")
    edit(cfg)
    with pytest.raises(ValueError, match=key):
        read_hf_config(cfg)


@pytest.mark.parametrize("name, edit, key", [
    ("phi-3-mini-128k-instruct", lambda c: c["rope_scaling"]["long_factor"].pop(), "long_factor"),
    ("phi-3-mini-128k-instruct", lambda c: c["rope_scaling"].update(original_max_position_embeddings=8192),
     "original_max_position_embeddings"),
    ("pythia-70m", lambda c: c.update(partial_rotary_factor=0.5), "partial_rotary_factor"),
    ("pythia-70m", lambda c: c.update(rope_theta=20000), "rope_theta"),
    ("deberta-v3-base", lambda c: c.update(pos_att_type="c2p|p2p"), "pos_att_type"),
    ("deberta-v3-base", lambda c: c.update(relative_attention=False), "relative_attention"),
    ("deberta-v3-base", lambda c: c.update(position_buckets=0), "position_buckets"),
    ("t5-small", lambda c: c.update(relative_attention_num_buckets=1), "relative_attention_num_buckets"),
    ("bloom-560m", lambda c: c.update(rope_theta=1e4), "contradictory"),
    ("gemma-3-270m-5x", lambda c: c["rope_parameters"].update(rope_type="default"), "mixes"),
])
def test_family_errors_name_the_key(name, edit, key):
    cfg = fixture(name)
    edit(cfg)
    with pytest.raises(ValueError, match=key):
        read_hf_config(cfg)


def test_unsupported_model_and_hostile_files(tmp_path):
    with pytest.raises(ValueError, match="'model_type' 'gpt2'"):
        read_hf_config({"model_type": "gpt2", "n_positions": 1024, "n_embd": 768, "n_head": 12})
    for content, message in ((b"[1, 2]", "JSON object"), (b"{\"a\": 1, \"a\": 2}", "duplicate key"),
                             (b"\xff", "not UTF-8"), (b"[" * 100000 + b"]" * 100000, "nested too deeply")):
        p = tmp_path / "c.json"
        p.write_bytes(content)
        with pytest.raises(ValueError, match=message):
            read_hf_config(p)
    with pytest.raises(ValueError, match="cannot read"):
        read_hf_config(tmp_path / "missing.json")
    (tmp_path / "link.json").symlink_to(FIXTURES / "t5-small.json")  # the Hub cache links snapshots to blobs
    assert read_hf_config(tmp_path / "link.json").family == "t5"
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "fifo.json").symlink_to(tmp_path / "fifo")
    with pytest.raises(ValueError, match="FIFO"):  # refused before opening: never blocks
        read_hf_config(tmp_path / "fifo.json")
    (tmp_path / "big.json").write_bytes(b" " * (hf_config.MAX_CONFIG_BYTES + 1))
    with pytest.raises(ValueError, match="big.json"):
        read_hf_config(tmp_path / "big.json")


def test_the_file_is_read_by_the_one_bounded_reader(monkeypatch):
    calls = []
    real = hf_config.read_bounded
    monkeypatch.setattr(hf_config, "read_bounded", lambda *a, **k: calls.append(a) or real(*a, **k))
    read_hf_config(FIXTURES / "t5-small.json")
    assert calls == [(str(FIXTURES / "t5-small.json"), hf_config.MAX_CONFIG_BYTES)]


# --------------------------------------------------------------------------- suites for one model

def test_model_cases_reach_the_context_and_cover_both_longrope_regimes():
    specs = model_cases.cases_for(read_hf_config(FIXTURES / "phi-3-mini-128k-instruct.json"))
    names = [s.name for s in specs]
    assert names == ["model.rope.inv_freq.short.seq4096", "model.rope.cos_sin.short.seq4096",
                     "model.rope.inv_freq.long.seq131072", "model.rope.cos_sin.long.seq131072",
                     "model.rope.apply.long.seq131072"]
    by = {s.name: s for s in specs}
    assert by["model.rope.cos_sin.long.seq131072"].inputs["positions"].max() == 131073
    assert by["model.rope.cos_sin.short.seq4096"].params["seq_len"] == 4096
    for s in specs:
        assert s.params["head_dim"] == 96 and s.params["rotary_dim"] == 96


def test_model_cases_are_deterministic():
    a = model_cases.cases_for(read_hf_config(FIXTURES / "llama-3.1-8b.json"))
    b = model_cases.cases_for(read_hf_config(FIXTURES / "llama-3.1-8b.json"))
    from posenc_np.golden import catalogue
    assert [fmt.canonical(catalogue.document_fields(s)) for s in a] == [
        fmt.canonical(catalogue.document_fields(s)) for s in b]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(p.stem for p in FIXTURES.glob("*.json")))
def test_generate_and_verify_a_models_suite(name, tmp_path, capsys):
    """``generate --hf-config`` then ``verify --hf-config`` passes; without the config every case is unknown."""
    config = str(FIXTURES / f"{name}.json")
    out = tmp_path / "suite"
    assert cli.main(["golden", "generate", "--hf-config", config, "--out", str(out), "--no-progress",
                     "--jobs", "1"]) == 0
    assert cli.main(["golden", "verify", str(out), "--hf-config", config]) == 0
    assert cli.main(["golden", "verify", str(out)]) == 1
    assert "verified with the same --hf-config" in capsys.readouterr().out


def test_a_models_suite_is_judged_by_the_config_given_to_verify(tmp_path):
    """Edits cannot pass, and the wrong model's config fails the suite."""
    out = tmp_path / "suite"
    llama = read_hf_config(FIXTURES / "llama-3.1-8b.json")
    specs = model_cases.cases_for(llama)
    runner.generate(out, specs=specs)
    qwen = {s.name: s for s in model_cases.cases_for(read_hf_config(FIXTURES / "qwen2.5-7b-instruct-yarn.json"))}
    rows = runner.verify(out, known=qwen.get)
    assert rows and all(not r.ok and "differs from" in r.problem for r in rows)
    assert all(r.ok for r in runner.verify(out, known={s.name: s for s in specs}.get, oracle=True))


def test_generate_refuses_an_unreadable_config(tmp_path, capsys):
    bad = tmp_path / "c.json"
    bad.write_text('{"model_type": "llama", "rope_theta": 1e4}')
    assert cli.main(["golden", "generate", "--hf-config", str(bad), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("posenc-np: error:") and "head_dim" in err and not (tmp_path / "o").exists()


def test_a_rope_config_without_a_context_is_read_but_has_no_suite():
    cfg = {k: v for k, v in fixture("pythia-70m").items() if k != "max_position_embeddings"}
    config = read_hf_config(cfg)
    assert config.context is None and config.rope[0].rotary_dim == 16
    with pytest.raises(ValueError, match="max_position_embeddings"):
        model_cases.cases_for(config)


# --------------------------------------------------------------------------- issue 25: families, bounds, unread keys

def test_deepseek_v3_rotates_qk_rope_head_dim_interleaved_with_yarn_mscale():
    c = read_hf_config(FIXTURES / "deepseek-v3-base.json")
    (r,) = c.rope
    assert (r.head_dim, r.rotary_dim, r.rope_type, c.rope_layout, c.context) == (64, 64, "yarn", "interleaved", 163840)
    inv, af = r.frequencies()
    assert inv.size == 32 and af == 1.0  # mscale == mscale_all_dim: g(40, 1) / g(40, 1)
    specs = model_cases.cases_for(c)
    assert all(s.params["head_dim"] == 64 and s.params.get("layout", "interleaved") == "interleaved" for s in specs)
    assert "apply_rotary_pos_emb_interleave" in specs[-1].reference_call
    assert read_hf_config({**fixture("deepseek-v3-base"), "rope_interleave": False}).rope_layout == "half"
    with pytest.raises(ValueError, match="rope_interleave"):
        read_hf_config({**fixture("deepseek-v3-base"), "model_type": "deepseek_v2", "rope_interleave": False})


def test_gpt_j_falcon_mpt_defaults():
    gptj = read_hf_config(FIXTURES / "gpt-j-6b.json")
    assert (gptj.context, gptj.rope_layout, gptj.rope[0].head_dim, gptj.rope[0].rotary_dim) == (2048, "interleaved",
                                                                                               256, 64)
    falcon = read_hf_config(FIXTURES / "falcon-7b.json")
    assert (falcon.context, falcon.rope[0].base, falcon.rope[0].head_dim, falcon.rope_layout) == (2048, 1e4, 64, "half")
    falcon_alibi = read_hf_config({**fixture("falcon-7b"), "alibi": True})
    assert falcon_alibi.alibi == {"num_heads": 71, "max_bias": 8.0, "form": "bloom"}
    mpt = read_hf_config(FIXTURES / "mpt-7b.json")
    assert (mpt.family, mpt.context, mpt.alibi["form"]) == ("alibi", 2048, "causal")
    no_flag = fixture("mpt-7b")
    del no_flag["attn_config"]["alibi"]
    assert read_hf_config(no_flag).family == "alibi"  # MptAttentionConfig's default
    with pytest.raises(ValueError, match="attn_config.alibi"):
        read_hf_config({**fixture("mpt-7b"), "attn_config": {"alibi": False}})


def test_qwen2_vl_mrope_section_gives_an_mrope_case():
    c = read_hf_config(FIXTURES / "qwen2-vl-7b-instruct.json")
    (r,) = c.rope
    assert (r.head_dim, r.base, r.mrope_section, c.context) == (128, 1e6, (16, 24, 24), 32768)
    (m,) = [s for s in model_cases.cases_for(c) if s.encoding == "rope.mrope"]
    pos = m.inputs["positions"]
    assert m.params["mrope_section"] == [16, 24, 24] and pos.shape[0] == 3 and pos.max() == 32768
    assert not np.array_equal(pos[1], pos[2])  # the image grid: h and w differ
    for section, key in (([16, 24, 20], "mrope_section"), ([16, 24], "mrope_section")):
        with pytest.raises(ValueError, match=key):
            read_hf_config({**fixture("qwen2-vl-7b-instruct"), "rope_scaling": {"type": "mrope",
                                                                                  "mrope_section": section}})
    with pytest.raises(ValueError, match="mrope_section"):  # M-RoPE with scaling is not covered: said, not dropped
        read_hf_config({**fixture("qwen2-vl-7b-instruct"), "rope_scaling": {
            "rope_type": "linear", "factor": 2.0, "mrope_section": [16, 24, 24]}})


def test_bloom_without_seq_length_takes_the_training_length_and_max_position_replaces_the_context():
    cfg = {k: v for k, v in fixture("bloom-560m").items() if k != "seq_length"}
    assert read_hf_config(cfg).context == 2048
    assert read_hf_config(cfg, max_position=4096).context == 4096
    llama = read_hf_config(FIXTURES / "llama-3.1-8b.json", max_position=1000)
    assert llama.context == llama.rope[0].context == 1000
    with pytest.raises(ValueError, match="max_position"):
        read_hf_config(cfg, max_position=1 << 40)
    with pytest.raises(ValueError, match="seq_length"):
        read_hf_config({"model_type": "falcon", "alibi": True, "n_head": 4} | {"model_type": "RefinedWeb"})


def test_generate_with_max_position(tmp_path):
    out = tmp_path / "s"
    args = ["--hf-config", str(FIXTURES / "bloom-560m.json"), "--max-position", "300"]
    assert cli.main(["golden", "generate", "--out", str(out), "--no-progress", "--jobs", "1", *args]) == 0
    assert cli.main(["golden", "verify", str(out), *args]) == 0
    assert cli.main(["golden", "verify", str(out), "--hf-config", str(FIXTURES / "bloom-560m.json")]) == 1


@pytest.mark.parametrize("edit, key", [
    (lambda c: c.update(n_head=10**6), "num_attention_heads"),
    (lambda c: c.update(n_head=True), "num_attention_heads"),
    (lambda c: c.update(seq_length=1 << 30), "seq_length"),
])
def test_sizes_are_bounded(edit, key):
    cfg = fixture("bloom-560m")
    edit(cfg)
    with pytest.raises(ValueError, match=key):
        read_hf_config(cfg)


@pytest.mark.parametrize("edit, key", [
    (lambda c: c.update(head_dim=1 << 20), "head_dim"),
    (lambda c: c.update(hidden_size=1 << 40), "hidden_size"),
    (lambda c: c.update(max_position_embeddings=1 << 40), "max_position_embeddings"),
    (lambda c: c["rope_scaling"].update(factor=1e9), "factor"),
    (lambda c: c.update(no_rope_layers=[1, 0, 1]), "no_rope_layers"),
    (lambda c: c.update(position_embedding_type="absolute"), "position_embedding_type"),
    (lambda c: c.update(rope_type="linear"), "rope_type"),
    (lambda c: c.update(attn_config={"rope": True}), "attn_config.rope"),
])
def test_large_sizes_and_unread_positional_keys_name_the_key(edit, key):
    cfg = fixture("llama-3.1-8b")
    edit(cfg)
    with pytest.raises(ValueError, match=key):
        read_hf_config(cfg)


def test_a_huge_head_count_fails_at_once(tmp_path, capsys):
    p = tmp_path / "c.json"
    p.write_text('{"model_type": "bloom", "n_head": 1000000, "seq_length": 2048}')  # 70 bytes, issue 25
    assert cli.main(["golden", "generate", "--hf-config", str(p), "--out", str(tmp_path / "o")]) == 2
    assert "num_attention_heads" in capsys.readouterr().err
