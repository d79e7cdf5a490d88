"""Tables through the commands: ``run`` reads account records keyed by ``key`` (the issue's
``to_new_account``: a high-risk payer, a receiver opened within 30 days of the transfer, an
opening date given as an ISO time), retracts with ``cause: "updated"`` and ``"deleted"``, skips a
record without ``key`` with its reason; ``explain`` names the tables; bad declarations and
bad uses are errors that say what to write."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.test_cli import cli
from tests.cli.test_window_cli import rows

TO_NEW_ACCOUNT = (
    "to_new_account(a, b) :=\n"
    "    transfer(a, b) as t, account(a) as x, account(b) as y,\n"
    '    x.risk = "high", y.opened >= t.ts - 30d.'
)

STREAM = [
    {"relation": "account", "key": "A", "risk": "high", "opened": "2025-01-01T00:00:00Z"},
    {"relation": "account", "key": "B", "risk": "low", "opened": "2026-11-20T00:00:00Z"},
    {"relation": "account", "key": "C", "risk": "low", "opened": "2026-01-01T00:00:00Z"},
    {"relation": "transfer", "id": "t1", "src": "A", "dst": "B", "ts": "2026-12-01T10:00:00Z"},
    {"relation": "transfer", "id": "t2", "src": "A", "dst": "C", "ts": "2026-12-01T11:00:00Z"},
    {"relation": "account", "key": "A", "risk": "medium", "opened": "2025-01-01T00:00:00Z"},
    {"relation": "account", "key": "C", "risk": "high", "opened": "2026-01-01T00:00:00Z"},
    {"relation": "account", "risk": "high"},
    {"relation": "account", "key": "A", "risk": "high", "opened": "2025-01-01T00:00:00Z"},
    {"relation": "account", "key": "A", "risk": "high", "opened": "2025-01-01T00:00:00Z"},
    {"op": "delete", "relation": "account", "key": "B"},
]


def run(tmp: Path, *flags: str):  # type: ignore[no-untyped-def]
    (tmp / "in.jsonl").write_text("\n".join(json.dumps(r) for r in STREAM) + "\n")
    args = ("-q", TO_NEW_ACCOUNT, "--edges", str(tmp / "in.jsonl"), "--batch-size", "1")
    return cli("run", *args, *flags, check=False)


def test_run_matches_against_the_current_attributes(tmp_path: Path) -> None:
    done = run(tmp_path, "--table", "account")
    assert done.returncode == 0, done.stderr.decode()
    out = rows(done)
    # A turns medium (updated), C's change breaks nothing, A high again, the same record again
    # (no change), B's tombstone (deleted)
    assert [(r["epoch"], r["diff"], r["match"], r.get("cause")) for r in out] == [
        (4, 1, {"a": "A", "b": "B"}, None),
        (6, -1, {"a": "A", "b": "B"}, "updated"),
        (8, 1, {"a": "A", "b": "B"}, None),
        (10, -1, {"a": "A", "b": "B"}, "deleted"),
    ], out
    first = out[0]["edges"]
    assert first["y"] == {  # type: ignore[index]
        "id": "B",
        "src": "B",
        "dst": "B",
        "risk": "low",
        "opened": 1795132800000,  # 2026-11-20T00:00:00Z
    }
    stderr = done.stderr.decode()
    assert "in.jsonl:8: a record of table 'account' needs 'key'" in stderr, stderr


def test_explain_names_the_tables() -> None:
    done = cli("explain", TO_NEW_ACCOUNT)
    assert "# tables (a record per vertex by 'key', the latest wins" in done.stdout.decode()
    assert "account{risk = 'high'}(a, a)" in done.stdout.decode()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--table", "transfer"), "transfer is declared a table (--table, SGM_TABLES) but query"),
        (("--table", "ledger"), "ledger is declared a table (--table, SGM_TABLES) but no query"),
        (("--retention", "account=1d"), "retention is set for account, a table"),
    ],
)
def test_bad_declarations_are_errors(tmp_path: Path, flags: tuple[str, ...], message: str) -> None:
    done = run(tmp_path, *flags)
    assert done.returncode != 0 and message in done.stderr.decode(), done.stderr.decode()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("q(a) := account(a) as x, x.ts > 5.", "reads 'x.ts', but 'account(a) as x' binds"),
        ("q(a) := account(a, b, c) as x.", "only binary relations hold events"),
        ('q(a) := account(a) as x, x.risk > "high".', "numbers"),
    ],
)
def test_bad_uses_are_query_errors(text: str, message: str) -> None:
    done = cli("explain", text, check=False)
    assert done.returncode != 0 and message in done.stderr.decode(), done.stderr.decode()
