"""The cut: which version of a relation an atom of a delta query reads.

A delta query ``dQ_i`` reads the atoms before ``i`` at ``NEW`` (including the epoch's changes)
and those after ``i`` at ``OLD`` (the state before the epoch); :func:`cut_of` is the one place
that decides it. The plan names the cut; the index answers at it.
"""

from __future__ import annotations

from enum import Enum


class Cut(Enum):
    """Which version of a relation an atom reads: before the epoch, or including it."""

    OLD = "old"
    NEW = "new"


def cut_of(atom: int, seed: int | None) -> Cut:
    """The cut atom ``atom`` reads in the delta query seeded by atom ``seed``.

    Atoms before the seed read ``NEW``, atoms after it ``OLD`` (so that summing the delta queries
    over all atoms telescopes to ``Q(new) - Q(old)``). A static plan (``seed`` None) reads
    ``NEW`` everywhere.
    """
    if seed is None or atom < seed:
        return Cut.NEW
    return Cut.OLD
