"""Windows through ``run --state-dir``, killed across expiries and rerun.

A JSON stream of timestamped transfers arriving out of order (deletes by id, a few without
``ts``, a few far behind the watermark) runs in epochs of 40 updates with a 20-minute window.
The uninterrupted run's output, epoch by epoch, is the window oracle's
(``tests/engine/test_window_oracle.py``): the matches in the window, every ``-1`` with its cause,
and the summary's late count. Runs SIGKILLed at failpoints and at random moments, then rerun,
write the same bytes: the stored watermark is continued, nothing expires twice or never.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from monitor.index.store import StateStore
from tests.engine.test_events_oracle import brute_force
from tests.engine.test_time_oracle import MINUTE, QUERIES
from tests.engine.test_window_oracle import WindowModel
from tests.service.test_crash_recovery import kill_at_random
from tests.service.test_events_recovery import job as events_job

ROOT = Path(__file__).resolve().parents[2]
BATCH = 40
ENV = {
    "SGM_BATCH_SIZE": str(BATCH),
    "SGM_SNAPSHOT_RATIO": "0.5",
    "SGM_SNAPSHOT_MIN_BYTES": "20000",
    "SGM_ALLOWED_LATENESS": "3m",
}


def timed_ops(n: int, seed: int) -> list[tuple[Any, ...]]:
    """Window oracle ops: time moves on about a minute per 10 updates, arrival disorder of a
    few minutes, 1 in 10 far behind (late), 1 in 100 without a time, 1 in 6 a delete."""
    rng = np.random.default_rng(seed)
    ops: list[tuple[Any, ...]] = []
    for k in range(n):
        if rng.random() < 1 / 6:
            ops.append(("delete", int(rng.integers(0, 60))))
            continue
        now = k // 10 + int(rng.integers(-4, 2))
        if rng.random() < 0.1:
            now -= 60
        ts = None if rng.random() < 0.01 else max(now, 0)
        src, dst = (int(v) for v in rng.integers(0, 4, 2))
        ops.append(("insert", int(rng.integers(0, 60)), src, dst, int(rng.integers(0, 4)), ts))
    return ops


def record(op: tuple[Any, ...]) -> dict[str, object]:
    if op[0] == "delete":
        return {"op": "delete", "relation": "transfer", "id": f"tx-{op[1]}"}
    row: dict[str, object] = {"op": "insert", "relation": "transfer", "id": f"tx-{op[1]}"}
    row.update(src=op[2], dst=op[3], amount=op[4])
    if op[5] is not None:
        row["ts"] = op[5] * MINUTE
    return row


def job(tmp: Path, stream: Path, name: str, env: dict[str, str] | None = None, wait: bool = True):  # type: ignore[no-untyped-def]
    text = "\n".join(str(q) for q in QUERIES)
    return events_job(tmp, stream, name, env, wait, queries=text, base=ENV, quiet=False)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[Any], str]:
    tmp = tmp_path_factory.mktemp("window-reference")
    stream = tmp / "stream.jsonl"
    ops = timed_ops(3_000, seed=5)
    stream.write_text("\n".join(json.dumps(record(op)) for op in ops) + "\n")
    done = job(tmp, stream, "ref")
    stderr = done.stderr.read().decode() if done.stderr else ""
    assert done.returncode == 0, stderr
    return stream, tmp / "ref.jsonl", ops, stderr


def test_the_uninterrupted_output_is_the_window_oracles_epoch_by_epoch(
    reference: tuple[Path, Path, list[Any], str],
) -> None:
    _, ref, ops, stderr = reference
    rows: dict[int, list[dict[str, Any]]] = {}
    for line in ref.read_text().splitlines():
        row = json.loads(line)
        rows.setdefault(row["epoch"], []).append(row)
    model = WindowModel(20 * MINUTE, 3 * MINUTE, 1)
    current: Counter[tuple[str, Any]] = Counter()
    causes: Counter[str] = Counter()
    late = expired = 0
    for epoch, lo in enumerate(range(0, len(ops), BATCH), start=1):
        chunk = ops[lo : lo + BATCH]
        alone = WindowModel(model.retention, model.lateness, model.outliers)
        alone.events = dict(model.events)
        refused, gone = model.epoch(chunk, lo)
        for op in chunk:
            if op[0] == "delete" and f"tx-{op[1]}" not in gone:
                alone.apply(op)
        late += sum(1 for at in refused if ops[at][5] is not None)
        expired += len(gone)
        for row in rows.get(epoch, []):
            query = next(q for q in QUERIES if q.name == row["query"])
            binding = (
                tuple(row["match"].values()),
                tuple(str(row["edges"][e]["id"]) for e in query.edges),
            )
            current[(row["query"], binding)] += row["diff"]
            if row["diff"] < 0:
                want = "expired" if binding in brute_force(alone, query) else "deleted"
                assert row["cause"] == want, (epoch, row)
                causes[row["cause"]] += 1
        for query in QUERIES:
            got = {b for (n, b), c in current.items() if n == query.name and c}
            assert got == brute_force(model, query), (query.name, epoch)
    assert causes["expired"] and causes["deleted"] and late, (causes, late)
    assert f"expired {expired:,}, late {late:,}" in stderr, stderr


def stored_clock(state: Path) -> dict[str, Any]:
    """The event clock a state directory holds (watermark and times per partition)."""
    with StateStore.open(state) as store:
        assert store.meta is not None
        clock: dict[str, Any] = store.meta.position["clock"]
    assert clock["watermark"] is not None
    return clock


@pytest.mark.parametrize(
    ("point", "hit"),
    [("before_output_sync", 20), ("after_output_sync", 31), ("after_epoch_commit", 47)],
)
def test_killed_at_a_failpoint_and_rerun_gives_the_uninterrupted_output(
    tmp_path: Path, reference: tuple[Path, Path, list[Any], str], point: str, hit: int
) -> None:
    stream, ref, _, _ = reference
    killed = job(
        tmp_path, stream, "run", env={"SGM_FAILPOINT": point, "SGM_FAILPOINT_HIT": str(hit)}
    )
    assert killed.returncode == -9, killed.stderr.read() if killed.stderr else ""
    done = job(tmp_path, stream, "run")
    assert done.returncode == 0, done.stderr.read() if done.stderr else ""
    assert (tmp_path / "run.jsonl").read_bytes() == ref.read_bytes()
    assert stored_clock(tmp_path / "run.state") == stored_clock(ref.parent / "ref.state")


def test_killed_at_random_moments_and_rerun_gives_the_uninterrupted_output(
    tmp_path: Path, reference: tuple[Path, Path, list[Any], str]
) -> None:
    stream, ref, _, _ = reference
    rng = np.random.default_rng(11)
    kills = kill_at_random(
        lambda: job(tmp_path, stream, "run", wait=False), rng, rounds=4, seconds=(1.0, 2.5)
    )
    done = job(tmp_path, stream, "run")
    assert done.returncode == 0, done.stderr.read() if done.stderr else ""
    assert kills, "the job finished before any kill: the test would check nothing"
    assert (tmp_path / "run.jsonl").read_bytes() == ref.read_bytes()
    assert stored_clock(tmp_path / "run.state") == stored_clock(ref.parent / "ref.state")
