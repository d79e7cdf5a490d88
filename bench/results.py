"""The records the workers send, gathered, and the figures derived from them.

Workers send JSON records (see :mod:`bench.worker`): ``workload`` and ``preload`` once per
workload, ``run`` per query x engine x batch size, ``recompute`` per query, ``memory`` once per
graph. :class:`Results` holds them by key and derives what the report prints: rates, the
recompute baseline per batch size (measured recounts, extrapolated), and the cross-checks
between engines.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Record = dict[str, Any]


@dataclass(frozen=True)
class Rates:
    """Throughput and latency of one stream configuration."""

    updates: int
    epochs: int
    updates_per_s: float
    deltas_per_s: float
    p50_ms: float
    p99_ms: float


@dataclass(frozen=True)
class RecomputeRate:
    """The recompute baseline at one batch size."""

    epoch_seconds: float
    updates_per_s: float
    recounts: int
    extrapolated: bool
    lower_bound: bool


@dataclass
class Results:
    """Every record of a run, by kind and key."""

    workloads: dict[str, Record] = field(default_factory=dict)
    preloads: dict[str, Record] = field(default_factory=dict)
    runs: dict[tuple[str, str, str, int], Record] = field(default_factory=dict)
    recomputes: dict[tuple[str, str], Record] = field(default_factory=dict)
    memory: dict[str, Record] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    raw: list[Record] = field(default_factory=list)

    def add(self, record: Record) -> None:
        """File one record from a worker."""
        self.raw.append(record)
        kind = record.get("type")
        workload = str(record.get("workload", ""))
        if kind == "workload":
            self.workloads[workload] = record
        elif kind == "preload":
            self.preloads[workload] = record
        elif kind == "run":
            key = (workload, record["query"], record["engine"], int(record["batch"]))
            self.runs[key] = record
        elif kind == "recompute":
            self.recomputes[(workload, record["query"])] = record
        elif kind == "memory":
            self.memory[workload] = record

    def graph_of(self, workload: str) -> str:
        return str(self.workloads.get(workload, {}).get("graph", workload))

    def queries(self, workload: str) -> list[str]:
        seen: dict[str, None] = {}
        for w, q, _, _ in self.runs:
            if w == workload:
                seen.setdefault(q)
        return list(seen)

    def batch_sizes(self) -> list[int]:
        return sorted({b for _, _, _, b in self.runs})

    def run(self, workload: str, query: str, engine: str, batch: int) -> Record | None:
        return self.runs.get((workload, query, engine, batch))


def rates(record: Record | None) -> Rates | None:
    """The figures of a stream configuration, if it finished at least one epoch."""
    if record is None or not record.get("updates") or not record.get("seconds"):
        return None
    seconds = float(record["seconds"])
    return Rates(
        int(record["updates"]),
        int(record["epochs"]),
        record["updates"] / seconds,
        record["deltas"] / seconds,
        float(record["p50_ms"]),
        float(record["p99_ms"]),
    )


def recompute_rate(record: Record | None, batch: int, limit: float) -> RecomputeRate | None:
    """The recompute baseline at ``batch``: apply that epoch, then recount from scratch.

    The recount time is the mean over every recount measured (the graph as preloaded, and the
    epochs recounted after it). A batch size whose epochs were not recounted is extrapolated;
    a run stopped before its first recount gives a lower bound on the epoch time (the limit).
    """
    if record is None:
        return None
    apply, per_epoch = record.get("apply", {}).get(str(batch), [0.0, float(batch)])
    if "count0_seconds" not in record:
        if record.get("status") != "timeout":
            return None
        return RecomputeRate(limit, per_epoch / limit, 0, True, True)
    recounted = record.get("epochs", [])
    counts = [float(record["count0_seconds"])] + [float(e[3]) for e in recounted]
    epoch = apply + sum(counts) / len(counts)
    largest = max((int(k) for k in record.get("apply", {})), default=batch)
    extrapolated = batch != largest or not recounted
    return RecomputeRate(epoch, per_epoch / epoch, len(counts), extrapolated, False)


def check_engines(ours: Record | None, other: Record | None) -> str:
    """Whether two engines produced the same deltas over the epochs both finished.

    Both record cumulative ``(updates, deltas, net)`` after every epoch; the last epoch they
    both reached must agree.
    """
    if not ours or not other:
        return ""
    a = {c[0]: c for c in ours.get("checkpoints", [])}
    b = {c[0]: c for c in other.get("checkpoints", [])}
    common = sorted(set(a) & set(b))
    if not common:
        return ""
    last = common[-1]
    return "ok" if a[last] == b[last] else f"MISMATCH at {last:,} updates: {a[last]} vs {b[last]}"


def check_recompute(ours: Record | None, recompute: Record | None) -> str:
    """Whether recounts after epochs equal the preloaded count plus our accumulated deltas."""
    if not ours or not recompute or "count0" not in recompute:
        return ""
    cumulative = {c[0]: c[2] for c in ours.get("checkpoints", [])}
    checked = ""
    for updates, count, _, _ in recompute.get("epochs", []):
        if updates not in cumulative:
            continue
        expected = recompute["count0"] + cumulative[updates]
        if count != expected:
            return f"MISMATCH at {updates:,} updates: recount {count:,}, deltas give {expected:,}"
        checked = "ok"
    return checked
