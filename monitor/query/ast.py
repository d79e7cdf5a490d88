"""The parsed form of a query: plain frozen data, no behaviour beyond printing.

A :class:`Query` is a conjunction of :class:`Atom` s (uses of relations), :class:`Filter` s
(comparisons between vertex variables) and :class:`Predicate` s (comparisons of event fields),
with an optional ``distinct`` flag. Vertex variables are query vertices; an atom written
``transfer(a, b) as t`` also binds the *edge variable* ``t`` to one event of the relation.
Positions (``line``, ``column``) are 1-based and point at the first character of the construct in
the query text; built-in queries carry positions in their own text.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace

from core.times import format_duration

#: Comparison operators a filter may use, between two variables.
FILTER_OPERATORS = ("<", "<=", ">", ">=", "!=")

#: Comparison operators a predicate may use, between event fields and literals.
PREDICATE_OPERATORS = ("<", "<=", ">", ">=", "=", "!=")

#: A literal in a predicate: a number, a double-quoted string, ``true`` or ``false``.
LiteralValue = int | float | str | bool

#: The aggregate functions of an aggregate condition.
AGGREGATE_FUNCTIONS = ("count", "sum", "min", "max")


@dataclass(frozen=True)
class Atom:
    """One use of a relation: ``transfer(a, b)``, or ``transfer(a, b) as t`` to bind the edge
    variable ``t`` to one event of the relation. Arity = ``len(variables)``."""

    relation: str
    variables: tuple[str, ...]
    line: int = field(default=0, compare=False)
    column: int = field(default=0, compare=False)
    edge: str | None = None
    #: ``transfer{2,6}(a, a)``: a path of 2 to 6 events (None: one event or tuple). The
    #: parser rewrites it into one query per length (:mod:`monitor.query.paths`).
    hops: tuple[int, int] | None = None

    @property
    def is_table(self) -> bool:
        """``account(a) as x``: a unary atom with an edge variable binds the attributes of a
        vertex, one record per vertex of a *table* (latest wins), never expiring."""
        return self.edge is not None and len(self.variables) == 1

    def __str__(self) -> str:
        hops = ""
        if self.hops is not None:
            low, high = self.hops
            hops = f"{{{low}}}" if low == high else f"{{{low},{high}}}"
        atom = f"{self.relation}{hops}({', '.join(self.variables)})"
        return f"{atom} as {self.edge}" if self.edge else atom


@dataclass(frozen=True)
class FieldRef:
    """``t.amount``: field ``name`` of the event bound to edge variable ``edge``."""

    edge: str
    name: str
    #: ``next(p).amount``: the field of the hop after ``p``'s, on a path ``p``.
    next: bool = False

    def __str__(self) -> str:
        return f"next({self.edge}).{self.name}" if self.next else f"{self.edge}.{self.name}"


@dataclass(frozen=True)
class Literal:
    """A constant in a predicate."""

    value: LiteralValue

    @property
    def kind(self) -> str:
        """``number``, ``string`` or ``bool``: the field type it compares with."""
        if isinstance(self.value, bool):
            return "bool"
        return "string" if isinstance(self.value, str) else "number"

    def __str__(self) -> str:
        if isinstance(self.value, bool):
            return "true" if self.value else "false"
        if isinstance(self.value, str):
            return '"' + self.value.replace("\\", "\\\\").replace('"', '\\"') + '"'
        return repr(self.value)


@dataclass(frozen=True)
class Predicate:
    """``left op right`` over event fields: ``t.amount >= 1000``, ``t2.amount <= t1.amount``.

    With one edge variable it is a *selection* of that variable's atom (applied where the
    atom's events are stored); across two it is a *join filter* (applied at the first stage
    where both are bound). A field an event lacks makes the predicate false for it.
    """

    left: FieldRef
    op: str
    right: FieldRef | Literal
    line: int = field(default=0, compare=False)
    column: int = field(default=0, compare=False)
    #: Field arithmetic on a right-hand field: ``factor * right + offset`` (``0.9 * t1.amount``,
    #: ``t1.ts + 10m``: offsets are durations in milliseconds, on times only).
    factor: float = 1.0
    offset: float = 0.0

    @property
    def edges(self) -> tuple[str, ...]:
        """The edge variables it reads, in order, each once."""
        if isinstance(self.right, FieldRef) and self.right.edge != self.left.edge:
            return (self.left.edge, self.right.edge)
        return (self.left.edge,)

    @property
    def is_selection(self) -> bool:
        return len(self.edges) == 1

    def __str__(self) -> str:
        right = str(self.right)
        if self.factor != 1.0:
            right = f"{self.factor:g} * {right}"
        if self.offset:
            sign = "+" if self.offset > 0 else "-"
            right = f"{right} {sign} {format_duration(abs(self.offset))}"
        return f"{self.left} {self.op} {right}"


@dataclass(frozen=True)
class Filter:
    """A comparison ``left op right`` between two variables of the query.

    Order comparisons use the order of the external vertex ids: integers by value, strings
    lexicographically, every integer before every string.
    """

    left: str
    op: str
    right: str
    line: int = field(default=0, compare=False)
    column: int = field(default=0, compare=False)

    def __str__(self) -> str:
        return f"{self.left} {self.op} {self.right}"


@dataclass(frozen=True)
class AggregateCondition:
    """``count(*) >= 10``, ``count(distinct a) >= 10``, ``sum(t.amount) > 50000``,
    ``min(t.amount) < 10``, ``max(t.amount) >= 1000``: a condition on the bindings of one group
    (the query's head). ``kind`` is ``count``, ``count_distinct``, ``sum``, ``min`` or ``max``;
    ``argument`` the variable counted (``count_distinct``) or the field (the others)."""

    kind: str
    argument: str | FieldRef | None
    op: str
    threshold: float
    line: int = field(default=0, compare=False)
    column: int = field(default=0, compare=False)

    @property
    def name(self) -> str:
        """What the output calls its value: ``count``, ``count_distinct_a``,
        ``sum_t_amount``."""
        if self.argument is None:
            return self.kind
        if isinstance(self.argument, FieldRef):
            return f"{self.kind}_{self.argument.edge}_{self.argument.name}"
        return f"{self.kind}_{self.argument}"

    def __str__(self) -> str:
        if self.kind == "count":
            call = "count(*)"
        elif self.kind == "count_distinct":
            call = f"count(distinct {self.argument})"
        else:
            call = f"{self.kind}({self.argument})"
        threshold = self.threshold
        number = str(int(threshold)) if threshold.is_integer() else repr(threshold)
        return f"{call} {self.op} {number}"


@dataclass(frozen=True)
class Query:
    """``name(head) := atoms, filters[, distinct].``

    ``head`` lists the output variables in output order; every variable of the body is in the head.
    ``distinct`` asks for subgraph-monomorphism semantics (all variables bound to different
    vertices); without it matches are homomorphisms, as in the paper.
    """

    name: str
    head: tuple[str, ...]
    atoms: tuple[Atom, ...]
    filters: tuple[Filter, ...] = ()
    distinct: bool = False
    line: int = field(default=0, compare=False)
    column: int = field(default=0, compare=False)
    predicates: tuple[Predicate, ...] = ()
    #: ``within D``: the latest minus the earliest ``ts`` of the edge variables is at most
    #: this many milliseconds (None: no bound).
    within: float | None = None
    #: Aggregate conditions: the head is then the group, and every condition holds over the
    #: group's bindings of the body.
    aggregates: tuple[AggregateCondition, ...] = ()
    #: ``over D``: the aggregates count the bindings whose events all lie within this many
    #: milliseconds of the watermark (None: every live binding).
    over: float | None = None

    def __hash__(self) -> int:
        """The compared fields' hash, computed once per query: the planner's memos look one
        query up thousands of times while planning it and its alternatives."""
        cached: int | None = self.__dict__.get("_hash")
        if cached is None:
            cached = hash(tuple(getattr(self, f.name) for f in fields(self) if f.compare))
            object.__setattr__(self, "_hash", cached)
        return cached

    def __getstate__(self) -> dict[str, object]:
        """The fields without the cached hash (another process hashes strings otherwise)."""
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    @property
    def edges(self) -> tuple[str, ...]:
        """The edge variables, in atom order."""
        return tuple(a.edge for a in self.atoms if a.edge is not None)

    @property
    def timed_edges(self) -> tuple[str, ...]:
        """The edge variables bound to events (binary atoms), which have a time; a table's
        edge variable (``account(a) as x``) binds a vertex's attributes, which have none."""
        return tuple(a.edge for a in self.atoms if a.edge is not None and not a.is_table)

    @property
    def tables(self) -> frozenset[str]:
        """The relations this query reads as tables of vertex attributes."""
        return frozenset(a.relation for a in self.atoms if a.is_table)

    @property
    def has_events(self) -> bool:
        """Whether the query binds events or compares their fields."""
        return bool(self.edges or self.predicates or self.within is not None)

    @property
    def variables(self) -> tuple[str, ...]:
        """The query's variables, in head order."""
        return self.head

    @property
    def body_variables(self) -> tuple[str, ...]:
        """The variables the body binds: the head's, then (an aggregate query's group is its
        head) the others in the order the atoms first use them."""
        rest = [v for a in self.atoms for v in a.variables if v not in self.head]
        return self.head + tuple(dict.fromkeys(rest))

    def body(self) -> Query:
        """The query the engine evaluates: an aggregate query's body, with every variable it
        binds in the head (:attr:`body_variables`) and no aggregates; any other query itself."""
        if not self.aggregates:
            return self
        return replace(self, head=self.body_variables, aggregates=(), over=None)

    @property
    def relations(self) -> dict[str, int]:
        """Relation name -> arity, for every relation the query uses."""
        return {atom.relation: len(atom.variables) for atom in self.atoms}

    def __str__(self) -> str:
        body = [str(a) for a in self.atoms] + [str(f) for f in self.filters]
        body += [str(p) for p in self.predicates]
        if self.within is not None:
            body.append(f"within {format_duration(self.within)}")
        if self.distinct:
            body.append("distinct")
        body += [str(a) for a in self.aggregates]
        if self.over is not None:
            body[-1] += f" over {format_duration(self.over)}"
        return f"{self.name}({', '.join(self.head)}) := {', '.join(body)}."
