"""The documentation site: it builds with ``mkdocs build --strict`` (a broken link or a page
missing from the navigation fails), its settings tables are generated from the settings model
(every setting on the reference page, none the model lacks), and every query it shows parses
and plans (``subgraph-monitor explain``), as a reader would run it."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from monitor.cli import main
from monitor.service.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs").glob("*.md"))
QUERY_BLOCK = re.compile(r"^```prolog\n(.*?)^```$", re.S | re.M)


def test_the_site_builds_strict_with_every_page(site: Path) -> None:
    for page in PAGES:
        built = site / ("index.html" if page.stem == "index" else f"{page.stem}/index.html")
        assert built.is_file(), f"{page.name} was not built"


def test_the_settings_reference_is_the_settings_model(site: Path) -> None:
    html = (site / "settings" / "index.html").read_text()
    shown = set(re.findall(r"<code>SGM_([A-Z0-9_]+)</code>", html))
    assert shown == {name.upper() for name in Settings.model_fields}
    assert "&lt;!-- settings" not in html and "<!-- settings" not in html


def test_the_performance_page_holds_the_reports_as_written(site: Path) -> None:
    """The benchmark tables are the reports' own: each report's first table row is on the
    page, and no marker is left (a report that is missing fails the build)."""
    html = (site / "performance" / "index.html").read_text()
    assert "<!-- report" not in html and "&lt;!-- report" not in html
    for report in re.findall(r"<!-- report: (\S+) -->", (ROOT / "docs/performance.md").read_text()):
        rows = [line for line in (ROOT / report).read_text().splitlines() if line.startswith("| ")]
        first = rows[2] if len(rows) > 2 else None  # (after the header and its rule)
        if first is not None:
            cell = first.split("|")[1].strip().strip("*`")
            assert cell in html, f"{report}: {cell!r} is not on the performance page"


def query_blocks() -> list[tuple[str, str]]:
    found = []
    for page in [*PAGES, ROOT / "README.md"]:
        for i, block in enumerate(QUERY_BLOCK.findall(page.read_text())):
            found.append((f"{page.name}#{i}", block))
    return found


def test_the_pages_show_queries() -> None:
    assert len(query_blocks()) >= 6


@pytest.mark.parametrize(("where", "text"), query_blocks(), ids=[w for w, _ in query_blocks()])
def test_every_query_shown_parses_and_plans(where: str, text: str) -> None:
    done = CliRunner().invoke(main, ["explain", text])
    assert done.exit_code == 0, f"{where}: {done.output}"
    assert done.output.count("# ") >= text.count(":="), done.output


SH_BLOCK = re.compile(r"^```sh\n(.*?)^```$", re.S | re.M)
#: Commands the pages show that the tests do not run here, each with the reason (any other
#: ``subgraph-monitor`` command shown must run and exit 0).
NOT_RUN = {
    "run --query triangle --edges graph.txt.gz": "a stand-in for the reader's own graph",
    "run --query rules.q --edges -": "a stand-in for the reader's own rules and events",
    "run --query examples/fraud.q --preload base.txt": "a stand-in for the reader's snapshot",
    "serve": "needs a broker: the Kafka tests run serve (tests/kafka)",
}


def shown_commands() -> list[tuple[str, str]]:
    """Every ``subgraph-monitor`` command in the pages' shell blocks (continuations joined,
    comments dropped): (page, the arguments after the program)."""
    found = []
    for page in [*PAGES, ROOT / "README.md"]:
        for block in SH_BLOCK.findall(page.read_text()):
            for line in block.replace("\\\n", " ").splitlines():
                line = line.split(" # ")[0].strip()
                if line.startswith("#"):
                    continue
                for part in line.split("|"):
                    words = [w for w in part.split() if not re.match(r"^[A-Z_]+=", w)]
                    if words and words[0].split("/")[-1] == "subgraph-monitor":
                        found.append((page.name, " ".join(words[1:])))
    return found


def shown_command(arguments: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``subgraph-monitor ARGUMENTS`` run in ``cwd`` as a reader would."""
    return subprocess.run(
        [sys.executable, "-m", "monitor", *shlex.split(arguments)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def test_every_command_shown_runs_or_says_why_not(tmp_path: Path) -> None:
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    shown = shown_commands()
    assert len(shown) >= 6
    ran = []
    for page, arguments in shown:
        if any(arguments.startswith(skip) for skip in NOT_RUN):
            continue
        datasets = ROOT.parent / "shared" / "datasets"
        if "../shared/datasets/" in arguments and not datasets.is_dir():
            continue  # (the SNAP graphs are beside the repository, when they are)
        arguments = arguments.replace("../shared/", f"{ROOT.parent}/shared/")
        done = shown_command(arguments, tmp_path)
        assert done.returncode == 0, f"{page}: subgraph-monitor {arguments}\n{done.stderr[-2000:]}"
        ran.append(arguments)
    assert len(ran) >= 4, ran  # (five with the SNAP graphs beside the repository)
    listed = {skip for skip in NOT_RUN if any(a.startswith(skip) for _, a in shown)}
    assert listed == set(NOT_RUN), f"NOT_RUN names commands no page shows: {set(NOT_RUN) - listed}"


def test_the_readme_example_prints_what_the_readme_shows() -> None:
    text = (ROOT / "README.md").read_text()
    example = text.split("## The example in ten lines", 1)[1]
    (command,) = [a for page, a in shown_commands() if page == "README.md" and "payments" in a]
    first = re.search(r"^```json\n(.*?)\n```$", example, re.S | re.M)
    assert first is not None
    done = shown_command(command, ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == first.group(1)
