"""posenc_np.sklearn: the formulas, scikit-learn's estimator checks, pandas output, pipelines,
and clear errors. Expected values are written from the formulas with np.sin / np.cos."""

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from sklearn.compose import ColumnTransformer
from sklearn.linear_model import LinearRegression
from sklearn.pipeline import make_pipeline
from sklearn.utils.estimator_checks import check_estimator

from posenc_np.sklearn import RotaryEncoder, SinusoidalEncoder


def _rot(a, b, theta):
    return a * np.cos(theta) - b * np.sin(theta), a * np.sin(theta) + b * np.cos(theta)


# --------------------------------------------------------------------------- scikit-learn's checks

def _failed_checks(estimator):
    results = check_estimator(estimator, on_fail=None)
    assert len(results) > 40
    unexpected = [r for r in results if r["status"] == "skipped" and r["check_name"] != "check_array_api_input"]
    assert not unexpected, unexpected
    return {r["check_name"]: r["exception"] for r in results if r["status"] == "failed"}


# the one skipped check needs SCIPY_ARRAY_API set (array-API inputs), not this package
pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.SkipTestWarning")


def test_sinusoidal_encoder_passes_check_estimator():
    assert _failed_checks(SinusoidalEncoder()) == {}
    assert _failed_checks(SinusoidalEncoder(dim=6, period=7.0, layout="concat", offset=3.0, scale=0.5)) == {}


def test_rotary_encoder_passes_check_estimator():
    assert _failed_checks(RotaryEncoder()) == {}
    assert _failed_checks(RotaryEncoder(period=5.0, layout="interleaved", offset=1.0, scale=2.0)) == {}


def test_rotary_encoder_pairs_an_odd_column_with_an_implicit_zero():
    # (t, a) with unpaired="zero": a + 0i rotated by theta = 2 pi t / P -> (a cos, a sin)
    t = np.array([0.0, 1.0, 2.5])
    a = np.array([2.0, -1.0, 0.5])
    theta = 2 * np.pi * t / 4.0
    out = RotaryEncoder(period=4.0).fit_transform(np.column_stack([t, a]))
    np.testing.assert_allclose(out, np.column_stack([a * np.cos(theta), a * np.sin(theta)]), rtol=0, atol=1e-15)
    # three features, rotary_dim=3: pad after the rotated block, the rest passes through
    X = np.column_stack([t, a, 2 * a, 3 * a, 4 * a])
    enc = RotaryEncoder(rotary_dim=3, period=4.0).fit(X)
    assert enc.transform(X).shape == (3, 5)
    np.testing.assert_array_equal(enc.transform(X)[:, 4], 4 * a)
    assert list(enc.get_feature_names_out()) == ["x1", "x2", "x3", "rope_pad", "x4"]
    with pytest.raises(ValueError, match="unpaired='error'"):
        RotaryEncoder(unpaired="error").fit(np.column_stack([t, a]))
    with pytest.raises(ValueError, match="unpaired"):
        RotaryEncoder(unpaired="pad").fit(np.column_stack([t, a]))


def test_rotary_encoder_does_what_those_checks_ask_on_data_it_accepts():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 5))
    est = RotaryEncoder(rotary_dim=2, period=5.0)
    params = est.get_params()
    assert est.fit(X) is est and est.n_features_in_ == 5
    assert est.get_params() == params                                  # fit does not touch params
    first = est.transform(X)
    np.testing.assert_array_equal(est.fit(X).transform(X), first)       # idempotent
    ro = X.copy()
    ro.setflags(write=False)
    np.testing.assert_array_equal(est.transform(ro), first)             # read-only input
    with pytest.raises(ValueError, match="X has 4 features, but RotaryEncoder is expecting 5"):
        est.transform(X[:, :4])


# --------------------------------------------------------------------------- formulas

def test_sinusoidal_encoder_base_frequencies_match_the_paper_formula():
    t = np.array([[0.0, 5.0], [1.0, -2.5], [1000.0, 3.25]])
    out = SinusoidalEncoder(dim=6, base=100.0).fit_transform(t)
    assert out.shape == (3, 12)
    w = 100.0 ** (-np.arange(0, 6, 2) / 6)
    for c in range(2):
        block = out[:, 6 * c: 6 * (c + 1)]
        np.testing.assert_allclose(block[:, 0::2], np.sin(t[:, c:c + 1] * w), rtol=0, atol=1e-12)
        np.testing.assert_allclose(block[:, 1::2], np.cos(t[:, c:c + 1] * w), rtol=0, atol=1e-12)


