"""Tables through ``run --state-dir``, killed and rerun: a stream of timestamped transfers
with deletes, and account records (JSON, keyed by ``key``) updated and tombstoned among them,
through the table oracle's queries. The attributes are stored with the events; runs SIGKILLed
at failpoints and at random moments, then rerun, write the bytes the uninterrupted run writes.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tests.service.test_crash_recovery import kill_at_random
from tests.service.test_events_recovery import job as events_job
from tests.service.test_tables_oracle import QUERIES
from tests.service.test_window_recovery import ENV

RISKS = ("high", "low", "mid")


def stream_records(n: int, seed: int) -> list[dict[str, object]]:
    """Transfers about a minute apart among 30 accounts, 1 in 8 a delete, 1 in 5 an account's
    new record, 1 in 40 a tombstone."""
    rng = np.random.default_rng(seed)
    out: list[dict[str, object]] = []
    for k in range(n):
        draw = rng.random()
        if draw < 1 / 40:
            out.append({"op": "delete", "relation": "account", "key": f"acct-{rng.integers(30)}"})
        elif draw < 1 / 5:
            key = f"acct-{rng.integers(30)}"
            opened = int(k * 6_000 - rng.integers(0, 3_600_000))
            risk = RISKS[int(rng.integers(3))]
            out.append({"relation": "account", "key": key, "risk": risk, "opened": opened})
        elif draw < 1 / 5 + 1 / 8:
            out.append({"op": "delete", "relation": "transfer", "id": f"tx-{rng.integers(k + 1)}"})
        else:
            src, dst = (f"acct-{v}" for v in rng.integers(0, 30, 2))
            ts = k * 6_000 + int(rng.integers(0, 120_000))
            out.append({"relation": "transfer", "id": f"tx-{k}", "src": src, "dst": dst, "ts": ts})
    return out


def job(tmp: Path, stream: Path, name: str, env: dict[str, str] | None = None, wait: bool = True):  # type: ignore[no-untyped-def]
    base = {**ENV, "SGM_TABLES": "account"}
    return events_job(tmp, stream, name, env, wait, queries=QUERIES, base=base, quiet=False)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("tables-reference")
    stream = tmp / "stream.jsonl"
    stream.write_text("\n".join(json.dumps(r) for r in stream_records(6_000, seed=7)) + "\n")
    done = job(tmp, stream, "ref")
    assert done.returncode == 0, done.stderr.read() if done.stderr else ""
    return stream, tmp / "ref.jsonl"


def test_the_uninterrupted_run_updates_and_deletes_matches(reference: tuple[Path, Path]) -> None:
    _, ref = reference
    rows = [json.loads(line) for line in ref.read_text().splitlines()]
    seen = Counter((row["query"], row["diff"]) for row in rows)
    for query in ("risky", "new_account", "ring", "fan_in"):
        assert seen[(query, 1)] and seen[(query, -1)], (query, seen)
    causes = Counter(row.get("cause") for row in rows if row["diff"] < 0)
    assert causes["updated"] >= 10 and causes["deleted"] >= 10 and causes["expired"], causes


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
    rng = np.random.default_rng(17)
    kills = kill_at_random(
        lambda: job(tmp_path, stream, "run", wait=False), rng, rounds=4, seconds=(0.8, 2.0)
    )
    done = job(tmp_path, stream, "run")
    assert done.returncode == 0, done.stderr.read() if done.stderr else ""
    assert kills, "the job finished before any kill: the test would check nothing"
    assert (tmp_path / "run.jsonl").read_bytes() == ref.read_bytes()
