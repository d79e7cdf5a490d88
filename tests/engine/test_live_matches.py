"""Live matches kept, retractions looked up (:mod:`monitor.engine.live_matches`), against the
window oracle.

The window oracle's queries with two or more events keep their matches by default: every
``-1`` of an expiry or a delete is then a lookup, and the delta queries run seeded by the
insertions only. Here the same streams run with the matches kept, kept by a limit so small
that they are dropped mid-run, and not kept at all: each is the brute force after every
epoch, and the kept matches are, after every epoch, exactly the index's matches by a static
evaluation (also across event-store compactions, which renumber the events they name).
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.engine.live_matches import LiveMatches, Removed
from monitor.engine.static import enumerate_matches
from monitor.index.graph import Change
from monitor.index.levels import I32
from monitor.query.parser import parse_queries
from monitor.service.epochs import EpochProcessor
from monitor.service.kept_matches import keeping, matches_up_to
from monitor.service.settings import Settings
from tests.engine.test_time_oracle import MINUTE, QUERIES, batch
from tests.engine.test_window_oracle import OPS, check_windows

#: The window oracle's queries that keep their matches: two or more events in a window, in a
#: cycle (not the chains pass_through and hop).
KEEPING = {"layering", "close"}


def rows(columns: list[I32]) -> set[tuple[int, ...]]:
    return set(zip(*(c.tolist() for c in columns), strict=True))


def static_rows(processor: EpochProcessor, name: str) -> set[tuple[int, ...]]:
    query = next(q.internal for q in processor.rewritten if q.internal.name == name)
    found: set[tuple[int, ...]] = set()
    with processor.events.complete():
        enumerate_matches(query, processor.index, lambda cols: found.update(rows(cols)))
    return found


def kept_run(ops: list[tuple[Any, ...]], cuts: list[int], retention: int, limit: int) -> None:
    """The processor's epochs, its kept matches after each compared with a static
    evaluation of its index."""
    run = Settings(
        retention={"transfer": retention * MINUTE},
        allowed_lateness=2 * MINUTE,
        watermark_outliers=0,
        live_matches=limit,
        event_compaction_min=4,
    )
    processor = EpochProcessor(QUERIES, run)
    assert set(processor.kept.matches) == KEEPING
    for lo, hi in itertools.pairwise(sorted({0, len(ops), *(c for c in cuts if c < len(ops))})):
        processor.process(batch(ops[lo:hi], lo))
        processor.commit()
        for name, matches in processor.kept.matches.items():
            assert rows(matches.columns) == static_rows(processor, name), f"{name} at {hi}"


def test_the_queries_of_two_windowed_events_keep_their_matches() -> None:
    processor = EpochProcessor(QUERIES, Settings())
    assert set(processor.kept.matches) == KEEPING
    assert {q.internal.name for q in processor.rewritten if keeping(q, processor.retention)} == (
        KEEPING
    )
    assert not EpochProcessor(QUERIES, Settings(live_matches=0)).kept
    # events that never expire: the removals are the deletes alone, evaluated as they come
    forever = Settings(retention={"transfer": float("inf")})
    assert not EpochProcessor(QUERIES, forever).kept


@settings(max_examples=120, deadline=None)
@given(
    ops=st.lists(OPS, min_size=3, max_size=40),
    cuts=st.lists(st.integers(1, 40), max_size=6),
    retention=st.one_of(st.none(), st.integers(0, 40)),
    lateness=st.integers(0, 10),
    limit=st.sampled_from([0, 1, 3]),
)
def test_kept_dropped_or_never_kept_the_output_is_the_brute_forces(
    ops: list[tuple[Any, ...]], cuts: list[int], retention: int | None, lateness: int, limit: int
) -> None:
    """A limit of 1 or 3 matches: the queries keep theirs until they outgrow it, then
    evaluate their removals again; 0: never kept (the default's run is the window oracle's)."""
    processor = check_windows(ops, cuts, retention, lateness, 0, live_matches=limit)
    assert all(len(m) <= limit for m in processor.kept.matches.values())


def test_a_query_outgrowing_the_limit_stops_keeping_and_stays_right() -> None:
    ops = [("insert", i, i % 2, (i + 1) % 2, 1, i) for i in range(12)]
    processor = check_windows(ops, [4, 8], 30, 0, 0, live_matches=2)
    assert "close" not in processor.kept.matches  # (a 2-cycle per pair of its events)


def test_the_kept_matches_are_the_index_matches_across_compactions() -> None:
    rng = np.random.default_rng(5)
    ops: list[tuple[Any, ...]] = []
    for i in range(400):
        src, dst = (int(x) for x in rng.integers(0, 3, 2))
        ops.append(("insert", i, src, dst, 1, i // 4 + int(rng.integers(0, 4))))
        if i >= 10 and rng.random() < 0.2:
            ops.append(("delete", i - 10))
    kept_run(ops, list(range(0, len(ops), 17)), 10, 1 << 18)
    check_windows(ops, list(range(0, len(ops), 17)), 10, 2, 0, compaction_min=4)


def test_a_preloaded_processor_fills_its_matches_before_its_next_epoch() -> None:
    """A preload (the index filled without epochs, as a restore fills it) leaves the matches
    to fill: the next epochs' retractions are then the ones found by evaluating them."""
    ops = [("insert", i, i % 3, (i + 1) % 3, 1, i) for i in range(30)]
    ops += [("delete", 24), ("insert", 40, 0, 2, 1, 29)]
    outputs = []
    for limit in (1 << 18, 2, 0):
        run = Settings(retention={"transfer": 20 * MINUTE}, allowed_lateness=0, live_matches=limit)
        processor = EpochProcessor(QUERIES, run)
        processor.preload(batch(ops, 0))
        assert processor.kept.stale == bool(limit)
        found = []
        for k in range(3):
            later = [("insert", 50 + k, 2, 0, 1, 60 + 10 * k), ("delete", 27 + k)]
            out = processor.process(batch(later, len(ops) + 2 * k))
            processor.commit()
            found += sorted((q.query, tuple(q.diff.tolist())) for q in out.queries)
            if limit and k == 0:
                assert not processor.kept.stale
                # (more triangles than 2 in the preloaded window: found so, and not kept)
                assert ("layering" in processor.kept.matches) == (limit > 2)
                assert bool(len(processor.kept.matches.get("layering", ()))) == (limit > 2)
        outputs.append(found)
    assert outputs[0] == outputs[1] == outputs[2]
    assert any(d < 0 for _, ds in outputs[0] for d in ds)


