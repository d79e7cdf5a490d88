"""From a :class:`~monitor.query.ast.Query` to its plans.

``delta_queries(q)`` builds one :class:`~monitor.plan.plan.DeltaQuery` per atom (the paper's
``dQ_i``); ``static_plan(q)`` one plan that enumerates all current matches (BiGJoin). Both use
:func:`attribute_order` and :func:`build`, so the two evaluations share every stage rule; cuts come
from :func:`~monitor.plan.cut.cut_of` only.

Where a gap bounds an edge variable's time, a stage binds it by a range step
(:mod:`monitor.plan.range_steps`); projection atoms are :func:`~monitor.plan.cut.projections`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import lru_cache
from itertools import combinations

from core.errors import PlanError
from core.fields import base_relation, time_order_side
from monitor.plan.alternatives import alternatives
from monitor.plan.cut import Cut, cut_of, projections
from monitor.plan.implied import without_implied
from monitor.plan.plan import (
    Check,
    Comparison,
    DeltaQuery,
    EndpointExtender,
    Extender,
    FieldFilter,
    Narrowing,
    RangeExtender,
    Seed,
    Stage,
)
from monitor.plan.range_steps import RangeStep, held_by_range, range_step, range_steps
from monitor.query.ast import Atom, FieldRef, Query


@lru_cache(maxsize=256)
def delta_queries(query: Query) -> tuple[DeltaQuery, ...]:
    """One delta query per atom of ``query`` that is not a projection (:mod:`monitor.plan.cut`),
    in atom order; two where the atom's insertions and deletions take range steps in opposite
    directions of time (:func:`range_step`): each seeded by its own sign of the changes. Each
    with its alternatives (:mod:`monitor.plan.alternatives`). Kept per query: a service plans
    its queries when it checks them and again when it evaluates them (a six-hop ring's plans
    and their alternatives take 0.1 s)."""
    projected = projections(query)
    plans: list[DeltaQuery] = []
    for i in range(len(query.atoms)):
        if i in projected:
            continue
        inserted = build(query, i, delta=True)
        deleted = build(query, i, delta=True, forward=False)
        signs = [0] if inserted.order == deleted.order else [1, -1]
        for sign in signs:
            forward = sign >= 0

            def replan(begin: tuple[str, ...], i: int = i, sign: int = sign) -> DeltaQuery:
                return build(query, i, delta=True, sign=sign, begin=begin)

            plan = inserted if sign == 0 else build(query, i, delta=True, sign=sign)
            plans.append(alternatives(query, plan, replan, forward))
    return tuple(plans)


def static_plan(query: Query) -> DeltaQuery:
    """The plan that enumerates every current match, seeded by the first binary atom."""
    seed = next((i for i, a in enumerate(query.atoms) if len(a.variables) == 2), 0)
    return build(query, seed, delta=False)


#: The relation of :func:`given_plan`'s seed: tuples the caller gives, never the index's.
GIVEN = "#given"


def given_plan(query: Query, variables: tuple[str, ...]) -> DeltaQuery:
    """The static plan of ``query`` seeded by given tuples of its ``variables`` (an atom of
    relation :data:`GIVEN` first): only the matches that extend one of them. An aggregate's
    group rows find their bindings so: ``scatter_gather``'s groups ``(a, c)`` bind ``b`` as
    ``a``'s successors among ``c``'s predecessors, not every chain from every ``a``."""
    seeded = replace(query, atoms=(Atom(GIVEN, variables), *query.atoms))
    return build(seeded, 0, delta=False)


def attribute_order(
    query: Query, seed: int, forward: bool = True, begin: Sequence[str] = ()
) -> tuple[str, ...]:
    """The seed atom's variables, then, greedily, the variable most constrained by bound ones.

    A variable can come next when some atom holds it and otherwise only bound variables; among
    those, the one with the most such atoms wins, then the edge variable with the most join
    filters against bound ones (they prune its stage: ``t3.amount <= t2.amount`` with ``t3``
    bound puts ``t2`` before ``t1``), then head order. A :func:`range_step`, when one is
    possible, comes first: its edge variable, then the far end of its event (``forward``:
    which direction of time :func:`range_step` prefers). ``begin``: the order's first
    variables, given (an alternative's, :mod:`monitor.plan.alternatives`), the seed's first.
    """
    order = list(begin) or list(dict.fromkeys(query.atoms[seed].variables))
    while len(order) < len(query.head):
        step = range_step(query, order, forward)
        if step is not None:
            order += [step.edge, step.far]
            continue
        bound = set(order)
        best: tuple[int, int, int, str] | None = None
        for rank, var in enumerate(query.head):
            if var in bound:
                continue
            links = [
                a
                for a in query.atoms
                if var in a.variables
                and _binds(a, var, bound)
                and time_order_side(a.relation) is None
            ]
            connected = any(set(a.variables) - {var} for a in links)
            if not connected:
                continue
            score = (-len(links), -_joins(query, var, bound), rank, var)
            if best is None or score < best:
                best = score
        if best is None:
            missing = [v for v in query.head if v not in bound]
            raise PlanError(
                f"query {query.name!r}: variable {missing[0]} is not connected to the seed atom "
                f"{query.atoms[seed]} (bound so far: {', '.join(order)}); a variable is bound "
                f"through an atom whose other variables are all bound already, so an atom of "
                f"arity 3 or more needs all but one of its variables bound by other atoms first"
            )
        order.append(best[-1])
    return tuple(order)


def build(
    query: Query,
    seed: int,
    *,
    delta: bool,
    forward: bool | None = None,
    sign: int = 0,
    begin: Sequence[str] = (),
) -> DeltaQuery:
    """The plan of ``query`` seeded by atom ``seed`` (its changes if ``delta``, else its tuples;
    of the changes, only insertions with ``sign`` 1, only deletions with -1). Range steps prefer
    ranges forward in time (``forward``; default: unless seeded by deletions only). ``begin``:
    the first variables of its order (:func:`attribute_order`)."""
    forward = sign >= 0 if forward is None else forward
    order = attribute_order(query, seed, forward, begin)
    column = {var: i for i, var in enumerate(order)}
    seed_cut = seed if delta else None
    seed_atom = query.atoms[seed]
    projected = projections(query)
    # Time-ordered atoms are access paths, never checks: used from the start (a range step
    # reads one).
    used = {seed} | {i for i, a in enumerate(query.atoms) if time_order_side(a.relation)}
    if delta:  # the seed's own pairs hold wherever its changed events do
        used.update(i for i, events in projected.items() if events == seed)

    def cut(i: int) -> Cut:
        return cut_of(i, seed_cut, projected.get(i))

    comparisons = _comparisons(query, column)
    placed: set[Comparison] = set()
    joins = _field_filters(query, column)
    joined: set[FieldFilter] = set()

    def comparisons_until(width: int) -> tuple[Comparison, ...]:
        ready = tuple(c for c in comparisons if max(c.left, c.right) < width and c not in placed)
        placed.update(ready)
        return ready

    def joins_until(width: int) -> tuple[FieldFilter, ...]:
        ready = tuple(f for f in joins if max(f.left, f.right) < width and f not in joined)
        joined.update(ready)
        return ready

    def checks_until(width: int) -> tuple[Check, ...]:
        ready = []
        for i, atom in enumerate(query.atoms):
            if i not in used and all(column[v] < width for v in atom.variables):
                ready.append(
                    Check(
                        i,
                        atom.relation,
                        tuple(column[v] for v in atom.variables),
                        cut(i),
                    )
                )
                used.add(i)
        return tuple(ready)

    width = len(set(seed_atom.variables))
    seed_columns = tuple(column[v] for v in seed_atom.variables)
    seed_plan = Seed(seed, seed_atom.relation, seed_columns, delta, sign)
    first_checks = checks_until(width)
    first_comparisons = comparisons_until(width)
    first_joins = joins_until(width)
    first_guards = _guards(query, order, width, used, column, cut)
    stages = []
    pending: RangeStep | None = None  # the range step whose far vertex comes next
    for p in range(width, len(order)):
        var = order[p]
        extenders: list[Extender] = []
        # (the step of the order's next variable: range_step's, or an alternative's other)
        steps = [] if pending is not None else range_steps(query, order[:p])
        step = next((s for s in steps if s.edge == var), None)
        if pending is not None and var == pending.far:
            events = pending.events
            position = 1 if pending.side == "by_src" else 0
            relation = base_relation(query.atoms[events].relation)
            key = (column[pending.edge],)
            extenders.append(EndpointExtender(events, relation, 2, position, key, cut(events)))
            pending = None
        elif step is not None and step.edge == var:
            used.update(step.implied)
            relation = query.atoms[step.atom].relation
            key = (column[step.vertex],)
            anchor = column[step.anchor]
            ends = {
                f: end
                for f in joins
                if f not in joined
                and (end := held_by_range(f, step, column[var], anchor)) is not None
            }
            held = tuple(ends)
            joined.update(held)
            extenders.append(
                RangeExtender(
                    step.atom,
                    relation,
                    3,
                    2,
                    key,
                    cut(step.atom),
                    anchor,
                    step.anchor_relation,
                    step.low,
                    step.high,
                    held,
                    tuple(Narrowing(column[u], r, lo, hi) for u, r, lo, hi in step.narrowing),
                    "low" in ends.values(),
                    "high" in ends.values(),
                )
            )
            pending = step
        for i, atom in enumerate(query.atoms):
            if i in used or var not in atom.variables:
                continue
            others = [v for v in atom.variables if v != var]
            if (
                not all(column[v] < column[var] for v in others)
                or len(atom.variables) - len(others) != 1
            ):
                continue
            extenders.append(_extender(i, atom, var, column, cut(i)))
            used.add(i)
        stages.append(
            Stage(
                var,
                tuple(extenders),
                checks_until(column[var] + 1),
                comparisons_until(column[var] + 1),
                joins_until(column[var] + 1),
            )
        )
    rule = _rule(query, seed, delta, cut)
    return DeltaQuery(
        query.name,
        rule,
        order,
        seed_plan,
        first_checks,
        first_comparisons,
        without_implied(first_joins, stages, width),
        tuple(column[v] for v in query.head),
        first_joins,
        first_guards,
    )


def _joins(query: Query, var: str, bound: set[str]) -> int:
    """How many join filters tie edge variable ``var`` to bound edge variables."""
    return sum(
        1
        for p in query.predicates
        if isinstance(p.right, FieldRef)
        and {p.left.edge, p.right.edge} - {var} <= bound
        and var in (p.left.edge, p.right.edge)
        and p.left.edge != p.right.edge
    )


def _field_filters(query: Query, column: dict[str, int]) -> list[FieldFilter]:
    """The query's join filters (predicates across edge variables) over prefix columns."""
    relation_of = {
        a.variables[-1]: base_relation(a.relation)
        for a in query.atoms
        if a.relation.endswith("#events")
    }
    out = []
    for p in query.predicates:
        left, right = p.left, p.right
        if not isinstance(right, FieldRef) or right.edge == left.edge:
            raise PlanError(f"query {query.name!r}: {p} is a selection, not a join filter")
        out.append(
            FieldFilter(
                column[left.edge],
                relation_of[left.edge],
                left.name,
                p.op,
                column[right.edge],
                relation_of[right.edge],
                right.name,
                p.factor,
                p.offset,
            )
        )
    return out


def _guards(
    query: Query,
    order: tuple[str, ...],
    width: int,
    used: set[int],
    column: dict[str, int],
    cut: Callable[[int], Cut],
) -> tuple[Extender, ...]:
    """The seed's guards: atoms of arity >= 3 whose variables but one the seed binds, and whose
    free variable a later stage than the first binds (the first stage counts it anyway)."""
    out = []
    for i, atom in enumerate(query.atoms):
        free = [v for v in atom.variables if column[v] >= width]
        if i in used or len(atom.variables) < 3 or len(free) != 1 or free[0] == order[width]:
            continue
        if atom.variables.count(free[0]) == 1:
            out.append(_extender(i, atom, free[0], column, cut(i)))
    return tuple(out)


def _binds(atom: Atom, var: str, bound: set[str]) -> bool:
    """Whether ``atom`` holds ``var`` once and otherwise only ``bound`` variables."""
    return atom.variables.count(var) == 1 and all(v in bound for v in atom.variables if v != var)


def _extender(index: int, atom: Atom, var: str, column: dict[str, int], cut: Cut) -> Extender:
    position = atom.variables.index(var)
    key = tuple(column[v] for p, v in enumerate(atom.variables) if p != position)
    return Extender(index, atom.relation, len(atom.variables), position, key, cut)


def _comparisons(query: Query, column: dict[str, int]) -> list[Comparison]:
    found: dict[tuple[int, str, int], Comparison] = {}
    for f in query.filters:
        c = Comparison(column[f.left], f.op, column[f.right])
        found.setdefault((c.left, c.op, c.right), c)
    if query.distinct:
        for x, y in combinations(query.head, 2):
            lo, hi = sorted((column[x], column[y]))
            found.setdefault((lo, "!=", hi), Comparison(lo, "!=", hi))
    return list(found.values())


def _rule(query: Query, seed: int, delta: bool, cut: Callable[[int], Cut]) -> str:
    """``dQ/de#2 := e'(a, b), de(b, c), e(a, c)``: primes read NEW, ``d`` is the seed's change
    (the seed's projection, which the delta query leaves out, is not written)."""
    own = {i for i, events in projections(query).items() if events == seed} if delta else set()
    parts = []
    for i, atom in enumerate(query.atoms):
        args = ", ".join(atom.variables)
        if i in own or time_order_side(atom.relation) is not None:
            continue
        if delta and i == seed:
            parts.append(f"d{atom.relation}({args})")
        elif not delta or cut(i) is Cut.NEW:
            parts.append(f"{atom.relation}'({args})")
        else:
            parts.append(f"{atom.relation}({args})")
    parts.extend(str(f) for f in query.filters)
    if query.distinct:
        parts.append("distinct")
    head = f"d{query.name}/d{query.atoms[seed].relation}#{seed + 1}" if delta else query.name
    return f"{head} := {', '.join(parts)}"
