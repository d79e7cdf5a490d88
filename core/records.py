"""Decoded input records and the columnar batches the service consumes.

A source decodes raw records into :class:`Update` s (one tuple of one relation, inserted or
deleted) and hands them on in :class:`UpdateBatch` es: per relation, one numpy column per tuple
position plus the diffs and the stream sequence numbers, so that the index can apply a whole batch
with array operations. Stream order matters only between updates of the same tuple, and ``seq``
keeps it.

Vertex ids are Python ``int`` (64-bit signed) or ``str``. A column is an ``int64`` array when every
id in it is an integer and an ``object`` array otherwise.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from core.fields import absent_column, column_kind

VertexId = int | str

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


@dataclass(frozen=True)
class Update:
    """One decoded record: ``diff`` is +1 (insert) or -1 (delete) of ``values`` in ``relation``."""

    relation: str
    values: tuple[VertexId, ...]
    diff: int
    position: str = ""


@dataclass(frozen=True)
class DeadLetter:
    """A record that could not be decoded: where it was, why, and its raw bytes."""

    position: str
    reason: str
    raw: bytes


@dataclass
class RelationUpdates:
    """The updates of one relation inside a batch, in stream order.

    ``columns[k][i]`` is position ``k`` of the i-th tuple; ``diff[i]`` is +1 or -1; ``seq[i]`` is
    the update's sequence number in the stream (strictly increasing within a batch).
    """

    columns: list[npt.NDArray[np.generic]]
    diff: npt.NDArray[np.int8]
    seq: npt.NDArray[np.int64]

    @property
    def arity(self) -> int:
        return len(self.columns)

    def __len__(self) -> int:
        return int(self.diff.shape[0])

    def take(self, mask: npt.NDArray[np.bool_]) -> RelationUpdates:
        return RelationUpdates([c[mask] for c in self.columns], self.diff[mask], self.seq[mask])


@dataclass
class EventUpdates:
    """The event updates of one relation inside a batch, in stream order.

    ``ids[i]`` is the event's identity (its ``id``, or its source position); ``src``/``dst``
    its pair (external vertex ids; meaningful for inserts); ``fields[name][i]`` its field
    ``name``, one column per field (:func:`core.fields.to_column`: ``float64`` numbers with NaN,
    ``int8`` booleans with -1, ``object`` strings with ``None`` where absent).
    ``diff`` is +1 (insert) or -1 (delete by id); ``seq`` the stream sequence numbers.
    """

    ids: npt.NDArray[np.generic]
    diff: npt.NDArray[np.int8]
    seq: npt.NDArray[np.int64]
    src: npt.NDArray[np.generic]
    dst: npt.NDArray[np.generic]
    fields: dict[str, npt.NDArray[Any]]

    def __len__(self) -> int:
        return int(self.diff.shape[0])

    def take(self, mask: npt.NDArray[np.bool_]) -> EventUpdates:
        return EventUpdates(
            self.ids[mask],
            self.diff[mask],
            self.seq[mask],
            self.src[mask],
            self.dst[mask],
            {name: column[mask] for name, column in self.fields.items()},
        )

    @classmethod
    def concat(cls, parts: Sequence[EventUpdates]) -> EventUpdates:
        return cls(
            concat_ids([p.ids for p in parts]),
            np.concatenate([p.diff for p in parts]),
            np.concatenate([p.seq for p in parts]),
            concat_ids([p.src for p in parts]),
            concat_ids([p.dst for p in parts]),
            _concat_fields(parts),
        )


def _concat_fields(parts: Sequence[EventUpdates]) -> dict[str, npt.NDArray[Any]]:
    """The field columns of consecutive parts; a field a part lacks is absent in its rows."""
    kinds: dict[str, str] = {}
    for part in parts:
        for name, column in part.fields.items():
            kinds.setdefault(name, column_kind(column))
    return {
        name: np.concatenate([p.fields.get(name, absent_column(kind, len(p))) for p in parts])
        for name, kind in kinds.items()
    }


@dataclass(frozen=True)
class Checkpoint:
    """A place in an input stream a source can restart from.

    ``offset`` is a byte offset in the (decompressed) stream where whole lines start, ``line``
    the number of lines before it, ``seq`` the number of updates before it, and ``format`` the
    stream's detected format. A source restarted there reads on from ``offset``.
    """

    offset: int
    line: int
    seq: int
    format: str

    def to_dict(self) -> dict[str, int | str]:
        return {"offset": self.offset, "line": self.line, "seq": self.seq, "format": self.format}

    @classmethod
    def from_dict(cls, data: dict[str, int | str]) -> Checkpoint:
        return cls(int(data["offset"]), int(data["line"]), int(data["seq"]), str(data["format"]))


@dataclass
class UpdateBatch:
    """A run of consecutive updates of the stream, grouped by relation.

    ``first_seq`` is the sequence number of the first update of the run and ``count`` the number
    of updates in it (so the next run starts at ``first_seq + count``). ``resume``, when the
    source knows it, is a :class:`Checkpoint` at or before the end of the run: a source
    restarted there and told to skip to ``first_seq + count`` continues right after this run.
    """

    parts: dict[str, RelationUpdates] = field(default_factory=dict)
    first_seq: int = 0
    count: int = 0
    resume: Checkpoint | None = None
    #: Updates of event relations (records with an identity and fields), per relation.
    events: dict[str, EventUpdates] = field(default_factory=dict)
    #: Event times seen per input partition (the watermark is per partition); empty: the
    #: ``ts`` of the batch's inserted events, all from one input.
    times: dict[str, npt.NDArray[np.float64]] = field(default_factory=dict)

    def __len__(self) -> int:
        return self.count

    @classmethod
    def from_updates(cls, updates: Sequence[Update], first_seq: int = 0) -> UpdateBatch:
        """Columnar batch of ``updates``, numbered from ``first_seq`` in the given order.

        Raises ValueError if a relation's tuples have different lengths (the sources make the
        tuples of other lengths than a relation's arity dead letters before)."""
        grouped: dict[str, list[int]] = {}
        for i, update in enumerate(updates):
            grouped.setdefault(update.relation, []).append(i)
        lengths = np.fromiter((len(u.values) for u in updates), np.intp, len(updates))
        parts: dict[str, RelationUpdates] = {}
        for relation, indices in grouped.items():
            arity = _one_arity(relation, np.unique(lengths[indices]).tolist())
            columns = [id_column([updates[i].values[k] for i in indices]) for k in range(arity)]
            diff = np.fromiter(
                (updates[i].diff for i in indices), dtype=np.int8, count=len(indices)
            )
            seq = np.asarray(indices, dtype=np.int64) + first_seq
            parts[relation] = RelationUpdates(columns, diff, seq)
        return cls(parts, first_seq, len(updates))

    def split(self, n: int) -> tuple[UpdateBatch, UpdateBatch]:
        """The first ``n`` updates of the run, and the rest."""
        n = max(0, min(n, self.count))
        boundary = self.first_seq + n
        head: dict[str, RelationUpdates] = {}
        tail: dict[str, RelationUpdates] = {}
        for relation, part in self.parts.items():
            before = part.seq < boundary
            if before.any():
                head[relation] = part.take(before)
            if not before.all():
                tail[relation] = part.take(~before)
        head_events, tail_events = split_events(self.events, boundary)
        return (
            UpdateBatch(head, self.first_seq, n, self.resume, head_events),
            UpdateBatch(tail, boundary, self.count - n, self.resume, tail_events),
        )

    @classmethod
    def concat(cls, batches: Sequence[UpdateBatch]) -> UpdateBatch:
        """Consecutive runs joined into one (they must follow each other in the stream).

        Raises ValueError if a relation has another arity in one run than in another."""
        batches = [b for b in batches if b.count]
        if not batches:
            return cls()
        merged: dict[str, list[RelationUpdates]] = {}
        for batch in batches:
            for relation, part in batch.parts.items():
                merged.setdefault(relation, []).append(part)
        parts: dict[str, RelationUpdates] = {}
        for relation, pieces in merged.items():
            arity = _one_arity(relation, sorted({p.arity for p in pieces}))
            columns = [concat_ids([p.columns[k] for p in pieces]) for k in range(arity)]
            parts[relation] = RelationUpdates(
                columns,
                np.concatenate([p.diff for p in pieces]),
                np.concatenate([p.seq for p in pieces]),
            )
        grouped: dict[str, list[EventUpdates]] = {}
        for batch in batches:
            for relation, events in batch.events.items():
                grouped.setdefault(relation, []).append(events)
        merged_events = {r: EventUpdates.concat(e) for r, e in grouped.items()}
        seen: dict[str, list[npt.NDArray[np.float64]]] = {}
        for batch in batches:
            for key, found in batch.times.items():
                seen.setdefault(key, []).append(found)
        times = {key: np.concatenate(found) for key, found in seen.items()}
        count = sum(b.count for b in batches)
        return cls(parts, batches[0].first_seq, count, batches[-1].resume, merged_events, times)


