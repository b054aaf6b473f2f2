"""A user's own position encoding, registered from outside the package (``tests/test_study_run.py``
runs the study on it in a process pool and on Dask workers)."""

from posenc_np.registry import Encoding, SinusoidTable, register


def build_sinusoid_500(cfg, options, rng):
    """A sinusoidal table with base 500 instead of 10000."""
    return SinusoidTable(cfg.d_model, 500.0, "interleaved", cfg.dtype)


ENTRY = register(Encoding("sinusoid500", "embedding", "sinusoid with base 500 (a user's encoding)", {},
                          build_sinusoid_500), replace=True)
