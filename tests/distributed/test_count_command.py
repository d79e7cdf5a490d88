"""``subgraph-monitor count --workers N``: the partitioned engine from the command line, with
its shards' figures on stderr."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

TRIANGLE = "tri(a, b, c) := e(a, b), e(b, c), e(a, c), a < b, b < c."


def run(*arguments: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "monitor", "count", *arguments]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def test_count_with_workers_is_the_count_without(tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="ray is not installed (the `distributed` extra)")
    rng = np.random.default_rng(4)
    edges = tmp_path / "edges.txt"
    pairs = rng.integers(0, 200, (3000, 2))
    edges.write_text("".join(f"{a} {b}\n" for a, b in pairs.tolist()))
    alone = run("--undirected", "--edges", str(edges), "-q", TRIANGLE)
    sharded = run("--undirected", "--edges", str(edges), "-q", TRIANGLE, "--workers", "1")
    assert alone.returncode == 0, alone.stderr
    assert sharded.returncode == 0, sharded.stderr
    assert sharded.stdout == alone.stdout
    assert int(alone.stdout.split("\t")[1]) > 0
    # Two shards a worker by default, each with its pairs and work.
    assert "shard 0: pairs" in sharded.stderr and "shard 1: pairs" in sharded.stderr
    assert "shard 2:" not in sharded.stderr
    # And the bytes sent to and received from each (arrays of keys and answers).
    for line in sharded.stderr.splitlines():
        if ": shard " in line:
            figures = dict(f.rsplit(" ", 1) for f in line.split(": ", 2)[2].split(", "))
            assert int(figures["sent"].replace(",", "")) > 0
            assert int(figures["received"].replace(",", "")) > 0


def test_count_of_event_queries_with_workers_is_the_count_without() -> None:
    """The shipped payments: events with fields and times, counted on the shards."""
    pytest.importorskip("ray", reason="ray is not installed (the `distributed` extra)")
    common = ["--edges", "examples/payments.jsonl", "--query", "examples/payments.q"]
    alone = run(*common)
    sharded = run(*common, "--workers", "2", "--shards", "3")
    assert alone.returncode == 0, alone.stderr
    assert sharded.returncode == 0, sharded.stderr
    assert sharded.stdout == alone.stdout
    assert sum(int(line.split("\t")[1]) for line in alone.stdout.splitlines()) > 0
    assert "events " in sharded.stderr  # (each shard's events beside its pairs)
