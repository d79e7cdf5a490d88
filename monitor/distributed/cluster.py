"""Starting the shards on Ray for a command: a local cluster of ``workers`` CPUs, or the cluster
at ``address``; Ray is imported here only, so the embedded default never pays for it."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from core.errors import InputError
from monitor.distributed.shard_calls import RayShards

#: Shards per worker by default, so that shards can move between workers.
SHARDS_PER_WORKER = 2

#: How long a joining node tries to reach the head (which may still be starting) before the
#: service gives up and exits (its pod is then restarted with a back-off).
JOIN_SECONDS = 180.0
JOIN_ATTEMPT_SECONDS = 30.0
JOIN_RETRY_SECONDS = 5.0

log = logging.getLogger(__name__)


@contextmanager
def ray_shards(
    workers: int,
    shards: int | None,
    address: str | None,
    name: str | None = None,
    join: bool = False,
    object_store_memory: int | None = None,
) -> Iterator[RayShards]:
    """``shards`` (default: :data:`SHARDS_PER_WORKER` per worker) shard actors on Ray, shut
    down after; with ``name``, in the namespace ``name`` and named after it; with ``join``,
    this host first joins the cluster at ``address`` as a node of its own (with an object store
    of ``object_store_memory`` bytes, default Ray's)."""
    try:
        import ray
    except ImportError as error:
        raise InputError(
            "--workers needs Ray: pip install 'subgraph-monitor[distributed]'"
        ) from error
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if join and address:
        join_as_node(address, object_store_memory)
    if address:
        ray.init(address=address, namespace=name, log_to_driver=False, logging_level=logging.ERROR)
    else:  # a cluster of our own, even where another runs on the machine (`ray start`)
        ray.init(
            address="local",
            num_cpus=workers,
            namespace=name,
            include_dashboard=False,
            log_to_driver=False,
            logging_level=logging.ERROR,
        )
    try:
        yield RayShards(shards or SHARDS_PER_WORKER * workers, name)
    finally:
        ray.shutdown()


def join_as_node(
    address: str,
    object_store_memory: int | None = None,
    seconds: float = JOIN_SECONDS,
    attempt_seconds: float = JOIN_ATTEMPT_SECONDS,
) -> None:
    """Start a Ray node on this host that joins the cluster whose head (GCS) is at ``address``,
    with no CPUs, so that no shard is placed on it: a driver connects through a node on its own
    host, which holds the objects it sends to the shards. Retried while the head is starting;
    the node's processes end with the container."""
    command = [
        sys.executable,
        "-c",
        "from ray.scripts.scripts import main; main()",
        "start",
        f"--address={address}",
        "--num-cpus=0",
        "--disable-usage-stats",
    ]
    if object_store_memory is not None:
        command.append(f"--object-store-memory={object_store_memory}")
    deadline = time.monotonic() + seconds
    attempt = 0
    while True:
        attempt += 1
        started = time.monotonic()
        try:  # (`ray start` waits long for a head that does not answer: bounded per attempt)
            done = subprocess.run(
                command, capture_output=True, text=True, check=False, timeout=attempt_seconds
            )
        except subprocess.TimeoutExpired:
            reason = f"no answer from the head in {attempt_seconds:.0f} s"
        else:
            if done.returncode == 0:
                log.info(
                    "joined the ray cluster as a node",
                    extra={"address": address, "seconds": round(time.monotonic() - started, 1)},
                )
                return
            lines = (done.stderr.strip() or done.stdout.strip()).splitlines()
            reason = lines[-1] if lines else f"ray start exited with {done.returncode}"
        if time.monotonic() >= deadline:
            raise InputError(
                f"could not join the Ray cluster at {address} as a node in {seconds:.0f} s "
                f"({attempt} attempts): {reason}"
            )
        log.warning(
            "could not join the ray cluster; retrying",
            extra={"address": address, "attempt": attempt, "reason": reason},
        )
        time.sleep(min(JOIN_RETRY_SECONDS, max(0.0, deadline - time.monotonic())))
