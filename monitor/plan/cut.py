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

from collections.abc import Mapping
from enum import Enum
from functools import lru_cache
from itertools import pairwise
from types import MappingProxyType

from core.fields import time_order_side
from monitor.query.ast import Query


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


@lru_cache(maxsize=256)
def projections(query: Query) -> Mapping[int, int]:
    """Each projection atom's index -> the index of the events atom it is the pairs of:
    ``R{S}(a, b)`` followed by ``R{S}#events(a, b, t)``; and each time-ordered atom
    (``R{S}#by_src(a, t)``, ``R{S}#by_dst(b, t)``) -> the events atom of its edge variable.
    (Kept per query, read-only.)"""
    out = {
        i: i + 1
        for i, (atom, events) in enumerate(pairwise(query.atoms))
        if events.relation == f"{atom.relation}#events" and events.variables[:-1] == atom.variables
    }
    events_of = {
        a.variables[-1]: i for i, a in enumerate(query.atoms) if a.relation.endswith("#events")
    }
    for i, atom in enumerate(query.atoms):
        if time_order_side(atom.relation) is not None:
            out[i] = events_of[atom.variables[-1]]
    return MappingProxyType(out)
