"""A query's live matches, kept so that an epoch's removals retract them by lookup.

The change of a query in an epoch is the sum of its delta queries seeded by the insertions
and by the removals (:mod:`monitor.engine.delta`). The removals' half enumerates, again, every
match a removed tuple was part of: in a window, every epoch's expiring events re-run the
query's joins from the oldest end of each match (the expiring first hops of a six-hop ring
range four hops forward, for the few rings that close). When the matches that hold are few,
keeping them answers the same question by lookup: the matches an epoch retracts are exactly
the kept ones holding a tuple the epoch removes.

Why the insertions' half alone is then right. Per position ``i`` of the query's atoms, the
delta query seeded by ``dRi`` reads ``NEW`` before ``i`` and ``OLD`` after it. Seeded by
insertions only, it finds every new match holding an inserted tuple exactly once (at its last
inserted position: before it, kept or inserted tuples are in ``NEW``; after it, kept ones are
in ``OLD``), and also bindings that hold an inserted tuple *and* a removed one read at ``OLD``
after it. Those never held at either end of the epoch (the removals' half cancels them when
it runs): dropping the bindings that hold a removed tuple leaves the new matches alone. So an
epoch's change is

    (the insertions' bindings holding no removed tuple) - (the kept matches holding one),

two disjoint sets, which consolidation puts in the order the full evaluation gives.

:class:`LiveMatches` holds one query's matches as dense binding columns (head order: its
vertices, then its events' ids), stages an epoch's change, and keeps it at commit. A query
whose matches outgrow ``limit`` rows stops keeping them (its removals are evaluated again,
as without this), so the memory stays bounded: ``limit`` x 4 bytes x the binding's width.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import numpy.typing as npt

from monitor.index.graph import Change
from monitor.index.levels import I32
from monitor.plan.cut import projections
from monitor.query.ast import Query

Mask = npt.NDArray[np.bool_]


class Removed:
    """The tuples an epoch's ``changes`` remove, per relation: sorted once as packed keys (the
    bit widths of the removed tuples' columns side by side in an ``int64``), then looked up
    by every kept query's bindings."""

    def __init__(self, changes: Mapping[str, Change]) -> None:
        self.changes = changes
        self._tables: dict[str, tuple[list[int], npt.NDArray[np.int64]] | list[I32] | None] = {}

    def holding(self, query: Query, columns: Sequence[I32]) -> Mask:
        """Which bindings of ``query`` (dense columns in head order) hold a removed tuple of
        the relation of one of its atoms."""
        n = columns[0].shape[0] if columns else 0
        hit = np.zeros(n, np.bool_)
        if not n:
            return hit
        at = {v: k for k, v in enumerate(query.head)}
        # (an atom derived from an events atom, its pairs or its events in time order, loses
        # a tuple only with an event of it: the events atom's lookup finds those matches)
        derived = projections(query)
        for atom in dict.fromkeys(a for i, a in enumerate(query.atoms) if i not in derived):
            table = self._table(atom.relation)
            if table is not None:
                rows = [columns[at[v]] for v in atom.variables]
                hit |= _rows_in(rows, table)
        return hit

    def _table(self, relation: str) -> tuple[list[int], npt.NDArray[np.int64]] | list[I32] | None:
        if relation not in self._tables:
            change = self.changes.get(relation)
            gone = None if change is None else change.diff < 0
            if change is None or gone is None or not gone.any():
                self._tables[relation] = None
            else:
                removed = [c[gone] for c in change.columns]
                bits = [max(int(c.max()).bit_length(), 1) for c in removed]
                if sum(bits) > 63:  # (ids too wide to pack: rows compared whole)
                    self._tables[relation] = removed
                else:
                    self._tables[relation] = (bits, np.sort(_packed(removed, bits)))
        return self._tables[relation]


