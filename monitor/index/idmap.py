"""Event ids: external ids (``int`` or ``str``) <-> dense slots, in flat arrays.

The identities of the events of one relation, by slot (dense, in order of first appearance,
never reused; a compaction keeps the live ones in a new map, :meth:`IdMap.subset`). An integer
id is kept as its ``int64`` value. String ids are kept as numbers while every one is *numbered*
(``tx-91``: :class:`~monitor.index.numbered.NumberedStrings`, 4 or 5 bytes an id), else as UTF-8
text (:class:`~monitor.index.texts.TextStrings`, its bytes and a 4-byte end): the first string
that is not numbered turns them all into text, once. Each kind is found through its own
:class:`~monitor.index.hashtable.SlotTable` (about 7 bytes an id), which stores slots only: a
probe compares the ids themselves, so ids whose hashes collide stay different ids. While the
numbered ids have one prefix and come in increasing order (a counter: transaction ids, file
positions) and there is no integer id, a binary search finds them and no string table is kept;
the first id out of order builds it, once. Arrays a map does not need are not allocated.
Decoding gives back exactly what was encoded: ``int`` as ``int`` (``int64`` arrays when every id
decoded is an integer), ``str`` as the same ``str``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from core.errors import InputError
from monitor.index import id_blob
from monitor.index.hashtable import U64, SlotTable, mix
from monitor.index.levels import I32, I64, grow
from monitor.index.numbered import NumberedStrings, split
from monitor.index.texts import (
    U8,
    TextStrings,
    decode_rows,
    hash_rows,
    padded,
    same_rows,
    string_places,
)
from monitor.index.unique import first_appearances

#: Slots are int32.
MAX_IDS = 2**31 - 1
#: The tags of an id's stable hash (:func:`~monitor.index.id_columns.id_hashes`, ``match_id``):
#: an integer's and a string's hashes differ even where their bytes agree.
INT_ID_TAG = np.uint64(0x6A09E667F3BCC908)
STR_ID_TAG = np.uint64(0xBB67AE8584CAA73B)
#: Prefixes of numbered ids a map keeps as codes (one byte an id); past them, ids are text.
MAX_PREFIXES = 255
#: Bytes of text hashed at once when the string table grows (bounds the padded matrix).
REHASH_CHUNK = 1 << 18


class IdMap:
    """External ids <-> dense slots; ``hash_bits`` below 64 (tests) forces hash collisions."""

    def __init__(self, hash_bits: int = 64) -> None:
        self._hash_bits = hash_bits
        self._hash_mask = np.uint64((1 << hash_bits) - 1) if hash_bits < 64 else None
        self._size = 0
        self._capacity = 0
        self._value: I64 | None = None  # integer ids, by slot (with the first integer)
        #: Text end offsets by slot + 1 (with the first string): ``uint32`` while the text fits
        #: in 4 GiB (4 bytes an id), then ``int64``.
        self._texts: TextStrings | None = None
        self._is_string: npt.NDArray[np.bool_] | None = None  # once both kinds are present
        #: Whether every string id so far is numbered (then ``_numbers`` holds them, from the
        #: first prefix seen, and there is no text).
        self._numbered = True
        self._numbers: NumberedStrings | None = None
        self._has_strings = False
        #: Whether string ids are found by binary search over their numbers (no table yet).
        self._sorted = True
        self._ints = SlotTable()
        self._strings = SlotTable()

    def __len__(self) -> int:
        return self._size

    @property
    def nbytes(self) -> int:
        return sum(self.breakdown().values())

    def breakdown(self) -> dict[str, int]:
        """Bytes held, by component (arrays at their capacity)."""
        arrays = {
            "int values": self._value,
        }
        out = {name: int(a.nbytes) for name, a in arrays.items() if a is not None}
        if self._texts is not None:
            out.update(self._texts.breakdown())
        if self._numbers is not None:
            out.update(self._numbers.breakdown())
        out["kinds"] = 0 if self._is_string is None else int(self._is_string.nbytes)
        out["hash tables"] = self._ints.nbytes + self._strings.nbytes
        return out

    # -- encode ------------------------------------------------------------------------------

    def encode(self, column: npt.NDArray[np.generic], add: bool = True) -> I32:
        """Slots of a column of external ids; unknown ids get new ones, or -1 if not ``add``."""
        if column.dtype.kind in "iu":
            return self._encode_ints(_int64(column), add)
        values = column.tolist()
        try:  # every id a str (the common case): no type of each one to look at
            text = "".join(values)
        except TypeError:
            pass
        else:
            return self._encode_strings(values, add, text)
        types = np.fromiter(map(type, values), object, len(values))
        is_int = _of_type(types, int)
        out = np.empty(len(values), np.int32)
        if is_int.any():
            out[is_int] = self._encode_ints(_int64(column[is_int]), add)
        if not is_int.all():
            rest = np.flatnonzero(~is_int)
            strings = column[rest].tolist()
            if not _of_type(types[rest], str).all():  # other ids are named by their text
                strings = [s if type(s) is str else str(s) for s in strings]
            out[rest] = self._encode_strings(strings, add)
        return out

    def _encode_ints(self, values: I64, add: bool) -> I32:
        hashes = mix(values.view(np.uint64))
        if self._value is None:
            slots = np.full(values.shape[0], -1, np.int32)
        else:
            slots = self._ints.find_values(hashes, self._value, values)
        missing = np.flatnonzero(slots < 0)
        if missing.shape[0] and add:
            fresh, groups = first_appearances(values[missing])  # new slots in order of arrival
            new = self._grow(fresh.shape[0], strings=False)
            assert self._value is not None
            self._value[new] = fresh
            self._ints.add(mix(fresh.view(np.uint64)), new, lambda: self._int_entries(int(new[0])))
            slots[missing] = new[groups]
        return slots

    def _encode_strings(self, strings: list[str], add: bool, joined: str | None = None) -> I32:
        buffer, starts, lengths = string_places(strings, joined)
        rows = padded(buffer, starts, lengths)
        if self._numbered:
            numbered = self._numbered_codes(rows, lengths, add)
            if numbered is not None:
                return self._encode_numbered(*numbered, rows, lengths, add)
            self._to_text()
        hashes = self._hash(rows, lengths)
        # Unique strings of the batch: by hash, then checked byte for byte (exact if not).
        _, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
        inverse = inverse.reshape(-1)
        if not same_rows(rows, lengths, rows[first[inverse]], lengths[first[inverse]]).all():
            keyed = np.concatenate([rows, lengths.astype("<u8").view(np.uint8).reshape(-1, 8)], 1)
            _, first, inverse = np.unique(
                keyed.view(f"V{keyed.shape[1]}").reshape(-1), return_index=True, return_inverse=True
            )
            inverse = inverse.reshape(-1)
        rows, lengths, hashes = rows[first], lengths[first], hashes[first]
        first = first.astype(np.int64)
        slots = np.full(first.shape[0], -1, np.int32)
        texts = self._texts
        if texts is not None:
            slots = self._strings.find(
                hashes, lambda r, s: same_rows(rows[r], lengths[r], *texts.rows(s, rows.shape[1]))
            )
        missing = _in_order(np.flatnonzero(slots < 0), first)
        if missing.shape[0] and add:
            slots[missing] = self._add_text(rows[missing], lengths[missing], hashes[missing])
        return slots[inverse]

    def _add_text(self, rows: U8, lengths: I64, hashes: U64) -> I32:
        """Append unique string ids (padded rows, their hashes) as text, unknown so far."""
        new = self._grow(rows.shape[0], strings=True)
        assert self._texts is not None
        self._texts.append(rows, lengths, new)
        self._strings.add(hashes, new, lambda: self._string_entries(int(new[0])))
        return new

    def _numbered_codes(self, rows: U8, lengths: I64, add: bool) -> tuple[I64, I64] | None:
        """Each string's prefix code (-1: unknown) and number while the map's strings are
        numbered; None if, with ``add``, these strings end that (the map turns to text). Without
        ``add`` strings that are not numbered are simply unknown."""
        ok, starts, numbers = split(rows, lengths)
        if add and not ok.all():
            return None
        codes = self._prefix_codes(rows, starts, ok, add)
        return None if codes is None else (codes, numbers)

    def _prefix_codes(
        self, rows: U8, starts: I64, ok: npt.NDArray[np.bool_], add: bool
    ) -> I64 | None:
        """:meth:`NumberedStrings.prefix_codes`, up to :data:`MAX_PREFIXES`; a second prefix
        ends the binary search."""
        if self._numbers is None:
            if not add:
                return np.full(rows.shape[0], -1, np.int64)
            self._numbers = NumberedStrings(self._capacity)
        codes = self._numbers.prefix_codes(rows, starts, ok, add, MAX_PREFIXES)
        if self._sorted and self._numbers.several:
            self._build_string_table()
        return codes

    def _encode_numbered(self, codes: I64, numbers: I64, rows: U8, lengths: I64, add: bool) -> I32:
        """:meth:`_encode_strings` of numbered strings (the code of each one's prefix, -1 where
        it cannot be known)."""
        out = np.full(codes.shape[0], -1, np.int32)
        at = np.flatnonzero(codes >= 0)
        codes, numbers = codes[at], numbers[at]
        if self._numbers is not None and self._numbers.several:  # unique (code, number) pairs
            pairs = np.ascontiguousarray(np.stack([codes, numbers], 1)).view("V16").reshape(-1)
            _, first, inverse = np.unique(pairs, return_index=True, return_inverse=True)
        elif numbers.shape[0] < 2 or bool((numbers[1:] > numbers[:-1]).all()):  # a counter's
            first = inverse = np.arange(numbers.shape[0])
        else:
            _, first, inverse = np.unique(numbers, return_index=True, return_inverse=True)
        codes, numbers = codes[first], numbers[first]
        picked = at[first]  # the rows of the distinct strings (copied only where read)
        slots = self._find_numbers(
            codes, numbers, lambda: self._hash(rows[picked], lengths[picked])
        )
        missing = _in_order(np.flatnonzero(slots < 0), first)
        if missing.shape[0] and add:
            slots[missing] = self._add_numbered(
                codes[missing], numbers[missing], rows, lengths, picked[missing]
            )
        out[at] = slots[inverse.reshape(-1)]
        return out

    def _find_numbers(self, codes: I64, numbers: I64, hashes: Callable[[], U64]) -> I32:
        """Slots of numbered strings by their prefixes' codes and their numbers (``hashes``:
        their strings' hashes)."""
        if self._numbers is None:
            return np.full(numbers.shape[0], -1, np.int32)
        if self._sorted:  # one prefix; the numbers of slots 0 .. size - 1, ascending
            return self._numbers.search(numbers, self._size)
        return self._strings.find(hashes(), self._numbers.same(codes, numbers))

    def _add_numbered(
        self, codes: I64, numbers: I64, rows: U8, lengths: I64, which: I64 | None = None
    ) -> I32:
        """Append unique numbered strings, unknown so far, in order (their padded rows are
        ``rows[which]``, all of ``rows`` without ``which``: read for a table only)."""
        assert self._numbers is not None
        if self._sorted and not self._numbers.ascending(numbers, self._size):
            self._build_string_table()  # out of order
        new = self._grow(numbers.shape[0], strings=True)
        self._numbers.write(new, codes, numbers)
        if not self._sorted:
            if which is not None:
                rows, lengths = rows[which], lengths[which]
            hashes = self._hash(rows, lengths)
            self._strings.add(hashes, new, lambda: self._string_entries(int(new[0])))
        return new

    def _build_string_table(self) -> None:
        """Leave the binary search: the table of every string id so far."""
        self._sorted = False
        hashes, slots = self._string_entries(self._size)
        self._strings = SlotTable()
        self._strings.add(hashes, slots, lambda: (np.empty(0, np.uint64), np.empty(0, np.int32)))

    def _to_text(self) -> None:
        """Keep the numbered strings as text from now on (the first string that is not)."""
        if self._sorted:
            self._build_string_table()
        self._numbered = False
        if self._numbers is not None and self._has_strings:
            strings = self.strings_at(slice(None))
            sizes = np.zeros(self._size, np.int64)
            sizes[strings] = self._numbers.lengths(np.flatnonzero(strings))
            texts = TextStrings.of_sizes(self._capacity, sizes)
            slots = np.flatnonzero(strings)
            for lo in range(0, slots.shape[0], REHASH_CHUNK):
                chunk = slots[lo : lo + REHASH_CHUNK]
                texts.fill(chunk, *self._numbers.rows(chunk))
            self._texts = texts
        self._numbers = None

    def _hash(self, rows: U8, lengths: I64) -> U64:
        hashes = hash_rows(rows, lengths)
        return hashes if self._hash_mask is None else hashes & self._hash_mask

    def _grow(self, n: int, strings: bool) -> I32:
        """``n`` new slots of one kind, allocating the arrays that kind needs."""
        start = self._size
        if start + n > MAX_IDS:
            raise InputError(f"more than {MAX_IDS} distinct event ids")
        if start + n > self._capacity:
            self._capacity = max(start + n, self._capacity + self._capacity // 8, 1024)
            if self._value is not None:
                grow(self, "_value", self._capacity)
            if self._texts is not None:
                self._texts.grow(self._capacity)
            if self._numbers is not None:
                self._numbers.grow(self._capacity)
            if self._is_string is not None:
                grow(self, "_is_string", self._capacity)
        if not strings and self._sorted:  # the binary search needs string ids only
            self._build_string_table()
        had_strings = self._has_strings
        if self._is_string is None and start and had_strings != strings:  # now both kinds
            self._is_string = np.full(self._capacity, had_strings, np.bool_)
        self._has_strings |= strings
        if strings and not self._numbered and self._texts is None:
            self._texts = TextStrings(self._capacity)
        if not strings and self._value is None:
            self._value = np.zeros(self._capacity, np.int64)
        new = np.arange(start, start + n, dtype=np.int32)
        if self._texts is not None:
            self._texts.open(start, n)
        if self._is_string is not None:
            self._is_string[new] = strings
        self._size += n
        return new

    def _int_entries(self, below: int) -> tuple[U64, I32]:
        """Hashes and slots of the integer ids of slots ``< below`` (those in the table)."""
        slots = np.flatnonzero(~self.strings_at(slice(below))).astype(np.int32)
        assert self._value is not None
        return mix(self._value[slots].view(np.uint64)), slots

    def _string_entries(self, below: int) -> tuple[U64, I32]:
        """Hashes and slots of the string ids of slots ``< below`` (those in the table)."""
        slots = np.flatnonzero(self.strings_at(slice(below))).astype(np.int32)
        hashes = np.empty(slots.shape[0], np.uint64)
        for lo in range(0, slots.shape[0], REHASH_CHUNK):
            hashes[lo : lo + REHASH_CHUNK] = self._hash(
                *self.string_rows(slots[lo : lo + REHASH_CHUNK])
            )
        return hashes, slots

    def string_rows(self, slots: npt.NDArray[np.integer]) -> tuple[U8, I64]:
        """The padded rows of string ``slots`` (as text or numbered) and their lengths."""
        if self._numbers is not None:
            return self._numbers.rows(slots)
        assert self._texts is not None
        return self._texts.rows(slots)

    def strings_at(self, slots: npt.NDArray[np.integer] | slice) -> npt.NDArray[np.bool_]:
        """Which of ``slots`` hold strings (no array of every slot when all are one kind)."""
        if self._is_string is not None:
            return self._is_string[: self._size][slots]
        n = len(range(self._size)[slots]) if isinstance(slots, slice) else slots.shape[0]
        return np.full(n, self._has_strings, np.bool_)

    def int_values(self, slots: npt.NDArray[np.integer]) -> I64:
        """The values of integer ``slots``."""
        assert self._value is not None or not slots.shape[0]
        return np.empty(0, np.int64) if self._value is None else self._value[slots]

    # -- decode (as output columns and hashes: :mod:`monitor.index.id_columns`) ---------------

    def decode(self, slots: npt.NDArray[np.integer]) -> npt.NDArray[np.generic]:
        """External ids of slots: ``int64`` when all are integers, else ``object``."""
        strings = self.strings_at(slots)
        if not strings.any():
            assert self._value is not None or not slots.shape[0]
            return np.empty(0, np.int64) if self._value is None else self._value[slots]
        out = np.empty(slots.shape[0], dtype=object)
        if not strings.all():
            assert self._value is not None
            out[~strings] = self._value[slots[~strings]].astype(object)
        rows, lengths = self.string_rows(slots[strings])
        starts = np.arange(rows.shape[0], dtype=np.int64) * rows.shape[1]
        out[strings] = decode_rows(rows.reshape(-1), starts, lengths)
        return out

    # -- persistence -------------------------------------------------------------------------

    def export(self, start: int = 0) -> bytes:
        """The ids of slots ``start ..`` as bytes (:mod:`monitor.index.id_blob`), for
        :meth:`restore`."""
        return self._export(np.arange(start, max(start, self._size), dtype=np.int64))

    def subset(self, slots: I32) -> IdMap:
        """A new map of the ids of ``slots`` (ascending) only: the ``i``-th of them has slot
        ``i`` there (compaction keeps the ids of live events, in their order). Numbered ids
        of one prefix in ascending order (a counter) stay so in any subset: their numbers are
        taken as they are, not formatted and parsed again."""
        out = IdMap(self._hash_bits)
        numbers = self._numbers
        if self._sorted and self._value is None and numbers is not None and self._numbered:
            out._capacity = max(int(slots.shape[0]), 1024)
            out._numbers = numbers.subset(slots, out._capacity)
            out._size = int(slots.shape[0])
            out._has_strings = out._size > 0
            return out
        out.restore(self._export(slots.astype(np.int64)))
        return out

    def _export(self, slots: I64) -> bytes:
        """The ids of ascending ``slots`` as a blob (texts follow each other by slot)."""
        kinds = self.strings_at(slots)
        ints = np.zeros(slots.shape[0], np.int64)
        if self._value is not None:
            ints[~kinds] = self._value[slots[~kinds]]
        store = self._texts if self._texts is not None else self._numbers
        if store is None or not slots.shape[0]:
            return id_blob.pack(kinds, ints, np.empty(0, np.uint32), b"")
        return id_blob.pack(kinds, ints, *store.texts(slots[kinds], REHASH_CHUNK))

    def restore(self, blob: bytes) -> None:
        """Append the ids of an :meth:`export` blob; they get the next slots, in order."""
        for values, rows, lengths in id_blob.runs(blob, REHASH_CHUNK):
            if values is not None:
                self._add_ints(values)
            elif rows is not None and lengths is not None:
                self._add_strings(rows, lengths)

    def _add_ints(self, values: I64) -> None:
        """Append unique integer ids, unknown so far, in order."""
        new = self._grow(values.shape[0], strings=False)
        assert self._value is not None
        self._value[new] = values
        self._ints.add(mix(values.view(np.uint64)), new, lambda: self._int_entries(int(new[0])))

    def _add_strings(self, rows: U8, lengths: I64) -> None:
        """Append unique string ids (padded rows), unknown so far, in order."""
        numbered = self._numbered_codes(rows, lengths, add=True) if self._numbered else None
        if numbered is not None:
            self._add_numbered(*numbered, rows, lengths)
            return
        if self._numbered:
            self._to_text()
        self._add_text(rows, lengths, self._hash(rows, lengths))


def _int64(column: npt.NDArray[np.generic]) -> I64:
    """Integer ids as ``int64`` (Python ints beyond 64 bits are an input error)."""
    if column.dtype.kind == "u" and column.shape[0] and int(column.max()) >= 2**63:
        raise InputError("event id out of the 64-bit integer range")
    try:
        return column.astype(np.int64)
    except OverflowError as exc:
        raise InputError(f"event id out of the 64-bit integer range: {exc}") from exc


def _in_order(missing: I64, first: I64) -> I64:
    """``missing`` (unique ids of a batch) in order of first appearance in the batch."""
    return missing[np.argsort(first[missing], kind="stable")]


def _of_type(types: npt.NDArray[np.object_], kind: type) -> npt.NDArray[np.bool_]:
    """Which entries of an ``object`` array of types are exactly ``kind``."""
    return np.asarray(types == np.asarray(kind, dtype=object), np.bool_)
