"""Sinks for match deltas: JSON Lines on a binary stream, and a list for tests.

The service hands a sink the consolidated deltas of one query and one epoch as columns: one
array of external vertex ids per query variable (``int64``, or ``object`` holding ``int`` and
``str``) and one array of diffs (+1 a match appeared, -1 it disappeared). A JSON Lines sink writes
one line per row::

    {"query":"triangle","epoch":7,"diff":1,"match":{"a":1,"b":2,"c":"x"}}

with the ``match`` keys in variable order and ids keeping their type.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from itertools import repeat
from typing import Any, BinaryIO, Protocol

import numpy as np
import numpy.typing as npt
import orjson

from core.records import VertexId

CHUNK_ROWS = 1 << 16
"""Rows serialized per write: bounds the memory a huge delta needs on its way out."""


class DeltaSink(Protocol):
    """Where the match deltas of every epoch go."""

    def write_deltas(
        self,
        query: str,
        epoch: int,
        variables: Sequence[str],
        columns: Sequence[npt.NDArray[np.generic]],
        diffs: npt.NDArray[np.integer],
        edges: Mapping[str, Mapping[str, npt.NDArray[Any]]] | None = None,
        extra: Mapping[str, npt.NDArray[Any]] | None = None,
    ) -> int:
        """Emit the deltas of ``query`` in ``epoch``; return how many rows were written.

        Called by the service once per query and epoch with a non-empty result, before the
        epoch is committed. ``columns[k][i]`` is the id bound to ``variables[k]`` in row ``i``;
        ``extra`` holds more members of each record (``cause``, ``match_id``), ASCII strings
        that need no escaping, ``None`` where a row has none.
        """
        ...

    def flush(self) -> None:
        """Push buffered output on; called by the service before it commits an epoch."""
        ...


class JsonLinesSink:
    """Match deltas as JSON Lines on ``stream`` (a file, ``sys.stdout.buffer``, a pipe).

    ``lines_written`` counts the lines written so far.
    """

    def __init__(self, stream: BinaryIO) -> None:
        self.stream = stream
        self.lines_written = 0

    def write_deltas(
        self,
        query: str,
        epoch: int,
        variables: Sequence[str],
        columns: Sequence[npt.NDArray[np.generic]],
        diffs: npt.NDArray[np.integer],
        edges: Mapping[str, Mapping[str, npt.NDArray[Any]]] | None = None,
        extra: Mapping[str, npt.NDArray[Any]] | None = None,
    ) -> int:
        """Write one line per row; see :meth:`DeltaSink.write_deltas`.

        Raises ``ValueError`` when the columns do not match the variables or the diffs, or a diff
        is not +1 or -1, and ``TypeError`` when an id is neither an ``int`` nor a ``str``.
        """
        rows = check_deltas(variables, columns, diffs)
        head = orjson.dumps({"query": query, "epoch": int(epoch)})[:-1]
        tails = extra_tails(extra, rows)
        if edges:
            self._write_with_edges(head, variables, columns, diffs, edges, tails)
        elif all(c.dtype.kind in "iu" for c in columns):
            # Only integers: a %d template per diff sign; no escaping can be needed.
            escaped = head.replace(b"%", b"%%")
            match = b",".join(orjson.dumps(v).replace(b"%", b"%%") + b":%d" for v in variables)
            lines = {
                d: escaped + b',"diff":' + str(d).encode() + b',"match":{' + match + b"}%b}\n"
                for d in (1, -1)
            }
            for start in range(0, rows, CHUNK_ROWS):
                stop = min(start + CHUNK_ROWS, rows)
                bindings = zip(
                    *(c[start:stop].tolist() for c in columns), tails[start:stop], strict=True
                )
                signs = diffs[start:stop].tolist()
                self.stream.write(
                    b"".join([lines[d] % b for d, b in zip(signs, bindings, strict=True)])
                )
        else:
            prefix = {d: head + b',"diff":' + str(d).encode() + b',"match":' for d in (1, -1)}
            dumps = orjson.dumps
            for start in range(0, rows, CHUNK_ROWS):
                stop = min(start + CHUNK_ROWS, rows)
                bindings = zip(*(id_list(c[start:stop]) for c in columns), strict=True)
                matches = map(dumps, map(dict, map(zip, repeat(variables), bindings)))
                signs = diffs[start:stop].tolist()
                parts = zip(signs, matches, tails[start:stop], strict=True)
                self.stream.write(b"".join([prefix[d] + m + t + b"}\n" for d, m, t in parts]))
        self.lines_written += rows
        return rows

    def _write_with_edges(
        self,
        head: bytes,
        variables: Sequence[str],
        columns: Sequence[npt.NDArray[np.generic]],
        diffs: npt.NDArray[np.integer],
        edges: Mapping[str, Mapping[str, npt.NDArray[Any]]],
        tails: list[bytes],
    ) -> None:
        """Lines with ``"edges"``: per edge variable, the matched event with its fields (from
        columns; a field that is None for an event is left out of its object)."""
        names = list(edges)
        bindings = zip(*(id_list(c) for c in columns), strict=True)
        per_edge = [event_objects(edges[n]) for n in names]
        events = zip(*per_edge, strict=True)
        lines = []
        rows = zip(diffs.tolist(), bindings, events, tails, strict=True)
        for diff, binding, matched, tail in rows:
            body = {
                "diff": diff,
                "match": dict(zip(variables, binding, strict=True)),
                "edges": dict(zip(names, matched, strict=True)),
            }
            lines.append(head + b"," + orjson.dumps(body)[1:-1] + tail + b"}\n")
        self.stream.write(b"".join(lines))

    def flush(self) -> None:
        """Flush the stream; see :meth:`DeltaSink.flush`."""
        self.stream.flush()


class OutputFile(JsonLinesSink):
    """JSON Lines in a file that is made durable per epoch, for exactly-once output.

    Opened at a known length (the length the last committed epoch left, 0 for a new run): any
    bytes past it are the output of an epoch that was written but never committed, and are cut
    off. :meth:`sync` makes everything written durable and returns the file's length, which the
    caller stores with the epoch's commit.
    """

    def __init__(self, path: str, length: int) -> None:
        self.path = path
        handle = open(path, "r+b" if os.path.exists(path) else "w+b")  # noqa: SIM115
        size = os.fstat(handle.fileno()).st_size
        if size < length:
            handle.close()
            raise OSError(
                f"output file {path} holds {size} bytes but the committed state says {length}; "
                "it was truncated or replaced by something else"
            )
        handle.truncate(length)
        handle.seek(length)
        super().__init__(handle)
        self._handle = handle

    def sync(self) -> int:
        """Flush and fsync; the file's length, every byte of which is now durable."""
        self._handle.flush()
        os.fsync(self._handle.fileno())
        return self._handle.tell()

    def close(self) -> None:
        self._handle.close()


