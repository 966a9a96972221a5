"""The documentation site: every public name documented, doctests over the package and the pages, and the built site
opened in a real browser (headless Chromium, driven by Playwright).

The site is built by ``make docs`` (``make test-slow`` builds it first; CI with every page executed). The browser test
serves ``docs/_build/html`` on 127.0.0.1 and opens every page: no console error, no broken internal link, anchor or
image, a tutorial's figures rendered, search finding the ResIST page; it saves screenshots to
``docs/_build/screenshots``.
"""

from __future__ import annotations

import doctest
import functools
import http.server
import importlib
import inspect
import pathlib
import re
import shutil
import sys
import threading
import types
import urllib.parse

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
sys.path.insert(0, str(DOCS / "_ext"))
HTML = DOCS / "_build" / "html"
API = DOCS / "api"

# The modules whose ``__all__`` is the public API: ``import istjax`` and the submodules users import.
PUBLIC = ("istjax", "istjax.algorithms", "istjax.runtimes", "istjax.models", "istjax.data", "istjax.data.graphs",
          "istjax.graph", "istjax.xmc", "istjax.launch.config", "istjax.theory", "istjax.core.precision")


# --------------------------------------------------------------------------------------------------------------
# Every public symbol has a documented entry
def undocumented(module: types.ModuleType) -> list[str]:
    """The names in ``module.__all__`` with no documentation: a function, class or module without a docstring of its
    own, a constant without a ``#:`` comment (or a docstring after it) where it is assigned, which is what the docs'
    ``constants`` extension shows for it."""
    from constants import constant_doc  # docs/_ext/constants.py

    missing = []
    for name in module.__all__:
        obj = getattr(module, name)
        if inspect.ismodule(obj) or inspect.isclass(obj) or inspect.isroutine(obj) or isinstance(obj, type(len)):
            doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else getattr(obj, "__doc__", None)
            documented = bool((doc or "").strip())
        else:
            documented = bool("".join(constant_doc(module, name)).strip())
        if not documented:
            missing.append(name)
    return missing


def api_pages_missing(modules=PUBLIC) -> list[str]:
    """The public modules with no ``automodule`` page under docs/api/ (or one not in its toctree)."""
    index = (API / "index.rst").read_text()
    return [m for m in modules if not (API / f"{m}.rst").is_file()
            or f".. automodule:: {m}" not in (API / f"{m}.rst").read_text() or f"\n   {m}\n" not in index]


def test_every_public_name_has_a_docstring_and_every_public_module_a_page():
    problems = {m: undocumented(importlib.import_module(m)) for m in PUBLIC}
    assert {m: names for m, names in problems.items() if names} == {}, "document these (a docstring or #: comment)"
    assert api_pages_missing() == [], "add docs/api/<module>.rst with `.. automodule::` and list it in index.rst"


def test_the_documentation_check_can_fail():
    """The check above names an undocumented function, class and constant, and a module with no page."""
    fake = types.ModuleType("fake_public")
    fake.__all__ = ["f", "C", "K", "g", "WORKERS"]
    exec("def f(): pass\nclass C: pass\nK = 3\ndef g():\n    'documented'\n", fake.__dict__)
    fake.WORKERS = importlib.import_module("istjax").WORKERS  # a re-exported constant: documented where assigned
    assert undocumented(fake) == ["f", "C", "K"]
    assert api_pages_missing(("istjax", "istjax.no_such_module")) == ["istjax.no_such_module"]


@pytest.mark.slow
def test_the_built_reference_has_an_entry_for_every_public_name():
    """The built site's inventory holds ``module.name`` for every public name (or, for an object documented under
    another public name, that name): the reference a tutorial's cross-link lands on exists. Slow: it reads the built
    site, which ``make test-slow`` builds first."""
    from sphinx.util.inventory import InventoryFile

    if not (HTML / "objects.inv").is_file():
        pytest.fail(f"the site is not built ({HTML / 'objects.inv'} missing): run `make docs` first")

    with open(HTML / "objects.inv", "rb") as f:
        inv = InventoryFile.load(f, "", lambda base, uri: uri)
    names = {n for kind, entries in inv.data.items() if kind.startswith("py:") for n in entries} \
        if hasattr(inv, "data") else {n for kind, entries in inv.items() if kind.startswith("py:") for n in entries}
    documented_as = {}
    for m in PUBLIC:
        mod = importlib.import_module(m)
        for name in mod.__all__:
            documented_as.setdefault(id(getattr(mod, name)), set()).add(f"{m}.{name}")
    missing = [f"{m}.{n}" for m in PUBLIC for n in importlib.import_module(m).__all__
               if not documented_as[id(getattr(importlib.import_module(m), n))] & names]
    assert missing == []


