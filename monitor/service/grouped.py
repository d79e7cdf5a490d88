"""Aggregate queries' output: the groups that start and stop satisfying their conditions.

An aggregate query (``fan_in(b) := transfer(a, b) as t, count(distinct a) >= 10 over 1h.``)
is evaluated as its body (:meth:`~monitor.query.ast.Query.body`: every variable it binds in the
head), by either engine, as any query. Each epoch the body's binding changes, as a
:class:`~monitor.service.query_output.QueryOutput`, feed the query's
:class:`~monitor.engine.aggregates.AggregateState`, which keeps per group (the head's vertices)
what its conditions need, from those changes only, never by enumerating a group's bindings. What
the user reads is one row per group whose satisfaction changed: ``+1`` it starts to hold, ``-1``
it stops, with ``values`` (each condition's value after the epoch), the group's ``match_id``
and, in a run with a window, the ``cause`` of a ``-1``.

``over D`` counts the bindings whose earliest event a retention of ``D`` keeps at the watermark
the epoch begins with: as ``D`` is the query's span, its events' own expiry retracts them
(cause ``expired``) and nothing per binding is kept here. Only when another query keeps the
events longer does a :class:`~monitor.engine.aggregates.Window` keep the counted bindings,
retract those that left it as the epoch begins, then admit the body's changes. A group that
stops and starts again in one epoch (or the reverse) has no row; groups without bindings are
forgotten once they outnumber the others.

The state is a function of the index and the watermark the last epoch began with
(``EventClock.began``): on restore, and when an epoch is aborted, it is rebuilt from the body's
current bindings (:meth:`GroupedQuery.rebuild_state`, then :meth:`GroupedQuery.apply`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from core.columns import Coded, Column, Member, Members
from monitor.engine.aggregates import (
    Aggregate,
    AggregateState,
    GroupChanges,
    KeyIds,
    Kind,
    Rows,
    Window,
)
from monitor.engine.delta import DeltaEvaluator
from monitor.engine.group_values import renumbered
from monitor.plan.events import EventQuery
from monitor.query.ast import FieldRef, Query
from monitor.service.match_ids import hex_ids, id_hashes, match_hashes
from monitor.service.query_output import QueryOutput

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]

#: The value of each ASCII byte as a hex digit (match ids are lowercase hex).
_HEX = np.zeros(256, np.uint64)
_HEX[np.frombuffer(b"0123456789abcdef", np.uint8)] = np.arange(16, dtype=np.uint64)
_SHIFTS = np.arange(60, -1, -4, dtype=np.uint64)


@dataclass(frozen=True)
class BodyReads:
    """What an aggregate reads of its body's changes (:meth:`GroupedQuery.reads`): per edge
    variable the fields it reads (``id``, ``src`` and ``dst`` come with any), and whether the
    rows' match ids."""

    edges: dict[str, tuple[str, ...]]
    match_ids: bool


