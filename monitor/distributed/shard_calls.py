"""Calls to the shards: to each its own arguments, all of a round in flight at once.

:class:`Shards` is what the partitioned engine calls through. :class:`LocalShards` holds the
shards as objects of this process (the oracle tests' and a one-process run's);
:class:`RayShards` as Ray actors, one call per shard in flight and the answers gathered with one
``ray.get`` (a dead actor raises :class:`ShardLost`, naming the shard). Both count the rounds
made and the bytes each way per shard (:class:`Traffic`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from core.errors import WorkerLost
from monitor.distributed.shard import ShardIndex

log = logging.getLogger(__name__)

#: Seconds without a shard's answer before the service says so (again at twice as long, ...).
SLOW_ANSWER_SECONDS = 30.0


def payload_bytes(value: Any) -> int:
    """The bytes of the arrays in a call's arguments or answer (what crosses to or from a
    shard; names, cuts and counters are not counted)."""
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, (tuple, list)):
        return sum(payload_bytes(v) for v in value)
    return 0


class Traffic:
    """Rounds of calls made, the calls in them, and the bytes sent to and received from each
    shard."""

    def __init__(self, shards: int) -> None:
        self.rounds = self.calls = 0
        #: Seconds spent waiting for the shards' answers (Ray shards only).
        self.wait_seconds = 0.0
        self.sent = [0] * shards
        self.received = [0] * shards

    def record(self, arguments: Sequence[tuple[Any, ...] | None], answers: Sequence[Any]) -> None:
        self.rounds += 1
        for s, (given, answer) in enumerate(zip(arguments, answers, strict=True)):
            if given is not None:
                self.calls += 1
                self.sent[s] += payload_bytes(given)
                self.received[s] += payload_bytes(answer)


class Shards(Protocol):
    """Calls to every shard, each with its own arguments, answered in shard order."""

    #: Rounds made, calls in them, bytes each way per shard.
    traffic: Traffic
    #: Whether the shards are objects of this process (a round then costs nothing of its own).
    in_process: bool

    @property
    def count(self) -> int: ...

    def call(self, method: str, arguments: Sequence[tuple[Any, ...] | None]) -> list[Any]:
        """``method(*arguments[s])`` on each shard ``s`` whose arguments are not None (its
        answer None otherwise)."""
        ...


class LocalShards:
    """Shards as objects of this process."""

    def __init__(self, shards: int) -> None:
        self.shards = [ShardIndex(s, shards) for s in range(shards)]
        self.traffic = Traffic(shards)
        self.in_process = True

    @property
    def count(self) -> int:
        return len(self.shards)

    def call(self, method: str, arguments: Sequence[tuple[Any, ...] | None]) -> list[Any]:
        answers = [
            None if given is None else getattr(shard, method)(*given)
            for shard, given in zip(self.shards, arguments, strict=True)
        ]
        self.traffic.record(arguments, answers)
        return answers


class RayShards:
    """Shards as Ray actors (Ray is imported here only: the embedded default never starts it),
    named ``NAME-shard-SSSS`` in the job's namespace when ``name`` is given (so that an operator
    finds them with ``ray list actors``, and a test kills one with ``ray.kill``)."""

    def __init__(self, shards: int, name: str | None = None) -> None:
        import ray

        self._ray = ray
        self.name = name
        self.actors: list[Any] = self._spawn(shards)
        self.traffic = Traffic(shards)
        self.in_process = False
        #: Whether each shard's answer is noted as it comes (:meth:`waiting`; the service).
        self.watched = False
        self._asked: dict[int, float] = {}

    def _spawn(self, shards: int) -> list[Any]:
        # Spread over the cluster's nodes (a node's shards share its memory and cores).
        actor = self._ray.remote(ShardIndex)
        if self.name is None:
            spread = actor.options(scheduling_strategy="SPREAD")
            return [spread.remote(s, shards) for s in range(shards)]
        return [
            actor.options(scheduling_strategy="SPREAD", name=f"{self.name}-shard-{s:04d}").remote(
                s, shards
            )
            for s in range(shards)
        ]

    def respawn(self) -> None:
        """Every shard a new, empty actor (the old ones killed, dead or not): after one was
        lost, the shards load their state again (a live shard holds what a dead one's epoch
        staged)."""
        for actor in self.actors:
            self._ray.kill(actor, no_restart=True)
        self._wait_gone()
        self.actors = self._spawn(len(self.actors))

    def _wait_gone(self) -> None:
        """Wait until the names are free again (a killed actor's name is released when Ray
        has recorded its death)."""
        if self.name is None:
            return
        deadline = time.monotonic() + 30.0
        for s in range(len(self.actors)):
            while time.monotonic() < deadline:
                try:
                    self._ray.get_actor(f"{self.name}-shard-{s:04d}")
                except ValueError:
                    break
                time.sleep(0.05)

    @property
    def count(self) -> int:
        return len(self.actors)

    def waiting(self) -> list[float]:
        """Per shard, the seconds its answer to the call in flight has been awaited (0: none
        awaited), with :attr:`watched` (for the service's metrics, read from another thread)."""
        now, asked = time.monotonic(), dict(self._asked)
        return [now - asked[s] if s in asked else 0.0 for s in range(len(self.actors))]

    def _wait_watched(self, method: str, pending: dict[int, Any]) -> None:
        """Wait for ``pending``'s answers, noting each shard's when it comes: a shard that does
        not answer stands out in :meth:`waiting` (one ``ray.wait`` when all answer within a
        second, as they do)."""
        asked = time.monotonic()
        self._asked.update(dict.fromkeys(pending, asked))
        which = {ref: s for s, ref in pending.items()}
        left = list(pending.values())
        warn_at = SLOW_ANSWER_SECONDS
        while left:
            ready, left = self._ray.wait(left, num_returns=len(left), timeout=1.0)
            for ref in ready:
                self._asked.pop(which[ref], None)
            if left and (waited := time.monotonic() - asked) >= warn_at:
                warn_at *= 2
                log.warning(
                    "shards have not answered",
                    extra={
                        "method": method,
                        "shards": sorted(which[ref] for ref in left),
                        "seconds": round(waited),
                        "reason": "a shard not yet placed (no node with a free CPU joined?), "
                        "or one busy with a large epoch",
                    },
                )

    def call(self, method: str, arguments: Sequence[tuple[Any, ...] | None]) -> list[Any]:
        pending = {
            s: getattr(actor, method).remote(*given)
            for s, (actor, given) in enumerate(zip(self.actors, arguments, strict=True))
            if given is not None
        }
        waiting = time.perf_counter()
        try:
            if self.watched:
                self._wait_watched(method, pending)
            answered = dict(zip(pending, self._ray.get(list(pending.values())), strict=True))
        except self._ray.exceptions.RayActorError as error:
            ids = [a._actor_id.hex() for a in self.actors]
            which = str(ids.index(error.actor_id)) if error.actor_id in ids else "?"
            raise ShardLost(
                f"shard {which} stopped in {method} ({error.__class__.__name__}: its process "
                "died); nothing after the last committed epoch was kept: run again with "
                "the same arguments (with --state-dir, the run continues from that epoch)"
            ) from error
        finally:
            self.traffic.wait_seconds += time.perf_counter() - waiting
            self._asked.clear()
        answers = [answered.get(s) for s in range(len(self.actors))]
        self.traffic.record(arguments, answers)
        return answers


class ShardLost(WorkerLost):
    """A shard's actor died (its process was killed, its node lost)."""
