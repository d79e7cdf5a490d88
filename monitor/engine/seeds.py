"""Seed prefixes of a plan: the changes (or all tuples) of its seed atom, as prefix columns."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from monitor.engine.extend import Filters, IndexReader
from monitor.engine.prefixes import Prefixes
from monitor.index.levels import I32, I64
from monitor.plan.plan import DeltaQuery


def seed_prefixes(
    plan: DeltaQuery, columns: Sequence[I32], diff: I64, index: IndexReader
) -> Prefixes:
    """Prefixes seeded by tuples of the seed atom's relation, after the seed's checks and filters.

    A variable repeated in the seed atom keeps only the tuples equal at its positions; a plan
    seeded by one sign of the changes (``plan.seed.sign``) only the changes of that sign.
    """
    width = plan.seed.width
    bound: list[I32 | None] = [None] * width
    keep = np.ones(diff.shape[0], np.bool_) if not plan.seed.sign else diff * plan.seed.sign > 0
    for position, column in enumerate(plan.seed.columns):
        existing = bound[column]
        if existing is None:
            bound[column] = columns[position]
        else:
            keep &= existing == columns[position]
    cols = tuple(c for c in bound if c is not None)
    prefixes = Prefixes(cols, diff)
    if not keep.all():
        prefixes = prefixes.take(keep)
    return Filters(plan.checks, plan.comparisons, index, plan.fields, plan.guards)(prefixes)
