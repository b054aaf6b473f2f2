"""Single source of the package version (read by setup.cfg and written into golden cases)."""

__version__ = "0.1.0"
