"""Compaction made durable (real RocksDB): a run restarted from its state directory, right after
a compaction or anywhere else, holds exactly the events, eids, slots and ids of the run never
stopped and goes on with exactly its output; the compacted relation's older records are gone
from disk; a store of format 1 is read and rewritten.

Two processors run in lockstep over one stream: the uninterrupted one, and one that commits
every epoch to a state directory and is replaced, every few epochs and after every compaction,
by a new process's equivalent (a new processor loading the directory).
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import rocksdict

from core.columns import python_values
from core.records import UpdateBatch
from monitor.index.events import EventStore
from monitor.index.store import META_KEY, StateStore
from monitor.index.stored_meta import StoredMeta
from monitor.service.epoch_output import EpochOutput
from monitor.service.epochs import EpochProcessor
from monitor.service.settings import Settings
from tests.engine.test_events_oracle import QUERIES, Model, batch, brute_force, rows

SETTINGS = Settings(event_compaction_min=24)
EPOCH = 29


def stream(n: int = 3000, seed: int = 7) -> list[tuple[Any, ...]]:
    """Inserts and deletes by id over 14 ids, string fields new now and then, tuples of e."""
    rng = np.random.default_rng(seed)
    ops: list[tuple[Any, ...]] = []
    for i in range(n):
        roll = rng.random()
        if roll < 0.5:
            channel = str(rng.choice(["cash", "wire", "card", f"new-{i}"]))
            amount = None if rng.random() < 0.1 else int(rng.integers(0, 4))
            ops.append(("insert", *map(int, rng.integers(0, [14, 3, 3])), amount, channel))
        elif roll < 0.9:
            ops.append(("delete", int(rng.integers(0, 14))))
        else:
            ops.append(("e+" if rng.random() < 0.6 else "e-", *map(int, rng.integers(0, 3, 2))))
    return ops


def state_of(store: EventStore, decode: Any) -> dict[str, Any]:
    """Everything a store's numbering and content is, as plain values (of dead eids only that
    they are dead: nothing else of them is stored)."""
    every = np.arange(store.size, dtype=np.int32)
    alive = store.alive[: store.size]
    return {
        "size": store.size,
        "alive": alive.tolist(),
        "slot": store.slot[: store.size][alive].tolist(),
        "ids": store.ids.decode(np.arange(len(store.ids), dtype=np.int32)).tolist(),
        "current": store.current[: len(store.ids)].tolist(),
        "live": {
            k: python_values(v[store.alive[: store.size]])
            for k, v in store.columns(every, decode).items()
        },
        "len": len(store),
    }


def open_store(path: Path, snapshot_min_bytes: int) -> StateStore:
    return StateStore.open(path, snapshot_min_bytes=snapshot_min_bytes, snapshot_ratio=1.0)


@pytest.mark.parametrize("snapshot_min_bytes", [1 << 30, 3000])
def durable_epoch(
    processor: EpochProcessor, store: StateStore, part: UpdateBatch
) -> tuple[EpochOutput, StoredMeta]:
    """One epoch as the file job runs it: processed, committed, recorded in ``store``."""
    vertices = len(processor.index.dictionary)
    out = processor.process(part)
    processor.commit()
    meta = store.commit_epoch(
        processor.index,
        StoredMeta(epoch=out.epoch),
        out.changes,
        vertices,
        event_changes=out.event_changes,
    )
    return out, meta


@pytest.mark.parametrize("snapshot_min_bytes", [1 << 30, 3000])
def test_restarted_after_compactions_the_run_is_the_uninterrupted_one(
    tmp_path: Path, snapshot_min_bytes: int
) -> None:
    ops = stream()
    model = Model()
    alone = EpochProcessor(QUERIES, SETTINGS)
    restarted = EpochProcessor(QUERIES, SETTINGS)
    store = open_store(tmp_path / "state", snapshot_min_bytes)
    restarts = compactions = 0
    for k, lo in enumerate(range(0, len(ops), EPOCH)):
        before = alone.index.event_stores["transfer"].compactions
        part = batch(ops[lo : lo + EPOCH], lo)
        expected = alone.process(part)
        alone.commit()
        out, _ = durable_epoch(restarted, store, part)
        assert [r for q in out.queries for r in rows(q)] == [
            r for q in expected.queries for r in rows(q)
        ]
        for op in ops[lo : lo + EPOCH]:
            model.apply(op)
        compacted = alone.index.event_stores["transfer"].compactions > before
        compactions += compacted
        if compacted or k % 7 == 3:  # a new process loads the directory
            store.close()
            store = open_store(tmp_path / "state", snapshot_min_bytes)
            restarted = EpochProcessor(QUERIES, SETTINGS)
            restarted.restore(store)
            restarted.epoch = k + 1
            restarts += 1
        decode = alone.index.dictionary.decode
        assert state_of(restarted.index.event_stores["transfer"], decode) == state_of(
            alone.index.event_stores["transfer"], decode
        ), f"epoch {k + 1}"
    store.close()
    assert compactions >= 10 and restarts >= 20
    assert restarted.counts() == {q.name: len(brute_force(model, q)) for q in QUERIES}


def keys(path: Path, prefix: bytes) -> list[bytes]:
    with StateStore.open(path, read_only=True) as store:
        return [k for k, _ in store._scan(prefix)]


def test_a_compaction_replaces_its_relations_records(tmp_path: Path) -> None:
    ops = stream(900)
    processor = EpochProcessor(QUERIES, SETTINGS)
    store = open_store(tmp_path / "state", 1 << 30)
    last = 0
    for lo in range(0, len(ops), EPOCH):
        transfers = processor.index.event_stores.get("transfer")
        before = transfers.compactions if transfers is not None else 0
        out, _ = durable_epoch(processor, store, batch(ops[lo : lo + EPOCH], lo))
        if processor.index.event_stores["transfer"].compactions > before:
            last = out.epoch
    store.close()
    assert last > 0
    rel = struct.pack(">H", store.meta.relations["transfer"][0]) if store.meta else b""
    logged = [struct.unpack(">Q", k[3:])[0] for k in keys(tmp_path / "state", b"G" + rel)]
    assert logged and min(logged) > last, "log records older than the compaction remain"
    assert keys(tmp_path / "state", b"I" + rel)[0] == b"I" + rel + struct.pack(">I", 0)
    assert keys(tmp_path / "state", b"S") == [], "no full snapshot: the relation was rewritten"


def as_format_1(path: Path) -> None:
    """Rewrite a store's event log in the layout of format 1: one ``G epoch`` record per epoch
    holding every relation's records, and the metadata's format version 1."""
    db = rocksdict.Rdict(str(path), rocksdict.Options(raw_mode=True))
    by_epoch: dict[int, list[tuple[int, bytes]]] = {}
    for raw_key, raw_value in db.items(from_key=b"G"):
        key = bytes(raw_key)
        if not key.startswith(b"G"):
            break
        rel_id, epoch = struct.unpack(">HQ", key[1:])
        by_epoch.setdefault(epoch, []).append((rel_id, bytes(raw_value)))
        del db[key]
    for epoch, records in by_epoch.items():
        db[b"G" + struct.pack(">Q", epoch)] = b"".join(blob for _, blob in sorted(records))
    db[META_KEY] = bytes(db[META_KEY]).replace(b'"format_version":2', b'"format_version":1')
    db.close()


def test_a_store_of_format_1_is_read_and_rewritten_at_its_next_commit(tmp_path: Path) -> None:
    ops = stream(600)
    processor = EpochProcessor(QUERIES, Settings())
    with open_store(tmp_path / "state", 1 << 30) as store:
        for lo in range(0, 580, EPOCH):
            durable_epoch(processor, store, batch(ops[lo : lo + EPOCH], lo))
    as_format_1(tmp_path / "state")
    assert all(len(k) == 9 for k in keys(tmp_path / "state", b"G"))
    again = EpochProcessor(QUERIES, Settings())
    with open_store(tmp_path / "state", 1 << 30) as store:
        assert store.meta is not None and store.meta.format_version == 1
        again.restore(store)
        decode = processor.index.dictionary.decode
        assert state_of(again.index.event_stores["transfer"], decode) == state_of(
            processor.index.event_stores["transfer"], decode
        )
        out, meta = durable_epoch(again, store, batch(ops[580:], 580))
    assert meta.format_version == 2 and meta.snapshot_epoch == out.epoch
    assert keys(tmp_path / "state", b"G") == []