# --------------------------------------------------------------------------------------------------------------
# Doctests: the package's docstrings and the pages' >>> examples
def _package_modules() -> list[str]:
    return sorted({".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
                   for p in (ROOT / "istjax").rglob("*.py") if ">>> " in p.read_text()})


@pytest.mark.parametrize("name", _package_modules())
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} doctest example(s) in {name} failed"


PAGES = sorted(DOCS.glob("*.md"))


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_page_examples_run(page):
    """A page's ``>>>`` examples (its code cells run when the site is built)."""
    result = doctest.testfile(str(page), module_relative=False, optionflags=doctest.ELLIPSIS |
                              doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.failed == 0


# --------------------------------------------------------------------------------------------------------------
# The built site in a real browser
class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def site():
    if not (HTML / "index.html").is_file():
        pytest.fail(f"the site is not built ({HTML / 'index.html'} missing): run `make docs` first "
                    "(`make test-slow` does)")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(HTML)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


@pytest.fixture(scope="module")
def browser():
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.fail("Debian's chromium is missing: `apt-get install chromium` (scripts/setup_env.sh does as root)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


def _pages() -> list[str]:
    return sorted(p.relative_to(HTML).as_posix() for p in HTML.rglob("*.html")
                  if not {"_modules", "_sources", "_static"} & set(p.relative_to(HTML).parts))


def _open(browser, url: str):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: errors.append(f"request failed: {r.url}"))
    page.on("response", lambda r: errors.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None)
    page.goto(url, wait_until="networkidle")
    return page, errors


def _broken_links(page, base: str) -> list[str]:
    """Internal links to a file that is not there, or to an anchor the target page lacks."""
    broken = []
    for href in set(page.eval_on_selector_all("a[href]", "els => els.map(e => e.href)")):
        if not href.startswith(base):
            continue
        parsed = urllib.parse.urlparse(href)
        target = HTML / urllib.parse.unquote(parsed.path[len(urllib.parse.urlparse(base).path):])
        if target.is_dir():
            target = target / "index.html"
        if not target.is_file():
            broken.append(href)
        elif parsed.fragment and target.suffix == ".html":
            ids = re.findall(r'\bid="([^"]+)"', target.read_text(errors="replace"))
            if urllib.parse.unquote(parsed.fragment) not in ids:
                broken.append(href)
    return sorted(broken)


def _broken_images(page) -> list[str]:
    return page.eval_on_selector_all(
        "img", "els => els.filter(e => !(e.complete && e.naturalWidth > 0)).map(e => e.src)")


@pytest.mark.slow
def test_every_page_loads_without_errors_broken_links_or_images(site, browser):
    pages = _pages()
    assert "index.html" in pages and "quickstart.html" in pages and len(pages) > 20
    problems = {}
    for rel in pages:
        page, errors = _open(browser, site + rel)
        found = errors + [f"broken link {h}" for h in _broken_links(page, site)] + \
            [f"broken image {s}" for s in _broken_images(page)]
        if found:
            problems[rel] = found
        page.close()
    assert problems == {}


@pytest.mark.slow
def test_tutorial_figures_render_and_search_finds_resist(site, browser):
    shots = DOCS / "_build" / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    page, errors = _open(browser, site + "index.html")
    assert "Independent Subnetwork Training" in page.inner_text("main")
    page.screenshot(path=str(shots / "index.png"))
    page.close()

    page, errors = _open(browser, site + "quickstart.html")
    figures = page.eval_on_selector_all(
        "div.cell_output img", "els => els.map(e => [e.src, e.naturalWidth, e.naturalHeight])")
    assert figures and all(w > 200 and h > 100 for _, w, h in figures), figures  # the accuracy-vs-bytes plot
    assert "bytes received per worker per round" in page.inner_text("main")  # a cell's printed output
    page.screenshot(path=str(shots / "quickstart.png"), full_page=True)
    page.close()
    assert errors == []

    page, errors = _open(browser, site + "search.html?q=ResIST")
    page.wait_for_selector("#search-results ul li a", timeout=30_000)
    hits = page.eval_on_selector_all("#search-results ul li a", "els => els.map(e => e.getAttribute('href'))")
    assert any(h.split("?")[0].split("#")[0].endswith("images.html") for h in hits), hits
    page.close()
