"""Tuples in the durable store: snapshot blocks of sorted tuples and per-epoch change records.

A snapshot block holds one relation's tuples, a log record an epoch's effective changes of
every relation that changed; both are whole ``int32`` columns (little-endian), and loading
replays them onto a set (:func:`last_wins`)::

    block:  arity:u8 n:u32, then arity int32[n] columns
    record: relations:u16, then per relation rel:u16 arity:u8 n:u32 int32[n] x arity, int8[n]
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import numpy as np
import numpy.typing as npt

from monitor.index.graph import Change
from monitor.index.levels import I8, I32


def block_bytes(columns: list[I32]) -> bytes:
    n = columns[0].shape[0]
    head = struct.pack("<BI", len(columns), n)
    return head + b"".join(c.astype("<i4").tobytes() for c in columns)


def read_block(blob: bytes) -> list[I32]:
    arity, n = struct.unpack_from("<BI", blob)
    if len(blob) != 5 + 4 * arity * n:
        raise ValueError(f"snapshot block of {len(blob)} bytes does not hold {n} tuples")
    return [np.frombuffer(blob, "<i4", n, 5 + 4 * n * k).astype(np.int32) for k in range(arity)]


def write_log(changes: dict[str, Change], relations: dict[str, tuple[int, int]]) -> bytes:
    parts = [struct.pack("<H", len(changes))]
    for name, change in changes.items():
        rel_id, arity = relations[name]
        parts.append(struct.pack("<HBI", rel_id, arity, len(change)))
        parts.extend(c.astype("<i4").tobytes() for c in change.columns)
        parts.append(change.diff.astype(np.int8).tobytes())
    return b"".join(parts) if changes else b""


def read_log(blob: bytes) -> Iterator[tuple[int, list[I32], I8]]:
    (count,) = struct.unpack_from("<H", blob)
    at = 2
    for _ in range(count):
        rel_id, arity, n = struct.unpack_from("<HBI", blob, at)
        at += 7
        columns = []
        for _ in range(arity):
            columns.append(np.frombuffer(blob, "<i4", n, at).astype(np.int32))
            at += 4 * n
        diff = np.frombuffer(blob, np.int8, n, at).copy()
        at += n
        yield rel_id, columns, diff
    if at != len(blob):
        raise ValueError(f"log record of {len(blob)} bytes has {len(blob) - at} bytes left over")


def last_wins(columns: list[I32], diff: I8) -> list[I32]:
    """The tuples whose last diff (in the given order) is +1: replaying changes onto a set."""
    n = diff.shape[0]
    keys: list[npt.NDArray[np.integer]] = [np.arange(n), *reversed(columns)]
    order = np.lexsort(keys)
    cols = [c[order] for c in columns]
    last = np.ones(n, np.bool_)
    if n > 1:
        last[:-1] = np.logical_or.reduce([c[1:] != c[:-1] for c in cols])
    keep = last & (diff[order] > 0)
    return [c[keep] for c in cols]
