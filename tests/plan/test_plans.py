"""Plans: golden files of ``explain`` output, and the structural rules every plan obeys."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from core.errors import PlanError
from monitor.plan.cut import Cut, cut_of, projections
from monitor.plan.events import event_relations, rewrite
from monitor.plan.plan import DeltaQuery
from monitor.plan.planner import attribute_order, delta_queries, static_plan
from monitor.query.ast import Atom, Query
from monitor.query.builtins import BUILTIN_QUERIES, builtin
from monitor.query.load import load_queries
from monitor.query.parser import parse_queries

GOLDEN = Path(__file__).parent / "golden"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

QUERIES: dict[str, Query] = {name: builtin(name) for name in BUILTIN_QUERIES}
QUERIES.update({q.name: q for q in load_queries(str(EXAMPLES / "fraud.q"))})
QUERIES.update(
    {
        q.name: q
        for q in parse_queries(
            """
            sym(a, b, c) := e(a, b), e(b, c), e(a, c), a < b, b < c.
            loops(a, b) := e(a, a), f(a, b), e(b, a), distinct.
            big_ring(a, b, c) :=
                transfer(a, b) as t1, transfer(b, c) as t2, transfer(c, a) as t3,
                t1.amount >= 1000, t2.amount >= 1000, t3.amount >= 1000,
                t2.amount <= t1.amount, t3.amount <= t2.amount,
                t1.channel != "cash",
                distinct.
            """
        )
    }
)
EVENTS = event_relations(tuple(QUERIES.values()))


def explain(query: Query) -> str:
    """The plans of ``query`` over the index relations (events rewritten, see plan/events.py)."""
    internal = rewrite(query, EVENTS).internal
    plans = [p.describe() for p in delta_queries(internal)] + [static_plan(internal).describe()]
    return f"# {query}\n" + "\n".join(plans) + "\n"


def test_the_edge_variables_are_a_bindings_identity_where_every_vertex_is_an_events_end() -> None:
    """An event determines its ends: a binding whose every vertex is an end of one of its
    events is determined by its events (consolidation may compare those alone); a vertex bound
    by a plain relation only, or an atom without ``as``, is not."""
    (chain, mixed, plain, none) = parse_queries(
        """
        chain(a, c) := transfer(a, b) as t1, transfer(b, c) as t2, count(distinct b) >= 2.
        mixed(a, c) := transfer(a, b) as t, knows(b, c), count(*) >= 1.
        plain(a, c) := transfer(a, b) as t, transfer(b, c), count(*) >= 1.
        none(a, b) := knows(a, b), count(*) >= 1.
        """
    )
    events = {"transfer"}
    assert rewrite(chain, events).internal.head == ("a", "c", "b", "t1", "t2")
    assert rewrite(chain, events).identity() == (3, 4)
    assert rewrite(mixed, events).identity() is None
    assert rewrite(plain, events).identity() is None
    assert rewrite(none, events).identity() is None


def test_an_event_atom_reads_its_selection_and_expands_its_events_last() -> None:
    """Selections move into the relation the atom reads; join filters run at the stage that
    binds their second edge variable; distinct compares edge variables of one relation."""
    internal = rewrite(QUERIES["big_ring"], EVENTS).internal
    assert [a.relation for a in internal.atoms[:2]] == [
        "transfer{amount >= 1000, channel != 'cash'}",
        "transfer{amount >= 1000, channel != 'cash'}#events",
    ]
    assert internal.atoms[1].variables == ("a", "b", "t1")
    assert [str(p) for p in internal.predicates] == [
        "t2.amount <= t1.amount",
        "t3.amount <= t2.amount",
    ]
    for plan in delta_queries(internal):
        for stage in plan.stages:
            for join in stage.fields:
                bound = max(join.left, join.right)
                assert plan.order[bound] == stage.variable, plan.describe()


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_explain_matches_golden_file(name: str) -> None:
    path = GOLDEN / f"{name}.txt"
    text = explain(QUERIES[name])
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"no golden file {path}; run with UPDATE_GOLDEN=1 to create it"
    assert text == path.read_text()


def test_cut_of_reads_new_before_the_seed_and_old_after() -> None:
    assert [cut_of(i, 2) for i in range(5)] == [Cut.NEW, Cut.NEW, Cut.OLD, Cut.OLD, Cut.OLD]
    assert {cut_of(i, None) for i in range(5)} == {Cut.NEW}


def atoms_used(plan: DeltaQuery) -> list[int]:
    used = [plan.seed.atom] + [c.atom for c in plan.checks]
    for stage in plan.stages:
        used += [e.atom for e in stage.extenders] + [c.atom for c in stage.checks]
    return used


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_every_plan_uses_each_atom_once_with_its_cut(name: str) -> None:
    """Every atom but the projections seeds one plan; a plan reads every atom once (but the
    seed's own projection) with the cut of :func:`cut_of`."""
    query = rewrite(QUERIES[name], EVENTS).internal
    projected = projections(query)
    seeds = [i for i in range(len(query.atoms)) if i not in projected]
    for seed, plan in zip(seeds, delta_queries(query), strict=True):
        assert plan.seed.atom == seed and plan.seed.delta
        own = {i for i, events in projected.items() if events == seed}
        assert sorted(atoms_used(plan)) == sorted(set(range(len(query.atoms))) - own)
        assert plan.order[: len(set(query.atoms[seed].variables))] == tuple(
            dict.fromkeys(query.atoms[seed].variables)
        )
        for stage in plan.stages:
            assert stage.extenders, f"stage {stage.variable} has nothing to propose"
            for e in stage.extenders:
                assert e.cut is cut_of(e.atom, seed, projected.get(e.atom))
                assert all(k < plan.order.index(stage.variable) for k in e.key)
            for c in stage.checks:
                assert c.cut is cut_of(c.atom, seed, projected.get(c.atom))
        assert sorted(plan.order) == sorted(query.head)
        assert [plan.order[c] for c in plan.output] == list(query.head)


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_guards_are_later_extenders_whose_key_the_seed_binds(name: str) -> None:
    """A guard repeats, on the seed prefixes, an extender of a stage after the first: the same
    atom, key and cut."""
    query = rewrite(QUERIES[name], EVENTS).internal
    for plan in (*delta_queries(query), static_plan(query)):
        later = {e for stage in plan.stages[1:] for e in stage.extenders}
        for guard in plan.guards:
            assert guard in later, plan.describe()
            assert guard.arity >= 3 and max(guard.key) < plan.seed.width


def test_a_changed_pair_is_guarded_by_its_events_before_the_epoch() -> None:
    """A set-semantics pair atom seeds its own delta query, which reads the seed pair's
    events under OLD where they come after it: a pair that appears had none, so it seeds
    nothing and is dropped before the first stage extends it."""
    query = parse_queries(
        "q(a, b, c) := transfer(a, b), transfer(a, b) as t, transfer(b, c), transfer(c, a)."
    )[0]
    internal = rewrite(query, {"transfer"}).internal
    first = delta_queries(internal)[0]
    assert first.seed.atom == 0
    assert [(g.relation, g.cut) for g in first.guards] == [("transfer#events", Cut.OLD)]
    events = next(p for p in delta_queries(internal) if p.seed.relation == "transfer#events")
    assert not events.guards  # seeded by the events themselves


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_filters_are_placed_at_the_first_stage_binding_both_variables(name: str) -> None:
    query = rewrite(QUERIES[name], EVENTS).internal
    for plan in (*delta_queries(query), static_plan(query)):
        width = plan.seed.width
        for c in plan.comparisons:
            assert max(c.left, c.right) < width
        for i, stage in enumerate(plan.stages):
            column = width + i
            for c in stage.comparisons:
                assert max(c.left, c.right) == column


def test_order_prefers_the_most_constrained_variable() -> None:
    (query,) = parse_queries("q(a, b, c, d) := e(a, b), e(b, d), e(a, c), e(b, c).")
    # After a, b: c is joined to both bound variables, d to one.
    assert attribute_order(query, 0) == ("a", "b", "c", "d")


def test_rule_marks_new_old_and_delta_atoms() -> None:
    plans = delta_queries(builtin("triangle"))
    assert plans[1].rule == "dtriangle/de#2 := e'(a1, a2), de(a1, a3), e(a2, a3)"


def test_ternary_atoms_are_keyed_by_their_two_other_positions() -> None:
    (query,) = parse_queries("q(a, b, c) := e(a, b), r(a, c, b).")
    plan = delta_queries(query)[0]
    (extender,) = plan.stages[0].extenders
    assert (extender.position, extender.key) == (1, (0, 1))


def test_a_variable_unreachable_from_the_seed_is_a_plan_error() -> None:
    query = Query("q", ("a", "b", "c"), (Atom("e", ("a", "b")), Atom("e", ("c", "c"))))
    with pytest.raises(PlanError, match="c is not connected"):
        delta_queries(query)


def test_projections_read_their_events_cut_and_seed_nothing() -> None:
    """``R{S}(a, b)`` beside ``R{S}#events(a, b, t)`` is the pairs of those events at every
    version: it reads the events atom's cut, seeds no delta query, and the events atom's own
    delta query leaves it out. A set-semantics atom (no ``as``) keeps its delta query."""
    internal = rewrite(QUERIES["big_ring"], EVENTS).internal
    assert projections(internal) == {0: 1, 2: 3, 4: 5}
    plans = delta_queries(internal)
    assert [p.seed.atom for p in plans] == [1, 3, 5]
    for plan in plans:
        own = plan.seed.atom - 1
        reads = {e.atom: e.cut for s in plan.stages for e in s.extenders}
        reads.update({c.atom: c.cut for c in plan.checks})
        reads.update({c.atom: c.cut for s in plan.stages for c in s.checks})
        assert own not in reads, plan.describe()
        for pairs, events in projections(internal).items():
            if pairs in reads and events in reads:
                assert reads[pairs] == reads[events], plan.describe()
    mixed = parse_queries(
        "q(a, b, c) := transfer(a, b) as t, transfer(b, c), transfer(c, a) as u."
    )[0]
    internal = rewrite(mixed, EVENTS).internal
    assert [a.relation for a in internal.atoms] == [
        "transfer",
        "transfer#events",
        "transfer",
        "transfer",
        "transfer#events",
    ]
    assert projections(internal) == {0: 1, 3: 4}
    assert [p.seed.atom for p in delta_queries(internal)] == [1, 2, 4]
