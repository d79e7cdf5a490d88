"""The program ``subgraph-monitor`` (and ``python -m monitor``): the CLI, then out of the process.

An interpreter that loaded the compiled kernels spends 0.3 s tearing them down at exit (their
LLVM modules and dispatchers, module by module), after the command's work is done and its
output written: a tenth of the start and finish of a short run, 3% of a two-million-event one.
:func:`entry` runs the command as click does, then the exit handlers that libraries and the
command registered (``atexit``: logging, Ray's shutdown), flushes the standard streams and
leaves with the command's exit code, skipping only that teardown. Where a thread that is not a
daemon still runs (the interpreter would wait for it), it exits the usual way.

The tests call :func:`monitor.cli.main` through click's runner, in their own process: never this.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from typing import NoReturn

from monitor.cli import main


def entry() -> NoReturn:
    """Run the command line, then exit without the interpreter's teardown (module docstring)."""
    try:
        main()
    except SystemExit as done:
        code = exit_code(done.code)
    else:  # (click's standalone mode always exits; a return means success)
        code = 0
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not _MAIN):
        sys.exit(code)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        # (a reader gone, or the stream closed already: the command said so, or chose to end
        # quietly, as a normal exit would)
        with contextlib.suppress(BrokenPipeError, ValueError):
            stream.flush()
    os._exit(code)


def exit_code(code: object) -> int:
    """The process's exit code for ``SystemExit(code)``, as the interpreter makes it: 0 for
    None, the number, else the message printed on stderr and 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    sys.stderr.write(f"{code}\n")
    return 1


_MAIN = threading.main_thread()
