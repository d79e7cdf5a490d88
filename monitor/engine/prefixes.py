"""Prefixes: bound values for the first j variables of an attribute order, as columns.

A batch of prefixes is one ``int32`` column per bound variable (dense vertex ids) and one
``int64`` column of diffs (the sign of the seed change each prefix descends from; +1 for static
evaluation). Every operation on prefixes is on whole columns.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

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
        """The candidates where ``keep``."""
        return Candidates(self.prefixes, self.rows[keep], self.values[keep])

    def extended(self) -> Prefixes:
        """The candidates as prefixes, one column wider."""
        return self.prefixes.extended(self.rows, self.values)