class GroupedQuery:
    """One aggregate query's groups, kept from its body's binding changes."""

    def __init__(
        self, query: Query, windowed: bool, emit: str = "all", retention: float = math.inf
    ) -> None:
        """``retention``: the longest its body's events live; a window of ``over`` is kept only
        when it is longer (else their expiry retracts the bindings as the window would)."""
        self.query = query
        self.body = query.body()
        self.width = len(query.head)
        #: Whether the run or the query has a window (its ``-1`` rows then carry a ``cause``).
        self.windowed = windowed or query.over is not None
        self.emit = emit
        self.retention = retention
        self.aggregates = [
            Aggregate(_kind(c.kind), c.op, c.threshold, c.name) for c in query.aggregates
        ]
        self.rebuild_state()

    def rebuild_state(self) -> None:
        """Forget every group (then :meth:`apply` the body's current bindings as ``+1`` s: its
        output is the groups that hold)."""
        self.state = AggregateState(self.aggregates)
        self.groups = KeyIds()
        self.heads: list[npt.NDArray[np.generic]] = [
            np.empty(0, np.int64) for _ in range(self.width)
        ]
        names = [a.name for a in self.aggregates if a.kind != "count"]
        over = self.query.over
        self.window = None if over is None or self.retention <= over else Window(over, names)

    def reads(self) -> BodyReads:
        """What :meth:`apply` reads of the body's changes beside their vertices, diffs and
        causes: the engines gather nothing else (a body's rows are many: 53 an event in
        ``bench.typologies``' scatter-gather)."""
        fields: dict[str, set[str]] = {}
        for condition in self.query.aggregates:
            argument = condition.argument
            if isinstance(argument, FieldRef):
                fields.setdefault(argument.edge, set()).add(argument.name)
            elif argument is not None and argument not in self.body.variables:
                fields.setdefault(argument, set()).add("id")  # (an edge variable's events)
        if self.window is not None:  # (the window keys its bindings by match id, of all the
            for edge in self.body.edges:  # events, and times them by their ts)
                fields.setdefault(edge, set()).add("ts")
        return BodyReads({e: tuple(sorted(f)) for e, f in fields.items()}, self.window is not None)

    @property
    def nbytes(self) -> int:
        """The aggregate state's bytes (not the head ids' Python objects)."""
        window = self.window.nbytes if self.window is not None else 0
        return self.state.nbytes + window + self.groups.nbytes

    def deadline(self) -> float:
        """Past this watermark a counted binding leaves the window (inf: none will)."""
        if self.window is None or not len(self.window):
            return math.inf
        return float(self.window.times.min()) + self.window.span

    def apply(self, body: QueryOutput | None, watermark: float) -> QueryOutput | None:
        """The groups whose satisfaction changed in an epoch whose body changes are ``body``
        (None: no change) and whose watermark is ``watermark``."""
        phases: list[tuple[GroupChanges, str]] = []
        parts: list[tuple[Rows, str]] = []
        updated: I64 = np.empty(0, np.int64)
        if self.window is not None:
            parts.append((self.window.expire(watermark), "expired"))
        pruned = None
        if body is not None and len(body.diff):
            rows, expired, pruned, updated = self._rows(body, watermark)
            parts += [(expired, "expired"), (rows, "deleted")]
        for rows, cause in parts:
            if len(rows):
                phases.append((self.state.apply(rows.groups, rows.arguments, rows.diffs), cause))
        out = self._output(phases, updated)
        if pruned is not None and len(pruned):
            # Bindings still in the graph, taken out with a vertex that fell below a degree
            # bound (:mod:`monitor.plan.degrees`): their groups stopped holding already (the
            # bound is necessary), and their rows show the values before.
            self.state.apply(pruned.groups, pruned.arguments, pruned.diffs)
        self._compact()
        return out

    #: Groups without bindings are forgotten once there are more of them than this and than
    #: groups with some: the groups' memory follows the window, not every account ever seen.
    compact_min = 1 << 16

    def _compact(self) -> None:
        n = len(self.groups)
        counted = self.state.bindings[:n]  # (a group whose rows were never counted has none)
        live = np.zeros(n, np.bool_)
        live[: counted.shape[0]] = counted > 0
        dead = n - int(live.sum())
        if dead <= max(self.compact_min, n - dead):
            return
        self.groups.keep(live)
        self.state.keep(live)
        if self.window is not None:
            self.window.renumber(renumbered(live))
        self.heads = [head[:n][live] for head in self.heads]

    def _rows(self, body: QueryOutput, watermark: float) -> tuple[Rows, Rows, Rows, I64]:
        """The body's changes as the aggregates count them: those retracted because their
        events expired, the others, and those pruned (:mod:`~monitor.service.causes`); and
        the groups whose other retractions were all caused by a table's update (a group of
        them that stops holding stops ``updated``)."""
        groups = self._group_ids(body.columns[: self.width])
        rows = Rows(groups, self._arguments(body), body.diff)
        cause = body.extra.get("cause")
        expired = _is_expired(cause, body.diff)
        by_update = _caused(cause, body.diff, "updated")
        pruned = _caused(cause, body.diff, "pruned")
        if self.window is not None:
            keys = _hex_keys(body.extra["match_id"])
            times = _earliest(body.edges, self.body.timed_edges)
            counted = self.window.counted(keys, times, rows, watermark)
            rows, expired = _rows_at(rows, counted), expired[counted]
            by_update, pruned = by_update[counted], pruned[counted]
        retracted = (rows.diffs < 0) & ~expired & ~pruned
        updated = by_update & retracted
        updated_groups = np.empty(0, np.int64)
        if updated.any():  # (a mask over the dense ids: no sort of every row's group)
            only = np.zeros(len(self.groups), np.bool_)
            only[rows.groups[updated]] = True
            only[rows.groups[retracted & ~updated]] = False
            updated_groups = np.flatnonzero(only)
        others = _rows_at(rows, ~expired & ~pruned)
        return others, _rows_at(rows, expired), _rows_at(rows, pruned), updated_groups

    def _group_ids(self, columns: Sequence[npt.NDArray[np.generic]]) -> I64:
        """Dense ids of the groups of ``columns`` (the head's external ids), noting the ids of
        new groups."""
        rows = int(columns[0].shape[0]) if columns else 0
        keys = match_hashes(self.query.name, list(columns), rows).view(np.int64)
        known = len(self.groups)
        ids = self.groups.of(keys)
        fresh = np.flatnonzero(ids >= known)
        if not fresh.shape[0]:
            return ids
        size = len(self.groups)
        for k, column in enumerate(columns):  # (ints kept as int64, others as objects)
            head = self.heads[k]
            kind = np.int64 if column.dtype.kind in "iu" and head.dtype != object else object
            if size > head.shape[0] or head.dtype != kind:
                wider = np.zeros(max(size, 2 * head.shape[0]), kind)
                wider[: head.shape[0]] = head
                self.heads[k] = head = wider
            head[ids[fresh]] = column[fresh]
        return ids

    def _arguments(self, body: QueryOutput) -> dict[str, npt.NDArray[np.generic]]:
        """Each condition's argument per row (none for ``count(*)``)."""
        out: dict[str, npt.NDArray[np.generic]] = {}
        for condition in self.query.aggregates:
            argument = condition.argument
            if argument is None:
                continue
            if isinstance(argument, FieldRef):
                out[condition.name] = numbers(body.edges[argument.edge][argument.name])
            elif argument in body.variables:
                column = body.columns[body.variables.index(argument)]
                out[condition.name] = id_hashes(column).view(np.int64)
            else:
                events = body.edges[argument]["id"]
                out[condition.name] = id_hashes(_plain(events)).view(np.int64)
        return out

    def _output(self, phases: list[tuple[GroupChanges, str]], updated: I64) -> QueryOutput | None:
        """One row per group whose satisfaction changed over the epoch's phases (``updated``:
        the groups whose retractions a table's update caused, :meth:`_rows`)."""
        if not phases:
            return None
        groups = np.concatenate([p.groups for p, _ in phases])
        diffs = np.concatenate([p.diffs for p, _ in phases])
        if not groups.shape[0]:
            return None
        unique, inverse = np.unique(groups, return_inverse=True)
        net = np.bincount(inverse.reshape(-1), weights=diffs, minlength=unique.shape[0])
        keep = net != 0
        unique, net = unique[keep], net[keep].astype(np.int64)
        if self.emit == "appearances":
            unique, net = unique[net > 0], net[net > 0]
        if not unique.shape[0]:
            return None
        rows = int(unique.shape[0])
        causes = _causes(unique, phases, updated)
        # In the order of the groups' hashes, not of their dense ids: a rebuild numbers them
        # otherwise, and a rerun writes the same bytes.
        hashes = match_hashes(self.query.name, [head[unique] for head in self.heads], rows)
        order = np.argsort(hashes, kind="stable")
        unique, net, hashes, causes = unique[order], net[order], hashes[order], causes[order]
        columns = [head[unique] for head in self.heads]
        values = self.state.values(unique)
        extra: dict[str, Member] = {"values": Members(dict(values.items()), rows)}
        if self.windowed:
            extra["cause"] = causes
        extra["match_id"] = hex_ids(hashes)
        return QueryOutput(self.query.name, self.query.head, columns, net, {}, extra)


