"""Shaw et al. (2018) relative keys and values: index convention, hook vs. an explicit loop,
gradchecks (including the scatter-adds into the distance tables), errors, golden cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

from posenc_np import attention
from posenc_np.relative import ShawRelativeAttention, shaw_logits, shaw_logits_backward, shaw_relative_index, \
    shaw_values, shaw_values_backward
from posenc_np.testing import gradcheck, gradcheck_hook

from _support import naive_attention



def naive_shaw_attention(q, k, v, wk, wv, kmax, scale, causal):
    """Shaw et al. eqs. (3)-(5): the logits e_ij = s q_i . (k_j + wK[idx_ij]) with explicit loops (query i at
    position i + k_len - q_len), then the loop-by-loop attention over v + wV[idx_ij]: the probabilities are the
    attention of the one-hot values, so z_i = sum_j p_ij v_j + sum_j p_ij wV[idx_ij]."""
    heads, q_len, d = q.shape[-3:]
    k_len = k.shape[-2]
    rows = np.array([[min(max(j - (i + k_len - q_len), -kmax), kmax) + kmax for j in range(k_len)]
                     for i in range(q_len)], dtype=np.int64).reshape(q_len, k_len)
    e = np.zeros(q.shape[:-1] + (k_len,))
    for lead in np.ndindex(*q.shape[:-2]):
        for i in range(q_len):
            for j in range(k_len):
                e[lead + (i, j)] = scale * sum(q[lead + (i, c)] * (k[lead + (j, c)] + wk[rows[i, j], c])
                                               for c in range(d))
    probs = naive_attention(q, k, np.broadcast_to(np.eye(k_len), k.shape[:-1] + (k_len,)), logits=e, causal=causal)
    return probs @ v + (0 if wv is None else np.einsum("...ij,ijd->...id", probs, wv[rows]))


# --------------------------------------------------------------------------- index

def test_index_formula_and_clipping():
    # key - query, clipped to [-2, 2], + 2
    np.testing.assert_array_equal(shaw_relative_index(4, 4, 2),
                                  [[2, 3, 4, 4], [1, 2, 3, 4], [0, 1, 2, 3], [0, 0, 1, 2]])
    # q_len < k_len: queries are the last positions (tensor2tensor uses range_k[-length_q:])
    np.testing.assert_array_equal(shaw_relative_index(2, 5, 1), [[0, 0, 0, 1, 2], [0, 0, 0, 0, 1]])
    np.testing.assert_array_equal(shaw_relative_index(3, 3, 0), np.zeros((3, 3)))
    assert shaw_relative_index(3, 3, 1).dtype == np.int64


@given(st.integers(0, 9), st.integers(0, 9), st.integers(0, 5))
def test_index_range_and_sign(q_len, k_len, kmax):
    idx = shaw_relative_index(q_len, k_len, kmax)
    assert idx.shape == (q_len, k_len)
    if idx.size:
        assert idx.min() >= 0 and idx.max() <= 2 * kmax
        rel = np.arange(k_len)[None, :] - (np.arange(q_len)[:, None] + k_len - q_len)
        np.testing.assert_array_equal(idx, np.clip(rel, -kmax, kmax) + kmax)
        # alignment as the causal mask: it keeps exactly the keys with key - query <= 0
        np.testing.assert_array_equal(rel <= 0, attention.causal_mask(q_len, k_len))
        if kmax >= 1:  # sign key - query: a key after the query has an index above K
            np.testing.assert_array_equal(idx > kmax, rel > 0)


# --------------------------------------------------------------------------- plain functions

def test_logits_and_values_match_loops():
    rng = np.random.default_rng(0)
    q, wk = rng.standard_normal((2, 3, 4)), rng.standard_normal((5, 4))
    probs, wv = rng.random((2, 3, 6)), rng.standard_normal((5, 2))
    got_l = shaw_logits(q, wk, 6, scale=0.25)
    got_v = shaw_values(probs, wv)
    for b in range(2):
        for i in range(3):
            for j in range(6):
                r = min(max(j - (i + 3), -2), 2) + 2
                assert math.isclose(got_l[b, i, j], 0.25 * float(q[b, i] @ wk[r]), rel_tol=1e-14, abs_tol=1e-15)
            expected = sum(probs[b, i, j] * wv[min(max(j - (i + 3), -2), 2) + 2] for j in range(6))
            np.testing.assert_allclose(got_v[b, i], expected, rtol=1e-14, atol=1e-15)


def test_float32_in_float32_out():
    q, wk = np.ones((2, 3), np.float32), np.ones((3, 3), np.float32)
    assert shaw_logits(q, wk, 3).dtype == np.float32
    assert shaw_values(np.ones((2, 3), np.float32), wk).dtype == np.float32


def test_gradcheck_plain_logits():
    rng = np.random.default_rng(1)
    gradcheck(lambda q, table: shaw_logits(q, table, 7, scale=0.5),
              lambda g, q, table: dict(zip(("q", "table"), shaw_logits_backward(g, q, table, scale=0.5))),
              {"q": rng.standard_normal((2, 2, 4, 3)), "table": rng.standard_normal((5, 3))})


def test_gradcheck_plain_values():
    rng = np.random.default_rng(2)
    gradcheck(lambda probs, table: shaw_values(probs, table),
              lambda g, probs, table: dict(zip(("probs", "table"), shaw_values_backward(g, probs, table))),
              {"probs": rng.random((2, 2, 4, 7)), "table": rng.standard_normal((7, 2))})


def test_table_gradient_is_scatter_add_over_clipped_distances():
    # Every pair farther than K apart lands in row 0 or 2K: those rows accumulate many terms.
    q, g = np.ones((1, 5, 1)), np.ones((1, 5, 5))
    _, dtable = shaw_logits_backward(g, q, np.zeros((3, 1)), scale=1.0)
    # distances j - i over a 5x5 grid: <= -1 occurs 10 times, 0 five times, >= 1 ten times
    np.testing.assert_array_equal(dtable[:, 0], [10, 5, 10])


# --------------------------------------------------------------------------- the attention hook

@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("use_values", [True, False])
def test_hook_matches_naive_attention(causal, use_values):
    rng = np.random.default_rng(3)
    q, k, v = rng.standard_normal((2, 2, 3, 4)), rng.standard_normal((2, 2, 7, 4)), rng.standard_normal((2, 2, 7, 3))
    layer = ShawRelativeAttention(4, 2, value_dim=3, use_values=use_values, init_std=1.0, seed=4)
    out, _ = attention.forward(q, k, v, causal=causal, hooks=[layer])
    expected = naive_shaw_attention(q, k, v, layer.params["key"], layer.params.get("value"), 2, 0.5, causal)
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)
    assert set(layer.params) == ({"key", "value"} if use_values else {"key"})


def test_tables_shared_across_heads():
    rng = np.random.default_rng(5)
    layer = ShawRelativeAttention(3, 1, init_std=1.0, seed=6)
    q, k, v = rng.standard_normal((1, 4, 3)), rng.standard_normal((1, 4, 3)), rng.standard_normal((1, 4, 3))
    single, _ = attention.forward(q, k, v, hooks=[layer])
    # the same head copied into three heads gives three identical heads
    many, _ = attention.forward(np.repeat(q, 3, 0), np.repeat(k, 3, 0), np.repeat(v, 3, 0), hooks=[layer])
    for h in range(3):
        np.testing.assert_allclose(many[h], single[0], rtol=1e-14)


@pytest.mark.parametrize("causal,q_len", [(False, 4), (True, 4), (True, 2)])
def test_gradcheck_through_attention(causal, q_len):
    rng = np.random.default_rng(7)
    layer = ShawRelativeAttention(3, 2, value_dim=2, init_std=0.5, seed=8)
    gradcheck_hook(layer, rng.standard_normal((2, 2, q_len, 3)), rng.standard_normal((2, 2, 6, 3)),
                   rng.standard_normal((2, 2, 6, 2)), causal=causal, max_entries=40)


def test_float32_attention_and_grads_overwritten():
    rng = np.random.default_rng(9)
    layer = ShawRelativeAttention(4, 1, seed=10)
    q, k, v = (rng.standard_normal((2, 5, 4)).astype(np.float32) for _ in range(3))
    out, cache = attention.forward(q, k, v, hooks=[layer])
    assert out.dtype == np.float32
    g = np.ones_like(out)
    grads = attention.backward(g, cache)
    assert grads["q"].dtype == np.float32
    first = {n: t.copy() for n, t in layer.grads.items()}
    attention.backward(g, cache)
    for n in first:
        np.testing.assert_array_equal(layer.grads[n], first[n])


# --------------------------------------------------------------------------- errors

def test_errors():
    with pytest.raises(ValueError, match="max_relative_position"):
        shaw_relative_index(3, 3, -1)
    with pytest.raises(TypeError, match="max_relative_position"):
        ShawRelativeAttention(4, 2.0)
    with pytest.raises(ValueError, match="head_dim"):
        ShawRelativeAttention(0, 2)
    with pytest.raises(ValueError, match="odd row count"):
        shaw_logits(np.ones((2, 3)), np.ones((4, 3)), 2)
    with pytest.raises(ValueError, match=r"of width 3, the last axis of q, got shape \(5, 2\)"):
        shaw_logits(np.ones((2, 3)), np.ones((5, 2)), 2)
    with pytest.raises(ValueError, match="dout must have shape"):
        shaw_values_backward(np.ones((2, 4)), np.ones((2, 3)), np.ones((5, 3)))
    layer = ShawRelativeAttention(4, 2)
    q = np.ones((1, 3, 5))
    with pytest.raises(ValueError, match="head_dim=4"):
        attention.forward(q, q, q, hooks=[layer])
    with pytest.raises(TypeError, match="use_values"):
        ShawRelativeAttention(4, 2, use_values="no")


# --------------------------------------------------------------------------- golden cases

def test_golden_shaw_cases_pass(tmp_path):
    from posenc_np.golden import runner
    from posenc_np.testing import assert_golden, load_case

    rows = runner.generate(tmp_path, formats=("json",), only=["relative.shaw*"])
    assert len(rows) == 3 and all(r.ok for r in rows), runner.format_table(rows)
    case = load_case(next(tmp_path.glob("relative.shaw.logits.*.json")))
    q, table = case.inputs["q"], case.inputs["key_table"]
    assert_golden({"logits_term": shaw_logits(q, table, case.params["k_len"], scale=case.params["scale"]),
                   "dq": shaw_logits_backward(case.inputs["dlogits"], q, table, scale=case.params["scale"])[0],
                   "dkey_table": shaw_logits_backward(case.inputs["dlogits"], q, table,
                                                      scale=case.params["scale"])[1]}, case)
    assert case.conventions["sign"].startswith("key - query")
