"""The documentation site: it builds with warnings as errors, covers the public API and the
golden catalogue, and its pages work in a real browser (math rendered, links resolve, nothing
fetched from the network).

The site is built once per session into a temporary directory with the command that CI and
``docs/conf.py`` document. The browser test drives Debian's headless Chromium through
chromedriver (selenium). It is skipped when Chromium is absent, except where
``POSENC_REQUIRE_BROWSER=1`` (set by ``.ci/run``): there a missing browser is a failure.
"""

from __future__ import annotations

import html.parser
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
BUILD_COMMAND = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-b", "html", "-q"]
# Raw TeX that should have become rendered math: a control word, \( \) \[ \] or $$.
RAW_TEX = re.compile(r"\\[A-Za-z]{2,}|\\[()\[\]]|\$\$")


def _site_ext():
    spec = importlib.util.spec_from_file_location("posenc_site", ROOT / "docs" / "_ext" / "posenc_site.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    res = subprocess.run([*BUILD_COMMAND, "-d", str(out / "doctrees"), str(ROOT / "docs"), str(out / "html")],
                         capture_output=True, text=True, timeout=600, cwd=ROOT,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert res.returncode == 0, f"docs build failed:\n{res.stdout[-4000:]}\n{res.stderr[-8000:]}"
    return out / "html"


def _pages(site: Path) -> list[Path]:
    return sorted(p for p in site.rglob("*.html") if "_static" not in p.relative_to(site).parts)


class _Page(html.parser.HTMLParser):
    """Links, loaded resources and element ids of one HTML file, as written by Sphinx."""

    def __init__(self):
        super().__init__()
        self.links, self.resources, self.ids = [], [], set()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "a" and a.get("name"):
            self.ids.add(a["name"])
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])
        elif tag in ("script", "img") and a.get("src"):
            self.resources.append(a["src"])
        elif tag == "link" and a.get("href"):
            self.resources.append(a["href"])


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def _link_problems(site: Path, pages: dict) -> list[str]:
    """``pages``: html file -> (links, resources, ids), links resolved to absolute ``file:`` URLs
    or left as external URLs. Returns one line per broken internal link or remote resource."""
    root = site.resolve()
    problems = []
    for page, (links, resources, _ids) in pages.items():
        where = page.relative_to(root)
        for url in resources:
            if urlsplit(url).scheme not in ("", "file", "data"):
                problems.append(f"{where}: loads a remote resource {url}")
        for url in links + resources:
            parts = urlsplit(url)
            if parts.scheme not in ("file",):
                continue
            target = Path(unquote(parts.path))
            if not target.is_relative_to(root):
                problems.append(f"{where}: link leaves the site: {url}")
            elif not target.exists():
                problems.append(f"{where}: missing file {target.relative_to(root)}")
            elif parts.fragment and target.suffix == ".html":
                ids = pages[target][2] if target in pages else _parse(target).ids
                if unquote(parts.fragment) not in ids:
                    problems.append(f"{where}: no anchor #{parts.fragment} in {target.relative_to(root)}")
    return problems


def _absolute(page: Path, href: str) -> str:
    parts = urlsplit(href)
    if parts.scheme or href.startswith("//"):
        return href
    target = (page.parent / unquote(parts.path)).resolve() if parts.path else page.resolve()
    return target.as_uri() + (f"#{parts.fragment}" if parts.fragment else "")


@pytest.mark.slow  # builds the whole site once for this module (~20-40 s on 2 busy cores)
def test_site_builds_and_every_internal_link_resolves(site):
    pages = {}
    for path in _pages(site):
        p = _parse(path)
        pages[path.resolve()] = ([_absolute(path, h) for h in p.links], [_absolute(path, s) for s in p.resources], p.ids)
    assert len(pages) > 20
    assert not _link_problems(site, pages)
    # the assets are local copies: the theme's, and MathJax with its fonts
    assert (site / "_static" / "mathjax" / "tex-chtml.js").is_file()
    assert list((site / "_static" / "mathjax" / "output" / "chtml" / "fonts" / "woff-v2").glob("*.woff"))


def test_link_checker_reports_missing_files_anchors_and_remote_resources(tmp_path):
    (tmp_path / "a.html").write_text('<p id="here">x</p>')
    page = (tmp_path / "b.html").resolve()
    links = [(tmp_path / "a.html").resolve().as_uri() + "#here", (tmp_path / "a.html").resolve().as_uri() + "#gone",
             (tmp_path / "nope.html").resolve().as_uri(), "https://example.org/page"]
    problems = _link_problems(tmp_path, {page: (links, ["https://cdn.example.org/mathjax.js"], set())})
    assert len(problems) == 3
    assert any("#gone" in p for p in problems) and any("nope.html" in p for p in problems)
    assert any("remote resource" in p for p in problems)


