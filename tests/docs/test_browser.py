"""The documentation site in a real browser: headless Chromium (the distribution's package, from
``scripts/deploy_tools.chromium``) loads the home page, the query language page and the Helm page
(the chart's dashboard, its picture, and alerts) from the built site served over HTTP, and each
must render as the Material theme: the page's heading, the theme's header and navigation, its
stylesheet, script and pictures served and run, no Markdown left raw. A screenshot of each page
is kept in the test's temporary directory and copied to ``test-output/screenshots/`` in the
repository."""

from __future__ import annotations

import functools
import http.server
import os
import re
import shutil
import signal
import struct
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import urljoin, urlsplit

import pytest
from PIL import Image

from scripts import deploy_tools
from tests.docs.conftest import build_site

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "test-output" / "screenshots"
#: page (the Markdown file's stem) -> its URL path in the built site
PAGES = {"index": "", "query-language": "query-language/", "helm": "helm/"}
WINDOW = (1280, 2000)
TIMEOUT = 60
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--hide-scrollbars",
    f"--window-size={WINDOW[0]},{WINDOW[1]}",
    # Only the local server resolves: the theme's Google Fonts link fails at once, the same with
    # or without a network, so the page renders the same everywhere (with the fallback font).
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
)


@dataclass
class Served:
    """The built site served on 127.0.0.1: its directory, base URL and every request answered
    (path, HTTP status), in order."""

    root: Path
    base_url: str
    requests: list[tuple[str, int]] = field(default_factory=list)


class _Handler(http.server.SimpleHTTPRequestHandler):
    """Serves the site quietly, recording each request in ``served`` (set by a subclass)."""

    served: Served

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        self.served.requests.append((urlsplit(self.path).path, int(code)))

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def chromium() -> Path:
    try:
        return deploy_tools.chromium()
    except deploy_tools.DeployToolsError as exc:
        pytest.fail(f"cannot obtain chromium: {exc}", pytrace=False)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """The site built once (``mkdocs build --strict``, as ``test_site.py`` does) and served by
    ``http.server`` in a thread: MkDocs pages load their assets by relative URLs."""
    out = build_site(tmp_path_factory.mktemp("site"))
    site = Served(root=out, base_url="")
    handler = type("Handler", (_Handler,), {"served": site})
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(handler, directory=str(out))
    )
    site.base_url = f"http://127.0.0.1:{server.server_address[1]}/"
    thread = threading.Thread(target=server.serve_forever, name="site-server", daemon=True)
    thread.start()
    try:
        yield site
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("screenshots")


def run_chromium(chromium: Path, scratch: Path, *args: str) -> str:
    """``chromium FLAGS ARGS`` with a fresh profile, in a session of its own (killed whole after
    :data:`TIMEOUT` seconds): its stdout. Its stderr (D-Bus and GPU noise in a container) is shown
    only when it fails."""
    profile = tempfile.mkdtemp(prefix="chromium-profile-", dir=scratch)
    command = [str(chromium), *FLAGS, f"--user-data-dir={profile}", *args]
    with subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            pytest.fail(f"chromium {' '.join(args)} did not finish in {TIMEOUT} s", pytrace=False)
    assert proc.returncode == 0, (
        f"chromium {' '.join(args)} exited {proc.returncode}:\n{stderr.strip()[-3000:]}"
    )
    return stdout


class Dom(HTMLParser):
    """What the checks read from a serialized DOM: the visible text (no scripts or styles), the
    text of each ``<h1>``, every class used, and the ``<html>`` element's classes."""

    def __init__(self, markup: str) -> None:
        super().__init__(convert_charrefs=True)
        self.text: list[str] = []
        self.h1: list[str] = []
        self.classes: set[str] = set()
        self.html_classes: set[str] = set()
        self._hidden = 0
        self._in_h1 = False
        self.feed(markup)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        classes = set((dict(attrs).get("class") or "").split())
        self.classes |= classes
        if tag == "html":
            self.html_classes = classes
        elif tag in ("script", "style"):
            self._hidden += 1
        elif tag == "h1":
            self._in_h1 = True
            self.h1.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style"):
            self._hidden = max(0, self._hidden - 1)
        elif tag == "h1":
            self._in_h1 = False

    def handle_data(self, data: str) -> None:
        if self._hidden:
            return
        self.text.append(data)
        if self._in_h1:
            self.h1[-1] += data


