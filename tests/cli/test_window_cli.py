"""Windows through ``subgraph-monitor run``: retention and lateness flags, the summary's late
count, causes, ``--emit appearances``, and bad input (no ``ts``, unparseable times, a clock a
century ahead, retention for a relation no query reads as events)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.test_cli import cli

RING = (
    "ring(a, b, c) := transfer(a, b) as t1, transfer(b, c) as t2, transfer(c, a) as t3,"
    " t1.ts < t2.ts, t2.ts < t3.ts, within 10m, distinct."
)
MIN = 60_000


def transfer(key: str, src: str, dst: str, ts: object) -> dict[str, object]:
    row: dict[str, object] = {"op": "insert", "relation": "transfer", "id": key}
    row.update(src=src, dst=dst, amount=10)
    if ts is not None:
        row["ts"] = ts
    return row


def run(tmp: Path, records: list[dict[str, object]], *flags: str, env=None, check=True):  # type: ignore[no-untyped-def]
    (tmp / "in.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    return cli("run", "-q", RING, "--edges", str(tmp / "in.jsonl"), *flags, env=env, check=check)


def rows(done) -> list[dict[str, object]]:  # type: ignore[no-untyped-def]
    return [json.loads(line) for line in done.stdout.splitlines()]


RING_THEN_LATER = [
    transfer("t1", "A", "B", 0),
    transfer("t2", "B", "C", 1 * MIN),
    transfer("t3", "C", "A", 2 * MIN),
    transfer("x1", "X", "Y", 30 * MIN),
    transfer("x2", "X", "Y", 31 * MIN),
    transfer("nots", "C", "A", None),  # no time: the window cannot place it
    transfer("old", "C", "A", 5 * MIN),  # 5m + 10m < watermark 30m - 5s: late
]


def test_a_ring_expires_when_time_moves_on_and_late_events_are_counted(tmp_path: Path) -> None:
    done = run(tmp_path, RING_THEN_LATER, "--batch-size", "3", "--allowed-lateness", "5s")
    out = rows(done)
    # the watermark passes the ring's window in epoch 2; epoch 3 begins with its expiry
    assert [(r["epoch"], r["diff"], r.get("cause")) for r in out] == [
        (1, 1, None),
        (3, -1, "expired"),
    ]
    assert out[0]["match_id"] == out[1]["match_id"]
    stderr = done.stderr.decode()
    assert "ignored: late 1, missing_time 1" in stderr, stderr
    assert "event time: watermark 1970-01-01T00:29:55Z, expired 3, late 1" in stderr, stderr


def test_a_deleted_event_retracts_with_cause_deleted_and_appearances_drop_retractions(
    tmp_path: Path,
) -> None:
    records = [*RING_THEN_LATER[:3], {"op": "delete", "relation": "transfer", "id": "t2"}]
    out = rows(run(tmp_path, records, "--batch-size", "3"))
    assert [(r["diff"], r.get("cause")) for r in out] == [(1, None), (-1, "deleted")]
    out = rows(run(tmp_path, RING_THEN_LATER, "--batch-size", "3", "--emit", "appearances"))
    assert [r["diff"] for r in out] == [1]


def test_retention_and_lateness_flags_change_the_window(tmp_path: Path) -> None:
    kept = rows(run(tmp_path, RING_THEN_LATER, "--batch-size", "3", "--retention", "transfer=1h"))
    # an hour: nothing expires by 31m, and "old" closes a second ring (t1, t2, old)
    assert [r["diff"] for r in kept] == [1, 1]
    env = {"SGM_RETENTION": "transfer=none", "SGM_ALLOWED_LATENESS": "40m"}
    forever = run(tmp_path, RING_THEN_LATER, "--batch-size", "3", env=env)
    assert [r["diff"] for r in rows(forever)] == [1, 1]
    assert "late" not in forever.stderr.decode().split("ignored:")[1].split("\n")[0]


def test_one_event_with_a_clock_a_century_ahead_does_not_expire_the_window(
    tmp_path: Path,
) -> None:
    ahead = transfer("bad", "Q", "R", "2126-12-02T00:00:00Z")
    fill = [transfer(f"f{k}", "Q", "T", 3 * MIN) for k in range(2)]
    records = [*RING_THEN_LATER[:3], ahead, *fill, transfer("y", "Q", "S", 3 * MIN)]
    out = rows(run(tmp_path, records, "--batch-size", "3"))
    assert [r["diff"] for r in out] == [1]  # the watermark ignores the largest time
    textbook = run(tmp_path, records, "--batch-size", "3", env={"SGM_WATERMARK_OUTLIERS": "0"})
    assert [(r["diff"], r.get("cause")) for r in rows(textbook)] == [(1, None), (-1, "expired")]
    assert "late 1" in textbook.stderr.decode()  # y, 3m, now behind the bad clock's watermark


def test_bad_times_and_bad_window_settings_are_clear_errors(tmp_path: Path) -> None:
    records = [*RING_THEN_LATER[:3], transfer("z", "A", "B", "yesterday")]
    done = run(tmp_path, records, "--batch-size", "3")
    assert "'yesterday' is not an ISO-8601 time" in done.stderr.decode()
    assert "bad input lines skipped 1" in done.stderr.decode()
    local = run(tmp_path, [transfer("z", "A", "B", "2026-12-02T10:00:00")], check=False)
    assert "has no zone offset" in local.stderr.decode()
    for flag, value, message in [
        ("--retention", "logins=1h", "retention is set for logins, which no query reads as events"),
        ("--retention", "transfer=1y", "'1y' is not a duration"),
        ("--allowed-lateness", "soon", "allowed_lateness"),
    ]:
        bad = cli("run", "-q", RING, "--edges", "-", flag, value, stdin=b"", check=False)
        assert bad.returncode != 0 and message in bad.stderr.decode(), bad.stderr.decode()


def test_the_shipped_payments_example_shows_appearance_expiry_deletion_and_lateness() -> None:
    done = cli(
        "run",
        "-q",
        "examples/payments.q",
        "--edges",
        "examples/payments.jsonl",
        "--batch-size",
        "10",
    )
    got = [(r["query"], r["diff"], r.get("cause")) for r in rows(done)]
    assert got == [
        ("layering_ring", 1, None),
        ("pass_through", 1, None),
        ("pass_through", -1, "deleted"),
        ("layering_ring", -1, "expired"),
    ]
    assert "late 1" in done.stderr.decode()
