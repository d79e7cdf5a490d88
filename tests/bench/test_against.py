"""The in-run A/B (``bench.against``): the "before" side runs this tree's benchmark function
over another checkout's engine code, the "after" side over this tree's, alternately."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from bench.against import ROOT, interleaved

PROBE = """
import monitor


def where(tag: str) -> dict[str, str]:
    return {"tag": tag, "monitor": monitor.__file__}
"""


@pytest.mark.skipif(shutil.which("git") is None, reason="git is needed for a worktree")
def test_each_side_imports_its_own_engine_and_the_checkout_goes(tmp_path: Path) -> None:
    inside = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--is-inside-work-tree"],
        capture_output=True,
        text=True,
        check=False,
    )
    if inside.stdout.strip() != "true":
        pytest.skip("not a git checkout")
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    before, after = interleaved("HEAD", probe, "where", 3, warmup={"tag": "warm"}, tag="x")
    assert [r["tag"] for r in before + after] == ["x"] * 6
    assert all(Path(r["monitor"]).is_relative_to(ROOT) for r in after)
    others = {Path(r["monitor"]).parents[1] for r in before}
    assert len(others) == 1 and ROOT not in others, "the before side is another checkout"
    assert not next(iter(others)).exists(), "the worktree is removed at the end"
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "list"], capture_output=True, text=True, check=True
    )
    assert str(next(iter(others))) not in listed.stdout
