"""Shards that time themselves, for ``bench.distributed``: where an epoch of the partitioned
engine goes, and how much memory each process reached.

:class:`TimedShardIndex` is the engine's :class:`~monitor.distributed.shard.ShardIndex` with
one entry point more, :meth:`~TimedShardIndex.timed`: it runs one of the shard's methods (the
``*_many`` of a stage's rounds, ``stage_many``, ``commit``, ...) and answers with what the
method answered and the wall seconds it took inside the shard. :class:`TimedLocalShards` and
:class:`TimedRayShards` are :class:`~monitor.distributed.shard_calls.Shards` (in this process, and
as Ray actors) that call every method through it, so that each round of calls is split into

- the shards' compute: for Ray actors, which run a round at once, the slowest shard's seconds
  (the round cannot end before it); in this process, where they run one after the other, the
  sum of them;
- everything else inside :meth:`Shards.call`: handing arguments to the actors and answers back
  (serialisation, the object store, scheduling) and waiting, what the report calls *Ray calls
  and waits*.

Nothing of the engine changes: the answers are the plain ShardIndex's. A timed shard loads the
index's compiled loops when it is made, before anything is timed.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from monitor.distributed.shard import ShardIndex
from monitor.distributed.shard_calls import Traffic
from monitor.index import warmup as index_kernels


class TimedShardIndex(ShardIndex):
    """A shard that times each method called through :meth:`timed` and knows its peak RSS."""

    def __init__(self, shard: int, shards: int) -> None:
        super().__init__(shard, shards)
        # The index's compiled loops loaded now, not inside the first timed epoch (the single
        # process's EpochProcessor does the same when it is made; a new actor's process
        # would otherwise load them, or compile them, in its first epoch).
        index_kernels.warm()
        #: Wall seconds spent in each method called through :meth:`timed`.
        self.seconds: dict[str, float] = {}

    def timed(self, method: str, *arguments: Any) -> tuple[Any, float]:
        """``method(*arguments)``'s answer, and the wall seconds it took here."""
        began = time.perf_counter()
        answer = getattr(self, method)(*arguments)
        spent = time.perf_counter() - began
        self.seconds[method] = self.seconds.get(method, 0.0) + spent
        return answer, spent

    def calls(self, requests: list[tuple[str, tuple[Any, ...]]]) -> list[Any]:
        """A shared round's calls (:mod:`monitor.distributed.rounds`), each timed as its own
        method (the round's own seconds, under ``calls``, hold them all)."""
        return [self.timed(method, *arguments)[0] for method, arguments in requests]

    def usage(self) -> dict[str, float]:
        """Seconds per method so far, and ``peak_rss``: this process's peak resident bytes."""
        return {**self.seconds, "peak_rss": float(peak_rss_of_process())}


@dataclass
class Rounds:
    """What the rounds of calls cost, cumulatively (seconds)."""

    #: Wall time inside :meth:`Shards.call`.
    wall: float = 0.0
    #: The shards' compute on the round's critical path (see the module's doc).
    compute: float = 0.0

    @property
    def calls_and_waits(self) -> float:
        return self.wall - self.compute


class TimedLocalShards:
    """Timed shards as objects of this process: a round's shards run one after the other."""

    in_process = True

    def __init__(self, shards: int) -> None:
        self.shards = [TimedShardIndex(s, shards) for s in range(shards)]
        self.traffic = Traffic(shards)
        self.rounds = Rounds()

    @property
    def count(self) -> int:
        return len(self.shards)

    def call(self, method: str, arguments: Sequence[tuple[Any, ...] | None]) -> list[Any]:
        began = time.perf_counter()
        timed = [
            None if given is None else shard.timed(method, *given)
            for shard, given in zip(self.shards, arguments, strict=True)
        ]
        self.rounds.wall += time.perf_counter() - began
        self.rounds.compute += sum(t[1] for t in timed if t is not None)
        answers = [None if t is None else t[0] for t in timed]
        self.traffic.record(arguments, answers)
        return answers

    def usage(self) -> list[dict[str, float]]:
        return [shard.usage() for shard in self.shards]

    def close(self) -> None:
        self.shards = []


class TimedRayShards:
    """Timed shards as Ray actors (one process each), a round's calls all in flight at once
    and gathered with one ``ray.get``, as :class:`~monitor.distributed.shard_calls.RayShards`."""

    in_process = False

    def __init__(self, shards: int) -> None:
        import ray

        self._ray = ray
        actor = ray.remote(TimedShardIndex)
        self.actors: list[Any] = [actor.remote(s, shards) for s in range(shards)]
        self.traffic = Traffic(shards)
        self.rounds = Rounds()

    @property
    def count(self) -> int:
        return len(self.actors)

    def call(self, method: str, arguments: Sequence[tuple[Any, ...] | None]) -> list[Any]:
        began = time.perf_counter()
        pending = {
            s: actor.timed.remote(method, *given)
            for s, (actor, given) in enumerate(zip(self.actors, arguments, strict=True))
            if given is not None
        }
        answered = dict(zip(pending, self._ray.get(list(pending.values())), strict=True))
        self.rounds.wall += time.perf_counter() - began
        self.rounds.compute += max((t[1] for t in answered.values()), default=0.0)
        answers = [answered[s][0] if s in answered else None for s in range(len(self.actors))]
        self.traffic.record(arguments, answers)
        return answers

    def usage(self) -> list[dict[str, float]]:
        found: list[dict[str, float]] = self._ray.get([a.usage.remote() for a in self.actors])
        return found

    def close(self) -> None:
        """End the actors (their processes exit and free their memory)."""
        for actor in self.actors:
            self._ray.kill(actor)
        self.actors = []


TimedShards = TimedLocalShards | TimedRayShards


def peak_rss_of_process() -> int:
    """This process's peak resident bytes: ``VmHWM`` (reset by :func:`reset_peak_rss`), or
    ``getrusage``'s maximum over its life where /proc is not there."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def reset_peak_rss() -> None:
    """Start this process's peak RSS again from its current RSS (Linux: ``clear_refs`` 5)."""
    try:
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")
    except OSError:
        pass
