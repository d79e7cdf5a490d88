"""A join filter on two number fields, in one compiled pass over a stage's candidates.

``next(p).amount >= 0.8 * p.amount`` compares a field of the event a stage proposes with one
of an event the prefix bound before. In whole-array steps that is a gather of each side's eids
(the earlier one through the candidates' rows), a gather and decoding of each field, the
scaling, the comparison, the absent values' masks and the scatter of the answers: ten passes
over every candidate, a third of ``round_trip``'s time on 800k events (104M candidates at its
six-hop backward range step). :func:`keep_joined` reads each candidate's two events and fields
and writes its answer in one loop, with the same IEEE operations as
:func:`~core.fields.affine` and :func:`~core.fields.compare` (a product, then a sum, rounded
each; false where either side is absent or NaN), so the rows kept are the same; the tests
compare the two on fractions that round.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from core.compiled import AVAILABLE, ENABLED, njit
from monitor.engine.prefixes import Candidates
from monitor.index.field_columns import NumberField
from monitor.plan.plan import FieldFilter

#: The comparisons' codes in the compiled loop.
OPS = {"<": 0, "<=": 1, ">": 2, ">=": 3, "=": 4, "!=": 5}


def keep_joined(
    keep: npt.NDArray[np.bool_],
    batch: Candidates,
    join: FieldFilter,
    left: NumberField,
    right: NumberField,
) -> bool:
    """Clear ``keep`` where ``batch``'s candidates fail ``join`` (``left op factor * right +
    offset`` of two number fields); False, untouched, where it cannot (no compiled loops)."""
    if not ENABLED:
        return False
    width = batch.prefixes.width
    columns = batch.prefixes.columns
    values = batch.values
    left_column = values if join.left == width else columns[join.left]
    right_column = values if join.right == width else columns[join.right]
    scale = not (join.factor == 1.0 and join.offset == 0.0)
    _keep_joined(
        keep,
        batch.rows,
        left_column,
        join.left == width,
        right_column,
        join.right == width,
        left.values,
        left.scaled,
        float(left.base),
        left.power,
        right.values,
        right.scaled,
        float(right.base),
        right.power,
        float(join.factor),
        float(join.offset),
        scale,
        OPS[join.op],
    )
    return True


def warm() -> None:
    """Load (or compile, the first time on a machine) the loop for the field kinds a join
    filter meets (scaled and plain numbers on either side), before the first epoch."""
    if not ENABLED:
        return
    keep, rows, eids = np.ones(1, np.bool_), np.zeros(1, np.int64), np.zeros(1, np.int32)
    scaled, plain = np.zeros(1, np.int32), np.zeros(1, np.float64)
    for a in (scaled, plain):
        for b in (scaled, plain):
            args = (a, a is scaled, 0.0, 1.0, b, b is scaled, 0.0, 1.0, 1.0, 0.0, False, 0)
            _keep_joined(keep, rows, eids, True, eids, False, *args)


if AVAILABLE:
    from monitor.index.field_columns import decoded_number

    @njit(cache=True, nogil=True, inline="always")
    def _number(values, eid, scaled, base, power):  # type: ignore[no-untyped-def]
        """The number of event ``eid`` (NaN where absent), as the field column decodes it."""
        if scaled:
            return decoded_number(values[eid], base, power)
        return np.float64(values[eid])

    @njit(cache=True, nogil=True)
    def _keep_joined(  # type: ignore[no-untyped-def]
        keep,
        rows,
        left_column,
        left_is_value,
        right_column,
        right_is_value,
        left_values,
        left_scaled,
        left_base,
        left_power,
        right_values,
        right_scaled,
        right_base,
        right_power,
        factor,
        offset,
        scale,
        op,
    ):
        """``keep[i]`` cleared where candidate ``i`` (prefix ``rows[i]``, its proposal a
        column's value where ``*_is_value``) fails ``left op factor * right + offset``. A
        side read from the prefix is decoded once for its candidates in a row (they come
        grouped by prefix)."""
        row = np.int64(-1)
        a = b = np.nan
        for i in range(keep.shape[0]):
            if not keep[i]:
                continue
            new = rows[i] != row
            row = rows[i]
            if new or left_is_value:
                le = left_column[i] if left_is_value else left_column[row]
                a = _number(left_values, le, left_scaled, left_base, left_power)
            if new or right_is_value:
                re = right_column[i] if right_is_value else right_column[row]
                b = _number(right_values, re, right_scaled, right_base, right_power)
                if scale:
                    b = b * factor
                    b = b + offset
            if np.isnan(a) or np.isnan(b):
                keep[i] = False
            elif op == 0:
                keep[i] = a < b
            elif op == 1:
                keep[i] = a <= b
            elif op == 2:
                keep[i] = a > b
            elif op == 3:
                keep[i] = a >= b
            elif op == 4:
                keep[i] = a == b
            else:
                keep[i] = a != b
