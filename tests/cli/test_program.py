"""The program's exit (:mod:`monitor.cli.program`): out of the process without the interpreter's
teardown, yet with every exit handler run, every byte written and the command's exit code."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _program(tmp_path: Path, before: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``entry()`` in a process of its own with ``args``, after ``before`` ran there (the
    program imported already)."""
    code = (
        "from monitor.cli.program import entry\n"
        + textwrap.dedent(before)
        + f"import sys\nsys.argv = ['subgraph-monitor', *{list(args)!r}]\nentry()\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "MARKER": str(tmp_path / "marker")},
    )


def test_exit_handlers_run_and_pending_output_is_written(tmp_path: Path) -> None:
    (tmp_path / "empty.txt").write_text("")
    done = _program(
        tmp_path,
        """
        import atexit, os, sys
        atexit.register(lambda: open(os.environ["MARKER"], "w").write("ran"))
        sys.stdout.write("written before the command, never flushed\\n")
        """,
        *("run", "--query", "triangle", "--edges", str(tmp_path / "empty.txt"), "--quiet"),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "written before the command, never flushed\n"
    assert (tmp_path / "marker").read_text() == "ran"


def test_the_exit_code_is_the_commands() -> None:
    done = _program(Path("/nonexistent"), "", "run", "--query", "nope(", "--edges", "-")
    assert done.returncode == 2
    assert "line 1, column" in done.stderr


def test_a_thread_still_running_is_waited_for(tmp_path: Path) -> None:
    done = _program(
        tmp_path,
        """
        import os, threading, time
        def late():
            time.sleep(1.0)
            open(os.environ["MARKER"], "w").write("finished")
        threading.Thread(target=late).start()
        """,
        "--version",
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "marker").read_text() == "finished"
