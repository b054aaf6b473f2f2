"""Sphinx configuration of the posenc_np documentation site.

Build (warnings are errors)::

    python -m sphinx -W --keep-going -b html docs docs/_build/html

Pages are found, not listed: every ``docs/*.md`` is in the table of contents (glob), the API
reference has one page per submodule in ``posenc_np.__all__``, and the golden-case pages
come from ``posenc_np.golden.catalogue`` and the newest committed ``vectors/v*/``. Those
pages are generated into ``docs/api/`` and ``docs/golden-cases/`` by ``_ext/posenc_site.py``
on every build (both folders are git-ignored). Math is rendered by a MathJax copy installed
from PyPI (``sphinx-mathjax-offline``, the ``docs`` extra): nothing is fetched from a CDN.
"""

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent))
sys.path.insert(0, str(DOCS / "_ext"))

from posenc_np import __version__  # noqa: E402 (after the sys.path insert)

project = "posenc_np"
author = "posenc_np contributors"
copyright = "posenc_np contributors"
version = release = __version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.mathjax",
    "numpydoc",
    "sphinx-mathjax-offline",
    "posenc_site",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "README.md"]
# Markdown pages are also read on GitHub, where a skipped heading level is harmless.
suppress_warnings = ["myst.header"]

myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 4

autodoc_default_options = {"members": True, "member-order": "bysource"}
autodoc_typehints = "none"
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

html_theme = "pydata_sphinx_theme"
html_title = f"posenc_np {release}"
html_static_path = []
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
}
html_show_sourcelink = False
# Light/dark follows the reader's system setting (an empty mode makes the theme log an error).
html_context = {"default_mode": "auto"}
