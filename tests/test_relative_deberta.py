"""DeBERTa: sign convention (query - key vs T5's key - query), log buckets against exact
rational arithmetic and the mpmath oracle (boundaries, exact ties), the disentangled hook
against a naive loop and a NumPy transcription of Hugging Face's gather, gradchecks through
attention, errors, and the golden cases."""

import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from posenc_np import attention
from posenc_np.golden import catalogue, runner
from posenc_np.golden import oracle_relative_xl as oracle
from posenc_np.golden.spec import ORACLE_DIGITS
from posenc_np.relative import (
    DebertaDisentangled,
    deberta_log_bucket_position,
    deberta_project_relative_embeddings,
    deberta_relative_positions,
    deberta_scale,
)
from posenc_np.testing import gradcheck_hook


def exact_bucket(rel, b, m):
    """The log bucket with the ceiling decided by rational arithmetic only (no logarithms):
    ceil(v) is the least n >= 0 with (a/mid)^(mid-1) <= ((M-1)/mid)^n."""
    mid = b // 2
    a = mid - 1 if abs(rel) < mid else abs(rel)
    if a <= mid:
        return rel
    lhs, c, n = Fraction(a, mid) ** (mid - 1), Fraction(m - 1, mid), 0
    while lhs > c ** n:
        n += 1
    return (1 if rel > 0 else -1) * (n + mid)


# --------------------------------------------------------------------------- sign and alignment

def test_sign_is_query_minus_key_opposite_to_t5():
    rel = deberta_relative_positions(4, 4)
    i, j = np.indices((4, 4))
    np.testing.assert_array_equal(rel, i - j)               # DeBERTa: query - key
    t5_rel = j - i                                          # T5 / Shaw (CONVENTIONS.md): key - query
    np.testing.assert_array_equal(rel, -t5_rel)
    assert rel[3, 0] == 3 and rel[0, 3] == -3                # a later query sees earlier keys at positive distance


def test_bottom_right_alignment_and_hf_top_left():
    rel = deberta_relative_positions(2, 5)
    np.testing.assert_array_equal(rel, [[3, 2, 1, 0, -1], [4, 3, 2, 1, 0]])   # queries at positions 3, 4
    np.testing.assert_array_equal(deberta_relative_positions(2, 5, query_offset=0),
                                  [[0, -1, -2, -3, -4], [1, 0, -1, -2, -3]])
    # the last query's own key is at distance 0, as the attention core's causal mask assumes
    assert np.all(np.diag(rel[:, 3:]) == 0) and np.array_equal(rel >= 0, attention.causal_mask(2, 5))


def test_relative_positions_bucketed():
    rel = deberta_relative_positions(3, 600, bucket_size=256, max_position=512)
    raw = deberta_relative_positions(3, 600)
    np.testing.assert_array_equal(rel, deberta_log_bucket_position(raw, 256, 512))
    assert rel.dtype == np.int64


# --------------------------------------------------------------------------- log buckets

def test_log_bucket_published_structure_b256_m512():
    r = np.array([0, 1, -1, 127, 128, -128, 129, 130, 131, 511, -511, 512])
    got = deberta_log_bucket_position(r, 256, 512)
    # identity for |r| <= mid = 128; 129 -> 128 + ceil(127 ln(129/128)/ln(511/128)) = 128 + ceil(0.715) = 129;
    # 131 -> 128 + ceil(2.13) = 131; |r| = M - 1 = 511 -> 128 + 127 = 255 exactly; 512 -> 256.
    np.testing.assert_array_equal(got, [0, 1, -1, 127, 128, -128, 129, 130, 131, 255, -255, 256])


@pytest.mark.slow
def test_log_bucket_matches_rational_arithmetic_b256_m512():
    r = np.arange(-1100, 1101)
    np.testing.assert_array_equal(deberta_log_bucket_position(r, 256, 512), [exact_bucket(int(x), 256, 512) for x in r])


@pytest.mark.parametrize("b,m,a,value", [(18, 26, 15, 4), (4, 11, 250, 3), (6, 16, 375, 6), (10, 26, 625, 12),
                                         (8, 21, 500, 9)])
def test_log_bucket_exact_ties(b, m, a, value):
    """Configurations where (mid-1) ln(a/mid)/ln((M-1)/mid) is exactly an integer (checked
    rationally below); a plain float64 evaluation rounds it up and lands one bucket too high."""
    mid = b // 2
    assert Fraction(a, mid) ** (mid - 1) == Fraction(m - 1, mid) ** value
    got = deberta_log_bucket_position(np.array([a - 1, a, a + 1, -a]), b, m)
    assert got[1] == value + mid and got[3] == -(value + mid)
    np.testing.assert_array_equal(got, [exact_bucket(x, b, m) for x in (a - 1, a, a + 1, -a)])


