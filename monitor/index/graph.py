"""The graph index: every relation's adjacencies over one vertex dictionary.

A relation of arity ``k`` has one :class:`~monitor.index.adjacency.Adjacency` per *position*
``q``: it proposes the value at ``q`` keyed by the values at the other positions. For a binary
relation ``r(src, dst)`` position 1 is the forward adjacency (``src -> dst``) and position 0 the
reverse one (``dst -> src``), both keyed by dense vertex ids; a unary relation has one adjacency
whose only key is 0; for ``k >= 3`` the other positions' tuple is mapped to a key id by
:class:`~monitor.index.keys.TupleKeys`. The last position's adjacency is the relation's
*primary* copy: membership and the list of tuples are read from it.

Relations are sets (see :meth:`GraphIndex.stage` for how an epoch's updates are applied). The
epoch protocol: :meth:`GraphIndex.stage` an epoch's updates (they become the uncommitted level
and the effective changes are returned), evaluate the delta queries against ``OLD`` and ``NEW``
views, then :meth:`GraphIndex.commit` (or :meth:`GraphIndex.abort`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from core.errors import InputError
from core.records import RelationUpdates, UpdateBatch
from monitor.index.adjacency import Adjacency, AdjacencyView
from monitor.index.dictionary import VertexDictionary
from monitor.index.events import EventChanges, EventStore
from monitor.index.field_columns import NumberField
from monitor.index.keys import TupleKeys
from monitor.index.levels import I8, I32, I64, pack, unpack
from monitor.index.netting import net
from monitor.index.time_index import TimeIndex, TimeIndexView
from monitor.plan.cut import Cut

#: The largest arity a relation may have.
MAX_ARITY = 8


class Relation:
    """One relation: its arity, and an adjacency (with its key map) per position."""

    def __init__(
        self,
        name: str,
        arity: int,
        compaction: tuple[float, int],
        indexed: tuple[int, ...] | None = None,
        shared_keys: TupleKeys | None = None,
    ) -> None:
        self.name = name
        self.arity = arity
        #: The positions with an adjacency (all by default; the last one always: it is primary).
        self.indexed = tuple(range(arity)) if indexed is None else tuple(sorted(indexed))
        if arity - 1 not in self.indexed:
            raise ValueError(f"relation {name!r}: its last position must be indexed")
        self.by_position = [Adjacency(*compaction) for _ in range(arity)]
        self.tuple_keys = [
            TupleKeys(arity - 1) if arity >= 3 and p in self.indexed else None for p in range(arity)
        ]
        #: The last position's tuple keys, when given, are shared with other relations (the
        #: ``#events`` relations of one event relation's selections: one key per pair for all):
        #: they are counted where they are made, not in :attr:`nbytes`.
        self.shared_keys = shared_keys
        if shared_keys is not None:
            if arity < 3 or shared_keys.width != arity - 1:
                raise ValueError(f"relation {name!r}: shared keys of width {shared_keys.width}")
            self.tuple_keys[-1] = shared_keys

    def adjacencies(self) -> list[tuple[int, Adjacency]]:
        """The indexed positions and their adjacencies."""
        return [(p, self.by_position[p]) for p in self.indexed]

    @property
    def primary(self) -> Adjacency:
        """The last position's adjacency: membership and the list of tuples come from it."""
        return self.by_position[-1]

    @property
    def forward(self) -> Adjacency:
        """``src -> dst`` of a binary relation (the values of a unary one)."""
        return self.by_position[-1]

    @property
    def reverse(self) -> Adjacency | None:
        """``dst -> src`` of a binary relation; None for other arities."""
        return self.by_position[0] if self.arity == 2 else None

    def __len__(self) -> int:
        return len(self.primary)

    @property
    def nbytes(self) -> int:
        keys = sum(k.nbytes for k in self.tuple_keys if k is not None and k is not self.shared_keys)
        return keys + sum(a.nbytes for _, a in self.adjacencies())

    def keys(
        self, position: int, columns: Sequence[npt.NDArray[np.integer]], n: int, add: bool
    ) -> I64:
        """Adjacency keys of ``position`` for ``n`` tuples whose other positions hold ``columns``.

        Unknown tuples of arity >= 3 map to key 0, which has no values (when not ``add``).
        """
        if self.arity == 1:
            return np.zeros(n, np.int64)
        if self.arity == 2:
            return columns[0].astype(np.int64, copy=False)
        tuple_keys = self.tuple_keys[position]
        assert tuple_keys is not None
        keys = tuple_keys.encode([c.astype(np.int32, copy=False) for c in columns], add=add)
        if add or tuple_keys is self.shared_keys:  # another relation may have added keys
            self.by_position[position].ensure_keys(tuple_keys.size)
        return keys.astype(np.int64)

    def others(self, position: int, columns: Sequence[I32]) -> list[I32]:
        """The columns of every position but ``position``."""
        return [c for p, c in enumerate(columns) if p != position]