def expected_h1(page: str) -> str:
    """The page's title: its Markdown's first ``# `` line."""
    for line in (ROOT / "docs" / f"{page}.md").read_text().splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    raise AssertionError(f"docs/{page}.md has no `# ` title")


def theme_assets(built: str) -> list[str]:
    """The theme's own stylesheet and script as the built page links them (relative URLs)."""
    css = re.findall(r'<link rel="stylesheet" href="([^"]*assets/stylesheets/main\.[^"]*)"', built)
    js = re.findall(r'<script src="([^"]*assets/javascripts/bundle\.[^"]*)"', built)
    assert css and js, "the built page does not link the Material theme's main.css and bundle.js"
    return [*css, *js]


def check_screenshot(shot: Path) -> None:
    data = shot.read_bytes()
    assert data[:8] == PNG_MAGIC, f"{shot} is not a PNG"
    assert len(data) > 20_000, f"{shot} is only {len(data)} bytes: a blank page?"
    assert data[12:16] == b"IHDR"
    assert struct.unpack(">II", data[16:24]) == WINDOW, "the screenshot is not the window's size"
    with Image.open(shot) as image:
        rgb = image.convert("RGB")
        colours = rgb.getcolors(maxcolors=1 << 16)  # None: more colours than that
        assert colours is None or len(colours) > 16, f"{shot} has {len(colours)} colours only"
        header, below = rgb.getpixel((5, 5)), rgb.getpixel((5, 100))
    # The Material header is a coloured bar above a light page: the theme's stylesheet applied.
    assert header != (255, 255, 255) and header != below, (
        f"{shot}: no coloured header bar (top {header}, below it {below})"
    )


@pytest.mark.parametrize("page", list(PAGES))
def test_the_page_renders_in_chromium(
    page: str,
    chromium: Path,
    served: Served,
    screenshots: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = served.base_url + PAGES[page]
    first_request = len(served.requests)
    shot = screenshots / f"{page}.png"
    run_chromium(chromium, tmp_path, f"--screenshot={shot}", url)
    markup = run_chromium(chromium, tmp_path, "--dump-dom", url)

    kept = SCREENSHOTS / shot.name
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(shot, kept)
    with capsys.disabled():
        print(f"\nscreenshot of {url}: {shot} ({shot.stat().st_size} bytes), copied to {kept}")

    dom = Dom(markup)
    title = expected_h1(page)
    assert [h.replace("¶", "").strip() for h in dom.h1] == [title], (
        f"{page}: the headings are {dom.h1}, not the page's title {title!r}"
    )
    assert {"md-header", "md-nav", "md-content"} <= dom.classes, f"{page}: no Material layout"
    # the theme's script ran (it turns the static page's `no-js` into `js`)
    assert "js" in dom.html_classes and "no-js" not in dom.html_classes, dom.html_classes

    answered = served.requests[first_request:]
    assert (urlsplit(url).path, 200) in answered, answered
    built = (served.root / PAGES[page] / "index.html").read_text()
    for asset in theme_assets(built):
        path = urlsplit(urljoin(url, asset)).path
        assert (path, 200) in answered, f"{page}: {path} was not served to chromium: {answered}"

    # every picture of the page (the Helm page's: the dashboard) loaded by the browser
    for image in re.findall(r'<img [^>]*src="([^"]+)"', built):
        path = urlsplit(urljoin(url, image)).path
        assert (path, 200) in answered, f"{page}: the image {path} was not served: {answered}"
    if page == "helm":
        assert re.search(r'<img [^>]*src="[^"]*images/dashboard\.png"', built), "no dashboard"

    text = "".join(dom.text)
    for leaked in ("<!-- settings", "<!-- report", "&lt;!-- settings", "&lt;!-- report"):
        assert leaked not in markup, f"{page}: a raw {leaked!r} marker is on the page"
    assert "```" not in text, f"{page}: a Markdown code fence was left raw"

    check_screenshot(shot)
