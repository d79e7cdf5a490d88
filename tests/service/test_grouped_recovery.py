"""Aggregate queries through ``run --state-dir``, killed and rerun.

The window recovery test's stream (``tests/service/test_window_recovery.py``: timestamped
transfers out of order, deletes by id, late events, epochs of 40 updates) through the
aggregate queries of the grouped oracle, whose windows of 15-40 minutes the stream's time
passes many times. The groups are not stored: a rerun rebuilds them from the restored index
and watermark. Runs SIGKILLed at failpoints and at random moments, then rerun, write the bytes
the uninterrupted run writes.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tests.service.test_crash_recovery import kill_at_random
from tests.service.test_events_recovery import job as events_job
from tests.service.test_grouped_oracle import WINDOWED
from tests.service.test_window_recovery import ENV, record, timed_ops


def job(tmp: Path, stream: Path, name: str, env: dict[str, str] | None = None, wait: bool = True):  # type: ignore[no-untyped-def]
    text = "\n".join(str(q) for q in WINDOWED)
    return events_job(tmp, stream, name, env, wait, queries=text, base=ENV, quiet=False)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("grouped-reference")
    stream = tmp / "stream.jsonl"
    ops = timed_ops(6_000, seed=5)
    stream.write_text("\n".join(json.dumps(record(op)) for op in ops) + "\n")
    done = job(tmp, stream, "ref")
    assert done.returncode == 0, done.stderr.read() if done.stderr else ""
    return stream, tmp / "ref.jsonl"


def test_the_uninterrupted_run_has_groups_of_every_query_start_and_stop(
    reference: tuple[Path, Path],
) -> None:
    _, ref = reference
    rows = [json.loads(line) for line in ref.read_text().splitlines()]
    seen = Counter((row["query"], row["diff"], row.get("cause")) for row in rows)
    for query in WINDOWED:
        assert seen[(query.name, 1, None)], (query.name, seen)
    causes = Counter(row.get("cause") for row in rows if row["diff"] < 0)
    assert causes["expired"] >= 10 and causes["deleted"] >= 3, causes
    for row in rows:  # (each condition's value; a least or greatest of no binding left out)
        query = next(q for q in WINDOWED if q.name == row["query"])
        always = {c.name for c in query.aggregates if c.kind not in ("min", "max")}
        assert always <= set(row["values"]) <= {c.name for c in query.aggregates}, row


@pytest.mark.parametrize(
    ("point", "hit"),
    [("before_output_sync", 20), ("after_output_sync", 31), ("after_epoch_commit", 47)],
)
def test_killed_at_a_failpoint_and_rerun_gives_the_uninterrupted_output(
    tmp_path: Path, reference: tuple[Path, Path], point: str, hit: int
) -> None:
    stream, ref = reference
    killed = job(
        tmp_path, stream, "run", env={"SGM_FAILPOINT": point, "SGM_FAILPOINT_HIT": str(hit)}
    )
    assert killed.returncode == -9, killed.stderr.read() if killed.stderr else ""
    done = job(tmp_path, stream, "run")
    assert done.returncode == 0, done.stderr.read() if done.stderr else ""
    assert (tmp_path / "run.jsonl").read_bytes() == ref.read_bytes()


def test_killed_at_random_moments_and_rerun_gives_the_uninterrupted_output(
    tmp_path: Path, reference: tuple[Path, Path]
) -> None:
    stream, ref = reference
    rng = np.random.default_rng(13)
    kills = kill_at_random(
        lambda: job(tmp_path, stream, "run", wait=False), rng, rounds=4, seconds=(0.8, 2.0)
    )
    done = job(tmp_path, stream, "run")
    assert done.returncode == 0, done.stderr.read() if done.stderr else ""
    assert kills, "the job finished before any kill: the test would check nothing"
    assert (tmp_path / "run.jsonl").read_bytes() == ref.read_bytes()