@dataclass
class Change:
    """The effective changes of one relation in an epoch: dense tuple columns and diffs.

    ``seq``, when staging set it, is the stream sequence number of each tuple's last update in
    the epoch: the update that decided the change (scale-out seeds a change from the partition
    that update came from).
    """

    columns: list[I32]
    diff: I8
    seq: npt.NDArray[np.int64] | None = None

    def __len__(self) -> int:
        return int(self.diff.shape[0])

    def take(self, mask: npt.NDArray[np.bool_]) -> Change:
        """The changes where ``mask`` is true."""
        seq = None if self.seq is None else self.seq[mask]
        return Change([c[mask] for c in self.columns], self.diff[mask], seq)


@dataclass
class StagedEpoch:
    """What staging an epoch's updates did: the effective changes, and what was ignored."""

    changes: dict[str, Change] = field(default_factory=dict)
    ignored: Counter[str] = field(default_factory=Counter)
    #: Effective event changes (their derived relations' changes are in ``changes``).
    events: int = 0
    #: Those event changes, by event relation: what the store and the changelog record.
    event_changes: dict[str, EventChanges] = field(default_factory=dict)
    #: Relations derived from events: their changes are not updates of their own.
    derived: frozenset[str] = frozenset()

    @property
    def applied(self) -> int:
        """Effective updates: tuples that changed, and events."""
        tuples = sum(len(c) for name, c in self.changes.items() if name not in self.derived)
        return tuples + self.events


