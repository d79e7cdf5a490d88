"""Events on the partitioned index against the single process: after every epoch the records a
user reads (bindings, diffs, each edge variable's event with its fields, ``match_id``, and
``cause`` in a window) are the single process's, on random event streams with fields,
predicates, join filters across events, deletes and reinserts by id, labels and tuples beside
the events, event time (range steps, ``within``), windows with expiry, lateness and outliers,
random epoch boundaries, over 1-5 shards (in process, and as Ray actors); and through deaths
at every step of the epoch protocol with a state directory."""

from __future__ import annotations

import io
import itertools
import json
import math
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from bench import distributed_events
from connectors.sinks import JsonLinesSink
from core.records import UpdateBatch
from monitor.distributed.delta import ShardedEpochs
from monitor.distributed.shard_calls import LocalShards, RayShards, Shards
from monitor.distributed.shard_events import EID_MAX, EventCapacityError, ShardEvents
from monitor.distributed.shard_store import ShardStore
from monitor.query.ast import Query
from monitor.query.load import load_queries_many
from monitor.query.parser import parse_queries
from monitor.service.epochs import EpochProcessor
from monitor.service.query_output import QueryOutput
from monitor.service.settings import Settings
from tests.engine import test_events_oracle as fields_oracle
from tests.engine import test_time_oracle as time_oracle
from tests.engine import test_window_oracle as window_oracle

MINUTE = time_oracle.MINUTE

pytestmark = pytest.mark.usefixtures("tuples_renumbered_often")


def records(outputs: Sequence[QueryOutput], epoch: int) -> list[str]:
    """The JSON records a user reads, each canonical (keys sorted), sorted."""
    buffer = io.BytesIO()
    sink = JsonLinesSink(buffer)
    for out in outputs:
        sink.write_deltas(
            out.query, epoch, out.variables, out.columns, out.diff, out.edges or None, out.extra
        )
    lines = buffer.getvalue().decode().splitlines()
    return sorted(json.dumps(json.loads(line), sort_keys=True) for line in lines)


def same_records(
    queries: Sequence[Query],
    batches: list[UpdateBatch],
    shards: Shards,
    run: Settings,
    shared: bool | None = None,
) -> int:
    """Run both engines epoch by epoch; every epoch's records equal. Returns how many records
    there were (a test's draws should find matches)."""
    single = EpochProcessor(queries, run)
    sharded = ShardedEpochs(queries, shards, run.max_prefixes, shared, settings=run, static=False)
    seen = 0
    for epoch, batch in enumerate(batches, 1):
        expected = records(single.process(batch).queries, epoch)
        single.commit()
        found = sharded.outputs(sharded.evaluate(batch))
        sharded.commit()
        assert records(found, epoch) == expected, f"epoch {epoch}"
        seen += len(expected)
    return seen


def cut(
    make_batch: Callable[[list[Any], int], UpdateBatch], ops: list[Any], cuts: list[int]
) -> list[UpdateBatch]:
    bounds = sorted({0, len(ops), *(c for c in cuts if c < len(ops))})
    return [make_batch(ops[lo:hi], lo) for lo, hi in itertools.pairwise(bounds)]


CUTS = st.lists(st.integers(1, 60), max_size=8)


def weighted(
    ops: st.SearchStrategy[Any], inserts: st.SearchStrategy[Any]
) -> st.SearchStrategy[list[Any]]:
    """Streams of 8-60 operations, three in four of them inserts (the oracles' operations,
    drawn evenly, insert too few events to find matches to retract)."""
    return st.lists(st.one_of(inserts, inserts, inserts, ops), min_size=8, max_size=60)


def inserts(ids: int, amounts: st.SearchStrategy[Any], last: st.SearchStrategy[Any]) -> Any:
    """Inserts as the oracles draw them: an id, two vertices, an amount, a channel or time."""
    vertices = st.integers(0, 2)
    return st.tuples(st.just("insert"), st.integers(0, ids), vertices, vertices, amounts, last)


