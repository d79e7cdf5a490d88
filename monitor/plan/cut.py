"""The cut: which version of a relation an atom of a delta query reads.

A delta query ``dQ_i`` reads the atoms before ``i`` at ``NEW`` (including the epoch's changes)
and those after ``i`` at ``OLD`` (the state before the epoch); :func:`cut_of` is the one place
that decides it. The plan names the cut; the index answers at it.

A *projection* atom is the pairs of an events atom beside it (``R{S}(a, b)`` next to
``R{S}#events(a, b, t)``, the rewrite of ``R(a, b) as t``): at every version its relation holds
exactly the pairs of that relation's events, so it reads its events atom's cut and constrains
nothing beyond it. The telescoping sum then runs over the events atoms alone: a projection
seeds no delta query of its own (every change of the pairs comes with a change of the events),
and the delta query seeded by its events atom leaves it out (a changed event's pair holds
where the event does).
"""

from __future__ import annotations

from enum import Enum


class Cut(Enum):
    """Which version of a relation an atom reads: before the epoch, or including it."""

    OLD = "old"
    NEW = "new"


def cut_of(atom: int, seed: int | None, projects: int | None = None) -> Cut:
    """The cut atom ``atom`` reads in the delta query seeded by atom ``seed``.

    Atoms before the seed read ``NEW``, atoms after it ``OLD`` (so that summing the delta queries
    over all atoms telescopes to ``Q(new) - Q(old)``). A static plan (``seed`` None) reads
    ``NEW`` everywhere. A projection reads the cut of the events atom it ``projects``.
    """
    if projects is not None:
        atom = projects
    if seed is None or atom < seed:
        return Cut.NEW
    return Cut.OLD
