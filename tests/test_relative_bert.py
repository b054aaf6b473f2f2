"""BERT relative_key / relative_key_query: sign, index, Hugging Face's scaling, hook vs. an
explicit loop, gradchecks (including the distance-table scatter-add), errors, golden cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from posenc_np import attention
from posenc_np.relative import BertRelativeKey, bert_relative_distance, bert_relative_scores, \
    bert_relative_scores_backward, shaw_relative_index, t5_relative_positions
from posenc_np.testing import gradcheck, gradcheck_hook



def hf_style_attention(q, k, v, table, max_pos, mode, causal=False):
    """Explicit loops in Hugging Face's order: (q.k + q.r [+ k.r]) / sqrt(d), then softmax.

    r = table[(query position - key position) + P - 1], query i at i + k_len - q_len.
    """
    heads, q_len, d = q.shape[-3:]
    k_len = k.shape[-2]
    out = np.zeros(q.shape[:-1] + (v.shape[-1],))
    for lead in np.ndindex(*q.shape[:-3]):
        for h in range(heads):
            for i in range(q_len):
                pos = i + k_len - q_len
                keep = [j for j in range(k_len) if not causal or j <= pos]
                s = []
                for j in keep:
                    r = table[pos - j + max_pos - 1]
                    qi, kj = q[lead + (h, i)], k[lead + (h, j)]
                    raw = sum(qi[c] * kj[c] for c in range(d)) + sum(qi[c] * r[c] for c in range(d))
                    if mode == "relative_key_query":
                        raw += sum(kj[c] * r[c] for c in range(d))
                    s.append(raw / math.sqrt(d))
                m = max(s)
                w = [math.exp(x - m) for x in s]
                tot = sum(w)
                for j, wj in zip(keep, w):
                    out[lead + (h, i)] += wj / tot * v[lead + (h, j)]
    return out


# --------------------------------------------------------------------------- distance and sign

def test_distance_query_minus_key():
    np.testing.assert_array_equal(bert_relative_distance(3, 3), [[0, -1, -2], [1, 0, -1], [2, 1, 0]])
    # cached decoding (HF use_cache): the single query sits at key_length - 1
    np.testing.assert_array_equal(bert_relative_distance(1, 4), [[3, 2, 1, 0]])


@given(st.integers(0, 8), st.integers(0, 8))
def test_sign_opposite_to_t5_and_shaw(q_len, k_len):
    dist = bert_relative_distance(q_len, k_len)
    np.testing.assert_array_equal(dist, -t5_relative_positions(q_len, k_len))
    big = max(q_len, k_len) + 1  # no clipping: Shaw's index minus K is key - query
    np.testing.assert_array_equal(dist, -(shaw_relative_index(q_len, k_len, big) - big))
    assert dist.dtype == np.int64


# --------------------------------------------------------------------------- scores

@pytest.mark.parametrize("mode", ["relative_key", "relative_key_query"])
def test_scores_match_loop_same_row_for_both_terms(mode):
    rng = np.random.default_rng(0)
    max_pos, d = 5, 3
    q, k = rng.standard_normal((2, 4, d)), rng.standard_normal((2, 5, d))
    table = rng.standard_normal((2 * max_pos - 1, d))
    got = bert_relative_scores(q, k, table, mode=mode, scale=0.5)
    for b in range(2):
        for i in range(4):
            for j in range(5):
                r = table[(i + 1 - j) + max_pos - 1]
                expected = q[b, i] @ r + (k[b, j] @ r if mode == "relative_key_query" else 0.0)
                assert math.isclose(got[b, i, j], 0.5 * expected, rel_tol=1e-13, abs_tol=1e-14)


def test_relative_key_query_adds_the_key_term():
    rng = np.random.default_rng(1)
    q, k, table = rng.standard_normal((3, 4)), rng.standard_normal((3, 4)), rng.standard_normal((7, 4))
    diff = bert_relative_scores(q, k, table, mode="relative_key_query") - bert_relative_scores(q, k, table)
    key_only = bert_relative_scores(k, q, table[::-1])  # k_j . W[(j - i) + P - 1] read with swapped roles
    np.testing.assert_allclose(diff, key_only.T, rtol=1e-13, atol=1e-14)
    assert not np.allclose(diff, bert_relative_scores(k, q, table).T)  # the key term is not indexed by -dist


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("mode", ["relative_key", "relative_key_query"])
@pytest.mark.parametrize("q_len", [5, 1])
def test_hook_matches_hf_order_of_operations(causal, mode, q_len):
    rng = np.random.default_rng(2)
    q, k = rng.standard_normal((2, 2, q_len, 4)), rng.standard_normal((2, 2, 5, 4))
    v = rng.standard_normal((2, 2, 5, 3))
    layer = BertRelativeKey(6, 4, mode=mode, init_std=1.0, seed=3)
    out, _ = attention.forward(q, k, v, causal=causal, hooks=[layer])  # default scale 1/sqrt(d), as HF
    np.testing.assert_allclose(out, hf_style_attention(q, k, v, layer.params["weight"], 6, mode, causal),
                               rtol=1e-12, atol=1e-12)


def test_float32_in_float32_out():
    q = np.ones((2, 3), np.float32)
    assert bert_relative_scores(q, q, np.ones((5, 3), np.float32), mode="relative_key_query").dtype == np.float32
    layer = BertRelativeKey(4, 3, seed=0)
    out, cache = attention.forward(q[None], q[None], q[None], hooks=[layer])
    assert out.dtype == np.float32 and attention.backward(np.ones_like(out), cache)["k"].dtype == np.float32


# --------------------------------------------------------------------------- gradients

@pytest.mark.parametrize("mode", ["relative_key", "relative_key_query"])
def test_gradcheck_plain(mode):
    rng = np.random.default_rng(4)
    inputs = {"q": rng.standard_normal((2, 3, 4)), "k": rng.standard_normal((2, 5, 4)),
              "table": rng.standard_normal((9, 4))}

    def bwd(g, q, k, table):
        dq, dk, dt = bert_relative_scores_backward(g, q, k, table, mode=mode, scale=0.3)
        if mode == "relative_key":
            assert dk is None
            dk = np.zeros_like(k)  # k enters only through its length: the gradcheck confirms 0
        return {"q": dq, "k": dk, "table": dt}

    gradcheck(lambda q, k, table: bert_relative_scores(q, k, table, mode=mode, scale=0.3), bwd, inputs)


def test_table_gradient_is_scatter_add():
    # relative_key, q = 1, dscores = 1: dW[row] counts the pairs at that distance (5x5 grid: 5 - |dist|)
    _, _, dt = bert_relative_scores_backward(np.ones((5, 5)), np.ones((5, 1)), np.ones((5, 1)), np.zeros((9, 1)))
    np.testing.assert_array_equal(dt[:, 0], [1, 2, 3, 4, 5, 4, 3, 2, 1])


@pytest.mark.parametrize("mode,causal,q_len", [("relative_key", False, 4), ("relative_key", True, 2),
                                               ("relative_key_query", False, 4), ("relative_key_query", True, 4)])
def test_gradcheck_through_attention(mode, causal, q_len):
    rng = np.random.default_rng(5)
    layer = BertRelativeKey(5, 3, mode=mode, init_std=0.5, seed=6)
    gradcheck_hook(layer, rng.standard_normal((2, 2, q_len, 3)), rng.standard_normal((2, 2, 5, 3)),
                   rng.standard_normal((2, 2, 5, 2)), causal=causal, max_entries=40)


# --------------------------------------------------------------------------- errors

def test_errors():
    q = np.ones((2, 4))
    with pytest.raises(ValueError, match="cannot extrapolate"):
        bert_relative_scores(np.ones((3, 4)), np.ones((4, 4)), np.ones((5, 4)))  # P = 3 < k_len = 4
    with pytest.raises(ValueError, match="mode"):
        bert_relative_scores(q, q, np.ones((3, 4)), mode="relative_query")
    with pytest.raises(ValueError, match="odd row count"):
        bert_relative_scores(q, q, np.ones((4, 4)))
    with pytest.raises(ValueError, match="d=4"):
        bert_relative_scores(q, q, np.ones((3, 2)))
    with pytest.raises(ValueError, match="dscores must have shape"):
        bert_relative_scores_backward(np.ones((2, 3)), q, q, np.ones((3, 4)))
    for bad in (0, -3):
        with pytest.raises(ValueError, match="max_position_embeddings"):
            BertRelativeKey(bad, 4)
    with pytest.raises(ValueError, match="head_dim"):
        BertRelativeKey(4, 0)
    layer = BertRelativeKey(3, 2)
    x = np.ones((1, 4, 2))
    with pytest.raises(ValueError, match="max_position_embeddings=3"):
        attention.forward(x, x, x, hooks=[layer])


# --------------------------------------------------------------------------- golden cases

def test_golden_bert_cases_pass(tmp_path):
    from posenc_np.golden import runner

    rows = runner.generate(tmp_path, formats=("npz",), only=["relative.bert*"])
    assert len(rows) == 4 and all(r.ok for r in rows), runner.format_table(rows)
    assert {r.case.split(".")[2] for r in rows} == {"relative_key", "relative_key_query"}
