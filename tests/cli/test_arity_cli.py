"""A relation's arity in ``subgraph-monitor run``: the one the queries (and a restored state)
give, else the relation's first tuple's. A line of another length is a bad line, reported with
its ``path:line`` (reason ``relation 'e' has 2 ids per tuple, got 3``) and counted; the rest of
the input is read as if the line were not there. The file source used to take every relation's
arity from its first line, so one odd first line turned all the good lines after it into bad
lines, and itself into an update the index ignored (``wrong_arity``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tests.cli.test_cli import cli, deltas

HOT = "hot(a, b) := flagged(a), e(a, b)."


def edge_lines(n: int = 400, seed: int = 5) -> list[tuple[int, int, int]]:
    """``(diff, src, dst)`` of a stream of inserts and a few deletes over 30 vertices."""
    rng = np.random.default_rng(seed)
    present: list[tuple[int, int]] = []
    out = []
    for _ in range(n):
        if present and rng.random() < 0.1:
            u, v = present.pop(int(rng.integers(0, len(present))))
            out.append((-1, u, v))
        else:
            u, v = (int(x) for x in rng.integers(0, 30, 2))
            present.append((u, v))
            out.append((1, u, v))
    return out


def summary(stderr: bytes) -> tuple[list[str], list[str]]:
    """The run's bad lines as reported, and its summary without the elapsed time."""
    lines = stderr.decode().splitlines()
    skipped = [line for line in lines if line.startswith("subgraph-monitor: skipped ")]
    rest = [line for line in lines if line not in skipped and "elapsed" not in line]
    return skipped, rest


def run_both(tmp_path: Path, good: list[str], bad: str, reason: str, *queries: str) -> None:
    """Run ``queries`` over the ``good`` lines with ``bad`` first, and without it: the same
    deltas, the same summary but for one bad line, reported at line 1 for ``reason``."""
    suffix = ".jsonl" if bad.startswith("{") else ".txt"
    clean, odd = tmp_path / f"clean{suffix}", tmp_path / f"odd{suffix}"
    clean.write_text("\n".join(good) + "\n")
    odd.write_text("\n".join([bad, *good]) + "\n")
    args = [arg for q in queries for arg in ("-q", q)]
    expected = cli("run", *args, "--edges", str(clean), "--batch-size", "50")
    got = cli("run", *args, "--edges", str(odd), "--batch-size", "50")
    assert len(deltas(expected.stdout)) > 10
    assert deltas(got.stdout) == deltas(expected.stdout)
    skipped, rest = summary(got.stderr)
    assert skipped == [f"subgraph-monitor: skipped {odd}:1: {reason}"]
    assert "subgraph-monitor: bad input lines skipped 1" in rest
    assert "wrong_arity" not in rest[0]
    zero = [line.replace("lines skipped 1", "lines skipped 0") for line in rest]
    assert summary(expected.stderr) == ([], zero)


def test_a_json_first_tuple_longer_than_the_queries_arity(tmp_path: Path) -> None:
    good = [
        json.dumps({"src": u, "dst": v, "op": "insert" if d > 0 else "delete"})
        for d, u, v in edge_lines()
    ]
    bad = json.dumps({"relation": "e", "tuple": [1, 2, 3]})
    run_both(tmp_path, good, bad, "relation 'e' has 2 ids per tuple, got 3", "triangle")


def test_a_json_first_tuple_shorter_than_the_queries_arity_among_other_relations(
    tmp_path: Path,
) -> None:
    good = [
        json.dumps(
            {"relation": "e", "tuple": [u, v]} if d > 0 else {"src": u, "dst": v, "op": "delete"}
        )
        for d, u, v in edge_lines(seed=6)
    ]
    good += [json.dumps({"relation": "flagged", "tuple": [v]}) for v in range(0, 30, 3)]
    bad = json.dumps({"relation": "flagged", "tuple": [1, 2]})
    reason = "relation 'flagged' has 1 id per tuple, got 2"
    run_both(tmp_path, good, bad, reason, "triangle", HOT)


