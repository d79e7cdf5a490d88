"""Events in scale-out against a real broker: three workers, one killed inside a transaction and
one added on a new volume (rebuilt from the changelog, events and all), publish per epoch what a
single worker would, every record a real transition, ending at the brute-force oracle's matches;
event stores are compacted along the way.
"""

from __future__ import annotations

import json
import signal
from collections import Counter, defaultdict

import pytest

from core.columns import python_values
from monitor.query.load import load_queries
from monitor.service.cluster.epoch_input import decode_epoch
from monitor.service.epochs import EpochProcessor
from monitor.service.settings import Settings
from tests.engine.test_events_oracle import QUERIES, brute_force, event_records
from tests.kafka.test_cluster import (
    Workers,
    control_epochs,
    last_stable_lag,
    output_rows,
    read_all,
)
from tests.kafka.test_serve_events import key_of, produce_values

pytestmark = pytest.mark.kafka

EDGES = {q.name: q.edges for q in QUERIES}
Binding = tuple[str, tuple[object, ...], tuple[str, ...]]
#: Event stores are compacted every few epochs (a small minimum): workers compact at the same
#: epochs, and a worker rebuilt from the changelog at its own.
COMPACTION_MIN = 50
ENV = {
    "SGM_UNDIRECTED": "false",
    "SGM_BATCH_SIZE": "120",
    "SGM_EVENT_COMPACTION_MIN": str(COMPACTION_MIN),
}


def binding(row: dict[str, object], names: dict[str, tuple[str, ...]] = EDGES) -> Binding:
    query = str(row["query"])
    edges: dict[str, dict[str, object]] = row["edges"]  # type: ignore[assignment]
    vertices = tuple(row["match"].values())  # type: ignore[attr-defined]
    return query, vertices, tuple(str(edges[e]["id"]) for e in names[query])


def single_worker(
    w: Workers, settings: Settings | None = None
) -> dict[int, set[tuple[Binding, int]]]:
    """The single worker's deltas of every epoch the control topic defines."""
    records = read_all(w.bootstrap, w.input, 6)
    settings = settings or Settings(batch_size=120, event_compaction_min=COMPACTION_MIN)
    queries = load_queries(str(w.tmp / "queries.q"))
    names = {q.name: q.edges for q in queries}
    processor = EpochProcessor(queries, settings)
    out: dict[int, set[tuple[Binding, int]]] = {}
    for spec in control_epochs(w):
        messages = {
            (t, p): [m for m in records[p] if spec.starts[(t, p)] <= (m.offset() or 0) < e]
            for (t, p), e in spec.ends.items()
        }
        epoch = processor.process(decode_epoch(messages, settings, processor.field_types).batch)
        processor.commit()
        deltas: set[tuple[Binding, int]] = set()
        for q in epoch.queries:
            ids = [python_values(q.edges[e]["id"]) for e in names[q.query]]
            vertices = [c.tolist() for c in q.columns]
            for i, diff in enumerate(q.diff.tolist()):
                events = tuple(str(column[i]) for column in ids)
                deltas.add(((q.query, tuple(c[i] for c in vertices), events), diff))
        out[spec.epoch] = deltas
    return out


def kill_and_rebuild(
    workers: Workers, values: list[tuple[bytes, bytes]], env: dict[str, str]
) -> None:
    """``values`` in thirds: w0 and w1 read the first, w1 is killed inside the transaction of
    its fourth epoch while the second comes, w2 starts on a new volume (rebuilt from the
    changelog) and the third comes; every worker stopped once all is read."""
    third = len(values) // 3
    produce_values(workers.bootstrap, workers.input, values[:third])
    workers.start("w0", **env)
    workers.start(
        "w1",
        **env,
        SGM_FAILPOINT="worker_before_commit",
        SGM_FAILPOINT_HIT="4",
        SGM_TRANSACTION_TIMEOUT_MS="5000",
    )
    ended = workers.feed_until_killed("w1", values[third : 2 * third], produce_values)
    assert ended == -signal.SIGKILL, workers.log_text()
    assert last_stable_lag(workers.bootstrap, *workers.written) > 0, "no open transaction left"
    workers.start("w2", **env)  # a new volume: rebuilt from the changelog
    workers.wait_log("w2", "state rebuilt from the changelog")
    produce_values(workers.bootstrap, workers.input, values[2 * third :])
    workers.wait_consumed()
    for name in list(workers.procs):
        assert workers.stop(name) == 0, workers.log_text()


def test_events_in_scale_out_equal_the_single_worker_through_a_kill_and_a_rebuild(
    workers: Workers,
) -> None:
    (workers.tmp / "queries.q").write_text("\n".join(str(q) for q in QUERIES) + "\n")
    records, model = event_records(4500, seed=31)
    values = [(key_of(r), json.dumps(r).encode()) for r in records]
    kill_and_rebuild(workers, values, ENV)
    rows = output_rows(workers)
    # Per epoch each binding comes once (ids deleted and inserted again within it included),
    # and the running sums, record by record, stay in {0, 1}.
    per_epoch: dict[int, Counter[tuple[Binding, int]]] = defaultdict(Counter)
    current: Counter[Binding] = Counter()
    for row in rows:
        key, diff = binding(row), int(row["diff"])  # type: ignore[call-overload]
        seen = per_epoch[int(row["epoch"])]  # type: ignore[call-overload]
        assert (key, diff) not in seen and (key, -diff) not in seen, f"{key} twice"
        seen[(key, diff)] += 1
        current[key] += diff
        assert current[key] in (0, 1), f"running sum of {key}"
    expected = single_worker(workers)
    for epoch in sorted(set(expected) | set(per_epoch)):
        got = set(per_epoch.get(epoch, Counter()))
        assert got == expected.get(epoch, set()), f"epoch {epoch} differs"
    final = {b for b, c in current.items() if c}
    oracle = {(q.name, *b) for q in QUERIES for b in brute_force(model, q)}
    assert final == oracle
    assert len({b[0] for b in final}) >= 3, f"too few queries match at the end: {final}"
