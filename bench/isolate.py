"""One configuration, one process: fork, measure, report through a pipe, stop at a time limit.

The worker of a workload preloads the graph once and forks a child per configuration. The child
starts from a copy of the preloaded index (copy-on-write, so every configuration sees the same
state and none sees another's changes), measures, writes JSON lines to a pipe, and exits. The
parent reads them until the child ends or the time limit passes, in which case the child is
killed and whatever it had reported is kept. Peak resident memory comes from ``wait4``: the
child's ``ru_maxrss`` counts the preloaded pages it inherited as well as its own.

An optional memory limit (address space the child may map beyond what it inherited) turns a
configuration that would exhaust the machine's memory into a ``MemoryError`` in that child alone.
"""

from __future__ import annotations

import json
import os
import resource
import select
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Record = dict[str, Any]
Emit = Callable[[Record], None]


@dataclass
class ChildResult:
    """What a child reported, and how it ended: ok, timeout, out-of-memory or failed."""

    status: str
    records: list[Record] = field(default_factory=list)
    error: str = ""
    wall_seconds: float = 0.0
    max_rss_bytes: int = 0

    @property
    def last(self) -> Record | None:
        """The last record reported (cumulative figures), if any."""
        return self.records[-1] if self.records else None


def run_forked(
    measure: Callable[[Emit], None], *, limit: float, memory_limit: int | None = None
) -> ChildResult:
    """Run ``measure(emit)`` in a forked child for at most ``limit`` seconds."""
    sys.stdout.flush()
    sys.stderr.flush()
    read_fd, write_fd = os.pipe()
    began = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_fd)
        _child(measure, write_fd, memory_limit)
    os.close(write_fd)
    records: list[Record] = []
    buffer = b""
    timed_out = False
    deadline = began + limit
    with os.fdopen(read_fd, "rb", buffering=0) as pipe:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                os.kill(pid, signal.SIGKILL)
                break
            ready, _, _ = select.select([pipe], [], [], remaining)
            if not ready:
                continue
            chunk = pipe.read(1 << 16)
            if not chunk:
                break
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            records.extend(json.loads(line) for line in lines if line)
    _, status, usage = os.wait4(pid, 0)
    wall = time.monotonic() - began
    rss = int(usage.ru_maxrss) * 1024  # Linux reports KiB
    errors = [r["error"] for r in records if "error" in r]
    records = [r for r in records if "error" not in r]
    if timed_out:
        return ChildResult("timeout", records, f"stopped at the {limit:.0f} s limit", wall, rss)
    if errors:
        state = "out-of-memory" if errors[-1].startswith("MemoryError") else "failed"
        return ChildResult(state, records, errors[-1], wall, rss)
    if os.WIFSIGNALED(status) or os.waitstatus_to_exitcode(status) != 0:
        code = os.waitstatus_to_exitcode(status)
        return ChildResult("failed", records, f"child exited with {code}", wall, rss)
    return ChildResult("ok", records, "", wall, rss)


def _child(measure: Callable[[Emit], None], write_fd: int, memory_limit: int | None) -> None:
    code = 0
    with os.fdopen(write_fd, "w", buffering=1) as out:

        def emit(record: Record) -> None:
            out.write(json.dumps(record) + "\n")
            out.flush()

        try:
            if memory_limit is not None:
                allowed = _address_space() + memory_limit
                resource.setrlimit(resource.RLIMIT_AS, (allowed, allowed))
            measure(emit)
        except MemoryError:
            emit({"error": "MemoryError: the configuration exceeded the memory limit"})
            code = 3
        except BaseException as error:
            lines = traceback.format_exception(error)
            emit({"error": f"{type(error).__name__}: {error}\n{''.join(lines[-6:])}"})
            code = 1
    os._exit(code)


def _address_space() -> int:
    """Bytes of address space this process maps now (``VmSize``), 0 if unknown."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0
