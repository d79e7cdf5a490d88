"""Events over shards, the driver's side: an epoch's event updates staged where their ids live,
the relations the atoms read kept where their keys live, and the events' fields, ends and time
orders read in rounds.

An epoch (:meth:`ShardedEvents.stage`), as the single process's
:class:`~monitor.index.event_relations.EventIndex` stages it:

1. the driver refuses the inserts a window does not admit (late, or without a time: it keeps the
   clock) and checks every field's kind, as the single process's store would;
2. one round numbers the inserted events' ends (:mod:`monitor.distributed.vertices`);
3. one round sends each update to the shard of its id (:mod:`monitor.distributed.shard_events`),
   which expires what the tick's watermark passed, applies the updates and answers the effective
   changes with each event's ends, time and selections;
4. two rounds count, under the OLD cut, the selected events of each changed pair (at the shard
   of the pair's key in the selection's ``#events`` relation): a pair appears or disappears where
   the count crosses zero;
5. one round stages every selection's ``#events`` and pairs relations (ordinary relations of the
   :class:`~monitor.distributed.sharded.ShardedIndex`, kept where their keys live) and its time
   orders (at the shard of each entry's vertex).

The changes of the ``#events`` and pairs relations seed the delta queries as in one process.
What the engine then reads of an event (a field for a join filter, an end for a range step, a
time order's range) is one round per question, to the shards that hold it
(:mod:`monitor.distributed.event_reads`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from core.errors import InputError
from core.fields import TIME_ORDERS, column_kind
from core.records import EventUpdates
from monitor.distributed.event_reads import EventReads
from monitor.distributed.routing import Split
from monitor.distributed.shard_events import EventRequest, Renumbered, StagedEvents
from monitor.distributed.sharded import ShardedIndex
from monitor.distributed.vertices import owners
from monitor.index.event_relations import admitted
from monitor.index.events import BUILT_IN_FIELDS, EventChanges
from monitor.index.graph import Change
from monitor.index.levels import I32, I64
from monitor.index.selections import Selection
from monitor.index.time_kernels import F64
from monitor.index.unique import first_rows
from monitor.index.window import Tick, first_live
from monitor.plan.cut import Cut


class ShardedEvents:
    """The event relations of a :class:`ShardedIndex`: their stores on the shards of their ids,
    the relations derived from them on the shards of their keys."""

    def __init__(
        self,
        index: ShardedIndex,
        selections: Sequence[Selection],
        retention: dict[str, float],
        time_orders: frozenset[str],
        unread: frozenset[str] = frozenset(),
        tables: frozenset[str] = frozenset(),
    ) -> None:
        """``unread``: the derived relations no delta query reads, not kept (their changes
        still seed), as the single process leaves them (:func:`monitor.plan.needs.unread`);
        none when a static evaluation will read them."""
        self.index = index
        self.unread = unread
        #: The tables among the event relations (their stores replace a present id's event).
        self.tables = tables
        self.selections = list(selections)
        self.relations = {s.relation for s in self.selections}
        self.retention = {r: ms for r, ms in retention.items() if math.isfinite(ms)}
        self.retention = {r: ms for r, ms in self.retention.items() if r in self.relations}
        #: Per selection, the time orders some plan reads: side -> name.
        self.ordered = [
            {side: s.time_order(side) for side in TIME_ORDERS if s.time_order(side) in time_orders}
            for s in self.selections
        ]
        #: Per event relation, its fields' kinds as first seen (the order output lists them).
        self.kinds: dict[str, dict[str, str]] = {r: {} for r in self.relations}
        for selection in self.selections:
            index.arity[selection.pairs] = 2
            index.arity[selection.events] = 3
            index.indexed[selection.events] = (2,)
        #: Each selection, its number among its relation's (the shards answer per relation a
        #: mask per selection, in this order), and its time orders.
        self.numbered: list[tuple[Selection, int, dict[str, str]]] = []
        nth: Counter[str] = Counter()
        for selection, ordered in zip(self.selections, self.ordered, strict=True):
            self.numbered.append((selection, nth[selection.relation], ordered))
            nth[selection.relation] += 1
        tests: dict[str, list[Any]] = {r: [] for r in self.relations}
        for selection in self.selections:
            tests[selection.relation].append(selection.tests)
        configured = (tests, self.retention, sorted(tables))
        index.shards.call("events_configure", [configured] * index.shards.count)
        self.reads = EventReads(index)
        self._clear()

    def _clear(self) -> None:
        #: Of the staged epoch, per event relation: its effective changes (global eids) with
        #: their ends, the eids that expired, and the ``seq`` of the inserts refused as late.
        self.changed: dict[str, EventChanges] = {}
        self.ends: dict[str, tuple[I32, I32]] = {}
        self.expired: dict[str, I32] = {}
        self.late: dict[str, I64] = {}
        self.late_count: Counter[str] = Counter()
        self.staged_events = 0
        self.replaced = 0
        self.reads.clear()

    @property
    def windowed(self) -> bool:
        return bool(self.retention)

    @property
    def caused(self) -> bool:
        """Whether a ``-1`` has a cause to tell: events expire, or tables are updated."""
        return self.windowed or bool(self.tables)

    def changed_ends(self, relation: str) -> tuple[I32, I32]:
        return self.ends[relation]

    def expired_pairs(self, relation: str) -> list[I32]:
        """The ends of the events of ``relation`` that expired in the staged epoch."""
        expired = self.expired.get(relation)
        if expired is None:
            return [np.empty(0, np.int32), np.empty(0, np.int32)]
        eids = self.changed[relation].eids
        src, dst = self.ends[relation]
        at = np.isin(eids, expired) & (self.changed[relation].diff < 0)
        return [src[at], dst[at]]

    def stage(
        self, events: dict[str, EventUpdates], ignored: Counter[str], tick: Tick | None
    ) -> dict[str, Change]:
        """Stage an epoch's event updates and the expiries its tick brings; the changes of
        every derived relation."""
        self._clear()
        count = self.index.shards.count
        relations = sorted(set(events) | (set(self.retention) if tick is not None else set()))
        applied: list[tuple[str, EventUpdates]] = []
        for relation in relations:
            updates = events.get(relation)
            if relation not in self.relations:
                ignored["not_an_event_relation"] += len(updates) if updates is not None else 0
                continue
            if updates is None:
                updates = _no_updates()
            updates = admitted(
                relation, updates, self.retention, tick, ignored, self.late, self.late_count
            )
            anonymous = np.asarray(updates.ids == None, np.bool_)  # noqa: E711 (elementwise)
            if anonymous.any():
                ignored["delete_without_id"] += int(anonymous.sum())
                updates = updates.take(~anonymous)
            self._check_kinds(relation, updates.fields)
            applied.append((relation, updates))
        inserts = [u.diff > 0 for _, u in applied]
        ends = self.index.vertices.encode(
            [c[i] for (_, u), i in zip(applied, inserts, strict=True) for c in (u.src, u.dst)],
            [np.ones(int(i.sum()), np.bool_) for i in inserts for _ in range(2)],
        )
        requests: list[list[EventRequest]] = [[] for _ in range(count)]
        shard_tick = None if tick is None else (tick.before, tick.seq)
        for k, (relation, updates) in enumerate(applied):
            insert = inserts[k]
            src, dst = np.zeros(len(updates), np.int32), np.zeros(len(updates), np.int32)
            src[insert], dst[insert] = ends[2 * k], ends[2 * k + 1]
            split = Split(owners(updates.ids, count), count)
            windowed = relation in self.retention and tick is not None
            for s in range(count):
                p = split.part(s)
                if p is None and not windowed:
                    continue
                p = np.empty(0, np.intp) if p is None else np.sort(p)
                fields = {name: column[p] for name, column in updates.fields.items()}
                request = EventRequest(
                    relation, updates.ids[p], insert[p], updates.seq[p], src[p], dst[p], fields,
                    shard_tick,
                )  # fmt: skip
                requests[s].append(request)
        answers = self.index.shards.call("events_stage", [(r,) if r else None for r in requests])
        found: dict[str, list[StagedEvents]] = {}
        for shard_requests, answer in zip(requests, answers, strict=True):
            if answer is None:
                continue
            staged, shard_ignored = answer
            ignored.update(shard_ignored)
            for request, part in zip(shard_requests, staged, strict=True):
                found.setdefault(request.relation, []).append(part)
        return self._derive({r: _joined(parts) for r, parts in found.items()}, tick)

    def _check_kinds(self, relation: str, fields: dict[str, npt.NDArray[Any]]) -> None:
        """Every field of the kind it was first seen with (an :class:`InputError` otherwise,
        as the single process's store raises), before any shard changes anything."""
        known = self.kinds[relation]
        for name, column in fields.items():
            if name in BUILT_IN_FIELDS:
                raise InputError(f"field {name!r} of {relation!r} is the event's own")
            found = column_kind(column)
            kind = known.setdefault(name, found)
            if kind != found:
                raise InputError(
                    f"field {name!r} of relation {relation!r} is a {kind}, got {found}s"
                )

    def _derive(self, staged: dict[str, StagedEvents], tick: Tick | None) -> dict[str, Change]:
        """The epoch's changes of every selection's relations, staged on the shards."""
        for relation, part in staged.items():
            self.changed[relation] = EventChanges(part.eids, part.diff, part.seq)
            self.ends[relation] = (part.src, part.dst)
            if part.expired.shape[0]:
                self.expired[relation] = part.expired
            self.staged_events += int(part.eids.shape[0]) - int(part.expired.shape[0])
            self.replaced += part.replaced
        chosen: list[tuple[Selection, StagedEvents, dict[str, str]]] = []
        for selection, k, ordered in self.numbered:
            found = staged.get(selection.relation)
            if found is not None and found.eids.shape[0]:
                chosen.append((selection, _selected(found, found.selected[k]), ordered))
        changes: dict[str, Change] = {}
        parts = []
        for selection, part, _ in chosen:
            if part.eids.shape[0]:
                events = Change([part.src, part.dst, part.eids], part.diff, part.seq)
                changes[selection.events] = events
                if selection.events not in self.unread:
                    parts.append((selection.events, 3, events))
        # (an unread events relation: no query reads or seeds from its pairs either)
        kept = [c for c in chosen if c[0].events not in self.unread]
        for (selection, _, _), flips in zip(kept, self._pair_flips(kept), strict=True):
            if flips is not None:
                changes[selection.pairs] = flips
                if selection.pairs not in self.unread:
                    parts.append((selection.pairs, 2, flips))
        requests = self.index.stage_requests(parts)
        timed = self._time_requests(chosen, tick)
        calls = [
            [("stage_many", (r,)), ("time_stage_many", (t,))]
            for r, t in zip(requests, timed, strict=True)
        ]
        answers = self.index.shards.call("calls", [(c,) for c in calls])
        staged_changes = self.index.gathered(requests, [a[0] for a in answers])
        for name in staged_changes:
            changes[name] = staged_changes[name]
        return changes

    def _pair_flips(
        self, chosen: list[tuple[Selection, StagedEvents, dict[str, str]]]
    ) -> list[Change | None]:
        """Per selection, the pairs that appear or disappear: the selected events of each changed
        pair before the epoch (two rounds for every selection), then after it."""
        groups = []
        for selection, part, _ in chosen:
            packed = (part.src.astype(np.int64) << 32) | part.dst.astype(np.int64)
            first, inverse = first_rows(packed)  # (hashed: the pairs in any order)
            groups.append((selection, part, packed[first], first, inverse))
        questions = [
            (s.events, [part.src[first], part.dst[first]]) for s, part, _, first, _ in groups
        ]
        keys = self.index.keys_many([(name, 2, columns) for name, columns in questions])
        views = [self.index.view(name, 2, Cut.OLD) for name, _ in questions]
        before = self.index.count_many(list(zip(views, keys, strict=True)))
        out: list[Change | None] = []
        for (_, part, pairs, first, inverse), had in zip(groups, before, strict=True):
            delta = np.bincount(inverse, weights=part.diff, minlength=pairs.shape[0])
            after = had + delta.astype(np.int64)
            flips = np.flatnonzero((had > 0) != (after > 0))
            if not flips.shape[0]:
                out.append(None)
                continue
            pair_seq = np.zeros(pairs.shape[0], np.int64)
            np.maximum.at(pair_seq, inverse, part.seq)
            appears = np.where(after[flips] > 0, 1, -1).astype(np.int8)
            columns = [part.src[first[flips]], part.dst[first[flips]]]
            out.append(Change(columns, appears, pair_seq[flips]))
        return out

    def _time_requests(
        self, chosen: list[tuple[Selection, StagedEvents, dict[str, str]]], tick: Tick | None
    ) -> list[list[tuple[Any, ...]]]:
        """Per shard, each time order's entries of its vertices, with the epoch's horizon
        (every shard, every order: the horizon moves on everywhere)."""
        count = self.index.shards.count
        out: list[list[tuple[Any, ...]]] = [[] for _ in range(count)]
        entries: dict[str, tuple[I32, F64, I32, npt.NDArray[np.int8], I32]] = {}
        horizons: dict[str, float] = {}
        for selection, part, ordered in chosen:
            horizon = -math.inf
            if selection.relation in self.retention and tick is not None:
                horizon = first_live(tick.before, self.retention[selection.relation])
            kept = np.isfinite(part.ts)
            if horizon > -math.inf:
                kept &= (part.diff > 0) | (part.ts >= horizon)
            below = (~kept) & (part.diff < 0)
            for side, name in ordered.items():
                ends = part.src if side == "by_src" else part.dst
                entries[name] = (
                    ends[kept],
                    part.ts[kept],
                    part.eids[kept],
                    part.diff[kept],
                    ends[below],
                )
                horizons[name] = horizon
        for selection, ordered in zip(self.selections, self.ordered, strict=True):
            for name in ordered.values():
                horizon = horizons.get(name, -math.inf)
                if name not in horizons and selection.relation in self.retention and tick:
                    horizon = first_live(tick.before, self.retention[selection.relation])
                empty = np.empty(0, np.int32)
                vertex, ts, eids, diff, left = entries.get(
                    name, (empty, np.empty(0), empty, np.empty(0, np.int8), empty)
                )
                split = Split(vertex, count)
                gone = np.bincount(left % count, minlength=count) if left.shape[0] else None
                for s in range(count):
                    p = split.part(s)
                    p = np.empty(0, np.intp) if p is None else p
                    expired = 0 if gone is None else int(gone[s])
                    out[s].append((name, vertex[p], ts[p], eids[p], diff[p], horizon, expired))
        return out

    def compact(self, minimum: int) -> int:
        """After a commit: every shard compacts its stores that are due
        (:mod:`monitor.index.compaction`, by the single process's rule), and the events whose
        eid changed are renumbered in the ``#events`` relations and time orders of every shard
        (folded at once, seeding nothing; written with the next epoch). Two rounds when any
        store was due; returns the events renumbered."""
        count = self.index.shards.count
        found = self.index.shards.call("events_compact", [(minimum,)] * count)
        moved: dict[str, list[Renumbered]] = {}
        for renumbered in found:
            for r in renumbered:
                moved.setdefault(r.relation, []).append(r)
        if not moved:
            return 0
        parts: list[tuple[str, int, Change]] = []
        times: list[tuple[str, I32, I32]] = []
        for selection, k, ordered in self.numbered:
            for r in moved.get(selection.relation, []):
                keep = r.selected[k]
                src, dst, old, new = r.src[keep], r.dst[keep], r.old[keep], r.new[keep]
                timed = np.isfinite(r.ts[keep])  # (time orders are kept, read or not)
                times += [(name, old[timed], new[timed]) for name in ordered.values()]
                if selection.events in self.unread:
                    continue
                n = int(keep.sum())
                diff = np.concatenate([np.full(n, -1, np.int8), np.ones(n, np.int8)])
                columns = [np.tile(src, 2), np.tile(dst, 2), np.concatenate([old, new])]
                parts.append(
                    (selection.events, 3, Change(columns, diff, np.zeros(2 * n, np.int64)))
                )
        requests = self.index.stage_requests(parts)
        calls = [[("restage_many", (r,)), ("time_renumber_many", (times,))] for r in requests]
        self.index.shards.call("calls", [(c,) for c in calls])
        return sum(int(r.old.shape[0]) for rs in moved.values() for r in rs)

    def restored(self, kinds: dict[str, dict[str, str]]) -> None:
        """After the shards loaded their events: the field kinds as the run saw them, and
        every time order loaded where its vertices live, from the events' shards (two
        rounds)."""
        for relation, known in kinds.items():
            self.kinds.setdefault(relation, {}).update(known)
        orders: list[tuple[str, tuple[str, int, str]]] = []
        for selection, k, ordered in self.numbered:
            orders += [(name, (selection.relation, k, side)) for side, name in ordered.items()]
        if not orders:
            return
        count = self.index.shards.count
        found = self.index.shards.call("time_entries_many", [([o for _, o in orders],)] * count)
        loads: list[list[tuple[Any, ...]]] = [[] for _ in range(count)]
        for k, (name, _) in enumerate(orders):
            vertex = np.concatenate([f[k][0] for f in found]).astype(np.int32)
            times = np.concatenate([f[k][1] for f in found])
            eids = np.concatenate([f[k][2] for f in found]).astype(np.int32)
            owner = vertex % count
            for s in range(count):
                at = owner == s
                loads[s].append((name, vertex[at], times[at], eids[at]))
        self.index.shards.call("time_load_many", [(load,) for load in loads])


def _no_updates() -> EventUpdates:
    empty = np.empty(0, np.int64)
    return EventUpdates(empty, np.empty(0, np.int8), empty, empty, empty, {})


def _joined(parts: list[StagedEvents]) -> StagedEvents:
    """The shards' changes of one relation as one."""
    if len(parts) == 1:
        return parts[0]
    selected = [np.concatenate(masks) for masks in zip(*(p.selected for p in parts), strict=True)]
    return StagedEvents(
        np.concatenate([p.eids for p in parts]),
        np.concatenate([p.diff for p in parts]),
        np.concatenate([p.seq for p in parts]),
        np.concatenate([p.src for p in parts]),
        np.concatenate([p.dst for p in parts]),
        np.concatenate([p.ts for p in parts]),
        selected,
        np.concatenate([p.expired for p in parts]),
        sum(p.replaced for p in parts),
    )


def _selected(part: StagedEvents, keep: npt.NDArray[np.bool_]) -> StagedEvents:
    return StagedEvents(
        part.eids[keep],
        part.diff[keep],
        part.seq[keep],
        part.src[keep],
        part.dst[keep],
        part.ts[keep],
        [],
        part.expired[:0],
        0,
    )
