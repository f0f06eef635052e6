"""The built site renders: every page loads in headless Chromium with a non-empty main.

Builds the site with ``mkdocs build --strict`` into ``tmp_path``, serves it with
``http.server`` on a free localhost port in a thread, and loads every page with
``chromium --headless --dump-dom``; screenshots of the home page and one internals page
are written to ``tmp_path``. Skipped when Debian's ``chromium`` is not installed (CI
installs it).
"""

from __future__ import annotations

import functools
import html.parser
import http.server
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = next((p for p in (shutil.which("chromium"), "/usr/bin/chromium") if p and Path(p).exists()), None)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--virtual-time-budget=5000"]

pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")


class _MainText(html.parser.HTMLParser):
    """Collect the text inside the page's ``<article>`` (mkdocs-material's main content)."""

    def __init__(self) -> None:
        super().__init__()
        self.depth, self.text = 0, []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "article" or self.depth:
            self.depth += 1

    def handle_endtag(self, tag: str) -> None:
        if self.depth:
            self.depth -= 1

    def handle_data(self, data: str) -> None:
        if self.depth:
            self.text.append(data)


def _chromium(*args: str, timeout: float = 60) -> str:
    out = subprocess.run([CHROMIUM, *FLAGS, *args], capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"chromium {args}: exit {out.returncode}\n{out.stderr[-2000:]}"
    return out.stdout


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory):
    site_dir = tmp_path_factory.mktemp("site")
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(site_dir)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert build.returncode == 0, f"mkdocs build --strict failed:\n{build.stderr[-4000:]}"
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site_dir))
    handler.log_message = lambda *a, **k: None  # type: ignore[method-assign]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield site_dir, f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.mark.timeout(600)
def test_every_page_has_main_content(site):
    site_dir, base = site
    pages = sorted(p.relative_to(site_dir) for p in site_dir.rglob("index.html") if p.parent.name != "search")
    assert pages, "the build produced no page"
    empty = []
    for page in pages:
        url = base + str(page.parent).replace("\\", "/") + "/" if str(page.parent) != "." else base
        parser = _MainText()
        parser.feed(_chromium("--dump-dom", url))
        if len("".join(parser.text).strip()) < 20:
            empty.append(url)
    assert not empty, f"pages with an empty main content: {empty}"


@pytest.mark.timeout(300)
def test_screenshots(site, tmp_path: Path):
    _, base = site
    for name, url in (("home.png", base), ("internals-collector.png", base + "internals/collector/")):
        shot = tmp_path / name
        _chromium(f"--screenshot={shot}", "--window-size=1280,2000", url)
        assert shot.is_file() and shot.stat().st_size > 10_000, f"{name}: no screenshot written"
