"""Failpoints: named places where a test can make the process die, exactly there.

``SGM_FAILPOINT=name`` (with ``SGM_FAILPOINT_HIT=n``, default 1) makes the n-th pass through
:func:`failpoint` with that name kill the process with SIGKILL, as a crash or the OOM killer
would. Crash tests use it to stop a run between any two steps of the epoch protocol; without
the variable a failpoint costs one comparison. With ``SGM_FAILPOINT_ACTION=raise`` the n-th
pass raises :class:`InjectedFailure` instead (once), which the code around a failpoint that
allows it handles as the failure of the call that follows: tests of the recovery from it.
"""

from __future__ import annotations

import os
import signal
import sys

_ARMED = os.environ.get("SGM_FAILPOINT")
_HIT = int(os.environ.get("SGM_FAILPOINT_HIT", "1"))
_RAISE = os.environ.get("SGM_FAILPOINT_ACTION", "kill") == "raise"
_seen = 0


class InjectedFailure(RuntimeError):
    """What an armed failpoint raises with ``SGM_FAILPOINT_ACTION=raise``."""


def failpoint(name: str) -> None:
    """Die here if this failpoint is armed and this is its n-th pass."""
    global _seen
    if name != _ARMED:
        return
    _seen += 1
    if _RAISE:
        if _seen == _HIT:
            raise InjectedFailure(f"failpoint {name} hit {_seen}")
        return
    if _seen >= _HIT:
        sys.stderr.write(f"subgraph-monitor: failpoint {name} hit {_seen}: killing myself\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)
