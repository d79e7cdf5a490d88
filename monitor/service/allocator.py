"""glibc's allocator thresholds for a process that allocates large arrays every epoch.

By default glibc serves an allocation of 128 KiB or more (a threshold that rises with use, to
at most 32 MiB) with a fresh ``mmap``, and gives it back with ``munmap`` when it is freed; and it
returns the top of its heap to the system once 128 KiB (or twice the threshold) of it is free.
An epoch allocates and frees its arrays (keys, proposals, encoded output) of up to tens of
megabytes each time, so every epoch maps them again and page-faults every page of them (about
3 µs a page on a VM). With both thresholds at ``keep`` bytes (``M_MMAP_THRESHOLD`` and
``M_TRIM_THRESHOLD``), allocations below it come from the heap and up to that much freed memory
stays in the process for the next epoch: no faults, at the cost of that much resident memory
held back at most (bench/NOTES.md, *Kafka output*). Off by default (``malloc_keep_bytes`` 0):
the gain measured so far is within the machine's noise, and a long run has not yet shown that
the heap stays flat. Not glibc (musl, macOS): nothing changes.
"""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger(__name__)

#: ``mallopt``'s parameter numbers (glibc's ``malloc.h``).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3


def keep_freed_memory(keep: int) -> bool:
    """Both thresholds at ``keep`` bytes (0: glibc's own); whether glibc took them."""
    if keep <= 0:
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    value = min(keep, 2**31 - 1)
    took = bool(mallopt(M_MMAP_THRESHOLD, value)) and bool(mallopt(M_TRIM_THRESHOLD, value))
    if not took:
        log.warning("the allocator refused malloc_keep_bytes=%d; using its defaults", keep)
    return took
