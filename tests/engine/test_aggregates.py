"""Aggregates kept per group from binding changes, against a brute force that recounts every
group from its live bindings after each epoch (random streams with retractions and random epoch
boundaries)."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.engine.aggregates import (
    Aggregate,
    AggregateState,
    GroupIds,
    KeyIds,
    Rows,
    Window,
)
from monitor.engine.group_values import Multiset, PairCounts

#: (group vertex a, group vertex b, distinct value, amount): one binding.
Binding = tuple[int, int, int, float]

CONDITIONS = [
    Aggregate("count", ">=", 3, "count"),
    Aggregate("count_distinct", ">=", 2, "count_distinct_v"),
    Aggregate("sum", ">", 10.0, "sum_amount"),
    Aggregate("min", ">=", 1.0, "min_amount"),
    Aggregate("max", "<", 9.0, "max_amount"),
    # (these two hold for a group without bindings, which is no group)
    Aggregate("count", "<=", 4, "count_small"),
    Aggregate("sum", "<", 25.0, "sum_small"),
]


def brute_force(
    live: Counter[Binding], conditions: list[Aggregate]
) -> dict[tuple[int, int], dict[str, float]]:
    """Per group of the live bindings, each condition's value, for the groups where all hold."""
    groups: dict[tuple[int, int], list[Binding]] = {}
    for binding, n in live.items():
        groups.setdefault(binding[:2], []).extend([binding] * n)
    held = {}
    for group, rows in groups.items():
        values = {
            "count": float(len(rows)),
            "count_distinct": float(len({r[2] for r in rows})),
            "sum": math.fsum(r[3] for r in rows),
            "min": min(r[3] for r in rows),
            "max": max(r[3] for r in rows),
        }
        named = {c.name: values[c.kind] for c in conditions}
        ops = {"<": float.__lt__, "<=": float.__le__, ">": float.__gt__, ">=": float.__ge__}
        if all(ops[c.op](named[c.name], float(c.threshold)) for c in conditions):
            held[group] = named
    return held


@st.composite
def streams(draw: st.DrawFn) -> list[list[tuple[Binding, int]]]:
    """Epochs of binding changes: inserts of new bindings (a binding may occur several times,
    as a binding of several events may), retractions of live ones only."""
    live: Counter[Binding] = Counter()
    epochs = []
    for _ in range(draw(st.integers(1, 8))):
        epoch = []
        for _ in range(draw(st.integers(0, 25))):
            if live and draw(st.booleans()):
                binding = draw(st.sampled_from(sorted(live)))
                live[binding] -= 1
                live += Counter()
                epoch.append((binding, -1))
            else:
                binding = (
                    draw(st.integers(0, 3)),
                    draw(st.integers(0, 2)),
                    draw(st.integers(0, 4)),
                    float(draw(st.integers(0, 10))),
                )
                live[binding] += 1
                epoch.append((binding, 1))
        epochs.append(epoch)
    return epochs


@settings(max_examples=300)
@given(streams(), st.lists(st.sampled_from(CONDITIONS), min_size=1, max_size=4, unique=True))
def test_the_groups_that_hold_are_the_brute_forces_after_every_epoch(
    epochs: list[list[tuple[Binding, int]]], chosen: list[Aggregate]
) -> None:
    state = AggregateState(chosen)
    ids = GroupIds(2)
    live: Counter[Binding] = Counter()
    reported: Counter[tuple[int, int]] = Counter()
    names: dict[int, tuple[int, int]] = {}
    for epoch in epochs:
        for binding, diff in epoch:
            live[binding] += diff
        live += Counter()
        if not epoch:
            continue
        rows = np.array([b for b, _ in epoch], dtype=np.float64).reshape(-1, 4)
        a, b = rows[:, 0].astype(np.int64), rows[:, 1].astype(np.int64)
        groups = ids.of([a, b])
        names.update(zip(groups.tolist(), zip(a.tolist(), b.tolist(), strict=True), strict=True))
        arguments = {
            "count_distinct_v": rows[:, 2].astype(np.int64),
            "sum_amount": rows[:, 3],
            "sum_small": rows[:, 3],
            "min_amount": rows[:, 3],
            "max_amount": rows[:, 3],
        }
        diffs = np.array([d for _, d in epoch], dtype=np.int64)
        changes = state.apply(groups, arguments, diffs)
        expected = brute_force(live, chosen)
        for g, d in zip(changes.groups.tolist(), changes.diffs.tolist(), strict=True):
            reported[names[g]] += d
            assert reported[names[g]] in (0, 1), "a group reported twice in a row"
            if d > 0:  # a group that starts to hold carries its values
                i = changes.groups.tolist().index(g)
                got = {k: float(v[i]) for k, v in changes.values.items()}
                assert got == pytest.approx(expected[names[g]])
        assert {g for g, n in reported.items() if n} == set(expected)


