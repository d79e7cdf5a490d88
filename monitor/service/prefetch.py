"""The next epoch's records, read while this epoch's transaction commits.

An epoch of ``serve`` ends with two round trips to the broker (``send_offsets_to_transaction``
and ``commit_transaction``) and a write to the state store. Reading and decoding the next
epoch's records needs neither the index nor the producer, so :class:`Prefetch` does it on a
thread of its own meanwhile: the consumer's ``consume`` and the transaction's calls wait on the
broker with the GIL released, and the decoding runs while the main thread waits.

Nothing of the exactly-once protocol changes: offsets are committed explicitly, so what the
consumer has read ahead is not committed by anything. Two things are kept in order:

* **Rebalances.** ``consume`` runs the assignment and revocation callbacks on the thread that
  calls it, and they read the stored positions that the epoch in flight is about to change.
  The main thread holds a lock (``settling``) until the epoch is committed (or aborted) and the
  callbacks take it first, so they see the positions after it.
* **Aborts.** When the transaction fails, the records read ahead are thrown away and the
  consumer is rewound to the first record of the aborted epoch (and, for partitions the aborted
  epoch did not read, to the first record read ahead), after the thread has ended: the consumer
  is never used by two threads at once.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable

from connectors.kafka_records import Polled


class Prefetch:
    """One poll of the source on a thread of its own; :meth:`result` waits for it."""

    def __init__(self, poll: Callable[[], Polled]) -> None:
        self._poll = poll
        self._polled: Polled | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="sgm-prefetch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._polled = self._poll()
        except BaseException as exc:  # handed to the main thread by result()
            self._error = exc

    def result(self) -> Polled:
        """The poll's records, once it has returned (its exception, if it raised one)."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._polled is not None
        return self._polled

    def discard(self) -> None:
        """Wait for the poll and drop what it read (never committed: it is read again)."""
        with contextlib.suppress(Exception):
            self.result()
