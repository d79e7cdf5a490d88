"""The headline targets the report measures us against (one core, 50% preloaded).

A throughput target names one configuration and one figure of ours. The harness gives those
configurations (ours and the binary join beside it) a longer time limit than the others, so
that a heavy one, such as 4-cliques in batches of 10,000, is measured rather than stopped.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    """A figure of one configuration, and the least it should be."""

    label: str
    workload: str
    query: str
    batch: int
    figure: str  # a field of bench.results.Rates: "deltas_per_s" or "updates_per_s"
    at_least: float


TARGETS = (
    Target(
        "triangles, match deltas/s", "ego-facebook", "sym-triangle", 10_000, "deltas_per_s", 1e6
    ),
    Target("triangles, updates/s", "ego-facebook", "sym-triangle", 10_000, "updates_per_s", 5e4),
    Target("4-cliques, match deltas/s", "ego-facebook", "4-clique", 10_000, "deltas_per_s", 1e6),
)

#: The memory target: the compacted level's bytes per stored directed edge, on this graph.
MEMORY_TARGET = ("rmat-10M", 12.0)


def target_configurations(workload: str) -> list[tuple[str, int]]:
    """The ``(query, batch)`` configurations of ``workload`` that a target names."""
    return sorted({(t.query, t.batch) for t in TARGETS if t.workload == workload})
