"""``bench.distributed --quick`` end to end (a 4k-edge R-MAT graph, both queries, 1-4 shards in
this process and as Ray actors, dataflow-join when its build is cached), and the pieces its
checks and goals rest on: the fingerprint of an epoch's changes and the goals' verdicts."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from bench import distributed
from bench.distributed_report import verdict
from bench.distributed_runs import fingerprint
from bench.reference_build import is_cached


def test_the_fingerprint_is_of_the_multiset_of_changes() -> None:
    rng = np.random.default_rng(5)
    columns = [rng.integers(0, 1000, 500), rng.integers(0, 1000, 500)]
    diff = rng.choice(np.array([-1, 1]), 500)
    order = rng.permutation(500)
    assert fingerprint([c[order] for c in columns], diff[order]) == fingerprint(columns, diff)
    moved = [columns[0].copy(), columns[1]]
    moved[0][7] += 1
    assert fingerprint(moved, diff) != fingerprint(columns, diff)
    flipped = diff.copy()
    flipped[7] = -flipped[7]
    assert fingerprint(columns, flipped) != fingerprint(columns, diff)
    twice = [np.concatenate([c, c]) for c in columns]
    assert fingerprint(twice, np.concatenate([diff, -diff])) == 0


def test_verdicts_say_met_or_by_how_much() -> None:
    assert verdict(1.05, 1.3, True, "x") == "met"
    assert verdict(1.6, 1.5, True, "x") == "missed by 0.10x"
    assert verdict(0.31, 0.5, False, "x") == "missed by 0.19x"
    assert verdict(0.45, 0.2, True, "%") == "missed by 25 points"


def test_a_quick_run_writes_every_table(tmp_path: Path) -> None:
    out = tmp_path / "distributed.md"
    peer = is_cached()
    argv = ["--quick", "--out", str(out), *([] if peer else ["--no-peer"])]
    assert distributed.main(argv) == 0
    text = out.read_text()
    assert "commit " in text and "Load average" in text
    for query in ("triangle", "4-clique"):
        head = re.search(rf"### R-MAT 4k, {query}: .* ([0-9,]+) match changes\n", text)
        assert head is not None, text
        changes = int(head.group(1).replace(",", ""))
        assert changes > 0
        table = text[head.end() :].split("\n\n")[0]
        rows = {line.split(" | ")[0].lstrip("| "): line for line in table.splitlines()[3:]}
        assert rows["single process"].endswith(f"| {changes:,} |")
        ours = [f"{s} shards {k}" for s in (2, 4) for k in ("in process", "as Ray actors")]
        for label in ["1 shard in process", "1 shard as a Ray actor", *ours]:
            assert rows[label].endswith("| = single |"), rows[label]
            cells = rows[label].split(" | ")
            assert float(cells[1].replace(",", "")) > 0  # updates/s
            assert cells[8].count(" / ") == 2  # driver / shards / calls+waits
        assert len(rows["4 shards as Ray actors"].split(" | ")[9].split(", ")) == 4  # RSS
        for workers in (1, 2):
            if peer:
                assert rows[f"dataflow-join -w{workers}"].endswith("| = ours |")
    assert "MISMATCH" not in text
    capacity = text.split("### Capacity")[1].split("###")[0]
    for s in (1, 2, 4, 8):
        assert re.search(rf"^\| {s} \| [0-9.]+ \| [0-9,]+ \|", capacity, re.M), capacity
    goals = text.split("## Goals")[1].split("## The runs")[0]
    verdicts = re.findall(r"\| (met|missed by [0-9.]+(?:x| points)) \|$", goals, re.M)
    expected = 2 + 2 + 3 + (2 if peer else 0) + 1
    assert len(verdicts) == expected, goals
    assert "Where a Ray epoch goes" in text


def test_without_ray_only_the_in_process_rows_run(tmp_path: Path) -> None:
    out = tmp_path / "distributed.md"
    argv = ["--quick", "--no-peer", "--no-ray", "--shards", "3", "--queries", "triangle"]
    assert distributed.main([*argv, "--out", str(out), "--capacity", "none"]) == 0
    text = out.read_text()
    assert "| 3 shards in process |" in text and "| = single |" in text
    assert "as Ray actors" not in text and "as a Ray actor" not in text
    assert "S = 4 | - | not measured in this run |" in text
