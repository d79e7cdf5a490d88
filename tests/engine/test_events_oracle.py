"""Events against a brute-force oracle: edge variables, selections, join filters, set atoms.

Tiny random multigraphs (3-5 vertices, parallel events with small random fields), inserts and
deletes by id (with duplicates and absent deletes), random epoch boundaries. After every epoch
the accumulated match deltas must equal a brute-force evaluation over the events present then:
each binding (its vertices and its events) at most once per epoch, every running sum in {0, 1}.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from core.columns import python_values
from core.fields import to_column
from core.records import EventUpdates, RelationUpdates, UpdateBatch
from monitor.query.ast import Atom, FieldRef, Filter, Literal, Predicate, Query
from monitor.service.epochs import EpochProcessor
from monitor.service.settings import Settings

T, E, F = "transfer", "e", "flagged"


def ref(edge: str, name: str) -> FieldRef:
    return FieldRef(edge, name)


QUERIES = (
    # a ring of three transfers, amounts >= 1, non-increasing along the ring, distinct
    Query(
        "big_ring",
        ("a", "b", "c"),
        (
            Atom(T, ("a", "b"), edge="t1"),
            Atom(T, ("b", "c"), edge="t2"),
            Atom(T, ("c", "a"), edge="t3"),
        ),
        distinct=True,
        predicates=(
            Predicate(ref("t1", "amount"), ">=", Literal(1)),
            Predicate(ref("t2", "amount"), ">=", Literal(1)),
            Predicate(ref("t3", "amount"), ">=", Literal(1)),
            Predicate(ref("t2", "amount"), "<=", ref("t1", "amount")),
            Predicate(ref("t3", "amount"), "<=", ref("t2", "amount")),
            Predicate(ref("t1", "channel"), "!=", Literal("cash")),
        ),
    ),
    # two transfers a -> b -> c, the second on the same channel, with a set atom and a label
    Query(
        "relay",
        ("a", "b", "c"),
        (
            Atom(T, ("a", "b"), edge="t1"),
            Atom(T, ("b", "c"), edge="t2"),
            Atom(E, ("a", "c")),
            Atom(F, ("b",)),
        ),
        predicates=(Predicate(ref("t2", "channel"), "=", ref("t1", "channel")),),
    ),
    # set semantics over the event relation, plus a parallel-edge pair of events
    Query(
        "twice",
        ("a", "b"),
        (Atom(T, ("a", "b"), edge="x"), Atom(T, ("a", "b"), edge="y"), Atom(T, ("b", "a"))),
        filters=(Filter("a", "<", "b"),),
        predicates=(Predicate(ref("x", "amount"), "<", ref("y", "amount")),),
    ),
    # a selected event one way and any event back: selections and pair maintenance alone
    Query(
        "mutual",
        ("a", "b"),
        (Atom(T, ("a", "b"), edge="t"), Atom(T, ("b", "a"))),
        predicates=(Predicate(ref("t", "amount"), ">=", Literal(2)),),
    ),
)

VERTICES = st.integers(0, 2)
CHANNELS = st.sampled_from(["cash", "wire", "card"])
# An operation: insert an event (id, src, dst, amount or None, channel or None), delete an id,
# or insert/delete a tuple of e or flagged.
OPS = st.one_of(
    st.tuples(
        st.just("insert"),
        st.integers(0, 5),
        VERTICES,
        VERTICES,
        st.one_of(st.none(), st.integers(0, 3)),
        st.one_of(st.none(), CHANNELS),
    ),
    st.tuples(st.just("delete"), st.integers(0, 5)),
    st.tuples(st.sampled_from(["e+", "e-"]), VERTICES, VERTICES),
    st.tuples(st.sampled_from(["f+", "f-"]), VERTICES),
)


def batch(ops: list[tuple], first_seq: int) -> UpdateBatch:  # type: ignore[type-arg]
    ids, diff, seq, src, dst, fields = [], [], [], [], [], []
    tuples: dict[str, tuple[list[list[int]], list[int], list[int]]] = {}
    for i, op in enumerate(ops):
        s = first_seq + i
        if op[0] in ("insert", "delete"):
            ids.append(f"tx-{op[1]}")
            diff.append(1 if op[0] == "insert" else -1)
            seq.append(s)
            src.append(op[2] if op[0] == "insert" else 0)
            dst.append(op[3] if op[0] == "insert" else 0)
            row = {}
            if op[0] == "insert" and op[4] is not None:
                row["amount"] = op[4]
            if op[0] == "insert" and op[5] is not None:
                row["channel"] = op[5]
            fields.append(row)
        else:
            name = E if op[0][0] == "e" else F
            cols, d, sq = tuples.setdefault(name, ([], [], []))
            cols.append(list(op[1:]))
            d.append(1 if op[0][1] == "+" else -1)
            sq.append(s)
    parts = {
        name: RelationUpdates(
            [np.array([c[k] for c in cols], np.int64) for k in range(len(cols[0]))],
            np.array(d, np.int8),
            np.array(sq, np.int64),
        )
        for name, (cols, d, sq) in tuples.items()
    }
    events = {}
    if ids:
        events[T] = EventUpdates(
            np.array(ids, dtype=object),
            np.array(diff, np.int8),
            np.array(seq, np.int64),
            np.array(src, np.int64),
            np.array(dst, np.int64),
            {
                "amount": to_column("number", [f.get("amount") for f in fields]),
                "channel": to_column("string", [f.get("channel") for f in fields]),
            },
        )
    return UpdateBatch(parts, first_seq, len(ops), None, events)


class Model:
    """The oracle's state: events by id, tuples by relation; updates applied in order."""

    def __init__(self) -> None:
        self.events: dict[str, tuple[int, int, dict[str, object]]] = {}
        self.tuples: dict[str, set[tuple[int, ...]]] = {E: set(), F: set()}

    def apply(self, op: tuple) -> None:  # type: ignore[type-arg]
        if op[0] == "insert":
            key = f"tx-{op[1]}"
            if key not in self.events:
                row: dict[str, object] = {}
                if op[4] is not None:
                    row["amount"] = op[4]
                if op[5] is not None:
                    row["channel"] = op[5]
                self.events[key] = (op[2], op[3], row)
        elif op[0] == "delete":
            self.events.pop(f"tx-{op[1]}", None)
        else:
            name = E if op[0][0] == "e" else F
            (self.tuples[name].add if op[0][1] == "+" else self.tuples[name].discard)(op[1:])

    def value(self, event: str, name: str) -> object:
        return self.events[event][2].get(name)


