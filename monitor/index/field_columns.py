"""One field of an event relation, by column: numbers, strings through a shared pool, booleans.

A field's values are one array indexed by eid, in the narrowest form that gives every value
back exactly:

- **numbers** are *scaled integers* while they can be: a column picks, at its first values,
  the smallest decimal exponent ``e`` (0 to :data:`MAX_EXPONENT`) at which every value is an
  integer number of ``10**-e`` (amounts in cents: ``e = 2``; times in milliseconds: ``e = 0``)
  and a base (0, or the first values' least when 0 is too far from them: event times), and
  keeps ``round(v * 10**e) - base`` as ``int32``, 4 bytes an event instead of 8. A value is
  kept only if decoding, ``(base + k) / 10**e`` in ``float64``, gives its very bits back;
  the first one that does not (a third, ``-0.0``, infinity, a time more than 24 days from the
  base) turns the column into ``float64`` for good. Readers see ``float64`` either way
  (:meth:`FieldColumn.get`), NaN where an event lacks the field;
- **strings** are codes into one :class:`StringPool` shared by every string field (so that
  join filters compare two relations' codes directly), as narrow as the pool allows
  (:func:`code_dtype`: ``channel`` takes a byte);
- **booleans** are ``int8`` (-1 where absent).

This is the decimal part of the idea of ALP and BtrBlocks' pseudodecimals (doubles that are
decimals stored as integers), without their per-block exponents: one exponent per column
keeps a comparison a multiply-free decode of one array.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from core.columns import Coded, Column
from core.compiled import AVAILABLE, ENABLED, njit
from core.fields import ABSENT, DTYPES
from monitor.index.levels import I32, grow
from monitor.index.texts import unique_strings

#: The largest decimal exponent of a scaled number column (ten-thousandths).
MAX_EXPONENT = 4
#: A scaled value's absence (``int32``'s least value; kept values are above it).
SCALED_ABSENT = np.iinfo(np.int32).min
_SCALED_MAX = np.iinfo(np.int32).max
#: Scaled integers stay exact in ``float64`` up to here.
_EXACT = 2.0**53


#: Up to this many distinct values in a batch, a string field is coded by comparing the batch
#: with each value rather than by sorting it.
FEW_STRINGS = 16


class StringPool:
    """String field values <-> codes, one pool for every string field of every event relation,
    so that join filters compare codes of two relations' fields directly."""

    def __init__(self) -> None:
        self.codes: dict[str, int] = {}
        self.strings: list[str] = []
        #: Strings kept at the last compaction (:func:`monitor.index.compaction.compact_pool`).
        self.kept = 0

    def intern(self, text: str) -> int:
        code = self.codes.get(text)
        if code is None:
            code = self.codes[text] = len(self.strings)
            self.strings.append(text)
        return code

    @property
    def nbytes(self) -> int:
        return sum(len(s) + 60 for s in self.strings)


def code_dtype(codes: int) -> type[np.signedinteger[Any]]:
    """The narrowest integer type holding string codes ``-2 .. codes - 1`` (a field's few
    distinct values take a byte an event: ``channel``, ``country``, ``status``)."""
    if codes <= np.iinfo(np.int8).max:
        return np.int8
    if codes <= np.iinfo(np.int16).max:
        return np.int16
    return np.int32


@dataclass(frozen=True)
class NumberField:
    """A number column as a compiled loop reads it: ``values`` by eid, scaled ``int32``
    (``(value + base) / power``, :data:`SCALED_ABSENT` where absent) or ``float64`` (NaN)."""

    values: npt.NDArray[Any]
    scaled: bool
    base: int
    power: float


