"""The index the engine reads when it is partitioned: every operation routed to the key's shard.

:class:`ShardedIndex` is an :class:`~monitor.engine.extend.IndexReader`; its views count,
propose and intersect by splitting a batch of keys by shard (``key % S``), making one call per
shard that holds any of them, all shards at once, and putting the answers back in the batch's
order. So the stage runners, the pipeline and its prefix budget are the single process's.

The shards are reached through :class:`~monitor.distributed.shard_calls.Shards`, and batches
are split and answers gathered by :mod:`monitor.distributed.routing`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from core.errors import InputError
from core.records import RelationUpdates, UpdateBatch
from monitor.distributed.routing import (
    Request,
    Split,
    copies,
    exchange,
    proposals,
    scattered,
    tuple_owners,
)
from monitor.distributed.shard_calls import Shards
from monitor.distributed.vertices import PartitionedVertices
from monitor.index.adjacency import Probe
from monitor.index.graph import MAX_ARITY, Change
from monitor.index.levels import I32, I64
from monitor.plan.cut import Cut

if TYPE_CHECKING:
    from monitor.distributed.sharded_events import ShardedEvents


class ShardedView:
    """One relation's adjacency at one position and cut, over all shards."""

    def __init__(self, shards: Shards, relation: str, position: int, cut: Cut) -> None:
        self.shards = shards
        self.head = (relation, position, cut)

    def probe(self, keys: npt.NDArray[np.integer]) -> Probe:
        return Probe(keys, None, None)  # (each shard finds its own level's ranges)

    def _keys(self, keys: npt.NDArray[np.integer] | Probe) -> npt.NDArray[np.integer]:
        return keys.keys if isinstance(keys, Probe) else keys

    def count(self, keys: npt.NDArray[np.integer] | Probe) -> I64:
        keys = self._keys(keys)
        answers = exchange(self.shards, "count", [(self.head, keys, ())])[0]
        counts: I64 = scattered(answers, keys.shape[0], np.int64)
        return counts

    def propose(self, keys: npt.NDArray[np.integer] | Probe) -> tuple[I64, I32]:
        """Every value of every key, each key's values together, keys in batch order."""
        keys = self._keys(keys)
        answers = exchange(self.shards, "propose", [(self.head, keys, ())])[0]
        return proposals(answers, keys.shape[0])

    def contains(
        self, keys: npt.NDArray[np.integer] | Probe, values: npt.NDArray[np.integer]
    ) -> npt.NDArray[np.bool_]:
        keys = self._keys(keys)
        answers = exchange(self.shards, "contains", [(self.head, keys, (values,))])[0]
        found: npt.NDArray[np.bool_] = scattered(answers, keys.shape[0], np.bool_)
        return found


