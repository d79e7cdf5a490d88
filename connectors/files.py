"""Edge files and stdin as a source of :class:`UpdateBatch` es.

:class:`EdgeFileSource` reads a path (or ``-`` for stdin), gzip-compressed or not, in big blocks
cut at the last newline. Text blocks made only of ``src dst`` integer lines (a SNAP edge list)
are parsed by numpy without Python code per line; in other blocks the simple lines still take
that path and the rest go one by one through :mod:`connectors.formats`. JSON Lines input is
decoded a block at a time (:mod:`connectors.json_lines`: pyarrow's JSON reader, else the
batch decoder); ``fast_path=False`` decodes it line by line, the reference the block decoder
is tested against.

Updates are numbered from 0 in stream order; the batches a source yields follow each other:
every batch starts at the previous ``first_seq + count``. A line that cannot be decoded becomes
a :class:`DeadLetter` at ``path:line`` (1-based) and the stream goes on, or, in strict mode, ends
the stream with an :class:`InputError` after every update before it has been yielded.

A relation has one arity: the one the caller knows (the queries', a restored index's), else its
first line's. A line of another length cannot be decoded (``relation 'e' has 2 ids per tuple,
got 3``; for an arity learned from the input, ``(since path:line)`` says where).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from operator import itemgetter

import numpy as np
import numpy.typing as npt

from connectors.edge_blocks import classify_edge_lines, parse_edge_block, parse_edge_lines
from connectors.events import EventRecord, FieldTypes, event_updates, parse_json_event
from connectors.formats import (
    DEFAULT_RELATION,
    Decoded,
    is_comment,
    is_relation_name,
    parse_json_record,
    parse_text_line,
)
from connectors.json_lines import JsonLines
from connectors.streams import (
    BLOCK_SIZE,
    FORMATS,
    Input,
    blocks,
    comment_prefix,
    detect_format,
    split_lines,
)
from core.errors import ConfigError, InputError, arity_message
from core.records import (
    Checkpoint,
    DeadLetter,
    RelationUpdates,
    UpdateBatch,
    VertexId,
    concat_ids,
    id_column,
    split_events,
)


class EdgeFileSource:
    """Updates read from an edge file, a JSON Lines file or stdin (``path == "-"``).

    ``format`` is ``"text"``, ``"json"`` or ``"auto"`` (decided by the first line that is not
    blank or a comment: ``{`` means JSON). Gzip input is recognized by its magic bytes (so a
    ``.gz`` file, or a compressed stream on stdin). ``block_size`` is how many bytes are read at
    a time; ``fast_path=False`` turns the vectorized text parser and the block decoder of JSON
    Lines off (for benchmarks and tests).

    ``on_dead_letter`` is called with every line that cannot be decoded, as the block holding it
    is decoded (before that block's updates are yielded); positions read ``path:line``, with
    ``<stdin>`` for stdin. A line whose number of ids is not its relation's arity is such a
    line: the arity is the one in ``arities`` (the queries' and the index's, read when reading
    begins, never changed here), else the relation's first line's. ``format`` holds the
    detected format once reading has begun.

    Progress counters, updated as each block is decoded (so they may run ahead of the batches the
    caller has consumed): ``lines_read``, ``updates_read``, ``dead_letters``, ``bytes_read``
    (bytes taken from the file, compressed bytes for gzip) and ``total_bytes`` (the file size, or
    ``None`` for stdin).
    """

    def __init__(
        self,
        path: str,
        *,
        default_relation: str = DEFAULT_RELATION,
        format: str = "auto",
        strict: bool = False,
        on_dead_letter: Callable[[DeadLetter], None] | None = None,
        block_size: int = BLOCK_SIZE,
        fast_path: bool = True,
        start: Checkpoint | None = None,
        skip_to: int = 0,
        events: FieldTypes | None = None,
        arities: Mapping[str, int] | None = None,
    ) -> None:
        if format not in FORMATS:
            raise ConfigError(f"format must be one of {', '.join(FORMATS)}; got {format!r}")
        if not is_relation_name(default_relation):
            raise ConfigError(
                f"default relation name {default_relation!r} is not allowed; use letters, "
                "digits, '_' and '-', starting with a letter or '_'"
            )
        if block_size < 1:
            raise ConfigError(f"block_size must be at least 1 byte; got {block_size}")
        self.path = path
        self.name = "<stdin>" if path == "-" else path
        self.default_relation = default_relation
        self.format: str = format
        self.strict = strict
        self.on_dead_letter = on_dead_letter
        self.block_size = block_size
        self.fast_path = fast_path
        self.start = start
        self.skip_to = skip_to
        #: The event relations and their field types: JSON records of these are events.
        self.events = events
        #: The relations' arities known before the input is read (the queries', the index's).
        self.arities: Mapping[str, int] = {} if arities is None else arities
        if start is not None:
            self.format = start.format
        self.total_bytes: int | None = None
        if path != "-":
            try:
                self.total_bytes = os.stat(path).st_size
            except OSError as error:
                raise InputError(f"cannot read input: {error.strerror}", position=path) from None
        self.lines_read = 0
        self.updates_read = 0
        self.dead_letters = 0
        self.bytes_read = 0
        #: Each relation's arity and where the input fixed it ("": known before).
        self._arity: dict[str, tuple[int, str]] = {}

    def batches(self, max_updates: int) -> Iterator[UpdateBatch]:
        """Read the input from its start and yield it as consecutive batches.

        Called once per run by the service (or the CLI); every batch holds at most
        ``max_updates`` updates, and only the last one may hold fewer. Counters start from zero.
        In strict mode the first bad line raises :class:`InputError` once the updates before it
        have been yielded.
        """
        if max_updates < 1:
            raise ConfigError(f"max_updates must be at least 1; got {max_updates}")
        return self._batches(max_updates)

    def _batches(self, max_updates: int) -> Iterator[UpdateBatch]:
        self.lines_read = self.updates_read = self.dead_letters = self.bytes_read = 0
        offset = 0
        if self.start is not None:
            self.lines_read, self.updates_read = self.start.line, self.start.seq
            offset = self.start.offset
        self._arity = {name: (arity, "") for name, arity in self.arities.items()}
        pending: deque[UpdateBatch] = deque()
        pending_count = 0
        failure: InputError | None = None
        with Input(self.path, offset) as (counter, stream):
            for block, length in blocks(stream, self.block_size, at_start=offset == 0):
                self.bytes_read = counter.count
                checkpoint = Checkpoint(offset, self.lines_read, self.updates_read, self.format)
                offset += length
                pieces, failure = self._decode_block(block)
                if checkpoint.format == "auto":
                    checkpoint = Checkpoint(
                        checkpoint.offset, checkpoint.line, checkpoint.seq, self.format
                    )
                for piece in pieces:
                    if piece.count and piece.first_seq + piece.count > self.skip_to:
                        if piece.first_seq < self.skip_to:
                            _, piece = _split_front(piece, self.skip_to - piece.first_seq)
                        piece.resume = checkpoint
                        pending.append(piece)
                        pending_count += piece.count
                while pending_count >= max_updates:
                    yield _take(pending, max_updates)
                    pending_count -= max_updates
                if failure is not None:
                    break
            self.bytes_read = counter.count
        if pending_count:
            yield _take(pending, pending_count)
        if failure is not None:
            raise failure

    def _decode_block(self, block: bytes) -> tuple[list[UpdateBatch], InputError | None]:
        """The updates of one block of whole lines, and the strict-mode error that cut it short."""
        if b"\r" in block:
            block = block.replace(b"\r\n", b"\n")
        if self.format == "auto":
            detected = detect_format(block)
            if detected is None:
                self.lines_read += block.count(b"\n")
                return [], None
            self.format = detected
        if self.format == "json" and self.fast_path:
            return self._decode_json(block)
        if self.format == "json" or not self.fast_path or not self._default_may_be_binary():
            return self._decode_lines(split_lines(block))
        pieces: list[UpdateBatch] = []
        head = comment_prefix(block)
        if head:
            # A SNAP header: count its lines, then try the whole rest on the fast path.
            pieces, failure = self._decode_lines(split_lines(block[:head]))
            block = block[head:]
            if not block:
                return pieces, failure
        columns = parse_edge_block(block)
        if columns is not None:
            return [*pieces, self._simple_piece(columns)], None
        starts, ends, simple = classify_edge_lines(block)
        if self.default_relation not in self._arity and simple.any():
            first = int(np.argmax(simple))
            if first:
                # Lines before the first simple one may fix the default relation's arity.
                before, failure = self._decode_lines(split_lines(block[: int(starts[first])]))
                pieces += before
                if failure is not None:
                    return pieces, failure
                if not self._default_may_be_binary():
                    rest, failure = self._decode_lines(split_lines(block[int(starts[first]) :]))
                    return pieces + rest, failure
                starts, ends, simple = starts[first:], ends[first:], simple[first:]
        edges = parse_edge_lines(block, starts, ends, simple)
        others = np.flatnonzero(~simple)
        lines = [
            block[s:e] for s, e in zip(starts[others].tolist(), ends[others].tolist(), strict=True)
        ]
        rest, failure = self._assemble(simple, edges, others.tolist(), lines)
        return pieces + rest, failure

    def _decode_json(self, block: bytes) -> tuple[list[UpdateBatch], InputError | None]:
        """A JSON Lines block decoded at once (:mod:`connectors.json_lines`)."""
        json = JsonLines(self.name, self.default_relation, self.events, self.strict, self._arity)
        decoded = json.decode(block, self.lines_read, self.updates_read)
        self.lines_read += decoded.lines
        self.updates_read += decoded.batch.count
        self.dead_letters += len(decoded.dead_letters)
        if self.on_dead_letter is not None:
            for letter in decoded.dead_letters:
                self.on_dead_letter(letter)
        return [decoded.batch], decoded.failure

    def _decode_lines(self, lines: list[bytes]) -> tuple[list[UpdateBatch], InputError | None]:
        """Every line through the per-line decoder (JSON, or text without the fast path)."""
        none = np.zeros(len(lines), dtype=np.bool_)
        empty = (np.empty(0, np.int64), np.empty(0, np.int64))
        return self._assemble(none, empty, range(len(lines)), lines)

    def _default_may_be_binary(self) -> bool:
        """Whether ``src dst`` lines may still go to the default relation (its arity is 2 or
        not yet known)."""
        return self._arity.get(self.default_relation, (2, ""))[0] == 2

    def _simple_piece(self, columns: tuple[npt.NDArray[np.int64], ...]) -> UpdateBatch:
        """A block that was all simple lines: one relation, consecutive sequence numbers."""
        count = int(columns[0].shape[0])
        first_seq = self.updates_read
        self._note_arity(self.default_relation, 2, self.lines_read + 1)
        part = RelationUpdates(
            list(columns),
            np.ones(count, dtype=np.int8),
            np.arange(first_seq, first_seq + count, dtype=np.int64),
        )
        self.lines_read += count
        self.updates_read += count
        return UpdateBatch({self.default_relation: part}, first_seq, count)

    def _assemble(
        self,
        simple: npt.NDArray[np.bool_],
        edges: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]],
        other_lines: list[int] | range,
        other_raw: list[bytes],
    ) -> tuple[list[UpdateBatch], InputError | None]:
        """Decode the lines that are not simple one by one and merge them with the simple ones.

        ``simple`` marks the block's simple lines and ``edges`` holds their columns; the others
        are ``other_raw``, at line indices ``other_lines`` in the block.
        """
        base_line = self.lines_read
        first_seq = self.updates_read
        default = self.default_relation
        parse = _parse_json_line if self.format == "json" else parse_text_line
        events = self.events if self.format == "json" and self.events else None
        decoded: dict[str, tuple[int, list[tuple[VertexId, ...]], list[int], list[int]]] = {}
        found: dict[str, list[tuple[int, EventRecord]]] = {}
        failure: InputError | None = None
        stop = simple.shape[0]
        simple_lines = np.flatnonzero(simple)
        if simple_lines.shape[0]:
            self._note_arity(default, 2, base_line + int(simple_lines[0]) + 1)
        current, arity = "", 0
        unused_values: list[tuple[VertexId, ...]] = []
        unused_ints: list[int] = []
        add_values, add_diff, add_index = (
            unused_values.append,
            unused_ints.append,
            unused_ints.append,
        )
        for index, raw in zip(other_lines, other_raw, strict=True):
            try:
                if events is not None:
                    where = f"{self.name}:{base_line + index + 1}"
                    event = parse_json_event(raw, default, events, where)
                    if event is not None:
                        found.setdefault(event.relation, []).append((index, event))
                        continue
                result = parse(raw, default)
                if result is None:
                    continue
                relation, values, diff = result
                if relation != current or len(values) != arity:
                    entry = decoded.get(relation)
                    if entry is None or len(values) != entry[0]:
                        self._check_arity(relation, len(values), base_line + index + 1)
                        entry = decoded[relation] = (len(values), [], [], [])
                    current, arity = relation, entry[0]
                    add_values, add_diff, add_index = (
                        entry[1].append,
                        entry[2].append,
                        entry[3].append,
                    )
            except InputError as error:
                position = f"{self.name}:{base_line + index + 1}"
                if self.strict:
                    failure = InputError(error.message, position=position)
                    stop = index
                    break
                self.dead_letters += 1
                if self.on_dead_letter is not None:
                    self.on_dead_letter(DeadLetter(position, error.message, raw))
                continue
            add_values(values)
            add_diff(diff)
            add_index(index)
        produced = simple.copy()
        produced[stop:] = False
        for _, _, _, at in decoded.values():
            produced[at] = True
        for records in found.values():
            produced[[i for i, _ in records]] = True
        seq_of_line = np.cumsum(produced, dtype=np.int64) + (first_seq - 1)
        simple_lines = simple_lines[simple_lines < stop]
        parts: dict[str, RelationUpdates] = {}
        if simple_lines.shape[0]:
            kept = simple_lines.shape[0]
            parts[default] = RelationUpdates(
                [edges[0][:kept], edges[1][:kept]],
                np.ones(kept, dtype=np.int8),
                seq_of_line[simple_lines],
            )
        for relation, (arity, rows, diffs, at) in decoded.items():
            part = RelationUpdates(
                [_id_column(list(map(itemgetter(k), rows))) for k in range(arity)],
                np.asarray(diffs, dtype=np.int8),
                seq_of_line[at],
            )
            if relation in parts:
                part = _merge(parts[relation], part)
            parts[relation] = part
        event_parts = {
            relation: event_updates(records, seq_of_line, events.types.get(relation, {}))
            for relation, records in found.items()
            if events is not None
        }
        count = int(seq_of_line[-1]) - first_seq + 1 if seq_of_line.shape[0] else 0
        self.lines_read += stop if failure is None else stop + 1
        self.updates_read += count
        return [UpdateBatch(parts, first_seq, count, None, event_parts)], failure

    def _check_arity(self, relation: str, arity: int, line: int) -> None:
        """Raise when ``relation`` has another arity (known, or its first line's, learned
        here at ``line``)."""
        known = self._arity.get(relation)
        if known is None:
            self._arity[relation] = (arity, f"{self.name}:{line}")
        elif known[0] != arity:
            since = f" (since {known[1]})" if known[1] else ""
            raise InputError(arity_message(relation, known[0], arity, since))

    def _note_arity(self, relation: str, arity: int, line: int) -> None:
        if relation not in self._arity:
            self._arity[relation] = (arity, f"{self.name}:{line}")


def _parse_json_line(raw: bytes, default_relation: str) -> Decoded | None:
    """A JSON Lines line: ``None`` for a blank or comment line, else the decoded record."""
    if is_comment(raw):
        return None
    return parse_json_record(raw, default_relation)


def _id_column(values: list[VertexId]) -> npt.NDArray[np.generic]:
    """:func:`~core.records.id_column`, with a faster test and copy for all-int columns."""
    if set(map(type, values)) <= {int}:
        return np.fromiter(values, dtype=np.int64, count=len(values))
    return id_column(values)


def _merge(first: RelationUpdates, second: RelationUpdates) -> RelationUpdates:
    """Two parts of the same relation and block, interleaved back into stream order."""
    seq = np.concatenate([first.seq, second.seq])
    order = np.argsort(seq, kind="stable")
    columns = [
        concat_ids([a, b])[order] for a, b in zip(first.columns, second.columns, strict=True)
    ]
    return RelationUpdates(columns, np.concatenate([first.diff, second.diff])[order], seq[order])


def _split_front(batch: UpdateBatch, n: int) -> tuple[UpdateBatch, UpdateBatch]:
    """The first ``n`` updates of ``batch`` and the rest, as views (binary search per relation)."""
    boundary = batch.first_seq + n
    head: dict[str, RelationUpdates] = {}
    tail: dict[str, RelationUpdates] = {}
    for relation, part in batch.parts.items():
        cut = int(np.searchsorted(part.seq, boundary))
        if cut:
            head[relation] = RelationUpdates(
                [c[:cut] for c in part.columns], part.diff[:cut], part.seq[:cut]
            )
        if cut < len(part):
            tail[relation] = RelationUpdates(
                [c[cut:] for c in part.columns], part.diff[cut:], part.seq[cut:]
            )
    head_events, tail_events = split_events(batch.events, boundary)
    return (
        UpdateBatch(head, batch.first_seq, n, batch.resume, head_events),
        UpdateBatch(tail, boundary, batch.count - n, batch.resume, tail_events),
    )


def _take(pending: deque[UpdateBatch], n: int) -> UpdateBatch:
    """Remove the first ``n`` pending updates and return them as one batch."""
    taken: list[UpdateBatch] = []
    while n:
        piece = pending[0]
        if piece.count <= n:
            taken.append(pending.popleft())
            n -= piece.count
        else:
            head, pending[0] = _split_front(piece, n)
            taken.append(head)
            n = 0
    return taken[0] if len(taken) == 1 else UpdateBatch.concat(taken)