def test_sinusoidal_encoder_period_offset_scale_and_concat_layout():
    x = np.array([[1958.0], [1958.25], [1960.5]])                      # decimal years
    out = SinusoidalEncoder(dim=4, period=12.0, offset=1958.0, scale=1 / 12, layout="concat").fit_transform(x)
    months = np.array([0.0, 3.0, 30.0])[:, None]
    k = np.array([1.0, 2.0])
    angle = 2 * np.pi * k * months / 12.0
    np.testing.assert_allclose(out, np.hstack([np.sin(angle), np.cos(angle)]), rtol=0, atol=1e-12)
    # three months into a 12-month cycle: the first harmonic is at a quarter turn
    np.testing.assert_allclose(out[1], [1.0, 0.0, 0.0, -1.0], atol=1e-12)


def test_rotary_encoder_rotates_pairs_by_the_time_angle_for_both_layouts():
    rng = np.random.default_rng(1)
    t = np.array([0.0, 1.0, 2.5, 40.0])
    F = rng.normal(size=(4, 5))                                        # 4 rotated + 1 passed through
    X = np.column_stack([F[:, :2], t, F[:, 2:]])                       # time column in the middle
    w = 10.0 ** (-np.arange(0, 4, 2) / 4)
    theta = t[:, None] * w                                             # (4, 2)
    half = RotaryEncoder(time_column=2, rotary_dim=4, base=10.0).fit_transform(X)
    a, b = _rot(F[:, 0:2], F[:, 2:4], theta)                           # pairs (i, i + 2)
    np.testing.assert_allclose(half, np.column_stack([a, b, F[:, 4]]), rtol=0, atol=1e-12)
    inter = RotaryEncoder(time_column=2, rotary_dim=4, base=10.0, layout="interleaved").fit_transform(X)
    a, b = _rot(F[:, 0::2][:, :2], F[:, 1::2][:, :2], theta)           # pairs (2i, 2i + 1)
    expected = np.empty((4, 4))
    expected[:, 0::2], expected[:, 1::2] = a, b
    np.testing.assert_allclose(inter[:, :4], expected, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(inter[:, 4], F[:, 4])


def test_rotary_encoder_inner_products_depend_only_on_the_time_difference():
    rng = np.random.default_rng(2)
    u, v = rng.normal(size=4), rng.normal(size=4)
    est = RotaryEncoder(period=24.0, time_column=-1)

    def dot(s, t):
        ru, rv = est.fit_transform(np.array([[*u, s], [*v, t]]))
        return ru @ rv

    for s, t in ((0.0, 5.0), (100.0, 105.0), (-7.5, -2.5)):
        assert dot(s, t) == pytest.approx(dot(0.0, 5.0), abs=1e-12)
    assert dot(0.0, 24.0) == pytest.approx(u @ v, abs=1e-12)              # a whole cycle apart


# --------------------------------------------------------------------------- pandas and pipelines

def test_feature_names_and_pandas_output():
    df = pd.DataFrame({"month": [1.0, 2.0, 3.0], "hour": [0.0, 6.0, 12.0]})
    enc = SinusoidalEncoder(dim=4, period=12.0).set_output(transform="pandas")
    out = enc.fit_transform(df)
    assert isinstance(out, pd.DataFrame)
    assert list(out.columns) == ["month_sin0", "month_cos0", "month_sin1", "month_cos1",
                                 "hour_sin0", "hour_cos0", "hour_sin1", "hour_cos1"]
    concat = SinusoidalEncoder(dim=4, layout="concat").fit(df[["month"]])
    assert list(concat.get_feature_names_out()) == ["month_sin0", "month_sin1", "month_cos0", "month_cos1"]
    assert list(SinusoidalEncoder(dim=2).fit(df.to_numpy()).get_feature_names_out()) == [
        "x0_sin0", "x0_cos0", "x1_sin0", "x1_cos0"]
    rot = RotaryEncoder(time_column="t").set_output(transform="pandas")
    frame = pd.DataFrame({"u": [1.0, 0.0], "t": [0.0, 1.0], "v": [0.0, 1.0]})
    res = rot.fit_transform(frame)
    assert list(res.columns) == ["u", "v"] and list(rot.get_feature_names_out()) == ["u", "v"]
    np.testing.assert_allclose(res.loc[0], [1.0, 0.0])


def test_pipeline_and_column_transformer():
    rng = np.random.default_rng(3)
    month = rng.integers(0, 120, size=200).astype(float)
    other = rng.normal(size=200)
    y = 3.0 * np.sin(2 * np.pi * month / 12) - 2.0 * np.cos(4 * np.pi * month / 12) + 0.5 * other
    df = pd.DataFrame({"month": month, "other": other})
    ct = ColumnTransformer([("season", SinusoidalEncoder(dim=4, period=12.0), ["month"])], remainder="passthrough")
    model = make_pipeline(ct, LinearRegression()).fit(df, y)
    assert model.score(df, y) == pytest.approx(1.0, abs=1e-9)            # y is in the features' span
    assert list(ct.get_feature_names_out()) == ["season__month_sin0", "season__month_cos0", "season__month_sin1",
                                                "season__month_cos1", "remainder__other"]
    coef = model[-1].coef_
    np.testing.assert_allclose(coef, [3.0, 0.0, 0.0, -2.0, 0.5], atol=1e-9)


# --------------------------------------------------------------------------- errors

@pytest.mark.parametrize("est, X, exc, match", [
    (SinusoidalEncoder(dim=5), [[1.0]], ValueError, "dim must be even"),
    (SinusoidalEncoder(dim=2.0), [[1.0]], TypeError, "dim must be an integer"),
    (SinusoidalEncoder(layout="half"), [[1.0]], ValueError, "layout must be one of"),
    (SinusoidalEncoder(scale=0.0), [[1.0]], ValueError, "scale must be > 0"),
    (SinusoidalEncoder(period=-12.0), [[1.0]], ValueError, "period must be > 0"),
    (SinusoidalEncoder(base=1.0), [[1.0]], ValueError, "base must differ from 1"),
    (SinusoidalEncoder(), [[np.nan]], ValueError, "NaN"),
    (SinusoidalEncoder(), [["a"]], ValueError, "could not convert"),
    (SinusoidalEncoder(), [1.0, 2.0], ValueError, "Expected 2D array"),
    (RotaryEncoder(unpaired="error"), [[0.0, 1.0, 2.0, 3.0]], ValueError, "cannot all be paired"),
    (RotaryEncoder(rotary_dim=4), [[0.0, 1.0, 2.0, 3.0]], ValueError, "rotary_dim must be <= 3"),
    (RotaryEncoder(), [[0.0], [1.0]], ValueError, "at least 1 feature column"),
    (RotaryEncoder(time_column=4), [[0.0, 1.0, 2.0]], ValueError, "out of range"),
    (RotaryEncoder(time_column=1.0), [[0.0, 1.0, 2.0]], TypeError, "time_column must be"),
    (RotaryEncoder(time_column="t"), [[0.0, 1.0, 2.0]], ValueError, "has no column names"),
    (RotaryEncoder(time_column="t"), pd.DataFrame({"a": [1.0], "b": [2.0], "c": [3.0]}), ValueError,
     "not a column of X"),
    (RotaryEncoder(layout="concat"), [[0.0, 1.0, 2.0]], ValueError, "layout must be one of"),
])
def test_bad_input_is_a_clear_error(est, X, exc, match):
    with pytest.raises(exc, match=match):
        est.fit(X)


def test_transform_checks_fit_and_width_and_names():
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        SinusoidalEncoder().transform([[1.0]])
    enc = SinusoidalEncoder(dim=2).fit([[1.0, 2.0]])
    with pytest.raises(ValueError, match="X has 1 features, but SinusoidalEncoder is expecting 2"):
        enc.transform([[1.0]])
    with pytest.raises(ValueError, match="input_features must have 2 names"):
        enc.get_feature_names_out(["a"])


def test_import_posenc_np_does_not_import_sklearn_and_the_missing_extra_is_named():
    code = "import sys, posenc_np; print('sklearn' in sys.modules)"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.stdout.strip() == "False", res.stderr
    code = "import sys; sys.modules['sklearn'] = None; import posenc_np.sklearn"
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode != 0 and 'pip install "posenc-np[sklearn]"' in res.stderr
