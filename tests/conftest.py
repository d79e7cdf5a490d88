"""Shared test configuration: deterministic hypothesis runs in CI, the datasets folder, a real
schema registry (one per test process, started on first use), and the backstop for a test that
hangs where no signal reaches it.

A test that runs past pytest-timeout's ``timeout`` (pyproject.toml) fails with every thread's
stack and is run once more (``--only-rerun``): a hang is reported, never silent, and
one that does not come back does not cost the run. A hang that the timeout's signal cannot
interrupt (a call blocked in C) meets the backstop: after ``BACKSTOP`` seconds faulthandler
writes every thread's stack to a file and ends the test process; xdist reports the crash, the
test is run once more (the same), and the session's summary prints the file.
"""

from __future__ import annotations

import faulthandler
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from scripts.registry_local import RegistryLocalError, SchemaRegistry

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "dev", deadline=None, print_blob=True, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))

DATASETS = Path(__file__).resolve().parents[1].parent / "shared" / "datasets"
#: Where a test process stuck past the backstop leaves its stacks (one file per process).
HANGS = Path(__file__).resolve().parents[1] / ".cache" / "test-hangs"
#: Seconds: past pytest-timeout's ``timeout`` (600), so that its failure comes first.
BACKSTOP = 900


def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):  # (the controller, or a run without xdist)
        for stale in HANGS.glob("*.txt"):
            stale.unlink()


@pytest.fixture(autouse=True)
def _hang_backstop(request: pytest.FixtureRequest) -> Iterator[None]:
    HANGS.mkdir(parents=True, exist_ok=True)
    path = HANGS / f"{os.getpid()}.txt"
    with path.open("w") as file:
        file.write(f"{request.node.nodeid} ran past {BACKSTOP} s; its process's threads:\n")
        file.flush()
        faulthandler.dump_traceback_later(BACKSTOP, exit=True, file=file)
        try:
            yield
        finally:
            faulthandler.cancel_dump_traceback_later()
    path.unlink(missing_ok=True)  # (a session started beside this one clears the stale)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item) -> Iterator[None]:
    """A timeout's failure, kept for the summary (a worker's rerun report shows no traceback)."""
    report = yield
    if report.failed and "from pytest-timeout" in str(report.longrepr):  # type: ignore[attr-defined]
        HANGS.mkdir(parents=True, exist_ok=True)
        path = HANGS / f"timeout-{os.getpid()}-{report.when}.txt"  # type: ignore[attr-defined]
        path.write_text(f"{item.nodeid} timed out:\n{report.longrepr}\n")  # type: ignore[attr-defined]
    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for hang in sorted(HANGS.glob("*.txt")):
        terminalreporter.section(f"a test that hung ({hang.name})")
        terminalreporter.write(hang.read_text(errors="replace"))


@pytest.fixture(scope="session")
def datasets() -> Path:
    """The SNAP datasets shipped beside the repository (tests skip when they are absent)."""
    if not DATASETS.is_dir():
        pytest.skip(f"datasets not found at {DATASETS}")
    return DATASETS


@pytest.fixture(scope="session")
def schema_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SchemaRegistry]:
    """Apicurio Registry (Confluent-compatible API, in memory) run by ``scripts/registry_local``;
    tests use subjects of their own. Never skipped: without one (no Java 21+, no Maven the
    first time) a test that needs it fails with the reason."""
    registry = SchemaRegistry(run_dir=tmp_path_factory.mktemp("registry"))
    try:
        registry.start()
    except RegistryLocalError as exc:
        pytest.fail(f"no schema registry for the tests: {exc}", pytrace=False)
    try:
        yield registry
    finally:
        registry.close()
