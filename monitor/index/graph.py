"""The graph index: every relation's adjacencies over one vertex dictionary.

A binary relation ``r(src, dst)`` is held twice, ``forward`` (``src -> dst``) and ``reverse``
(``dst -> src``); a unary relation ``r(v)`` once, as the values of the single key 0. Relations are
sets (see :meth:`GraphIndex.stage` for how an epoch's updates are applied).

The epoch protocol: :meth:`GraphIndex.stage` an epoch's updates (they become the uncommitted level
and the effective changes are returned), evaluate the delta queries against ``OLD`` and ``NEW``
views, then :meth:`GraphIndex.commit` (or :meth:`GraphIndex.abort`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from enum import Enum

import numpy as np
import numpy.typing as npt

from connectors.records import RelationUpdates, UpdateBatch
from monitor.errors import InputError
from monitor.index.adjacency import Adjacency, AdjacencyView, Cut
from monitor.index.dictionary import VertexDictionary
from monitor.index.levels import I8, I32, I64, pack, unpack

#: Arities the index stores.
SUPPORTED_ARITIES = (1, 2)


class Direction(Enum):
    """Which adjacency of a relation: keyed by the first column, or by the second."""

    FORWARD = "fwd"
    REVERSE = "rev"


@dataclass
class Relation:
    """One relation: its arity and its adjacencies."""

    name: str
    arity: int
    forward: Adjacency
    reverse: Adjacency | None

    def adjacencies(self) -> list[Adjacency]:
        return [self.forward] if self.reverse is None else [self.forward, self.reverse]

    def __len__(self) -> int:
        return len(self.forward)


@dataclass
class Change:
    """The effective changes of one relation in an epoch: dense tuple columns and diffs."""

    columns: list[I32]
    diff: I8

    def __len__(self) -> int:
        return int(self.diff.shape[0])


@dataclass
class StagedEpoch:
    """What staging an epoch's updates did: the effective changes, and what was ignored."""

    changes: dict[str, Change] = field(default_factory=dict)
    ignored: Counter[str] = field(default_factory=Counter)

    @property
    def applied(self) -> int:
        return sum(len(c) for c in self.changes.values())