#: The window oracle's queries, and one with an atom over the event relation's pairs (whose
#: retraction is ``expired`` when the pair's last event expired).
WINDOW_QUERIES = (
    *time_oracle.QUERIES,
    *parse_queries("back(a, b) := transfer(a, b) as t, transfer(b, a), t.amount >= 1, within 10m."),
)
MAYBE = st.one_of(st.none(), st.integers(0, 4))
FIELDS_OPS = weighted(
    fields_oracle.OPS, inserts(5, MAYBE, st.one_of(st.none(), fields_oracle.CHANNELS))
)
TIME_OPS = weighted(time_oracle.OPS, inserts(6, MAYBE, st.one_of(st.none(), st.integers(0, 30))))
WINDOW_OPS = weighted(
    window_oracle.OPS, inserts(8, st.integers(0, 4), st.one_of(st.none(), st.integers(0, 60)))
)
SHARDS = st.integers(1, 5)
BUDGET = st.sampled_from([1 << 20, 3])


@example(  # an event deleted and inserted again, elsewhere, within one epoch: a new event
    ops=[("insert", 0, 0, 1, 2, "wire"), ("insert", 1, 1, 0, 3, "wire"), ("delete", 0),
         ("insert", 0, 0, 1, 3, "card")],
    cuts=[2], shards=3, budget=1 << 20,
)  # fmt: skip
@example(  # a pair's last event deleted: the pair disappears, and the match with it
    ops=[("insert", 0, 0, 1, 3, "wire"), ("insert", 1, 1, 0, 3, "wire"), ("delete", 1),
         ("delete", 0)],
    cuts=[2, 3], shards=2, budget=1 << 20,
)  # fmt: skip
@settings(max_examples=120, deadline=None)
@given(ops=FIELDS_OPS, cuts=CUTS, shards=SHARDS,
       budget=BUDGET)  # fmt: skip
def test_fields_predicates_and_join_filters(
    ops: list[Any], cuts: list[int], shards: int, budget: int
) -> None:
    """Selections (``amount >= 1``, ``channel != "cash"``), join filters between events'
    numbers and strings, set atoms over the event relation, tuples and a label beside."""
    run = Settings().model_copy(update={"max_prefixes": budget})  # (below the setting's floor)
    batches = cut(fields_oracle.batch, ops, cuts)
    same_records(fields_oracle.QUERIES, batches, LocalShards(shards), run)


@settings(max_examples=120, deadline=None)
@given(ops=TIME_OPS, cuts=CUTS, shards=SHARDS,
       budget=BUDGET, shared=st.booleans())  # fmt: skip
def test_event_time_range_steps_and_within(
    ops: list[Any], cuts: list[int], shards: int, budget: int, shared: bool
) -> None:
    """Order and gaps of event time (range steps over the sharded time orders), a number times
    a field, ``within``; events live until deleted."""
    run = Settings(retention={"transfer": math.inf}).model_copy(update={"max_prefixes": budget})
    batches = cut(time_oracle.batch, ops, cuts)
    same_records(time_oracle.QUERIES, batches, LocalShards(shards), run, shared)


@example(  # a pair whose events all expire: the match over it is retracted as expired
    ops=[("insert", 0, 0, 1, 3, 0), ("insert", 1, 1, 0, 3, 1), ("insert", 2, 2, 2, 1, 40),
         ("insert", 3, 2, 2, 1, 50), ("insert", 4, 2, 2, 1, 55)],
    cuts=[2, 3, 4], retention=20, lateness=0, outliers=0, shards=2, compacting=False,
)  # fmt: skip
@settings(max_examples=120, deadline=None)
@given(
    ops=WINDOW_OPS,
    cuts=CUTS,
    retention=st.sampled_from([5, 20, 30]),
    lateness=st.integers(0, 10),
    outliers=st.integers(0, 2),
    shards=SHARDS,
    compacting=st.booleans(),
)
def test_windows_expiry_lateness_and_causes(
    ops: list[Any],
    cuts: list[int],
    retention: int,
    lateness: int,
    outliers: int,
    shards: int,
    compacting: bool,
) -> None:
    """Sliding windows: expiry where each event lives, late and untimed inserts refused by the
    driver's clock, ``cause`` of every retraction; ``compacting``: every store compacted at
    every commit it can be (its events renumbered on every shard that holds them)."""
    run = Settings(
        retention={"transfer": retention * MINUTE},
        allowed_lateness=lateness * MINUTE,
        watermark_outliers=outliers,
        event_compaction_min=0 if compacting else 65_536,
    )
    batches = cut(time_oracle.batch, ops, cuts)
    same_records(WINDOW_QUERIES, batches, LocalShards(shards), run)


