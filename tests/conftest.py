"""Shared test configuration.

* Hypothesis runs with one fixed, derandomised profile so that the suite is reproducible and its
  runtime bounded on a 2-core CI machine. Test modules do not override it.
* ``pytest.approx`` is held to its documented arguments: tolerances are Python numbers. NumPy
  scalars were accepted by older pytest releases and are refused by newer ones (pytest 9.2:
  ``TypeError: relative tolerance for a scalar value must be an int, float or Decimal``), so a
  NumPy tolerance fails here on every pytest version instead of only on a newcomer's.

Helpers that test modules import are in ``_support.py``.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", derandomize=True, deadline=None, max_examples=40,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile("ci")

_approx = pytest.approx


def _approx_with_python_tolerances(expected, rel=None, abs=None, nan_ok=False):
    for name, tol in (("rel", rel), ("abs", abs)):
        if isinstance(tol, np.generic):
            raise TypeError(f"pytest.approx({name}=...) must be a Python number, got {type(tol).__name__}; "
                            f"wrap it in float()")
    return _approx(expected, rel=rel, abs=abs, nan_ok=nan_ok)


pytest.approx = _approx_with_python_tolerances