def test_removed_rows_are_found_by_packed_keys_and_whole() -> None:
    """The lookup of removed tuples: packed into one key, and compared whole when the ids are
    too wide to pack; ids wider than the removed ones' are never found."""
    (query,) = parse_queries("q(a, b, c) := r(a, b, c).")
    wide = np.array([1 << 30, 5], np.int32)
    for first in (np.array([3, 5], np.int32), wide):
        change = Change(
            [first, np.array([1, 2], np.int32), np.array([7, 9], np.int32)],
            np.array([-1, 1], np.int8),
        )
        removed = Removed({"r": change})
        columns = [
            np.array([int(first[0]), int(first[0]), 1 << 29, int(first[1])], np.int32),
            np.array([1, 1, 1, 2], np.int32),
            np.array([7, 8, 7, 9], np.int32),
        ]
        assert removed.holding(query, columns).tolist() == [True, False, False, False]
    # a value wider than its column's bits would run into the next column's: (0, 6) packs as
    # (1, 2) does in 1 + 2 bits
    (pair,) = parse_queries("p(a, b) := r(a, b).")
    one = Removed(
        {"r": Change([np.array([1], np.int32), np.array([2], np.int32)], np.array([-1], np.int8))}
    )
    found = one.holding(pair, [np.array([0, 1], np.int32), np.array([6, 2], np.int32)])
    assert found.tolist() == [False, True]
    live = LiveMatches(query, limit=2)
    assert live.fill([columns]) is False  # four matches, a limit of two


def test_explain_says_which_queries_keep_their_matches() -> None:
    from click.testing import CliRunner

    from monitor.cli import main

    ring = "ring(a, b) := transfer(a, b) as x, transfer(b, a) as y, within 1h."
    chain = "chain(a, b, c) := transfer(a, b) as x, transfer(b, c) as y, within 1h."
    forever = "forever(a, b) := transfer(a, b) as x, transfer(b, a) as y."
    said = {}
    for text in (ring, chain, forever):
        done = CliRunner().invoke(main, ["explain", text])
        assert done.exit_code == 0, done.output
        said[text] = "# live matches kept" in done.output
    assert said == {ring: True, chain: False, forever: False}


def test_a_static_fill_stops_as_soon_as_the_matches_outgrow_the_limit() -> None:
    ops = [("insert", i, i % 3, (i + 1) % 3, 1, i) for i in range(30)]
    run = Settings(retention={"transfer": 20 * MINUTE}, allowed_lateness=0)
    processor = EpochProcessor(QUERIES, run)
    processor.preload(batch(ops, 0))
    layering = next(q for q in processor.rewritten if q.internal.name == "layering")
    every = static_rows(processor, "layering")
    index, complete = processor.index, processor.events.complete
    found = matches_up_to(layering, index, complete, 1 << 20, len(every))
    assert found is not None and len(every) > 2
    assert rows([np.concatenate(c) for c in zip(*found, strict=True)]) == every
    assert matches_up_to(layering, index, complete, 1 << 20, len(every) - 1) is None
