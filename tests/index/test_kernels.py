"""The compiled intersection kernel against the numpy reference and a set of pairs.

Random CSRs (empty segments, hub keys, the largest ids) with delta levels that add pairs and
remove present ones; candidates that hit and miss, keys without values, values beyond every
target."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.index import adjacency, kernels
from monitor.index.levels import Level, merge, pack
from monitor.plan.cut import Cut


@st.composite
def cases(draw: st.DrawFn) -> tuple[np.ndarray, ...]:  # type: ignore[type-arg]
    keys = draw(st.integers(1, 6))
    top = draw(st.sampled_from([3, 50, 2**31 - 2]))
    value = st.integers(0, top)
    stored = {
        (k, v) for k in range(keys) for v in draw(st.sets(value, max_size=draw(st.integers(0, 9))))
    }
    pairs = np.array(sorted(pack(np.array([k]), np.array([v]))[0] for k, v in stored), np.int64)
    csr_keys, csr_values = pairs >> 32, (pairs & 0xFFFFFFFF).astype(np.int32)
    narrow = draw(st.booleans())  # the CSR's offsets are int32 below 2**30 pairs
    offsets = np.zeros(keys + 1, np.int32 if narrow else np.int64)
    np.cumsum(np.bincount(csr_keys, minlength=keys), out=offsets[1:])
    removed = draw(st.sets(st.sampled_from(sorted(stored)), max_size=4)) if stored else set()
    added = draw(st.sets(st.tuples(st.integers(0, keys - 1), value), max_size=4)) - stored
    level = sorted([(k, v, -1) for k, v in removed] + [(k, v, 1) for k, v in added])
    level_pairs = np.array([(k << 32) | v for k, v, _ in level], np.int64)
    level_diff = np.array([d for _, _, d in level], np.int8)
    current = (stored - removed) | added
    probes = draw(
        st.lists(
            st.one_of(
                st.sampled_from(sorted(stored | added or {(0, 0)})),
                st.tuples(st.integers(0, keys - 1), value),
            ),
            max_size=30,
        )
    )
    if draw(st.booleans()):  # as a stage's proposals come: by key, in order (galloping)
        probes.sort()
    probe_keys = np.array([k for k, _ in probes], np.int64)
    probe_values = np.array([v for _, v in probes], np.int32)
    expected = np.array([p in current for p in probes], np.bool_)
    return offsets, csr_values, level_pairs, level_diff, probe_keys, probe_values, expected


@settings(max_examples=300, deadline=None)
@given(cases())
def test_both_kernels_answer_as_the_set_of_current_pairs(case: tuple[np.ndarray, ...]) -> None:  # type: ignore[type-arg]
    """The numpy reference, the kernel in use, and a view given its probe of the keys (the
    level's ranges of the keys, which the compiled kernel then reads instead of searching)."""
    *arguments, expected = case
    assert kernels.numpy_contains(*arguments).tolist() == expected.tolist()
    assert kernels.contains(*arguments).tolist() == expected.tolist()
    offsets, targets, level_pairs, level_diff, keys, values = arguments
    view = adjacency.AdjacencyView(offsets, targets, Level.of(level_pairs, level_diff))
    assert view.contains(view.probe(keys), values).tolist() == expected.tolist()


@settings(max_examples=300, deadline=None)
@given(cases(), st.data())
def test_many_values_of_one_key_are_answered_through_a_mask_as_the_kernels_answer(
    case: tuple[np.ndarray, ...],  # type: ignore[type-arg]
    data: st.DataObject,
) -> None:
    """A unary relation's check: thousands of values of one key, in any order (the mask of
    the key's values where its ids are few enough, the kernel where not)."""
    offsets, targets, level_pairs, level_diff, _, _, _ = case
    view = adjacency.AdjacencyView(offsets, targets, Level.of(level_pairs, level_diff))
    key = data.draw(st.integers(0, offsets.shape[0] - 2))
    top = int(max(targets.max(initial=0), (level_pairs & 0xFFFFFFFF).max(initial=0)))
    pool = np.arange(min(top + 3, 200), dtype=np.int32)
    values = np.random.default_rng(data.draw(st.integers(0, 99))).choice(
        np.concatenate([pool, targets, (level_pairs & 0xFFFFFFFF).astype(np.int32)]),
        adjacency.MASK_MIN + 7,
    )
    keys = np.full(values.shape[0], key, np.int64)
    expected = kernels.numpy_contains(offsets, targets, level_pairs, level_diff, keys, values)
    assert view.contains(keys, values).tolist() == expected.tolist()
    if top + 1 <= adjacency.MASK_SPAN * values.shape[0]:  # (the mask was used: not vacuous)
        assert view._masked(key, values) is not None


@settings(max_examples=300, deadline=None)
@given(cases())
def test_both_proposals_are_the_current_values_of_each_key(case: tuple[np.ndarray, ...]) -> None:  # type: ignore[type-arg]
    """Every key probed (repeated, in any order, hubs and empty ones) proposes exactly its
    current values: the compiled merge in order, the numpy path in any order."""
    offsets, targets, level_pairs, level_diff, probe_keys, _, _ = case
    view = adjacency.AdjacencyView(offsets, targets, Level.of(level_pairs, level_diff))
    current: dict[int, list[int]] = {}
    for k in range(offsets.shape[0] - 1):
        values = set(targets[offsets[k] : offsets[k + 1]].tolist())
        for pair, diff in zip(level_pairs.tolist(), level_diff.tolist(), strict=True):
            if pair >> 32 == k:
                (values.add if diff > 0 else values.discard)(pair & 0xFFFFFFFF)
        current[k] = sorted(values)
    want = [(i, v) for i, k in enumerate(probe_keys.tolist()) for v in current[k]]
    owner, values = view.propose(probe_keys)
    assert list(zip(owner.tolist(), values.tolist(), strict=True)) == want
    assert view.count(probe_keys).tolist() == [len(current[k]) for k in probe_keys.tolist()]
    owner, values = view._numpy_propose(probe_keys)
    assert sorted(zip(owner.tolist(), values.tolist(), strict=True)) == want


@settings(max_examples=300, deadline=None)
@given(cases())
def test_both_key_ranges_are_the_positions_of_each_keys_pairs(case: tuple[np.ndarray, ...]) -> None:  # type: ignore[type-arg]
    """The level's range of every probed key (absent keys, repeats, ascending runs that gallop,
    keys past the last pair): the numpy searches, the compiled pass and the table's lookups
    against a scan; a key the level does not hold has an empty range."""
    _, _, level_pairs, level_diff, probe_keys, _, _ = case
    keys = level_pairs >> 32
    want = [
        (int(np.count_nonzero(keys < k)), int(np.count_nonzero(keys <= k)))
        for k in probe_keys.tolist()
    ]
    level = Level.of(level_pairs, level_diff)
    found = [level.key_ranges(probe_keys, compiled=False)]
    if kernels.COMPILED:
        from monitor.index.levels import compiled_key_ranges, compiled_table_ranges

        found.append(compiled_key_ranges(level.pairs, probe_keys))
        found.append(compiled_table_ranges(*level.table, probe_keys))
        found.append(level.key_ranges(probe_keys))  # (the table, once built)
    for lo, hi in found:
        got = list(zip(lo.tolist(), hi.tolist(), strict=True))
        assert [r for r, w in zip(got, want, strict=True) if w[0] < w[1]] == [
            w for w in want if w[0] < w[1]
        ]
        assert all(a == b for (a, b), w in zip(got, want, strict=True) if w[0] == w[1])


@settings(max_examples=300, deadline=None)
@given(cases(), st.booleans())
def test_both_compactions_leave_the_current_pairs(
    case: tuple[np.ndarray, ...],  # type: ignore[type-arg]
    compiled: bool,
) -> None:
    """Compaction merges the committed level into the CSR: the compiled merge per key and
    the numpy removal and insertion leave the same offsets and targets, the current pairs."""
    offsets, targets, level_pairs, level_diff, _, _, _ = case
    if compiled and not kernels.COMPILED:
        return
    adj = adjacency.Adjacency()
    keys = np.repeat(np.arange(offsets.shape[0] - 1), np.diff(offsets))
    adj.load(pack(keys, targets))
    adj.ensure_keys(offsets.shape[0] - 1)
    adj.stage(level_pairs, level_diff)
    want = adj.pairs(Cut.NEW).tolist()
    adj.committed, adj.uncommitted = Level.of(level_pairs, level_diff), Level.empty()
    before = kernels.KERNELS
    kernels.KERNELS = "numba" if compiled else "numpy"
    try:
        adj.compact()
    finally:
        kernels.KERNELS = before
    assert not len(adj.committed)
    assert adj.pairs(Cut.OLD).tolist() == want
    assert adj.offsets.shape[0] == offsets.shape[0]


def test_the_compiled_kernel_is_in_use() -> None:
    pytest.importorskip("numba")
    assert kernels.KERNELS == "numba", "set SGM_NUMBA=1 (or unset) to test the compiled kernel"


def test_offsets_are_narrow_below_the_limit_and_wide_from_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """4 bytes a key while the CSR is small enough; 8 from the limit on, answers unchanged."""
    monkeypatch.setattr(adjacency, "NARROW_OFFSETS", 6)
    pairs = np.sort(pack(np.array([0, 0, 1, 2, 2, 2]), np.array([1, 5, 3, 0, 4, 7])))
    for extra, dtype in ((0, np.int32), (1, np.int64)):
        adj = adjacency.Adjacency()
        adj.load(pairs[: 5 + extra])
        assert adj.offsets.dtype == dtype
        view = adj.view(Cut.OLD)
        assert view.count(np.array([0, 1, 2])).tolist() == [2, 1, 2 + extra]
        keys, values = np.array([0, 0, 2, 2]), np.array([5, 4, 4, 7])
        assert view.contains(keys, values).tolist() == [True, False, True, bool(extra)]


@st.composite
def levels(draw: st.DrawFn) -> tuple[Level, Level]:
    """Two levels as an adjacency stacks them: the committed one, and an epoch's changes on
    top of it (removing some of its +1 pairs, cancelling some -1 ones, new pairs at either
    end and in between)."""
    value = st.integers(0, draw(st.sampled_from([20, 2**40])))
    lower = draw(st.dictionaries(value, st.sampled_from([1, -1]), max_size=40))
    upper = {p: -d for p, d in lower.items() if draw(st.booleans()) and draw(st.booleans())}
    upper.update({p: draw(st.sampled_from([1, -1])) for p in draw(st.sets(value, max_size=9))})
    upper = {p: d for p, d in upper.items() if lower.get(p, 0) != d}  # no +1 on +1

    def level(pairs: dict[int, int]) -> Level:
        ordered = sorted(pairs)
        return Level.of(np.array(ordered, np.int64), np.array([pairs[p] for p in ordered], np.int8))

    return level(lower), level(upper)


@settings(max_examples=400, deadline=None)
@given(levels())
def test_the_compiled_merge_of_levels_is_numpys(case: tuple[Level, Level]) -> None:
    lower, upper = case
    want = merge(lower, upper, compiled=False)
    if not kernels.COMPILED:
        return
    got = merge(lower, upper, compiled=True)
    assert got.pairs.tolist() == want.pairs.tolist()
    assert got.diff.tolist() == want.diff.tolist()
    assert got.running.tolist() == want.running.tolist()
    assert got.removals == want.removals
    summed: dict[int, int] = {}
    for level in (lower, upper):
        for p, d in zip(level.pairs.tolist(), level.diff.tolist(), strict=True):
            summed[p] = summed.get(p, 0) + d
    assert got.pairs.tolist() == sorted(p for p, d in summed.items() if d)


@pytest.mark.skipif(not kernels.COMPILED, reason="the table is the compiled path's")
def test_a_level_s_table_finds_every_key_among_those_sharing_its_slots() -> None:
    """Thousands of keys in a table twice their number: many share a first slot and are
    found further on (linear probing); keys between them are not found."""
    rng = np.random.default_rng(3)
    held = np.unique(rng.integers(0, 1 << 30, 5000)) * 2  # (even: the odd ones are absent)
    counts = rng.integers(1, 4, held.shape[0])
    keys = np.repeat(held, counts)
    pairs = pack(keys, np.concatenate([np.arange(c) for c in counts]))
    level = Level.of(pairs, np.ones(pairs.shape[0], np.int8))
    table_keys = level.table[0]
    mask = table_keys.shape[0] - 1
    first = ((held.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(32)) & mask
    slot = {int(k): i for i, k in enumerate(table_keys.tolist()) if k >= 0}
    assert sum(slot[int(k)] != int(f) for k, f in zip(held, first, strict=True)) > 100
    probes = np.concatenate([held, held + 1])
    lo, hi = level.key_ranges(probes)
    assert (hi - lo).tolist() == [*counts.tolist(), *[0] * held.shape[0]]
    assert (pairs[lo[: held.shape[0]]] >> 32).tolist() == held.tolist()


def test_a_level_probed_often_in_small_calls_builds_its_table_once_asked_for_its_size() -> None:
    """A committed level is probed by every stage of every epoch, each call for fewer keys than
    it holds: the table comes once as many keys were asked for as it has pairs, and every call
    finds the same ranges before and after."""
    keys = np.repeat(np.arange(50, dtype=np.int64), 2)
    level = Level.of((keys << 32) | np.tile([1, 2], 50), np.ones(100, np.int8))
    probe = np.array([0, 7, 7, 49, 60], np.int64)
    want = ([0, 14, 14, 98, 100], [2, 16, 16, 100, 100])
    for call in range(25):
        lo, hi = level.key_ranges(probe)
        assert [lo.tolist()[i] for i in range(4)] == want[0][:4]
        assert hi.tolist()[:4] == want[1][:4] and lo[4] == hi[4]
        if kernels.COMPILED:
            assert ("table" in level.__dict__) == ((call + 1) * 5 >= 100)
