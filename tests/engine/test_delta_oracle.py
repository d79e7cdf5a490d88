"""Delta evaluation against the brute-force oracle, on tiny random graphs and random epochs.

After every epoch the accumulated match deltas must equal the brute-force result on the current
graph; every binding's running sum stays in {0, 1}; no binding appears twice in one epoch.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from core.records import Update, UpdateBatch
from monitor.engine.delta import DeltaEvaluator
from monitor.index.graph import GraphIndex
from monitor.query.ast import Query
from monitor.query.builtins import builtin
from monitor.query.parser import parse_queries
from tests.oracle import Binding, GraphModel, accumulate, brute_force

LABELLED = parse_queries(
    """
    tri(a, b, c)      := e(a, b), e(b, c), e(a, c).
    sym(a, b, c)      := e(a, b), e(b, c), e(a, c), a < b, b < c.
    cycle3(a, b, c)   := e(a, b), e(b, c), e(c, a), distinct.
    path2(a, b, c)    := e(a, b), f(b, c), a != c.
    flagged(a, b)     := e(a, b), flag(a).
    both(a)           := flag(a), mark(a).
    loop(a, b)        := e(a, a), f(a, b).
    back(a, b)        := e(a, b), e(b, a), a <= b.
    mixed(a, b, c)    := f(a, b), e(b, c), f(c, a), flag(b), b > c.
    fan(a, b, c, d)   := e(a, b), e(a, c), e(a, d), f(b, c), distinct.
    tern(a, b, c)     := r(a, b, c), e(a, b).
    tern2(a, b, c)    := r(a, b, c), r(b, c, a), f(c, a).
    rep(a, b)         := r(a, b, a), e(b, a).
    tri3(a, b, c, d)  := r(a, b, c), r(c, d, a), e(a, c), flag(a), a < c.
    """
)
PAPER = tuple(builtin(name) for name in ("triangle", "4-clique", "diamond", "house", "5-clique"))

VERTICES = [0, 1, 2, 3, "x", "y"]


def updates(n_vertices: int) -> st.SearchStrategy[list[Update]]:
    vertex = st.sampled_from(VERTICES[:n_vertices])
    binary = st.tuples(st.sampled_from(["e", "f"]), st.tuples(vertex, vertex))
    unary = st.tuples(st.sampled_from(["flag", "mark"]), st.tuples(vertex))
    ternary = st.tuples(st.just("r"), st.tuples(vertex, vertex, vertex))
    one = st.tuples(st.one_of(binary, binary, binary, unary, ternary), st.sampled_from([1, 1, -1]))
    return st.lists(one, max_size=60).map(
        lambda items: [Update(rel, values, diff) for (rel, values), diff in items]
    )


@st.composite
def scenario(draw: st.DrawFn) -> tuple[list[Update], list[int], int]:
    n = draw(st.integers(3, 6))
    stream = draw(updates(n))
    cuts = draw(st.lists(st.integers(1, 12), max_size=20))
    budget = draw(st.sampled_from([1, 3, 16, 1 << 20]))
    return stream, cuts, budget


def epochs_of(stream: list[Update], cuts: list[int]) -> list[list[Update]]:
    out, pos = [], 0
    for size in cuts:
        if pos >= len(stream):
            break
        out.append(stream[pos : pos + size])
        pos += size
    if pos < len(stream):
        out.append(stream[pos:])
    return out


def check_against_oracle(
    queries: tuple[Query, ...], stream: list[Update], cuts: list[int], budget: int
) -> None:
    index = GraphIndex(compaction_min=4)
    for q in queries:
        for relation, arity in q.relations.items():
            index.relation(relation, arity)
    evaluator = DeltaEvaluator(queries, max_prefixes=budget)
    model = GraphModel()
    current: dict[str, dict[Binding, int]] = {q.name: {} for q in queries}
    seq = 0
    for number, epoch in enumerate(epochs_of(stream, cuts), start=1):
        staged = index.stage(UpdateBatch.from_updates(epoch, seq))
        seq += len(epoch)
        results = evaluator.evaluate(index, staged.changes)
        index.commit()
        before = {r: set(t) for r, t in model.relations.items()}
        noops = sum(0 if model.apply(u.relation, u.values, u.diff) else 1 for u in epoch)
        changed = sum(len(t ^ before.get(r, set())) for r, t in model.relations.items())
        assert staged.applied == changed
        assert staged.ignored["duplicate_insert"] + staged.ignored["absent_delete"] == noops
        assert staged.applied + sum(staged.ignored.values()) == len(epoch)
        for result in results:
            decoded = [index.dictionary.decode(c).tolist() for c in result.columns]
            rows = list(zip(*decoded, strict=True)) if decoded else []
            diffs = result.diff.tolist()
            assert len(set(rows)) == len(rows), f"epoch {number}: a binding twice"
            assert set(diffs) <= {-1, 1}
            accumulate(current[result.query], zip(rows, diffs, strict=True))
        for q in queries:
            expected = brute_force(q, model)
            got = current[q.name]
            assert set(got.values()) <= {1}, f"{q.name}: running sums {got}"
            assert set(got) == expected, (
                f"{q.name} after epoch {number}: missing {expected - set(got)}, "
                f"extra {set(got) - expected}"
            )


@settings(max_examples=150)
@given(scenario())
def test_labelled_queries_match_oracle(case: tuple[list[Update], list[int], int]) -> None:
    check_against_oracle(LABELLED, *case)


@settings(max_examples=60)
@given(scenario())
def test_paper_queries_match_oracle(case: tuple[list[Update], list[int], int]) -> None:
    stream = [u for u in case[0] if u.relation == "e"]
    check_against_oracle(PAPER, stream, case[1], case[2])