#: Where a run dies: its epoch's records written but not prepared; prepared by the shards but
#: not recorded by the driver; recorded but not folded.
STEPS = ("evaluated", "prepared", "committed")


def run_until(
    state: str,
    shards: int,
    run: Settings,
    batches: list[UpdateBatch],
    record: tuple[int, dict[str, Any]],
    stop: int,
    step: str,
    queries: Sequence[Query] = WINDOW_QUERIES,
) -> tuple[tuple[int, dict[str, Any]], list[list[str]]]:
    """Restore at the driver's ``record`` (its last committed epoch, -1: a new run, and the
    clock and field kinds it recorded), run on and die at epoch ``stop`` after ``step``; the
    driver's last record, and the records of the epochs it recorded."""
    sharded = ShardedEpochs(queries, LocalShards(shards), 1 << 20, True, settings=run, static=False)
    committed, position = record
    sharded.index.restore(state, committed)
    if committed < 0:  # (a new run: the shards' epoch 0, then the driver's)
        sharded.index.checkpoint(0)
        committed, position = 0, sharded.position()
    else:
        sharded.restored(position)
    out = []
    for epoch in range(committed + 1, len(batches) + 1):
        found = records(sharded.outputs(sharded.evaluate(batches[epoch - 1])), epoch)
        if epoch == stop and step == "evaluated":
            break
        sharded.index.prepare(epoch)
        if epoch == stop and step == "prepared":
            break
        committed, position = epoch, sharded.position()  # (the driver's record)
        out.append(found)
        if epoch == stop:
            break
        sharded.commit()
    sharded.index.close()  # (the process dies: its directories are let go)
    return (committed, position), out


@example(  # the watermark recorded by the driver expires the first events right after a restart
    ops=[("insert", 0, 0, 1, 3, 0), ("insert", 1, 1, 0, 3, 1), ("insert", 2, 2, 2, 1, 40),
         ("insert", 3, 2, 2, 1, 50), ("insert", 4, 2, 2, 1, 55), ("insert", 5, 2, 2, 1, 58)],
    cuts=[2, 4, 5], shards=2, deaths=[(2, "committed")], window=20, compacting=False,
    snapshots=True,
)  # fmt: skip
@example(  # a store compacted, its events renumbered everywhere, then a death: written whole
    ops=[("insert", i, i % 3, (i + 1) % 3, 1, 2 * i) for i in range(45)] + [("delete", 40)],
    cuts=list(range(3, 46, 3)), shards=2, deaths=[(10, "committed")], window=20,
    compacting=True, snapshots=False,
)  # fmt: skip
@settings(max_examples=40, deadline=None)
@given(
    ops=WINDOW_OPS,
    cuts=CUTS,
    shards=st.integers(1, 4),
    deaths=st.lists(st.tuples(st.integers(1, 6), st.sampled_from(STEPS)), min_size=1, max_size=3),
    window=st.sampled_from([20, 60, None]),
    compacting=st.booleans(),
    snapshots=st.booleans(),
)
def test_a_run_restarted_at_any_step_writes_the_single_process_s_records(
    ops: list[Any],
    cuts: list[int],
    shards: int,
    deaths: list[tuple[int, str]],
    window: int | None,
    compacting: bool,
    snapshots: bool,
) -> None:
    """Events, their windows and time orders through deaths at every step of the epoch
    protocol, with snapshots at every commit or none, with stores compacted at every commit
    or not: each shard's stores and id dictionaries come back from its directory, the
    windows' queues and time orders from the stores, the clock and the fields' kinds from the
    driver's record."""
    retention = math.inf if window is None else window * MINUTE  # (None: until deleted)
    run = Settings(
        retention={"transfer": retention},
        allowed_lateness=MINUTE,
        event_compaction_min=0 if compacting else 65_536,
    )
    batches = cut(time_oracle.batch, ops, cuts)
    with snapshots_at_every_commit() if snapshots else nullcontext():
        same_through_deaths(WINDOW_QUERIES, batches, shards, run, deaths)