def event_records(
    n: int, seed: int, anonymous: str | None = None, ids: int = 40, accounts: int = 6
) -> tuple[list[dict[str, object]], Model]:
    """JSON records of transfers by id (``ids`` of them, over ``accounts`` accounts), tuples of
    ``e`` and labels; and the oracle after them.
    With ``anonymous`` (the input's name), every 50th insert or so has no id: its identity is
    its position, ``anonymous:line``, and no delete can name it."""
    rng = np.random.default_rng(seed)
    model = Model()
    records = []
    for position in range(n):
        roll = rng.random()
        if roll < 0.6:
            tx = int(rng.integers(0, ids))
            op: tuple[Any, ...] = (
                "insert",
                tx,
                int(rng.integers(0, accounts)),
                int(rng.integers(0, accounts)),
                None if rng.random() < 0.1 else int(rng.integers(0, 4)),
                None if rng.random() < 0.1 else str(rng.choice(["cash", "wire", "card"])),
            )
            record: dict[str, object] = {"relation": "transfer", "src": op[2], "dst": op[3]}
            if anonymous is not None and rng.random() < 0.02:
                op = ("insert", f"{anonymous}:{position + 1}", *op[2:])
            else:
                record["id"] = f"tx-{tx}"
            if op[4] is not None:
                record["amount"] = op[4]
            if op[5] is not None:
                record["channel"] = op[5]
        elif roll < 0.85:
            op = ("delete", int(rng.integers(0, ids)))
            record = {"op": "delete", "relation": "transfer", "id": f"tx-{op[1]}"}
        elif roll < 0.95:
            sign = "+" if rng.random() < 0.6 else "-"
            op = ("e" + sign, int(rng.integers(0, accounts)), int(rng.integers(0, accounts)))
            record = {"op": "insert" if sign == "+" else "delete", "src": op[1], "dst": op[2]}
        else:
            sign = "+" if rng.random() < 0.7 else "-"
            op = ("f" + sign, int(rng.integers(0, accounts)))
            record = {"op": "insert" if sign == "+" else "delete", "relation": "flagged"}
            record["tuple"] = [op[1]]
        if isinstance(op[1], str):  # positional identity
            model.events.setdefault(op[1], (op[2], op[3], _fields(op)))
        else:
            model.apply(op)
        records.append(record)
    return records, model


def _fields(op: tuple[Any, ...]) -> dict[str, object]:
    return {k: v for k, v in (("amount", op[4]), ("channel", op[5])) if v is not None}


