"""Graceful stop: SIGTERM or SIGINT ask a loop to stop after the epoch in flight.

Loops check :attr:`Stop.requested` between epochs; a second signal interrupts at once.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType


class Stop:
    """Set by SIGTERM or SIGINT while :func:`stop_on_signals` is active."""

    requested = False


_active = 0
_handler: Callable[[int, FrameType | None], None] | None = None
SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Route SIGTERM and SIGINT to :class:`Stop` for the duration of the block (a block inside
    another keeps the outer one's handlers and any stop already requested)."""
    global _active, _handler
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

    previous = {s: signal.signal(s, request) for s in SIGNALS}
    _active, _handler = 1, request
    try:
        yield
    finally:
        _active, _handler = 0, None
        for s, handler in previous.items():
            signal.signal(s, handler)


def reclaim_signals() -> None:
    """Route the signals to :class:`Stop` again, inside :func:`stop_on_signals`: after a
    library installed its own handlers (``ray.init`` installs one that aborts on SIGTERM)."""
    if _handler is not None:
        for s in SIGNALS:
            signal.signal(s, _handler)
