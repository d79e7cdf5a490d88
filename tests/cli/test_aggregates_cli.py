"""Aggregate queries through the commands: ``run`` writes one row per group that starts or
stops holding, with ``values``; ``--emit appearances`` one per episode; ``count`` counts the
groups that hold; ``explain`` says how the groups are kept; errors name the line and column."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.test_cli import cli
from tests.cli.test_window_cli import MIN, rows, transfer

FAN_IN = "fan_in(b) := transfer(a, b) as t, count(distinct a) >= 2 over 10m."

#: Two episodes of B: paid by A and C, then (the window past them) by D and E. In epochs of
#: two: the watermark reaches 20m in epoch 2, and epoch 3 begins with it (the payers expire).
EPISODES = [
    transfer("t1", "A", "B", 0),
    transfer("t2", "C", "B", 1 * MIN),
    transfer("x1", "X", "Y", 20 * MIN),
    transfer("x2", "X", "Y", 21 * MIN),
    transfer("x3", "X", "Z", 22 * MIN),
    transfer("x4", "X", "Z", 22 * MIN),
    transfer("t3", "D", "B", 23 * MIN),
    transfer("t4", "E", "B", 24 * MIN),
]


def run(tmp: Path, *flags: str) -> list[dict[str, object]]:
    (tmp / "in.jsonl").write_text("\n".join(json.dumps(r) for r in EPISODES) + "\n")
    args = ("-q", FAN_IN, "--edges", str(tmp / "in.jsonl"), "--batch-size", "2")
    return rows(cli("run", *args, "--allowed-lateness", "0s", *flags))


def test_run_writes_each_group_as_it_starts_and_stops_holding(tmp_path: Path) -> None:
    out = run(tmp_path)
    assert [(r["epoch"], r["diff"], r.get("cause"), r["values"]) for r in out] == [
        (1, 1, None, {"count_distinct_a": 2}),
        (3, -1, "expired", {"count_distinct_a": 0}),
        (4, 1, None, {"count_distinct_a": 2}),
    ]
    assert {r["match"]["b"] for r in out} == {"B"} and len({r["match_id"] for r in out}) == 1


def test_emit_appearances_gives_one_row_per_episode(tmp_path: Path) -> None:
    out = run(tmp_path, "--emit", "appearances")
    assert [(r["epoch"], r["diff"]) for r in out] == [(1, 1), (4, 1)]


def test_count_counts_the_groups_that_hold(tmp_path: Path) -> None:
    (tmp_path / "in.jsonl").write_text("\n".join(json.dumps(r) for r in EPISODES) + "\n")
    query = "payers(b) := transfer(a, b) as t, count(*) >= 3."
    done = cli("count", "-q", query, "--edges", str(tmp_path / "in.jsonl"))
    assert done.stdout.decode().splitlines() == ["payers\t1"]  # B, paid 4 times (Y, Z twice)


def test_explain_says_how_the_groups_are_kept_and_the_window_is_the_span() -> None:
    text = cli("explain", FAN_IN).stdout.decode()
    assert "# over the index: fan_in(b, a, t) := transfer(a, b), transfer#events(a, b, t)." in text
    assert (
        "# groups by (b), kept from the body's changes: count(distinct a) >= 2; counting the "
        "bindings whose earliest event lies within 10m of the watermark"
    ) in text
    assert "# span: 10m" in text and "transfer 10m" in text


def test_explain_prints_the_degree_bounds_of_a_two_hop_distinct_count() -> None:
    query = (
        "sg(a, c) := transfer(a, b) as t1, transfer(b, c) as t2, t1.amount > 5, "
        "count(distinct b) >= 4 over 1h."
    )
    text = cli("explain", query).stdout.decode()
    assert "transfer{amount > 5}#out>=4(a), transfer#in>=4(c)" in text  # (the atoms it reads)
    assert (
        "# degree bound (one process; monitor/plan/degrees.py): transfer{amount > 5}#out>=4(a): "
        "a group holds only where a has 4 distinct successors in transfer{amount > 5}"
    ) in text
    assert "changes of transfer#in>=4" in text  # (a vertex reaching the bound seeds its groups)


def test_a_sum_of_a_string_field_is_a_query_error_at_its_place(tmp_path: Path) -> None:
    query = 'outflow(a) :=\n  transfer(a, b) as t, t.channel = "wire",\n  sum(t.channel) > 5.'
    (tmp_path / "in.jsonl").write_text(json.dumps(EPISODES[0]) + "\n")
    done = cli("run", "-q", query, "--edges", str(tmp_path / "in.jsonl"), check=False)
    assert done.returncode != 0
    assert "line 3, column 3: field 'channel' of relation 'transfer' is compared with a number" in (
        done.stderr.decode()
    )


def test_initial_group_rows_carry_their_events_as_streamed_rows_do(tmp_path: Path) -> None:
    """``--preload`` then ``--initial``: epoch 0's row of a group that holds lists the events
    of its bindings, as a row of a streamed epoch does (here, with a single process and with
    workers)."""
    base = [*EPISODES[:2], transfer("t0", "F", "B", 2 * MIN)]
    (tmp_path / "base.jsonl").write_text("\n".join(json.dumps(r) for r in base) + "\n")
    later = [transfer("t5", "G", "B", 3 * MIN)]
    (tmp_path / "in.jsonl").write_text("\n".join(json.dumps(r) for r in later) + "\n")
    query = "payers(b) := transfer(a, b) as t, count(distinct a) >= 2."
    args = ("-q", query, "--preload", str(tmp_path / "base.jsonl"), "--initial")
    args += ("--edges", str(tmp_path / "in.jsonl"), "--output-limit", "2")
    for workers in ((), ("--workers", "1", "--shards", "2")):
        out = rows(cli("run", *args, *workers))
        assert [(r["epoch"], r["diff"], r["values"], r["events"]) for r in out] == [
            (0, 1, {"count_distinct_a": 3}, ["t0", "t1"]),  # (the first 2 of t0, t1, t2)
        ], workers


def test_explain_counts_the_stages_a_path_s_lengths_share() -> None:
    query = (
        "rt(a) := transfer{5,6}(a, a) as p, next(p).ts > p.ts, "
        "next(p).amount >= 0.8 * p.amount, within 7d, distinct."
    )
    text = cli("explain", query).stdout.decode()
    shared = [line for line in text.splitlines() if line.startswith("# stages run once")]
    assert len(shared) == 1 and int(shared[0].rsplit(": ", 1)[1]) >= 4, shared
    single = cli("explain", "pair(a, b) := transfer(a, b) as t, transfer(b, a) as u.").stdout
    assert b"# stages run once" not in single
