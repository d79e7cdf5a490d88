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

With numba (:mod:`connectors.json_place`), the matrix is never built: the row ends come from
the pieces' lengths, and each piece writes its bytes straight to their place in the output
(integers from their values, no digit matrix). The numpy assembly stays as the fallback and the
tests' second implementation.

The columns are those of :mod:`core.columns`. Values become text a whole column at a time:
integers by table lookups of four digits at a time, numbers (``float`` columns, ``NaN``
meaning absent) through one ``orjson`` call per column, dictionary columns (:class:`Coded`)
by encoding each used dictionary value once, ``object`` columns with one C-level ``orjson``
pass. The output is byte for byte what ``orjson.dumps`` gives for the same records as dicts
(tests check it against that naive encoding).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import orjson

from connectors import json_place
from core.columns import EXACT, Coded, Column

_POW10 = 10 ** np.arange(20, dtype=np.uint64)
_MINUS = np.frombuffer(b"-", np.uint8).reshape(1, 1)
_QUOTE = ord('"')
_NUMPY = orjson.OPT_SERIALIZE_NUMPY

_FOUR = (np.arange(10_000)[:, None] // np.array([1000, 100, 10, 1]) % 10 + ord("0")).astype(
    np.uint8
)
"""The four ASCII digits of 0..9999, zero-padded: one gather turns a 4-digit group into text."""


_NO_CELLS = np.zeros((1, 0), np.uint8)
I64 = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Piece:
    """Per row, some bytes: ``cells[i][mask[i]]`` (a shared first row when ``cells`` has one;
    every byte when ``mask`` and ``starts`` are ``None``).

    Where a row's kept bytes are one run, ``starts`` and ``lengths`` say where it starts and
    how long it is (the mask may then be left out: :func:`_mask` derives it). An integer piece
    holds its values (``ints``) and their text lengths (``0``: absent) and no cells until the
    numpy assembly asks for them (:func:`_matrix`): the compiled one writes the digits itself.
    """

    cells: npt.NDArray[np.uint8]
    mask: npt.NDArray[np.bool_] | None = None
    #: Per row, how many bytes it keeps, where the maker knows it without counting the mask.
    lengths: I64 | None = None
    #: Per row, where its one run of kept bytes starts (``None``: the mask says which).
    starts: I64 | None = None
    #: The integers of an integer piece.
    ints: I64 | None = None

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
    rows = present.shape[0]
    if piece.ints is not None:
        assert piece.lengths is not None
        return Piece(piece.cells, None, piece.lengths * present, ints=piece.ints)
    if piece.starts is not None:
        assert piece.lengths is not None
        return Piece(piece.cells, None, piece.lengths * present, piece.starts)
    if piece.mask is None:
        full = np.where(present, piece.width, 0).astype(np.int64)
        return Piece(piece.cells, None, full, np.zeros(rows, np.int64))
    mask = piece.mask & present[:, None]
    kept = None if piece.lengths is None else piece.lengths * present
    return Piece(piece.cells, np.broadcast_to(mask, (rows, piece.width)), kept)


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
    """Decimal text: an integer piece (its text lengths counted now, its digits written by the
    assembly), or for ``uint64`` a digit matrix."""
    if column.dtype == np.uint64:
        return _integer_matrix(column)
    ints = column.astype(np.int64, copy=False)
    if json_place.COMPILED:
        lengths = json_place.digit_counts(ints)
    else:
        magnitude = np.where(ints < 0, ~ints.view(np.uint64) + np.uint64(1), ints.view(np.uint64))
        digits = np.maximum(np.searchsorted(_POW10, magnitude, side="right"), 1)
        lengths = digits.astype(np.int64) + (ints < 0)
    return Piece(_NO_CELLS, None, lengths, ints=ints)


def _integer_matrix(column: npt.NDArray[np.integer]) -> Piece:
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
        return Piece(cells, mask, digits, (groups * 4 - digits).astype(np.int64))
    sign = np.broadcast_to(_MINUS, (rows, 1))
    return Piece(np.hstack([sign, cells]), np.hstack([negative[:, None], mask]), digits + negative)


