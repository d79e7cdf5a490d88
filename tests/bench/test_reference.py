"""The reference benchmark (issue #13): its inputs, its count check, and a quick run end to end.

The end-to-end test runs ``python -m bench.reference --quick`` (two tiny R-MAT rows, one run
each) and needs ``cargo`` and ``../shared/peers``; it is skipped, with the reason, without
them. It uses the harness's build cache, ``.cache/peers``: when that holds no build of the
current source, the test builds the reference first (about 45 s on the 2-core development
machine, crates from crates.io included; a few seconds once cached). No timing is asserted.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bench.reference import main
from bench.reference_build import missing
from bench.reference_inputs import EdgeFiles, edge_lines
from bench.reference_report import Result, Row, table
from bench.reference_runs import MOTIFS, Timed, reference_command, rust_duration
from monitor.query.builtins import BUILTIN_QUERIES
from monitor.query.parser import parse_queries

ROOT = Path(__file__).resolve().parents[2]
QUICK_ROWS = ("| R-MAT 20k triangle | 1,000 |", "| R-MAT 20k 4-clique | 1,000 |")


def files(tmp_path: Path) -> EdgeFiles:
    paths = [tmp_path / f"{name}.txt" for name in ("whole", "preload", "rest", "empty")]
    return EdgeFiles("g", 10, 5, *paths)


def test_edge_lines_are_what_python_would_print() -> None:
    rng = np.random.default_rng(3)
    pairs = np.concatenate(
        [rng.integers(0, 2**31, (1_000, 2)), [[0, 0], [0, 9], [10, 100], [2**31 - 1, 1]]]
    ).astype(np.int64)
    expected = "".join(f"{a} {b}\n" for a, b in pairs.tolist()).encode()
    assert edge_lines(pairs) == expected
    assert edge_lines(np.empty((0, 2), np.int64)) == b""


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("12.5s", 12.5), ("229.046362ms", 0.229046362), ("3.1µs", 3.1e-6), ("7ns", 7e-9)],
)
def test_rust_durations_are_read_in_seconds(text: str, seconds: float) -> None:
    assert rust_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("query", sorted(MOTIFS))
def test_the_reference_motifs_are_our_queries_atom_for_atom(query: str, tmp_path: Path) -> None:
    (ours,) = parse_queries(BUILTIN_QUERIES[query])
    position = {variable: i for i, variable in enumerate(ours.head)}
    atoms = tuple((position[a.variables[0]], position[a.variables[1]]) for a in ours.atoms)
    assert MOTIFS[query] == atoms
    command = reference_command(Path("motif"), query, files(tmp_path), 1_000)
    assert command[1 : 2 + 2 * len(atoms)] == [str(len(atoms)), *map(str, np.ravel(atoms))]
    assert command[2 + 2 * len(atoms) :] == [
        str(tmp_path / "whole.txt"),
        "5",
        "1000",
        "inspect",
        "-w1",
    ]


def test_a_count_mismatch_is_a_loud_row(tmp_path: Path) -> None:
    equal = Result(Row("rmat-20k", "triangle", 1_000), files(tmp_path))
    equal.runs.append((Timed(100, 0.5), Timed(100, 2.0)))
    differ = Result(Row("rmat-20k", "4-clique", 1_000), files(tmp_path))
    differ.runs.append((Timed(100, 0.5), Timed(99, 2.0)))
    retracted = Result(Row("rmat-20k", "triangle", 10_000), files(tmp_path))
    retracted.runs.append((Timed(100, 0.5), Timed(100, 2.0, retractions=1)))
    text = table([equal, differ, retracted])
    assert "| R-MAT 20k triangle | 1,000 | 200 | 50 | 0.25 | 100 (equal) |" in text
    assert "**MISMATCH**: reference 100, ours +99 -0" in text
    assert "**MISMATCH**: reference 100, ours +100 -1" in text
    assert equal.ok and not differ.ok and not retracted.ok


def test_without_the_reference_source_the_harness_skips(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "reference.md"
    assert main(["--peers", str(tmp_path / "absent"), "--out", str(out), "--quick"]) == 0
    assert "skipped: the reference source is absent" in capsys.readouterr().out
    assert not out.exists()


@pytest.mark.skipif(missing() is not None, reason=f"reference benchmark: {missing()}")
def test_quick_run_counts_the_same_changes_on_both_sides(tmp_path: Path) -> None:
    out = tmp_path / "reference.md"
    done = subprocess.run(
        [sys.executable, "-m", "bench.reference", "--quick", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = out.read_text()
    for row in QUICK_ROWS:
        line = next((x for x in report.splitlines() if x.startswith(row)), None)
        assert line is not None, f"no row {row} in\n{report}"
        assert line.endswith("(equal) |"), line
        assert line in done.stdout
    assert "MISMATCH" not in report and "FAILED" not in report