class GraphIndex:
    """Relations over one vertex dictionary, with the epoch protocol."""

    def __init__(self, compaction_ratio: float = 0.125, compaction_min: int = 65536) -> None:
        self.dictionary = VertexDictionary()
        self.relations: dict[str, Relation] = {}
        self._compaction = (compaction_ratio, compaction_min)

    # -- relations ---------------------------------------------------------------------------

    def relation(self, name: str, arity: int) -> Relation:
        """The relation ``name``, created empty if new; its arity must match."""
        existing = self.relations.get(name)
        if existing is not None:
            if existing.arity != arity:
                raise InputError(f"relation {name!r} has arity {existing.arity}, not {arity}")
            return existing
        if arity not in SUPPORTED_ARITIES:
            raise InputError(
                f"relation {name!r} has arity {arity}; supported arities are "
                f"{', '.join(map(str, SUPPORTED_ARITIES))}"
            )
        ratio, minimum = self._compaction
        forward = Adjacency(ratio, minimum)
        reverse = Adjacency(ratio, minimum) if arity == 2 else None
        created = Relation(name, arity, forward, reverse)
        self.relations[name] = created
        self._ensure_keys()
        return created

    def view(self, relation: str, direction: Direction, cut: Cut) -> AdjacencyView:
        """The adjacency of ``relation`` in ``direction`` as read under ``cut``."""
        rel = self.relations[relation]
        adjacency = rel.forward if direction is Direction.FORWARD else rel.reverse
        assert adjacency is not None, f"unary relation {relation!r} has no reverse adjacency"
        return adjacency.view(cut)

    def tuples(self, relation: str, cut: Cut = Cut.OLD) -> list[I32]:
        """Every tuple of ``relation`` under ``cut``, as dense columns sorted by tuple."""
        rel = self.relations.get(relation)
        if rel is None:
            return []
        keys, values = unpack(rel.forward.pairs(cut))
        if rel.arity == 1:
            return [values]
        return [keys.astype(np.int32), values]

    def order_keys(self) -> I64:
        """Per dense id, a key ordering vertices as their external ids."""
        return self.dictionary.order_keys()

    @property
    def nbytes(self) -> int:
        """Bytes held by every adjacency (compacted and committed levels) and the dictionary."""
        adjacency = sum(a.nbytes for r in self.relations.values() for a in r.adjacencies())
        return adjacency + self.dictionary.nbytes

    def edge_count(self) -> int:
        return sum(len(r) for r in self.relations.values())

    def _ensure_keys(self) -> None:
        n = len(self.dictionary)
        for rel in self.relations.values():
            if rel.arity == 2:
                for adjacency in rel.adjacencies():
                    adjacency.ensure_keys(n)

    # -- the epoch protocol ------------------------------------------------------------------

    def stage(self, batch: UpdateBatch) -> StagedEpoch:
        """Apply a batch as the uncommitted epoch and return its effective changes.

        Per tuple the updates take effect in stream order with set semantics: inserting a
        present tuple or deleting an absent one changes nothing and is counted in ``ignored``
        (``duplicate_insert``, ``absent_delete``). The epoch's change of a tuple is therefore
        its state after its last update minus its state before the epoch, whatever the epoch
        boundaries. Updates whose arity does not fit their relation are counted as
        ``wrong_arity``.
        """
        staged = StagedEpoch()
        for name, part in batch.parts.items():
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
        dense = (
            [self.dictionary.encode(c, add=True) for c in part.columns]
            if insert.all()
            else [_encode_mixed(self.dictionary, c, insert) for c in part.columns]
        )
        self._ensure_keys()
        known = np.logical_and.reduce([d >= 0 for d in dense])
        unknown = int((~known).sum())
        if unknown:
            ignored["absent_delete"] += unknown
            dense = [d[known] for d in dense]
            insert, seq = insert[known], part.seq[known]
        else:
            seq = part.seq
        keys: npt.NDArray[np.integer] = dense[0] if rel.arity == 2 else np.zeros_like(dense[0])
        values = dense[-1]
        packed = pack(keys, values)
        order = np.lexsort((seq, packed))
        packed, insert = packed[order], insert[order]
        n = packed.shape[0]
        if n == 0:
            return Change([np.empty(0, np.int32)] * rel.arity, np.empty(0, np.int8))
        first = np.ones(n, np.bool_)
        first[1:] = packed[1:] != packed[:-1]
        last = np.ones(n, np.bool_)
        last[:-1] = first[1:]
        starts = np.flatnonzero(first)
        k, v = unpack(packed[starts])
        present = rel.forward.view(Cut.OLD).contains(k, v)
        before = np.empty(n, np.bool_)
        before[1:] = insert[:-1]
        before[starts] = present
        noop = insert == before
        ignored["duplicate_insert"] += int((noop & insert).sum())
        ignored["absent_delete"] += int((noop & ~insert).sum())
        final = insert[last]
        effective = final != present
        pairs = packed[starts][effective]
        diff = np.where(final[effective], np.int8(1), np.int8(-1)).astype(np.int8)
        rel.forward.stage(pairs, diff)
        src, dst = unpack(pairs)
        if rel.reverse is not None:
            rev = pack(dst, src)
            rev_order = np.argsort(rev, kind="stable")
            rel.reverse.stage(rev[rev_order], diff[rev_order])
            return Change([src.astype(np.int32), dst], diff)
        return Change([dst], diff)

    def commit(self) -> None:
        """Make the staged epoch part of the committed state."""
        for rel in self.relations.values():
            for adjacency in rel.adjacencies():
                adjacency.commit()

    def abort(self) -> None:
        """Forget the staged epoch."""
        for rel in self.relations.values():
            for adjacency in rel.adjacencies():
                adjacency.abort()

    def apply(self, batch: UpdateBatch) -> StagedEpoch:
        """Stage and commit a batch at once (loading a graph; no queries are evaluated)."""
        staged = self.stage(batch)
        self.commit()
        return staged


def _encode_mixed(
    dictionary: VertexDictionary, column: npt.NDArray[np.generic], insert: npt.NDArray[np.bool_]
) -> I32:
    """Dense ids; inserted tuples' vertices are added, deleted tuples' vertices only looked up."""
    out = np.empty(column.shape[0], np.int32)
    out[insert] = dictionary.encode(column[insert], add=True)
    out[~insert] = dictionary.encode(column[~insert], add=False)
    return out
