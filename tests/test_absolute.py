"""Absolute encodings: the seed's properties, t2t differences, learned table, fusion."""

import numpy as np
import pytest
from hypothesis import given, strategies as st

from posenc_np import absolute as ab
from posenc_np.golden import catalogue, runner
from posenc_np.testing import gradcheck


def test_library_matches_oracle_for_every_absolute_case(tmp_path):
    rows = runner.generate(tmp_path, only=["sinusoidal.*", "timing_signal.*", "learned.*"], formats=("json",))
    assert len(rows) == len(catalogue.cases(["sinusoidal.*", "timing_signal.*", "learned.*"])) >= 8
    assert all(r.ok for r in rows), runner.format_table(rows)


def test_seed_formula_small_values():
    pe = ab.sinusoidal([0, 1], 4)
    # PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(...), d = 4: frequencies 1 and 1/100
    np.testing.assert_array_equal(pe[0], [0.0, 1.0, 0.0, 1.0])
    np.testing.assert_allclose(pe[1], [np.sin(1), np.cos(1), np.sin(0.01), np.cos(0.01)], rtol=1e-15)
    concat = ab.sinusoidal([1], 4, layout="concat")[0]
    np.testing.assert_allclose(concat, [np.sin(1), np.sin(0.01), np.cos(1), np.cos(0.01)], rtol=1e-15)


def test_d8_frequencies_paper_versus_t2t():
    np.testing.assert_allclose(ab.sinusoidal_frequencies(8), [1, 0.1, 0.01, 0.001], rtol=1e-15)
    # t2t: exp(-i ln(1e4) / 3): 1, 10^(-4/3), 10^(-8/3), 1e-4; read back from sin at tiny p
    p = 1e-6
    w = ab.timing_signal([p], 8)[0, :4] / p
    np.testing.assert_allclose(w, [1, 10 ** (-4 / 3), 10 ** (-8 / 3), 1e-4], rtol=1e-9)
    assert abs(10 ** (-4 / 3) - 0.0464) < 1e-4 and abs(10 ** (-8 / 3) - 0.00215) < 1e-5


@given(p=st.integers(-5000, 5000), k=st.integers(-300, 300), dim=st.sampled_from([2, 8, 32, 128]))
def test_shift_is_a_fixed_rotation_per_pair(p, k, dim):
    """PE[p+k] = R(k w_i) PE[p] for every pair (seed: 相对位置线性表达)."""
    w = ab.sinusoidal_frequencies(dim)
    a = ab.sinusoidal([p], dim)[0].reshape(-1, 2)  # (sin, cos) pairs
    b = ab.sinusoidal([p + k], dim)[0].reshape(-1, 2)
    c, s = np.cos(k * w), np.sin(k * w)
    # sin(x + t) = sin x cos t + cos x sin t;  cos(x + t) = -sin x sin t + cos x cos t
    rotated = np.stack([a[:, 0] * c + a[:, 1] * s, -a[:, 0] * s + a[:, 1] * c], axis=1)
    bound = 8e-16 * (abs(p) + abs(k) + 4)  # angle rounding grows with |p w|, w <= 1
    assert np.max(np.abs(rotated - b)) <= bound


@given(positions=st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=20),
       dim=st.sampled_from([2, 6, 64]), layout=st.sampled_from(["interleaved", "concat"]))
def test_every_row_has_norm_sqrt_half_dim(positions, dim, layout):
    pe = ab.sinusoidal(positions, dim, layout=layout)
    np.testing.assert_allclose(np.linalg.norm(pe, axis=-1), np.sqrt(dim / 2), rtol=1e-14)


def test_rows_are_distinct_over_a_long_range():
    pe = ab.sinusoidal(np.arange(20000), 64)
    # nearest distinct rows: the highest frequency separates neighbours by ~2 sin(1/2) in one pair
    rounded = np.round(pe, 6)
    assert len(np.unique(rounded, axis=0)) == len(pe)
    d = np.linalg.norm(pe[1:] - pe[:-1], axis=1)
    assert d.min() > 0.9


def test_dtype_and_shapes():
    pos = np.arange(6).reshape(2, 3)
    y = ab.sinusoidal(pos, 4, dtype=np.float32)
    assert y.shape == (2, 3, 4) and y.dtype == np.float32
    np.testing.assert_array_equal(y, ab.sinusoidal(pos, 4).astype(np.float32))
    assert ab.timing_signal(np.float32(3.5), 5).shape == (5,)
    assert ab.timing_signal([1, 2], 5)[:, 4].tolist() == [0.0, 0.0]