def test_group_ids_are_dense_and_stable_over_batches() -> None:
    ids = GroupIds(3)
    first = ids.of([np.array([5, 5, 7]), np.array([1, 1, 1]), np.array([2, 3, 2])])
    assert first.tolist() == [0, 1, 2]
    again = ids.of([np.array([7, 9, 5]), np.array([1, 1, 1]), np.array([2, 2, 2])])
    assert again.tolist() == [2, 3, 0]
    assert GroupIds(1).of([np.array([4, 2])]).tolist() == [4, 2]  # one column: its own ids


@pytest.mark.parametrize("n", [3, 200])  # (below and above the size the hashing starts at)
def test_key_ids_are_dense_stable_and_renumbered_in_order(n: int) -> None:
    keys = KeyIds()
    rng = np.random.default_rng(n)
    first = rng.integers(-(1 << 62), 1 << 62, n)
    ids = keys.of(np.concatenate([first, first[::-1]]))
    assert sorted(set(ids[:n].tolist())) == list(range(n)), "dense, one id per key"
    assert ids[n:].tolist() == ids[:n][::-1].tolist(), "the same key, the same id"
    more = keys.of(np.concatenate([first[:2], [7, 7]]))
    assert more.tolist() == [*ids[:2].tolist(), n, n], "a new key takes the next id"
    live = np.ones(n + 1, np.bool_)
    live[ids[0]] = False
    keys.keep(live)
    again = keys.of(np.concatenate([first[1:], [7]]))
    expected = np.cumsum(live) - 1
    assert again.tolist() == expected[np.concatenate([ids[1:n], [n]])].tolist()
    assert keys.of(first[:1]).tolist() == [n], "a forgotten key is new"


def test_a_retraction_of_a_binding_never_counted_is_an_error() -> None:
    for multiset in (Multiset(np.int64), PairCounts()):
        multiset.apply(np.array([0]), np.array([1]), np.array([1]))
        with pytest.raises(ValueError, match="retracted"):
            multiset.apply(np.array([0, 0]), np.array([1, 2]), np.array([-1, -1]))


def test_state_is_a_few_dozen_bytes_per_pair_and_group() -> None:
    state = AggregateState([Aggregate("count_distinct", ">=", 2, "d")])
    n = 10_000
    groups = np.arange(n, dtype=np.int64) % 100
    state.apply(groups, {"d": np.arange(n, dtype=np.int64)}, np.ones(n, np.int64))
    assert state.nbytes <= 24 * n + 64 * 100, state.nbytes
    state.apply(groups, {"d": np.arange(n, dtype=np.int64)}, -np.ones(n, np.int64))
    assert len(state.multisets["d"]) == 0, "pairs at multiplicity 0 are kept"


#: (key, group, value, amount, time): one binding of a windowed aggregate.
Timed = tuple[int, int, int, float, float]


@st.composite
def timed_streams(draw: st.DrawFn) -> list[tuple[float, list[tuple[Timed, int]]]]:
    """Epochs, each with its watermark (never going back) and its binding changes: new bindings
    at any time (some already behind the window), retractions of bindings inserted before."""
    inserted: list[Timed] = []
    retracted: set[int] = set()
    epochs = []
    watermark = 0.0
    for _ in range(draw(st.integers(1, 8))):
        watermark += draw(st.integers(0, 4))
        changes = []
        before = len(inserted)  # (a body's changes are net: none inserted and retracted at once)
        for _ in range(draw(st.integers(0, 12))):
            live = [b for b in inserted[:before] if b[0] not in retracted]
            if live and draw(st.booleans()):
                binding = draw(st.sampled_from(live))
                retracted.add(binding[0])
                changes.append((binding, -1))
            else:
                binding = (
                    len(inserted),
                    draw(st.integers(0, 2)),
                    draw(st.integers(0, 3)),
                    float(draw(st.integers(0, 6))),
                    watermark + draw(st.integers(-6, 2)),
                )
                inserted.append(binding)
                changes.append((binding, 1))
        epochs.append((watermark, changes))
    return epochs