def test_a_text_first_tuple_of_the_default_relation_with_three_ids(tmp_path: Path) -> None:
    """The ``src dst`` lines after it are read on the vectorized path."""
    good = [f"{u} {v}" if d > 0 else f"- {u} {v}" for d, u, v in edge_lines(seed=7)]
    good[100:100] = [f"+ flagged({v})" for v in range(0, 30, 4)]
    reason = "relation 'e' has 2 ids per tuple, got 3"
    run_both(tmp_path, good, "e(1, 2, 3)", reason, "triangle", HOT)


def test_a_text_first_tuple_of_a_named_relation_with_two_ids(tmp_path: Path) -> None:
    good = [f"{u} {v}" if d > 0 else f"- {u} {v}" for d, u, v in edge_lines(seed=8)]
    good[10:10] = [f"+ flagged({v})" for v in range(0, 30, 2)]
    reason = "relation 'flagged' has 1 id per tuple, got 2"
    run_both(tmp_path, good, "+ 4 5 flagged", reason, HOT)


def test_count_reads_the_queries_arity_too(tmp_path: Path) -> None:
    good = [f"{u} {v}" for _, u, v in edge_lines(seed=9)]
    (tmp_path / "clean.txt").write_text("\n".join(good) + "\n")
    (tmp_path / "odd.txt").write_text("\n".join(["e(1, 2, 3)", *good]) + "\n")
    expected = cli("count", "-q", "triangle", "--edges", str(tmp_path / "clean.txt"))
    got = cli("count", "-q", "triangle", "--edges", str(tmp_path / "odd.txt"))
    assert got.stdout == expected.stdout != b"triangle\t0\n"
    assert got.stderr.decode().splitlines() == [
        f"subgraph-monitor: skipped {tmp_path / 'odd.txt'}:1: "
        "relation 'e' has 2 ids per tuple, got 3"
    ]


def test_a_restarted_run_reads_the_stored_relations_arities(tmp_path: Path) -> None:
    """``seen`` is no query's: its arity is its first line's, stored with the index. A run
    killed after epoch 1 restarts at the input block holding that epoch's last update, past
    ``seen``'s first line; its first ``seen`` line there has three ids, and is the bad one."""
    comment = "# " + "x" * 998
    lines = ["seen(1, 2)", "1 2", *[comment] * 9000, "2 3", "seen(3, 4, 5)", "seen(3, 4)"]
    lines += [f"{u} {v}" for _, u, v in edge_lines(100, seed=10)] + ["seen(5, 6)", "1 3"]
    bad_line = lines.index("seen(3, 4, 5)") + 1
    stream = tmp_path / "edges.txt"
    stream.write_text("\n".join(lines) + "\n")

    def run(name: str, env: dict[str, str] | None = None) -> bytes:
        done = cli(
            "run",
            "-q",
            "triangle",
            "--edges",
            str(stream),
            "--batch-size",
            "3",
            "--state-dir",
            str(tmp_path / f"{name}.state"),
            "--output",
            str(tmp_path / f"{name}.jsonl"),
            env=env,
            check=env is None,
        )
        return done.stderr

    run("one")
    killed = run("many", {"SGM_FAILPOINT": "after_epoch_commit"})
    assert b"failpoint after_epoch_commit hit 1" in killed
    skipped, rest = summary(run("many"))
    assert skipped == [
        f"subgraph-monitor: skipped {stream}:{bad_line}: relation 'seen' has 2 ids per tuple, got 3"
    ]
    assert "wrong_arity" not in rest[0] and "subgraph-monitor: bad input lines skipped 1" in rest
    assert (tmp_path / "many.jsonl").read_bytes() == (tmp_path / "one.jsonl").read_bytes()
    inspect = [
        cli("state", "inspect", str(tmp_path / f"{n}.state")).stdout for n in ("one", "many")
    ]
    relations = [
        [line for line in text.decode().splitlines() if " arity " in line] for text in inspect
    ]
    assert relations[0] == relations[1]
    assert any(line.split()[:4] == ["seen", "arity", "2", "3"] for line in relations[1])
