"""A table of account attributes in the replicated scale-out against a real broker: account
records (updates and tombstones) among the transfers of a six-partition topic, three workers,
one killed inside a transaction and one added on a new volume (rebuilt from the changelog, the
table with it). Every epoch publishes what a single worker would on the control topic's
epochs, every record a real transition, and the end is the brute force's: the live transfers
whose receiving account is currently high-risk.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict

import numpy as np
import pytest

from monitor.service.settings import Settings
from tests.kafka.test_cluster import Workers, output_rows
from tests.kafka.test_cluster_events import Binding, binding, kill_and_rebuild, single_worker

pytestmark = pytest.mark.kafka

QUERIES = (
    'risky(a, b) := transfer(a, b) as t, account(b) as y, y.risk = "high".\n'
    "high_to_low(a, b) := transfer(a, b) as t, account(a) as x, account(b) as y,\n"
    '    x.risk = "high", y.risk != "high".\n'
)
EDGES = {"risky": ("t", "y"), "high_to_low": ("t", "x", "y")}
ENV = {"SGM_UNDIRECTED": "false", "SGM_BATCH_SIZE": "120", "SGM_TABLES": "account"}
ACCOUNTS = [f"acct-{i}" for i in range(12)]


def stream(n: int, seed: int) -> tuple[list[tuple[bytes, bytes]], dict[str, object]]:
    """``n`` records: transfers (a fifth of them deletes of earlier ones) and account records
    (a sixth of them tombstones), each keyed as its topic would be (a transfer by id, an
    account by key: a key's records stay in order); and the brute force's final state."""
    rng = np.random.default_rng(seed)
    values: list[tuple[bytes, bytes]] = []
    transfers: dict[str, tuple[str, str]] = {}
    accounts: dict[str, str] = {}
    for i in range(n):
        if rng.random() < 0.3:
            key = str(rng.choice(ACCOUNTS))
            if rng.random() < 1 / 6:
                record: dict[str, object] = {"op": "delete", "relation": "account", "key": key}
                accounts.pop(key, None)
            else:
                risk = str(rng.choice(["high", "low", "mid"]))
                record = {"relation": "account", "key": key, "risk": risk}
                accounts[key] = risk
        elif transfers and rng.random() < 0.2:
            key = str(rng.choice(sorted(transfers)))
            record = {"op": "delete", "relation": "transfer", "id": key}
            del transfers[key]
        else:
            key = f"tx-{i}"
            src, dst = (str(v) for v in rng.choice(ACCOUNTS, 2, replace=False))
            record = {"relation": "transfer", "id": key, "src": src, "dst": dst}
            transfers[key] = (src, dst)
        values.append((key.encode(), json.dumps(record).encode()))
    return values, {"transfers": transfers, "accounts": accounts}


def brute_force(final: dict[str, object]) -> set[Binding]:
    transfers: dict[str, tuple[str, str]] = final["transfers"]  # type: ignore[assignment]
    risk: dict[str, str] = final["accounts"]  # type: ignore[assignment]
    found: set[Binding] = set()
    for tx, (a, b) in transfers.items():
        if risk.get(b) == "high":
            found.add(("risky", (a, b), (tx, b)))
        if a in risk and b in risk and risk[a] == "high" and risk[b] != "high":
            found.add(("high_to_low", (a, b), (tx, a, b)))
    return found


def test_a_table_in_scale_out_equals_the_single_worker_through_a_kill_and_a_rebuild(
    workers: Workers,
) -> None:
    (workers.tmp / "queries.q").write_text(QUERIES)
    values, final = stream(3600, seed=41)
    kill_and_rebuild(workers, values, ENV)
    rows = output_rows(workers)
    per_epoch: dict[int, Counter[tuple[Binding, int]]] = defaultdict(Counter)
    current: Counter[Binding] = Counter()
    causes: Counter[object] = Counter()
    for row in rows:
        key, diff = binding(row, EDGES), int(row["diff"])  # type: ignore[call-overload]
        seen = per_epoch[int(row["epoch"])]  # type: ignore[call-overload]
        assert (key, diff) not in seen and (key, -diff) not in seen, f"{key} twice"
        seen[(key, diff)] += 1
        current[key] += diff
        if current[key] not in (0, 1):
            history = [r for r in rows if binding(r, EDGES) == key]
            raise AssertionError(f"running sum {current[key]} of {key}: {history}")
        if diff < 0:
            causes[row.get("cause")] += 1
    settings = Settings(batch_size=120, tables=["account"])
    expected = single_worker(workers, settings)
    for epoch in sorted(set(expected) | set(per_epoch)):
        got = set(per_epoch.get(epoch, Counter()))
        assert got == expected.get(epoch, set()), f"epoch {epoch} differs"
    assert {b for b, c in current.items() if c} == brute_force(final)
    assert causes["updated"] > 0 and causes["deleted"] > 0, causes
