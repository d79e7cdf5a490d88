"""The event-time benchmark's stream and its three counts: brute force, ours, Flink SQL.

On a tiny timestamped stream (a few accounts, so both patterns close often, and epochs short
enough that events expire between them), the number of matches of ``layering_ring`` and
``pass_through`` is counted by a brute force over the events, by our engine (its ``+1``
deltas, in process and through ``subgraph-monitor run`` on the JSON lines), and by the Flink
SQL interval joins of ``bench.flink_sql`` (skipped, with the reason, without Java or pyflink).
With the retention no longer than the span, the engine publishes fewer, and exactly those the
brute force finds in the window at the end of the epoch that completes them.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import orjson
import pytest

from bench.flink_sql import failure_reason, missing, run_flink
from bench.timed_payments import QUERIES, end_to_end, ours
from bench.timed_stream import DAY_MS, I64, TimedStream, csv_lines, json_lines, timed_payments
from tests.cli.test_cli import cli

ROOT = Path(__file__).resolve().parents[2]
LATENESS_MS = 5_000
MINUTE_MS = 60_000


@pytest.fixture(scope="module")
def stream() -> TimedStream:
    return timed_payments(3_000, 2.0, 30, seed=5, lateness_ms=LATENESS_MS, plant_every=300)


@pytest.fixture(scope="module")
def matches(stream: TimedStream) -> dict[str, I64]:
    """Every match of each query over the whole stream: rows of event positions."""
    return {"layering_ring": layering_rings(stream), "pass_through": pass_throughs(stream)}


@pytest.fixture(scope="module")
def brute(matches: dict[str, I64]) -> dict[str, int]:
    return {query: found.shape[0] for query, found in matches.items()}


def pass_throughs(s: TimedStream) -> I64:
    """Every pair of events (t1, t2) that is a pass-through."""
    amount = s.amount
    t1, t2 = np.nonzero(
        (s.dst[:, None] == s.src[None, :])
        & (s.ts[:, None] <= s.ts[None, :])
        & (s.ts[None, :] <= s.ts[:, None] + 10 * MINUTE_MS)
        & (amount[None, :] >= 0.9 * amount[:, None])
    )
    a, b, c = s.src[t1], s.dst[t1], s.dst[t2]
    keep = (a != b) & (b != c) & (a != c)
    return np.stack([t1[keep], t2[keep]], axis=1)


def layering_rings(s: TimedStream) -> I64:
    """Every triple of events (t1, t2, t3) that is a layering ring."""
    big = np.flatnonzero(s.amount >= 1000)
    by_pair: dict[tuple[int, int], list[int]] = {}
    for e in big.tolist():
        by_pair.setdefault((int(s.src[e]), int(s.dst[e])), []).append(e)
    found = []
    for (a, b), firsts in by_pair.items():
        for (b2, c), seconds in by_pair.items():
            if b2 != b or len({a, b, c}) < 3:
                continue
            thirds = by_pair.get((c, a), [])
            for e1 in firsts:
                for e2 in seconds:
                    for e3 in thirds:
                        ts1, ts2, ts3 = (int(s.ts[e]) for e in (e1, e2, e3))
                        if ts1 < ts2 < ts3 <= ts1 + DAY_MS:
                            found.append((e1, e2, e3))
    return np.array(found, np.int64).reshape(-1, 3)


def test_the_stream_is_in_time_with_its_planted_patterns(stream: TimedStream) -> None:
    ts = stream.ts
    assert not (ts < np.maximum.accumulate(ts) - LATENESS_MS).any(), "an event is late"
    assert (np.diff(ts) < 0).any(), "no disorder at all"
    assert ts.max() - ts.min() > 1.9 * DAY_MS
    assert stream.rings.shape == (10, 3) and stream.passes.shape == (10, 2)
    at = ts[stream.rings]
    assert (at[:, 0] < at[:, 1]).all() and (at[:, 1] < at[:, 2]).all()
    assert (at[:, 2] - at[:, 0] <= DAY_MS).all()
    assert (stream.amount[stream.rings] >= 1000).all()
    assert (stream.dst[stream.rings[:, 2]] == stream.src[stream.rings[:, 0]]).all()
    first, second = stream.passes.T
    assert (stream.cents[second] >= 0.9 * stream.cents[first]).all()
    assert (stream.dst[first] == stream.src[second]).all()
    assert len(set(stream.rings.ravel()) | set(stream.passes.ravel())) == 50


def test_csv_and_json_lines_hold_the_stream(stream: TimedStream) -> None:
    rows = np.loadtxt(csv_lines(stream).decode().splitlines(), delimiter=",")
    assert (rows[:, 0] == np.arange(len(stream))).all()
    assert (rows[:, 1] == stream.src).all() and (rows[:, 2] == stream.dst).all()
    assert (rows[:, 3] == stream.amount).all() and (rows[:, 4] == stream.ts).all()
    records = [orjson.loads(line) for line in json_lines(stream).splitlines()]
    assert [r["amount"] for r in records] == stream.amount.tolist()
    assert [r["ts"] for r in records] == stream.ts.tolist()
    assert records[7] == {
        "op": "insert",
        "relation": "transfer",
        "id": "tx-7",
        "src": int(stream.src[7]),
        "dst": int(stream.dst[7]),
        "amount": float(stream.amount[7]),
        "ts": int(stream.ts[7]),
    }


@pytest.mark.parametrize("query", sorted(QUERIES))
def test_ours_counts_what_the_brute_force_counts(
    stream: TimedStream, brute: dict[str, int], query: str
) -> None:
    """With a retention longer than the span by more than an epoch's event time (100 events
    here: about 1.6 hours), every match is published once."""
    figures = ours(query, stream, 100, "26h", LATENESS_MS)
    assert brute[query] >= 20, f"too few matches to check: {brute[query]}"
    assert figures["plus"] == brute[query]
    assert figures["planted_found"] == figures["planted"] == 10
    assert figures["late"] == 0 and figures["expired"] > 0


@pytest.mark.parametrize(
    ("query", "retention"), [("layering_ring", "24h"), ("pass_through", "default")]
)
def test_with_retention_the_span_every_match_is_published(
    stream: TimedStream, brute: dict[str, int], query: str, retention: str
) -> None:
    """With the retention the query's span (its default), every match is still published once:
    an epoch expires what the watermark it begins with has passed, so an event that is not
    late lives through the epoch it arrives in, whatever the epoch's size (epochs expiring at
    the watermark they end with lost the matches completed as their window ended)."""
    figures = ours(query, stream, 100, retention, LATENESS_MS)
    assert figures["plus"] == brute[query]
    assert figures["late"] == 0 and figures["expired"] > 0


def test_run_on_the_json_lines_counts_the_same(
    stream: TimedStream, brute: dict[str, int], tmp_path: Path
) -> None:
    (tmp_path / "q.q").write_text("\n".join(QUERIES.values()))
    (tmp_path / "in.jsonl").write_bytes(json_lines(stream))
    done = cli(
        *("run", "-q", str(tmp_path / "q.q"), "--edges", str(tmp_path / "in.jsonl")),
        *("--batch-size", "100", "--retention", "transfer=26h", "--allowed-lateness", "5s"),
    )
    rows = [orjson.loads(line) for line in done.stdout.splitlines()]
    assert Counter(r["query"] for r in rows if r["diff"] > 0) == brute


@pytest.mark.parametrize(
    ("query", "retention"), [("layering_ring", "24h"), ("pass_through", "default")]
)
def test_end_to_end_counts_what_in_process_counts(
    stream: TimedStream, query: str, retention: str, tmp_path: Path
) -> None:
    """The benchmark's end-to-end run (``subgraph-monitor run`` on the JSON lines, its summary
    parsed) reads every event in the same epochs and reports the in-process run's +1 and -1
    deltas (-1s too: over two days, matches expire)."""
    jsonl = tmp_path / "in.jsonl"
    jsonl.write_bytes(json_lines(stream))
    e2e = end_to_end(query, len(stream), jsonl, 100, retention, LATENESS_MS)
    inside = ours(query, stream, 100, retention, LATENESS_MS)
    assert (e2e["updates"], e2e["applied"], e2e["epochs"]) == (3_000, 3_000, 30)
    assert (e2e["plus"], e2e["minus"]) == (inside["plus"], inside["minus"])
    assert e2e["plus"] >= 20 and e2e["minus"] > 0
    assert e2e["rss_mib"] > 0 and e2e["wall_s"] >= e2e["elapsed_s"] > 0


def test_the_benchmark_reports_both_figures_and_whether_they_agree(tmp_path: Path) -> None:
    """A whole run on a tiny stream without Flink: the JSON lines are written to the workdir
    (and kept), the report has the end-to-end and in-process figures, and they agree."""
    workdir, out = tmp_path / "work", tmp_path / "report.md"
    command = [sys.executable, "-m", "bench.timed_payments", "--no-flink"]
    command += ["--events", "3000", "--days", "2", "--accounts", "30", "--batch", "100"]
    command += ["--runs", "pass_through=default", "--workdir", str(workdir), "--out", str(out)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [p.name for p in workdir.glob("*.jsonl")] == ["transfers-3000-2d-30a-5000ms-1.jsonl"]
    assert not list(workdir.glob("*.csv"))  # Flink's input only for Flink
    text = out.read_text()
    table = text.split("\n\n")[2].splitlines()
    assert "**end to end** events/s" in table[0] and "in process events/s" in table[0]
    row = [cell.strip() for cell in table[2].split("|")]
    assert row[1] == "pass_through, 10m (default)" and row[3] == "--no-flink"
    assert row[7] == row[8] and row[-2] == "yes", row  # +1s end to end and in process
    assert "wall s" in text and "In process, the engine alone" in text


@pytest.mark.skipif(missing() is not None, reason=f"Flink SQL baseline: {missing()}")
def test_flink_sql_counts_what_the_brute_force_counts(
    stream: TimedStream, brute: dict[str, int], tmp_path: Path
) -> None:
    csv = tmp_path / "transfers.csv"
    csv.write_bytes(csv_lines(stream))
    for query, expected in brute.items():
        figures = run_flink(csv, query, LATENESS_MS, timeout=600)
        assert figures["matches"] == expected, (query, figures)
        assert figures["interval_joins"] >= 1 and figures["other_joins"] == 0, figures


def test_a_failed_flink_job_is_reported_by_its_root_cause() -> None:
    """A PyFlink warning that says "Error" before anything fails is not the reason; the last
    ``Caused by:`` of the Java exception is."""
    stderr = "\n".join(
        [
            "Failed to import GCSFileSystem; loading of this filesystem will be skipped. Error",
            "Traceback (most recent call last):",
            "    raise Py4JJavaError(",
            "py4j.protocol.Py4JJavaError: An error occurred while calling o8.executeSql.",
            ": org.apache.flink.table.api.TableException: Cannot generate a valid plan.",
            "Caused by: org.apache.flink.table.api.TableException: Window aggregate can only be",
            "\tat org.apache.flink.table.planner.Foo.bar(Foo.java:1)",
        ]
    )
    assert failure_reason(stderr, 1).startswith("org.apache.flink.table.api.TableException: Win")
    no_cause = "\n".join(stderr.splitlines()[:4])
    assert failure_reason(no_cause, 1).startswith("py4j.protocol.Py4JJavaError: An error")
    assert failure_reason("", 3) == "exit 3"