def holds(model: Model, p: Predicate, binding: dict[str, str]) -> bool:
    left = model.value(binding[p.left.edge], p.left.name)
    if isinstance(p.right, Literal):
        right: object = p.right.value
    else:
        right = model.value(binding[p.right.edge], p.right.name)
        if isinstance(right, int | float) and not isinstance(right, bool):
            right = right * p.factor + p.offset
    if _number(left) and _number(right):  # one number type, as the engine's float64
        left, right = float(left), float(right)  # type: ignore[arg-type]
    if left is None or right is None or type(left) is not type(right):
        return False
    ops = {
        "<": lambda x, y: x < y,
        "<=": lambda x, y: x <= y,
        ">": lambda x, y: x > y,
        ">=": lambda x, y: x >= y,
        "=": lambda x, y: x == y,
        "!=": lambda x, y: x != y,
    }
    return bool(ops[p.op](left, right))


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def brute_force(model: Model, query: Query) -> set[tuple[tuple[int, ...], tuple[str, ...]]]:
    found = set()
    vertices = sorted(
        {v for s, d, _ in model.events.values() for v in (s, d)}
        | {v for tuples in model.tuples.values() for t in tuples for v in t}
    )
    for values in itertools.product(vertices, repeat=len(query.head)):
        v = dict(zip(query.head, values, strict=True))
        if query.distinct and len(set(values)) < len(values):
            continue
        if any(not _filter(v[f.left], f.op, v[f.right]) for f in query.filters):
            continue
        choices: list[list[str]] = []
        ok = True
        for atom in query.atoms:
            args = tuple(v[x] for x in atom.variables)
            if atom.relation == T:
                matching = [k for k, (s, d, _) in model.events.items() if (s, d) == args]
                if not matching:
                    ok = False
                    break
                if atom.edge is not None:
                    choices.append(matching)
            elif args not in model.tuples[atom.relation]:
                ok = False
                break
        if not ok:
            continue
        for events in itertools.product(*choices):
            if query.distinct and len(set(events)) < len(events):
                continue
            binding = dict(zip(query.edges, events, strict=True))
            if not all(holds(model, p, binding) for p in query.predicates):
                continue
            if query.within is not None:
                times = [model.value(e, "ts") for e in events]
                if None in times or max(times) - min(times) > query.within:  # type: ignore[operator, type-var]
                    continue
            found.add((values, events))
    return found


def _filter(left: int, op: str, right: int) -> bool:
    return {
        "<": left < right,
        "<=": left <= right,
        ">": left > right,
        ">=": left >= right,
        "!=": left != right,
    }[op]


def deltas(out: list) -> Iterator[tuple[str, tuple[tuple[int, ...], tuple[str, ...]], int]]:  # type: ignore[type-arg]
    for q in out:
        edges = [python_values(q.edges[e]["id"]) for e in q.edges]
        for i, diff in enumerate(q.diff.tolist()):
            vertices = tuple(int(c[i]) for c in q.columns)
            yield q.query, (vertices, tuple(str(e[i]) for e in edges)), diff


@example(  # deleted and inserted again as it was, within one epoch: nothing changes outside
    ops=[
        ("insert", 0, 0, 1, 2, "wire"),
        ("insert", 1, 1, 0, 2, "wire"),
        ("delete", 0),
        ("insert", 0, 0, 1, 2, "wire"),
    ],
    cuts=[2],
)
@example(  # inserted again with another amount: the matches that hold with both stay
    ops=[
        ("insert", 0, 0, 1, 2, "wire"),
        ("insert", 1, 1, 0, 2, "wire"),
        ("delete", 0),
        ("insert", 0, 0, 1, 3, "cash"),
        ("delete", 1),
        ("insert", 1, 1, 0, 1, "wire"),
    ],
    cuts=[2],
)
@example(  # an event deleted and inserted again, elsewhere, within one epoch: a new event
    ops=[
        ("insert", 0, 0, 0, None, None),
        ("insert", 0, 0, 0, None, None),
        ("delete", 0),
        ("insert", 0, 1, 0, None, None),
        ("insert", 0, 0, 0, None, None),
        ("insert", 1, 0, 1, 2, None),
    ],
    cuts=[1],
)
@example(  # duplicates of a present id: the first insert's fields stay
    ops=[
        ("insert", 0, 0, 1, None, None),
        ("insert", 0, 0, 1, 2, None),
        ("insert", 1, 1, 0, 2, None),
    ],
    cuts=[],
)
@settings(max_examples=300, deadline=None)
@given(ops=st.lists(OPS, min_size=4, max_size=45), cuts=st.lists(st.integers(1, 45), max_size=6))
def test_events_match_the_brute_force_after_every_epoch(ops: list, cuts: list[int]) -> None:  # type: ignore[type-arg]
    check_epochs(QUERIES, Model(), batch, ops, cuts)


