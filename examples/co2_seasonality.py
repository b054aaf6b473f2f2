"""Time features for a regression on real data: raw time, one-hot calendar, sinusoidal encodings.

Data: weekly atmospheric CO2 at Mauna Loa, 1958-2001 (Keeling & Whorf; public domain), as shipped
offline by statsmodels (``statsmodels.datasets.co2``); the 59 missing weeks are dropped.
Task: predict the concentration (ppm) from the date. Every model is the same linear
regression on a smooth trend (cubic B-splines in time, knots about four years apart, too
coarse to follow the annual cycle) plus one *seasonal* featurisation of the date:

* raw time: the month number 1-12 as a plain numeric column (a line cannot make a cycle);
* one-hot calendar: 12 month indicators (scikit-learn's ``OneHotEncoder``);
* sinusoidal, period one year: ``SinusoidalEncoder(period=1.0, dim=2K)`` on the decimal
  year, the first K harmonics of the annual cycle (K = 1, 2, 3);
* sinusoidal, transformer frequencies: ``SinusoidalEncoder(dim=16, base=10000)`` on the week
  index (the geometric frequencies of Vaswani et al., none of them tuned to a year).

Held-out evaluation by whole years: every fifth year (1962, 1967, ..., 1997) is a test year,
never seen in fitting; the other years train. Whole years, not shuffled weeks, so that a test
week's neighbours are not in the training set, and interleaved so that the comparison measures
the seasonal features rather than how far a trend extrapolates (forecasting the trend years
ahead is a different problem, dominated by the trend model). The script prints a Markdown
table of test RMSE and MAE. Run: ``python examples/co2_seasonality.py`` (needs the ``sklearn`` extra and
statsmodels; a few seconds).

On the author's run (scikit-learn 1.9.1, statsmodels 0.15.0, pandas 3.1.1): test RMSE 2.15 ppm
with the trend alone, 1.72 with the raw month number, 0.73 with 12 month indicators, 0.86 /
0.65 / 0.64 with K = 1 / 2 / 3 annual harmonics (so two harmonics, 4 columns, beat the 12
indicators), and 2.23 with the transformer-style frequencies, which fit wavelengths the data
does not have. The script prints its own numbers; nothing is hard-coded.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.compose import ColumnTransformer
from sklearn.linear_model import LinearRegression
from sklearn.metrics import mean_absolute_error, root_mean_squared_error
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, SplineTransformer
from statsmodels.datasets import co2

from posenc_np.sklearn import SinusoidalEncoder

TEST_YEARS = set(range(1962, 2001, 5))


def load() -> pd.DataFrame:
    raw = co2.load_pandas().data.dropna()
    dates = raw.index
    year_length = np.where(dates.is_leap_year, 366.0, 365.0)
    return pd.DataFrame({
        "decimal_year": dates.year + (dates.day_of_year - 1) / year_length,
        "week": np.arange(len(raw), dtype=float),  # weeks since the first sample (after dropping NaNs)
        "month": dates.month,
        "co2": raw["co2"].to_numpy(),
    }, index=dates)


def trend():
    return SplineTransformer(n_knots=12, degree=3)  # 12 knots over 44 years


def models() -> dict:
    def with_season(name, transformer, columns):
        parts = [("trend", trend(), ["decimal_year"])]
        if transformer is not None:
            parts.append((name, transformer, columns))
        return make_pipeline(ColumnTransformer(parts), LinearRegression())

    out = {
        "trend only (no seasonal feature)": with_season("none", None, []),
        "raw time: month number 1-12": with_season("raw", "passthrough", ["month"]),
        "one-hot calendar: 12 months": with_season("onehot", OneHotEncoder(sparse_output=False), ["month"]),
    }
    for k in (1, 2, 3):
        out[f"sinusoidal, period 1 year, K={k}"] = with_season(
            "sin", SinusoidalEncoder(dim=2 * k, period=1.0), ["decimal_year"])
    out["sinusoidal, base 10000, dim 16 (weeks)"] = with_season(
        "sin", SinusoidalEncoder(dim=16, base=10000.0), ["week"])
    return out


def main() -> list[dict]:
    data = load()
    is_test = data.index.year.isin(sorted(TEST_YEARS))
    train, test = data[~is_test], data[is_test]
    X_cols = ["decimal_year", "week", "month"]
    rows = []
    for name, model in models().items():
        model.fit(train[X_cols], train["co2"])
        pred = model.predict(test[X_cols])
        n_features = len(model[0].get_feature_names_out())
        rows.append({"features": name, "columns": n_features,
                     "test RMSE (ppm)": root_mean_squared_error(test["co2"], pred),
                     "test MAE (ppm)": mean_absolute_error(test["co2"], pred)})
    print(f"Mauna Loa CO2 (statsmodels.datasets.co2): {len(train)} training weeks, {len(test)} test weeks "
          f"(test years {sorted(TEST_YEARS)}); linear regression on a spline trend + the features below\n")
    print("| features | columns | test RMSE (ppm) | test MAE (ppm) |")
    print("| --- | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['features']} | {r['columns']} | {r['test RMSE (ppm)']:.3f} | {r['test MAE (ppm)']:.3f} |")
    return rows


if __name__ == "__main__":
    main()
