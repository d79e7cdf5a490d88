"""Windows in scale-out against a real broker: workers agree on the watermark (every worker
sees every partition's times), so per epoch they publish what a single worker would, expiries
with their causes and late events as dead letters; a worker on a new volume continues from the
clock the changelog keeps.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import pytest

from monitor.service.settings import Settings
from tests.engine.test_time_oracle import QUERIES
from tests.kafka.test_cluster import Workers, output_rows, read_all
from tests.kafka.test_cluster_events import binding, single_worker
from tests.kafka.test_serve_events import key_of, produce_values
from tests.service.test_window_recovery import record, timed_ops

pytestmark = pytest.mark.kafka

EDGES = {q.name: q.edges for q in QUERIES}
ENV = {"SGM_UNDIRECTED": "false", "SGM_BATCH_SIZE": "120", "SGM_ALLOWED_LATENESS": "3m"}


def test_windows_in_scale_out_equal_the_single_worker_through_a_rebuild(
    workers: Workers,
) -> None:
    (workers.tmp / "queries.q").write_text("\n".join(str(q) for q in QUERIES) + "\n")
    records = [record(op) for op in timed_ops(3000, seed=13)]
    values = [(key_of(r), json.dumps(r).encode()) for r in records]
    produce_values(workers.bootstrap, workers.input, values[:1500])
    workers.start("w0", **ENV)
    workers.start("w1", **ENV)
    workers.wait_consumed()
    workers.stop("w1")
    workers.start("w2", **ENV)  # a new volume: rebuilt from the changelog, clock and all
    workers.wait_log("w2", "state rebuilt from the changelog")
    produce_values(workers.bootstrap, workers.input, values[1500:])
    workers.wait_consumed()
    for name in list(workers.procs):
        assert workers.stop(name) == 0, workers.log_text()
    per_epoch: dict[int, set[tuple[object, int]]] = defaultdict(set)
    causes: Counter[str] = Counter()
    for row in output_rows(workers):
        diff = int(str(row["diff"]))
        per_epoch[int(str(row["epoch"]))].add((binding(row, EDGES), diff))
        if diff < 0:
            causes[str(row["cause"])] += 1
    settings = Settings(batch_size=120, allowed_lateness=180_000)
    expected = single_worker(workers, settings)
    for epoch in sorted(set(expected) | set(per_epoch)):
        assert per_epoch.get(epoch, set()) == expected.get(epoch, set()), f"epoch {epoch}"
    assert causes["expired"] and causes["deleted"], causes
    reasons: Counter[str] = Counter()
    for message in read_all(workers.bootstrap, workers.dead, 1)[0]:
        raw = dict(message.headers() or [])["reason"] or b""
        reason = raw.encode() if isinstance(raw, str) else raw
        late, untimed = b"older than the window" in reason, b"no 'ts'" in reason
        reasons["late" if late else "no ts" if untimed else reason.decode()] += 1
    assert set(reasons) == {"late", "no ts"}, reasons
