"""Aggregate queries on the partitioned engine against the single process: after every epoch
the records a user reads (each group's ``+1`` or ``-1``, its ``values``, ``match_id`` and
``cause``) are the single process's, on random timestamped streams with deletes, late events
and random epoch boundaries, over 1-5 shards (the single process is checked against a brute
force in ``tests/service/test_grouped_oracle.py``). A group's bindings lie on many shards: the
driver keeps the groups."""

from __future__ import annotations

from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from monitor.distributed.shard_calls import LocalShards
from monitor.service.settings import Settings
from tests.distributed.test_sharded_events import (
    CUTS,
    MINUTE,
    STEPS,
    cut,
    same_records,
    same_through_deaths,
)
from tests.engine import test_time_oracle as time_oracle
from tests.service import test_grouped_oracle as grouped_oracle


@settings(max_examples=60, deadline=None)
@given(
    ops=st.lists(grouped_oracle.OPS, min_size=8, max_size=50),
    cuts=CUTS,
    lateness=st.integers(0, 10),
    retention=st.one_of(st.none(), st.integers(5, 60)),
    shards=st.integers(1, 5),
    windowed=st.booleans(),
)
def test_aggregates_over_shards_write_the_single_process_s_records(
    ops: list[Any],
    cuts: list[int],
    lateness: int,
    retention: int | None,
    shards: int,
    windowed: bool,
) -> None:
    queries = grouped_oracle.WINDOWED if windowed else grouped_oracle.UNBOUNDED
    overrides = {} if retention is None or not windowed else {"transfer": retention * MINUTE}
    run = Settings(allowed_lateness=lateness * MINUTE, watermark_outliers=0, retention=overrides)
    same_records(queries, cut(time_oracle.batch, ops, cuts), LocalShards(shards), run)


def test_the_sharded_aggregates_see_groups() -> None:
    """A stream of the generated kind has group rows on 3 shards (the test is not vacuous)."""
    ops = [("insert", i, i % 4, (i * 3) % 4, [0, 1, 2, 4.25][i % 4], i) for i in range(40)]
    ops += [("delete", i) for i in range(0, 40, 3)]
    run = Settings(allowed_lateness=0, watermark_outliers=0)
    seen = same_records(
        grouped_oracle.WINDOWED, cut(time_oracle.batch, ops, [9, 17, 30, 44]), LocalShards(3), run
    )
    assert seen >= 5, seen


@example(  # a death after the record of epoch 2, whose watermark (22m) is past B's payers:
    # the groups are rebuilt at the watermark epoch 2 began with, and epoch 3 expires them
    ops=[("insert", 0, 0, 3, 1, 0), ("insert", 1, 1, 3, 1, 1), ("insert", 2, 0, 1, 1, 23),
         ("insert", 3, 0, 1, 1, 24), ("insert", 4, 2, 2, 1, 30)],
    cuts=[2, 4], shards=2, deaths=[(2, "committed")], retention=None,
)  # fmt: skip
@settings(max_examples=30, deadline=None)
@given(
    ops=st.lists(grouped_oracle.OPS, min_size=8, max_size=50),
    cuts=CUTS,
    shards=st.integers(1, 4),
    deaths=st.lists(st.tuples(st.integers(1, 6), st.sampled_from(STEPS)), min_size=1, max_size=3),
    retention=st.one_of(st.none(), st.sampled_from([10, 60])),
)
def test_aggregates_restarted_at_any_step_write_the_single_process_s_records(
    ops: list[Any],
    cuts: list[int],
    shards: int,
    deaths: list[tuple[int, str]],
    retention: int | None,
) -> None:
    """Deaths at every step of the epoch protocol: the driver rebuilds the groups from the
    shards' restored index, at the watermark its record says the last epoch began with."""
    overrides = {} if retention is None else {"transfer": retention * MINUTE}
    run = Settings(allowed_lateness=MINUTE, retention=overrides)
    batches = cut(time_oracle.batch, ops, cuts)
    same_through_deaths(grouped_oracle.WINDOWED, batches, shards, run, deaths)