class FieldColumn:
    """One field's values by eid, of one kind (numbers scaled while they can be, string codes
    as narrow as the pool allows)."""

    def __init__(self, kind: str, pool: StringPool | None = None) -> None:
        self.kind = kind
        self.pool = pool if pool is not None else StringPool()
        #: Of a scaled number column: the decimal exponent (None: no value yet) and the base.
        self.exponent: int | None = None
        self.base = 0
        dtype: Any = DTYPES[kind]
        if kind == "string":
            dtype = code_dtype(len(self.pool.strings))
        elif kind == "number":
            dtype = np.int32
        self.values: npt.NDArray[Any] = np.empty(0, dtype)

    @property
    def scaled(self) -> bool:
        """Whether the numbers are kept as scaled ``int32``."""
        return self.kind == "number" and self.values.dtype == np.int32

    def numbers(self) -> NumberField | None:
        """A number column's values as compiled loops read them (None: not numbers)."""
        if self.kind != "number":
            return None
        return NumberField(self.values, self.scaled, self.base, 10.0 ** (self.exponent or 0))

    @property
    def absent(self) -> Any:
        """What ``values`` holds where an event lacks the field."""
        return SCALED_ABSENT if self.scaled else ABSENT[self.kind]

    def grow(self, capacity: int) -> None:
        grow(self, "values", capacity, self.absent)

    def code(self, literal: object) -> Any:
        """The form of a literal that :meth:`get`'s values compare with (-2: a string never
        seen)."""
        if self.kind == "string":
            return self.pool.codes.get(str(literal), -2)
        if self.kind == "bool":
            return int(bool(literal))
        return float(literal)  # type: ignore[arg-type]

    def store(self, eids: I32, column: npt.NDArray[Any]) -> None:
        """Write a batch column of this kind (:func:`core.fields.to_column`) at ``eids``;
        strings are interned once per distinct value."""
        if self.kind == "string":
            self._store_strings(eids, column)
        elif self.scaled:
            present = ~np.isnan(column)
            scaled = self._scale(column[present])
            if scaled is None and self._finer(column[present]):
                scaled = self._scale(column[present])
            if scaled is None:
                self.values = self.get(np.arange(self.values.shape[0]))  # float64 from now on
                self.values[eids] = column
            else:
                out = np.full(column.shape[0], SCALED_ABSENT, np.int32)
                out[present] = scaled
                self.values[eids] = out
        else:
            self.values[eids] = column

    def _finer(self, numbers: npt.NDArray[np.float64]) -> bool:
        """Scale the column anew, at a larger exponent that keeps ``numbers`` too (the first
        values were whole, these have cents); whether one does. At most :data:`MAX_EXPONENT`
        times a column."""
        if self.exponent is None or self.exponent == MAX_EXPONENT:
            return False
        kept = self.get(np.arange(self.values.shape[0]))
        present = ~np.isnan(kept)
        was = self.exponent, self.base
        self.exponent = None
        scaled = self._scale(np.concatenate([kept[present], numbers]), lowest=was[0] + 1)
        if scaled is None:
            self.exponent, self.base = was
            return False
        self.values = np.full(kept.shape[0], SCALED_ABSENT, np.int32)
        self.values[present] = scaled[: int(present.sum())]
        return True

    def _scale(self, numbers: npt.NDArray[np.float64], lowest: int = 0) -> I32 | None:
        """``numbers`` (none NaN) as this column's scaled integers, choosing its exponent (from
        ``lowest``) and base at the first numbers; None if one of them is not kept exactly."""
        if not numbers.shape[0]:
            return np.empty(0, np.int32)
        chosen = self.exponent
        for exponent in range(lowest, MAX_EXPONENT + 1) if chosen is None else (chosen,):
            power = 10.0**exponent
            with np.errstate(invalid="ignore", over="ignore"):
                k = np.round(numbers * power)
            if not bool((np.abs(k) <= _EXACT).all()):  # NaN and infinities fail here too
                continue
            base = self.base
            if self.exponent is None:
                base = 0 if float(np.abs(k).max()) <= _SCALED_MAX else int(k.min())
            offsets = k - float(base)
            if float(offsets.min()) <= SCALED_ABSENT or float(offsets.max()) > _SCALED_MAX:
                return None
            scaled = offsets.astype(np.int32)
            # What :meth:`get` reads back must be every number's very bits (-0.0 is not 0.0).
            if not bool((self._decoded(scaled, base, exponent) == numbers.view(np.int64)).all()):
                continue
            self.exponent, self.base = exponent, base
            return scaled
        return None

    @staticmethod
    def _decoded(scaled: I32, base: int, exponent: int) -> npt.NDArray[np.int64]:
        """The bits of :meth:`get`'s numbers for ``scaled`` values (none absent)."""
        out = scaled.astype(np.float64)
        out += float(base)
        out /= 10.0**exponent  # exact for exponent 0: the compiled decoding divides too
        return out.view(np.int64)

    def _store_strings(self, eids: I32, column: npt.NDArray[Any]) -> None:
        codes = np.full(column.shape[0], -1, np.int32)
        present = np.flatnonzero(column != None)  # noqa: E711 (elementwise on objects)
        if present.shape[0]:
            codes[present] = self._codes(column[present])
        wide = code_dtype(len(self.pool.strings))
        if np.dtype(wide).itemsize > self.values.dtype.itemsize:
            self.values = self.values.astype(wide)
        self.values[eids] = codes

    def _codes(self, strings: npt.NDArray[Any]) -> I32:
        """The pool's code of each string (a value of another type: its text). A field's few
        distinct values (``channel``) are found by one set of the batch and one comparison of
        the batch per value; many are sorted (:func:`~monitor.index.texts.unique_strings`). Both
        keep trailing NUL characters, which numpy's own strings drop."""
        values = strings.tolist()
        distinct = set(values)
        if not all(type(s) is str for s in distinct):  # rare: not the type the field has
            values = [s if type(s) is str else str(s) for s in values]
            strings = np.empty(len(values), object)
            strings[:] = values
            distinct = set(values)
        if len(distinct) <= FEW_STRINGS:
            codes = np.empty(strings.shape[0], np.int32)
            for text in distinct:  # a few values, not a row each
                codes[strings == np.array(text, dtype=object)] = self.pool.intern(text)
            return codes
        unique, inverse = unique_strings(strings)
        interned = np.array([self.pool.intern(s) for s in unique], np.int32)
        return interned[inverse]

    def get(
        self, eids: npt.NDArray[np.integer[Any]], *, compiled: bool = ENABLED
    ) -> npt.NDArray[Any]:
        """The values at ``eids`` in the form comparisons read: numbers as ``float64`` (NaN
        where absent), string codes, booleans."""
        if self.scaled and compiled:  # gather and decode in one pass (4 in numpy)
            decoded = np.empty(eids.shape[0], np.float64)
            power = 10.0 ** (self.exponent or 0)
            _gather_scaled(self.values, eids, float(self.base), power, decoded)
            return decoded
        raw: npt.NDArray[Any] = self.values[eids]
        if not self.scaled:
            return raw
        out = self._decoded(raw, self.base, self.exponent or 0).view(np.float64)
        out[raw == SCALED_ABSENT] = np.nan
        return out

    def values_of(self, eids: I32) -> Column:
        """The values at ``eids`` as an output column (:mod:`core.columns`): numbers as
        ``float64`` with NaN where absent, strings and booleans as codes into their values;
        no Python object per event."""
        raw = self.get(eids)
        if self.kind == "number":
            return raw
        if self.kind == "bool":
            return Coded(raw, (False, True))
        return Coded(raw, self.pool.strings)

    @property
    def nbytes(self) -> int:
        return int(self.values.nbytes)


def warm() -> None:
    """Load (or compile, the first time on a machine) the gather of scaled numbers for the eid
    types the engine passes, before the first epoch."""
    if ENABLED:
        values, out = np.full(1, SCALED_ABSENT, np.int32), np.empty(1, np.float64)
        for eids in (np.zeros(1, np.int32), np.zeros(1, np.int64)):
            _gather_scaled(values, eids, 0.0, 1.0, out)


if AVAILABLE:

    @njit(cache=True, nogil=True, inline="always")
    def decoded_number(raw, base, power):  # type: ignore[no-untyped-def]
        """A scaled value as :meth:`FieldColumn._decoded` computes it (the same two IEEE
        operations), NaN where absent: the one decoding every compiled loop uses."""
        return np.nan if raw == SCALED_ABSENT else (np.float64(raw) + base) / power

    @njit(cache=True, nogil=True)
    def _gather_scaled(values, eids, base, power, out):  # type: ignore[no-untyped-def]
        """``out[i]``: the number at ``eids[i]`` (:func:`decoded_number`)."""
        for i in range(eids.shape[0]):
            out[i] = decoded_number(values[eids[i]], base, power)