class GraphIndex:
    """Relations over one vertex dictionary, with the epoch protocol."""

    def __init__(self, compaction_ratio: float = 0.125, compaction_min: int = 4096) -> None:
        self.dictionary = VertexDictionary()
        self.relations: dict[str, Relation] = {}
        self._compaction = (compaction_ratio, compaction_min)
        #: The events of event relations, by relation (``monitor.index.event_relations``).
        self.event_stores: dict[str, EventStore] = {}
        #: Relations derived from the events (never stored: rebuilt from the events on load).
        self.derived: frozenset[str] = frozenset()
        #: The time orders of events some range step reads (``R{S}#by_src``, ``R{S}#by_dst``):
        #: derived from the events like the relations, but kept by vertex and time.
        self.time_indexes: dict[str, TimeIndex] = {}

    # -- relations ---------------------------------------------------------------------------

    def relation(
        self,
        name: str,
        arity: int,
        indexed: tuple[int, ...] | None = None,
        shared_keys: TupleKeys | None = None,
    ) -> Relation:
        """The relation ``name``, created empty if new (with adjacencies for the ``indexed``
        positions, all by default; its last position's tuple keys ``shared_keys`` when given);
        its arity must match."""
        existing = self.relations.get(name)
        if existing is not None:
            if existing.arity != arity:
                raise InputError(f"relation {name!r} has arity {existing.arity}, not {arity}")
            return existing
        if not 1 <= arity <= MAX_ARITY:
            raise InputError(f"relation {name!r} has arity {arity}; allowed are 1 to {MAX_ARITY}")
        created = Relation(name, arity, self._compaction, indexed, shared_keys)
        self.relations[name] = created
        self.ensure_keys()
        return created

    def view(self, relation: str, position: int, cut: Cut) -> AdjacencyView:
        """The adjacency proposing ``position`` of ``relation``, as read under ``cut``."""
        rel = self.relations[relation]
        if position not in rel.indexed:
            raise ValueError(f"relation {relation!r} has no adjacency for position {position}")
        return rel.by_position[position].view(cut)

    def keys(self, relation: str, position: int, columns: Sequence[I32]) -> I64:
        """Keys of ``position``'s adjacency for the other positions' values (0 if unknown)."""
        n = columns[0].shape[0] if columns else 0
        return self.relations[relation].keys(position, columns, n, add=False)

    def tuples(self, relation: str, cut: Cut = Cut.OLD) -> list[I32]:
        """Every tuple of ``relation`` under ``cut``, as dense columns sorted by tuple."""
        rel = self.relations.get(relation)
        if rel is None:
            return []
        keys, values = unpack(rel.primary.pairs(cut))
        if rel.arity == 1:
            return [values]
        if rel.arity == 2:
            return [keys.astype(np.int32), values]
        tuple_keys = rel.tuple_keys[-1]
        assert tuple_keys is not None
        return [*tuple_keys.decode(keys), values]

    def field_values(self, relation: str, name: str, eids: I32) -> npt.NDArray[Any] | None:
        """Field ``name`` of the events ``eids`` of ``relation`` (None: no event has it)."""
        return self.event_stores[relation].column(name, eids)

    def number_field(self, relation: str, name: str) -> NumberField | None:
        """Field ``name`` of ``relation``'s events as compiled loops read numbers (None: not
        a number field, or no event has it)."""
        column = self.event_stores[relation].fields.get(name)
        return None if column is None else column.numbers()

    def time_index(self, name: str) -> TimeIndex:
        """The time order ``name`` (``R{S}#by_src``), created empty if new."""
        return self.time_indexes.setdefault(name, TimeIndex())

    def nbytes_of(self, name: str) -> int:
        """Bytes held by relation or time order ``name``."""
        held = self.time_indexes.get(name)
        return (self.relations[name] if held is None else held).nbytes

    def time_view(self, relation: str, cut: Cut) -> TimeIndexView:
        """The time order ``relation`` as read under ``cut``."""
        return self.time_indexes[relation].view(cut)

    def endpoints(self, relation: str, position: int, eids: npt.NDArray[np.integer]) -> I32:
        """The sources (``position`` 0) or destinations (1) of events ``eids`` of ``relation``."""
        store = self.event_stores[relation]
        ends: I32 = (store.src if position == 0 else store.dst)[eids]
        return ends

    def ranks(self, columns: Sequence[I32]) -> list[I64]:
        """Keys ordering the vertices of ``columns`` as their external ids."""
        order = self.dictionary.order_keys()
        return [order[c] for c in columns]

    @property
    def nbytes(self) -> int:
        """Bytes held by every adjacency (compacted and committed levels) and the dictionary."""
        shared = {id(r.shared_keys): r.shared_keys for r in self.relations.values()}
        keys = sum(k.nbytes for k in shared.values() if k is not None)
        times = sum(t.nbytes for t in self.time_indexes.values())
        return (
            sum(r.nbytes for r in self.relations.values()) + self.dictionary.nbytes + keys + times
        )

    def edge_count(self) -> int:
        """Tuples stored, over all relations."""
        return sum(len(r) for r in self.relations.values())

    def ensure_keys(self) -> None:
        """Every binary adjacency has a row for every vertex of the dictionary."""
        n = len(self.dictionary)
        for rel in self.relations.values():
            if rel.arity == 2:
                for adjacency in rel.by_position:
                    adjacency.ensure_keys(n)

    # -- the epoch protocol ------------------------------------------------------------------

    def stage(self, batch: UpdateBatch) -> StagedEpoch:
        """Apply a batch as the uncommitted epoch and return its effective changes.

        Per tuple the updates take effect in stream order with set semantics: inserting a
        present tuple or deleting an absent one changes nothing and is counted in ``ignored``
        (``duplicate_insert``, ``absent_delete``). The epoch's change of a tuple is therefore
        its state after its last update minus its state before the epoch, whatever the epoch
        boundaries; updates that changed the set but were undone by a later update of the same
        epoch are counted as ``netted``. Updates whose arity does not fit their relation are
        counted as ``wrong_arity``. So every tuple update is either applied or counted once.
        """
        staged = StagedEpoch()
        # Relations in name order: new vertices get their dense ids in an order that depends
        # on the epoch's updates only, not on how the source grouped them (a resumed source
        # reads other blocks), so restarted runs build the same state and output as one run.
        for name, part in sorted(batch.parts.items()):
            try:
                rel = self.relation(name, part.arity)
            except InputError:
                staged.ignored["wrong_arity"] += len(part)
                continue
            change = self._stage_relation(rel, part, staged.ignored)
            if len(change):
                staged.changes[name] = change
        return staged

    def _stage_relation(
        self, rel: Relation, part: RelationUpdates, ignored: Counter[str]
    ) -> Change:
        insert = part.diff > 0
        dense = [_encode(self.dictionary, c, insert) for c in part.columns]
        self.ensure_keys()
        known = np.logical_and.reduce([d >= 0 for d in dense])
        seq = part.seq
        if not known.all():
            ignored["absent_delete"] += int((~known).sum())
            dense = [d[known] for d in dense]
            insert, seq = insert[known], seq[known]
        return self.stage_dense(rel, dense, insert, seq, ignored)

    def stage_dense(
        self,
        rel: Relation,
        dense: Sequence[I32],
        insert: npt.NDArray[np.bool_],
        seq: I64,
        ignored: Counter[str],
    ) -> Change:
        """Stage updates of ``rel`` given as dense columns (see :meth:`stage`)."""
        last_position = rel.arity - 1
        keys = rel.keys(last_position, dense[:-1], insert.shape[0], add=bool(insert.any()))
        view = rel.primary.view(Cut.OLD)
        netted = net(
            pack(keys, dense[-1]), insert, seq, lambda k: view.contains(*unpack(k)), ignored
        )
        columns = [d[netted.rows] for d in dense]
        return self.stage_effective(rel, columns, netted.diff, netted.seq)

    def stage_effective(
        self,
        rel: Relation,
        columns: Sequence[I32],
        diff: I8,
        seq: I64,
        last_keys: I64 | None = None,
    ) -> Change:
        """Stage changes known to be effective: unique tuples, ``+1`` absent before the epoch,
        ``-1`` present (netted already, or decided elsewhere: the events of a selection).
        ``last_keys``, when given, are the tuples' keys of the last position."""
        for position, adjacency in rel.adjacencies():
            if position == rel.arity - 1 and last_keys is not None:
                keys = last_keys
            else:
                others = rel.others(position, columns)
                keys = rel.keys(position, others, diff.shape[0], add=True)
            pairs = pack(keys, columns[position])
            by_pair = np.argsort(pairs)  # unique tuples, unique pairs: stability is moot (4x)
            adjacency.stage(pairs[by_pair], diff[by_pair])
        return Change(list(columns), diff, seq)

    def commit(self) -> None:
        """Make the staged epoch part of the committed state."""
        for rel in self.relations.values():
            for _, adjacency in rel.adjacencies():
                adjacency.commit()
        for time_index in self.time_indexes.values():
            time_index.commit()

    def abort(self) -> None:
        """Forget the staged epoch."""
        for rel in self.relations.values():
            for _, adjacency in rel.adjacencies():
                adjacency.abort()
        for time_index in self.time_indexes.values():
            time_index.abort()

    def load_relation(self, name: str, arity: int, columns: Sequence[I32]) -> Relation:
        """Bulk-load a relation from its unique tuples (dense ids), as committed state."""
        rel = self.relation(name, arity)
        n = columns[0].shape[0] if columns else 0
        for position, adjacency in rel.adjacencies():
            keys = rel.keys(position, rel.others(position, list(columns)), n, add=True)
            pairs = np.sort(pack(keys, columns[position]))
            adjacency.load(pairs)
        self.ensure_keys()
        return rel

    def clear_relation(self, name: str, shared_keys: TupleKeys | None = None) -> Relation:
        """Replace relation ``name`` by an empty one of the same arity and indexed positions
        (its adjacencies and tuple keys released; ``shared_keys`` its new shared ones), to
        :meth:`load_relation` it again; only between epochs (nothing staged)."""
        old = self.relations[name]
        self.relations[name] = Relation(name, old.arity, self._compaction, old.indexed, shared_keys)
        self.ensure_keys()
        return self.relations[name]

    def apply(self, batch: UpdateBatch) -> StagedEpoch:
        """Stage and commit a batch at once (loading a graph; no queries are evaluated)."""
        staged = self.stage(batch)
        self.commit()
        return staged


def _encode(
    dictionary: VertexDictionary, column: npt.NDArray[np.generic], insert: npt.NDArray[np.bool_]
) -> I32:
    """Dense ids; inserted tuples' vertices are added, deleted tuples' vertices only looked up."""
    if insert.all():
        return dictionary.encode(column, add=True)
    out = np.empty(column.shape[0], np.int32)
    out[insert] = dictionary.encode(column[insert], add=True)
    out[~insert] = dictionary.encode(column[~insert], add=False)
    return out
