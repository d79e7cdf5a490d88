"""Output columns: how the engine hands a sink the values of a field or a record member.

A column holds one JSON value per row, or none (the row leaves the member out):

- ``int`` arrays: integers, every row has one;
- ``float`` arrays: numbers, ``NaN`` where a row has none (integral ones print as integers);
- ``object`` arrays: ``int``, ``str``, ``bool`` or ``float`` values, ``None`` where absent;
- fixed-width ``S`` arrays: ASCII text that needs no escaping, empty where absent;
- :class:`Coded`: dictionary codes into a list of values, ``-1`` where absent (string and
  boolean fields, causes), so a value is encoded once per batch, not once per row.

Sinks encode them whole (:mod:`connectors.json_rows`); :func:`python_values` is the slow path
that gives one Python object per row.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

EXACT = 2.0**53
"""Numbers of a float column below this magnitude that are integral print as integers."""


@dataclass(frozen=True)
class Coded:
    """A dictionary column: row ``i`` holds ``values[codes[i]]``, nothing where the code is < 0.

    ``values`` are JSON values (``str``, ``bool``, numbers); each used one is encoded once."""

    codes: npt.NDArray[np.integer]
    values: Sequence[object]

    @property
    def shape(self) -> tuple[int]:
        return (int(self.codes.shape[0]),)

    def __getitem__(self, rows: npt.NDArray[np.integer] | npt.NDArray[np.bool_] | slice) -> Coded:
        return Coded(self.codes[rows], self.values)

    def tolist(self) -> list[object]:
        """The values as Python objects, ``None`` where absent (slow paths and tests)."""
        table = [*self.values, None]
        return [table[c] for c in self.codes.tolist()]


Column = npt.NDArray[np.generic] | Coded
"""A column of JSON values, as the module docstring lists them."""


class EventRows(Mapping[str, Column]):
    """The events of one edge variable, a row each, as named columns (``id``, ``src``, ``dst``,
    the fields): each distinct event's values once (``table``) and per row the index of its
    event there (``codes``). A hub's transfer is in many matches of an epoch (a six-hop ring's
    output holds each event about ten times), so a sink writes each distinct event once and
    places its text in every row that holds it (:func:`connectors.delta_json.value_pieces`).
    Read as a mapping, each column has a value per row (gathered at its first reading)."""

    def __init__(self, table: Mapping[str, Column], codes: npt.NDArray[np.integer]) -> None:
        self.table = dict(table)
        self.codes = codes
        self._gathered: dict[str, Column] = {}

    def __getitem__(self, name: str) -> Column:
        found = self._gathered.get(name)
        if found is None:
            found = self._gathered[name] = self.table[name][self.codes]
        return found

    def __iter__(self) -> Iterator[str]:
        return iter(self.table)

    def __len__(self) -> int:
        return len(self.table)

    @property
    def distinct(self) -> int:
        """How many events the table holds (its ``id`` column has one each)."""
        return int(self.table["id"].shape[0])

    def take(self, rows: npt.NDArray[np.integer] | slice) -> EventRows:
        """These rows' events, the table cut to the events they hold where that is fewer than
        half of it (a sink's chunk of rows writes only its own events)."""
        codes = self.codes[rows]
        if 2 * codes.shape[0] >= self.distinct:
            return EventRows(self.table, codes)
        used, inverse = np.unique(codes, return_inverse=True)
        table = {name: column[used] for name, column in self.table.items()}
        return EventRows(table, inverse.reshape(-1))


@dataclass(frozen=True)
class Members:
    """A JSON object per row, its members named columns (an aggregate query's ``values``:
    ``{"count_distinct_a": 12}``); a member absent in a row is left out of that row's object."""

    columns: dict[str, Column]
    rows: int

    @property
    def shape(self) -> tuple[int]:
        return (self.rows,)

    def __getitem__(self, rows: npt.NDArray[np.integer] | npt.NDArray[np.bool_] | slice) -> Members:
        columns = {name: column[rows] for name, column in self.columns.items()}
        return Members(columns, int(np.arange(self.rows)[rows].shape[0]))

    def tolist(self) -> list[dict[str, object]]:
        """Each row's object, absent members left out (slow paths and tests)."""
        named = {name: python_values(column) for name, column in self.columns.items()}
        return [
            {name: values[i] for name, values in named.items() if values[i] is not None}
            for i in range(self.rows)
        ]


Member = Column | Members
"""A record member beside ``match`` and ``edges``: one JSON value per row, or an object."""


def python_values(column: Column) -> list[object]:
    """The column as JSON-ready Python values, ``None`` where absent (slow paths: one object per
    row). Integral numbers of a float column come back as ``int``, as they print."""
    if isinstance(column, Coded):
        return column.tolist()
    kind = column.dtype.kind
    if kind == "f":
        out = np.full(column.shape[0], None, object)
        has = ~np.isnan(column)
        integral = has & (np.floor(column) == column) & (np.abs(column) < EXACT)
        out[integral] = column[integral].astype(np.int64)
        out[has & ~integral] = column[has & ~integral]
        return list(out.tolist())
    if kind == "S":
        return [v.decode() if v else None for v in column.tolist()]
    return list(column.tolist())
