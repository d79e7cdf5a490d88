"""Prefixes: bound values for the first j variables of an attribute order, as columns.

A batch of prefixes is one ``int32`` column per bound variable (dense vertex ids) and one
``int64`` column of diffs (the sign of the seed change each prefix descends from; +1 for static
evaluation). Every operation on prefixes is on whole columns.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from core.compiled import AVAILABLE, ENABLED, njit
from monitor.index.levels import I32, I64


@dataclass(frozen=True)
class Prefixes:
    """A batch of prefixes of equal width."""

    columns: tuple[I32, ...]
    diff: I64

    def __len__(self) -> int:
        return int(self.diff.shape[0])

    @property
    def width(self) -> int:
        return len(self.columns)

    def take(self, rows: npt.NDArray[np.integer] | npt.NDArray[np.bool_]) -> Prefixes:
        """The prefixes at ``rows`` (indices or a mask)."""
        return Prefixes(tuple(c[rows] for c in self.columns), self.diff[rows])

    def slice(self, lo: int, hi: int) -> Prefixes:
        """Prefixes ``lo .. hi-1``, without copying."""
        return Prefixes(tuple(c[lo:hi] for c in self.columns), self.diff[lo:hi])

    def extended(self, rows: npt.NDArray[np.integer], values: I32) -> Prefixes:
        """The prefixes at ``rows``, each extended by one more column, ``values``."""
        return Prefixes((*(c[rows] for c in self.columns), values), self.diff[rows])

    def column(self, c: int, at: npt.NDArray[np.integer] | None = None) -> I32:
        """Column ``c`` (at rows ``at``): what filters read, as of :class:`Candidates`."""
        return self.columns[c] if at is None else self.columns[c][at]

    @classmethod
    def empty(cls, width: int) -> Prefixes:
        return cls(tuple(np.empty(0, np.int32) for _ in range(width)), np.empty(0, np.int64))


@dataclass(frozen=True)
class Candidates:
    """The prefixes at ``rows``, each extended by ``values``, not gathered yet: a stage's
    proposals while its filters run. A filter reads the columns it compares, at the rows still
    kept; the rest are gathered once, for the candidates that pass (a stage that keeps one
    proposal in six copies a sixth of the columns)."""

    prefixes: Prefixes
    rows: npt.NDArray[np.integer]
    values: I32

    def __len__(self) -> int:
        return int(self.rows.shape[0])

    def column(self, c: int, at: npt.NDArray[np.integer] | None = None) -> I32:
        """Column ``c`` of the extended prefixes (at candidates ``at``)."""
        if c == self.prefixes.width:
            return self.values if at is None else self.values[at]
        column: I32 = self.prefixes.columns[c][self.rows if at is None else self.rows[at]]
        return column

    def take(self, keep: npt.NDArray[np.bool_]) -> Candidates:
        """The candidates where ``keep`` (rows and values in one compiled pass: a stage's
        filters keep most of many candidates, which two masked copies read twice)."""
        rows, values = self.rows, self.values
        if ENABLED and rows.dtype == np.int64 and values.dtype == np.int32:
            rows, values = _kept(keep, rows, values)
            return Candidates(self.prefixes, rows, values)
        return Candidates(self.prefixes, rows[keep], values[keep])

    def extended(self) -> Prefixes:
        """The candidates as prefixes, one column wider."""
        return self.prefixes.extended(self.rows, self.values)


def warm() -> None:
    """Load (or compile, the first time on a machine) the compiled loop, before the first
    epoch."""
    if ENABLED:
        _kept(np.ones(1, np.bool_), np.zeros(1, np.int64), np.zeros(1, np.int32))


if AVAILABLE:

    @njit(cache=True, nogil=True)
    def _kept(keep, rows, values):  # type: ignore[no-untyped-def]
        """``rows[keep]`` and ``values[keep]``: a count, then one pass copying both."""
        n = 0
        for i in range(keep.shape[0]):
            n += keep[i]
        out_rows = np.empty(n, rows.dtype)
        out_values = np.empty(n, values.dtype)
        k = 0
        for i in range(keep.shape[0]):
            if keep[i]:
                out_rows[k] = rows[i]
                out_values[k] = values[i]
                k += 1
        return out_rows, out_values