def _one_arity(relation: str, lengths: list[int]) -> int:
    """The arity of ``relation`` whose tuples have the sorted distinct ``lengths``: their one
    length, else a ValueError naming them."""
    if len(lengths) != 1:
        found = ", ".join(map(str, lengths[:-1])) + f" and {lengths[-1]}"
        raise ValueError(
            f"relation {relation!r} has tuples of {found} ids in one batch; a relation has one "
            "arity (a source makes a tuple of another length a dead letter before batching)"
        )
    return lengths[0]


def split_events(
    events: dict[str, EventUpdates], boundary: int
) -> tuple[dict[str, EventUpdates], dict[str, EventUpdates]]:
    """Event updates before sequence number ``boundary``, and from it on, per relation."""
    head: dict[str, EventUpdates] = {}
    tail: dict[str, EventUpdates] = {}
    for relation, part in events.items():
        before = part.seq < boundary
        if before.any():
            head[relation] = part.take(before)
        if not before.all():
            tail[relation] = part.take(~before)
    return head, tail


def id_column(values: Iterable[VertexId]) -> npt.NDArray[np.generic]:
    """A column of vertex ids: ``int64`` if every id is an int, else ``object``."""
    items = list(values)
    if all(type(v) is int for v in items):
        return np.asarray(items, dtype=np.int64)
    column = np.empty(len(items), dtype=object)
    column[:] = items
    return column


