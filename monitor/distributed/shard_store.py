"""One shard's part of the partitioned index in RocksDB, in a directory of its own.

What is stored is what the shard's part of each relation *is*: per relation and position (a
*part*), its pairs as ``(global key, value)`` ``int32`` columns; the adjacencies are rebuilt
from them on load. As the single process's store (:mod:`monitor.index.store`), it is a snapshot
and a log of per-epoch changes, in the same block and record formats
(:mod:`monitor.index.tuple_state`)::

    b"\\x00meta"              JSON: shard, shards, epoch (the last one prepared), snapshot epoch,
                             parts ([relation, position], by id), snapshot and log bytes
    b"S" part:u16 block:u32   snapshot block of one part
    b"L" epoch:u64            log record: the epoch's changes of every part that changed
    b"V" epoch:u64 start:u32  the vertex dictionary's entries numbered in the epoch from local
                             id ``start`` on (:meth:`VertexDictionary.export`); kept by
                             snapshots (ids are never reused: the entries are the dictionary)
    b"E" epoch:u64 rel:u16    an event relation's changes in the epoch (the single process's
                             event records, :mod:`monitor.index.event_state`)
    b"F" epoch:u64 rel:u16 block:u32  an event relation's live events after the epoch, whole:
                             written by a snapshot, or with the epoch after a compaction
                             renumbered them (the relation is read from its latest ``F`` on)
    b"I" epoch:u64 rel:u16 start:u32  the relation's event ids numbered in the epoch from slot
                             ``start`` on (from 0: the whole dictionary, beside an ``F``)

An epoch is written when the shard *prepares* it, before the driver commits the epoch
(:mod:`monitor.distributed.durable`), so the log may end with one epoch that was never
committed: :meth:`ShardStore.open` drops every record after the driver's committed epoch before
anything is read. A new snapshot is written only for an epoch the driver has committed.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import rocksdict

from connectors.kafka_log import KafkaLog
from core.errors import StateError
from monitor.distributed.shard_changelog import MirroredBatch, image, rebuild
from monitor.distributed.shard_events import EventLog
from monitor.index.graph import Change
from monitor.index.levels import I8, I32
from monitor.index.store import SNAPSHOT_BLOCK, connect, rocks_options
from monitor.index.tuple_state import block_bytes, last_wins, read_block, read_log, write_log

META_KEY = b"\x00meta"
#: A part: a relation and a position (1: keyed by ``src``, 0: by ``dst``).
Part = tuple[str, int]
#: A part's pairs: the key's columns (a global key; the other positions' ids of a relation of
#: three or more), then the values.
Tuples = list[I32]


class ShardStore:
    """Shard ``shard`` of ``shards``'s directory: open it with :meth:`open` at the driver's
    committed epoch, :meth:`load` its pairs once, then :meth:`prepare` every epoch and
    :meth:`snapshot` when :meth:`wants_snapshot` says so."""

    #: A new snapshot when the log is larger than this share of the snapshot, and than
    #: ``snapshot_min_bytes``.
    snapshot_ratio = 1.0
    snapshot_min_bytes = 1 << 20

    def __init__(
        self,
        path: Path,
        db: Any,
        meta: dict[str, Any],
        committed: int,
        changelog: KafkaLog | None = None,
    ) -> None:
        self.path = path
        self.committed = committed
        self._db = db
        self.meta = meta
        self._write = _synced()
        #: Where every write is mirrored (:mod:`monitor.distributed.shard_changelog`).
        self.changelog = changelog
        #: What the rebuild from the changelog replayed, when the directory was rebuilt.
        self.rebuilt: dict[str, float] | None = None

    @classmethod
    def open(
        cls,
        path: str | Path,
        shard: int,
        shards: int,
        committed: int,
        read_only: bool = False,
        changelog: KafkaLog | None = None,
    ) -> ShardStore:
        """Open (or create) the directory of shard ``shard`` of ``shards``, its epochs after
        ``committed`` (the driver's last committed epoch) dropped (``read_only``: ignored).
        With a ``changelog``, a directory that lacks the committed epoch (a new disk, or an old
        one) is rebuilt from it first."""
        directory = Path(path)
        db = connect(directory, rocks_options(16 << 20)[0], read_only=read_only)
        raw = db.get(META_KEY)
        rebuilt = None
        stale = raw is None or orjson.loads(bytes(raw))["epoch"] < committed
        if changelog is not None and not read_only and committed >= 0 and stale:
            rebuilt = rebuild(db, directory, changelog, _synced())
            raw = db.get(META_KEY)
        meta: dict[str, Any] = (
            {"shard": shard, "shards": shards, "epoch": -1, "snapshot_epoch": -1}
            | {"parts": [], "snapshot_bytes": 0, "log_bytes": 0, "arity": {}}
            if raw is None
            else orjson.loads(bytes(raw))
        )
        store = cls(directory, db, meta, committed, changelog)
        store.rebuilt = rebuilt
        try:
            store._check(shard, shards, committed)
        except StateError:
            db.close()
            raise
        if raw is None and not read_only:  # (a new shard: what it is, from now on)
            batch = MirroredBatch()
            batch.put(META_KEY, orjson.dumps(meta))
            store._apply(batch)
        if meta["epoch"] > committed and not read_only:  # prepared, never committed: dropped
            batch = MirroredBatch()
            batch.delete_range(_log_key(max(committed + 1, 0)), b"M")
            for prefix in (b"V", b"E", b"F", b"I"):
                batch.delete_range(prefix + struct.pack(">Q", max(committed + 1, 0)), _next(prefix))
            if meta["snapshot_epoch"] > committed:  # (a preload the driver never recorded)
                batch.delete_range(b"S", b"T")
                meta.update(snapshot_epoch=-1, snapshot_bytes=0, log_bytes=0)
            store.meta["epoch"] = committed
            batch.put(META_KEY, orjson.dumps(store.meta))
            store._apply(batch)
        return store

    def _apply(self, batch: MirroredBatch, image_after: bool = False) -> None:
        """Write ``batch`` (synced) and mirror it to the changelog; ``image_after``: mirror
        an image of the whole database instead, and cut the changelog before it."""
        self._db.write(batch.batch, self._write)
        if self.changelog is None:
            return
        if image_after:
            offset = self.changelog.append(image(self._db))
            self.changelog.cut_before(offset)
        else:
            assert batch.mirrored, "a batch without its operations is mirrored by an image"
            self.changelog.append(bytes(batch.ops))

    def _check(self, shard: int, shards: int, committed: int) -> None:
        meta = self.meta
        if (meta["shard"], meta["shards"]) != (shard, shards):
            raise StateError(
                f"{self.path} holds shard {meta['shard']} of {meta['shards']}, not shard "
                f"{shard} of {shards}; rerun with --shards {meta['shards']}, or give a new "
                "--state-dir"
            )
        if meta["epoch"] < committed:
            at = f"at epoch {meta['epoch']}" if meta["epoch"] >= 0 else "with no epoch"
            raise StateError(
                f"{self.path} holds shard {shard} {at}, but epoch "
                f"{committed} was committed: this is not the directory the run wrote; restore "
                "it, or give a new --state-dir"
            )

    def close(self) -> None:
        self._db.close()
        if self.changelog is not None:
            self.changelog.close()

    # -- reading ---------------------------------------------------------------------------

    def load(self) -> dict[Part, Tuples]:
        """Every part's pairs at the committed epoch, sorted by key, then value."""
        parts: list[Part] = [(r, int(p)) for r, p in self.meta["parts"]]
        columns: dict[int, list[list[I32]]] = {i: [] for i in range(len(parts))}
        diffs: dict[int, list[I8]] = {i: [] for i in range(len(parts))}
        try:
            for key, blob in self._scan(b"S"):
                (part,) = struct.unpack_from(">H", key, 1)
                block = read_block(blob)
                columns[part].append(block)
                diffs[part].append(np.ones(block[0].shape[0], np.int8))
            for key, blob in self._scan(b"L"):
                if struct.unpack_from(">Q", key, 1)[0] > self.committed:
                    break  # (prepared, never committed: read only)
                for part, changed, diff in read_log(blob) if blob else ():
                    columns[part].append(changed)
                    diffs[part].append(diff)
        except (ValueError, struct.error, KeyError) as error:
            raise StateError(
                f"state in {self.path} is corrupted ({error}); restore the directory from a "
                "backup, or delete the whole --state-dir to rebuild the state from the input"
            ) from error
        loaded: dict[Part, Tuples] = {}
        for i, part in enumerate(parts):
            if columns[i]:
                width = len(columns[i][0])
                loaded[part] = last_wins(
                    [np.concatenate([c[k] for c in columns[i]]) for k in range(width)],
                    np.concatenate(diffs[i]),
                )
        return loaded

    def vertices(self) -> list[bytes]:
        """The vertex dictionary's entries, as written epoch after epoch, up to the committed
        one."""
        blobs = []
        for key, blob in self._scan(b"V"):
            if struct.unpack_from(">Q", key, 1)[0] > self.committed:
                break
            blobs.append(blob)
        return blobs

    def events(self) -> tuple[dict[int, list[bytes]], dict[int, list[bytes]]]:
        """The event relations' id blobs and records up to the committed epoch, by relation
        id, in order: each relation's from its latest whole snapshot (``F``) on."""
        whole: dict[int, int] = {}
        for key, _ in self._scan(b"F"):
            epoch, rel_id = struct.unpack_from(">QH", key, 1)
            if epoch <= self.committed:
                whole[rel_id] = max(whole.get(rel_id, -1), epoch)
        ids: dict[int, list[bytes]] = {}
        records: dict[int, list[bytes]] = {}
        for key, blob in self._scan(b"I"):
            epoch, rel_id = struct.unpack_from(">QH", key, 1)
            if whole.get(rel_id, -1) <= epoch <= self.committed:
                ids.setdefault(rel_id, []).append(blob)
        for key, blob in self._scan(b"F"):
            epoch, rel_id = struct.unpack_from(">QH", key, 1)
            if epoch == whole[rel_id]:
                records.setdefault(rel_id, []).append(blob)
        for key, blob in self._scan(b"E"):
            epoch, rel_id = struct.unpack_from(">QH", key, 1)
            if whole.get(rel_id, -1) < epoch <= self.committed:
                records.setdefault(rel_id, []).append(blob)
        return ids, records

    def _scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        for raw_key, raw_value in self._db.items(from_key=prefix):
            key = bytes(raw_key)
            if not key.startswith(prefix):
                break
            yield key, bytes(raw_value)

    # -- writing ---------------------------------------------------------------------------

    def _ids(self, parts: Mapping[Part, int]) -> dict[str, tuple[int, int]]:
        """Each part's id and its number of columns (``parts``: the columns of each)."""
        known = [(r, int(p)) for r, p in self.meta["parts"]]
        for part in parts:
            if part not in known:
                known.append(part)
        self.meta["parts"] = [list(p) for p in known]
        return {_name(p): (known.index(p), width) for p, width in parts.items()}

    def prepare(
        self,
        epoch: int,
        changes: Mapping[Part, Change],
        vertices: tuple[int, bytes] | None,
        arity: Mapping[str, int],
        events: Mapping[str, EventLog] | None = None,
    ) -> None:
        """Write the epoch's changes, new vertices and events (synced), before the driver
        commits it."""
        ids = self._ids({p: len(c.columns) for p, c in changes.items()})
        record = write_log({_name(p): c for p, c in changes.items() if len(c)}, ids)
        batch = MirroredBatch()
        batch.put(_log_key(epoch), record)
        self._put_vertices(batch, epoch, vertices, arity)
        for log in (events or {}).values():
            self.meta["log_bytes"] += self._put_events(batch, epoch, log)
        self.meta["epoch"] = self.committed = epoch
        self.meta["log_bytes"] += len(record)
        batch.put(META_KEY, orjson.dumps(self.meta))
        self._apply(batch)

    def wants_snapshot(self) -> bool:
        """Whether the log has outgrown the snapshot (and the minimum size)."""
        log = self.meta["log_bytes"]
        return bool(
            log > self.snapshot_min_bytes
            and log > self.snapshot_ratio * self.meta["snapshot_bytes"]
        )

    def _put_vertices(
        self,
        batch: Any,
        epoch: int,
        vertices: tuple[int, bytes] | None,
        arity: Mapping[str, int],
    ) -> None:
        if vertices is not None:
            start, blob = vertices
            batch.put(b"V" + struct.pack(">QI", epoch, start), blob)
        self.meta["arity"] = dict(arity)

    def _put_events(self, batch: Any, epoch: int, log: EventLog) -> int:
        """One relation's events of ``epoch``: its changes, or (``whole``) its live events; and
        its ids. Returns the bytes written."""
        written = 0
        for block, blob in enumerate(log.records):
            if log.whole:
                batch.put(b"F" + struct.pack(">QHI", epoch, log.rel_id, block), blob)
            else:
                batch.put(b"E" + struct.pack(">QH", epoch, log.rel_id), blob)
            written += len(blob)
        if log.ids is not None:
            start, blob = log.ids
            batch.put(b"I" + struct.pack(">QHI", epoch, log.rel_id, start), blob)
            written += len(blob)
        return written

    def snapshot(
        self,
        epoch: int,
        parts: Mapping[Part, Tuples],
        vertices: tuple[int, bytes] | None,
        arity: Mapping[str, int],
        events: Mapping[str, EventLog] | None = None,
    ) -> None:
        """Replace snapshot and log by ``parts``, the pairs at ``epoch`` (committed), and the
        events' live records, and write the vertices and ids numbered since the last epoch
        written."""
        ids = self._ids({p: len(c) for p, c in parts.items()})
        batch = MirroredBatch(mirrored=False)  # (the changelog gets an image after it)
        self._put_vertices(batch, epoch, vertices, arity)
        for prefix in (b"L", b"S", b"E", b"F", b"I"):
            batch.delete_range(prefix, _next(prefix))
        written = 0
        for log in (events or {}).values():
            written += self._put_events(batch, epoch, log)
        for part, columns in parts.items():
            part_id = ids[_name(part)][0]
            for b, lo in enumerate(range(0, columns[0].shape[0], SNAPSHOT_BLOCK)):
                blob = block_bytes([c[lo : lo + SNAPSHOT_BLOCK] for c in columns])
                batch.put(b"S" + struct.pack(">HI", part_id, b), blob)
                written += len(blob)
        self.meta.update(snapshot_epoch=epoch, snapshot_bytes=written, log_bytes=0)
        self.meta["epoch"] = max(self.meta["epoch"], epoch)
        batch.put(META_KEY, orjson.dumps(self.meta))
        self._apply(batch, image_after=True)

    def disk_bytes(self) -> int:
        return sum(f.stat().st_size for f in self.path.rglob("*") if f.is_file())


def _synced() -> Any:
    write = rocksdict.WriteOptions()
    write.sync = True
    return write


def _name(part: Part) -> str:
    return f"{part[0]}/{part[1]}"


def _next(prefix: bytes) -> bytes:
    """The first key past every key under a one-byte ``prefix``."""
    return bytes([prefix[0] + 1])


def _log_key(epoch: int) -> bytes:
    return b"L" + struct.pack(">Q", epoch)
