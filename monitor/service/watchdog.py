"""A watchdog over Kafka calls that can block past their time-out."""

from __future__ import annotations

import logging
import os
import threading
import time

log = logging.getLogger(__name__)


class Watchdog:
    """Ends the process when a Kafka call blocks far past its time-out.

    librdkafka can block in ``send_offsets_to_transaction`` past its time-out when the group
    coordinator goes away (confluentinc/librdkafka#5456, #5511). Nothing of the epoch in flight
    is in the store yet, so the safe way out is to exit (code 75, "temporary failure") and let
    the supervisor restart the service, whose recovery is exact; this is logged as critical.
    """

    EXIT_CODE = 75

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._lock = threading.Lock()
        self._deadline: float | None = None
        self._what = ""
        threading.Thread(target=self._watch, name="sgm-watchdog", daemon=True).start()

    def arm(self, what: str) -> None:
        with self._lock:
            self._deadline, self._what = time.monotonic() + self.seconds, what

    def disarm(self) -> None:
        with self._lock:
            self._deadline = None

    def _watch(self) -> None:
        while True:
            time.sleep(1.0)
            with self._lock:
                late = self._deadline is not None and time.monotonic() > self._deadline
                what = self._what
            if late:
                log.critical(
                    "%s is stuck in Kafka for more than %.0f s; exiting so that the service "
                    "restarts and recovers",
                    what,
                    self.seconds,
                )
                logging.shutdown()
                os._exit(self.EXIT_CODE)
