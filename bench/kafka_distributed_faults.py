"""The recovery runs of ``bench.kafka_distributed``: the distributed service at 2 workers on a
topic that holds the whole workload, a fault injected mid-stream, the recovery read from its JSON
log (each line stamped to the millisecond).

- *shard killed*: ``ray.kill`` of a shard actor (from another Ray client, as an operator would)
  once two epochs committed; seconds from the kill to the driver's shards loaded again, and to
  its next committed epoch;
- *driver killed*: SIGKILL of the serve process once two epochs committed, then started
  again on the same state; seconds from the start to its first committed epoch (Ray's start
  and the shards' load included), and the load itself;
- *node lost*: the service joins a ``ray.cluster_utils.Cluster`` (a head and two worker nodes);
  once it consumed the topic, a worker node is removed, the directories of the shards it ran
  deleted (its disk is gone), a node added, and records produced; seconds of the shards'
  rebuild from the shard changelog, per GB replayed.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from bench.kafka import Input
from bench.kafka_serve import (
    ROOT,
    consumed,
    log_lines,
    produce_records,
    serve_env,
    stamp,
    topics,
)

#: The service at 2 workers, in batches.
ENV = {"SGM_ENGINE": "distributed", "SGM_WORKERS": "2", "SGM_OUTPUT_FORMAT": "batches"}


def start(
    bootstrap: str, tmp: Path, source: Input, topic: str, group: str, name: str, **extra: str
) -> tuple[subprocess.Popen[bytes], Path]:
    log = tmp / f"{group}-{name}.log"
    if name == "a":
        topics(bootstrap, (f"{group}-out", 1), (f"{group}-dlq", 1))
    settings: dict[str, str] = {
        "SGM_OUTPUT_TOPIC": f"{group}-out",
        "SGM_DEAD_LETTER_TOPIC": f"{group}-dlq",
        **ENV,
        **extra,
    }
    env = {
        **serve_env(
            bootstrap,
            topic,
            group,
            tmp / group,
            query=source.workload.query,
            undirected=source.workload.undirected,
        ),
        **settings,
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "monitor", "serve"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log.open("wb"),
    )
    return proc, log


def lines(log: Path, message: str, after: float = 0.0) -> list[dict[str, Any]]:
    return [x for x in log_lines(log) if x.get("message") == message and stamp(x) >= after]


def wait_lines(
    log: Path, message: str, proc: subprocess.Popen[bytes], n: int = 1, after: float = 0.0
) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        found = lines(log, message, after)
        if len(found) >= n:
            return found
        if proc.poll() is not None:
            raise RuntimeError(f"serve exited before {n} x {message!r}: {log}")
        time.sleep(0.05)
    raise RuntimeError(f"no {n} x {message!r} in {log}")


def finish(bootstrap: str, group: str, topic: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 600
    while not consumed(bootstrap, group, topic) and time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("serve exited before it consumed the topic")
        time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    proc.wait(120)


def state_bytes(state: Path) -> int:
    """Bytes on disk of the shards' directories."""
    return sum(f.stat().st_size for f in state.glob("shard-*/**/*") if f.is_file())


def shard_killed(bootstrap: str, tmp: Path, source: Input, topic: str) -> dict[str, float]:
    group = f"bench-{uuid.uuid4().hex[:8]}"
    proc, log = start(bootstrap, tmp, source, topic, group, "a")
    cluster = wait_lines(log, "ray cluster", proc)[0]
    wait_lines(log, "epoch committed", proc, 2)
    state = state_bytes(tmp / group)
    kill = (
        "import ray, sys; ray.init(address=sys.argv[1], namespace=sys.argv[2]); "
        "ray.kill(ray.get_actor(sys.argv[3]), no_restart=True)"
    )
    actor = f"{cluster['actors']}-shard-0001"
    killed = time.time()
    subprocess.run(
        [sys.executable, "-c", kill, cluster["address"], cluster["namespace"], actor],
        env={**os.environ, "RAY_AUTH_MODE": "token"},
        check=True,
        capture_output=True,
    )
    more(bootstrap, topic, source)  # (the next epoch finds the shard gone)
    loaded = wait_lines(log, "state loaded again", proc, after=killed)[0]
    committed = wait_lines(log, "epoch committed", proc, after=stamp(loaded))[0]
    finish(bootstrap, group, topic, proc)
    shutil.rmtree(tmp / group, ignore_errors=True)
    return {
        "to_loaded_s": stamp(loaded) - killed,
        "load_s": float(loaded["seconds"]),
        "to_commit_s": stamp(committed) - killed,
        "state_bytes": float(state),
    }