def check_epochs(
    queries: Sequence[Query],
    model: Model,
    make_batch: Callable[[list[Any], int], UpdateBatch],
    ops: list[Any],
    cuts: list[int],
    settings: Settings | None = None,
    static: bool = False,
) -> list[list[Any]]:
    """Run ``ops`` in epochs cut at ``cuts``; after every epoch the accumulated deltas equal
    the brute force over ``model``, each binding at most once per epoch, running sums in
    {0, 1} (and, if ``static``, so do the static counts). Returns each epoch's output rows,
    in order (query, vertices, events' columns, diff)."""
    processor = EpochProcessor(queries, settings or Settings())
    outputs = []
    current: Counter[tuple[str, tuple[tuple[int, ...], tuple[str, ...]]]] = Counter()
    bounds = sorted({0, len(ops), *(c for c in cuts if c < len(ops))})
    for lo, hi in itertools.pairwise(bounds):
        out = processor.process(make_batch(ops[lo:hi], lo))
        processor.commit()
        outputs.append([row for q in out.queries for row in rows(q)])
        seen = set()
        for name, binding, diff in deltas(out.queries):
            assert (name, binding) not in seen, f"{name} {binding} twice in one epoch"
            seen.add((name, binding))
            current[(name, binding)] += diff
            assert current[(name, binding)] in (0, 1), f"running sum of {name} {binding}"
        for op in ops[lo:hi]:
            model.apply(op)
        for query in queries:
            got = {b for (n, b), c in current.items() if n == query.name and c}
            assert got == brute_force(model, query), f"{query.name} after ops {lo}..{hi}"
        if static:
            want = {q.name: len(brute_force(model, q)) for q in queries}
            assert processor.counts() == want, f"static counts after ops {lo}..{hi}"
    return outputs


def rows(out: Any) -> list[tuple[Any, ...]]:
    """An epoch's output of one query as rows: query, vertices, per edge variable its event's
    columns, diff (in output order)."""
    edges = [{k: python_values(v) for k, v in e.items()} for e in out.edges.values()]
    return [
        (
            out.query,
            tuple(c[i] for c in out.columns),
            tuple(tuple((k, v[i]) for k, v in e.items()) for e in edges),
            int(out.diff[i]),
        )
        for i in range(len(out))
    ]


def test_the_oracle_sees_matches() -> None:
    """The generated workloads do produce matches of every query (the check is not vacuous)."""
    model = Model()
    for op in [
        ("insert", 1, 0, 1, 3, "wire"),
        ("insert", 2, 1, 2, 2, "wire"),
        ("insert", 3, 2, 0, 1, "card"),
        ("insert", 4, 0, 1, 0, "wire"),
        ("insert", 5, 1, 0, None, None),
        ("e+", 0, 2),
        ("f+", 1),
    ]:
        model.apply(op)
    assert {q.name: len(brute_force(model, q)) for q in QUERIES} == {
        "big_ring": 1,  # 0 -> 1 -> 2 -> 0 with amounts 3 >= 2 >= 1 (other starts break order)
        "relay": 2,  # 0 -> 1 by tx-1 or tx-4 (wire), then 1 -> 2 by tx-2 (wire)
        "twice": 1,  # 0 -> 1 twice (amounts 0 < 3), and 1 -> 0 back
        "mutual": 1,  # 0 -> 1 by tx-1 (amount 3), and 1 -> 0 by tx-5
    }


def test_a_string_join_filter_across_two_relations_compares_the_strings() -> None:
    """Codes of string fields come from one pool, so two relations that met the same strings
    in different orders still compare them as strings."""
    query = Query(
        "same_channel",
        ("a", "b"),
        (Atom(T, ("a", "b"), edge="t"), Atom("login", ("a", "b"), edge="u")),
        predicates=(Predicate(ref("t", "channel"), "=", ref("u", "channel")),),
    )
    processor = EpochProcessor((query,), Settings())

    def events(name: str, ids: list[str], channels: list[str]) -> EventUpdates:
        n = len(ids)
        return EventUpdates(
            np.array(ids, dtype=object),
            np.ones(n, np.int8),
            np.arange(n, dtype=np.int64),
            np.zeros(n, np.int64),
            np.ones(n, np.int64),
            {"channel": to_column("string", channels)},
        )

    out = processor.process(
        UpdateBatch(
            {},
            0,
            4,
            None,
            {
                T: events(T, ["t1", "t2"], ["wire", "card"]),
                "login": events("login", ["l1", "l2"], ["card", "app"]),
            },
        )
    )
    found = {(b[1], d) for _, b, d in deltas(out.queries)}
    assert found == {(("t2", "l1"), 1)}  # card = card; wire and app match nothing
