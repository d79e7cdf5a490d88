"""Graceful stop: SIGTERM or SIGINT ask a loop to stop after the epoch in flight.

Loops check :attr:`Stop.requested` between epochs; a second signal interrupts at once.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


class Stop:
    """Set by SIGTERM or SIGINT while :func:`stop_on_signals` is active."""

    requested = False


_active = 0


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Route SIGTERM and SIGINT to :class:`Stop` for the duration of the block (a block inside
    another keeps the outer one's handlers and any stop already requested)."""
    global _active
    if _active:
        _active += 1
        try:
            yield
        finally:
            _active -= 1
        return
    Stop.requested = False

    def request(signum: int, frame: FrameType | None) -> None:
        if Stop.requested:
            raise KeyboardInterrupt
        Stop.requested = True

    previous = {s: signal.signal(s, request) for s in (signal.SIGTERM, signal.SIGINT)}
    _active = 1
    try:
        yield
    finally:
        _active = 0
        for s, handler in previous.items():
            signal.signal(s, handler)
