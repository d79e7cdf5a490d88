"""The shard changelog: every write of a shard's RocksDB, mirrored into the shard's partition of
a Kafka topic, so that a shard whose disk is lost with its node is rebuilt by replaying it (as
Kafka Streams restores a task's state store from its changelog topic).

A write is a batch of operations (``put``, ``delete_range``), applied to RocksDB and appended to
the log (:class:`~connectors.kafka_log.KafkaLog`) before the call that made it returns: a
shard acknowledges ``prepare`` only once its epoch is in Kafka, so whatever the driver has
recorded is in the changelog. After a snapshot the shard appends an *image* instead, a batch
that clears the database and puts every key it holds, and cuts the log before it: the partition
stays about the size of the shard's state. Rebuilding replays every complete batch in order
into an empty database; the store then opens it as it opens its own directory (dropping an
epoch prepared after the driver's record).
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import rocksdict

from connectors.kafka_log import KafkaLog
from core.errors import StateError

log = logging.getLogger(__name__)

PUT, DELETE_RANGE = 1, 2
#: Every key of a shard's store lies in [FIRST_KEY, LAST_KEY).
FIRST_KEY, LAST_KEY = b"\x00", b"\xff"
_LENGTH = struct.Struct(">BII")


class MirroredBatch:
    """A RocksDB write batch that keeps its operations as bytes for the changelog (``mirrored``
    false: a batch the changelog gets as an image after it, whose operations are not kept)."""

    def __init__(self, mirrored: bool = True) -> None:
        self.batch = rocksdict.WriteBatch(raw_mode=True)
        self.ops = bytearray()
        self.mirrored = mirrored

    def put(self, key: bytes, value: bytes) -> None:
        self.batch.put(key, value)
        if self.mirrored:
            self.ops += _LENGTH.pack(PUT, len(key), len(value)) + key + value

    def delete_range(self, begin: bytes, end: bytes) -> None:
        self.batch.delete_range(begin, end)
        if self.mirrored:
            self.ops += _LENGTH.pack(DELETE_RANGE, len(begin), len(end)) + begin + end


def operations(blob: bytes) -> Iterator[tuple[int, bytes, bytes]]:
    """The operations of a batch as written by :class:`MirroredBatch`."""
    at = 0
    while at < len(blob):
        op, a, b = _LENGTH.unpack_from(blob, at)
        at += _LENGTH.size
        first, second = blob[at : at + a], blob[at + a : at + a + b]
        at += a + b
        if op not in (PUT, DELETE_RANGE) or len(second) != b:
            raise StateError(f"the shard changelog holds a batch that does not decode (at {at})")
        yield op, first, second


def replay(db: Any, blob: bytes, write: Any) -> None:
    """Apply one batch of the changelog to ``db``."""
    batch = rocksdict.WriteBatch(raw_mode=True)
    for op, first, second in operations(blob):
        if op == PUT:
            batch.put(first, second)
        else:
            batch.delete_range(first, second)
    db.write(batch, write)


def image(db: Any) -> Iterator[bytes]:
    """A batch that makes any database hold exactly what ``db`` holds, in pieces (one per
    key, as :meth:`KafkaLog.append` streams them: never the whole database in memory)."""
    yield _LENGTH.pack(DELETE_RANGE, 1, 1) + FIRST_KEY + LAST_KEY
    for raw_key, raw_value in db.items():
        key, value = bytes(raw_key), bytes(raw_value)
        yield _LENGTH.pack(PUT, len(key), len(value)) + key + value


def rebuild(db: Any, path: Path, changelog: KafkaLog, write: Any) -> dict[str, float]:
    """Empty ``db`` and replay the changelog into it; the bytes and batches replayed, and the
    seconds it took."""
    started = time.perf_counter()
    clear = rocksdict.WriteBatch(raw_mode=True)
    clear.delete_range(FIRST_KEY, LAST_KEY)
    db.write(clear, write)
    replayed = batches = 0
    for blob in changelog.read():
        replay(db, blob, write)
        replayed += len(blob)
        batches += 1
    seconds = time.perf_counter() - started
    log.warning(
        "shard rebuilt from its changelog",
        extra={
            "path": str(path),
            "topic": changelog.topic,
            "partition": changelog.partition,
            "bytes": replayed,
            "batches": batches,
            "seconds": round(seconds, 3),
        },
    )
    return {"bytes": float(replayed), "batches": float(batches), "seconds": seconds}
