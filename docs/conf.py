"""Sphinx configuration for the istjax documentation site (``make docs``; docs/_build/html/index.html).

Built the way jax, flax and optax build theirs: MyST Markdown pages run as notebooks by MyST-NB at build time (their
outputs and figures inline), the book theme, an API reference from autodoc, warnings as errors (``-W`` in the
Makefile). How pages run is set by ``ISTJAX_DOCS_EXECUTE``:

* ``cache`` (the default): a page runs only when its code changed since the last build (jupyter-cache, in
  ``docs/_build/.jupyter_cache``);
* ``force`` (CI): every page runs, every build;
* ``off``: nothing runs (a quick look at the prose; pages show code without output).

``ISTJAX_DOCS_ONLY=quickstart,theory`` builds only those pages (and the landing page), for a quick check of one.
A cell that raises fails the build (``nb_execution_raise_on_error``), as does a page that runs past
``nb_execution_timeout``.
"""

import os
import pathlib
import sys

DOCS = pathlib.Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))  # autodoc imports this checkout's istjax, not an installed copy
sys.path.insert(0, str(DOCS / "_ext"))  # constants: a re-exported constant's #: comment
# The notebook kernels MyST-NB starts are separate processes: they find this checkout (istjax and experiments/,
# which the results page imports) through PYTHONPATH, and the data sets through ISTJAX_DATA_DIR.
os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
os.environ.setdefault("ISTJAX_DATA_DIR", str(ROOT.parent / "shared" / "data"))

import istjax  # noqa: E402  (after the path is set)

project = "istjax"
author = "the istjax authors"
copyright = "2026, the istjax authors"
release = istjax.__version__
version = release

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "constants",
]

# --- which pages -----------------------------------------------------------------------------------------------
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "**.ipynb_checkpoints"]
_only = [p.strip() for p in os.environ.get("ISTJAX_DOCS_ONLY", "").split(",") if p.strip()]
if _only:
    _keep = {"index", *_only}
    exclude_patterns += [str(p.relative_to(DOCS).with_suffix("")) + p.suffix for p in DOCS.rglob("*.md")
                         if "_build" not in p.parts and str(p.relative_to(DOCS).with_suffix("")) not in _keep]
    exclude_patterns += ["api/*"] if not any(o.startswith("api") for o in _only) else []
    suppress_warnings = ["toc.excluded", "toc.not_readable", "ref.doc", "ref.ref", "ref.python", "ref.obj",
                         "myst.xref_missing"]

# --- MyST and MyST-NB ------------------------------------------------------------------------------------------
_execute = os.environ.get("ISTJAX_DOCS_EXECUTE", "cache")
if _execute not in ("cache", "force", "off"):
    raise ValueError(f"ISTJAX_DOCS_EXECUTE={_execute!r}: use 'cache' (run changed pages), 'force' (run every page) "
                     "or 'off' (run nothing)")
nb_execution_mode = _execute
if _execute == "off":  # no kernel ran, so no cell has a language to highlight with: say nothing of it
    suppress_warnings = [*globals().get("suppress_warnings", []), "myst-nb.lexer"]
nb_execution_cache_path = str(DOCS / "_build" / ".jupyter_cache")
nb_execution_raise_on_error = True  # a cell that raises fails the build
nb_execution_timeout = 900  # seconds per cell
nb_execution_in_temp = True  # a page that writes files writes them in a temporary folder
nb_merge_streams = True
nb_render_markdown_format = "myst"  # a cell that returns Markdown (the results page's tables) renders as MyST
nb_execution_show_tb = True
myst_enable_extensions = ["colon_fence", "dollarmath", "deflist"]
myst_heading_anchors = 3  # [text](page.md#a-heading) links resolve to the heading's anchor
source_suffix = {".md": "myst-nb", ".rst": "restructuredtext"}

# --- autodoc ---------------------------------------------------------------------------------------------------
# undoc-members: a constant is documented where it is assigned (the constants extension fills its entry from there);
# a test (tests/test_docs_site.py) fails on a public name with no documentation anywhere.
autodoc_default_options = {"members": True, "member-order": "bysource", "undoc-members": True}
autodoc_typehints = "description"
autodoc_typehints_format = "short"
autodoc_preserve_defaults = True
default_role = "py:obj"  # `name` in a docstring is a cross-reference, as in jax's and optax's docstrings
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True  # an "Attributes:" section is a field list, not a second description of each attribute
napoleon_custom_sections = [("Fields", "Attributes")]  # dataclass docstrings list their fields so
nitpicky = False

# --- HTML ------------------------------------------------------------------------------------------------------
html_theme = "sphinx_book_theme"
html_title = f"istjax {release}"
html_static_path = ["_static"]
html_favicon = "_static/favicon.png"  # a unit grid, as the partitions page draws them
html_theme_options = {
    "show_toc_level": 2,
    "repository_url": "",
    "use_repository_button": False,
    "home_page_in_toc": True,
    "show_navbar_depth": 1,
}
html_context = {"default_mode": "light"}
html_show_sourcelink = False
