"""Randomized positions (Ruoss et al. 2023): the sample (sorted, distinct, in range, seeded), its use
in training and not in evaluation, forward at given positions against independent computations,
gradients at sampled positions, errors."""

from __future__ import annotations

import numpy as np
import pytest
from test_model import model_gradcheck

from posenc_np.model import ModelConfig, Transformer
from posenc_np.study.tasks import CopyTask
from posenc_np.train import evaluate, train


def _model(position="rope", M=40, **kw):
    options = {"randomized_max_len": M} if M is not None else {}
    return Transformer(ModelConfig(vocab_size=10, d_model=8, n_heads=2, n_layers=1, d_ff=8, max_len=kw.pop("max_len", 64),
                                   position=position, position_options=options, dtype="float64", seed=2, **kw))


def test_sample_is_sorted_distinct_in_range_and_seeded():
    m = _model(M=12)
    draws = [m.training_positions(7, np.random.default_rng(s)) for s in range(200)]
    for p in draws:
        assert p.shape == (7,) and np.all(np.diff(p) > 0) and p[0] >= 0 and p[-1] < 12
    np.testing.assert_array_equal(m.training_positions(7, np.random.default_rng(5)), draws[5])
    assert len({tuple(p) for p in draws}) > 100
    counts = np.bincount(np.concatenate(draws), minlength=12)
    assert counts.min() > 0  # every position of the range is used, not only 0 .. 6
    np.testing.assert_array_equal(m.training_positions(12, np.random.default_rng(0)), np.arange(12))


def test_off_by_default_draws_nothing():
    m = _model(M=None)
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    assert m.training_positions(5, rng) is None and rng.bit_generator.state == state


def test_training_uses_sampled_positions_and_evaluation_does_not(monkeypatch):
    m = _model(M=40)
    seen = []
    forward = m.forward

    def spy(tokens, cache=None, *, positions=None):
        seen.append(positions)
        return forward(tokens, cache, positions=positions)

    monkeypatch.setattr(m, "forward", spy)
    task = CopyTask(3, alphabet=8)
    train(m, task, 3, batch_size=2, lr=1e-3, seed=4, progress=False)
    assert len(seen) == 3 and all(p is not None and p[-1] < 40 for p in seen)
    rng = np.random.default_rng(4)  # the loop draws the batch, then the positions, from its rng
    for p in seen:
        task.sample(rng, 2)
        np.testing.assert_array_equal(p, np.sort(rng.choice(40, size=task.seq_len, replace=False)))
    seen.clear()
    tokens, targets = task.sample(np.random.default_rng(1), 4)
    evaluate(m, tokens, targets)
    assert seen and all(p is None for p in seen)


def test_rope_forward_depends_on_offsets_only():
    m = _model("rope")
    tokens = np.array([[1, 2, 3, 4, 5]])
    np.testing.assert_allclose(m.forward(tokens, positions=np.arange(20, 25)), m.forward(tokens), rtol=1e-11)
    spread = m.forward(tokens, positions=np.array([0, 3, 9, 10, 30]))
    assert not np.allclose(spread, m.forward(tokens))


def test_learned_forward_at_positions_equals_a_table_of_those_rows():
    m = _model("learned", M=30, max_len=30)
    p = np.array([2, 5, 11, 17, 29])
    tokens = np.array([[1, 2, 3, 4, 5]])
    ref = _model("learned", M=30, max_len=30)
    ref.params["pos_emb.weight"][:5] = m.params["pos_emb.weight"][p]
    np.testing.assert_allclose(m.forward(tokens, positions=p), ref.forward(tokens), rtol=1e-13)


@pytest.mark.parametrize("position,fusion", [("rope", "add"), ("learned", "add"), ("sinusoidal", "concat"),
                                             ("xpos", "add"), ("p_rope", "add")])
def test_gradcheck_at_sampled_positions(position, fusion):
    m = _model(position, M=30, max_len=30, fusion=fusion)
    rng = np.random.default_rng(11)
    for v in m.params.values():
        v += rng.normal(0.0, 0.4, size=v.shape)
    p = m.training_positions(5, np.random.default_rng(3))
    forward = m.forward
    m.forward = lambda tokens, cache=None: forward(tokens, cache, positions=p)
    model_gradcheck(m, np.random.default_rng(1).integers(0, 10, size=(2, 5)))


def test_errors():
    m = _model("learned", M=20, max_len=20)
    tokens = np.array([[1, 2, 3]])
    for bad, match in (([0, 2], r"shape \(T,\) = \(3,\)"), ([0, 2, 2], "strictly increasing"),
                       ([-1, 2, 3], "strictly increasing integers >= 0"), ([0, 2, 20], "< max_len"),
                       ([0.0, 1.0, 2.0], "positions")):
        with pytest.raises((ValueError, TypeError), match=match):
            m.forward(tokens, positions=bad)
    with pytest.raises(ValueError, match="KV cache"):
        _model().forward(tokens, _model().init_cache(), positions=[0, 1, 2])
    with pytest.raises(ValueError, match="randomized_max_len'\\] >= 30"):
        _model(M=20).training_positions(30, np.random.default_rng(0))
    with pytest.raises(ValueError, match="must be <= max_len"):
        _model("learned", M=40, max_len=20)
    with pytest.raises(ValueError, match=r"position_options\['randomized_max_len'\] must be an integer >= 1"):
        _model(M=0)
    with pytest.raises(ValueError, match="unknown position_options for 'alibi'"):
        _model("alibi", M=10)
