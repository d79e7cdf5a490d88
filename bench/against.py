"""A/B against an earlier commit, in the same run: this tree's benchmark code over that commit's
engine, in child processes, interleaved.

Rates on a shared machine drift by more than the changes a round of work makes (±15% between
runs minutes apart here), so a "before" figure from an earlier run says little. Here both sides
run now, alternately: a child process imports the benchmark module *of this tree* by its file
(so the stream and the measure are the same) with ``PYTHONPATH`` set to a checkout of the other
commit (so ``monitor``, ``core`` and ``connectors`` are that commit's), calls one of its
functions with JSON arguments and prints the JSON result. The checkout is a temporary ``git
worktree``, removed at the end.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

_CHILD = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("bench_under_test", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
result = getattr(module, sys.argv[2])(**json.loads(sys.argv[3]))
print("RESULT " + json.dumps(result), flush=True)
"""


@contextlib.contextmanager
def checkout(commit: str) -> Iterator[Path]:
    """A temporary worktree of ``commit`` (its code only: no virtual environment needed)."""
    with tempfile.TemporaryDirectory(prefix="sgm-before-") as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(tree), commit],
            check=True,
        )
        try:
            yield tree
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=False
            )


def call(tree: Path, module_file: Path, function: str, **kwargs: Any) -> Any:
    """``function(**kwargs)`` of ``module_file`` (this tree's) run over ``tree``'s code, in a
    child process; its result (JSON)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(module_file), function, json.dumps(kwargs)],
        env=env,
        cwd=tree,
        capture_output=True,
        text=True,
        check=False,
    )
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    raise RuntimeError(f"{function} over {tree} failed ({done.returncode}):\n{done.stderr[-4000:]}")


def interleaved(
    commit: str,
    module_file: Path,
    function: str,
    rounds: int,
    warmup: dict[str, Any] | None = None,
    **kwargs: Any,
) -> tuple[list[Any], list[Any]]:
    """``rounds`` results of ``function`` over ``commit`` and over this tree, alternating which
    goes first from round to round. A call with ``warmup``'s arguments on each side first, not
    kept: the fresh checkout compiles its numba kernels into its cache there, not in a round."""
    before: list[Any] = []
    after: list[Any] = []
    with checkout(commit) as tree:
        for where in (tree, ROOT) if warmup is not None else ():
            call(where, module_file, function, **(warmup or {}))
        for r in range(rounds):
            sides = [(tree, before), (ROOT, after)]
            for where, results in sides if r % 2 == 0 else sides[::-1]:
                results.append(call(where, module_file, function, **kwargs))
                print(function, "before" if where == tree else "after", results[-1], flush=True)
    return before, after
