"""What a shard says of itself: its figures for the file job's summary (:func:`stats`) and the
service's metrics and logs (:func:`report`)."""

from __future__ import annotations

import os
import socket
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from monitor.distributed.shard import ShardIndex


def stats(shard: ShardIndex) -> dict[str, int]:
    """Its pairs, index bytes (adjacencies, tuple keys, its part of the vertex dictionary, time
    orders), vertices, events, work, and bytes on disk with a directory."""
    adjacencies = [a for positions in shard.relations.values() for a in positions.values()]
    disk = {} if shard.store is None else {"disk": shard.store.disk_bytes()}
    return {
        "pairs": sum(len(a) for a in adjacencies),
        "bytes": sum(a.nbytes for a in adjacencies)
        + sum(k.nbytes for k in shard.tuple_keys.values())
        + shard.vertices.dictionary.nbytes
        + shard.time_orders.nbytes,
        "vertices": len(shard.vertices),
        **(shard.events.stats() if shard.events.stores else {}),
        **shard.work,
        **disk,
    }


def report(shard: ShardIndex) -> dict[str, Any]:
    """Its :func:`stats`, the tuples of each relation (its primary copies here), each event
    relation's live events and their bytes, the epoch it has durably, what a rebuild from the
    changelog replayed, its earliest expiry deadline, and where it runs (process, host, Ray
    node)."""
    primary = {
        relation: positions.get(shard.arity.get(relation, 0) - 1)
        for relation, positions in shard.relations.items()
    }
    return {
        "stats": stats(shard),
        "tuples": {r: len(a) for r, a in primary.items() if a is not None},
        "events": {r: len(s) for r, s in shard.events.stores.items()},
        "event_bytes": {r: s.nbytes for r, s in shard.events.stores.items()},
        "epoch": shard.epoch,
        "rebuilt": None if shard.store is None else shard.store.rebuilt,
        "deadline": shard.events.next_deadline(),
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "node": ray_node(),
    }


def ray_node() -> str | None:
    """The id of the Ray node this process runs on (None outside Ray)."""
    import sys

    ray = sys.modules.get("ray")  # (imported by a Ray worker; never imported here for a test)
    if ray is None or not ray.is_initialized():
        return None
    node: str = ray.get_runtime_context().get_node_id()
    return node
