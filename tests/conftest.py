"""Shared test configuration.

Hypothesis runs with a fixed derandomised profile so that the suite is reproducible and its
runtime bounded on a 2-core CI machine.
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", derandomize=True, deadline=None, max_examples=40,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