def test_log_bucket_agrees_with_mpmath_oracle():
    r = np.concatenate([np.arange(-60, 61), [-100000, 4095, 100000]])
    for b, m in ((18, 26), (8, 12), (2, 4), (256, 512)):
        with mpmath.workdps(ORACLE_DIGITS):
            expected = oracle.deberta_log_bucket({"bucket_size": b, "max_position": m}, {"relative_pos": r})["bucket"]
        np.testing.assert_array_equal(deberta_log_bucket_position(r, b, m), expected.astype(np.int64))


@given(st.integers(2, 64), st.integers(0, 200), st.lists(st.integers(-5000, 5000), min_size=1, max_size=30))
def test_log_bucket_properties(b, extra, rels):
    mid = b // 2
    m = mid + 2 + extra
    r = np.array(sorted(rels))
    got = deberta_log_bucket_position(r, b, m)
    np.testing.assert_array_equal(deberta_log_bucket_position(-r, b, m), -got)       # odd
    assert np.all(np.diff(got) >= 0)                                                   # monotone
    small = np.abs(r) <= mid
    np.testing.assert_array_equal(got[small], r[small])                               # identity near 0
    inside = np.abs(r) <= m - 1
    assert np.all(np.abs(got[inside]) <= 2 * mid - 1)                                 # table range
    assert deberta_log_bucket_position(np.array([m - 1]), b, m)[0] == (m - 1 if m - 1 <= mid else 2 * mid - 1)
    np.testing.assert_array_equal(got, [exact_bucket(int(x), b, m) for x in r])


# --------------------------------------------------------------------------- the hook

def naive_deberta_logits(q, k, kr, qr, rel, span, scale, p2c_sign=-1):
    """He et al. 2021 eq. 4 per pair: s [q_i.k_j + q_i.K^r[d(i,j)] + k_j.Q^r[d(j,i)]]."""
    B, H, Q, _ = q.shape
    K = k.shape[-2]
    out = np.zeros((B, H, Q, K))
    for b in range(B):
        for h in range(H):
            for i in range(Q):
                for j in range(K):
                    total = np.dot(q[b, h, i], k[b, h, j])
                    if kr is not None:
                        total += np.dot(q[b, h, i], kr[h, min(max(rel[i, j] + span, 0), 2 * span - 1)])
                    if qr is not None:
                        total += np.dot(k[b, h, j], qr[h, min(max(p2c_sign * rel[i, j] + span, 0), 2 * span - 1)])
                    out[b, h, i, j] = scale * total
    return out


CONFIGS = [  # q_len, k_len, position_buckets, max_relative_positions, pos_att_type
    (4, 4, -1, 2, ("c2p", "p2c")),
    (3, 7, -1, 3, ("c2p", "p2c")),
    (3, 9, 4, 6, ("c2p", "p2c")),
    (5, 5, 4, 6, "p2c|c2p"),
    (2, 6, -1, 8, ("c2p",)),
    (2, 6, -1, 8, ("p2c",)),
]


