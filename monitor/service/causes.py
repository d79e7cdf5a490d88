"""Why a match disappeared: ``"deleted"``, ``"expired"`` or ``"updated"``.

An epoch applies its updates, then the expiries its watermark brings. A match retracted in the
epoch is retracted because of a deletion when it would not hold after the updates alone (some
event or tuple it needs was deleted), and because of an expiry otherwise (it held until the
window moved). Per atom of the query, whole columns at a time:

- an atom with an edge variable needs its event: deleted by id in the epoch means ``deleted``;
- an atom without one over an event relation needs its pair: gone from the pairs in the epoch,
  with no event of the pair expiring in it, means ``deleted`` (the pair's last events were);
- an atom over a tuple relation (which never expires) needs its tuple: gone means ``deleted``;
- an atom of a table (``account(a) as x``) needs its vertex's record: replaced by a newer record
  of the same key in the epoch means ``updated`` (the match no longer holds with the new
  attributes), removed by a tombstone means ``deleted``.

``deleted`` wins over ``updated``, which wins over ``expired``.

A body pruned by degree bounds (:mod:`monitor.plan.degrees`) also loses bindings that still
hold, when a vertex of theirs falls below a bound: a retraction with none of these causes (no
event of it expired either) is ``pruned``, which only the aggregates read. So is one whose table
record was written again in the epoch while the new record re-forms it (:data:`Holds`: the
binding holds at ``NEW`` without the bounds, the record re-bound): the bound took it out, not
the update.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Protocol

import numpy as np
import numpy.typing as npt

from core.columns import Coded
from core.fields import selection_name
from monitor.engine.extend import IndexReader
from monitor.engine.static import enumerate_given
from monitor.index.events import EventChanges
from monitor.index.graph import Change
from monitor.index.levels import I32
from monitor.query.ast import Query

EXPIRED, DELETED, UPDATED, PRUNED = "expired", "deleted", "updated", "pruned"
#: ``holds(variables, rows)``: which ``rows`` (dense columns of ``variables``) some binding of
#: the body without its degree bounds extends at ``NEW``.
Holds = Callable[[tuple[str, ...], list[I32]], npt.NDArray[np.bool_]]


class EpochEvents(Protocol):
    """What a cause is told by of the staged epoch's events (the single process's
    :class:`~monitor.index.event_relations.EventIndex`, or the partitioned engine's)."""

    @property
    def relations(self) -> Collection[str]: ...

    #: Per event relation, the eids that expired, and the effective changes.
    expired: dict[str, I32]
    changed: dict[str, EventChanges]
    #: The event relations that are tables of vertex attributes.
    tables: frozenset[str]

    def changed_ends(self, relation: str) -> tuple[I32, I32]:
        """The ends of the events of ``relation``'s effective changes, in their order."""
        ...

    def expired_pairs(self, relation: str) -> list[I32]:
        """The ends of the events of ``relation`` that expired."""
        ...


_CAUSES = (DELETED, EXPIRED, UPDATED, PRUNED)