class ListSink:
    """Match deltas kept in memory as ``(query, epoch, binding, diff)`` rows, for tests.

    ``binding`` is the tuple of ids in variable order, as Python ``int`` and ``str``.
    """

    def __init__(self) -> None:
        self.rows: list[tuple[str, int, tuple[VertexId, ...], int]] = []
        self.flushes = 0

    def write_deltas(
        self,
        query: str,
        epoch: int,
        variables: Sequence[str],
        columns: Sequence[npt.NDArray[np.generic]],
        diffs: npt.NDArray[np.integer],
        edges: Mapping[str, Mapping[str, npt.NDArray[Any]]] | None = None,
        extra: Mapping[str, npt.NDArray[Any]] | None = None,
    ) -> int:
        """Append one row per delta; see :meth:`DeltaSink.write_deltas`."""
        rows = check_deltas(variables, columns, diffs)
        bindings = zip(*(id_list(c) for c in columns), strict=True) if columns else iter(())
        for binding, diff in zip(bindings, diffs.tolist(), strict=True):
            self.rows.append((query, int(epoch), binding, diff))
        return rows

    def flush(self) -> None:
        """Count the flush (tests check that the service flushes before it commits)."""
        self.flushes += 1


def extra_tails(extra: Mapping[str, npt.NDArray[Any]] | None, rows: int) -> list[bytes]:
    """Per row, its ``extra`` members as JSON text to append to its object (``,"k":"v"``;
    nothing for a ``None``), whole columns at a time."""
    tail = np.zeros(rows, "S1")
    for key, column in (extra or {}).items():
        present = column != None  # noqa: E711 (elementwise on objects)
        if not present.any():
            continue
        text = np.zeros(rows, f"S{len(key) + 6}")
        text[present] = f',"{key}":"'.encode()
        values = np.zeros(rows, "S1")
        values = values.astype(np.char.encode(column[present].astype(str)).dtype)
        values[present] = np.char.encode(column[present].astype(str))
        member = np.char.add(np.char.add(text, values), np.where(present, b'"', b""))
        tail = np.char.add(tail, member)
    out: list[bytes] = tail.tolist()
    return out


def event_objects(columns: Mapping[str, npt.NDArray[Any]]) -> list[dict[str, object]]:
    """One JSON object per row of event columns, leaving out absent (None) values."""
    names = list(columns)
    rows = zip(*(columns[n].tolist() for n in names), strict=True)
    return [{k: v for k, v in zip(names, row, strict=True) if v is not None} for row in rows]


def check_deltas(
    variables: Sequence[str],
    columns: Sequence[npt.NDArray[np.generic]],
    diffs: npt.NDArray[np.integer],
) -> int:
    """The number of rows, after checking that the arguments describe a valid delta."""
    if not variables:
        raise ValueError("a match delta needs at least one variable")
    if len(columns) != len(variables):
        raise ValueError(f"{len(variables)} variables but {len(columns)} columns")
    rows = int(diffs.shape[0])
    for variable, column in zip(variables, columns, strict=True):
        if column.shape != (rows,):
            raise ValueError(
                f"column {variable!r} has shape {column.shape}, expected ({rows},) like diffs"
            )
    if rows and not np.all((diffs == 1) | (diffs == -1)):
        raise ValueError("every diff must be +1 or -1 (consolidate before writing)")
    return rows


def id_list(column: npt.NDArray[np.generic]) -> list[VertexId]:
    """A column of ids as Python values, checking the values of ``object`` columns."""
    if column.dtype.kind in "iu":
        values: list[VertexId] = column.tolist()
        return values
    if column.dtype != object:
        raise TypeError(f"id columns must be integer or object arrays, got dtype {column.dtype}")
    items: list[object] = column.tolist()
    if set(map(type, items)) <= {int, str}:
        return items  # type: ignore[return-value]  # checked just above
    return [_id(item) for item in items]


def _id(item: object) -> VertexId:
    """One id of an ``object`` column as a plain ``int`` or ``str``."""
    if isinstance(item, (int, np.integer)) and not isinstance(item, (bool, np.bool_)):
        return int(item)
    if isinstance(item, str):
        return str(item)
    raise TypeError(f"vertex ids are int or str, got {type(item).__name__} {item!r}")
