"""``bench.payments``' end-to-end inputs and runs: the JSON lines hold the in-process events,
and ``subgraph-monitor run --preload`` on them publishes the in-process run's match deltas."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson
import pytest

from bench.payments import (
    QUERIES,
    delete_lines,
    end_to_end,
    json_lines,
    payments,
    run,
    write_inputs,
)


@pytest.fixture(scope="module")
def data() -> dict[str, np.ndarray]:
    return payments(6_000, 300, seed=1, ring_every=40)


def test_json_lines_hold_the_events(data: dict[str, np.ndarray]) -> None:
    records = [orjson.loads(line) for line in json_lines(data, 1_000, 3_000).splitlines()]
    assert [r["id"] for r in records] == data["ids"][1_000:3_000].tolist()
    for name in ("src", "dst", "amount", "channel", "ts"):
        assert [r[name] for r in records] == data[name][1_000:3_000].tolist(), name
    assert {(r["op"], r["relation"]) for r in records} == {("insert", "transfer")}
    deletes = [orjson.loads(line) for line in delete_lines(np.array([5, 70])).splitlines()]
    assert deletes == [
        {"op": "delete", "relation": "transfer", "id": "tx-5"},
        {"op": "delete", "relation": "transfer", "id": "tx-70"},
    ]


@pytest.mark.parametrize("query", sorted(QUERIES))
def test_end_to_end_counts_what_in_process_counts(
    data: dict[str, np.ndarray], query: str, tmp_path: Path
) -> None:
    """Preload 3,000 events, stream 3,000 in 6 epochs of 500 and 25 deletes: the same match
    deltas, +1 and -1 (the deletes close epochs at the same places)."""
    inputs = write_inputs(data, 3_000, 3_000, 500, tmp_path, "p")
    e2e = end_to_end(QUERIES[query], *inputs, 500)
    inside = run(QUERIES[query], data, 3_000, 3_000, 500, True)
    assert e2e["deltas"] == inside["deltas"] > 0
    if query == "big_ring":
        assert e2e["plus"] > 0 and e2e["minus"] > 0, e2e
