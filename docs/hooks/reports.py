"""MkDocs hook: the benchmark reports, put into the pages as they were last written.

A page writes ``<!-- report: bench/kafka.md -->``; the hook puts that file's text there (the
file the benchmark wrote, so that the tables on the site are the measured ones and never copied
by hand). Its headings go three levels down, under the page's; its links to files beside it
become plain text (the site holds the reports' text, not their folder).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"<!-- report: (?P<path>[^ >]+) -->")
HEADING = re.compile(r"^(#{1,4}) ", re.MULTILINE)
LOCAL_LINK = re.compile(r"!?\[(?P<text>[^\]]*)\]\((?!https?:|#)(?P<target>[^)]+)\)")


def report_text(path: str) -> str:
    """The report at ``path`` (from the repository's root), fit to sit inside a page."""
    source = ROOT / path
    if not source.is_file():
        raise FileNotFoundError(f"<!-- report: {path} -->: no such file {source}")
    text = source.read_text()
    text = HEADING.sub(lambda m: "#" * (len(m.group(1)) + 3) + " ", text)
    text = LOCAL_LINK.sub(lambda m: f"{m.group('text')} (`{m.group('target')}`)", text)
    return f"*From `{path}`, as the benchmark wrote it:*\n\n{text}"


def on_page_markdown(markdown: str, **_: Any) -> str:
    return MARKER.sub(lambda m: report_text(m.group("path")), markdown)