def quoted(column: npt.NDArray[np.bytes_]) -> Piece:
    """``"text"`` for fixed-width ASCII bytes that need no escaping (empty: nothing); the
    closing quote follows each text, so that a row keeps one run."""
    rows, width = column.shape[0], column.dtype.itemsize
    text = np.frombuffer(column.tobytes(), np.uint8).reshape(rows, width)
    cells = np.empty((rows, width + 2), np.uint8)
    cells[:, 0] = _QUOTE
    cells[:, 1:-1] = text
    if rows and width and bool(text[:, -1].all()):  # numpy's bytes end in padding NULs only
        cells[:, -1] = _QUOTE
        return Piece(cells)
    cells[:, -1] = 0
    inner = (text != 0).sum(axis=1)
    cells[np.arange(rows), inner + 1] = _QUOTE
    lengths = np.where(inner > 0, inner + 2, 0).astype(np.int64)
    return Piece(cells, None, lengths, np.zeros(rows, np.int64))


def _numbers(column: npt.NDArray[np.float64]) -> Piece:
    """Numbers as ``orjson`` writes them, integral ones (below 2**53) as integers. With the
    compiled assembly every row's text is written once into one flat buffer, whose one shared
    row each row reads its run of; else a matrix beside the integers' (as they are written)."""
    has = ~np.isnan(column)
    integral = has & (np.floor(column) == column) & (np.abs(column) < EXACT)
    whole = where(integers(np.where(integral, column, 0).astype(np.int64)), integral)
    rest = has & ~integral
    if not rest.any():
        return whole
    text = np.frombuffer(orjson.dumps(column[rest], option=_NUMPY), np.uint8)[1:-1]
    commas = np.flatnonzero(text == ord(","))  # a number's text holds no comma
    begins = np.concatenate([[0], commas + 1])
    ends = np.append(commas, text.shape[0])
    rows = column.shape[0]
    if not json_place.COMPILED:
        fraction = _gather(text, begins, ends - begins)
        cells = np.zeros((rows, fraction.width), np.uint8)
        mask = np.zeros(cells.shape, np.bool_)
        cells[rest] = fraction.cells
        mask[rest] = _mask(fraction, fraction.cells.shape[0])
        return _side_by_side([whole, Piece(cells, mask)], rows)
    assert whole.ints is not None and whole.lengths is not None
    lengths = whole.lengths.copy()
    lengths[rest] = ends - begins
    runs = np.zeros(rows, np.int64)
    runs[rest] = begins
    starts = np.cumsum(lengths) - lengths
    flat = np.empty(int(starts[-1] + lengths[-1]), np.uint8)
    json_place.place_integers(flat, starts.copy(), 0, rows, whole.ints, whole.lengths)
    json_place.place_flat(flat, starts.copy(), 0, rows, text, runs, lengths * rest)
    return Piece(flat.reshape(1, -1), None, lengths, starts)


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
    assert table.lengths is not None
    lengths = table.lengths[picked] * has
    return Piece(table.cells[picked], None, lengths, np.zeros(codes.shape[0], np.int64))


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


def _gather(
    data: npt.NDArray[np.uint8], starts: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64]
) -> Piece:
    width = max(int(lengths.max()) if lengths.shape[0] else 0, 1)
    at = np.arange(width)
    if data.shape[0] == 0:
        data = np.zeros(1, np.uint8)
    cells = data[np.minimum(starts[:, None] + at, data.shape[0] - 1)]
    return Piece(cells, None, lengths, np.zeros(lengths.shape[0], np.int64))


def _mask(piece: Piece, rows: int) -> npt.NDArray[np.bool_]:
    """The piece's mask over ``rows`` rows (its run where it has one; all kept where it has
    neither)."""
    if piece.mask is not None:
        return np.broadcast_to(piece.mask, (rows, piece.width))
    if piece.starts is not None:
        assert piece.lengths is not None
        at = np.arange(piece.width)
        return (at >= piece.starts[:, None]) & (at < (piece.starts + piece.lengths)[:, None])
    return np.ones((rows, piece.width), np.bool_)


def _matrix(piece: Piece) -> Piece:
    """An integer piece as a digit matrix (the numpy assembly's form); others as they are."""
    if piece.ints is None:
        return piece
    assert piece.lengths is not None
    matrix = _integer_matrix(piece.ints)
    return where(matrix, piece.lengths > 0)


