"""Whole-epoch JSON encoding: many JSON texts, one per row, from columns, without a Python
object per row.

A row's text is a sequence of *pieces*: constant text (``{"query":"triangle","epoch":7``), the
JSON text of one value of a column (``123``, ``"tx-91"``, ``1500.5``), or nothing where a row
has no value. Each piece is a byte matrix with one row per output row (a constant: one shared
row) and, where rows differ in length, a mask saying which of its bytes a row keeps. The text
of every row is all pieces side by side, the kept bytes read row by row: the pieces are copied
into one matrix, and one boolean selection (``cells[mask]`` walks it in row-major order, so the
bytes come out row after row, piece after piece) gives the text of the whole batch; the row
ends are the cumulative sums of the kept bytes.

The columns are those of :mod:`core.columns`. Values become text a whole column at a time:
integers by table lookups of four digits at a time, numbers (``float`` columns, ``NaN``
meaning absent) through one ``orjson`` call per column, dictionary columns (:class:`Coded`)
by encoding each used dictionary value once, ``object`` columns with one C-level ``orjson``
pass. The output is byte for byte what ``orjson.dumps`` gives for the same records as dicts
(tests check it against that naive encoding).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import orjson

from core.columns import EXACT, Coded, Column

_POW10 = 10 ** np.arange(20, dtype=np.uint64)
_MINUS = np.frombuffer(b"-", np.uint8).reshape(1, 1)
_QUOTE = ord('"')
_NUMPY = orjson.OPT_SERIALIZE_NUMPY

_FOUR = (np.arange(10_000)[:, None] // np.array([1000, 100, 10, 1]) % 10 + ord("0")).astype(
    np.uint8
)
"""The four ASCII digits of 0..9999, zero-padded: one gather turns a 4-digit group into text."""


@dataclass(frozen=True)
class Piece:
    """Per row, some bytes: ``cells[i][mask[i]]`` (a shared first row when ``cells`` has one;
    every byte when ``mask`` is ``None``)."""

    cells: npt.NDArray[np.uint8]
    mask: npt.NDArray[np.bool_] | None = None
    #: Per row, how many bytes it keeps, where the maker knows it without counting the mask.
    lengths: npt.NDArray[np.int64] | None = None

    @property
    def width(self) -> int:
        return int(self.cells.shape[1])


def constant(text: bytes) -> Piece:
    """The same bytes in every row."""
    return Piece(np.frombuffer(text, np.uint8).reshape(1, -1))


def where(piece: Piece, present: npt.NDArray[np.bool_]) -> Piece:
    """``piece`` in the rows where ``present``, nothing in the others."""
    if bool(present.all()):
        return piece
    mask = present[:, None] if piece.mask is None else piece.mask & present[:, None]
    lengths = None if piece.lengths is None else piece.lengths * present
    return Piece(piece.cells, np.broadcast_to(mask, (present.shape[0], piece.width)), lengths)


def present(column: Column) -> npt.NDArray[np.bool_]:
    """The rows of ``column`` that hold a value."""
    if isinstance(column, Coded):
        return np.asarray(column.codes >= 0)
    kind = column.dtype.kind
    if kind == "f":
        return ~np.isnan(column)
    if kind == "O":
        return np.asarray(column != None)  # noqa: E711 (elementwise on objects)
    if kind == "S":
        return np.asarray(column != b"")
    return np.ones(column.shape[0], np.bool_)


def values(column: Column) -> Piece:
    """The JSON text of each value of ``column`` (nothing where absent)."""
    if isinstance(column, Coded):
        return _coded(column)
    kind = column.dtype.kind
    if kind in "iu":
        return integers(column.astype(column.dtype, copy=False))
    if kind == "f":
        return _numbers(column.astype(np.float64, copy=False))
    if kind == "S":
        return quoted(column.astype(np.bytes_, copy=False))
    if kind == "O":
        return _objects(column)
    if kind == "b":
        return _coded(Coded(column.astype(np.int8), [False, True]))
    raise TypeError(f"no JSON encoding for columns of dtype {column.dtype}")


def integers(column: npt.NDArray[np.integer]) -> Piece:
    """Decimal digits, right-aligned in the matrix (the mask starts at each row's first digit),
    written four at a time from a table."""
    rows = column.shape[0]
    if column.dtype.kind == "u":
        negative = np.zeros(rows, np.bool_)
        magnitude = column.astype(np.uint64, copy=False)
    else:
        negative = column < 0
        magnitude = column.astype(np.int64, copy=False).view(np.uint64)
    if negative.any():
        magnitude = np.where(negative, ~magnitude + np.uint64(1), magnitude)
    digits = np.maximum(np.searchsorted(_POW10, magnitude, side="right"), 1)
    width = int(digits.max()) if rows else 1
    groups = (width + 3) // 4
    cells = np.empty((rows, groups * 4), np.uint8)
    if groups == 1:
        cells[:] = _FOUR[magnitude.astype(np.intp)]
    else:
        rest = magnitude
        for g in range(groups - 1, -1, -1):
            cells[:, 4 * g : 4 * g + 4] = _FOUR[(rest % np.uint64(10_000)).astype(np.intp)]
            rest = rest // np.uint64(10_000)
    mask = np.arange(groups * 4) >= (groups * 4 - digits)[:, None]
    if not negative.any():
        return Piece(cells, mask, digits)
    sign = np.broadcast_to(_MINUS, (rows, 1))
    return Piece(np.hstack([sign, cells]), np.hstack([negative[:, None], mask]), digits + negative)


def quoted(column: npt.NDArray[np.bytes_]) -> Piece:
    """``"text"`` for fixed-width ASCII bytes that need no escaping (empty: nothing)."""
    rows, width = column.shape[0], column.dtype.itemsize
    cells = np.empty((rows, width + 2), np.uint8)
    cells[:, 0] = cells[:, -1] = _QUOTE
    cells[:, 1:-1] = np.frombuffer(column.tobytes(), np.uint8).reshape(rows, width)
    inner = cells[:, 1:-1] != 0
    if bool(inner.all()):
        return Piece(cells)
    mask = np.empty((rows, width + 2), np.bool_)
    mask[:, 1:-1] = inner
    mask[:, 0] = mask[:, -1] = inner[:, 0]
    return Piece(cells, mask)


def _numbers(column: npt.NDArray[np.float64]) -> Piece:
    """Numbers as ``orjson`` writes them, integral ones (below 2**53) as integers."""
    has = ~np.isnan(column)
    integral = has & (np.floor(column) == column) & (np.abs(column) < EXACT)
    whole = where(integers(np.where(integral, column, 0).astype(np.int64)), integral)
    rest = has & ~integral
    if not rest.any():
        return whole
    text = orjson.dumps(column[rest], option=_NUMPY)[1:-1]
    fraction = _split(np.frombuffer(text, np.uint8), int(rest.sum()))
    cells = np.zeros((column.shape[0], fraction.width), np.uint8)
    mask = np.zeros(cells.shape, np.bool_)
    cells[rest] = fraction.cells
    mask[rest] = _mask(fraction, fraction.cells.shape[0])
    return _side_by_side([whole, Piece(cells, mask)], column.shape[0])


def _coded(column: Coded) -> Piece:
    """Each used dictionary value encoded once, then gathered by code."""
    codes = column.codes.astype(np.intp)
    has = codes >= 0
    if len(column.values) <= codes.shape[0]:
        used, picked = np.arange(len(column.values)), np.where(has, codes, 0)
    else:  # a large dictionary: encode only the values this column uses
        used, inverse = np.unique(np.where(has, codes, 0), return_inverse=True)
        picked = inverse.reshape(-1)
    texts = [orjson.dumps(column.values[int(u)]) for u in used.tolist()] or [b""]
    table = ragged(texts)
    mask = _mask(table, len(texts))[picked]
    return Piece(table.cells[picked], mask if bool(has.all()) else mask & has[:, None])


def _objects(column: npt.NDArray[np.generic]) -> Piece:
    """``object`` values (``None`` as nothing) through one ``orjson`` call for the whole
    column, cut at the commas between its values (:func:`_elements`). One call per value costs
    far more: each result is a fresh buffer of orjson's, about 2-4 µs apiece once thousands of
    them are alive at once, against 0.1 ms for a list of 20,000."""
    items = column.tolist()
    if not items:
        return ragged([])
    piece = _elements(np.frombuffer(orjson.dumps(items), np.uint8)[1:-1], len(items))
    has = column != None  # noqa: E711 (elementwise on objects)
    return piece if bool(np.all(has)) else where(piece, np.asarray(has))


def _elements(data: npt.NDArray[np.uint8], rows: int) -> Piece:
    """The ``rows`` values of a JSON array's text without its brackets (scalars: no nested
    arrays or objects), one per row: cut at the commas outside strings. A quote opens or
    closes a string unless an odd run of backslashes comes before it (then it is escaped)."""
    cut = data == ord(",")
    quotes = np.flatnonzero(data == ord('"'))
    if quotes.shape[0]:
        at = np.arange(data.shape[0])
        plain = np.maximum.accumulate(np.where(data == ord("\\"), -1, at))
        before = np.maximum(quotes - 1, 0)
        run = np.where(quotes > 0, before - plain[before], 0)
        toggles = np.zeros(data.shape[0], np.uint8)
        toggles[quotes[run % 2 == 0]] = 1
        cut &= np.bitwise_xor.accumulate(toggles) == 0
    commas = np.flatnonzero(cut)
    starts = np.concatenate([[0], commas + 1])
    ends = np.concatenate([commas, [data.shape[0]]])
    if starts.shape[0] != rows:
        raise ValueError(f"expected {rows} values, found {starts.shape[0]}")
    return _gather(data, starts, ends - starts)


def ragged(texts: Sequence[bytes]) -> Piece:
    """One row per text."""
    lengths = np.fromiter(map(len, texts), np.int64, len(texts))
    data = np.frombuffer(b"".join(texts), np.uint8)
    return _gather(data, np.cumsum(lengths) - lengths, lengths)


def _split(data: npt.NDArray[np.uint8], rows: int) -> Piece:
    """``rows`` numbers written ``1,2.5,3e-7`` (no commas inside them), one per row."""
    commas = np.flatnonzero(data == ord(","))
    starts = np.concatenate([[0], commas + 1])
    ends = np.concatenate([commas, [data.shape[0]]])
    if starts.shape[0] != rows:
        raise ValueError(f"expected {rows} numbers, found {starts.shape[0]}")
    return _gather(data, starts, ends - starts)


def _gather(
    data: npt.NDArray[np.uint8], starts: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64]
) -> Piece:
    width = max(int(lengths.max()) if lengths.shape[0] else 0, 1)
    at = np.arange(width)
    if data.shape[0] == 0:
        data = np.zeros(1, np.uint8)
    cells = data[np.minimum(starts[:, None] + at, data.shape[0] - 1)]
    return Piece(cells, at < lengths[:, None], lengths)


def _mask(piece: Piece, rows: int) -> npt.NDArray[np.bool_]:
    """The piece's mask over ``rows`` rows, all kept where it has none."""
    if piece.mask is None:
        return np.ones((rows, piece.width), np.bool_)
    return np.broadcast_to(piece.mask, (rows, piece.width))