@settings(max_examples=300)
@given(timed_streams(), st.lists(st.sampled_from(CONDITIONS), min_size=1, max_size=3, unique=True))
def test_a_window_counts_the_bindings_within_its_span_of_the_watermark(
    epochs: list[tuple[float, list[tuple[Timed, int]]]], chosen: list[Aggregate]
) -> None:
    span = 5.0
    names = [c.name for c in chosen if c.kind != "count"]
    state, window = AggregateState(chosen), Window(span, names)
    live: dict[int, Timed] = {}
    reported: Counter[int] = Counter()
    for watermark, changes in epochs:
        for binding, diff in changes:
            if diff > 0:
                live[binding[0]] = binding
            else:
                del live[binding[0]]
        expired = window.expire(watermark)
        steps = [expired]
        if changes:
            rows = np.array([b for b, _ in changes], dtype=np.float64).reshape(-1, 5)
            arguments = {
                "count_distinct_v": rows[:, 2].astype(np.int64),
                **{n: rows[:, 3] for n in names if n != "count_distinct_v"},
            }
            body = Rows(
                rows[:, 1].astype(np.int64),
                {n: arguments[n] for n in names},
                np.array([d for _, d in changes], dtype=np.int64),
            )
            steps.append(window.admit(rows[:, 0].astype(np.int64), rows[:, 4], body, watermark))
        for step in steps:
            done = state.apply(step.groups, step.arguments, step.diffs)
            for g, d in zip(done.groups.tolist(), done.diffs.tolist(), strict=True):
                reported[g] += d
                assert reported[g] in (0, 1)
        counted: Counter[Binding] = Counter(
            (b[1], 0, b[2], b[3]) for b in live.values() if b[4] + span >= watermark
        )
        expected = brute_force(counted, chosen)
        assert {(g, 0) for g, n in reported.items() if n} == set(expected)
        assert len(window) == sum(counted.values())


@pytest.mark.parametrize("compact_min", [0, 1 << 16])  # (dropping the pairs at 0, or not)
def test_pair_counts_follow_a_model_through_compaction_and_renumbering(compact_min: int) -> None:
    pairs = PairCounts()
    pairs.compact_min = compact_min
    model: dict[tuple[int, int], int] = {}
    rng = np.random.default_rng(compact_min)
    for step in range(40):
        live = [k for k, v in model.items() for _ in range(v)]
        n = int(rng.integers(0, 300))
        groups = rng.integers(0, 50, n)
        values = rng.integers(0, 8, n) * (1 << 40)  # (hashes of ids: any int64)
        gone = rng.permutation(len(live))[: int(rng.integers(0, len(live) + 1))]
        out = [live[i] for i in gone]
        all_groups = np.concatenate([groups, [g for g, _ in out]]).astype(np.int64)
        all_values = np.concatenate([values, [v for _, v in out]]).astype(np.int64)
        diffs = np.concatenate([np.ones(n), -np.ones(len(out))]).astype(np.int64)
        before = {k for k, v in model.items() if v > 0}
        for g, v, d in zip(all_groups.tolist(), all_values.tolist(), diffs.tolist(), strict=True):
            model[(g, v)] = model.get((g, v), 0) + d
        after = {k for k, v in model.items() if v > 0}
        change = pairs.apply(all_groups, all_values, diffs)
        appeared = np.bincount(change.groups, weights=change.after & ~change.before, minlength=50)
        vanished = np.bincount(change.groups, weights=change.before & ~change.after, minlength=50)
        expected_up = np.bincount([g for g, _ in after - before], minlength=50)
        expected_down = np.bincount([g for g, _ in before - after], minlength=50)
        assert appeared.tolist() == expected_up.tolist()
        assert vanished.tolist() == expected_down.tolist()
        assert len(pairs) == len(after)
        if step % 10 == 9:  # groups renumbered: every other group forgotten if it holds none
            held = {g for g, _ in after}
            keep = np.array([g in held or g % 2 == 0 for g in range(50)])
            new = np.cumsum(keep) - 1
            pairs.renumber(new)
            model = {(int(new[g]), v): c for (g, v), c in model.items() if c > 0}
            # (the model's groups are renumbered too; the next steps draw from 0..49 again)