def _kind(kind: str) -> Kind:
    kinds: dict[str, Kind] = {
        "count": "count",
        "count_distinct": "count_distinct",
        "sum": "sum",
        "min": "min",
        "max": "max",
    }
    return kinds[kind]


def _causes(groups: I64, phases: list[tuple[GroupChanges, str]], updated: I64) -> Coded:
    """``expired``, ``deleted`` or ``updated`` for each of ``groups`` (sorted) that stopped
    holding: the cause of the phase in which it stopped (a ``+1`` row's group stopped in no
    phase: one that stops and starts again has no row), ``updated`` for a group of ``updated``
    that stopped in the phase of the deletions."""
    codes = np.full(groups.shape[0], -1, np.int64)
    names = ["expired", "deleted", "updated"]
    for changes, cause in phases:
        stopped = changes.groups[changes.diffs < 0]
        if cause == "deleted" and updated.shape[0]:
            by_update = np.isin(stopped, updated)
            _mark(codes, groups, stopped[by_update], names.index("updated"))
            stopped = stopped[~by_update]
        _mark(codes, groups, stopped, names.index(cause))
    return Coded(codes, names)


def _mark(codes: I64, groups: I64, stopped: I64, code: int) -> None:
    """``codes[i] = code`` where ``groups[i]`` (sorted) is one of ``stopped``."""
    at = np.searchsorted(groups, stopped)
    found = at < groups.shape[0]
    found[found] = groups[at[found]] == stopped[found]
    codes[at[found]] = code


