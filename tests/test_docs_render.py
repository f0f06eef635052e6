"""The built site renders offline in headless Chromium, page by page.

Builds the site once with ``mkdocs build --strict`` into a temporary directory, serves it
with ``http.server`` on a free ``127.0.0.1`` port in a thread, and loads every page with
playwright driving Debian's ``chromium`` (one browser, one context, one tab). A page fails on a
console error, an uncaught page error, a failed request or a response >= 400, any request
to a host other than the local server (the site must work without the internet: fonts
off, mermaid vendored under ``docs/javascripts/``), or an empty main content; on pages
with mermaid fences every diagram must become an SVG. A page also fails when it is wider
than the 1280 px viewport (it would scroll sideways) or when a diagram had to be shrunk
below 0.6 of its own size to fit the content column (its text is then unreadable).
Screenshots of the home page and of one internals page go to ``$RL_TEST_ARTIFACTS``
(default ``<repo>/artifacts/docs/``).
The browser tests are skipped, with the reason, when ``chromium`` is not installed
(``.ci/run`` installs it).
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium")
ARTIFACTS = Path(os.environ.get("RL_TEST_ARTIFACTS", ROOT / "artifacts" / "docs"))
MERMAID = ROOT / "docs" / "javascripts" / "mermaid-11.17.2.min.js"
MERMAID_HOOK = ROOT / "tools" / "mkdocs_hooks" / "vendored_mermaid.py"
MERMAID_SHA256 = "581ed7d74bd9048d0e3a91363927d72ef22942d7722546b27f7cc29e35390eb8"
SHOTS = {"home.png": "", "internals-collector.png": "internals/collector/"}
# mkdocs-material renders each diagram into a *closed* shadow root; open it for the test
OPEN_SHADOW_ROOTS = """
const attach = Element.prototype.attachShadow;
Element.prototype.attachShadow = function (init) {\
 return attach.call(this, {...init, mode: "open"}); };
