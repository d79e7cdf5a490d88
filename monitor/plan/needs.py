"""What a set of plans needs of the index: the relations they read, those they do not, and
the time orders of events.

The index keeps relations derived from the events for every selection an atom reads
(:mod:`monitor.index.selections`); which of them must be maintained epoch by epoch, and which
time orders are kept, follows from the delta queries alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from monitor.plan.plan import DeltaQuery, EndpointExtender, RangeExtender


def time_ordered(plans: Iterable[DeltaQuery]) -> frozenset[str]:
    """The time orders (``R{S}#by_src``, ``R{S}#by_dst``) some range step of ``plans`` reads."""
    return frozenset(
        e.relation
        for plan in plans
        for stage in plan.stages
        for e in stage.extenders
        if isinstance(e, RangeExtender)
    )


def relations_read(plans: Iterable[DeltaQuery]) -> set[str]:
    """The index relations ``plans`` read: by extenders (an event's end reads the event
    store, not a relation), checks and guards. A seed reads its relation's changes only."""
    out: set[str] = set()
    for plan in plans:
        out.update(c.relation for c in plan.checks)
        out.update(g.relation for g in plan.guards)
        for stage in plan.stages:
            out.update(e.relation for e in stage.extenders if not isinstance(e, EndpointExtender))
            out.update(c.relation for c in stage.checks)
    return out


def unread(selections: Iterable[tuple[str, str]], plans: Sequence[DeltaQuery]) -> frozenset[str]:
    """Of the ``(pairs, events)`` relations of the selections, those no delta query needs
    maintained: a pairs relation none reads, and an events relation none reads whose pairs
    none reads or seeds from either (the pairs that appear or disappear are counted on the
    events relation). Seeding needs a relation's changes only, which are computed all the
    same."""
    read = relations_read(plans)
    seeded = {plan.seed.relation for plan in plans}
    out: set[str] = set()
    for pairs, events in selections:
        if pairs not in read:
            out.add(pairs)
        if not {events, pairs} & read and pairs not in seeded:
            out.add(events)
    return frozenset(out)
