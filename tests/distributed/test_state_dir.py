"""The partitioned engine's state directory, in process: a run stopped at any step of the
epoch protocol (before the shards prepare, after they prepared but before the driver recorded
the epoch, after) and restarted from the driver's last committed epoch writes every epoch's
deltas as the single process does, with snapshots taken often; and what does not belong to the
run is refused."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.errors import StateError
from core.records import RelationUpdates, UpdateBatch
from monitor.distributed.delta import ShardedEpochs
from monitor.distributed.durable import shard_directory
from monitor.distributed.shard_calls import LocalShards
from monitor.distributed.shard_store import ShardStore
from monitor.service.epochs import EpochProcessor
from monitor.service.settings import Settings
from tests.distributed.test_sharded_count import QUERIES
from tests.distributed.test_sharded_epochs import mine, streams, theirs

#: Where a run dies: its epoch's deltas written but not prepared; prepared by the shards but
#: not recorded by the driver; recorded but not folded.
STEPS = ("evaluated", "prepared", "committed")


def single_epochs(batches: list[UpdateBatch]) -> list[Any]:
    single = EpochProcessor(QUERIES, Settings())
    out = []
    for batch in batches:
        out.append(theirs(single.process(batch).queries))
        single.commit()
    return out


def random_epochs(seed: int, epochs: int, size: int, vertices: int) -> list[UpdateBatch]:
    """Epochs of ``size`` random updates of ``e`` (a third of them deletes)."""
    rng = np.random.default_rng(seed)
    batches = []
    for i in range(epochs):
        pairs = rng.integers(0, vertices, (size, 2))
        diff = rng.choice(np.array([1, 1, -1], np.int8), size)
        seq = np.arange(size * i, size * (i + 1), dtype=np.int64)
        updates = RelationUpdates([pairs[:, 0], pairs[:, 1]], diff, seq)
        batches.append(UpdateBatch({"e": updates}, size * i, size))
    return batches


def run_until(
    state: str, shards: int, batches: list[UpdateBatch], committed: int, stop: int, step: str
) -> tuple[int, list[Any]]:
    """Restore at ``committed`` (-1: a new run), run on and die at epoch ``stop`` after
    ``step``; the last epoch the driver recorded and the deltas of the epochs it recorded."""
    run = ShardedEpochs(QUERIES, LocalShards(shards), 1 << 20, shared_rounds=True)
    run.index.restore(state, committed)
    if committed < 0:  # (a new run: the shards' epoch 0, then the driver's)
        run.index.checkpoint(0)
        committed = 0
    out = []
    for epoch in range(committed + 1, len(batches) + 1):
        deltas = mine(run.decoded(run.evaluate(batches[epoch - 1])))
        if epoch == stop and step == "evaluated":
            break
        run.index.prepare(epoch)
        if epoch == stop and step == "prepared":
            break
        committed = epoch  # (the driver's record)
        out.append(deltas)
        if epoch == stop:
            break
        run.commit()
    run.index.close()  # (the process dies: its directories are let go)
    return committed, out


@settings(max_examples=60, deadline=None)
@given(
    streams(),
    st.integers(1, 4),
    st.lists(st.tuples(st.integers(1, 8), st.sampled_from(STEPS)), max_size=3),
)
def test_a_run_restarted_at_any_step_writes_the_single_process_s_deltas(
    batches: list[UpdateBatch], shards: int, deaths: list[tuple[int, str]]
) -> None:
    expected = single_epochs(batches)
    got: list[Any] = []
    committed = -1
    with tempfile.TemporaryDirectory() as state:
        for stop, step in deaths:
            stop = max(committed, 0) + stop
            committed, out = run_until(state, shards, batches, committed, stop, step)
            got += out
        committed, out = run_until(state, shards, batches, committed, len(batches) + 1, "")
        got += out
    assert committed == len(batches)
    assert got == expected


@pytest.fixture(autouse=True)
def snapshots_often(monkeypatch: pytest.MonkeyPatch) -> None:
    """A new snapshot whenever the log outgrows the snapshot, however small."""
    monkeypatch.setattr(ShardStore, "snapshot_min_bytes", 0)


def test_snapshots_are_taken_and_loaded(tmp_path: Path) -> None:
    batches = random_epochs(seed=3, epochs=6, size=300, vertices=50)
    state = str(tmp_path)
    committed, first = run_until(state, 2, batches, -1, 4, "committed")
    snapshots = [ShardStore.open(shard_directory(state, s), s, 2, 4) for s in range(2)]
    try:
        assert all(s.meta["snapshot_epoch"] >= 1 for s in snapshots)
    finally:
        for s in snapshots:
            s.close()
    _, rest = run_until(state, 2, batches, committed, len(batches) + 1, "")
    assert first + rest == single_epochs(batches)


def test_a_shard_directory_from_elsewhere_is_refused(tmp_path: Path) -> None:
    state = str(tmp_path)
    store = ShardStore.open(shard_directory(state, 0), 0, 2, -1)
    store.close()
    with pytest.raises(StateError, match="holds shard 0 of 2, not shard 0 of 3"):
        ShardStore.open(shard_directory(state, 0), 0, 3, -1)
    with pytest.raises(StateError, match="with no epoch, but epoch 5 was committed"):
        ShardStore.open(shard_directory(state, 0), 0, 2, 5)


def killed(actor: Any) -> None:
    """``ray.kill`` the actor and wait until it is dead (the kill is asynchronous; a dead actor's
    RocksDB lock is released)."""
    import ray

    ray.kill(actor)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # (a call made at once may still be answered)
        try:
            ray.get(actor.stats.remote(), timeout=10)
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.05)
    pytest.fail("the actor was not dead 60 s after ray.kill")


def test_a_shard_actor_killed_mid_epoch(ray_cluster: None, tmp_path: Path) -> None:
    """``ray.kill`` of one shard actor after the epoch's evaluation: the epoch is lost, not
    committed; shards started anew from the directories continue as the single process."""

    from monitor.distributed.shard_calls import RayShards, ShardLost

    batches = random_epochs(seed=5, epochs=8, size=400, vertices=80)
    state = str(tmp_path)
    shards = RayShards(3)
    run = ShardedEpochs(QUERIES, shards, 1 << 20)
    run.index.restore(state, -1)
    run.index.checkpoint(0)
    got = []
    for epoch in range(1, 4):
        got.append(mine(run.decoded(run.evaluate(batches[epoch - 1]))))
        run.index.prepare(epoch)
        run.commit()
    run.evaluate(batches[3])
    killed(shards.actors[1])
    with pytest.raises(ShardLost, match="shard 1 stopped in prepare"):
        run.index.prepare(4)
    for actor in shards.actors:  # (the driver's death takes the others with it)
        killed(actor)
    again = ShardedEpochs(QUERIES, RayShards(3), 1 << 20)
    again.index.restore(state, 3)
    for epoch in range(4, 9):
        got.append(mine(again.decoded(again.evaluate(batches[epoch - 1]))))
        again.index.prepare(epoch)
        again.commit()
    again.index.close()
    assert got == single_epochs(batches)