def driver_killed(bootstrap: str, tmp: Path, source: Input, topic: str) -> dict[str, float]:
    group = f"bench-{uuid.uuid4().hex[:8]}"
    proc, log = start(bootstrap, tmp, source, topic, group, "a")
    wait_lines(log, "epoch committed", proc, 2)
    proc.send_signal(signal.SIGKILL)
    proc.wait(60)
    state = state_bytes(tmp / group)
    started = time.time()
    proc, log = start(bootstrap, tmp, source, topic, group, "b")
    more(bootstrap, topic, source)  # (an epoch to commit, should the stream have ended)
    loaded = wait_lines(log, "state loaded", proc)[0]
    committed = wait_lines(log, "epoch committed", proc)[0]
    finish(bootstrap, group, topic, proc)
    shutil.rmtree(tmp / group, ignore_errors=True)
    return {
        "load_s": float(loaded["seconds"]),
        "to_commit_s": stamp(committed) - started,
        "state_bytes": float(state),
    }


def node_lost(bootstrap: str, tmp: Path, source: Input, topic: str) -> dict[str, float]:
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    try:
        nodes = [cluster.add_node(num_cpus=1) for _ in range(2)]
        cluster.wait_for_nodes()
        group = f"bench-{uuid.uuid4().hex[:8]}"
        proc, log = start(
            bootstrap, tmp, source, topic, group, "a", SGM_RAY_ADDRESS=cluster.address
        )
        pids = {int(x["shard"]): int(x["pid"]) for x in wait_lines(log, "shard started", proc, 4)}
        deadline = time.monotonic() + 600
        while not consumed(bootstrap, group, topic) and time.monotonic() < deadline:
            time.sleep(0.5)
        state = state_bytes(tmp / group)
        cluster.remove_node(nodes[0])
        time.sleep(2.0)
        lost = [s for s, pid in pids.items() if not alive(pid)]
        for s in lost:
            shutil.rmtree(tmp / group / f"shard-{s:04d}", ignore_errors=True)
        cluster.add_node(num_cpus=1)
        produced = time.time()
        more(bootstrap, topic, source)
        loaded = wait_lines(log, "state loaded again", proc, after=produced)[0]
        rebuilt = lines(log, "shard rebuilt from the changelog", after=produced)
        finish(bootstrap, group, topic, proc)
        shutil.rmtree(tmp / group, ignore_errors=True)
    finally:
        cluster.shutdown()  # type: ignore[no-untyped-call]
    replayed = sum(float(x["bytes"]) for x in rebuilt)
    seconds = max((float(x["seconds"]) for x in rebuilt), default=float("nan"))
    return {
        "shards_lost": float(len(lost)),
        "rebuilt_bytes": replayed,
        "rebuild_s": seconds,
        "rebuild_s_per_gb": seconds / (replayed / 1e9) if replayed else float("nan"),
        "load_s": float(loaded["seconds"]),
        "state_bytes": float(state),
    }


def more(bootstrap: str, topic: str, source: Input) -> None:
    """Records at the end of ``topic`` (the workload's first ones again: they change nothing,
    but make an epoch), so that a fault is met whether or not the stream has ended."""
    produce_records(bootstrap, topic, source.records[:1000])


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def changelog_rebuild(bootstrap: str, tmp: Path, megabytes: int) -> dict[str, float]:
    """A shard's rebuild from its changelog at scale: ``megabytes`` of batches (1 MiB values,
    incompressible, as snapshot blocks are nearly) appended to a partition, then replayed into
    an empty RocksDB as a rebuild does; seconds per GB replayed."""
    import numpy as np

    from connectors.kafka_log import KafkaLog, ensure_log_topic
    from monitor.distributed.shard_changelog import MirroredBatch, rebuild
    from monitor.distributed.shard_store import _synced
    from monitor.index.store import connect, rocks_options

    topic = f"changelog-{uuid.uuid4().hex[:8]}"
    config = {"bootstrap.servers": bootstrap}
    ensure_log_topic(config, topic, 1)
    log = KafkaLog(config, topic, 0)
    rng = np.random.default_rng(3)
    block = rng.integers(0, 256, 1 << 20, dtype=np.uint8).tobytes()
    for b in range(0, megabytes, 16):
        batch = MirroredBatch()
        for k in range(b, min(b + 16, megabytes)):
            batch.put(b"S" + k.to_bytes(6, "big"), block)
        log.append(bytes(batch.ops))
    log.close()
    path = tmp / topic
    db = connect(path, rocks_options(16 << 20)[0], read_only=False)
    try:
        found = rebuild(db, path, KafkaLog(config, topic, 0), _synced())
    finally:
        db.close()
    shutil.rmtree(path, ignore_errors=True)
    return {
        "rebuilt_bytes": found["bytes"],
        "rebuild_s": found["seconds"],
        "rebuild_s_per_gb": found["seconds"] / (found["bytes"] / 1e9),
        "state_bytes": found["bytes"],
    }