def _rows_in(
    rows: Sequence[I32], table: tuple[list[int], npt.NDArray[np.int64]] | list[I32]
) -> Mask:
    """Which rows (columns of one length) are in ``table`` (:meth:`Removed._table`)."""
    if isinstance(table, list):
        return np.isin(_as_void(rows), _as_void(table))
    bits, keys = table
    fits = np.ones(rows[0].shape[0], np.bool_)
    for column, width in zip(rows, bits, strict=True):
        fits &= column < (1 << width)
    packed = _packed(rows, bits)
    at = np.minimum(np.searchsorted(keys, packed), keys.shape[0] - 1)
    found: Mask = fits & (keys[at] == packed)
    return found


def _packed(columns: Sequence[I32], bits: Sequence[int]) -> npt.NDArray[np.int64]:
    """``columns`` side by side in ``bits`` each (a column's values wider than its bits
    overlap the next: :func:`_rows_in` tests them apart)."""
    key = columns[0].astype(np.int64)
    for column, width in zip(columns[1:], bits[1:], strict=True):
        key = (key << width) | column.astype(np.int64)
    return key


def _as_void(columns: Sequence[I32]) -> npt.NDArray[np.void]:
    stacked = np.ascontiguousarray(np.stack([c.astype(np.int32) for c in columns], axis=1))
    return stacked.view(np.dtype((np.void, 4 * len(columns)))).reshape(-1)


def keeps(query: Query) -> bool:
    """Whether ``query``'s matches can be kept and looked up: every variable of its atoms is
    one of its head's (the bindings name every tuple they hold)."""
    head = set(query.head)
    return all(v in head for atom in query.atoms for v in atom.variables)


class LiveMatches:
    """The committed matches of one query, and the staged epoch's change of them."""

    def __init__(self, query: Query, limit: int) -> None:
        if not keeps(query):
            raise ValueError(f"{query.name}: an atom has a variable its bindings do not hold")
        self.query = query
        self.limit = limit
        self.columns: list[I32] = [np.empty(0, np.int32) for _ in query.head]
        self._kept: Mask | None = None  # the staged epoch's: which committed rows stay
        self._added: list[I32] | None = None

    def __len__(self) -> int:
        return int(self.columns[0].shape[0]) if self.columns else 0

    @property
    def nbytes(self) -> int:
        return sum(int(c.nbytes) for c in self.columns)

    def fill(self, batches: Sequence[Sequence[I32]]) -> bool:
        """Hold the matches of ``batches`` (a static evaluation's, nothing staged); False, and
        nothing held, when they are more than the limit."""
        if sum(int(b[0].shape[0]) for b in batches if len(b)) > self.limit:
            return False
        width = len(self.query.head)
        if batches:
            self.columns = [
                np.concatenate([b[k] for b in batches]).astype(np.int32) for k in range(width)
            ]
        return True

    def retract(self, removed: Removed) -> list[I32]:
        """The committed matches holding a tuple the staged epoch ``removed`` (their ``-1``
        s); they leave at commit."""
        hit = removed.holding(self.query, self.columns)
        self._kept = ~hit
        return [c[hit] for c in self.columns]

    def add(self, columns: Sequence[I32]) -> bool:
        """Stage the epoch's new matches (after :meth:`retract`); False when the matches
        would then be more than the limit (the caller stops keeping them)."""
        kept = int(self._kept.sum()) if self._kept is not None else len(self)
        if kept + (int(columns[0].shape[0]) if columns else 0) > self.limit:
            return False
        self._added = [np.asarray(c, np.int32) for c in columns]
        return True

    def commit(self) -> None:
        kept, added = self._kept, self._added
        if kept is not None and not kept.all():
            self.columns = [c[kept] for c in self.columns]
        if added is not None and added and added[0].shape[0]:
            self.columns = [
                np.concatenate([c, a]) for c, a in zip(self.columns, added, strict=True)
            ]
        self.abort()

    def abort(self) -> None:
        self._kept = self._added = None

    def renumber(self, positions: Sequence[int], old_of_new: I32) -> None:
        """After an event store's compaction (nothing staged): the eids at head ``positions``
        renumbered, ``old_of_new`` the old eid of each new one (ascending; every kept match's
        events are live, so among them)."""
        for k in positions:
            self.columns[k] = np.searchsorted(old_of_new, self.columns[k]).astype(np.int32)