def _hex_keys(ids: Member) -> I64:
    """The 64-bit hashes whose hex digits are ``ids`` (``match_id`` s, ``S16``)."""
    assert isinstance(ids, np.ndarray)
    digits = _HEX[np.frombuffer(ids.tobytes(), np.uint8).reshape(-1, 16)]
    keys: I64 = np.bitwise_or.reduce(digits << _SHIFTS, axis=1).view(np.int64)
    return keys


def _earliest(edges: Mapping[str, Mapping[str, Column]], variables: Sequence[str]) -> F64:
    """Per row, the least ``ts`` of its events."""
    times = [numbers(edges[v]["ts"]) for v in variables]
    least: F64 = np.minimum.reduce(times) if len(times) > 1 else times[0]
    return least


def numbers(column: Column) -> F64:
    """A number column as ``float64``, NaN where a row has none."""
    if isinstance(column, Coded):
        raise TypeError("an aggregate reads a number field; this one holds text")
    if column.dtype.kind in "fiu":
        return column.astype(np.float64, copy=False)
    return np.array([math.nan if v is None else float(v) for v in column.tolist()], np.float64)


def _plain(column: Column) -> npt.NDArray[np.generic]:
    """Ids as ``int`` s and ``str`` s, as :func:`id_hashes` reads them."""
    if isinstance(column, Coded):
        return np.array(column.tolist(), object)
    if column.dtype.kind == "S":  # (ASCII ids as bytes)
        return column.astype("U").astype(object)
    return column


def _is_expired(cause: Member | None, diff: I64) -> npt.NDArray[np.bool_]:
    """The ``-1`` rows whose cause is ``expired``."""
    return _caused(cause, diff, "expired")


def _caused(cause: Member | None, diff: I64, name: str) -> npt.NDArray[np.bool_]:
    """The ``-1`` rows whose cause is ``name``."""
    if not isinstance(cause, Coded):
        return np.zeros(diff.shape[0], np.bool_)
    codes = [k for k, v in enumerate(cause.values) if v == name]
    return (diff < 0) & np.isin(cause.codes, codes)


def _rows_at(rows: Rows, keep: npt.NDArray[np.bool_]) -> Rows:
    arguments = {n: a[keep] for n, a in rows.arguments.items()}
    return Rows(rows.groups[keep], arguments, rows.diffs[keep])


def body_retention(query: Query, retention: Mapping[str, float]) -> float:
    """The longest an event of ``query``'s edge variables lives (0: it has none)."""
    relations = {a.relation for a in query.atoms if a.edge is not None}
    return max((retention.get(r, math.inf) for r in relations), default=0.0)


def grouped_queries(
    queries: Sequence[Query],
    windowed: bool,
    emit: str,
    retention: Mapping[str, float],
    evaluator: DeltaEvaluator,
    rewritten: Sequence[EventQuery],
) -> dict[str, GroupedQuery]:
    """The aggregate queries' groups, by name (both engines'). Their bodies whose events
    determine their bindings are consolidated by those alone
    (:attr:`~monitor.engine.delta.DeltaEvaluator.keyed_by`: one sort of a key or two instead
    of every vertex's too): the groups read the change in any order (a group's rows come
    sorted by its hash)."""
    grouped = {
        q.name: GroupedQuery(q, windowed, emit, body_retention(q, retention))
        for q in queries
        if q.aggregates
    }
    for query in rewritten:
        identity = query.identity()
        if query.source.name in grouped and identity is not None:
            evaluator.keyed_by[query.internal.name] = identity
    return grouped


def grouped_outputs(
    grouped: dict[str, GroupedQuery], outputs: list[QueryOutput], watermark: float
) -> list[QueryOutput]:
    """``outputs`` with each aggregate query's body changes replaced by its groups' rows (an
    aggregate query may have rows without body changes: bindings left its window)."""
    if not grouped:
        return outputs
    out: list[QueryOutput] = []
    for output in outputs:
        query = grouped.get(output.query)
        found = output if query is None else query.apply(output, watermark)
        if found is not None:
            out.append(found)
    changed = {output.query for output in outputs}
    for name, query in grouped.items():
        found = None if name in changed else query.apply(None, watermark)
        if found is not None:
            out.append(found)
    return out


def emit_grouped(
    grouped: GroupedQuery | None,
    out: QueryOutput,
    watermark: float,
    emit: Callable[[QueryOutput], None],
) -> None:
    """``out`` (current matches, +1 rows) to ``emit``; of an aggregate query's body, the rows
    of the groups it makes hold (the static evaluations of ``initial`` and the rebuilds)."""
    found = out if grouped is None else grouped.apply(out, watermark)
    if found is not None:
        emit(found)
