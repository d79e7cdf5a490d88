"""Plans: frozen, printable data saying how a query is evaluated, stage by stage.

A :class:`DeltaQuery` ``dQ/dR#i`` evaluates the change of a query caused by the changes of its
i-th atom: it is *seeded* by those changes, binds variables in its :attr:`~DeltaQuery.order`
(an attribute order starting with the seed atom's variables) one :class:`Stage` at a time, and
reads every other atom under the :class:`~monitor.plan.cut.Cut` that
:func:`~monitor.plan.cut.cut_of` gives it.
A static plan (BiGJoin) has the same shape, seeded by every tuple of one atom's relation.

Within a stage, every :class:`Extender` can count, propose and intersect values for the stage's
variable (prefix-extension in the paper); a :class:`Check` is an atom whose variables are all
bound already (a membership test); a :class:`Comparison` is a filter, placed at the first stage
where both its variables are bound. A *guard* is an extender of a later stage applied to the
seed prefixes: a seed for which it counts no value cannot extend to a match, so it is dropped
before the stages in between extend it. The planner guards with the atoms of arity 3 or more
whose key the seed binds: a changed pair seeds nothing unless the pair's events, read under
their cut, hold one (a pair that appears had no events before the epoch).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from core.times import format_duration
from monitor.plan.cut import Cut


@dataclass(frozen=True)
class Extender:
    """One atom seen from a prefix: the values of one of its positions that extend the prefix.

    ``position`` is the atom position the stage's variable is at; ``key`` lists the prefix
    columns holding the atom's other positions, in position order (empty for a unary atom, whose
    values do not depend on the prefix). For a binary atom, position 1 reads the forward
    adjacency (``src -> dst``) and position 0 the reverse one.
    """

    atom: int
    relation: str
    arity: int
    position: int
    key: tuple[int, ...]
    cut: Cut

    def describe(self, order: tuple[str, ...]) -> str:
        by = ", ".join(order[c] for c in self.key) or "-"
        if self.arity == 2:
            way = "fwd" if self.position == 1 else "rev"
        else:
            way = f"pos {self.position + 1} by"
        return f"{self.relation}#{self.atom + 1}[{way} {by}, {self.cut.name}]"


@dataclass(frozen=True)
class RangeExtender(Extender):
    """An edge variable bound from a time index (``R{S}#by_src(x, eid)``): the events of the
    vertex in ``key[0]`` whose time lies in ``[low, high]`` of the time of the event in column
    ``anchor`` (of relation ``anchor_relation``), exactly. The join filters the range already
    holds (``holds``) are not applied again; the others (strict ones, other fields) are the
    stage's."""

    anchor: int = 0
    anchor_relation: str = ""
    low: float = 0.0
    high: float = 0.0
    holds: tuple[FieldFilter, ...] = ()
    #: Bounds of other bound events that narrow the range where they are tighter
    #: (:class:`Narrowing`).
    narrowing: tuple[Narrowing, ...] = ()
    #: The range excludes its low (high) end: a strict filter on it, ``t2.ts > t1.ts``, holds
    #: (:func:`~monitor.plan.range_steps.held_by_range`).
    open_low: bool = False
    open_high: bool = False

    def describe(self, order: tuple[str, ...]) -> str:
        span = f"{_signed(self.low)} .. {_signed(self.high)}"
        if self.open_low or self.open_high:
            span = f"{'(' if self.open_low else '['}{span}{')' if self.open_high else ']'}"
        held = ", ".join(f.describe(order) for f in self.holds)
        narrowed = ", ".join(n.describe(order) for n in self.narrowing)
        return (
            f"{self.relation}#{self.atom + 1}[{order[self.key[0]]}, "
            f"{order[self.anchor]}.ts {span}{f' within {narrowed}' if narrowed else ''}, "
            f"{self.cut.name}]"
        ) + (f" holding {held}" if held else "")


@dataclass(frozen=True)
class Narrowing:
    """The time of the event in column ``anchor`` (of ``anchor_relation``) bounds a range
    step's times to ``[low, high]`` of it (either end infinite): what the query's order and gap
    predicates imply through other hops (``round_trip``'s third hop back from its seed lies
    after the seed's time minus 7 days, as well as within 7 days before the fourth). It only
    narrows the range, each end widened by a margin above what floats round (the filters that
    imply it are tested as they are); it holds no filter."""

    anchor: int
    anchor_relation: str
    low: float
    high: float

    def describe(self, order: tuple[str, ...]) -> str:
        low = _signed(self.low) if math.isfinite(self.low) else ""
        high = _signed(self.high) if math.isfinite(self.high) else ""
        return f"{order[self.anchor]}.ts {low} .. {high}".replace("  ", " ").strip()


@dataclass(frozen=True)
class EndpointExtender(Extender):
    """A vertex bound as one end of the bound event in ``key[0]`` (``position`` 1: its
    destination, 0: its source): one value per prefix, read from the event store."""

    def describe(self, order: tuple[str, ...]) -> str:
        end = "dst" if self.position == 1 else "src"
        return f"{self.relation}#{self.atom + 1}[{end} of {order[self.key[0]]}]"


def _signed(ms: float) -> str:
    if ms == 0:
        return "0"
    return ("-" if ms < 0 else "+") + format_duration(abs(ms))


@dataclass(frozen=True)
class Check:
    """An atom whose variables are all bound: keep the prefixes whose tuple is present."""

    atom: int
    relation: str
    columns: tuple[int, ...]
    cut: Cut

    def describe(self, order: tuple[str, ...]) -> str:
        args = ", ".join(order[c] for c in self.columns)
        return f"{self.relation}#{self.atom + 1}({args})[{self.cut.name}]"


@dataclass(frozen=True)
class Comparison:
    """A filter between two prefix columns, by vertex order (``<`` ...) or identity (``!=``)."""

    left: int
    op: str
    right: int

    def describe(self, order: tuple[str, ...]) -> str:
        return f"{order[self.left]} {self.op} {order[self.right]}"


@dataclass(frozen=True)
class FieldFilter:
    """A join filter: field ``left_field`` of the event in column ``left`` (of relation
    ``left_relation``) against ``right_field`` of the event in column ``right``."""

    left: int
    left_relation: str
    left_field: str
    op: str
    right: int
    right_relation: str
    right_field: str
    #: The right side is ``factor * right_field + offset``.
    factor: float = 1.0
    offset: float = 0.0

    def describe(self, order: tuple[str, ...]) -> str:
        right = f"{order[self.right]}.{self.right_field}"
        if self.factor != 1.0:
            right = f"{self.factor:g} * {right}"
        if self.offset:
            right = f"{right} {'+' if self.offset > 0 else '-'} {format_duration(abs(self.offset))}"
        return f"{order[self.left]}.{self.left_field} {self.op} {right}"


@dataclass(frozen=True)
class Stage:
    """Bind ``variable`` (a new prefix column), then apply the checks and comparisons."""

    variable: str
    extenders: tuple[Extender, ...]
    checks: tuple[Check, ...]
    comparisons: tuple[Comparison, ...]
    fields: tuple[FieldFilter, ...] = ()

    def describe(self, order: tuple[str, ...]) -> str:
        parts = [f"extend {self.variable}: " + ", ".join(e.describe(order) for e in self.extenders)]
        if self.checks:
            parts.append("check " + ", ".join(c.describe(order) for c in self.checks))
        if self.comparisons:
            parts.append("filter " + ", ".join(c.describe(order) for c in self.comparisons))
        if self.fields:
            parts.append("join " + ", ".join(f.describe(order) for f in self.fields))
        return "; ".join(parts)


@dataclass(frozen=True)
class Seed:
    """Where a plan's first prefixes come from: the tuples (or changes) of one atom.

    ``columns[p]`` is the prefix column of the atom's p-th variable; a variable repeated in the
    atom (``e(a, a)``) maps several positions to one column, and only tuples equal at those
    positions seed.
    """

    atom: int
    relation: str
    columns: tuple[int, ...]
    delta: bool
    #: Of the changes, 0: all; 1: insertions only; -1: deletions only (a delta query whose
    #: insertions and deletions are best bound in different orders has a plan for each).
    sign: int = 0

    @property
    def width(self) -> int:
        return max(self.columns) + 1


@dataclass(frozen=True)
class DeltaQuery:
    """The plan of one query seeded by one atom (``delta``) or by all tuples (static)."""

    query: str
    rule: str
    order: tuple[str, ...]
    seed: Seed
    checks: tuple[Check, ...]
    comparisons: tuple[Comparison, ...]
    stages: tuple[Stage, ...]
    output: tuple[int, ...]
    fields: tuple[FieldFilter, ...] = ()
    #: Extenders of later stages that must count a value for a seed prefix (see above).
    guards: tuple[Extender, ...] = ()
    #: Per stage that takes a range step where another bound vertex could range instead, the
    #: plan that does, from that stage on, for the prefixes whose range is the shorter there
    #: (:mod:`monitor.plan.alternatives`).
    alternatives: tuple[tuple[int, DeltaQuery], ...] = ()

    def describe(self) -> str:
        """The plan as text, as ``subgraph-monitor explain`` prints it."""
        order = self.order
        seed_args = ", ".join(order[c] for c in self.seed.columns)
        kind = "all tuples"
        if self.seed.delta:
            kind = {0: "changes", 1: "insertions", -1: "deletions"}[self.seed.sign]
        lines = [
            self.rule,
            f"  order: {', '.join(order)}",
            f"  seed:  {kind} of {self.seed.relation}#{self.seed.atom + 1}({seed_args})",
        ]
        if self.checks:
            lines.append("         check " + ", ".join(c.describe(order) for c in self.checks))
        if self.comparisons:
            lines.append(
                "         filter " + ", ".join(c.describe(order) for c in self.comparisons)
            )
        if self.fields:
            lines.append("         join " + ", ".join(f.describe(order) for f in self.fields))
        if self.guards:
            lines.append("         guard " + ", ".join(g.describe(order) for g in self.guards))
        lines.extend(f"  stage {i + 1}: {s.describe(order)}" for i, s in enumerate(self.stages))
        lines.extend(self._alternatives("  ", 0))
        return "\n".join(lines)

    def _alternatives(self, indent: str, start: int) -> list[str]:
        """The alternatives, each from the stage where it parts, indented under its plan."""
        lines = []
        for k, alt in self.alternatives:
            order = alt.order
            lines.append(
                f"{indent}or, where its range costs less than stage {k + 1}'s: "
                f"order {', '.join(order[len(order) - len(alt.stages) + k :])}"
            )
            lines.extend(
                f"{indent}  stage {i + 1}: {alt.stages[i].describe(order)}"
                for i in range(k, len(alt.stages))
            )
            lines.extend(alt._alternatives(indent + "  ", k + 1))
        return lines
