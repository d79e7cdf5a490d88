"""``run --workers N --state-dir D --output F`` killed and run again: the output file is
byte-identical to an uninterrupted run's, and holds the single process's deltas.

Deaths: at every step of the epoch protocol, in the driver and in the shards (failpoints:
``SGM_FAILPOINT``, inherited by the shards' processes), one after another on the same state;
and SIGKILL, from outside, of a shard's process or of the driver at a random moment while
epochs run."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ray", reason="ray is not installed (the `distributed` extra)")

QUERIES = (
    "tri(a, b, c) := e(a, b), e(b, c), e(a, c), a < b, b < c.\n"
    "path(a, b, c) := e(a, b), e(b, c), a < c."
)


def edges_file(path: Path, n: int, vertices: int, seed: int) -> str:
    rng = np.random.default_rng(seed)
    pairs = rng.integers(0, vertices, (n, 2)).tolist()
    signs = np.where(rng.random(n) < 0.2, "-", "+").tolist()
    path.write_text("".join(f"{s} {a} {b}\n" for s, (a, b) in zip(signs, pairs, strict=True)))
    return str(path)


def command(edges: str, state: Path, output: Path, batch: int) -> list[str]:
    return [
        *(sys.executable, "-m", "monitor", "run", "--undirected", "--edges", edges),
        *("-q", QUERIES, "-b", str(batch), "--workers", "1", "--shards", "3"),
        *("--state-dir", str(state), "--output", str(output)),
    ]


def run(arguments: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        arguments, capture_output=True, text=True, timeout=300, env={**os.environ, **env}
    )


def by_epoch(text: str) -> dict[int, list[str]]:
    epochs: dict[int, list[str]] = defaultdict(list)
    for line in text.splitlines():
        record = json.loads(line)
        epochs[record["epoch"]].append(json.dumps(record, sort_keys=True))
    return {epoch: sorted(lines) for epoch, lines in epochs.items()}


def uninterrupted(tmp_path: Path, edges: str, batch: int) -> bytes:
    output = tmp_path / "reference.jsonl"
    done = run(command(edges, tmp_path / "reference", output, batch))
    assert done.returncode == 0, done.stderr
    return output.read_bytes()


def test_killed_at_every_step_then_run_again(tmp_path: Path) -> None:
    edges = edges_file(tmp_path / "edges.txt", 3000, 60, seed=11)
    expected = uninterrupted(tmp_path, edges, 200)  # 15 epochs
    state, output = tmp_path / "state", tmp_path / "out.jsonl"
    deaths = [
        ("before_output_sync", 2),
        ("shard_before_prepare", 2),
        ("shard_after_prepare", 1),
        ("after_shards_prepare", 2),
        ("after_epoch_commit", 1),
        ("shard_before_fold", 2),
        ("after_output_sync", 1),
    ]
    for point, hit in deaths:
        died = run(
            command(edges, state, output, 200), SGM_FAILPOINT=point, SGM_FAILPOINT_HIT=str(hit)
        )
        assert died.returncode != 0, f"{point} was not reached"
        assert "Traceback" not in died.stderr, died.stderr
    done = run(command(edges, state, output, 200))
    assert done.returncode == 0, done.stderr
    assert "continuing after epoch" in done.stderr
    assert output.read_bytes() == expected
    # And the single process's deltas, epoch by epoch.
    alone = [sys.executable, "-m", "monitor", "run", "--undirected", "--edges", edges]
    single = subprocess.run(
        [*alone, "-q", QUERIES, "-b", "200"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert single.returncode == 0, single.stderr
    assert by_epoch(expected.decode()) == by_epoch(single.stdout)
    assert len(by_epoch(single.stdout)) == 15


def descendants(pid: int) -> dict[int, str]:
    """Every live descendant of ``pid``: its command line."""
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            names[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: dict[int, str] = {}
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        for child, of in parents.items():
            if of == parent and child not in found:
                found[child] = names.get(child, "")
                frontier.append(child)
    return found


@pytest.fixture(scope="module")
def longer(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, bytes]:
    """An input of 40 epochs, and its output uninterrupted."""
    where = tmp_path_factory.mktemp("longer")
    edges = edges_file(where / "edges.txt", 20_000, 300, seed=12)
    return edges, uninterrupted(where, edges, 500)


@pytest.mark.parametrize("victim", ["shard", "driver"])
def test_sigkill_at_a_random_moment_then_run_again(
    tmp_path: Path, victim: str, longer: tuple[str, bytes]
) -> None:
    edges, expected = longer
    state, output = tmp_path / "state", tmp_path / "out.jsonl"
    process = subprocess.Popen(
        command(edges, state, output, 500), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 120
    while not (output.exists() and output.stat().st_size) and time.monotonic() < deadline:
        time.sleep(0.05)  # (Ray starts; then epochs run)
    time.sleep(random.Random(victim).uniform(0.0, 1.5))
    family = descendants(process.pid)
    assert process.poll() is None, "the run ended before it could be killed"
    if victim == "driver":
        os.kill(process.pid, signal.SIGKILL)
    else:
        shards = [pid for pid, name in family.items() if name.startswith("ray::ShardIndex")]
        assert shards, family
        os.kill(random.Random(1).choice(shards), signal.SIGKILL)
    process.communicate(timeout=120)
    assert process.returncode != 0
    for pid in family:  # (what Ray leaves behind a killed driver)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    done = run(command(edges, state, output, 500))
    assert done.returncode == 0, done.stderr
    assert output.read_bytes() == expected