@pytest.mark.parametrize("q_len,k_len,pb,mrp,types", CONFIGS)
def test_hook_matches_naive_loop(q_len, k_len, pb, mrp, types):
    rng = np.random.default_rng(q_len * 100 + k_len)
    hook = DebertaDisentangled(2, 3, position_buckets=pb, max_relative_positions=mrp, pos_att_type=types, seed=4,
                               init_std=1.0)
    q, k = rng.standard_normal((2, 2, q_len, 3)), rng.standard_normal((2, 2, k_len, 3))
    value = rng.standard_normal((2, 2, k_len, 2))
    scale = deberta_scale(3, types)
    raw = (np.arange(q_len) + k_len - q_len)[:, None] - np.arange(k_len)[None, :]
    rel = raw if pb < 0 else np.vectorize(lambda x: exact_bucket(int(x), pb, mrp))(raw)
    span = pb if pb > 0 else mrp
    expected = naive_deberta_logits(q, k, hook.params.get("pos_key"), hook.params.get("pos_query"), rel, span, scale)
    term, _ = hook.logits(q, k, scale)
    np.testing.assert_allclose(scale * (q @ np.swapaxes(k, -1, -2)) + term, expected, rtol=1e-12, atol=1e-12)
    out, _ = attention.forward(q, k, value, scale=scale, hooks=[hook])
    p = np.exp(expected - expected.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(out, (p / p.sum(axis=-1, keepdims=True)) @ value, rtol=1e-12, atol=1e-12)


def hf_p2c_transcription(k, qr, relative_pos, span):
    """NumPy transcription of HF DisentangledSelfAttention.disentangled_attention_bias, p2c branch,
    q_len == k_len: p2c_att = bmm(key, pos_query^T); p2c_pos = clamp(-r_pos + span, 0, 2span-1);
    gather(p2c_att, dim=-1, index=p2c_pos).transpose(-1, -2). (torch.gather on the last axis is
    np.take_along_axis.)"""
    p2c_att = k @ np.swapaxes(qr, -1, -2)                                  # (B, H, K, 2span), rows are keys
    p2c_pos = np.clip(-relative_pos + span, 0, 2 * span - 1)
    idx = np.broadcast_to(p2c_pos, p2c_att.shape[:-1] + (relative_pos.shape[-1],))
    return np.swapaxes(np.take_along_axis(p2c_att, idx, axis=-1), -1, -2)


def hf_c2p_transcription(q, kr, relative_pos, span):
    c2p_att = q @ np.swapaxes(kr, -1, -2)
    idx = np.broadcast_to(np.clip(relative_pos + span, 0, 2 * span - 1), c2p_att.shape[:-1] + (relative_pos.shape[-1],))
    return np.take_along_axis(c2p_att, idx, axis=-1)


@pytest.mark.parametrize("pb,mrp", [(-1, 3), (4, 6)])
def test_hf_p2c_index_is_the_c2p_index_not_the_papers(pb, mrp):
    rng = np.random.default_rng(21)
    n = 6
    q, k = rng.standard_normal((1, 2, n, 3)), rng.standard_normal((1, 2, n, 3))
    kw = dict(position_buckets=pb, max_relative_positions=mrp, seed=5, init_std=1.0)
    hf, paper = DebertaDisentangled(2, 3, p2c_index="hf", **kw), DebertaDisentangled(2, 3, **kw)
    span = hf.span
    # HF's build_relative_position: q_ids[:, None] - k_ids[None, :] (then log buckets)
    rel = np.arange(n)[:, None] - np.arange(n)[None, :]
    if pb > 0:
        rel = np.vectorize(lambda x: exact_bucket(int(x), pb, mrp))(rel)
    hf_p2c = hf_p2c_transcription(k, hf.params["pos_query"], rel, span)
    hf_c2p = hf_c2p_transcription(q, hf.params["pos_key"], rel, span)
    term, _ = hf.logits(q, k, 1.0)
    np.testing.assert_allclose(term, hf_c2p + hf_p2c, rtol=1e-13, atol=1e-13)
    # the transcription's effective p2c row is clamp(rel + span): delta(i, j), the c2p index
    effective = naive_deberta_logits(q, k, None, hf.params["pos_query"], rel, span, 1.0, p2c_sign=+1)
    np.testing.assert_allclose(hf_p2c, effective - q @ np.swapaxes(k, -1, -2), rtol=1e-12, atol=1e-12)
    # and it is not the paper's delta(j, i)
    assert not np.allclose(paper.logits(q, k, 1.0)[0], term)


def test_hf_index_rejects_unequal_lengths():
    hook = DebertaDisentangled(1, 2, max_relative_positions=4, p2c_index="hf")
    x = np.zeros((1, 1, 2, 2))
    with pytest.raises(ValueError, match="p2c_index='hf' needs q_len == k_len"):
        hook.logits(x, np.zeros((1, 1, 3, 2)), 1.0)


@pytest.mark.parametrize("q_len,k_len,pb,mrp,types,p2c", [
    (3, 7, 4, 6, ("c2p", "p2c"), "paper"),
    (4, 4, -1, 2, ("c2p", "p2c"), "hf"),
    (2, 5, -1, 3, ("p2c",), "paper"),
])
def test_gradcheck_through_attention(q_len, k_len, pb, mrp, types, p2c):
    rng = np.random.default_rng(3)
    hook = DebertaDisentangled(2, 3, position_buckets=pb, max_relative_positions=mrp, pos_att_type=types,
                               p2c_index=p2c, seed=1)
    for name in hook.params:  # random tables instead of the small initialisation
        hook.params[name] = rng.standard_normal(hook.params[name].shape)
    mask = rng.random((q_len, k_len)) < 0.8
    mask[:, 0] = True
    q, k, v = (rng.standard_normal((2, 2, n, d)) for n, d in ((q_len, 3), (k_len, 3), (k_len, 2)))
    gradcheck_hook(hook, q, k, v, scale=deberta_scale(3, types), mask=mask)


def test_table_gradient_accumulates_clamped_rows():
    """With span 1, every |rel| >= 1 lands on a clamped row: the gradient of row 0 collects all i < j pairs."""
    hook = DebertaDisentangled(1, 1, max_relative_positions=1, pos_att_type=("c2p",))
    q, k = np.ones((1, 1, 3, 1)), np.ones((1, 1, 3, 1))
    _, cache = hook.logits(q, k, 1.0)
    hook.logits_backward(np.ones((1, 1, 3, 3)), cache)
    # rel = i - j in {-2..2}; index clamp(rel + 1, 0, 1): rel <= -1 -> 0 (3 pairs), rel >= 0 -> 1 (6 pairs)
    np.testing.assert_array_equal(hook.grads["pos_key"][0, :, 0], [3.0, 6.0])


def test_scale_and_projection_helper():
    assert deberta_scale(64) == 1 / math.sqrt(192)
    assert deberta_scale(64, "c2p") == 1 / math.sqrt(128)
    assert deberta_scale(64, ()) == 1 / 8
    rng = np.random.default_rng(0)
    e, w, bias = rng.standard_normal((6, 5)), rng.standard_normal((4, 5)), rng.standard_normal(4)
    t = deberta_project_relative_embeddings(e, w, bias, num_heads=2)
    assert t.shape == (2, 6, 2)
    for h in range(2):
        for r in range(6):
            for c in range(2):
                assert math.isclose(t[h, r, c], float(e[r] @ w[h * 2 + c] + bias[h * 2 + c]), rel_tol=1e-12)


def test_hook_params_and_config_string():
    hook = DebertaDisentangled(3, 4, position_buckets=256, max_relative_positions=512, pos_att_type="p2c|c2p", seed=0)
    assert hook.span == 256 and hook.pos_att_type == ("p2c", "c2p")
    assert hook.params["pos_key"].shape == (3, 512, 4) and hook.params["pos_query"].shape == (3, 512, 4)
    assert set(DebertaDisentangled(1, 2, pos_att_type=("c2p",)).params) == {"pos_key"}
    assert DebertaDisentangled(1, 2).span == 512


# --------------------------------------------------------------------------- errors

def test_errors():
    with pytest.raises(TypeError, match="relative_pos must be an integer array, got dtype float64"):
        deberta_log_bucket_position(np.array([1.0, 2.0]), 256, 512)
    with pytest.raises(ValueError, match="bucket_size must be an integer >= 2, got 1"):
        deberta_log_bucket_position(np.array([1]), 1, 512)
    with pytest.raises(ValueError, match=r"max_position must be > bucket_size // 2 \+ 1 = 129.*got max_position=129"):
        deberta_log_bucket_position(np.array([1]), 256, 129)
    with pytest.raises(ValueError, match=r"\|relative_pos\| <= 2\*\*53"):
        deberta_log_bucket_position(np.array([2 ** 60]), 256, 512)
    with pytest.raises(ValueError, match="bucket_size=256 needs max_position"):
        deberta_relative_positions(3, 3, bucket_size=256)
    with pytest.raises(ValueError, match="bucket_size must be -1 \\(no buckets\\) or >= 2, got 0"):
        deberta_relative_positions(3, 3, bucket_size=0, max_position=8)
    with pytest.raises(ValueError, match="q_len must be an integer >= 0, got -1"):
        deberta_relative_positions(-1, 3)
    with pytest.raises(ValueError, match="'p2p' is not supported"):
        DebertaDisentangled(2, 4, pos_att_type="c2p|p2p")
    with pytest.raises(ValueError, match="pos_att_type lists a term twice"):
        DebertaDisentangled(2, 4, pos_att_type=("c2p", "c2p"))
    with pytest.raises(ValueError, match="pos_att_type entry must be one of"):
        deberta_scale(4, ("c2q",))
    with pytest.raises(ValueError, match="p2c_index must be one of"):
        DebertaDisentangled(2, 4, p2c_index="microsoft")
    with pytest.raises(ValueError, match="position_buckets must be -1 \\(no buckets\\) or >= 2, got 0"):
        DebertaDisentangled(2, 4, position_buckets=0)
    with pytest.raises(ValueError, match="max_position must be > bucket_size // 2"):
        DebertaDisentangled(2, 4, position_buckets=256, max_relative_positions=100)
    hook = DebertaDisentangled(2, 4, max_relative_positions=4)
    x = np.zeros((1, 2, 3, 5))
    with pytest.raises(ValueError, match=r"q and k must be \(\.\.\., num_heads=2, len, head_dim=4\) .*got q \(1, 2, 3, 5\)"):
        attention.forward(x, x, x, hooks=[hook])
    with pytest.raises(ValueError, match="weight \\(num_heads\\*d, hidden\\)"):
        deberta_project_relative_embeddings(np.zeros((4, 3)), np.zeros((5, 3)), None, num_heads=2)


# --------------------------------------------------------------------------- golden

def test_golden_cases_against_oracle():
    specs = catalogue.cases(["relative.deberta.*"])
    assert len(specs) == 17
    for spec in specs:
        expected = runner.oracle_outputs(spec)
        actual = runner.evaluate_library(spec.encoding, spec.params, spec.inputs)
        _, _, _, problems = runner.compare(actual, expected, spec.tolerance)
        assert not problems, (spec.name, problems)