"""
DIAGRAMS_DONE = """n => {
  const done = [...document.querySelectorAll("div.mermaid")].filter(
    d => d.shadowRoot && d.shadowRoot.querySelector("svg"));
  return done.length >= n && document.querySelectorAll("pre.mermaid").length === 0;
}"""
DIAGRAM_TIMEOUT = 30.0  # seconds for a page's diagrams to become SVGs
VIEWPORT = {"width": 1280, "height": 900}
MIN_DIAGRAM_SCALE = 0.6  # a diagram drawn smaller than this share of its own size is unreadable
# how wide the page is, and how much each diagram was shrunk to fit the content column
LAYOUT = """() => {
  const scales = [...document.querySelectorAll("div.mermaid")].map(d => {
    const svg = d.shadowRoot && d.shadowRoot.querySelector("svg");
    const natural = svg && svg.viewBox && svg.viewBox.baseVal && svg.viewBox.baseVal.width;
    return natural ? svg.getBoundingClientRect().width / natural : 1;
  });
  return {width: document.documentElement.scrollWidth, viewport: window.innerWidth, scales};
}"""


needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)"
)


def test_vendored_mermaid_is_the_pinned_release():
    digest = hashlib.sha256(MERMAID.read_bytes()).hexdigest()
    assert digest == MERMAID_SHA256, (
        f"{MERMAID.name}: sha256 {digest}, expected {MERMAID_SHA256} (see its README)"
    )
    assert f'"{MERMAID.relative_to(ROOT / "docs").as_posix()}"' in MERMAID_HOOK.read_text()
    assert MERMAID_HOOK.relative_to(ROOT).as_posix() in (ROOT / "mkdocs.yml").read_text()


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Quiet, and lets the browser cache the theme's assets and mermaid between pages."""

    def log_message(self, format: str, *args: object) -> None:
        pass

    def end_headers(self) -> None:
        self.send_header("Cache-Control", "max-age=600")
        super().end_headers()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """The strict build, served on 127.0.0.1; yields (site directory, base URL)."""
    site_dir = tmp_path_factory.mktemp("site")
    build = subprocess.run(
        # no -q: with it mkdocs does not count warnings, and --strict passes a broken link
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=150,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert build.returncode == 0, f"mkdocs build --strict failed:\n{build.stderr[-4000:]}"
    handler = functools.partial(_Handler, directory=str(site_dir))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield site_dir, f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture(scope="module")
def browser_context(site: tuple[Path, str]):
    """One headless Chromium and one context for every page of the module."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            context = browser.new_context(viewport=VIEWPORT)
            context.add_init_script(OPEN_SHADOW_ROOTS)
            yield context
            context.close()
        finally:
            browser.close()


def _pages(site_dir: Path) -> list[tuple[str, int]]:
    """Every page's path relative to the site root, with its number of mermaid fences."""
    pages = []
    for html in sorted(site_dir.rglob("index.html")):
        rel = html.parent.relative_to(site_dir).as_posix()
        if rel == "search":
            continue
        pages.append(
            ("" if rel == "." else rel + "/", html.read_text().count('<pre class="mermaid">'))
        )
    return pages


class _Tab:
    """One browser tab, reused for every page, that records what goes wrong in each load."""

    def __init__(self, context, base: str) -> None:
        self.host, self.problems = urlsplit(base).netloc, []
        self.page = page = context.new_page()
        page.on("console", lambda m: m.type == "error" and self._add(f"console error: {m.text}"))
        page.on(
            "pageerror", lambda e: self._add(f"page error: {' / '.join(str(e).splitlines()[:3])}")
        )
        page.on("requestfailed", lambda r: self._add(f"request failed: {r.url} ({r.failure})"))
        page.on("response", lambda r: r.status >= 400 and self._add(f"HTTP {r.status}: {r.url}"))
        page.on("request", self._check_host)

    def _add(self, problem: str) -> None:
        self.problems.append(problem)

    def _check_host(self, request) -> None:
        url = urlsplit(request.url)
        if url.scheme in ("http", "https") and url.netloc != self.host:
            self._add(f"external request: {request.url}")

    def load(self, url: str, diagrams: int) -> list[str]:
        """Load ``url``; every way it failed to render, as messages (none: it rendered)."""
        self.page.goto("about:blank")  # the previous page's late events land before the reset
        self.problems = []
        self.page.goto(url, wait_until="load", timeout=30_000)
        text = self.page.locator("article.md-content__inner").first.inner_text(timeout=5_000)
        if len(text.strip()) < 20:
            self._add(f"empty main content ({len(text.strip())} characters)")
        if diagrams and not self._wait_for_diagrams(diagrams):
            self._add(f"mermaid: {diagrams} diagram(s) on the page, not all rendered to SVG")
        self._check_layout()
        return list(self.problems)

    def _check_layout(self) -> None:
        """The page fits the viewport (no horizontal scroll) and every diagram is readable."""
        layout = self.page.evaluate(LAYOUT)
        if layout["width"] > layout["viewport"]:
            self._add(
                f"page is {layout['width']} px wide, "
                f"wider than the {layout['viewport']} px viewport"
            )
        for i, scale in enumerate(layout["scales"]):
            if scale < MIN_DIAGRAM_SCALE:
                self._add(
                    f"diagram {i + 1} is drawn at {scale:.2f} of its size (below "
                    f"{MIN_DIAGRAM_SCALE}): too wide to read at page width"
                )

    def _wait_for_diagrams(self, diagrams: int) -> bool:
        """True once every diagram is an SVG; False on a timeout or as soon as a page error
        (a diagram that does not parse throws one) is recorded."""
        deadline = time.monotonic() + DIAGRAM_TIMEOUT
        while time.monotonic() < deadline:
            if self.page.evaluate(DIAGRAMS_DONE, diagrams):
                return True
            if any(p.startswith("page error") for p in self.problems):
                return False
            self.page.wait_for_timeout(100)
        return False


@pytest.fixture(scope="module")
def tab(site: tuple[Path, str], browser_context) -> Iterator[_Tab]:
    tab = _Tab(browser_context, site[1])
    yield tab
    tab.page.close()


@needs_chromium
@pytest.mark.timeout(300)
def test_every_page_renders_offline(site, tab):
    site_dir, base = site
    pages = _pages(site_dir)
    assert len(pages) > 10, f"the build produced only {pages}"
    assert sum(n for _, n in pages) > 0, (
        "no page has a mermaid diagram: the diagram check checks nothing"
    )
    failures = {}
    for rel, diagrams in pages:
        problems = tab.load(base + rel, diagrams)
        if problems:
            failures[rel or "/"] = problems
    assert not failures, "pages that do not render cleanly:\n" + "\n".join(
        f"  {rel}: {problems}" for rel, problems in failures.items()
    )


@needs_chromium
@pytest.mark.timeout(120)
def test_screenshots(site, tab):
    site_dir, base = site
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    counts = dict(_pages(site_dir))
    for name, rel in SHOTS.items():
        assert tab.load(base + rel, counts[rel]) == [], f"{rel} does not render cleanly"
        shot = ARTIFACTS / name
        tab.page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 10_000, (
            f"{shot}: {shot.stat().st_size} bytes, expected a real page"
        )


@needs_chromium
@pytest.mark.timeout(120)
def test_layout_check_sees_a_page_wider_than_the_viewport(site, tab):
    site_dir, base = site
    assert tab.load(base + "glossary/", 0) == []
    tab.page.evaluate("document.body.appendChild(Object.assign(document.createElement('div'),"
                      " {style: 'width: 3000px; height: 10px'}))")
    tab.problems = []
    tab._check_layout()
    assert any("wider than the 1280 px viewport" in p for p in tab.problems), tab.problems


@needs_chromium
@pytest.mark.timeout(120)
def test_layout_check_sees_a_shrunk_diagram(site, tab):
    site_dir, base = site
    rel = "internals/multiprocess/"
    assert tab.load(base + rel, dict(_pages(site_dir))[rel]) == []
    # a content column a third as wide: the diagram is scaled down to fit it
    tab.page.evaluate("document.querySelector('div.mermaid').style.width = '230px'")
    tab.problems = []
    tab._check_layout()
    assert any("too wide to read at page width" in p for p in tab.problems), tab.problems
