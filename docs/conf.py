"""Sphinx configuration of the posenc_np documentation site.

Build (warnings are errors)::

    python -m sphinx -W --keep-going -b html docs docs/_build/html

The table of contents is the reading order: ``index.md`` lists the sections (install,
quickstart, the guide, the golden suite, the tools, the API, about), and ``guide.md``,
``golden.md``, ``tools.md`` and ``about.md`` list their pages; a page that is in no toctree
fails the build. The API reference has one page per submodule in ``posenc_np.__all__``, and
the golden-case pages come from ``posenc_np.golden.catalogue`` and the newest committed
``vectors/v*/``. Those
pages are generated into ``docs/api/`` and ``docs/golden-cases/`` by ``_ext/posenc_site.py``
on every build (both folders are git-ignored). Math is rendered by a MathJax copy installed
from PyPI (``sphinx-mathjax-offline``, the ``docs`` extra): nothing is fetched from a CDN.
``_static/posenc.css`` keeps numbers and labels from wrapping and lets wide tables scroll,
``_static/posenc.js`` makes figures enlargeable, and ``_static/search-offline.js`` gives
search its snippets when the site is opened from disk (``file:``), where the browser refuses
the ``fetch`` Sphinx uses; ``_ext/posenc_site.py`` writes the page texts it reads.
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
templates_path = ["_templates"]
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
html_static_path = ["_static"]
html_css_files = ["posenc.css"]
html_js_files = ["posenc.js", "search-offline.js"]
# Guide pages rank above the generated listings for the same words (see the file).
html_search_scorer = str(DOCS / "_ext" / "scorer.js")
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    # the seven short section titles of index.md fit one row at 1280 px
    "header_links_before_dropdown": 7,
    "navigation_depth": 3,
    "show_nav_level": 1,
}
# The whole table of contents in the left sidebar of every page (the theme's default shows only
# the current section's pages, which leaves it empty on top-level pages).
html_sidebars = {"**": ["site-nav.html"]}
html_show_sourcelink = False
# Light/dark follows the reader's system setting (an empty mode makes the theme log an error).
html_context = {"default_mode": "auto"}