def causes(
    query: Query,
    columns: Sequence[I32],
    diff: npt.NDArray[np.integer],
    events: EpochEvents,
    changes: Mapping[str, Change],
    pruned: bool = False,
    holds: Holds | None = None,
) -> Coded:
    """Per row of ``query``'s deltas (dense columns: the head, then the edge variables), its
    cause when it is a -1 (absent for +1 rows); ``pruned``: the body has degree bounds, and
    ``holds`` tells its retractions whose table record was written again apart."""
    codes = np.full(diff.shape[0], -1, np.int8)
    out = Coded(codes, _CAUSES)
    gone = np.flatnonzero(diff < 0)
    if not gone.shape[0]:
        return out
    deleted = np.zeros(gone.shape[0], np.bool_)
    updated = np.zeros(gone.shape[0], np.bool_)
    expired = np.zeros(gone.shape[0], np.bool_)  # (read for a pruned body only)
    tables = query.tables & events.tables
    if events.expired or tables or pruned:  # else every retraction is the epoch's deletions'
        at = {name: k for k, name in enumerate((*query.head, *query.edges))}
        for atom in query.atoms:
            if any(v not in at for v in atom.variables):  # not bound in the output: assume so
                deleted[:] = True
                break
            if atom.edge is not None:
                eids = columns[at[atom.edge]][gone]
                if pruned and atom.relation in events.expired:
                    expired |= np.isin(eids, events.expired[atom.relation])
                died = _deleted_events(events, atom.relation)
                if atom.relation in tables:
                    replaced = _replaced_events(events, atom.relation)
                    updated |= np.isin(eids, replaced)
                    died = died[~np.isin(died, replaced)]
                deleted |= np.isin(eids, died)
                continue
            rows = [columns[at[v]][gone] for v in atom.variables]
            if len(rows) == 1 and atom.relation in events.tables:  # (a table's self-loop)
                rows = rows * 2
            if atom.relation in events.relations:
                name = selection_name(atom.relation, ())
                lost = _rows_in(rows, _removed(changes.get(name)))
                lapsed = _rows_in(rows, events.expired_pairs(atom.relation))
                deleted |= lost & ~lapsed
                expired |= lost & lapsed
            else:
                deleted |= _rows_in(rows, _removed(changes.get(atom.relation)))
    if pruned and holds is not None and updated.any():
        at = {name: k for k, name in enumerate((*query.head, *query.edges))}
        records = {a.edge for a in query.atoms if a.relation in tables and a.edge}
        kept = tuple(v for v in at if v not in records)
        candidates = np.flatnonzero(updated & ~deleted)
        again = holds(kept, [columns[at[v]][gone[candidates]] for v in kept])
        updated[candidates[again]] = False
    if pruned:
        cause = np.where(expired, _CAUSES.index(EXPIRED), _CAUSES.index(PRUNED))
    else:
        if not events.expired:
            deleted |= ~updated
        cause = np.full(gone.shape[0], _CAUSES.index(EXPIRED))
    codes[gone] = np.where(
        deleted, _CAUSES.index(DELETED), np.where(updated, _CAUSES.index(UPDATED), cause)
    )
    return out


def _replaced_events(events: EpochEvents, relation: str) -> I32:
    """Eids of table ``relation`` replaced in the staged epoch by a newer record of their key
    (the key's vertex has an event born in the epoch too)."""
    changed = events.changed.get(relation)
    if changed is None:
        return np.empty(0, np.int32)
    src, _ = events.changed_ends(relation)
    dying = changed.diff < 0
    again = np.isin(src[dying], src[~dying])
    return changed.eids[dying][again]


def _deleted_events(events: EpochEvents, relation: str) -> I32:
    """Eids of ``relation`` deleted by id in the staged epoch (not expired)."""
    changed = events.changed.get(relation)
    if changed is None:
        return np.empty(0, np.int32)
    died = changed.eids[changed.diff < 0]
    expired = events.expired.get(relation, died[:0])
    if expired.shape[0] == died.shape[0]:  # the expired are among the died: all of them
        return died[:0]
    return died[~np.isin(died, expired)]


def _removed(change: Change | None) -> list[I32]:
    if change is None:
        return []
    gone = change.diff < 0
    return [c[gone] for c in change.columns]


def _rows_in(rows: Sequence[I32], table: Sequence[I32]) -> npt.NDArray[np.bool_]:
    """Which rows (columns of one length) are rows of ``table`` (columns)."""
    if not table or not table[0].shape[0]:
        return np.zeros(rows[0].shape[0], np.bool_)
    return np.isin(_as_rows(rows), _as_rows(table))


def _as_rows(columns: Sequence[I32]) -> npt.NDArray[np.void]:
    stacked = np.ascontiguousarray(np.stack([c.astype(np.int32) for c in columns], axis=1))
    return stacked.view(np.dtype((np.void, 4 * len(columns)))).reshape(-1)


def holding(
    body: Query,
    index: IndexReader,
    complete: Callable[[], AbstractContextManager[object]],
    variables: tuple[str, ...],
    rows: list[I32],
) -> npt.NDArray[np.bool_]:
    """:data:`Holds` over the staged index: the bindings of ``body`` (without its degree
    bounds) seeded by ``rows`` (:func:`~monitor.engine.static.enumerate_given`), with the
    events store complete for its reads (``complete``). The few retractions of an epoch that
    both prunes and rewrites a table record, one set lookup each."""
    n = rows[0].shape[0] if rows else 0
    if not n:
        return np.zeros(0, np.bool_)
    at = [body.head.index(v) for v in variables]
    found: set[tuple[int, ...]] = set()

    def take(columns: list[I32]) -> None:
        found.update(zip(*(columns[k].tolist() for k in at), strict=True))

    distinct = np.unique(np.stack(rows, axis=1), axis=0)
    given = [np.ascontiguousarray(distinct[:, k]) for k in range(len(variables))]
    with complete():
        enumerate_given(body, index, variables, given, take)
    return np.array([r in found for r in zip(*(c.tolist() for c in rows), strict=True)], np.bool_)
