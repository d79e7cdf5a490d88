"""Events through ``run --state-dir``, killed at any moment and rerun: the output file holds every
delta exactly once, and the stored events are the oracle's; event stores are compacted between
the kills (and killed while a compacted relation is rewritten).

A JSON stream of transfers (string ids, parallel events, number and string fields, deletes by
id, events without an id), plain tuples and labels runs with a state directory and an output
file. It is SIGKILLed at failpoints between the steps of the epoch protocol (a snapshot among
them) and at random moments, then rerun until it completes. The output must equal, byte for
byte, that of a run never interrupted, whose matches are the brute-force oracle's; the events
loaded back from the state are the oracle's live events.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from core.columns import python_values
from monitor.index.store import StateStore
from monitor.service.epochs import EpochProcessor
from monitor.service.settings import Settings
from tests.engine.test_events_oracle import QUERIES, Model, brute_force, event_records
from tests.service.test_crash_recovery import kill_at_random

ROOT = Path(__file__).resolve().parents[2]
QUERY_TEXT = "\n".join(str(q) for q in QUERIES)
#: Event stores are compacted every few hundred records (a small minimum), between kills.
COMPACTION_MIN = 100
ENV = {
    "SGM_BATCH_SIZE": "40",
    "SGM_SNAPSHOT_RATIO": "0.5",
    "SGM_SNAPSHOT_MIN_BYTES": "30000",
    "SGM_EVENT_COMPACTION_MIN": str(COMPACTION_MIN),
}


def make_stream(path: Path, seed: int = 3, n: int = 12_000) -> Model:
    """:func:`event_records` written to ``path`` as JSON lines."""
    records, model = event_records(n, seed, anonymous=str(path))
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return model


def job(  # type: ignore[no-untyped-def]
    tmp: Path,
    stream: Path,
    name: str,
    env: dict[str, str] | None = None,
    wait: bool = True,
    queries: str = QUERY_TEXT,
    base: dict[str, str] = ENV,
    quiet: bool = True,
):
    """``run`` with a state directory and an output file named ``name`` in ``tmp``."""
    (tmp / "q.q").write_text(queries)
    args = [sys.executable, "-m", "monitor", "run", "-q", str(tmp / "q.q"), "--edges", str(stream)]
    args += ["--state-dir", str(tmp / f"{name}.state"), "--output", str(tmp / f"{name}.jsonl")]
    proc = subprocess.Popen(
        [*args, "--quiet"] if quiet else args,
        cwd=ROOT,
        env={**os.environ, **base, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    if wait:
        proc.wait(timeout=300)
    return proc


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Model]:
    tmp = tmp_path_factory.mktemp("events-reference")
    stream = tmp / "stream.jsonl"
    model = make_stream(stream)
    done = job(tmp, stream, "ref")
    assert done.returncode == 0, done.stderr.read() if done.stderr else ""
    return stream, tmp / "ref.jsonl", model


def records(stream: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.read_text().splitlines()]


def test_the_uninterrupted_output_is_the_oracles(reference: tuple[Path, Path, Model]) -> None:
    stream, ref, model = reference
    current: Counter[tuple[str, tuple[tuple[int, ...], tuple[str, ...]]]] = Counter()
    for line in ref.read_text().splitlines():
        row = json.loads(line)
        query = next(q for q in QUERIES if q.name == row["query"])
        events = tuple(str(row["edges"][e]["id"]) for e in query.edges)
        key = (row["query"], (tuple(row["match"].values()), events))
        current[key] += row["diff"]
        assert current[key] in (0, 1), f"running sum of {key}"
    for query in QUERIES:
        got = {b for (n, b), c in current.items() if n == query.name and c}
        assert got == brute_force(model, query), query.name
        assert got, f"{query.name} has no match at the end: the check would be empty"
    inspect = subprocess.run(
        [sys.executable, "-m", "monitor", "state", "inspect", str(ref.parent / "ref.state")],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    live = len(model.events)
    assert f"transfer             events   {live:>12,} live  fields amount (number), " in inspect
    processor = EpochProcessor([], Settings())
    with StateStore.open(ref.parent / "ref.state", read_only=True) as store:
        store.load(processor.index)
    stored = processor.index.event_stores["transfer"]
    inserted = sum(r.get("relation") == "transfer" and "op" not in r for r in records(stream))
    # Compacted: at most max(live, minimum) dead eids, where every insert would be an eid.
    assert stored.size - live <= max(live, COMPACTION_MIN) and 3 * stored.size < inserted


def stored_events(state: Path) -> dict[str, tuple[int, int, dict[str, object]]]:
    """The live events a state directory holds, loaded as a restarted run loads them."""
    processor = EpochProcessor([], Settings())
    with StateStore.open(state) as store:
        store.load(processor.index)
    events = processor.index.event_stores["transfer"]
    live = np.flatnonzero(events.alive[: events.size]).astype(np.int32)
    columns: dict[str, list[Any]] = {
        k: python_values(c)
        for k, c in events.columns(live, processor.index.dictionary.decode).items()
    }
    out = {}
    for i, event in enumerate(columns["id"]):
        fields = {k: columns[k][i] for k in ("amount", "channel") if columns[k][i] is not None}
        out[str(event)] = (int(columns["src"][i]), int(columns["dst"][i]), fields)
    return out


@pytest.mark.parametrize(
    ("point", "hit"),
    [
        ("before_output_sync", 30),
        ("after_output_sync", 55),
        ("before_store_write", 80),
        ("snapshot_built", 2),
        ("event_relation_rewritten", 3),
        ("after_epoch_commit", 120),
    ],
)
def test_killed_at_a_failpoint_and_rerun_gives_the_uninterrupted_output(
    tmp_path: Path, reference: tuple[Path, Path, Model], point: str, hit: int
) -> None:
    stream, ref, model = reference
    killed = job(tmp_path, stream, "run", {"SGM_FAILPOINT": point, "SGM_FAILPOINT_HIT": str(hit)})
    assert killed.returncode == -signal.SIGKILL, killed.stderr.read() if killed.stderr else ""
    assert (tmp_path / "run.jsonl").stat().st_size < ref.stat().st_size
    done = job(tmp_path, stream, "run")
    assert done.returncode == 0, done.stderr.read() if done.stderr else ""
    assert (tmp_path / "run.jsonl").read_bytes() == ref.read_bytes()
    assert stored_events(tmp_path / "run.state") == model.events


def test_killed_at_random_moments_and_rerun_gives_the_uninterrupted_output(
    tmp_path: Path, reference: tuple[Path, Path, Model]
) -> None:
    stream, ref, model = reference
    start = functools.partial(job, tmp_path, stream, "run", wait=False)
    kills = kill_at_random(start, np.random.default_rng(11), 6, (0.8, 2.0))
    done = job(tmp_path, stream, "run")
    assert done.returncode == 0, done.stderr.read() if done.stderr else ""
    assert kills >= 2, "the job finished too fast to be killed; make the stream longer"
    assert (tmp_path / "run.jsonl").read_bytes() == ref.read_bytes()
    assert stored_events(tmp_path / "run.state") == model.events


def test_a_state_built_with_other_event_relations_is_refused(
    tmp_path: Path, reference: tuple[Path, Path, Model]
) -> None:
    stream, _, _ = reference
    (tmp_path / "plain.q").write_text("pairs(a, b) := transfer(a, b), transfer(b, a).\n")
    done = job(
        tmp_path, stream, "run", {"SGM_FAILPOINT": "after_epoch_commit", "SGM_FAILPOINT_HIT": "3"}
    )
    assert done.returncode == -signal.SIGKILL
    args = [sys.executable, "-m", "monitor", "run", "-q", str(tmp_path / "plain.q")]
    args += ["--edges", str(stream), "--state-dir", str(tmp_path / "run.state")]
    args += ["--output", str(tmp_path / "run.jsonl")]
    again = subprocess.run(args, cwd=ROOT, capture_output=True, env={**os.environ, **ENV})
    assert again.returncode != 0
    assert "keeps transfer as events, this run's queries read no relation as events" in (
        again.stderr.decode()
    )
