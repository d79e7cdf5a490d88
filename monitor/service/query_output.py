"""One query's match deltas of one epoch, as every engine hands them to the sinks."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from core.columns import Column, Member

I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class QueryOutput:
    """One query's match deltas in one epoch, with external vertex ids (one column per vertex
    variable) and, for a query with edge variables, per edge variable the matched events
    (columns ``id``, ``src``, ``dst`` and every field, one value per row)."""

    query: str
    variables: tuple[str, ...]
    columns: list[npt.NDArray[np.generic]]
    diff: I64
    edges: dict[str, Mapping[str, Column]] = field(default_factory=dict)
    #: Per row: ``match_id`` always, ``cause`` (of a -1) in a run with a window.
    extra: dict[str, Member] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.diff.shape[0])
