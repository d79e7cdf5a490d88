"""What a set of plans needs of the index: the relations they read, those they do not, and
the time buckets of the time-ordered ones.

The index keeps relations derived from the events for every selection an atom reads
(:mod:`monitor.index.selections`); which of them must be maintained epoch by epoch, and how
wide the buckets of a time-ordered one are, follows from the delta queries alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from monitor.plan.plan import DeltaQuery, EndpointExtender, RangeExtender

#: The narrowest time bucket a time-ordered relation is kept by (ms).
MIN_BUCKET = 1000.0
#: The most buckets a range step's range may touch (a wide gap beside a narrow one on the
#: same relation widens the buckets rather than probing thousands of them a prefix).
MAX_BUCKETS = 32


def bucket_widths(plans: Iterable[DeltaQuery]) -> dict[str, float]:
    """Per time-ordered relation some of ``plans`` reads, the width of its time buckets: the
    narrowest range a range step reads it over, so that a range touches about two buckets;
    but at least :data:`MIN_BUCKET`, and wide enough that the widest range touches at most
    :data:`MAX_BUCKETS` + 1."""
    ranges: dict[str, list[float]] = {}
    for plan in plans:
        for stage in plan.stages:
            for e in stage.extenders:
                if isinstance(e, RangeExtender):
                    ranges.setdefault(e.relation, []).append(e.high - e.low)
    return {
        name: max(MIN_BUCKET, min(widths), max(widths) / MAX_BUCKETS)
        for name, widths in ranges.items()
    }


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
