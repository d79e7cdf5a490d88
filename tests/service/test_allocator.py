"""glibc's thresholds (``SGM_MALLOC_KEEP_BYTES``): freed arrays are reused, not faulted in again.

Each check runs in a child process, whose allocator starts from glibc's defaults."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

CHILD = """
import resource, sys
import numpy as np
from monitor.service.allocator import keep_freed_memory
took = keep_freed_memory(int(sys.argv[1]))
for _ in range(2):  # warm up: the first arrays are faulted in either way
    a = np.ones(8 << 20); del a
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    a = np.ones(8 << 20); del a  # 64 MiB, above glibc's largest mmap threshold (32 MiB)
print(int(took), resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def faults(keep: int) -> tuple[bool, int]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(keep)], capture_output=True, text=True, check=True
    ).stdout.split()
    return bool(int(out[0])), int(out[1])


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallopt is glibc's")
def test_kept_memory_is_reused_without_page_faults() -> None:
    took, kept = faults(256 << 20)
    refused, default = faults(0)
    assert took and not refused
    # glibc's defaults: each 64 MiB array mapped and faulted in anew (16,384 small pages, or
    # 32 huge ones); kept: the freed arrays' pages reused
    assert default >= 5 * 32
    assert kept * 10 < default, (kept, default)