class ShardedIndex:
    """The engine's index over the shards: relations of one to eight ids, vertex ids numbered
    by the partitioned dictionary (:mod:`monitor.distributed.vertices`)."""

    def __init__(self, shards: Shards) -> None:
        self.shards = shards
        self.vertices = PartitionedVertices(shards)
        #: Each relation's arity, as first staged (a later update of another arity is
        #: ignored, counted as ``wrong_arity``, as the single process counts it).
        self.arity: dict[str, int] = {}
        #: Updates that changed nothing, by reason (as the single process counts them).
        self.ignored: Counter[str] = Counter()
        #: The positions a relation is kept at, where not every one (an events relation is
        #: read by its pair only).
        self.indexed: dict[str, tuple[int, ...]] = {}
        #: The event relations (:mod:`monitor.distributed.sharded_events`), when a query
        #: reads events.
        self.events: ShardedEvents | None = None

    def stage_batch(self, batch: UpdateBatch) -> dict[str, Change]:
        """Stage an epoch's updates as the uncommitted epoch: every vertex id numbered (the
        inserted tuples' vertices added, the deleted ones' looked up) in one round, then every
        tuple sent to the shard of its key at each position in another; the effective changes
        of each relation, as the shards of its primary copies found them (every copy sees the
        same updates in the same order, so they agree)."""
        parts: list[tuple[str, RelationUpdates]] = []
        for name, part in sorted(batch.parts.items()):
            arity = self.arity.setdefault(name, part.arity)
            if part.arity != arity:
                self.ignored["wrong_arity"] += len(part)
            elif not 1 <= arity <= MAX_ARITY:
                raise InputError(f"relation {name} has arity {arity}; allowed are 1 to {MAX_ARITY}")
            elif len(part):
                parts.append((name, part))
        inserts = [part.diff > 0 for _, part in parts]
        ids = self.vertices.encode(
            [c for _, part in parts for c in part.columns],
            [
                insert
                for (_, part), insert in zip(parts, inserts, strict=True)
                for _ in part.columns
            ],
        )
        encoded: list[tuple[str, int, Change]] = []
        at = 0
        for name, part in parts:
            columns, at = ids[at : at + part.arity], at + part.arity
            known = np.logical_and.reduce([c >= 0 for c in columns])
            change = Change(columns, part.diff, part.seq)
            if not known.all():
                self.ignored["absent_delete"] += int((~known).sum())
                change = change.take(known)
            encoded.append((name, part.arity, change))
        requests = self.stage_requests(encoded)
        answers = self.shards.call("stage_many", [(r,) if r else None for r in requests])
        return self.gathered(requests, answers)

    def stage_requests(self, parts: Sequence[tuple[str, int, Change]]) -> list[list[Any]]:
        """Per shard, its ``stage_many`` requests for updates in global ids (``diff`` > 0: an
        insert): each tuple to the shard of its key at every position its relation is indexed
        at (:attr:`indexed`)."""
        requests: list[list[tuple[Any, ...]]] = [[] for _ in range(self.shards.count)]
        for name, arity, change in _merged(parts):
            insert, seq = change.diff > 0, change.seq
            assert seq is not None  # (updates have their positions)
            positions = self.indexed.get(name)
            for position, owner, keys, values in copies(change.columns, self.shards.count):
                if positions is not None and position not in positions:
                    continue
                split = Split(owner, self.shards.count)
                for s in range(self.shards.count):
                    p = split.part(s)
                    if p is not None:
                        key = [k[p] for k in keys]
                        requests[s].append(
                            (name, arity, position, key, values[p], insert[p], seq[p])
                        )
        return requests

    def gathered(self, requests: list[list[Any]], answers: list[Any]) -> dict[str, Change]:
        """The effective changes of each relation staged by :meth:`stage_requests`' requests,
        from the shards' answers (those of its primary copies)."""
        found: dict[str, list[Any]] = {}
        for shard_requests, shard_answers in zip(requests, answers, strict=True):
            for request, answer in zip(shard_requests, shard_answers or (), strict=True):
                if answer is not None:
                    found.setdefault(request[0], []).append(answer)
                    self.ignored.update(answer[4])
        changes = {}
        for name, answered in found.items():
            diff = np.concatenate([a[2] for a in answered])
            if diff.shape[0]:
                keys = [np.concatenate(k) for k in zip(*(a[0] for a in answered), strict=True)]
                last: I32 = np.concatenate([a[1] for a in answered])
                tuples = [last] if self.arity[name] == 1 else [*keys, last]
                changes[name] = Change(tuples, diff, np.concatenate([a[3] for a in answered]))
        return changes

    def restore(
        self, state_dir: str, committed: int, changelog: tuple[dict[str, Any], str] | None = None
    ) -> int:
        """Have every shard keep its part in its directory of ``state_dir``, loading what it
        holds at the driver's ``committed`` epoch (with ``changelog``, mirrored to it and
        rebuilt from it: :meth:`ShardIndex.restore`); the pairs loaded."""
        from monitor.distributed.durable import shard_directory

        paths = [
            (shard_directory(state_dir, s), committed, changelog) for s in range(self.shards.count)
        ]
        restored = self.shards.call("restore", paths)
        for _, arity in restored:
            self.arity.update(arity)
        return sum(pairs for pairs, _ in restored)

    def prepare(self, epoch: int) -> None:
        """Every shard makes the staged epoch durable as ``epoch``."""
        self.shards.call("prepare", [(epoch,)] * self.shards.count)

    def checkpoint(self, epoch: int) -> None:
        """Every shard writes what it holds as a snapshot at ``epoch``."""
        self.shards.call("checkpoint", [(epoch,)] * self.shards.count)

    def commit(self) -> None:
        self.shards.call("commit", [()] * self.shards.count)

    def close(self) -> None:
        """Every shard closes its directory."""
        self.shards.call("close", [()] * self.shards.count)

    def abort(self) -> None:
        self.shards.call("abort", [()] * self.shards.count)

    def load(self, batch: UpdateBatch) -> None:
        """Apply a batch's updates at once (staged and committed)."""
        self.stage_batch(batch)
        self.commit()

    def view(self, relation: str, position: int, cut: Cut) -> ShardedView:
        return ShardedView(self.shards, relation, position, cut)

    def tuples(self, relation: str, cut: Cut = Cut.NEW) -> list[I32]:
        found = [f[1] for f in self.shards.call("tuples", [(relation, cut)] * self.shards.count)]
        held = [columns for columns in found if columns and columns[0].shape[0]]
        if not held:
            return []
        tuples = [np.concatenate(c).astype(np.int32) for c in zip(*held, strict=True)]
        return tuples[1:] if len(tuples) == 2 and self.arity.get(relation) == 1 else tuples

    @contextmanager
    def calls_through(self, shards: Shards) -> Iterator[None]:
        """Make every call through ``shards`` (the same shards, reached another way) for a
        while: :class:`~monitor.distributed.rounds.SharedRounds`."""
        own = self.shards
        self.shards = self.vertices.shards = shards
        try:
            yield
        finally:
            self.shards = self.vertices.shards = own

    def ranks(self, columns: Sequence[I32]) -> list[I64]:
        """Keys ordering the vertices of ``columns`` as their external ids, in one round."""
        return self.vertices.ranks(columns)

    def stats(self) -> list[dict[str, int]]:
        """Each shard's pairs, index bytes and work."""
        answers: list[dict[str, int]] = self.shards.call("stats", [()] * self.shards.count)
        return answers

    def keys(self, relation: str, position: int, columns: Sequence[I32]) -> I64:
        """The global keys of tuples of a relation of three or more ids at ``position`` (the
        other positions' ids; a key of no values where a tuple is unknown): asked of the shard
        of each tuple, in one round."""
        return self.keys_many([(relation, position, columns)])[0]

    def keys_many(self, requests: Sequence[tuple[str, int, Sequence[I32]]]) -> list[I64]:
        """:meth:`keys` of several requests, in one round."""
        count = self.shards.count
        calls: list[list[Any]] = [[] for _ in range(count)]
        where = []
        for relation, position, columns in requests:
            split = Split(tuple_owners(columns, count), count)
            mine = []
            for s in range(count):
                p = split.part(s)
                if p is not None:
                    mine.append((s, len(calls[s]), p))
                    calls[s].append((relation, position, [c[p] for c in columns]))
            where.append((columns[0].shape[0], mine))
        answers = self.shards.call("tuple_keys_many", [(c,) if c else None for c in calls])
        out = []
        for n, mine in where:
            keys = np.zeros(n, np.int64)
            for s, j, p in mine:
                keys[p] = answers[s][j]
            out.append(keys)
        return out

    def count_many(
        self, questions: Sequence[tuple[ShardedView, npt.NDArray[np.integer]]]
    ) -> list[I64]:
        """Each view's count of its keys, in one round."""
        requests: list[Request] = [(view.head, keys, ()) for view, keys in questions]
        answers = exchange(self.shards, "count", requests)
        return [
            scattered(a, keys.shape[0], np.int64)
            for a, (_, keys) in zip(answers, questions, strict=True)
        ]

    def _events(self) -> ShardedEvents:
        if self.events is None:
            raise InputError("no query reads events")
        return self.events

    def field_values(self, relation: str, name: str, eids: I32) -> npt.NDArray[Any] | None:
        return self._events().reads.field_values(relation, name, eids)

    def number_field(self, relation: str, name: str) -> None:
        """None: the shards hold the fields (join filters gather them by round)."""
        return None

    def time_view(self, relation: str, cut: Cut) -> Any:
        return self._events().reads.time_view(relation, cut)

    def endpoints(self, relation: str, position: int, eids: npt.NDArray[np.integer]) -> I32:
        return self._events().reads.endpoints(relation, position, eids)


def _merged(parts: Sequence[tuple[str, int, Change]]) -> list[tuple[str, int, Change]]:
    """One change per relation, its parts' in order (a shard stages a part once an epoch: a
    second request for it would replace the first)."""
    found: dict[str, list[tuple[int, Change]]] = {}
    for name, arity, change in parts:
        found.setdefault(name, []).append((arity, change))
    out = []
    for name, changes in found.items():
        arity, first = changes[0]
        if len(changes) > 1:
            seqs = [c.seq for _, c in changes]
            first = Change(
                [np.concatenate(c) for c in zip(*(c.columns for _, c in changes), strict=True)],
                np.concatenate([c.diff for _, c in changes]),
                None if any(q is None for q in seqs) else np.concatenate(seqs),  # type: ignore[arg-type]
            )
        out.append((name, arity, first))
    return out
