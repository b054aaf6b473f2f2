"""Golden test vectors: the mpmath oracle, the case catalogue, the file format (v2; v1 read).

See ``docs/golden-format.md`` for the format and ``posenc-np golden --help`` for the CLI.
"""