def _side_by_side(pieces: Sequence[Piece], rows: int) -> Piece:
    """The pieces next to each other, as one piece of ``rows`` rows."""
    cells, mask = _fill(pieces, rows)
    return Piece(cells, mask)


def _fill(
    pieces: Sequence[Piece], rows: int
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.bool_] | None]:
    """The pieces' bytes in one ``rows x width`` matrix, and its mask (``None``: all kept).

    The constant pieces go into one template row that is copied down in one pass; only the
    pieces that differ by row are written column slice by column slice."""
    width = sum(p.width for p in pieces)
    template = np.zeros(width, np.uint8)
    varying: list[tuple[int, Piece]] = []
    at = 0
    for p in pieces:
        if p.cells.shape[0] == 1:
            template[at : at + p.width] = p.cells[0]
        else:
            varying.append((at, p))
        at += p.width
    cells = np.broadcast_to(template, (rows, width)).copy()
    masked = [(at, p) for at, p in pieces_at(pieces) if p.mask is not None]
    mask = np.ones((rows, width), np.bool_) if masked else None
    for at, p in varying:
        cells[:, at : at + p.width] = p.cells
    for at, p in masked:
        assert mask is not None and p.mask is not None
        mask[:, at : at + p.width] = p.mask
    return cells, mask


def pieces_at(pieces: Sequence[Piece]) -> list[tuple[int, Piece]]:
    """Each piece with the column it starts at."""
    starts = np.cumsum([0, *(p.width for p in pieces)])[:-1].tolist()
    return list(zip(starts, pieces, strict=True))


def encode_rows(
    pieces: Sequence[Piece], rows: int
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    """The texts of ``rows`` rows one after another (bytes in an array, which a binary stream
    writes as it is), and where each row's text ends."""
    cells, mask = _fill(pieces, rows)
    if mask is None:
        width = cells.shape[1]
        return cells.reshape(-1), np.arange(1, rows + 1, dtype=np.int64) * width
    lengths = np.full(rows, sum(p.width for p in pieces if p.mask is None), np.int64)
    for p in pieces:
        if p.lengths is not None:
            lengths += p.lengths
        elif p.mask is not None:
            lengths += np.broadcast_to(p.mask, (rows, p.width)).sum(axis=1)
    return cells[mask], np.cumsum(lengths)