def _full(piece: Piece) -> bool:
    """Whether a row keeps every byte of the piece."""
    return piece.mask is None and piece.starts is None


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
    pieces = [_matrix(p) for p in pieces]
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
    masked = [(at, p) for at, p in pieces_at(pieces) if not _full(p)]
    mask = np.ones((rows, width), np.bool_) if masked else None
    for at, p in varying:
        cells[:, at : at + p.width] = p.cells
    for at, p in masked:
        assert mask is not None
        mask[:, at : at + p.width] = _mask(p, rows)
    return cells, mask


def pieces_at(pieces: Sequence[Piece]) -> list[tuple[int, Piece]]:
    """Each piece with the column it starts at."""
    starts = np.cumsum([0, *(p.width for p in pieces)])[:-1].tolist()
    return list(zip(starts, pieces, strict=True))


def encode_rows(
    pieces: Sequence[Piece], rows: int, *, compiled: bool | None = None
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    """The texts of ``rows`` rows one after another (bytes in an array, which a binary stream
    writes as it is), and where each row's text ends; ``compiled`` chooses the assembly (by
    default the compiled one where numba is in use)."""
    if json_place.COMPILED if compiled is None else compiled:
        return _placed(pieces, rows)
    pieces = [_matrix(p) for p in pieces]
    cells, mask = _fill(pieces, rows)
    if mask is None:
        width = cells.shape[1]
        return cells.reshape(-1), np.arange(1, rows + 1, dtype=np.int64) * width
    lengths = np.full(rows, sum(p.width for p in pieces if _full(p)), np.int64)
    for p in pieces:
        if p.lengths is not None:
            lengths += p.lengths
        elif not _full(p):
            lengths += _mask(p, rows).sum(axis=1)
    return cells[mask], np.cumsum(lengths)


def _merged(pieces: Sequence[Piece]) -> list[Piece]:
    """Neighbouring constants as one."""
    out: list[Piece] = []
    for p in pieces:
        if out and _is_constant(p) and _is_constant(out[-1]):
            out[-1] = Piece(np.hstack([out[-1].cells, p.cells]))
        else:
            out.append(p)
    return out


def _is_constant(piece: Piece) -> bool:
    return piece.ints is None and _full(piece) and piece.cells.shape[0] == 1


def _placed(
    pieces: Sequence[Piece], rows: int
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    """The compiled assembly: row ends from the pieces' lengths, then every piece writes its
    bytes at their place (:mod:`connectors.json_place`), a block of rows at a time."""
    plan: list[tuple[Piece, I64 | None]] = []
    total = np.zeros(rows, np.int64)
    fixed = 0
    for p in _merged(pieces):
        if _full(p) and p.ints is None:
            plan.append((p, None))
            fixed += p.width
            continue
        if p.lengths is None or (p.ints is None and p.starts is None):
            p = _runs(p, rows)
        assert p.lengths is not None
        plan.append((p, p.lengths))
        total += p.lengths
    ends = np.cumsum(total + fixed)
    out = np.empty(int(ends[-1]) if rows else 0, np.uint8)
    pos = ends - total - fixed
    calls: list[tuple[Callable[..., None], tuple[object, ...]]] = []
    for p, length in plan:
        if p.ints is not None:
            calls.append((json_place.place_integers, (p.ints, length)))
        elif length is None and p.cells.shape[0] == 1:
            calls.append((json_place.place_constant, (p.cells[0],)))
        elif length is None:
            full = np.full(rows, p.width, np.int64)
            calls.append((json_place.place_runs, (p.cells, np.zeros(rows, np.int64), full)))
        elif p.starts is not None:
            calls.append((json_place.place_runs, (p.cells, p.starts, length)))
        else:  # a flat buffer (:func:`_runs`): ``cells`` is one row
            calls.append((json_place.place_flat, (p.cells[0], np.cumsum(length) - length, length)))
    for lo in range(0, rows, json_place.BLOCK_ROWS):
        hi = min(lo + json_place.BLOCK_ROWS, rows)
        for kernel, args in calls:
            kernel(out, pos, lo, hi, *args)
    return out, ends


def _runs(piece: Piece, rows: int) -> Piece:
    """A piece whose kept bytes are not one run per row as one flat row of them (the
    ``lengths`` say whose they are)."""
    mask = _mask(piece, rows)
    cells = np.broadcast_to(piece.cells, (rows, piece.width))
    return Piece(cells[mask].reshape(1, -1), None, mask.sum(axis=1).astype(np.int64))
