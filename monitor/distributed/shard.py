"""One shard of the partitioned index: the pairs of every relation whose key it owns, and its
part of the vertex dictionary.

Shard ``s`` of ``S`` owns the keys ``k`` with ``k % S == s`` and stores them under the local
key ``k // S``. A vertex's global id is ``l * S + s`` for the shard ``s`` that numbered it
(:mod:`monitor.distributed.vertices`), so its keys are dense on its shard. Each position of a
binary relation (1: forward, keyed by ``src``; 0: reverse, keyed by ``dst``) is an ordinary
:class:`~monitor.index.adjacency.Adjacency` with its levels and compaction: the extension code
of one process runs here on this shard's part. Updates are netted per position with set
semantics (:func:`~monitor.index.netting.net`); both copies of a tuple see the same updates in
the same order, so they agree without talking to each other. A unary relation (a label) has one
position, keyed by 0: it lives on shard 0. A relation of ``k >= 3`` ids has an adjacency per
position keyed by the tuple of the other ``k - 1``: the tuple belongs to the shard its hash names,
which numbers it in its own :class:`~monitor.index.keys.TupleKeys` (the global key is again
``l * S + s``); its parts are stored as whole tuples (the numbering is rebuilt on load: key ids
never leave a stage, so nothing depends on them).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import numpy.typing as npt

from connectors.kafka_log import KafkaLog
from monitor.distributed.shard_events import EventRequest, Renumbered, ShardEvents, StagedEvents
from monitor.distributed.shard_report import report, stats
from monitor.distributed.shard_store import Part, ShardStore, Tuples
from monitor.distributed.time_orders import ShardTimeOrders
from monitor.distributed.vertices import External, ShardVertices
from monitor.failpoints import failpoint
from monitor.index import warmup as index_kernels
from monitor.index.adjacency import Adjacency
from monitor.index.graph import Change
from monitor.index.keys import TupleKeys
from monitor.index.levels import I32, I64, pack, unpack
from monitor.index.netting import net
from monitor.plan.cut import Cut

#: Tuple keys a part keeps before it numbers its live tuples anew (:meth:`ShardIndex.commit`).
TUPLE_KEYS_MIN = 4096


class ShardIndex:
    """Shard ``shard`` of ``shards``: an adjacency per relation and position over its keys."""

    def __init__(self, shard: int, shards: int) -> None:
        if not 0 <= shard < shards:
            raise ValueError(f"shard {shard} of {shards}")
        self.shard = shard
        self.shards = shards
        # The index's compiled loops loaded now (in a new actor's process), not in the first
        # epoch, as the single process's EpochProcessor does when it is made.
        index_kernels.warm()
        #: Per relation, an adjacency per position this shard holds pairs of.
        self.relations: dict[str, dict[int, Adjacency]] = {}
        #: Each relation's arity, as staged.
        self.arity: dict[str, int] = {}
        #: The tuple keys of each part of a relation of three or more ids.
        self.tuple_keys: dict[Part, TupleKeys] = {}
        self.vertices = ShardVertices(shard, shards)
        self.events = ShardEvents(shard, shards)
        self.time_orders = ShardTimeOrders()
        #: The work done: keys counted, values proposed, pairs intersected.
        self.work: Counter[str] = Counter()
        #: The staged epoch's changes per part (relation, position), in global ids; and
        #: those folded between epochs, written with the next one (:meth:`restage_many`).
        self.staged: dict[Part, Change] = {}
        self.pending: dict[Part, list[Change]] = {}
        #: Its directory (``--state-dir``), and the last epoch prepared there.
        self.store: ShardStore | None = None
        self.epoch = 0

    def restore(
        self, directory: str, committed: int, changelog: tuple[dict[str, Any], str] | None = None
    ) -> tuple[int, dict[str, int]]:
        """Keep this shard's part in ``directory`` from now on, after loading what it holds at
        the driver's ``committed`` epoch (dropping an epoch prepared after it); its pairs, and
        the arity of each relation staged here. With ``changelog`` (a Kafka client's settings
        and a topic), every write is mirrored to the topic's partition of this shard, and a
        directory without the committed epoch is rebuilt from it
        (:mod:`monitor.distributed.shard_changelog`)."""
        log = None if changelog is None else KafkaLog(changelog[0], changelog[1], self.shard)
        self.store = ShardStore.open(directory, self.shard, self.shards, committed, changelog=log)
        self.epoch = committed
        self.staged, self.pending = {}, {}
        self.vertices = ShardVertices(self.shard, self.shards)
        self.vertices.restore(self.store.vertices())
        self.events = self.events.emptied()
        self.events.restore(*self.store.events())
        self.time_orders = ShardTimeOrders()  # (the driver loads them: :meth:`time_load_many`)
        self.arity = dict(self.store.meta.get("arity", {}))
        self.tuple_keys = {}
        loaded = self.store.load()
        for (relation, position), columns in loaded.items():
            adjacency = self._adjacency(relation, position)
            local = self._keys((relation, position), columns[:-1], add=True)
            adjacency.ensure_keys(int(local.max(initial=-1)) + 1)
            adjacency.load(np.sort(pack(local, columns[-1])))
        return sum(int(c[0].shape[0]) for c in loaded.values()), dict(self.arity)

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None

    def _adjacency(self, relation: str, position: int) -> Adjacency:
        positions = self.relations.setdefault(relation, {})
        if position not in positions:
            positions[position] = Adjacency()
        return positions[position]

    def _local(self, keys: npt.NDArray[np.integer], adjacency: Adjacency) -> I64:
        local = keys.astype(np.int64)
        if self.shards > 1:
            local //= self.shards
        if local.shape[0]:
            adjacency.ensure_keys(int(local.max()) + 1)
        return local

    def _keys(self, part: Part, columns: list[I32], add: bool) -> I64:
        """The local keys of a part's key columns: a global key (one column) divided by the
        number of shards, or a tuple of ids (several) numbered by the part's tuple keys."""
        if len(columns) == 1:
            return columns[0].astype(np.int64) // self.shards
        keys = self.tuple_keys.setdefault(part, TupleKeys(len(columns)))
        return keys.encode(columns, add=add).astype(np.int64)

    def _key_columns(self, part: Part, local: I64) -> list[I32]:
        """The key columns of local keys (global ids): see :meth:`_keys`."""
        tuple_keys = self.tuple_keys.get(part)
        if tuple_keys is None:
            return [(local * self.shards + self.shard).astype(np.int32)]
        return tuple_keys.decode(local)

    def tuple_keys_many(self, requests: list[tuple[str, int, list[I32]]]) -> list[I32]:
        """The global keys of tuples this shard numbers (the key of no values, where a tuple is
        unknown), per request ``(relation, position, columns)``."""
        out = []
        for relation, position, columns in requests:
            local = self._keys((relation, position), columns, add=False)
            out.append((local * self.shards + self.shard).astype(np.int32))
        return out

    def stage(
        self,
        relation: str,
        arity: int,
        position: int,
        keys: list[I32],
        values: I32,
        insert: npt.NDArray[np.bool_],
        seq: I64,
    ) -> tuple[list[I32], I32, npt.NDArray[np.int8], I64, dict[str, int]]:
        """Stage updates of the pairs ``(keys[i], values[i])`` this shard owns at ``position``
        (``keys``: the key's columns, one global key or the tuple of the other positions), in
        stream order (``seq``), as the uncommitted epoch: their effective changes (key columns,
        value, diff, the deciding update's ``seq``) and what was ignored, by reason."""
        if (relation, position) in self.staged:  # (its level would replace the first's)
            raise ValueError(f"{relation}/{position} staged twice in one epoch")
        self.arity[relation] = arity
        adjacency = self._adjacency(relation, position)
        local = self._keys((relation, position), keys, add=True)
        adjacency.ensure_keys(int(local.max(initial=-1)) + 1)
        view = adjacency.view(Cut.OLD)
        ignored: Counter[str] = Counter()
        netted = net(pack(local, values), insert, seq, lambda k: view.contains(*unpack(k)), ignored)
        order = np.argsort(netted.keys, kind="stable")
        changed, diff = netted.keys[order], netted.diff[order]
        adjacency.stage(changed, diff)
        local_keys, changed_values = unpack(changed)
        key_columns = self._key_columns((relation, position), local_keys)
        self.staged[(relation, position)] = Change([*key_columns, changed_values], diff)
        return key_columns, changed_values, diff, netted.seq[order], dict(ignored)

    def stage_many(
        self, requests: list[tuple[str, int, int, list[I32], I32, npt.NDArray[np.bool_], I64]]
    ) -> list[tuple[list[I32], I32, npt.NDArray[np.int8], I64, dict[str, int]] | None]:
        """:meth:`stage` each request; the changes of the primary copies (the last position:
        forward for a binary relation) only: the other copies' are the same changes, and would
        only cross the wire again."""
        failpoint("shard_stage")  # (an epoch in evaluation, before its output is committed)
        staged = [self.stage(*request) for request in requests]
        return [s if r[2] == r[1] - 1 else None for s, r in zip(staged, requests, strict=True)]

    def encode_ids(self, requests: list[tuple[External, npt.NDArray[np.bool_]]]) -> list[I32]:
        """Global ids of the external ids this shard owns, per request (see
        :meth:`ShardVertices.encode`)."""
        return [self.vertices.encode(values, add) for values, add in requests]

    def decode_ids(self, ids: npt.NDArray[np.integer]) -> External:
        return self.vertices.decode(ids)

    def prepare(self, epoch: int) -> None:
        """Make the staged epoch durable as ``epoch`` (synced), before the driver commits it."""
        failpoint("shard_before_prepare")
        if self.store is not None:
            added = self.vertices.added()
            changes = _concatenated(self.pending, self.staged)
            self.store.prepare(epoch, changes, added, self.arity, self.events.logged())
        self.pending = {}
        self.epoch = epoch
        failpoint("shard_after_prepare")

    def checkpoint(self, epoch: int) -> None:
        """Write everything committed as a snapshot at ``epoch`` (after a preload)."""
        if self.store is not None:
            self._snapshot(epoch)
        self.epoch = epoch

    def commit(self) -> None:
        """Fold the staged epoch into every adjacency (compacting where it has grown); with a
        directory, rewrite its snapshot when the log has outgrown it."""
        failpoint("shard_before_fold")
        for positions in self.relations.values():
            for adjacency in positions.values():
                adjacency.commit()
        self.events.commit()
        self.time_orders.commit()
        self.staged = {}
        self._renumber_tuples()
        if self.store is not None and self.store.wants_snapshot():
            self._snapshot(self.epoch)

    def _renumber_tuples(self) -> None:
        """A part of a wide relation whose tuple keys mostly hold no values any more (the
        pairs whose events all left) numbers its live tuples anew, as a load does (key ids
        never leave a stage): its keys stay proportional to its tuples."""
        for part, keys in list(self.tuple_keys.items()):
            adjacency = self.relations[part[0]][part[1]]
            if keys.size <= max(TUPLE_KEYS_MIN, 2 * len(adjacency)):
                continue
            local, values = unpack(adjacency.pairs(Cut.OLD))
            columns = keys.decode(local)
            self.tuple_keys[part] = fresh = TupleKeys(len(columns))
            renumbered = fresh.encode(columns, add=True).astype(np.int64)
            rebuilt = Adjacency()
            rebuilt.ensure_keys(int(renumbered.max(initial=-1)) + 1)
            rebuilt.load(np.sort(pack(renumbered, values)))
            self.relations[part[0]][part[1]] = rebuilt

    def _snapshot(self, epoch: int) -> None:
        assert self.store is not None
        added = self.vertices.added()
        self.store.snapshot(epoch, self.parts(), added, self.arity, self.events.snapshot())

    def abort(self) -> None:
        for positions in self.relations.values():
            for adjacency in positions.values():
                adjacency.abort()
        self.events.abort()
        self.time_orders.abort()
        self.staged = {}

    def parts(self) -> dict[Part, Tuples]:
        """Every part's committed pairs in global ids: key columns and values."""
        parts: dict[Part, Tuples] = {}
        for relation, positions in self.relations.items():
            for position, adjacency in positions.items():
                local, values = unpack(adjacency.pairs(Cut.OLD))
                columns = self._key_columns((relation, position), local)
                parts[(relation, position)] = [*columns, values]
        return parts

    def count(self, relation: str, position: int, cut: Cut, keys: I64) -> I64:
        adjacency = self._adjacency(relation, position)
        self.work["counted"] += int(keys.shape[0])
        local = self._local(keys, adjacency)  # (first: the view's offsets then cover them)
        return adjacency.view(cut).count(local)

    def propose(self, relation: str, position: int, cut: Cut, keys: I64) -> tuple[I32, I32]:
        """Every value of every key, each key's values together in the keys' order: how many
        each key has, and the values (4 bytes a value cross back, not 12 with an owner's
        index beside each)."""
        adjacency = self._adjacency(relation, position)
        local = self._local(keys, adjacency)
        owner, values = adjacency.view(cut).propose(local)
        self.work["proposed"] += int(values.shape[0])
        return np.bincount(owner, minlength=keys.shape[0]).astype(np.int32), values

    def contains(
        self, relation: str, position: int, cut: Cut, keys: I64, values: I32
    ) -> npt.NDArray[np.bool_]:
        adjacency = self._adjacency(relation, position)
        self.work["intersected"] += int(keys.shape[0])
        local = self._local(keys, adjacency)
        return adjacency.view(cut).contains(local, values)

    def extend(
        self,
        relation: str,
        position: int,
        cut: Cut,
        others: tuple[tuple[str, int, Cut], ...],
        keys: I32,
        *other_keys: I32,
    ) -> tuple[I32, I32]:
        """:meth:`propose`, then each proposal intersected at every other extender (``others``,
        their keys of the same prefixes in ``other_keys``) whose key lives on this shard too:
        the paper's proposals visit the next extender's shard, and here they need not leave
        this one. The driver sends the rest on (it knows where each key lives)."""
        adjacency = self._adjacency(relation, position)
        owner, values = adjacency.view(cut).propose(self._local(keys, adjacency))
        self.work["proposed"] += int(values.shape[0])
        for (other, at, other_cut), keys_f in zip(others, other_keys, strict=True):
            adjacency_f = self._adjacency(other, at)
            view = adjacency_f.view(other_cut)
            if self.shards == 1:  # (every key is here)
                self.work["intersected"] += int(owner.shape[0])
                keep = view.contains(self._local(keys_f[owner], adjacency_f), values)
            else:
                here = np.flatnonzero((keys_f % self.shards == self.shard)[owner])  # (per key)
                if not here.shape[0]:
                    continue
                self.work["intersected"] += int(here.shape[0])
                mine = keys_f[owner[here]]  # (only the candidates checked here)
                found = view.contains(self._local(mine, adjacency_f), values[here])
                keep = np.ones(owner.shape[0], np.bool_)
                keep[here[~found]] = False
            owner, values = owner[keep], values[keep]
        return np.bincount(owner, minlength=keys.shape[0]).astype(np.int32), values

    # One call a round for every request of a stage (:func:`~monitor.distributed.sharded.exchange`).

    def count_many(self, requests: list[tuple[str, int, Cut, I64]]) -> list[I64]:
        return [self.count(*request) for request in requests]

    def propose_many(self, requests: list[tuple[str, int, Cut, I64]]) -> list[tuple[I32, I32]]:
        return [self.propose(*request) for request in requests]

    def extend_many(self, requests: list[tuple[Any, ...]]) -> list[tuple[I32, I32]]:
        return [self.extend(*request) for request in requests]

    def contains_many(
        self, requests: list[tuple[str, int, Cut, I64, I32]]
    ) -> list[npt.NDArray[np.bool_]]:
        return [self.contains(*request) for request in requests]

    def calls(self, requests: list[tuple[str, tuple[Any, ...]]]) -> list[Any]:
        """Each ``(method, arguments)`` in turn, one call for a round several callers share
        (:mod:`monitor.distributed.rounds`)."""
        return [getattr(self, method)(*arguments) for method, arguments in requests]

    # Events (:mod:`monitor.distributed.shard_events`), a round each.

    def events_configure(
        self,
        selections: dict[str, list[tuple[Any, ...]]],
        retention: dict[str, float],
        tables: list[str],
    ) -> None:
        self.events.configure(selections, retention, tables)

    def events_stage(self, requests: list[EventRequest]) -> tuple[list[StagedEvents], Counter[str]]:
        """Stage each event relation's updates this shard owns (and its expiries); their
        changes, and what was ignored, by reason."""
        ignored: Counter[str] = Counter()
        return [self.events.stage(r, ignored) for r in requests], ignored

    def time_stage_many(self, requests: list[tuple[Any, ...]]) -> None:
        for request in requests:
            self.time_orders.stage(*request)

    def time_count_many(self, requests: list[tuple[Any, ...]]) -> list[I64]:
        self.work["counted"] += sum(int(r[2].shape[0]) for r in requests)
        return [self.time_orders.count(*r) for r in requests]

    def time_propose_many(self, requests: list[tuple[Any, ...]]) -> list[tuple[I32, I32]]:
        found = [self.time_orders.propose(*r) for r in requests]
        self.work["proposed"] += sum(int(f[1].shape[0]) for f in found)
        return found

    def time_contains_many(self, requests: list[tuple[Any, ...]]) -> list[npt.NDArray[np.bool_]]:
        self.work["intersected"] += sum(int(r[2].shape[0]) for r in requests)
        return [self.time_orders.contains(*r) for r in requests]

    def events_compact(self, minimum: int) -> list[Renumbered]:
        return self.events.compact(minimum)

    def restage_many(self, requests: list[tuple[Any, ...]]) -> None:
        """Stage and fold at once, between epochs, changes that seed no query (the
        ``#events`` tuples of renumbered events); written with the next prepared epoch."""
        for request in requests:
            self.stage(*request)
        for part, change in self.staged.items():
            self.relations[part[0]][part[1]].commit()
            if self.store is not None:  # (written with the next epoch)
                self.pending.setdefault(part, []).append(change)
        self.staged = {}

    def time_renumber_many(self, requests: list[tuple[str, I32, I32]]) -> None:
        for request in requests:
            self.time_orders.renumber(*request)

    def time_entries_many(self, orders: list[tuple[str, int, str]]) -> list[tuple[Any, ...]]:
        return self.events.time_entries(orders)

    def time_load_many(self, requests: list[tuple[Any, ...]]) -> None:
        for request in requests:
            self.time_orders.load(*request)

    def event_fields_many(self, requests: list[tuple[str, str, I32]]) -> list[tuple[str, Any]]:
        return [self.events.field_values(*r) for r in requests]

    def event_ends_many(self, requests: list[tuple[str, int, I32]]) -> list[I32]:
        return [self.events.endpoints(*r) for r in requests]

    def event_matched_many(self, requests: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        return [self.events.matched(*r) for r in requests]

    def event_slots_many(self, requests: list[tuple[str, I32]]) -> list[I32]:
        return [self.events.slots(*r) for r in requests]

    def tuples(self, relation: str, cut: Cut) -> tuple[int, Tuples]:
        """The arity of ``relation`` (0: never staged here), and the tuples of its primary
        copies here (global ids): ``(src, dst)`` of a binary relation (each tuple whose
        ``src`` this shard owns), ``(0, value)`` of a unary one, the whole tuple of a wider
        one."""
        arity = self.arity.get(relation, 0)
        primary = self.relations.get(relation, {}).get(arity - 1)
        if primary is None:
            return arity, []
        local, values = unpack(primary.pairs(cut))
        return arity, [*self._key_columns((relation, arity - 1), local), values]

    def report(self) -> dict[str, Any]:
        """What the service's metrics and logs show of this shard
        (:func:`~monitor.distributed.shard_report.report`)."""
        return report(self)

    def stats(self) -> dict[str, int]:
        """Its pairs, index bytes and work (and bytes on disk, with a directory)."""
        return stats(self)


def _concatenated(
    pending: dict[Part, list[Change]], staged: dict[Part, Change]
) -> dict[Part, Change]:
    """Per part, the changes folded between epochs, then the epoch's (the later ones win)."""
    out = dict(staged)
    for part, changes in pending.items():
        found = [*changes, *([staged[part]] if part in staged else [])]
        out[part] = Change(
            [np.concatenate(c) for c in zip(*(f.columns for f in found), strict=True)],
            np.concatenate([f.diff for f in found]),
        )
    return out
