"""Join filters on times that a stage's other filters imply, left out of the stage.

A path's hops in time order and its ``within`` make every pair of hops a filter
(``p_1.ts <= p_4.ts + 7d``, ``p_4.ts <= p_1.ts + 7d``, ...): thirty for six hops, ten at the
stage binding the sixth. Once ``p_1.ts < p_2.ts < ... < p_6.ts`` and ``p_6.ts <= p_1.ts + 7d``
hold, the others do too, and each left in the stage reads two columns and two fields of every
candidate still kept. :func:`without_implied` drops, stage by stage, each filter that what holds
already (the filters of the stages before, the ranges the stage reads) and the stage's other
filters imply, so that the stage passes exactly the candidates it passed with it.

Exactly, floats included. Only times are reasoned about (``x.ts op y.ts + c``, factor 1). A
filter is a bound ``s <= b + c``, computed either with the sum on ``b`` (``s <= fl(b + c)``: from
``<=`` and ``<``) or on ``s`` (``fl(s - c) <= b``: from ``>=`` and ``>``); a range step's events
lie in ``[fl(anchor + low), fl(anchor + high)]``, two such bounds. A bound is implied by a chain
of bounds without offset from ``s`` up to ``b`` when ``c >= 0``, or by such chains from ``s`` to
``x`` and from ``y`` to ``b`` around one bound ``x <= y + c'`` computed the same way with
``c' <= c``. Rounding is monotone, so those chains hold in floats as they do in reals; a chain
of two bounds with offsets would add two rounded sums, and is not used. A strict bound needs a
strict link in its chain or a margin of 1 ms (times are below 2^49 ms, a float's step there at
most 1/8 ms). Within a stage a filter is dropped when the filters kept and those not decided
yet imply it; by induction from the last, the kept ones imply every dropped one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from types import MappingProxyType

from core.fields import base_relation
from core.times import TIME_FIELD
from monitor.plan.plan import FieldFilter, RangeExtender, Stage

#: A margin of times that rounding never closes (see the module's docstring), ms.
_MARGIN = 1.0


@dataclass(frozen=True)
class Bound:
    """``small.ts <= big.ts + offset`` (``<`` if ``strict``) between two prefix columns,
    computed with the sum on ``big`` (``on_big``) or on ``small``."""

    small: int
    big: int
    offset: float
    strict: bool
    on_big: bool


@lru_cache(maxsize=4096)
def bound_of(join: FieldFilter) -> Bound | None:
    """The bound a join filter is, if it compares two times with factor 1."""
    if join.left_field != TIME_FIELD or join.right_field != TIME_FIELD or join.factor != 1.0:
        return None
    if join.left == join.right or join.op not in ("<", "<=", ">", ">="):
        return None
    strict = join.op in ("<", ">")
    if join.op in ("<", "<="):  # left <= fl(right + offset)
        return Bound(join.left, join.right, join.offset, strict, on_big=True)
    return Bound(join.right, join.left, -join.offset, strict, on_big=False)  # fl(r + o) <= left


def range_bounds(extender: RangeExtender, edge: int) -> list[Bound]:
    """The bounds every event a range step proposes for column ``edge`` lies within."""
    return [
        Bound(edge, extender.anchor, extender.high, extender.open_high, on_big=True),
        Bound(extender.anchor, edge, -extender.low, extender.open_low, on_big=False),
    ]


def implies(known: Sequence[Bound], target: Bound) -> bool:
    """Whether ``known`` imply ``target``, as the filters compute them (module docstring)."""
    below = _chains(tuple(known))

    def chain(a: int, b: int) -> bool | None:
        """None: no chain from ``a`` up to ``b``; else whether a link of it is strict."""
        return False if a == b else below.get((a, b))

    whole = chain(target.small, target.big)
    if (
        whole is not None
        and target.offset >= 0.0
        and (not target.strict or whole or target.offset >= _MARGIN)
    ):
        return True
    for k in known:
        if k.offset == 0.0 or k.on_big != target.on_big or k.offset > target.offset:
            continue
        left, right = chain(target.small, k.small), chain(k.big, target.big)
        if left is None or right is None:
            continue
        if not target.strict or left or right or k.strict:
            return True
        if target.offset - k.offset >= _MARGIN:
            return True
    return False


@lru_cache(maxsize=8192)
def _chains(known: tuple[Bound, ...]) -> Mapping[tuple[int, int], bool]:
    """Every ``(a, b)`` joined by a chain of bounds without offset from ``a`` up to ``b``, and
    whether some chain has a strict link (a closure over a stage's dozen columns; kept, as a
    plan's alternatives repeat its first stages)."""
    links: dict[tuple[int, int], bool] = {}
    for k in known:
        if k.offset == 0.0:
            links[k.small, k.big] = links.get((k.small, k.big), False) or k.strict
    nodes = {n for pair in links for n in pair}
    for via in nodes:
        for (a, b), strict in list(links.items()):
            if b != via:
                continue
            for (c, d), onward in list(links.items()):
                if c == via and a != d:
                    links[a, d] = links.get((a, d), False) or strict or onward
    return MappingProxyType(links)


def without_implied(
    first: Sequence[FieldFilter], stages: Sequence[Stage], width: int
) -> tuple[Stage, ...]:
    """``stages`` (stage ``p`` binds prefix column ``width + p``) without the join filters
    implied where each stage applies them, given the seed's filters ``first``; and without the
    comparisons ``e != f`` of two events of one relation whose times are ordered strictly
    there (one event has one time)."""
    known = [b for b in map(bound_of, first) if b is not None]
    relation = _relations(first)
    out = []
    for p, stage in enumerate(stages):
        for extender in stage.extenders:
            if isinstance(extender, RangeExtender):
                known += range_bounds(extender, width + p)
                relation[width + p] = base_relation(extender.relation)
                relation[extender.anchor] = extender.anchor_relation
        relation.update(_relations(stage.fields))
        fields = list(stage.fields)
        kept: list[FieldFilter] = []
        for i, join in enumerate(fields):
            target = bound_of(join)
            if target is None:
                kept.append(join)
                continue
            others = [b for b in map(bound_of, kept + fields[i + 1 :]) if b is not None]
            if not implies(known + others, target):
                kept.append(join)
        known += [b for b in map(bound_of, kept) if b is not None]
        ordered = _chains(tuple(known))
        comparisons = tuple(
            c
            for c in stage.comparisons
            if not (
                c.op == "!="
                and relation.get(c.left, "") == relation.get(c.right, "?")
                and (ordered.get((c.left, c.right)) or ordered.get((c.right, c.left)))
            )
        )
        out.append(replace(stage, fields=tuple(kept), comparisons=comparisons))
    return tuple(out)


def _relations(joins: Iterable[FieldFilter]) -> dict[int, str]:
    """The relation of each event column the join filters name."""
    out = {j.left: j.left_relation for j in joins}
    out.update((j.right, j.right_relation) for j in joins)
    return out
