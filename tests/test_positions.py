"""The one rule for relative positions and their alignment (posenc_np.positions), and every place that uses it."""

import numpy as np
import pytest

from posenc_np import alibi, attention, positions, relative
from posenc_np._util import memo_table


def test_relative_positions_by_the_formula():
    # r_ij = j - (i + o): bottom-right o = k_len - q_len, top-left o = 0
    for q_len, k_len in ((3, 3), (2, 5), (4, 1), (0, 3), (3, 0)):
        want = np.array([[j - (i + k_len - q_len) for j in range(k_len)] for i in range(q_len)], dtype=np.int64)
        np.testing.assert_array_equal(positions.relative_positions(q_len, k_len).reshape(want.shape), want)
        top = np.array([[j - i for j in range(k_len)] for i in range(q_len)], dtype=np.int64)
        np.testing.assert_array_equal(positions.relative_positions(q_len, k_len, alignment="top-left")
                                      .reshape(top.shape), top)
    np.testing.assert_array_equal(positions.relative_positions(2, 3, query_offset=-4), [[4, 5, 6], [3, 4, 5]])
    assert positions.query_offset(2, 5) == 3 and positions.query_offset(2, 5, "top-left") == 0


def test_relative_positions_errors():
    with pytest.raises(ValueError, match="alignment must be one of"):
        positions.relative_positions(2, 3, alignment="centre")
    with pytest.raises(ValueError, match="q_len must be an integer >= 0"):
        positions.relative_positions(-1, 3)
    with pytest.raises(TypeError, match="query_offset must be an integer"):
        positions.relative_positions(2, 3, query_offset=1.5)
    with pytest.raises(ValueError, match="MAX_ALLOC_BYTES"):
        positions.relative_positions(2**20, 2**20)


@pytest.mark.parametrize("q_len,k_len", [(4, 4), (2, 6), (1, 9)])
def test_every_grid_of_the_package_is_this_one(q_len, k_len):
    """The causal mask, T5, Shaw, BERT, DeBERTa and the ALiBi bias are all built from r_ij (with their sign)."""
    r = positions.relative_positions(q_len, k_len)
    np.testing.assert_array_equal(attention.causal_mask(q_len, k_len), r <= 0)
    np.testing.assert_array_equal(relative.t5_relative_positions(q_len, k_len), r)
    np.testing.assert_array_equal(relative.shaw_relative_index(q_len, k_len, 2), np.clip(r, -2, 2) + 2)
    np.testing.assert_array_equal(relative.bert_relative_distance(q_len, k_len), -r)
    np.testing.assert_array_equal(relative.deberta_relative_positions(q_len, k_len), -r)
    np.testing.assert_array_equal(relative.deberta_relative_positions(q_len, k_len, query_offset=0),
                                  -positions.relative_positions(q_len, k_len, alignment="top-left"))
    m = alibi.slopes(2)[:, None, None]
    np.testing.assert_array_equal(alibi.bias(2, q_len, k_len, query_offset=k_len - q_len), m * r)
    np.testing.assert_array_equal(alibi.bias(2, q_len, k_len, form="symmetric", query_offset=k_len - q_len),
                                  -m * np.abs(r) + 0.0)


def test_memo_table_keeps_read_only_results_per_argument_type():
    calls = []

    @memo_table(maxsize=2, max_bytes=64)
    def grid(n):
        calls.append(n)
        return np.arange(n)

    a = grid(3)
    assert grid(3) is a and calls == [3]
    with pytest.raises(ValueError, match="read-only"):
        a[0] = 5
    grid(np.int64(3))  # equal to 3 but another type: computed separately
    assert calls == [3, 3]
    grid(100)  # 800 bytes > max_bytes: returned, not kept
    grid(100)
    assert calls == [3, 3, 100, 100]
    grid(4)
    grid(5)  # maxsize 2: the oldest entries go
    grid(3)
    assert calls[-1] == 3
