"""``bench.decoding`` on a tiny stream: both decoders count every event, and the report says so."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench import decoding


def test_a_small_run_writes_its_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "decoding.md"
    argv = ["decoding", "--events", "3000", "--repeat", "1", "--workdir", str(tmp_path)]
    monkeypatch.setattr(sys, "argv", [*argv, "--out", str(out)])
    assert decoding.main() == 0  # (it exits with a message when the counts differ)
    text = out.read_text()
    assert "on 3,000 events" in text
    assert "| file source |" in text and "| Kafka records |" in text
    assert "no list of dicts" in text
