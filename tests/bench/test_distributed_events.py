"""``bench.distributed_events`` end to end on a small stream (in process): every configuration
equals the single process, and the report holds its tables."""

from __future__ import annotations

from pathlib import Path

from bench import distributed_events


def test_a_small_run_reports_every_configuration_equal_to_the_single_process(
    tmp_path: Path,
) -> None:
    out = tmp_path / "events.md"
    argv = ["--events", "6000", "--accounts", "500", "--batch", "500", "--no-ray"]
    assert distributed_events.main([*argv, "--shards", "1,3", "--out", str(out)]) == 0
    text = out.read_text()
    assert text.count("= single") == 2 and "MISMATCH" not in text
    rows = [line for line in text.splitlines() if line.startswith("| 3 shards, in process |")]
    assert len(rows) == 2  # (the summary and the memory over the stream)
