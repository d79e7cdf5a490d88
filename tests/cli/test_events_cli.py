"""Events through ``subgraph-monitor run``: JSON records with ids and fields in, matches with
their events out, checked against the brute-force oracle of the engine tests; bad records."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.cli.test_cli import cli
from tests.engine.test_events_oracle import QUERIES, brute_force, event_records

QUERY_TEXT = "\n".join(str(q) for q in QUERIES)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_run_publishes_each_match_with_its_events_like_the_oracle(
    tmp_path: Path, seed: int
) -> None:
    records, model = event_records(400, seed, ids=14, accounts=4)
    (tmp_path / "q.q").write_text(QUERY_TEXT)
    (tmp_path / "in.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    done = cli(
        "run",
        "-q",
        str(tmp_path / "q.q"),
        "--edges",
        str(tmp_path / "in.jsonl"),
        "--batch-size",
        "37",
        "--quiet",
    )
    current: Counter[tuple[str, tuple[tuple[int, ...], tuple[str, ...]]]] = Counter()
    lines = done.stdout.decode().splitlines()
    for line in lines:
        row = json.loads(line)
        query = next(q for q in QUERIES if q.name == row["query"])
        for var, event in row["edges"].items():
            assert {"id", "src", "dst"} <= set(event), event
            assert var in query.edges
        key = (
            row["query"],
            (tuple(row["match"].values()), tuple(row["edges"][e]["id"] for e in query.edges)),
        )
        current[key] += row["diff"]
        assert current[key] in (0, 1), f"running sum of {key}"
    for query in QUERIES:
        got = {b for (n, b), c in current.items() if n == query.name and c}
        assert got == brute_force(model, query), query.name
    seen = Counter(json.loads(line)["query"] for line in lines)
    assert len(seen) >= 3 and sum(seen.values()) >= 20, f"too few matches to check: {seen}"


def test_bad_event_records_are_skipped_with_their_line(tmp_path: Path) -> None:
    (tmp_path / "q.q").write_text(QUERY_TEXT)
    good = {"relation": "transfer", "id": "tx-1", "src": 0, "dst": 1, "amount": 3}
    bad = [
        {"relation": "transfer", "id": "tx-2", "src": 0, "dst": 1, "amount": "three"},
        {"relation": "transfer", "id": "tx-3", "src": 0, "dst": 1, "amount": {"eur": 3}},
        {"relation": "transfer", "id": "tx-4", "src": 0, "dst": 1, "channel": "x" * 5000},
        {"relation": "transfer", "id": "tx-5", "dst": 1},
        {"relation": "transfer", "id": ["tx-6"], "src": 0, "dst": 1},
    ]
    lines = [json.dumps(good), *map(json.dumps, bad), "not json", json.dumps(good)]
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")
    done = cli("run", "-q", str(tmp_path / "q.q"), "--edges", str(tmp_path / "in.jsonl"))
    err = done.stderr.decode()
    assert "in.jsonl:2: field 'amount' of relation 'transfer' is a number" in err
    assert "in.jsonl:3: field 'amount' must be a number, a string or a boolean" in err
    assert "in.jsonl:4: field 'channel' holds 5,000 characters" in err
    assert "in.jsonl:5: an inserted event needs 'src' and 'dst'; missing 'src'" in err
    assert "in.jsonl:6: id must be a JSON string or an integer" in err
    assert "in.jsonl:7:" in err
    assert "bad input lines skipped 6" in err
    assert "duplicate_insert 1" in err  # the second good line: the same id again
    delete = json.dumps({"op": "delete", "relation": "transfer"})
    (tmp_path / "del.jsonl").write_text(json.dumps(good) + "\n" + delete + "\n")
    done = cli("run", "-q", str(tmp_path / "q.q"), "--edges", str(tmp_path / "del.jsonl"))
    assert "delete_without_id 1" in done.stderr.decode()


def test_output_fields_limit_what_each_matched_event_carries(tmp_path: Path) -> None:
    (tmp_path / "q.q").write_text(QUERY_TEXT)
    there = {"relation": "transfer", "id": "tx-1", "src": 0, "dst": 1, "amount": 3}
    back = {"relation": "transfer", "id": "tx-2", "src": 1, "dst": 0, "amount": 2}
    lines = [json.dumps(r | {"channel": "wire", "note": "x"}) for r in (there, back)]
    (tmp_path / "in.jsonl").write_text("\n".join(lines) + "\n")
    args = ["run", "-q", str(tmp_path / "q.q"), "--edges", str(tmp_path / "in.jsonl"), "--quiet"]
    every = [json.loads(line) for line in cli(*args).stdout.decode().splitlines()]
    limited = [
        json.loads(line)
        for line in cli(*args, "--output-fields", "amount,note").stdout.decode().splitlines()
    ]
    assert every and len(limited) == len(every)
    for full, short in zip(every, limited, strict=True):
        for var, event in full["edges"].items():
            assert set(event) == {"id", "src", "dst", "amount", "channel", "note"}
            assert short["edges"][var] == {
                k: event[k] for k in ("id", "src", "dst", "amount", "note")
            }


def test_times_in_iso_or_milliseconds_and_bad_times_with_their_line(tmp_path: Path) -> None:
    (tmp_path / "q.q").write_text(
        "pass_through(a, b, c) := transfer(a, b) as t1, transfer(b, c) as t2, "
        "t1.ts <= t2.ts, t2.ts <= t1.ts + 10m, t2.amount >= 0.9 * t1.amount.\n"
    )
    records = [
        {
            "relation": "transfer",
            "id": "in",
            "src": "A",
            "dst": "B",
            "amount": 100,
            "ts": "2026-12-02T10:00:00Z",
        },
        {
            "relation": "transfer",
            "id": "out",
            "src": "B",
            "dst": "C",
            "amount": 95,
            "ts": 1_796_205_900_000,
        },  # 10:05 as milliseconds: 5 minutes later
        {
            "relation": "transfer",
            "id": "late",
            "src": "B",
            "dst": "D",
            "amount": 95,
            "ts": "2026-12-02T10:10:00.001Z",
        },  # just past the 10 minutes
        {
            "relation": "transfer",
            "id": "small",
            "src": "B",
            "dst": "E",
            "amount": 80,
            "ts": "2026-12-02T10:01:00+00:00",
        },  # within the time, below 90% of the amount
        {"relation": "transfer", "id": "x", "src": "B", "dst": "F", "ts": "yesterday"},
        {"relation": "transfer", "id": "y", "src": "B", "dst": "G", "ts": "2026-12-02T10:01"},
    ]
    (tmp_path / "in.jsonl").write_text("\n".join(map(json.dumps, records)) + "\n")
    done = cli("run", "-q", str(tmp_path / "q.q"), "--edges", str(tmp_path / "in.jsonl"))
    rows = [json.loads(line) for line in done.stdout.decode().splitlines()]
    assert [(r["match"], r["edges"]["t2"]["id"]) for r in rows] == [
        ({"a": "A", "b": "B", "c": "C"}, "out")
    ]
    assert rows[0]["edges"]["t1"]["ts"] == 1_796_205_600_000  # read as milliseconds
    err = done.stderr.decode()
    assert "in.jsonl:5: field 'ts' 'yesterday' is not an ISO-8601 time" in err
    assert "in.jsonl:6: field 'ts' '2026-12-02T10:01' has no zone offset" in err


def test_emit_appearances_publishes_only_the_plus_ones(tmp_path: Path) -> None:
    records, _ = event_records(300, 4, ids=14, accounts=4)
    (tmp_path / "q.q").write_text(QUERY_TEXT)
    (tmp_path / "in.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    args = ["run", "-q", str(tmp_path / "q.q"), "--edges", str(tmp_path / "in.jsonl")]
    args += ["--batch-size", "20", "--quiet"]
    changes = cli(*args).stdout.decode().splitlines()
    appearances = cli(*args, "--emit", "appearances").stdout.decode().splitlines()
    assert any('"diff":-1' in line for line in changes), "the stream retracts some matches"
    assert appearances == [line for line in changes if '"diff":1,' in line]
