"""Starting the shards on Ray for a command: a local cluster of ``workers`` CPUs, or the cluster
at ``address``; Ray is imported here only, so the embedded default never pays for it."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager

from core.errors import InputError
from monitor.distributed.shard_calls import RayShards

#: Shards per worker by default, so that shards can move between workers.
SHARDS_PER_WORKER = 2


@contextmanager
def ray_shards(
    workers: int, shards: int | None, address: str | None, name: str | None = None
) -> Iterator[RayShards]:
    """``shards`` (default: :data:`SHARDS_PER_WORKER` per worker) shard actors on Ray, shut
    down after; with ``name``, in the namespace ``name`` and named after it."""
    try:
        import ray
    except ImportError as error:
        raise InputError(
            "--workers needs Ray: pip install 'subgraph-monitor[distributed]'"
        ) from error
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
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
