"""The benchmark harness still runs end to end, and its cross-checks hold.

No timing is asserted: the quick run only proves that every configuration runs, that the
binary-join baseline produced exactly our deltas, and that the recomputed counts agree.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_quick_benchmark_runs_and_its_baselines_agree(tmp_path: Path, datasets: Path) -> None:
    out = tmp_path / "BENCHMARKS.md"
    done = subprocess.run(
        [sys.executable, "-m", "bench.run", "--quick", "--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    report = out.read_text()
    assert "binary ok" in report and "recount ok" in report
    assert "MISMATCH" not in report
    assert "| sym-triangle |" in report
