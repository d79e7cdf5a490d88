"""Aggregate queries through ``serve`` against a real broker: groups published with their
``values`` (JSON records and Arrow batches), a group that stops holding as the watermark
passes its window (``cause: expired``), and SIGKILLs at random moments that lose and
duplicate no group row (the groups are rebuilt from the restored index; the final groups are
the file job's).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.kafka.test_serve import (
    OUTPUTS,
    ROOT,
    Service,
    check_exactly_once,
    produce_slowly,
    published,
    stream_records,
    wait_consumed,
    wait_ready,
)
from tests.kafka.test_serve_windows import MIN, send

pytestmark = pytest.mark.kafka

#: Over the test stream's undirected edges ``e`` and labelled ``pays`` records.
GROUPED = (
    "busy(a) := e(a, b), count(*) >= 4.\n"
    "wedges(a, c) := e(a, b), e(b, c), a < c, count(distinct b) >= 2.\n"
    "payers(b) := pays(a, b), count(distinct a) >= 3.\n"
)
FAN_IN = "fan_in(b) := transfer(a, b) as t, count(distinct a) >= 3 over 10m.\n"


def final_groups(
    records: list[dict[str, object]], tmp: Path
) -> dict[tuple[str, tuple[object, ...]], int]:
    """The file job on the same records (undirected, as the service runs): its groups that hold
    at the end."""
    path, queries = tmp / "records.jsonl", tmp / "grouped.q"
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    queries.write_text(GROUPED)
    args = ["-q", str(queries), "--edges", str(path), "--undirected", "--quiet", "-b", "200"]
    done = subprocess.run(
        [sys.executable, "-m", "monitor", "run", *args], cwd=ROOT, capture_output=True, check=True
    )
    return check_exactly_once([json.loads(line) for line in done.stdout.splitlines()])


@pytest.mark.parametrize("output_format", ["records", "arrow"])
def test_a_group_is_published_with_its_values_and_leaves_as_the_watermark_passes(
    service: Callable[..., Service], output_format: str
) -> None:
    svc = service(
        partitions=1, SGM_UNDIRECTED="false", SGM_ALLOWED_LATENESS="0s", **OUTPUTS[output_format]
    )
    (svc.tmp / "queries.q").write_text(FAN_IN)
    send(svc, 0, ("t1", "A", "B", 0), ("t2", "C", "B", MIN), ("t3", "D", "B", 2 * MIN))
    svc.start()
    wait_consumed(svc.bootstrap, svc.group, svc.input, svc=svc)
    # the watermark (the 2nd largest time, by default) passes the window (10m) of B's payers
    send(svc, 0, ("t4", "A", "E", 30 * MIN), ("t5", "A", "E", 31 * MIN))
    wait_consumed(svc.bootstrap, svc.group, svc.input, svc=svc)
    deadline = time.monotonic() + 60
    while len(rows := published(svc, output_format)) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert svc.stop() == 0, svc.log_text()
    assert [(r["diff"], r.get("cause")) for r in rows] == [(1, None), (-1, "expired")], rows
    assert [r["match"] for r in rows] == [{"b": "B"}, {"b": "B"}]
    assert [r["values"] for r in rows] == [{"count_distinct_a": 3}, {"count_distinct_a": 0}]
    assert rows[0]["match_id"] == rows[1]["match_id"]


def test_sigkill_at_random_moments_loses_and_duplicates_no_group(
    service: Callable[..., Service], tmp_path: Path
) -> None:
    svc = service(partitions=3, SGM_BATCH_SIZE="100", SGM_MAX_BATCH_DELAY_MS="100")
    (svc.tmp / "queries.q").write_text(GROUPED)
    records = stream_records(5000, seed=61)
    producing = produce_slowly(svc.bootstrap, svc.input, records)
    rng = np.random.default_rng(8)
    kills = 0
    while producing.is_alive():
        svc.start()
        time.sleep(float(rng.uniform(1.5, 3.5)))
        svc.stop(signal.SIGKILL)
        kills += 1
    svc.start()
    wait_consumed(svc.bootstrap, svc.group, svc.input, timeout=180, svc=svc)
    wait_ready(svc)
    assert svc.stop() == 0, svc.log_text()
    assert kills >= 3
    got = check_exactly_once(published(svc, "records"))
    assert got == final_groups(records, tmp_path)
    assert {query for query, _ in got} == {"busy", "wedges", "payers"}, got
