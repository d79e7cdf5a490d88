"""The typologies benchmark on a tiny stream: its in-process run and ``subgraph-monitor run``
on the same JSON lines publish the same rows (the in-process figures are what a user gets,
minus decoding and encoding), groups start and stop, and the report prints every query."""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.timed_payments import write_stream
from bench.timed_stream import json_lines
from bench.typologies import QUERIES, end_to_end, ours, report, stream_of


def test_in_process_and_end_to_end_agree_and_the_report_prints(tmp_path: Path) -> None:
    args = argparse.Namespace(
        events=6_000, days=2.0, accounts=40, seed=3, lateness_ms=5_000, batch=500
    )
    jsonl = tmp_path / "stream.jsonl"
    write_stream(stream_of(args), jsonl, json_lines)
    results = {}
    queries = [q for q in QUERIES if q != "round_trip_4"]  # (round_trip's shorter twin)
    for query in queries:
        figures = ours(query, args)
        e2e = end_to_end(query, args, jsonl)
        assert (e2e["plus"], e2e["minus"]) == (figures["plus"], figures["minus"]), query
        assert figures["plus"] >= 1, (query, figures)
        if query != "round_trip":  # (groups stop holding; no round trip's event is deleted)
            assert figures["minus"] >= 1, (query, figures)
        results[query] = {"ours": figures, "e2e": e2e}
    text = report(args, results)
    assert all(f"| {query} | " in text for query in queries), text