def same_through_deaths(
    queries: Sequence[Query],
    batches: list[UpdateBatch],
    shards: int,
    run: Settings,
    deaths: list[tuple[int, str]],
) -> None:
    """The partitioned engine dying at ``deaths`` (epochs after the last record, steps of the
    protocol) and restored each time writes the single process's records of every epoch."""
    single = EpochProcessor(queries, run)
    expected = []
    for epoch, batch in enumerate(batches, 1):
        expected.append(records(single.process(batch).queries, epoch))
        single.commit()
    got: list[list[str]] = []
    record: tuple[int, dict[str, Any]] = (-1, {})
    with tempfile.TemporaryDirectory() as state:
        for stop, step in deaths:
            stop = max(record[0], 0) + stop
            record, out = run_until(state, shards, run, batches, record, stop, step, queries)
            got += out
        end = len(batches) + 1
        record, out = run_until(state, shards, run, batches, record, end, "", queries)
        got += out
    assert record[0] == len(batches)
    assert got == expected


@contextmanager
def snapshots_at_every_commit() -> Iterator[None]:
    """A new snapshot whenever the log outgrows the snapshot, however small."""
    was = ShardStore.snapshot_min_bytes
    ShardStore.snapshot_min_bytes = 0
    try:
        yield
    finally:
        ShardStore.snapshot_min_bytes = was


def test_a_long_windowed_stream_finds_matches_and_expires_them() -> None:
    """A stream long enough that every kind of record appears: the comparison is not of two
    empty outputs."""
    ops = [
        ("insert", i % 9, (i * 7) % 3, (i * 5 + 1) % 3, i % 5, (i * 3) % 61) for i in range(90)
    ] + [("delete", i % 9) for i in range(0, 30, 4)]
    run = Settings(retention={"transfer": 20 * MINUTE}, allowed_lateness=2 * MINUTE)
    batches = cut(time_oracle.batch, ops, [10, 25, 40, 41, 60, 77, 90, 95])
    assert same_records(time_oracle.QUERIES, batches, LocalShards(3), run) > 20


def test_the_payments_queries_on_a_stream_that_compacts() -> None:
    """``examples/payments.q`` (its plain selection kept only as time orders: no query reads
    its pairs) over the benchmark's payments stream with a one-hour window: stores compacted
    many times, their events renumbered in the time orders of every shard."""
    queries = load_queries_many([str(Path(__file__).parents[2] / "examples" / "payments.q")])
    run = Settings(retention={"transfer": 3_600_000}, event_compaction_min=500)
    batches = distributed_events.stream(20_000, 2_000, 1_000)
    assert same_records(queries, batches, LocalShards(3), run) > 0


def test_ray_shards_run_events(ray_cluster: None) -> None:
    ops = [
        ("insert", i % 11, (i * 7) % 4, (i * 5 + 1) % 4, i % 5, (i * 3) % 61) for i in range(120)
    ]
    run = Settings(retention={"transfer": 30 * MINUTE})
    batches = cut(time_oracle.batch, ops, [20, 50, 80, 100])
    assert same_records(time_oracle.QUERIES, batches, RayShards(3), run) > 0


def test_a_shard_refuses_an_event_past_the_int32_global_eids() -> None:
    """Global eids are ``local * S + shard`` in int32: the last local eid that fits is numbered,
    the next is refused by name (never wrapped into another event's eid)."""
    shards = 4
    events = ShardEvents(3, shards)
    last = (EID_MAX - 3) // shards  # (3 + 4 * last <= EID_MAX)
    fits = np.array([0, last], np.int32)
    assert events._global(fits).tolist() == [3, last * shards + 3]
    assert events._local(events._global(fits)).tolist() == fits.tolist()
    with pytest.raises(EventCapacityError, match=r"shard 3 of 4 .* at most"):
        events._global(np.array([last + 1], np.int32))
