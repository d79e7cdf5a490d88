"""The command line, run as a user runs it: a subprocess of ``python -m monitor``."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
TRI = "tri(a, b, c) := e(a, b), e(b, c), e(a, c), a < b, b < c."
PUBLISHED = {
    "ca-grqc.txt.gz": 48_260,
    "oregon1-010331.txt.gz": 17_144,
    "ego-facebook.txt.gz": 1_612_010,
}


def cli(
    *args: str, stdin: bytes | None = None, env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess[bytes]:
    full_env = {**os.environ, **(env or {})}
    done = subprocess.run(
        [sys.executable, "-m", "monitor", *args],
        input=stdin,
        capture_output=True,
        env=full_env,
        cwd=ROOT,
        timeout=600,
    )
    if check and done.returncode != 0:
        raise AssertionError(f"exit {done.returncode}: {done.stderr.decode()}")
    return done


def deltas(out: bytes) -> list[dict[str, object]]:
    """The output records without their ``match_id`` (checked to be 16 hex digits; what it
    is, is ``tests/service/test_match_ids.py``'s)."""
    rows = [json.loads(line) for line in out.splitlines()]
    for row in rows:
        assert re.fullmatch("[0-9a-f]{16}", row.pop("match_id")), row
    return rows


def replay(rows: list[dict[str, object]]) -> dict[tuple[str, tuple[tuple[str, object], ...]], int]:
    current: Counter[tuple[str, tuple[tuple[str, object], ...]]] = Counter()
    for row in rows:
        match = row["match"]
        assert isinstance(match, dict)
        key = (str(row["query"]), tuple(match.items()))
        current[key] += int(row["diff"])  # type: ignore[call-overload]
        if current[key] == 0:
            del current[key]
    return dict(current)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_count_gives_the_published_triangle_counts(datasets: Path, name: str) -> None:
    done = cli("count", "--query", TRI, "--edges", str(datasets / name), "--undirected")
    assert done.stdout.decode() == f"tri\t{PUBLISHED[name]}\n"


def shuffled_stream_with_deletes(source: Path, target: Path, seed: int) -> None:
    with gzip.open(source, "rt") as f:
        edges = np.loadtxt(f, dtype=np.int64, comments="#").reshape(-1, 2)
    rng = np.random.default_rng(seed)
    edges = edges[rng.permutation(edges.shape[0])]
    victims = set(rng.choice(edges.shape[0], edges.shape[0] // 10, replace=False).tolist())
    lines: list[str] = []
    pending: list[tuple[int, int]] = []
    removed: list[tuple[int, int]] = []
    for i, (u, v) in enumerate(edges.tolist()):
        lines.append(f"{u} {v}")
        if i in victims:
            pending.append((u, v))
        if len(pending) >= 400:
            # Delete them (as the reversed edge: the same undirected edge) well after insertion.
            lines.extend(f"- {b} {a}" for a, b in pending)
            removed.extend(pending)
            pending = []
    lines.extend(f"+ {a} {b}" for a, b in removed)
    target.write_text("# shuffled, with deletions and re-insertions\n" + "\n".join(lines) + "\n")


@pytest.mark.slow
@pytest.mark.parametrize("name", ["ca-grqc.txt.gz", "ego-facebook.txt.gz"])
def test_run_deltas_sum_to_the_published_count(datasets: Path, name: str, tmp_path: Path) -> None:
    stream = tmp_path / "stream.txt"
    shuffled_stream_with_deletes(datasets / name, stream, seed=5)
    done = cli("run", "-q", TRI, "--edges", str(stream), "--undirected", "--batch-size", "5000")
    rows = deltas(done.stdout)
    assert sum(int(r["diff"]) for r in rows) == PUBLISHED[name]  # type: ignore[call-overload]
    assert any(r["diff"] == -1 for r in rows)
    assert len(replay(rows)) == PUBLISHED[name]
    assert b"match deltas/s" in done.stderr


def test_example_job_runs_and_replays_to_the_current_matches() -> None:
    done = cli(
        "run", "-q", "examples/fraud.q", "--edges", "examples/transfers.txt", "--batch-size", "25"
    )
    rows = deltas(done.stdout)
    epochs = [int(r["epoch"]) for r in rows]  # type: ignore[call-overload]
    assert epochs == sorted(epochs) and epochs[0] >= 1
    current = replay(rows)
    counted = cli("count", "-q", "examples/fraud.q", "--edges", "examples/transfers.txt")
    expected = dict(line.split("\t") for line in counted.stdout.decode().splitlines())
    for query, n in expected.items():
        assert sum(1 for q, _ in current if q == query) == int(n)
    assert all(isinstance(v, str) for row in rows for v in row["match"].values())  # type: ignore[attr-defined]


def test_preload_and_initial_emit_the_present_matches_at_epoch_zero(tmp_path: Path) -> None:
    base = tmp_path / "base.txt"
    base.write_text("1 2\n2 3\n1 3\n3 4\n")
    more = tmp_path / "more.txt"
    more.write_text("2 4\n- 1 3\n")
    done = cli(
        "run",
        "-q",
        "triangle",
        "--preload",
        str(base),
        "--initial",
        "--edges",
        str(more),
        "--batch-size",
        "1",
    )
    rows = deltas(done.stdout)
    assert rows == [
        {"query": "triangle", "epoch": 0, "diff": 1, "match": {"a1": 1, "a2": 2, "a3": 3}},
        {"query": "triangle", "epoch": 1, "diff": 1, "match": {"a1": 2, "a2": 3, "a3": 4}},
        {"query": "triangle", "epoch": 2, "diff": -1, "match": {"a1": 1, "a2": 2, "a3": 3}},
    ]


def test_stdin_json_and_string_ids_round_trip() -> None:
    records = [
        {"op": "insert", "src": "alice", "dst": 7, "relation": "pays"},
        {"op": "insert", "src": 7, "dst": "12", "relation": "pays"},
        {"op": "insert", "src": "12", "dst": "alice", "relation": "pays"},
        {"op": "delete", "src": 7, "dst": "12", "relation": "pays"},
    ]
    stdin = "\n".join(json.dumps(r) for r in records).encode() + b"\n"
    query = "ring(a, b, c) := pays(a, b), pays(b, c), pays(c, a), distinct."
    done = cli("run", "-q", query, "--edges", "-", "--batch-size", "3", stdin=stdin)
    rows = deltas(done.stdout)
    matches = {(r["epoch"], r["diff"], tuple(r["match"].values())) for r in rows}  # type: ignore[attr-defined]
    rotations = {("alice", 7, "12"), (7, "12", "alice"), ("12", "alice", 7)}
    assert matches == {(1, 1, m) for m in rotations} | {(2, -1, m) for m in rotations}


def test_bad_lines_are_reported_counted_and_skipped(tmp_path: Path) -> None:
    edges = tmp_path / "edges.txt"
    edges.write_text("1 2\n2 3\nthis is not an edge at all\n1 3\n+ e(1,\n")
    done = cli("run", "-q", "triangle", "--edges", str(edges))
    assert len(deltas(done.stdout)) == 1
    err = done.stderr.decode()
    assert f"{edges}:3" in err and f"{edges}:5" in err
    assert "bad input lines skipped 2" in err


def test_strict_mode_stops_at_the_first_bad_line(tmp_path: Path) -> None:
    edges = tmp_path / "edges.txt"
    edges.write_text("1 2\n2 3\nnot an edge line here\n1 3\n")
    done = cli("run", "-q", "triangle", "--edges", str(edges), "--strict", check=False)
    assert done.returncode == 3
    assert f"{edges}:3" in done.stderr.decode()


def test_an_invalid_query_exits_2_naming_line_and_column() -> None:
    done = cli("run", "-q", "q(a, b) := e(a, b), e(b, c).", "--edges", "-", check=False, stdin=b"")
    assert done.returncode == 2
    err = done.stderr.decode()
    assert "line 1, column" in err and "'c'" in err


def test_a_setting_out_of_range_exits_2() -> None:
    done = cli("run", "-q", "triangle", "--edges", "-", "--batch-size", "0", check=False, stdin=b"")
    assert done.returncode == 2
    assert "batch_size" in done.stderr.decode()


def test_settings_come_from_the_environment() -> None:
    stdin = b"1 2\n2 3\n1 3\n"
    done = cli("run", "-q", "triangle", "--edges", "-", stdin=stdin, env={"SGM_BATCH_SIZE": "1"})
    assert [r["epoch"] for r in deltas(done.stdout)] == [3]
    assert "epochs 3" in done.stderr.decode()


def test_progress_lines_on_long_inputs(tmp_path: Path) -> None:
    edges = tmp_path / "edges.txt"
    rng = np.random.default_rng(3)
    pairs = rng.integers(0, 2000, size=(60_000, 2))
    edges.write_text("\n".join(f"{u} {v}" for u, v in pairs.tolist()) + "\n")
    done = cli(
        "run",
        "-q",
        "triangle",
        "--edges",
        str(edges),
        "--batch-size",
        "100",
        env={"SGM_PROGRESS_SECONDS": "0.05"},
    )
    assert b"updates read (" in done.stderr


def test_explain_prints_every_delta_query_and_the_static_plan() -> None:
    done = cli("explain", "triangle")
    text = done.stdout.decode()
    assert "dtriangle/de#1 := de(a1, a2), e(a1, a3), e(a2, a3)" in text
    assert "dtriangle/de#3 := e'(a1, a2), e'(a1, a3), de(a2, a3)" in text
    assert "triangle := e'(a1, a2), e'(a1, a3), e'(a2, a3)" in text
