"""Tables of vertex attributes on the partitioned engine against the single process: after
every epoch the records a user reads (``+1``/``-1``, the account's attributes in ``edges``,
``cause`` ``updated`` or ``deleted``) are the single process's, over 1-5 shards, on random
streams of transfers, deletes, attribute updates and tombstones with random epoch boundaries
(the single process is checked against a brute force in ``tests/service/
test_tables_oracle.py``); and with shards and the driver dying at every step of the epoch
protocol, the attributes are state the restored run still judges by."""

from __future__ import annotations

from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from monitor.distributed.shard_calls import LocalShards
from monitor.query import parse_queries
from monitor.service.settings import Settings
from tests.distributed.test_sharded_events import (
    CUTS,
    STEPS,
    cut,
    same_records,
    same_through_deaths,
)
from tests.service import test_tables_oracle as tables_oracle

QUERIES = parse_queries(tables_oracle.QUERIES)
RUN = Settings(allowed_lateness=0, watermark_outliers=0)


@example(  # tx-0 expires, so fan_in's b=2 falls below its degree bound (one process), while
    # account 0's record is written again: its binding with tx-1 still holds (the new record
    # re-forms it), so its retraction is pruned, not updated, and the row's count is 1
    ops=[
        ("transfer", 1, 0, 2, 31),
        ("account", 1, "high", 0),
        ("transfer", 0, 1, 2, 0),
        ("account", 0, "high", 0),
        ("account", 0, "high", 0),
    ],
    cuts=[4],
    shards=1,
)
@settings(max_examples=60, deadline=None)
@given(
    ops=st.lists(tables_oracle.OPS, min_size=8, max_size=40),
    cuts=CUTS,
    shards=st.integers(1, 5),
)
def test_tables_over_shards_write_the_single_process_s_records(
    ops: list[Any], cuts: list[int], shards: int
) -> None:
    same_records(QUERIES, cut(tables_oracle.batch, ops, cuts), LocalShards(shards), RUN)


def test_the_sharded_tables_see_updates() -> None:
    ops: list[Any] = [("account", k, "high", 0) for k in range(4)]
    for i in range(24):
        ops.append(("transfer", i % 10, i % 4, (i * 3 + 1) % 4, i))
        if i % 5 == 0:
            ops.append(("account", i % 4, ("high", "low", "mid")[i % 3], i))
    ops.append(("tombstone", 1))
    seen = same_records(
        QUERIES, cut(tables_oracle.batch, ops, [6, 12, 20, 27]), LocalShards(3), RUN
    )
    assert seen >= 20, seen


@settings(max_examples=25, deadline=None)
@given(
    ops=st.lists(tables_oracle.OPS, min_size=8, max_size=40),
    cuts=CUTS,
    shards=st.integers(1, 4),
    deaths=st.lists(st.tuples(st.integers(1, 6), st.sampled_from(STEPS)), min_size=1, max_size=3),
)
def test_tables_restarted_at_any_step_write_the_single_process_s_records(
    ops: list[Any], cuts: list[int], shards: int, deaths: list[tuple[int, str]]
) -> None:
    same_through_deaths(QUERIES, cut(tables_oracle.batch, ops, cuts), shards, RUN, deaths)
