"""Kill the file job at any moment and rerun it: the output file holds every delta exactly once.

The job runs as a subprocess with a state directory and an output file. It is killed with
SIGKILL at failpoints between every two steps of the epoch protocol and at random moments, then
rerun with the same arguments until it completes; the output must equal, byte for byte, the
output of a run that was never interrupted, and the stored graph must equal the oracle's.
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from monitor.index.graph import GraphIndex
from monitor.index.store import StateStore

ROOT = Path(__file__).resolve().parents[2]
QUERIES = (
    "tri(a, b, c) := e(a, b), e(b, c), e(a, c), a < b, b < c.\n"
    "flagged(a, b, c) := flag(a), e(a, b), e(b, c), e(c, a), b < c.\n"
)
ENV = {
    "SGM_BATCH_SIZE": "300",
    "SGM_COMPACTION_MIN": "300",
    "SGM_SNAPSHOT_RATIO": "0.25",
    "SGM_SNAPSHOT_MIN_BYTES": "20000",
}


def make_stream(path: Path, seed: int = 1, n: int = 60_000) -> set[tuple[str, tuple[int, ...]]]:
    """A stream of edge inserts, deletes and vertex flags; returns the final graph (oracle)."""
    rng = np.random.default_rng(seed)
    present: set[tuple[str, tuple[int, ...]]] = set()
    edges: list[tuple[int, int]] = []
    lines = []
    for _ in range(n):
        roll = rng.random()
        if roll < 0.7 or not edges:
            u, v = (int(x) for x in rng.integers(0, 400, 2))
            lines.append(f"{u} {v}")
            edges.append((u, v))
            present |= {("e", (u, v)), ("e", (v, u))}
        elif roll < 0.95:
            u, v = edges[int(rng.integers(0, len(edges)))]
            lines.append(f"- {v} {u}")
            present -= {("e", (u, v)), ("e", (v, u))}
        else:
            w = int(rng.integers(0, 400))
            lines.append(f"+ flag({w})")
            present.add(("flag", (w,)))
    path.write_text("\n".join(lines) + "\n")
    return present


def job(
    tmp: Path, stream: Path, name: str, env: dict[str, str] | None = None, wait: bool = True
) -> subprocess.Popen[bytes]:
    queries = tmp / "queries.q"
    queries.write_text(QUERIES)
    args = [
        sys.executable,
        "-m",
        "monitor",
        "run",
        "-q",
        str(queries),
        "--edges",
        str(stream),
        "--undirected",
        "--state-dir",
        str(tmp / f"{name}.state"),
        "--output",
        str(tmp / f"{name}.jsonl"),
        "--quiet",
    ]
    proc = subprocess.Popen(
        args,
        cwd=ROOT,
        env={**os.environ, **ENV, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    if wait:
        proc.wait(timeout=300)
    return proc


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, set[object]]:
    tmp = tmp_path_factory.mktemp("reference")
    stream = tmp / "stream.txt"
    oracle = make_stream(stream)
    started = time.perf_counter()
    done = job(tmp, stream, "ref")
    print(f"uninterrupted run: {time.perf_counter() - started:.2f} s")
    assert done.returncode == 0, done.stderr.read() if done.stderr else ""
    return stream, (tmp / "ref.jsonl"), oracle  # type: ignore[return-value]


def stored_graph(state: Path) -> set[tuple[str, tuple[object, ...]]]:
    index = GraphIndex()
    with StateStore.open(state) as store:
        store.load(index)
    graph = set()
    for name in index.relations:
        columns = [index.dictionary.decode(c).tolist() for c in index.tuples(name)]
        graph |= {(name, t) for t in zip(*columns, strict=True)}
    return graph


def kill_at_random(
    start: Callable[[], subprocess.Popen[bytes]],
    rng: np.random.Generator,
    rounds: int,
    seconds: tuple[float, float],
) -> int:
    """Start the job and SIGKILL it after a random time, up to ``rounds`` times or until it
    finishes first; returns how many times it was killed."""
    kills = 0
    for _ in range(rounds):
        proc = start()
        time.sleep(float(rng.uniform(*seconds)))
        if proc.poll() is not None:
            break
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        kills += 1
    return kills


def finish(tmp: Path, stream: Path, name: str) -> None:
    done = job(tmp, stream, name)
    assert done.returncode == 0, done.stderr.read() if done.stderr else ""


@pytest.mark.parametrize(
    ("point", "hit"),
    [
        ("before_output_sync", 3),
        ("after_output_sync", 5),
        ("before_store_write", 9),
        ("snapshot_built", 2),
        ("after_epoch_commit", 11),
    ],
)
def test_killed_at_a_failpoint_and_rerun_gives_the_uninterrupted_output(
    tmp_path: Path, reference: tuple[Path, Path, set[object]], point: str, hit: int
) -> None:
    stream, ref, oracle = reference
    killed = job(
        tmp_path, stream, "run", env={"SGM_FAILPOINT": point, "SGM_FAILPOINT_HIT": str(hit)}
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr.read() if killed.stderr else ""
    assert (tmp_path / "run.jsonl").stat().st_size < ref.stat().st_size
    finish(tmp_path, stream, "run")
    assert (tmp_path / "run.jsonl").read_bytes() == ref.read_bytes()
    assert stored_graph(tmp_path / "run.state") == oracle


def test_killed_at_random_moments_and_rerun_gives_the_uninterrupted_output(
    tmp_path: Path, reference: tuple[Path, Path, set[object]]
) -> None:
    stream, ref, oracle = reference
    start = functools.partial(job, tmp_path, stream, "run", wait=False)
    kills = kill_at_random(start, np.random.default_rng(7), 8, (0.4, 1.5))
    finish(tmp_path, stream, "run")
    assert kills >= 2, "the job finished too fast to be killed; make the stream longer"
    assert (tmp_path / "run.jsonl").read_bytes() == ref.read_bytes()
    assert stored_graph(tmp_path / "run.state") == oracle


def test_sigterm_stops_after_the_epoch_and_the_rerun_continues(
    tmp_path: Path, reference: tuple[Path, Path, set[object]]
) -> None:
    stream, ref, _ = reference
    proc = job(tmp_path, stream, "run", wait=False)
    output = tmp_path / "run.jsonl"
    deadline = time.monotonic() + 60
    while not (output.exists() and output.stat().st_size) and proc.poll() is None:
        assert time.monotonic() < deadline, "no epoch written within 60 s"
        time.sleep(0.05)  # stop it in mid-stream: some epochs written, others to come
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    finish(tmp_path, stream, "run")
    assert (tmp_path / "run.jsonl").read_bytes() == ref.read_bytes()