@pytest.mark.slow
def test_api_reference_covers_every_public_name_and_links_golden_cases(site):
    ext = _site_ext()
    modules = ext.public_modules()
    assert "posenc_np.rope" in modules and "posenc_np.golden.catalogue" in modules
    for modname in modules:
        ids = _parse(site / "reference" / "api" / f"{modname}.html").ids
        missing = [n for n, _ in ext.module_members(modname) if f"{modname}.{n}" not in ids]
        assert not missing, f"{modname}: no API entry for {missing}"
    from posenc_np.golden import catalogue

    for spec in catalogue.cases():
        page = site / "reference" / "golden" / f"{spec.encoding}.html"
        assert spec.name.replace(".", "-").replace("_", "-") in _parse(page).ids, spec.name
    # function -> golden page, family page -> function, golden page -> function
    rope_api = (site / "reference" / "api" / "posenc_np.rope.html").read_text()
    assert 'href="../golden/rope.apply.html#golden-rope-apply"' in rope_api
    assert 'href="reference/api/posenc_np.rope.html#posenc_np.rope.apply"' in (site / "rope.html").read_text()
    golden_page = (site / "reference" / "golden" / "rope.apply.html").read_text()
    assert "../api/posenc_np.rope.html#posenc_np.rope.apply" in golden_page


# --------------------------------------------------------------------------- the browser

_COLLECT = """
const done = arguments[arguments.length - 1];
const ready = (window.MathJax && MathJax.startup && MathJax.startup.promise) || Promise.resolve();
ready.then(() => {
  const clone = document.body.cloneNode(true);
  clone.querySelectorAll('pre, code, script, style, textarea, mjx-container, .highlight').forEach(e => e.remove());
  const maths = Array.from(document.querySelectorAll('.math'));
  const shown = Array.from(document.querySelectorAll('mjx-container')).filter(c => c.offsetParent !== null);
  done({
    text: clone.textContent,
    math: maths.length,
    rendered: document.querySelectorAll('mjx-container').length,
    unrendered: maths.filter(m => !m.querySelector('mjx-container')).map(m => m.textContent.slice(0, 80)),
    errors: Array.from(document.querySelectorAll('mjx-merror')).map(e => e.getAttribute('data-mjx-error') || e.textContent),
    empty: shown.filter(c => c.getBoundingClientRect().width === 0).length,
    ids: Array.from(document.querySelectorAll('[id]')).map(e => e.id)
           .concat(Array.from(document.querySelectorAll('a[name]')).map(e => e.name)),
    links: Array.from(document.querySelectorAll('a[href]')).map(a => a.href),
    resources: Array.from(document.querySelectorAll('script[src], img[src], link[href]')).map(e => e.src || e.href),
  });
}).catch(e => done({error: String(e)}));
"""


def _browser_paths():
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    have_selenium = importlib.util.find_spec("selenium") is not None
    if chromium and driver and have_selenium:
        return chromium, driver
    why = f"chromium={chromium}, chromedriver={driver}, selenium installed={have_selenium}"
    if os.environ.get("POSENC_REQUIRE_BROWSER") == "1":
        pytest.fail(f"POSENC_REQUIRE_BROWSER=1 but the browser is not available ({why})")
    pytest.skip(f"headless Chromium not available ({why}); .ci/run installs it")


@pytest.mark.slow  # one browser session over every page (~15-30 s)
def test_pages_in_headless_chromium_render_math_and_resolve_links(site, tmp_path):
    chromium, chromedriver = _browser_paths()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1280,1000",
                f"--user-data-dir={tmp_path / 'profile'}"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=opts, service=Service(executable_path=chromedriver))
    problems, seen, math_total = [], {}, 0
    try:
        driver.set_script_timeout(30)
        for path in _pages(site):
            where = path.relative_to(site)
            driver.get(path.resolve().as_uri())
            info = driver.execute_async_script(_COLLECT)
            if "error" in info:
                problems.append(f"{where}: {info['error']}")
                continue
            math_total += info["rendered"]
            raw = sorted(set(RAW_TEX.findall(info["text"])))
            problems += [f"{where}: raw TeX left in the text: {raw}"] if raw else []
            problems += [f"{where}: math not rendered: {m!r}" for m in info["unrendered"]]
            problems += [f"{where}: MathJax error: {e}" for e in info["errors"]]
            problems += [f"{where}: {info['empty']} rendered formulas have zero width"] if info["empty"] else []
            problems += [f"{where}: console: {e['message']}" for e in driver.get_log("browser")
                         if e["level"] == "SEVERE"]
            seen[path.resolve()] = (info["links"], info["resources"], set(info["ids"]))
    finally:
        driver.quit()
    problems += _link_problems(site, seen)
    assert not problems, "\n".join(problems[:50])
    assert math_total > 100, f"only {math_total} formulas rendered on the whole site"
