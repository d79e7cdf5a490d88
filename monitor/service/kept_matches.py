"""Which queries' live matches the epoch processor keeps, and keeping them in step with the index.

A query keeps its matches (:mod:`monitor.engine.live_matches`) when its removals are frequent and
costly to evaluate: two or more of its events are in windows (every epoch expires some, and
each expiry runs the joins around it again) and close a cycle (the joins walk open paths from
an expiring event, most of which never close; a chain's paths from it are its matches, which a
lookup would not find faster: scatter_gather's two hops run 8% slower keeping them), and its
bindings name every tuple they hold. ``--live-matches`` bounds the rows each keeps (0: none
keeps any); a query that outgrows it evaluates its removals again from then on, as does every
query of a processor whose epochs are evaluated a part at a time (scale-out's workers: the
matches they would keep are not one process's).

The matches are filled by a static evaluation between epochs: at the first epoch after a
restore or a preload (the index then holds what no epoch's change told), staged with each
epoch, kept at its commit, and renumbered with the event stores they name.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager

from monitor.engine.delta import MatchDeltas
from monitor.engine.extend import IndexReader
from monitor.engine.live_matches import LiveMatches, keeps
from monitor.engine.static import enumerate_matches
from monitor.index.levels import I32
from monitor.plan.cut import Cut
from monitor.plan.events import EventQuery

log = logging.getLogger(__name__)


def keeping(query: EventQuery, retention: Mapping[str, float]) -> bool:
    """Whether ``query`` keeps its live matches (given a limit above 0): its events in windows
    close a cycle of its vertices, and its bindings name every tuple they hold."""
    windowed = {v for v, r in query.edges.items() if math.isfinite(retention.get(r, math.inf))}
    return len(windowed) >= 2 and _cyclic(query, windowed) and keeps(query.internal)


def _cyclic(query: EventQuery, edges: set[str]) -> bool:
    """Whether the events ``edges`` of ``query``, as edges between their ends' variables,
    close a cycle (a ring, a triangle, two events each way between two accounts)."""
    parent: dict[str, str] = {}

    def root(v: str) -> str:
        while parent.setdefault(v, v) != v:
            v = parent[v]
        return v

    for atom in query.internal.atoms:
        if len(atom.variables) == 3 and atom.variables[2] in edges:  # (src, dst, the event)
            a, b = root(atom.variables[0]), root(atom.variables[1])
            if a == b:
                return True
            parent[a] = b
    return False


class KeptMatches:
    """The live matches kept, per internal query name."""

    def __init__(
        self, queries: Sequence[EventQuery], retention: Mapping[str, float], limit: int
    ) -> None:
        self.limit = limit
        self.matches: dict[str, LiveMatches] = {
            q.internal.name: LiveMatches(q.internal, limit)
            for q in queries
            if limit > 0 and keeping(q, retention)
        }
        self._queries = {q.internal.name: q for q in queries if q.internal.name in self.matches}
        #: Per query kept, per event relation, the head positions of its events' ids.
        self._eids = {name: _eid_positions(q) for name, q in self._queries.items()}
        #: Whether the index holds what the matches do not tell (filled before the next epoch).
        self.stale = False

    def __bool__(self) -> bool:
        return bool(self.matches)

    def outdated(self) -> None:
        """The index changed without an epoch (a restore, a preload): fill before the next."""
        self.stale = bool(self.matches)

    def fill(
        self,
        index: IndexReader,
        complete: Callable[[], AbstractContextManager[object]],
        max_prefixes: int,
    ) -> None:
        """Every kept query's matches from a static evaluation of the committed index."""
        self.stale = False
        for name, matches in list(self.matches.items()):
            batches = matches_up_to(self._queries[name], index, complete, max_prefixes, self.limit)
            if batches is None or not matches.fill(batches):
                self.drop(name, "")

    def staged(self, results: Sequence[MatchDeltas]) -> None:
        """Stage the epoch's new matches of every kept query (from its evaluated change)."""
        for result in results:
            matches = self.matches.get(result.query)
            if matches is None:
                continue
            plus = result.diff > 0
            if not matches.add([c[plus] for c in result.columns]):
                self.drop(result.query, "")

    def drop(self, query: str, why: str) -> None:
        """Stop keeping ``query``'s matches (for good: its removals are evaluated again)."""
        if self.matches.pop(query, None) is None:
            return
        self._eids.pop(query, None)
        self._queries.pop(query, None)
        log.info(
            "%s: %s; its retractions are evaluated again from now on",
            query,
            why or f"more than {self.limit} live matches (--live-matches)",
        )

    def drop_all(self, why: str) -> None:
        for query in list(self.matches):
            self.drop(query, why)

    def commit(self, renumbered: Mapping[str, I32]) -> None:
        """Keep the staged epoch; then the eids of the event stores compacted after it
        (``renumbered``: per relation, the old eid of each new one)."""
        for name, matches in self.matches.items():
            matches.commit()
            for relation, old_of_new in renumbered.items():
                positions = self._eids[name].get(relation)
                if positions:
                    matches.renumber(positions, old_of_new)

    def abort(self) -> None:
        for matches in self.matches.values():
            matches.abort()

    @property
    def rows(self) -> int:
        return sum(len(m) for m in self.matches.values())

    @property
    def nbytes(self) -> int:
        return sum(m.nbytes for m in self.matches.values())


class _Outgrown(Exception):
    """A static evaluation found more matches than a query keeps."""


def matches_up_to(
    query: EventQuery,
    index: IndexReader,
    complete: Callable[[], AbstractContextManager[object]],
    max_prefixes: int,
    limit: int,
) -> list[list[I32]] | None:
    """``query``'s matches by a static evaluation, in batches; None, stopped as soon as
    found, where they are more than ``limit``."""
    batches: list[list[I32]] = []
    found = 0

    def take(columns: list[I32]) -> None:
        nonlocal found
        found += int(columns[0].shape[0]) if columns else 0
        if found > limit:
            raise _Outgrown
        batches.append(columns)

    try:
        with complete():
            enumerate_matches(query.internal, index, take, max_prefixes=max_prefixes, cut=Cut.NEW)
    except _Outgrown:
        return None
    return batches


def _eid_positions(query: EventQuery) -> dict[str, list[int]]:
    """Per event relation, the head positions of ``query``'s events of it."""
    head = query.internal.head
    out: dict[str, list[int]] = {}
    for variable, relation in query.edges.items():
        out.setdefault(relation, []).append(head.index(variable))
    return out
