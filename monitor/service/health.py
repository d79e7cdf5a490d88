"""Liveness and readiness of the serve loop, as ``/healthz`` and ``/readyz`` report them.

*Live* means the loop is going round: :meth:`Health.beat` was called within the liveness
timeout. The loop beats on every turn, idle polls and retry waits included, so liveness says
"not stuck", not "data flows"; a long epoch or recovery must beat as it goes.

*Ready* means the service does its job: partitions are assigned, the state is recovered (the
index loaded and reconciled with Kafka's committed offsets) and the broker is reachable.

The loop sets these from its thread; the HTTP server reads them from its own.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

#: Readiness conditions, in the order ``/readyz`` lists what is missing.
CONDITIONS = (
    "partitions_assigned",
    "state_recovered",
    "broker_reachable",
    "schema_registry_reachable",
)


@dataclass(frozen=True)
class Liveness:
    """Whether the loop beat within ``timeout_s``; ``since_beat_s`` since its last beat."""

    alive: bool
    since_beat_s: float
    timeout_s: float

    @property
    def reason(self) -> str:
        """What ``/healthz`` says when the loop is not alive."""
        return (
            f"stalled: no progress for {self.since_beat_s:.1f} s "
            f"(liveness timeout {self.timeout_s:g} s)"
        )


@dataclass(frozen=True)
class Readiness:
    """Every condition of :data:`CONDITIONS` with its value; ``missing`` those still false."""

    conditions: dict[str, bool]

    @property
    def ready(self) -> bool:
        return all(self.conditions.values())

    @property
    def missing(self) -> list[str]:
        return [name for name, ok in self.conditions.items() if not ok]


class Health:
    """Thread-safe liveness and readiness state.

    The liveness clock starts at construction, so a freshly started service is live for one
    timeout before its first beat.
    """

    def __init__(
        self, liveness_timeout_s: float = 60.0, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if liveness_timeout_s <= 0:
            raise ValueError(f"liveness timeout must be > 0 seconds, got {liveness_timeout_s}")
        self.liveness_timeout_s = liveness_timeout_s
        self._clock = clock
        self._lock = threading.Lock()
        self._last_beat = clock()
        self._conditions = dict.fromkeys(CONDITIONS, False)
        self._conditions["schema_registry_reachable"] = True  # (until a poll finds it down)

    def beat(self) -> None:
        """The loop made progress (call it on every turn of the loop)."""
        now = self._clock()
        with self._lock:
            self._last_beat = now

    def set_assigned(self, value: bool) -> None:
        """Partitions are assigned to this instance (False on revocation of all of them)."""
        self._set("partitions_assigned", value)

    def set_recovered(self, value: bool) -> None:
        """The state is loaded and reconciled with the committed offsets."""
        self._set("state_recovered", value)

    def set_broker_reachable(self, value: bool) -> None:
        """The Kafka broker answers (False while retrying a connection)."""
        self._set("broker_reachable", value)

    def set_registry_reachable(self, value: bool) -> None:
        """The schema registry answers (False while a poll waits for it; always true without
        one)."""
        self._set("schema_registry_reachable", value)

    def liveness(self) -> Liveness:
        """Whether the loop beat within the liveness timeout."""
        now = self._clock()
        with self._lock:
            since = max(0.0, now - self._last_beat)
        return Liveness(since <= self.liveness_timeout_s, since, self.liveness_timeout_s)

    def readiness(self) -> Readiness:
        """The readiness conditions as they are now."""
        with self._lock:
            return Readiness(dict(self._conditions))

    def _set(self, condition: str, value: bool) -> None:
        with self._lock:
            changed = self._conditions[condition] != bool(value)
            self._conditions[condition] = bool(value)
            ready = all(self._conditions.values())
        if changed:
            log.info(
                "readiness condition changed",
                extra={"condition": condition, "value": bool(value), "ready": ready},
            )
