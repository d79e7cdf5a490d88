"""``bench.distributed`` on a tiny R-MAT graph: every configuration's deltas are the single
process's (it exits otherwise), and the report has a row per configuration."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench import distributed


def test_a_small_run_writes_its_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "distributed.md"
    argv = ["distributed", "--no-ray", "--no-facebook", "--rmat", "3000", "--shards", "1,3"]
    monkeypatch.setattr(sys, "argv", [*argv, "--out", str(out), "--batch", "500"])
    assert distributed.main() == 0
    text = out.read_text()
    assert "## R-MAT 3,000" in text
    assert "| single process |" in text
    assert "| 1 shards in process |" in text and "| 3 shards in process |" in text