def concat_ids(columns: Sequence[npt.NDArray[np.generic]]) -> npt.NDArray[np.generic]:
    """Concatenate id columns, falling back to ``object`` when any of them is not ``int64``."""
    if all(c.dtype == np.int64 for c in columns):
        return np.concatenate(columns)
    return np.concatenate([c.astype(object) for c in columns])


def mirrored(batch: UpdateBatch, relations: set[str] | None = None) -> UpdateBatch:
    """The batch with every binary tuple ``(u, v)``, ``u != v``, also updated as ``(v, u)``.

    This is how an undirected source is read: every edge is inserted or deleted in both
    directions, with the same sequence number (the two tuples are different, so their relative
    order does not matter). ``relations`` limits the mirroring to those relations (all if None).
    """
    parts: dict[str, RelationUpdates] = {}
    for name, part in batch.parts.items():
        if part.arity != 2 or (relations is not None and name not in relations):
            parts[name] = part
            continue
        src, dst = part.columns
        if src.dtype == np.int64 and dst.dtype == np.int64:
            distinct = src != dst
        else:
            distinct = np.fromiter(
                (type(a) is not type(b) or a != b for a, b in zip(src, dst, strict=True)),
                np.bool_,
                len(part),
            )
        back = part.take(distinct)
        parts[name] = RelationUpdates(
            [concat_ids([src, back.columns[1]]), concat_ids([dst, back.columns[0]])],
            np.concatenate([part.diff, back.diff]),
            np.concatenate([part.seq, back.seq]),
        )
    return UpdateBatch(parts, batch.first_seq, batch.count, batch.resume, batch.events, batch.times)


def exact_batches(batches: Iterable[UpdateBatch], size: int) -> Iterator[UpdateBatch]:
    """Re-cut consecutive batches into runs of exactly ``size`` updates (the last may be short).

    Epochs cut this way depend only on the update count, so a resumed run cuts the same epochs
    as an uninterrupted one.
    """
    pending: list[UpdateBatch] = []
    held = 0
    for batch in batches:
        while batch.count:
            take, batch = batch.split(size - held)
            pending.append(take)
            held += take.count
            if held == size:
                yield UpdateBatch.concat(pending)
                pending, held = [], 0
    if held:
        yield UpdateBatch.concat(pending)
