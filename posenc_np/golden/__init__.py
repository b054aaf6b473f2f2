"""Golden test vectors: the mpmath oracle, the case catalogue, the v1 file format.

See ``docs/golden-format.md`` for the format and ``posenc-np golden --help`` for the CLI.
"""
