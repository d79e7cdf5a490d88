"""The durable copy of the index in RocksDB (rocksdict): written per epoch, loaded on start.

What is stored is what a relation *is* — its set of tuples, in dense vertex ids, or for an event
relation its live events (:mod:`monitor.index.event_state`) — plus the vertex dictionary and the
epoch's metadata; the in-memory adjacencies (every position of every relation) and the relations
derived from events are rebuilt from it on load. Like the in-memory index, the store is an LSM of
its own:

- a *snapshot*: every relation's tuples as of ``snapshot_epoch``, in blocks of sorted tuples;
- a *log*: one record per epoch since the snapshot with that epoch's effective changes;
- the *dictionary*: blobs of vertex entries, appended per epoch, rewritten at each snapshot.

When the log has grown past ``snapshot_ratio`` of the snapshot, the next epoch's write batch
replaces snapshot and log by a new snapshot. Every epoch is one synced ``WriteBatch``: its log
record (or the new snapshot), its dictionary entries and the metadata (epoch number, the input
position the state includes, the output length), so the store always holds the state after some
whole epoch. An event store compacted at an epoch's commit (:mod:`monitor.index.compaction`:
its eids and ids renumbered) has its relation written anew in that epoch's batch: its snapshot
blocks, log records and ids replaced by a snapshot of the compacted store, so a restarted run
numbers events as the run it continues.

Key layout (big-endian numbers, so keys sort by them)::

    b"\\x00meta"                      JSON: format version, epoch, position, queries, settings
    b"S" rel:u16 block:u32          snapshot block: arity:u8 n:u32, then arity int32[n] columns
    b"L" epoch:u64                  log record: relations:u16, then per relation
                                    rel:u16 arity:u8 n:u32 int32[n] x arity, int8[n] diffs
    b"V" first_dense_id:u32         dictionary entries (VertexDictionary.export)
    b"F" rel:u16 block:u32          event snapshot block: one event record (event_state)
    b"G" rel:u16 epoch:u64          event log record: the epoch's event changes of a relation
                                    (format 1: b"G" epoch:u64, every relation's in one record)
    b"I" rel:u16 first_slot:u32     event ids of an event relation (VertexDictionary.export)
"""

from __future__ import annotations

import errno
import os
import struct
from collections.abc import Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import rocksdict

from core.errors import StateError
from monitor.failpoints import failpoint
from monitor.index.creation import cleared
from monitor.index.event_state import (
    event_log,
    ids_key,
    load_events,
    log_key,
    put_relation,
    snapshot_records,
)
from monitor.index.events import EventChanges
from monitor.index.graph import Change, GraphIndex
from monitor.index.levels import I8, I32
from monitor.index.stored_meta import FORMAT_VERSION, READABLE_VERSIONS, StoredMeta
from monitor.index.tuple_state import block_bytes, last_wins, read_block, read_log, write_log

META_KEY = b"\x00meta"
SNAPSHOT_BLOCK = 1 << 20


