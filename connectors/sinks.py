"""Sinks for match deltas: JSON Lines on a binary stream, and a list for tests.

The service hands a sink the consolidated deltas of one query and one epoch as columns: one
array of external vertex ids per query variable (``int64``, or ``object`` holding ``int`` and
``str``) and one array of diffs (+1 a match appeared, -1 it disappeared). A JSON Lines sink writes
one line per row::

    {"query":"triangle","epoch":7,"diff":1,"match":{"a":1,"b":2,"c":"x"}}

with the ``match`` keys in variable order and ids keeping their type (the whole record:
:mod:`connectors.delta_json`). A JSON Lines sink encodes up to :data:`CHUNK_ROWS` rows with a
few dozen whole-array operations (:mod:`connectors.json_rows`), never a dict per delta.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import BinaryIO, Protocol

import numpy as np
import numpy.typing as npt

from connectors import json_place
from connectors.delta_json import EdgeColumns, chunks, value_pieces, vertex_ids
from connectors.json_rows import constant, encode_rows
from core.columns import Column, Member, python_values
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
        edges: EdgeColumns | None = None,
        extra: Mapping[str, Member] | None = None,
    ) -> int:
        """Emit the deltas of ``query`` in ``epoch``; return how many rows were written.

        Called by the service once per query and epoch with a non-empty result, before the
        epoch is committed. ``columns[k][i]`` is the id bound to ``variables[k]`` in row ``i``;
        ``edges`` the fields of each edge variable's events; ``extra`` more members of each
        record (``cause``, ``match_id``); a row without a value leaves the member out
        (:data:`~connectors.json_rows.Column` says how each kind of column marks that).
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
        json_place.warm()

    def write_deltas(
        self,
        query: str,
        epoch: int,
        variables: Sequence[str],
        columns: Sequence[npt.NDArray[np.generic]],
        diffs: npt.NDArray[np.integer],
        edges: EdgeColumns | None = None,
        extra: Mapping[str, Member] | None = None,
    ) -> int:
        """Write one line per row; see :meth:`DeltaSink.write_deltas`.

        Raises ``ValueError`` when the columns do not match the variables or the diffs, or a diff
        is not +1 or -1, and ``TypeError`` when an id is neither an ``int`` nor a ``str``.
        """
        rows = check_deltas(variables, columns, diffs)
        for part in chunks(columns, diffs, edges, extra, CHUNK_ROWS):
            pieces = value_pieces(
                query, epoch, variables, part.columns, part.diffs, part.edges, part.extra
            )
            text, _ = encode_rows([*pieces, constant(b"\n")], part.rows)
            self.stream.write(text.data)
        self.lines_written += rows
        return rows

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
        edges: EdgeColumns | None = None,
        extra: Mapping[str, Member] | None = None,
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


def event_objects(columns: Mapping[str, Column]) -> list[dict[str, object]]:
    """One JSON object per row of event columns, leaving out absent values (slow paths)."""
    names = list(columns)
    rows = zip(*(python_values(columns[n]) for n in names), strict=True)
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
    values: list[VertexId] = vertex_ids(column).tolist()
    return values
