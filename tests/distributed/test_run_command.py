"""``subgraph-monitor run --workers N``: the same deltas as the single process, epoch for epoch
(sorted within an epoch), with the same match ids; options it does not take yet refused."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

QUERIES = (
    "tri(a, b, c) := e(a, b), e(b, c), e(a, c), a < b, b < c.\n"
    "square(a, b, c, d) := e(a, b), e(b, c), e(c, d), e(d, a), a < b, a < c, a < d, b != d."
)


def run(*arguments: str, **env: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "monitor", "run", *arguments]
    return subprocess.run(
        command, capture_output=True, text=True, timeout=300, env={**os.environ, **env}
    )


def by_epoch(stdout: str) -> dict[int, list[str]]:
    epochs: dict[int, list[Any]] = defaultdict(list)
    for line in stdout.splitlines():
        epochs[json.loads(line)["epoch"]].append(line)
    return {epoch: sorted(lines) for epoch, lines in epochs.items()}


@pytest.mark.parametrize("emit", ["changes", "appearances"])
def test_run_with_workers_writes_the_single_process_s_deltas(tmp_path: Path, emit: str) -> None:
    pytest.importorskip("ray", reason="ray is not installed (the `distributed` extra)")
    rng = np.random.default_rng(6)
    lines = []
    for _ in range(1500):
        a, b = rng.integers(0, 40, 2).tolist()
        lines.append(f"{'-' if rng.random() < 0.2 else '+'} {a} {b}\n")
    edges = tmp_path / "edges.txt"
    edges.write_text("".join(lines))
    common = ["--undirected", "--edges", str(edges), "-q", QUERIES, "-b", "200", "--emit", emit]
    alone = run(*common)
    sharded = run(*common, "--workers", "2", "--shards", "3", SGM_PROGRESS_SECONDS="0.001")
    assert alone.returncode == 0, alone.stderr
    assert sharded.returncode == 0, sharded.stderr
    expected = by_epoch(alone.stdout)
    assert len(expected) > 3 and sum(map(len, expected.values())) > 100
    assert by_epoch(sharded.stdout) == expected
    assert "on 3 shards" in sharded.stderr and "shard 2: pairs" in sharded.stderr
    progress = [line for line in sharded.stderr.splitlines() if "3 shards: pairs max/mean" in line]
    assert len(progress) > 3 and "MiB exchanged" in progress[-1]


def killed_and_run_again(common: list[str], tmp_path: Path, expected: dict[int, list[str]]) -> str:
    """With 2 workers, 3 shards and a state directory: a shard that dies after preparing an
    epoch, and the driver's rerun, write the uninterrupted run's file byte for byte (the
    single process's records); ``state inspect`` of the directory."""
    durable = [*common, "--workers", "2", "--shards", "3", "--state-dir", str(tmp_path / "s")]
    whole, cut = tmp_path / "whole.jsonl", tmp_path / "cut.jsonl"
    done = run(*durable[:-2], "--state-dir", str(tmp_path / "w"), "--output", str(whole))
    assert done.returncode == 0, done.stderr
    died = run(
        *durable, "--output", str(cut), SGM_FAILPOINT="shard_after_prepare", SGM_FAILPOINT_HIT="9"
    )
    assert died.returncode != 0 and "shard" in died.stderr
    again = run(*durable, "--output", str(cut))
    assert again.returncode == 0, again.stderr
    assert "(continuing after epoch" in again.stderr
    assert cut.read_bytes() == whole.read_bytes()
    assert by_epoch(whole.read_text()) == expected
    shown = subprocess.run(
        [sys.executable, "-m", "monitor", "state", "inspect", str(tmp_path / "s")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    return shown.stdout


@pytest.mark.parametrize("fields", [[], ["--output-fields", "amount"]])
def test_the_shipped_payments_with_workers(fields: list[str], tmp_path: Path) -> None:
    """Events with fields, predicates, event time and a window (``examples/payments.q``): the
    records, each edge variable's event with its fields, ``match_id`` and ``cause``, are the
    single process's, epoch for epoch; with a state directory, a shard that dies after
    preparing an epoch and the driver's rerun write the uninterrupted run's file, byte for
    byte, and ``state inspect`` counts each live event once."""
    pytest.importorskip("ray", reason="ray is not installed (the `distributed` extra)")
    common = ["--query", "examples/payments.q", "--edges", "examples/payments.jsonl"]
    common += ["--batch-size", "7", *fields]
    alone = run(*common)
    sharded = run(*common, "--workers", "2", "--shards", "3")
    assert alone.returncode == 0, alone.stderr
    assert sharded.returncode == 0, sharded.stderr
    expected = by_epoch(alone.stdout)
    assert sum(map(len, expected.values())) >= 4 and '"cause":"expired"' in alone.stdout
    assert by_epoch(sharded.stdout) == expected
    event_time = [line for line in alone.stderr.splitlines() if "event time:" in line]
    assert len(event_time) == 1 and "expired 0," not in event_time[0]
    assert event_time[0] in sharded.stderr.splitlines()  # (watermark, expired, late)
    if fields:
        return
    shown = killed_and_run_again(common, tmp_path, expected)
    counted = re.findall(r"events ([\d,]+)", shown)
    assert len(counted) == 3 and sum(int(n.replace(",", "")) for n in counted) > 0


def test_preload_and_initial_as_the_single_process(tmp_path: Path) -> None:
    """``--preload`` and ``--initial`` with workers: epoch 0 holds the preloaded graph's
    matches and the epochs after it the single process's deltas; with a state directory, a
    death after the shards' snapshots but before the driver recorded epoch 0 starts over."""
    pytest.importorskip("ray", reason="ray is not installed (the `distributed` extra)")
    rng = np.random.default_rng(9)
    preload, edges = tmp_path / "preload.txt", tmp_path / "edges.txt"
    preload.write_text("".join(f"{a} {b}\n" for a, b in rng.integers(0, 40, (300, 2)).tolist()))
    lines = []
    for _ in range(600):
        a, b = rng.integers(0, 40, 2).tolist()
        lines.append(f"{'-' if rng.random() < 0.3 else '+'} {a} {b}\n")
    edges.write_text("".join(lines))
    common = ["--undirected", "--edges", str(edges), "-q", QUERIES, "-b", "100"]
    common += ["--preload", str(preload), "--initial"]
    alone = run(*common)
    assert alone.returncode == 0, alone.stderr
    expected = by_epoch(alone.stdout)
    assert len(expected[0]) > 10 and len(expected) == 7
    sharded = run(*common, "--workers", "1", "--shards", "2")
    assert sharded.returncode == 0, sharded.stderr
    assert by_epoch(sharded.stdout) == expected
    state, output = tmp_path / "state", tmp_path / "out.jsonl"
    durable = [*common, "--workers", "1", "--shards", "2", "--state-dir", str(state)]
    durable += ["--output", str(output)]
    died = subprocess.run(
        [sys.executable, "-m", "monitor", "run", *durable],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "SGM_FAILPOINT": "after_shards_checkpoint"},
    )
    assert died.returncode != 0 and output.stat().st_size > 0  # (epoch 0 written, not recorded)
    again = run(*durable)
    assert again.returncode == 0, again.stderr
    assert by_epoch(output.read_text()) == expected


def test_a_state_directory_is_continued_only_as_it_was_built(tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="ray is not installed (the `distributed` extra)")
    edges = tmp_path / "edges.txt"
    edges.write_text("".join(f"{a} {a + 1}\n{a} {a + 2}\n" for a in range(50)))
    state, output = tmp_path / "state", tmp_path / "out.jsonl"
    common = ["--edges", str(edges), "-q", QUERIES, "--state-dir", str(state), "-b", "10"]
    first = run(*common, "--workers", "1", "--shards", "2", "--output", str(output))
    assert first.returncode == 0, first.stderr
    shown = subprocess.run(
        [sys.executable, "-m", "monitor", "state", "inspect", str(state)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    assert "the partitioned engine's, 2 shards" in shown.stdout
    assert "epoch            10" in shown.stdout
    pairs = [line for line in shown.stdout.splitlines() if line.startswith("  shard ")]
    assert len(pairs) == 2 and all("e/src" in line and "e/dst" in line for line in pairs)
    other_shards = run(*common, "--workers", "1", "--shards", "3", "--output", str(output))
    assert other_shards.returncode != 0
    assert "was built with shards=2, this run has shards=3" in other_shards.stderr
    alone = run(*common, "--output", str(output))
    assert alone.returncode != 0
    assert "holds the partitioned engine's state; run with --workers" in alone.stderr
    single_state = tmp_path / "single"
    assert (
        run("--edges", str(edges), "-q", QUERIES, "--state-dir", str(single_state)).returncode == 0
    )
    workers = run(
        "--edges", str(edges), "-q", QUERIES, "--state-dir", str(single_state), "--workers", "1"
    )
    assert workers.returncode != 0
    assert "does not hold the partitioned engine's state" in workers.stderr


def test_bad_lines_are_skipped_as_by_the_single_process(tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="ray is not installed (the `distributed` extra)")
    edges = tmp_path / "edges.txt"
    edges.write_text("1 2\n2 3\n1 3\n? 4 5\n7\n3 4\n+ 1 4\n2 4\n1 2 3 4 5\n")
    common = ["--undirected", "--edges", str(edges), "-q", QUERIES, "-b", "3"]
    alone, sharded = run(*common), run(*common, "--workers", "1")
    assert alone.returncode == 0, alone.stderr
    assert sharded.returncode == 0, sharded.stderr
    assert by_epoch(sharded.stdout) == by_epoch(alone.stdout)
    assert '"query":"tri","epoch":2' in alone.stdout
    skipped = [line for line in alone.stderr.splitlines() if "skipped" in line]
    assert len(skipped) == 4  # (three lines, and the count)
    assert [line for line in sharded.stderr.splitlines() if "skipped" in line] == skipped


def test_payments_preloaded_with_initial_matches(tmp_path: Path) -> None:
    """Events preloaded (their times move the clock, their window expires them) and the
    preloaded matches as epoch 0, then the rest streamed: the single process's records."""
    pytest.importorskip("ray", reason="ray is not installed (the `distributed` extra)")
    lines = Path("examples/payments.jsonl").read_text().splitlines(keepends=True)
    preload, edges = tmp_path / "preload.jsonl", tmp_path / "edges.jsonl"
    preload.write_text("".join(lines[:60]))
    edges.write_text("".join(lines[60:]))
    common = ["--query", "examples/payments.q", "--edges", str(edges), "-b", "5"]
    common += ["--preload", str(preload), "--initial"]
    alone, sharded = run(*common), run(*common, "--workers", "2", "--shards", "3")
    assert alone.returncode == 0, alone.stderr
    assert sharded.returncode == 0, sharded.stderr
    expected = by_epoch(alone.stdout)
    assert 0 in expected and len(expected) > 1
    assert by_epoch(sharded.stdout) == expected


def test_bad_event_records_are_skipped_as_by_the_single_process(tmp_path: Path) -> None:
    """Events: a line that is not JSON, an amount that is not a number where a query compares
    one, a record without its pair, and a late transfer (older than the window when it comes)
    are skipped or refused as the single process skips and refuses them."""
    pytest.importorskip("ray", reason="ray is not installed (the `distributed` extra)")

    def transfer(tx: int, src: str, dst: str, amount: object, hour: int) -> str:
        body = {"relation": "transfer", "id": f"tx-{tx}", "src": src, "dst": dst}
        return json.dumps(
            {**body, "amount": amount, "ts": f"2026-11-{18 + hour // 24}T{hour % 24:02d}:00:00Z"}
        )

    lines = [
        transfer(1, "a", "b", 2000, 0),
        transfer(2, "b", "c", 1500, 1),
        "not json at all",
        transfer(3, "c", "a", "lots", 2),
        '{"relation": "transfer", "id": "tx-4", "amount": 5}',
        transfer(5, "c", "a", 1200, 3),
        *(transfer(10 + h, "x", "y", 10, h) for h in range(4, 60, 6)),
        transfer(6, "a", "b", 3000, 1),
        transfer(7, "b", "d", 2900, 62),
    ]
    events = tmp_path / "events.jsonl"
    events.write_text("".join(line + "\n" for line in lines))
    common = ["--query", "examples/payments.q", "--edges", str(events), "-b", "3"]
    alone, sharded = run(*common), run(*common, "--workers", "2", "--shards", "3")
    assert alone.returncode == 0, alone.stderr
    assert sharded.returncode == 0, sharded.stderr
    assert by_epoch(sharded.stdout) == by_epoch(alone.stdout)
    assert '"query":"layering_ring"' in alone.stdout
    skipped = [line for line in alone.stderr.splitlines() if "skipped" in line]
    assert len(skipped) >= 3
    assert [line for line in sharded.stderr.splitlines() if "skipped" in line] == skipped
    event_time = [line for line in alone.stderr.splitlines() if "event time:" in line]
    assert len(event_time) == 1 and "late 1" in event_time[0]
    assert event_time[0] in sharded.stderr.splitlines()


def test_run_joins_a_ray_cluster_of_two_nodes(tmp_path: Path) -> None:
    """``--ray-address``: the shards run on an existing cluster (two nodes here, the shards
    spread over them), with the single process's deltas."""
    pytest.importorskip("ray", reason="ray is not installed (the `distributed` extra)")
    from ray.cluster_utils import Cluster

    rng = np.random.default_rng(10)
    edges = tmp_path / "edges.txt"
    edges.write_text("".join(f"{a} {b}\n" for a, b in rng.integers(0, 50, (800, 2)).tolist()))
    common = ["--undirected", "--edges", str(edges), "-q", QUERIES, "-b", "100"]
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        cluster.add_node(num_cpus=1)
        sharded = run(*common, "--workers", "2", "--shards", "4", "--ray-address", cluster.address)
    finally:
        cluster.shutdown()  # type: ignore[no-untyped-call]
    alone = run(*common)
    assert alone.returncode == 0, alone.stderr
    assert sharded.returncode == 0, sharded.stderr
    assert by_epoch(sharded.stdout) == by_epoch(alone.stdout) and len(by_epoch(alone.stdout)) > 5
    assert "on 4 shards" in sharded.stderr


def test_the_shipped_fraud_example_with_workers(tmp_path: Path) -> None:
    """The first example a user runs (``make run``: account names as vertex ids, a label, ``a <
    b`` on names, ``distinct``): the single process's deltas epoch for epoch; with a state
    directory, a shard that dies after preparing an epoch and the driver's rerun write the
    uninterrupted run's file, byte for byte."""
    pytest.importorskip("ray", reason="ray is not installed (the `distributed` extra)")
    root = Path(__file__).resolve().parents[2] / "examples"
    common = ["--query", str(root / "fraud.q"), "--edges", str(root / "transfers.txt")]
    common += ["--batch-size", "7"]
    alone = run(*common)
    assert alone.returncode == 0, alone.stderr
    expected = by_epoch(alone.stdout)
    queries = {json.loads(line)["query"] for lines in expected.values() for line in lines}
    assert queries == {"ring3", "flagged_roundtrip", "shared_device"}
    sharded = run(*common, "--workers", "2", "--shards", "3")
    assert sharded.returncode == 0, sharded.stderr
    assert by_epoch(sharded.stdout) == expected
    shown = killed_and_run_again(common, tmp_path, expected)
    shards = [line for line in shown.splitlines() if line.startswith("  shard ")]
    assert len(shards) == 3
    # Every account and device is numbered by exactly one shard.
    accounts = set(re.findall(r"(?:acct|dev)-\d+", (root / "transfers.txt").read_text()))
    numbered = sum(int(line.split("vertices ")[1].split(";")[0]) for line in shards)
    assert numbered == len(accounts) > 20
    assert sum("flagged/values" in line for line in shards) == 1  # (the label: shard 0's)