class StateStore:
    """One state directory: a RocksDB database holding the index and its metadata.

    Open it with :meth:`open`; :attr:`meta` is None for a new directory. Call :meth:`load` once
    to fill an empty index, then :meth:`commit_epoch` after every epoch, and :meth:`close`.
    """

    def __init__(self, path: Path, db: rocksdict.Rdict, meta: StoredMeta | None, cache: Any):
        self.path = path
        self._db = db
        self._cache = cache
        self.meta = meta
        self._write = rocksdict.WriteOptions()
        self._write.sync = True
        self.snapshot_ratio = 1.0
        self.snapshot_min_bytes = 1 << 20
        #: Per event relation, how many of its ids (slots) are stored.
        self._ids_stored: dict[str, int] = {}
        #: Per event relation, its compactions the stored state includes (in this process).
        self._compactions: dict[str, int] = {}
        #: Whether the next commit rewrites everything (a store of an older format was loaded).
        self._rewrite = False

    # -- opening -----------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        cache_bytes: int = 64 << 20,
        snapshot_ratio: float = 1.0,
        snapshot_min_bytes: int = 1 << 20,
        read_only: bool = False,
    ) -> StateStore:
        """Open (or create) the state directory ``path``; ``read_only`` to inspect a live one.

        Raises :class:`StateError` when the directory is used by another process, holds a store
        of another format version or something that is not a store, or is corrupted.
        """
        directory = Path(path)
        if directory.exists() and not directory.is_dir():
            raise StateError(f"state directory {directory} is a file; give a directory")
        if read_only and not (directory / "CURRENT").exists():
            raise StateError(f"{directory} holds no subgraph-monitor state")
        fresh = not directory.exists() or not any(directory.iterdir()) or cleared(directory)
        if (directory / "driver").is_dir():
            raise StateError(
                f"{directory} holds the partitioned engine's state; run with --workers (and the "
                "same --shards) to continue it, or give a new --state-dir"
            )
        if not fresh and not (directory / "CURRENT").exists():
            raise StateError(
                f"{directory} is not empty and holds no subgraph-monitor state; give an empty "
                f"or new directory as the state directory"
            )
        options, cache = rocks_options(cache_bytes)
        if not fresh and not read_only:
            # Check what is there without writing anything: RocksDB's read-write open
            # recovers and rewrites files, which a refused directory must not see.
            cls._connect(directory, options, read_only=True).close()
        db = cls._connect(directory, options, read_only=read_only)
        try:
            meta = _read_meta(directory, db)
        except StateError:
            db.close()
            raise
        store = cls(directory, db, meta, cache)
        store.snapshot_ratio = snapshot_ratio
        store.snapshot_min_bytes = snapshot_min_bytes
        return store

    @staticmethod
    def _connect(directory: Path, options: rocksdict.Options, *, read_only: bool) -> Any:
        """The database, with its metadata checked (format version, readability)."""
        db = connect(directory, options, read_only=read_only)
        try:
            _read_meta(directory, db)
        except StateError:
            db.close()
            raise
        return db

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> StateStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- loading -----------------------------------------------------------------------------

    def load(self, index: GraphIndex) -> None:
        """Fill an empty index with the stored state (dictionary, then every relation)."""
        meta = self.meta
        if meta is None:
            return
        try:
            self._load(index, meta)
        except (ValueError, struct.error, IndexError) as error:
            raise StateError(
                f"state in {self.path} is corrupted ({error}); restore the directory from a "
                f"backup, or delete it to rebuild the state from the input"
            ) from error

    def _load(self, index: GraphIndex, meta: StoredMeta) -> None:
        for key, blob in self._scan(b"V"):
            (first,) = struct.unpack(">I", key[1:5])
            if first != len(index.dictionary):
                raise ValueError(
                    f"dictionary entries from {first}, expected {len(index.dictionary)}"
                )
            index.dictionary.restore(blob)
        if len(index.dictionary) != meta.vertices:
            raise ValueError(
                f"{len(index.dictionary)} vertices stored, metadata says {meta.vertices}"
            )
        names = {
            rel_id: name for name, (rel_id, _) in meta.relations.items() if name not in meta.events
        }
        tuples: dict[int, list[list[I32]]] = {rel_id: [] for rel_id in names}
        diffs: dict[int, list[I8]] = {rel_id: [] for rel_id in names}
        for key, blob in self._scan(b"S"):
            (rel_id,) = struct.unpack(">H", key[1:3])
            columns = read_block(blob)
            tuples[rel_id].append(columns)
            diffs[rel_id].append(np.ones(columns[0].shape[0], np.int8))
        for _, blob in self._scan(b"L"):
            for rel_id, columns, diff in read_log(blob):
                tuples[rel_id].append(columns)
                diffs[rel_id].append(diff)
        for rel_id, name in sorted(names.items()):
            arity = meta.relations[name][1]
            parts = tuples[rel_id]
            if parts:
                cols = [np.concatenate([p[k] for p in parts]) for k in range(arity)]
                final = last_wins(cols, np.concatenate(diffs[rel_id]))
            else:
                final = [np.empty(0, np.int32) for _ in range(arity)]
            index.load_relation(name, arity, final)
        # The event stores, then the caller rebuilds the relations derived from them.
        events = {meta.relations[name][0]: name for name in meta.events}
        load_events(index, events, self._scan)
        self._ids_stored = {n: len(index.event_stores[n].ids) for n in events.values()}
        self._compactions = {n: index.event_stores[n].compactions for n in events.values()}
        self._rewrite = meta.format_version != FORMAT_VERSION

    def _scan(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        for raw_key, raw_value in self._db.items(from_key=prefix):
            key = bytes(raw_key)  # type: ignore[arg-type]  # raw mode: keys and values are bytes
            if not key.startswith(prefix):
                break
            yield key, bytes(raw_value)

    # -- committing --------------------------------------------------------------------------

    def commit_epoch(
        self,
        index: GraphIndex,
        meta: StoredMeta,
        changes: dict[str, Change],
        vertices_before: int,
        *,
        snapshot: bool = False,
        event_changes: Mapping[str, EventChanges] | None = None,
    ) -> StoredMeta:
        """Durably record a committed epoch: its changes, its event changes (``event_changes``, by
        event relation: :attr:`~monitor.index.graph.StagedEpoch.event_changes`), new vertices
        and ``meta``.

        ``index`` must already hold the epoch as committed; ``vertices_before`` is the size of
        the dictionary before the epoch. A new snapshot replaces log and snapshot when the log
        has grown enough, or when ``snapshot`` is set (after a bulk load). Returns the metadata
        as stored (with the relation ids, vertex count and log or snapshot sizes filled in).
        """
        relations = dict(self.meta.relations if self.meta else {})
        event_names = tuple(sorted(index.event_stores))
        for name in event_names:
            relations.setdefault(name, (len(relations), 2))
        for name, rel in index.relations.items():
            if name not in relations and name not in index.derived:
                relations[name] = (len(relations), rel.arity)
        batch = rocksdict.WriteBatch(raw_mode=True)
        previous = self.meta or StoredMeta()
        tuples = {n: c for n, c in changes.items() if n not in index.derived}
        log = write_log(tuples, relations)
        # A store compacted at this commit has new eids: its relation is written anew, whole.
        rewritten = {
            n: list(snapshot_records(relations[n][0], s, SNAPSHOT_BLOCK))
            for n, s in index.event_stores.items()
            if s.compactions != self._compactions.get(n, 0)
        }
        logged = event_log(index.event_stores, event_changes or {}, relations)
        events = {n: blob for n, blob in logged.items() if n not in rewritten}
        grown = previous.log_bytes + len(log) + sum(map(len, events.values()))
        grown += sum(len(b) for blobs in rewritten.values() for b in blobs)
        threshold = max(self.snapshot_min_bytes, self.snapshot_ratio * previous.snapshot_bytes)
        if snapshot or self._rewrite or grown > threshold:
            snapshot_bytes = self._write_snapshot(batch, index, relations, rewritten)
            failpoint("snapshot_built")
            meta = replace(
                meta, snapshot_epoch=meta.epoch, snapshot_bytes=snapshot_bytes, log_bytes=0
            )
        else:
            if log:
                batch.put(b"L" + struct.pack(">Q", meta.epoch), log)
            for name, blob in events.items():
                batch.put(log_key(relations[name][0], meta.epoch), blob)
            for name, blobs in rewritten.items():
                put_relation(
                    batch, relations[name][0], blobs, index.event_stores[name].ids.export(0)
                )
                failpoint("event_relation_rewritten")
            for name, (rel_id, _) in relations.items():
                if name in index.event_stores and name not in rewritten:
                    ids = index.event_stores[name].ids
                    if len(ids) > self._ids_stored.get(name, 0):
                        first = self._ids_stored.get(name, 0)
                        batch.put(ids_key(rel_id, first), ids.export(first))
            if len(index.dictionary) > vertices_before:
                batch.put(
                    b"V" + struct.pack(">I", vertices_before),
                    index.dictionary.export(vertices_before),
                )
            meta = replace(
                meta,
                snapshot_epoch=previous.snapshot_epoch,
                snapshot_bytes=previous.snapshot_bytes,
                log_bytes=grown,
            )
        meta = replace(
            meta,
            relations=relations,
            vertices=len(index.dictionary),
            events=event_names,
            format_version=FORMAT_VERSION,
        )
        batch.put(META_KEY, meta.to_json())
        failpoint("before_store_write")
        self._db.write(batch, self._write)
        self._ids_stored = {n: len(s.ids) for n, s in index.event_stores.items()}
        self._compactions = {n: s.compactions for n, s in index.event_stores.items()}
        self._rewrite = False
        self.meta = meta
        return meta

    def _write_snapshot(
        self,
        batch: rocksdict.WriteBatch,
        index: GraphIndex,
        relations: dict[str, tuple[int, int]],
        rewritten: Mapping[str, list[bytes]],
    ) -> int:
        """Everything as of now, given the snapshot records already made of some event
        relations (``rewritten``)."""
        batch.delete_range(b"L", b"M")
        batch.delete_range(b"S", b"T")
        batch.delete_range(b"V", b"W")
        batch.delete_range(b"F", b"H")
        batch.delete_range(b"I", b"J")
        written = 0
        for name, (rel_id, _) in relations.items():
            store = index.event_stores.get(name)
            if store is not None:
                blobs = rewritten.get(name) or list(snapshot_records(rel_id, store, SNAPSHOT_BLOCK))
                written += put_relation(batch, rel_id, blobs, store.ids.export(0))
                continue
            columns = index.tuples(name)
            n = columns[0].shape[0] if columns else 0
            for block, lo in enumerate(range(0, n, SNAPSHOT_BLOCK)):
                blob = block_bytes([c[lo : lo + SNAPSHOT_BLOCK] for c in columns])
                batch.put(b"S" + struct.pack(">HI", rel_id, block), blob)
                written += len(blob)
        dictionary = index.dictionary.export(0)
        batch.put(b"V" + struct.pack(">I", 0), dictionary)
        return written + len(dictionary)

    # -- inspection --------------------------------------------------------------------------

    def disk_bytes(self) -> int:
        """Bytes the directory takes on disk."""
        return sum(f.stat().st_size for f in self.path.rglob("*") if f.is_file())


def connect(
    path: Path, options: rocksdict.Options, *, read_only: bool, named: Path | None = None
) -> Any:
    """The RocksDB database at ``path`` (``read_only``: opened without writing anything); a
    failure is a :class:`StateError` naming ``named`` (the state directory; default ``path``)."""
    try:
        if read_only:
            access = rocksdict.AccessType.read_only()
            return rocksdict.Rdict(str(path), options, access_type=access)
        return rocksdict.Rdict(str(path), options)
    except Exception as error:  # rocksdict raises plain Exception with RocksDB's status
        raise open_error(named or path, error) from error


def rocks_options(cache_bytes: int) -> tuple[rocksdict.Options, Any]:
    options = rocksdict.Options(raw_mode=True)
    options.create_if_missing(True)
    options.set_paranoid_checks(True)
    options.set_compression_type(rocksdict.DBCompressionType.lz4())
    options.set_bottommost_compression_type(rocksdict.DBCompressionType.zstd())
    options.set_write_buffer_size(16 << 20)
    options.set_max_write_buffer_number(2)
    options.set_keep_log_file_num(3)
    table = rocksdict.BlockBasedOptions()
    cache = rocksdict.Cache(cache_bytes)
    table.set_block_cache(cache)
    table.set_cache_index_and_filter_blocks(True)
    options.set_block_based_table_factory(table)
    return options, cache


def _read_meta(directory: Path, db: Any) -> StoredMeta | None:
    try:
        raw = db.get(META_KEY)
        meta = None if raw is None else StoredMeta.from_json(bytes(raw))
    except Exception as error:
        raise StateError(
            f"state in {directory} is corrupted (unreadable metadata: {error}); restore the "
            f"directory from a backup, or delete it to rebuild the state from the input"
        ) from error
    if meta is not None and meta.format_version not in READABLE_VERSIONS:
        raise StateError(
            f"state in {directory} has format version {meta.format_version}, this "
            f"subgraph-monitor reads versions {', '.join(map(str, READABLE_VERSIONS))}; run "
            f"the version that wrote "
            f"it, or delete the directory to rebuild the state from the input"
        )
    return meta


def open_error(directory: Path, error: Exception) -> StateError:
    text = str(error)
    if "lock" in text.lower() or "Resource temporarily unavailable" in text:
        return StateError(
            f"state directory {directory} is in use by another subgraph-monitor process; stop "
            f"it first, or give this run its own --state-dir"
        )
    if "Corruption" in text or "corrupt" in text.lower():
        return StateError(
            f"state in {directory} is corrupted ({text}); restore the directory from a backup, "
            f"or delete it to rebuild the state from the input"
        )
    if isinstance(error, OSError) and error.errno == errno.EACCES:
        return StateError(f"cannot open state directory {directory}: permission denied")
    return StateError(f"cannot open state directory {directory}: {text}")
