"""Range steps: binding an edge variable from its bound vertex's events in a range of time.

A :class:`RangeStep` binds an edge variable from a time-ordered atom (the events of a bound
vertex in a gap's range of an anchor event's time), then the far end of its event: the plans of
``pass_through`` over a long window read ten minutes of a hub's transfers, not a day of them.
:func:`range_step` chooses the step a plan takes (forward in time for insertions, backward for
deletions); :func:`held_by_range` tells the join filters a range computes already.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

from core.fields import base_relation, time_order_side
from core.times import TIME_FIELD
from monitor.plan.cut import projections
from monitor.plan.plan import FieldFilter
from monitor.plan.windows import time_bounds
from monitor.query.ast import FieldRef, Query


@dataclass(frozen=True)
class RangeStep:
    """Binding an edge variable from a time-ordered atom, then the far end of its event.

    Taken when the atom's vertex is bound and some bound edge variable (the *anchor*: the
    narrowest range, and of equal ones the one bound last) bounds the edge variable's time to
    ``anchor.ts + [low, high]``, and the far end is a variable that no other atom holds with
    only bound variables besides it (a chain, such as ``pass_through``'s ``c``, or the next
    vertex of a round trip, whose other atoms bind it again with the next hop): the far end is
    then bound by the event, and the events of the vertex in that time range are far fewer
    than its neighbours' events in the whole window. Hop after hop, each bound from the range
    after the one before, a round trip of six hops prunes by the hops' order at every step
    instead of enumerating paths of vertices first (4.5x on ``bench.typologies``' round trips
    at 600k events). A far end that another atom holds with bound variables only (the closing
    vertex of a ring) is bound by count / propose / intersect as before.
    """

    atom: int
    events: int
    #: The atoms this step makes redundant: the edge variable's events and pairs atoms and
    #: its other time-ordered atom (each holds wherever the proposed event does).
    implied: frozenset[int]
    vertex: str
    edge: str
    far: str
    side: str
    anchor: str
    anchor_relation: str
    low: float
    high: float
    #: Other bound edge variables' bounds on the step's time that may be tighter than the
    #: anchor's: (edge variable, its relation, low, high), :func:`narrowing`.
    narrowing: tuple[tuple[str, str, float, float], ...] = ()


def range_step(
    query: Query, order: Sequence[str], forward: bool = True, besides: str = ""
) -> RangeStep | None:
    """The range step to take once ``order``'s variables are bound (None: none): of those
    possible, the first (in atom order) whose range lies after its anchor's time (``forward``;
    else before it), else the first. Inserted events are the stream's newest: the events after
    them are the epoch's own and late ones, so a range forward from them is nearly empty, and
    a round trip seeded at a middle hop by an insertion ends there instead of enumerating the
    hops before it first. An expiring event is the oldest: the hops before it expired already
    (the range backward is empty) and a deletion ranges backward first. ``besides``: an edge
    variable whose step is not to be chosen (an alternative's, :mod:`monitor.plan.alternatives`).
    """
    steps = [s for s in range_steps(query, order) if s.edge != besides]
    preferred = [s for s in steps if (s.low >= 0.0 if forward else s.high <= 0.0)] or steps
    if not preferred:
        return None
    bound = set(order)
    return max(preferred, key=lambda s: _pruning(query, s, bound))  # (the first of equals)


def _pruning(query: Query, step: RangeStep, bound: set[str]) -> int:
    """How many of the query's join filters would test the step's events against bound edge
    variables, but for those on times against its anchor (the range computes them, up to
    strictness). A round trip seeded by its last hop can range over the hop before it (the
    seed's amount bounds it: ``p_6.amount >= 0.8 * p_5.amount``) or over the first (only
    ``within`` does): the one more filters prune comes first (``bench.typologies``'
    ``round_trip`` enumerates 39M three-hop paths from its last hops on 800k events, 110M from
    their first hops forward)."""
    count = 0
    for p in query.predicates:
        right = p.right
        if not isinstance(right, FieldRef) or p.left.edge == right.edge:
            continue
        ends = {p.left.edge, right.edge}
        if step.edge not in ends or not ends - {step.edge} <= bound:
            continue
        count += not (step.anchor in ends and TIME_FIELD in (p.left.name, right.name))
    return count


def range_steps(query: Query, order: Sequence[str]) -> tuple[RangeStep, ...]:
    """Every range step possible once ``order``'s variables are bound, in atom order (kept
    per query and bound prefix: a plan's alternatives ask again for the prefixes it asked)."""
    return _range_steps(query, tuple(order))


@lru_cache(maxsize=4096)
def _range_steps(query: Query, order: tuple[str, ...]) -> tuple[RangeStep, ...]:
    found: list[RangeStep] = []
    bound = set(order)
    events_of = {
        a.variables[-1]: i for i, a in enumerate(query.atoms) if a.relation.endswith("#events")
    }
    edges = list(events_of)
    projected = projections(query)
    bounds: Mapping[tuple[str, str], float] | None = None
    for i, atom in enumerate(query.atoms):
        side = time_order_side(atom.relation)
        if side is None:
            continue
        vertex, edge = atom.variables
        if vertex not in bound or edge in bound:
            continue
        events = events_of[edge]
        src, dst, _ = query.atoms[events].variables
        far = dst if side == "by_src" else src
        implied = frozenset({events} | {j for j, e in projected.items() if e == events})
        if far in bound or far == vertex:
            continue
        if any(
            far in a.variables and set(a.variables) - {far} <= bound | {edge}
            for j, a in enumerate(query.atoms)
            if j not in implied and set(a.variables) != {far}
        ):
            # (an atom whose other variables are bound would bind far itself, intersecting;
            # one of far alone, a degree bound's, is a check at far's stage)
            continue
        if bounds is None:
            bounds = time_bounds(edges, query.predicates)
        # the narrowest range; of equal ones, from the edge variable bound last (in a chain of
        # hops each after the previous one, the hop before: the range starts latest)
        anchors = [
            (bounds[t, edge] + bounds[edge, t], -list(order).index(t), t)
            for t in edges
            if t in bound and t != edge and math.isfinite(bounds[t, edge] + bounds[edge, t])
        ]
        if not anchors:
            continue
        _, _, t = min(anchors)
        relation = {u: base_relation(query.atoms[events_of[u]].relation) for u in edges}
        low, high = -bounds[edge, t], bounds[t, edge]
        others = [u for u in edges if u in bound and u not in (t, edge)]
        narrowed = tuple(
            (u, relation[u], lo, hi) for u, lo, hi in narrowing(bounds, edge, t, others)
        )
        step = RangeStep(i, events, implied, vertex, edge, far, side, t, relation[t], low, high)
        found.append(replace(step, narrowing=narrowed))
    return tuple(found)


def narrowing(
    bounds: Mapping[tuple[str, str], float], edge: str, anchor: str, others: Sequence[str]
) -> list[tuple[str, float, float]]:
    """The bounds of ``others`` on ``edge``'s time (``edge.ts - u.ts`` in ``[low, high]``,
    from :func:`~monitor.plan.windows.time_bounds`) that no other bound, the anchor's
    included, always makes at least as tight: ``v``'s low end covers ``u``'s when ``v.ts +
    low_v >= u.ts + low_u`` always holds (``u.ts - v.ts <= low_v - low_u``, as the bounds
    say), and likewise the high ends; of two that cover each other, the anchor's or the first
    is kept. An end covered is left out (infinite), and ``u`` where both are."""
    lows = {u: -bounds[edge, u] for u in (anchor, *others)}
    highs = {u: bounds[u, edge] for u in (anchor, *others)}

    def covers(v: str, u: str, low: bool) -> bool:
        if low:
            return bounds[v, u] <= lows[v] - lows[u]
        return bounds[u, v] <= highs[u] - highs[v]

    def kept(u: str, low: bool) -> bool:
        ends = lows if low else highs
        if not math.isfinite(ends[u]):
            return False
        for v in (anchor, *others):
            if v == u or not math.isfinite(ends[v]) or not covers(v, u, low):
                continue
            first = v == anchor or others.index(v) < others.index(u)
            if first or not covers(u, v, low):
                return False
        return True

    out = []
    for u in others:
        low = lows[u] if kept(u, True) else -math.inf
        high = highs[u] if kept(u, False) else math.inf
        if math.isfinite(low) or math.isfinite(high):
            out.append((u, low, high))
    return out


def held_by_range(join: FieldFilter, step: RangeStep, edge: int, anchor: int) -> str | None:
    """Whether every event a range step proposes passes ``join`` (``edge``, ``anchor``: the
    columns of its edge variable and of its anchor), computed as the filter computes it: a
    bound on the time, ``edge.ts <= anchor.ts + c`` with the range's high end at most ``c``
    (the same sum, rounded the same way) or ``>=`` with its low end at least ``c``, or the
    anchor on the left with no offset (``anchor.ts <= edge.ts``). The range's end itself
    holds a strict one equal to it, ``edge.ts > anchor.ts + c`` with its low end ``c`` (or
    ``anchor.ts < edge.ts`` with ``0``), once the end is left out of the range: the answer
    names the end to leave out (``"low"``, ``"high"``), ``"held"`` where none need be, None
    where the range does not hold ``join``. The anchor's side shifted (``anchor.ts <= edge.ts
    + c``: another sum, rounded otherwise) stays a filter."""
    if (
        join.left_field != TIME_FIELD
        or join.right_field != TIME_FIELD
        or join.factor != 1.0
        or join.op not in ("<=", ">=", "<", ">")
        or {join.left, join.right} != {edge, anchor}
    ):
        return None
    strict = join.op in ("<", ">")
    if join.left == edge:
        upper, offset = join.op in ("<=", "<"), join.offset
    elif join.offset != 0.0:
        return None
    else:  # (anchor op edge: edge's bound is the other way round)
        upper, offset = join.op in (">=", ">"), 0.0
    end = step.high if upper else step.low
    if not strict:
        return "held" if (end <= offset if upper else end >= offset) else None
    if end != offset:  # (a strict bound inside the range's end stays a filter)
        return None
    return "high" if upper else "low"
