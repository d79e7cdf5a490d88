"""The batched output format: many match deltas in one Kafka record, and the reader of both formats.

With ``SGM_OUTPUT_FORMAT=batches`` the sink writes, per query and epoch, one record holding all
the deltas it publishes (several when they exceed the record size, below): the per-record
overhead of Kafka and of the client (a ``produce`` call, a delivery report, the record framing)
is paid once per batch instead of once per delta.

- **Value**: JSON Lines, each line exactly the value of a ``records`` record (the same text, in
  the same order), each ending with a newline: a consumer parses both formats with the same code.
- **Key**: the query's name as a JSON string (``"triangle"``). All batches of a query go to
  one partition, so its epochs are read in order.
- **Headers**: ``format`` (``jsonl``, or ``arrow`` for the columnar encoding of
  :mod:`connectors.arrow_batch`, ``SGM_BATCH_ENCODING=arrow``; a record without it is a
  ``records`` record), ``query``, ``epoch``, ``count`` (deltas in this record), ``first`` and
  ``total`` (this record holds the ``first``..``first + count - 1``-th of the ``total`` deltas
  this producer published for the query in the epoch: the last one has ``first + count ==
  total``), ``service-version``.
- **Size**: a record's value holds whole lines (rows) and at most ``message.max.bytes``
  (librdkafka's, 1,000,000 by default; ``SGM_KAFKA`` may raise it, with the topic's
  ``max.message.bytes``) less :data:`RECORD_OVERHEAD` bytes; an epoch's deltas of a query beyond
  that continue in the next record. A single delta larger than that cannot be published in
  either format.

:func:`read_deltas` (a value and its headers) and :func:`read_message` (a consumed message)
give a consumer the deltas of a record of either format as dicts; :func:`batch_info` the
headers of a batch.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np
import numpy.typing as npt
import orjson

from connectors.arrow_batch import ARROW, arrow, arrow_batches, read_arrow, record_batch
from connectors.delta_json import NEWLINE, EdgeColumns, chunks, value_pieces
from connectors.json_rows import encode_rows
from connectors.sinks import CHUNK_ROWS
from core.columns import Member

#: The ``format`` header of a batch whose value is JSON Lines.
JSONL = b"jsonl"

#: The batch encodings (``SGM_BATCH_ENCODING``): JSON Lines, or Arrow IPC streams.
BatchEncoding = Literal["jsonl", "arrow"]

#: Bytes of ``message.max.bytes`` left to a batch's key, headers and record framing.
RECORD_OVERHEAD = 4096

Headers = Sequence[tuple[str, bytes | str | None]] | Mapping[str, bytes | str | None] | None
"""Record headers as confluent-kafka gives them: a list of pairs (or a dict), or None."""


@dataclass(frozen=True)
class Batch:
    """One record's worth of deltas: their JSON Lines (or Arrow stream), and which of the
    epoch's they are."""

    value: bytes
    first: int
    count: int
    format: bytes = JSONL

    def headers(
        self, query: str, epoch: int, total: int, version: bytes
    ) -> list[tuple[str, str | bytes | None]]:
        return [
            ("format", self.format),
            ("query", query.encode()),
            ("epoch", str(epoch).encode()),
            ("count", str(self.count).encode()),
            ("first", str(self.first).encode()),
            ("total", str(total).encode()),
            ("service-version", version),
        ]


