"""The end-to-end runs' reading of ``subgraph-monitor run``'s summary on stderr."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from bench.end_to_end import ROOT, command, summary

SUMMARY = """\
subgraph-monitor: 100,000 updates read (50%), 10 epochs, 12 match deltas, 80,000 updates/s
subgraph-monitor: updates read 200,000, applied 199,990, ignored: late 10
subgraph-monitor: bad input lines skipped 0
subgraph-monitor: epochs 20
subgraph-monitor: event time: watermark 2026-01-01T23:59:54.057Z, expired 1,234, late 10
subgraph-monitor: query pass_through: +309,494 -293,022 match deltas
subgraph-monitor: query ring: +7 -0 match deltas
subgraph-monitor: elapsed 2.62 s: 76,405 updates/s, 118,234 match deltas/s
"""


def test_the_summary_is_read() -> None:
    updates, applied, epochs, elapsed, deltas = summary(SUMMARY)
    assert (updates, applied, epochs, elapsed) == (200_000, 199_990, 20, 2.62)
    assert deltas == {"pass_through": (309_494, 293_022), "ring": (7, 0)}


def test_a_summary_without_its_lines_is_an_error_naming_the_line() -> None:
    with pytest.raises(ValueError, match="no 'elapsed' line"):
        summary(SUMMARY.replace("elapsed", "took"))


def test_the_command_starts_the_service() -> None:
    done = subprocess.run([*command(), "--version"], capture_output=True, text=True, check=True)
    assert done.stdout.startswith("subgraph-monitor")


def test_the_peak_rss_is_the_commands_own() -> None:
    """A child's ``ru_maxrss`` starts from its parent's RSS: measured through a fresh process,
    a command started by a large one (512 MiB here) is not charged for it."""
    held = np.ones(2**26)  # touched: resident
    done = subprocess.run(
        [sys.executable, "-m", "bench.end_to_end", "true"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    measured = json.loads(done.stdout)
    assert measured["exit"] == 0 and 0 < measured["rss_mib"] < 100, (measured, held.nbytes)
