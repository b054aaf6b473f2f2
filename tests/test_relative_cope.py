"""CoPE (Golovneva et al. 2024): the formula against a loop transcription of the paper, the
hand-written backward against central differences, the mask, the clamp, the conventions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from posenc_np import attention, relative
from posenc_np.testing import gradcheck, gradcheck_hook

RNG = np.random.default_rng(7)


def _paper_loop(q, k, table, keep, gate_scale):
    """Eqs. 3-5 written out for one (q_len, d) head: gates over kept keys, p_ij = sum_{t >= j} g_it,
    clamped at P = len(table) - 1, e[p] interpolated between floor and ceil, term q_i . e[p]."""
    n_q, n_k = q.shape[0], k.shape[0]
    big_p = table.shape[0] - 1
    pos = np.zeros((n_q, n_k))
    term = np.zeros((n_q, n_k))
    for i in range(n_q):
        gate = [1 / (1 + math.exp(-gate_scale * float(q[i] @ k[t]))) if keep[i, t] else 0.0 for t in range(n_k)]
        for j in range(n_k):
            p = sum(gate[t] for t in range(j, n_k))
            pos[i, j] = p
            p = min(p, big_p)
            lo, hi = math.floor(p), math.ceil(p)
            e = (hi - p) * table[lo] + (p - lo) * table[hi] if hi != lo else table[lo]
            term[i, j] = float(q[i] @ e)
    return pos, term


@pytest.mark.parametrize("causal", [True, False])
def test_forward_matches_the_papers_definition(causal):
    q, k = RNG.standard_normal((2, 3, 4, 5)), RNG.standard_normal((2, 3, 6, 5))
    table = RNG.standard_normal((4, 5))  # npos_max = 3: the clamp is active for long rows
    keep = attention.causal_mask(4, 6) if causal else RNG.random((2, 1, 4, 6)) < 0.7
    term, _ = relative.cope_forward(q, k, table, gate_scale=0.5, mask=keep)
    pos = relative.cope_positions(q, k, gate_scale=0.5, mask=keep)
    for b in range(2):
        for h in range(3):
            kb = np.broadcast_to(keep, (2, 3, 4, 6))[b, h]
            want_pos, want_term = _paper_loop(q[b, h], k[b, h], table, kb, 0.5)
            np.testing.assert_allclose(pos[b, h], want_pos, rtol=1e-13, atol=1e-13)
            np.testing.assert_allclose(term[b, h], want_term, rtol=1e-12, atol=1e-12)
    assert (pos > 3).any(), "the case must exercise the clamp"


def test_causal_positions_count_keys_from_j_to_i_only():
    q, k = RNG.standard_normal((1, 3, 4)), RNG.standard_normal((1, 3, 4))
    pos = relative.cope_positions(q, k, gate_scale=1.0, mask=attention.causal_mask(3, 3))
    g = 1 / (1 + np.exp(-(q[0] @ k[0].T)))
    assert pos[0, 2, 0] == pytest.approx(g[2, 0] + g[2, 1] + g[2, 2])
    assert pos[0, 0, 0] == pytest.approx(g[0, 0]) and pos[0, 0, 1] == 0 and pos[0, 0, 2] == 0


def test_integer_positions_use_one_row_and_a_zero_table_gives_zero():
    q = np.ones((1, 1, 2))
    k = np.full((1, 3, 2), 50.0)  # gates are 1.0 in float64: positions 3, 2, 1
    table = np.arange(8.0).reshape(4, 2)
    term, _ = relative.cope_forward(q, k, table, gate_scale=1.0)
    np.testing.assert_array_equal(relative.cope_positions(q, k, gate_scale=1.0)[0, 0], [3.0, 2.0, 1.0])
    np.testing.assert_array_equal(term[0, 0], [table[3].sum(), table[2].sum(), table[1].sum()])
    assert not relative.cope_forward(q, k, np.zeros((4, 2)), gate_scale=1.0)[0].any()


@pytest.mark.parametrize("npos_max", [2, 9])
def test_backward_gradcheck_to_q_k_and_table(npos_max):
    keep = RNG.random((3, 5)) < 0.8
    inputs = {"q": RNG.standard_normal((2, 3, 4)), "k": RNG.standard_normal((2, 5, 4)),
              "table": RNG.standard_normal((npos_max + 1, 4))}

    def fun(q, k, table):
        return relative.cope_forward(q, k, table, gate_scale=0.7, mask=keep)[0]

    def backward(g, q, k, table):
        return relative.cope_backward(g, relative.cope_forward(q, k, table, gate_scale=0.7, mask=keep)[1])

    gradcheck(fun, backward, inputs, max_entries=None)


@pytest.mark.parametrize("gate_scale", [None, 1.0])
def test_hook_gradcheck_through_attention(gate_scale):
    hook = relative.CoPE(4, 3, gate_scale=gate_scale, seed=0, init_std=0.5)
    q, k, v = (RNG.standard_normal((1, 2, 5, 4)) for _ in range(3))
    gradcheck_hook(hook, q, k, v, causal=True, max_entries=60)
    mask = RNG.random((1, 1, 5, 5)) < 0.7
    gradcheck_hook(hook, q, k, v, mask=mask, max_entries=60)


def test_clamped_positions_get_no_gradient():
    q = np.ones((1, 1, 2))
    k = np.full((1, 4, 2), 3.0)  # gates ~0.9975: positions ~4, 3, 2, 1; npos_max = 2 clamps the first two
    table = RNG.standard_normal((3, 2))
    term, cache = relative.cope_forward(q, k, table, gate_scale=1.0)
    dterm = np.zeros_like(term)
    dterm[..., :2] = 1.0
    grads = relative.cope_backward(dterm, cache)
    assert not grads["k"].any()  # only through the table logits of row 2, which depend on q alone
    np.testing.assert_allclose(grads["q"][0, 0], 2 * table[2])


def test_hook_default_gate_scale_is_the_attention_scale_and_mask_zeroes_gates():
    hook = relative.CoPE(4, 6, seed=1, init_std=0.3)
    q, k = RNG.standard_normal((1, 1, 3, 4)), RNG.standard_normal((1, 1, 3, 4))
    keep = attention.causal_mask(3, 3)
    term, _ = hook.logits(q, k, 0.5, mask=keep)
    want, _ = relative.cope_forward(q, k, hook.params["table"], gate_scale=0.5, mask=keep)
    np.testing.assert_array_equal(term, want)
    explicit = relative.CoPE(4, 6, gate_scale=1.0, seed=1, init_std=0.3)
    assert not np.allclose(explicit.logits(q, k, 0.5, mask=keep)[0], term)


def test_doors():
    q = RNG.standard_normal((1, 3, 4))
    with pytest.raises(ValueError, match="npos_max \\+ 1 >= 2 rows"):
        relative.cope_forward(q, q, np.zeros((1, 4)), gate_scale=1.0)
    with pytest.raises(ValueError, match=r"rows of width 4 \(the last axis of q\), got shape \(3, 3\)"):
        relative.cope_forward(q, q, np.zeros((3, 3)), gate_scale=1.0)
    with pytest.raises(ValueError, match="scale must be > 0"):
        relative.cope_positions(q, q, gate_scale=0.0)
    with pytest.raises(TypeError, match="mask must be a boolean array"):
        relative.cope_positions(q, q, gate_scale=1.0, mask=np.ones((3, 3)))
    with pytest.raises(TypeError, match="cache returned by cope_forward"):
        relative.cope_backward(np.zeros((1, 3, 3)), {})
    with pytest.raises(ValueError, match="dterm must have shape"):
        relative.cope_backward(np.zeros((3, 3)), relative.cope_forward(q, q, np.zeros((3, 4)), gate_scale=1.0)[1])
    with pytest.raises(ValueError, match="npos_max must be an integer >= 1"):
        relative.CoPE(4, 0)
    with pytest.raises(ValueError, match="gate_scale must be finite"):
        relative.CoPE(4, 3, gate_scale=float("nan"))


def test_zero_keys_or_queries_give_empty_terms_and_zero_gradients():
    # issue 26: cope_forward with zero keys raised ZeroDivisionError
    table = RNG.standard_normal((5, 4))
    for q_len, k_len in ((3, 0), (0, 3), (0, 0)):
        q, k = RNG.standard_normal((1, 2, q_len, 4)), RNG.standard_normal((1, 2, k_len, 4))
        term, cache = relative.cope_forward(q, k, table, gate_scale=0.5)
        assert term.shape == (1, 2, q_len, k_len)
        grads = relative.cope_backward(np.ones(term.shape), cache)
        assert grads["q"].shape == q.shape and grads["k"].shape == k.shape
        assert not grads["q"].any() and not grads["table"].any()


def test_a_non_finite_gate_scale_is_named():
    # issue 26: the message named `scale`
    q = RNG.standard_normal((1, 2, 3, 4))
    with pytest.raises(ValueError, match="^gate_scale must be finite"):
        relative.cope_forward(q, q, RNG.standard_normal((5, 4)), gate_scale=float("nan"))
    with pytest.raises(ValueError, match="^gate_scale must be finite"):
        relative.cope_positions(q, q, gate_scale=float("nan"))
    with pytest.raises(ValueError, match="^gate_scale must be finite"):
        relative.CoPE(4, 3, gate_scale=float("nan"))
    with pytest.raises(ValueError, match="^scale must be finite"):  # the hook's None: the attention's scale
        relative.CoPE(4, 3).logits(q, q, float("nan"))