def batches(
    query: str,
    epoch: int,
    variables: Sequence[str],
    columns: Sequence[npt.NDArray[np.generic]],
    diffs: npt.NDArray[np.integer],
    edges: EdgeColumns | None,
    extra: Mapping[str, Member] | None,
    max_bytes: int,
    encoding: BatchEncoding = "jsonl",
) -> Iterator[Batch]:
    """The deltas of ``query`` in ``epoch`` as JSON Lines, cut into values of at most
    ``max_bytes`` at line ends (a line longer than that alone), :data:`CHUNK_ROWS` rows
    encoded at a time (a value never spans two chunks); or as Arrow streams of whole rows."""
    if encoding == "arrow":
        table = record_batch(arrow(), query, epoch, variables, columns, diffs, edges, extra)
        for value, start, count in arrow_batches(table, max_bytes):
            yield Batch(value, start, count, ARROW)
        return
    first = 0
    for part in chunks(columns, diffs, edges, extra, CHUNK_ROWS):
        pieces = value_pieces(
            query, epoch, variables, part.columns, part.diffs, part.edges, part.extra
        )
        text, ends = encode_rows([*pieces, NEWLINE], part.rows)
        row = 0
        for end_row in cuts(ends, max_bytes):
            start = int(ends[row - 1]) if row else 0
            yield Batch(text[start : int(ends[end_row - 1])].tobytes(), first, end_row - row)
            first += end_row - row
            row = end_row


def cuts(ends: npt.NDArray[np.int64], max_bytes: int) -> list[int]:
    """Where each value ends, in rows: greedily as many whole rows as fit in ``max_bytes``
    (rows end at byte ``ends[i]``), at least one row per value."""
    out: list[int] = []
    row, start, rows = 0, 0, int(ends.shape[0])
    while row < rows:
        end = max(int(np.searchsorted(ends, start + max_bytes, side="right")), row + 1)
        out.append(end)
        row, start = end, int(ends[end - 1])
    return out


# -- the consumer's side -----------------------------------------------------------------------


class Message(Protocol):
    """What :func:`read_message` needs of a consumed message (confluent-kafka's ``Message``)."""

    def value(self) -> bytes | None: ...

    def headers(self) -> Any: ...


@dataclass(frozen=True)
class BatchInfo:
    """The headers of a batch record."""

    query: str
    epoch: int
    count: int
    first: int
    total: int

    @property
    def last(self) -> bool:
        """Whether this is the producer's last record of the query's epoch."""
        return self.first + self.count == self.total


def header(headers: Headers, name: str) -> bytes | None:
    """The value of header ``name`` (the first one), or None."""
    if not headers:
        return None
    items = headers.items() if isinstance(headers, Mapping) else headers
    for key, value in items:
        if key == name:
            return value.encode() if isinstance(value, str) else value
    return None


def batch_info(headers: Headers) -> BatchInfo | None:
    """What the headers say of a batch; None for a ``records`` record (no ``format``)."""
    if header(headers, "format") is None:
        return None
    found = {n: header(headers, n) for n in ("query", "epoch", "count", "first", "total")}
    missing = [n for n, v in found.items() if v is None]
    if missing:
        raise ValueError(f"a batch record without the header(s) {', '.join(missing)}")
    query, epoch, count, first, total = (v or b"" for v in found.values())
    return BatchInfo(query.decode(), int(epoch), int(count), int(first), int(total))


def read_deltas(value: bytes | None, headers: Headers = None) -> list[dict[str, Any]]:
    """The match deltas of one output record, as dicts: the one delta of a ``records``
    record, every line of a batch (parsed in one ``orjson`` call), every row of an Arrow
    batch (as the dicts its JSON Lines would give; needs ``pyarrow``). Raises ``ValueError`` for a
    batch of another ``format`` than this version reads."""
    if not value:
        return []
    kind = header(headers, "format")
    if kind is None:
        return [orjson.loads(value)]
    if kind == ARROW:
        return read_arrow(value)
    if kind != JSONL:
        raise ValueError(f"batch format {kind!r} is not one this reader knows (jsonl, arrow)")
    return list(orjson.loads(b"[" + value.rstrip(b"\n").replace(b"\n", b",") + b"]"))


def read_message(message: Message) -> list[dict[str, Any]]:
    """:func:`read_deltas` of a consumed message (read with ``isolation.level=read_committed``)."""
    return read_deltas(message.value(), message.headers())
