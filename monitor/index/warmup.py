"""The index's compiled loops, loaded (or compiled, the first time on a machine) at once.

A loop that numba meets for the first time in an epoch compiles there, or loads from its disk
cache: a second or more in the epoch of a fresh container. Each module with a compiled loop has
a ``warm()`` for the types the engine passes; this is the list of them, so a processor makes one
call and a new loop is warmed by adding its module here
(``tests/service/test_warm.py`` fails if two epochs of ``big_ring`` meet one that is not).
"""

from __future__ import annotations

from monitor.index import (
    field_columns,
    hashtable,
    intersect,
    kernels,
    levels,
    numbered,
    texts,
    time_kernels,
    unique,
)


def warm() -> None:
    """Load every compiled loop of the index for the types the engine passes."""
    modules = (
        levels,
        kernels,
        intersect,
        unique,
        hashtable,
        field_columns,
        texts,
        numbered,
        time_kernels,
    )
    for module in modules:
        module.warm()