@pytest.mark.parametrize("call, exc, msg", [
    (lambda: ab.sinusoidal([1], 7), ValueError, "dim must be even"),
    (lambda: ab.sinusoidal([1], 0), ValueError, "dim must be an integer >= 1"),
    (lambda: ab.sinusoidal([1], 8.0), TypeError, "dim must be an integer"),
    (lambda: ab.sinusoidal([1], 8, layout="half"), ValueError, "layout must be one of"),
    (lambda: ab.sinusoidal(["a"], 8), TypeError, "positions must hold integers or floats"),
    (lambda: ab.sinusoidal([True], 8), TypeError, "positions must hold"),
    (lambda: ab.sinusoidal([np.nan], 8), ValueError, "positions must be finite"),
    (lambda: ab.sinusoidal([1], 8, base=-1), ValueError, "base must be > 0"),
    (lambda: ab.sinusoidal([1], 8, dtype=np.int32), TypeError, "dtype must be a NumPy floating"),
    (lambda: ab.timing_signal([1], 8, min_timescale=10, max_timescale=1), ValueError, "max_timescale"),
    (lambda: ab.timing_signal([1], 8, start_index=0.5), TypeError, "start_index must be an integer"),
])
def test_bad_input(call, exc, msg):
    with pytest.raises(exc, match=msg):
        call()


def test_learned_lookup_scatter_add_and_range():
    emb = ab.LearnedPositionalEmbedding(5, 3, seed=0)
    w = emb.params["weight"]
    assert w.shape == (5, 3) and abs(w.std() - 0.02) < 0.02
    pos = np.array([[0, 2, 2], [4, 2, 0]])
    y = emb.forward(pos)
    np.testing.assert_array_equal(y, w[pos])
    dout = np.arange(18, dtype=float).reshape(2, 3, 3)
    emb.backward(dout)
    expected = np.zeros((5, 3))
    for (i, j), p in np.ndenumerate(pos):
        expected[p] += dout[i, j]
    np.testing.assert_array_equal(emb.grads["weight"], expected)
    with pytest.raises(ValueError, match=r"\[0, 5\).*got 5.*cannot extrapolate"):
        emb.forward([1, 5])
    with pytest.raises(ValueError, match="got -1"):
        emb.forward([-1])
    with pytest.raises(TypeError, match="integer array"):
        emb.forward([1.0])
    with pytest.raises(ValueError, match="dout must have shape"):
        emb.forward([1, 2])
        emb.backward(np.zeros((3, 3)))


def test_learned_gradcheck():
    emb = ab.LearnedPositionalEmbedding(6, 4, seed=1)
    pos = np.array([1, 3, 3, 5, 1, 1])

    def f(weight):
        emb.params["weight"] = weight
        return emb.forward(pos) ** 2

    def bw(g, weight):
        emb.params["weight"] = weight
        y = emb.forward(pos)
        emb.backward(2 * y * g)
        return {"weight": emb.grads["weight"]}

    gradcheck(f, bw, {"weight": emb.params["weight"]}, max_entries=None)


@pytest.mark.parametrize("mode", ab.FUSIONS)
def test_fusion_forward_and_gradcheck(mode):
    rng = np.random.default_rng(3)
    x, p = rng.standard_normal((2, 5, 4)), rng.standard_normal((5, 4 if mode != "concat" else 3))
    y = ab.fuse(x, p, mode)
    expected = {"add": lambda: x + p, "multiply": lambda: x * p,
                "concat": lambda: np.concatenate([x, np.stack([p, p])], axis=-1)}[mode]()
    np.testing.assert_array_equal(y, expected)

    def bw(g, x, p):
        dx, dp = ab.fuse_backward(g, x, p, mode)
        return {"x": dx, "p": dp}

    gradcheck(lambda x, p: ab.fuse(x, p, mode), bw, {"x": x, "p": p}, max_entries=None)


def test_fusion_bad_input():
    with pytest.raises(ValueError, match="mode must be one of"):
        ab.fuse(np.zeros((2, 3)), np.zeros((2, 3)), "sum")
    with pytest.raises(ValueError, match="must broadcast to x's shape"):
        ab.fuse(np.zeros((2, 3)), np.zeros((4, 2, 3)), "add")
    with pytest.raises(ValueError, match=r"p of shape \(3, 3\) must broadcast"):
        ab.fuse(np.zeros((2, 3)), np.zeros((3, 3)), "multiply")
    with pytest.raises(ValueError, match="leading axes"):
        ab.fuse(np.zeros((2, 3)), np.zeros((3, 5)), "concat")
