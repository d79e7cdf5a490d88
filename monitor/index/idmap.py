"""Event ids: external ids (``int`` or ``str``) <-> dense slots, in flat arrays.

The identities of the events of one relation, by slot (dense, in order of first appearance,
never reused; a compaction keeps the live ones in a new map, :meth:`IdMap.subset`). A string
id is kept as its UTF-8 bytes in one text buffer (slot ``s`` holds ``text[end[s]:
end[s + 1]]``), an integer id as its ``int64`` value; each kind is found through
its own :class:`~monitor.index.hashtable.SlotTable`, which stores slots only: a probe compares
the bytes (or the value) themselves, so ids whose hashes collide stay different ids.

While every string id is *numbered* with one prefix (``tx-91``: :mod:`monitor.index.numbered`)
the strings are kept as their numbers (``uint32``, ``int64`` past 2**32), not as text; the
first string that is not turns them all into text, once. While, besides, the numbers grow with
the slots (ids given out by a counter, in order: transaction ids, file positions) and there is
no integer id, a string is found by a binary search over the numbers and no table is kept; the
first id out of order builds the table, once.

Arrays a store does not need are not allocated: ids that are all strings keep no values and no
kinds, ids that are all integers no text. Per string id: its bytes, a 4-byte end offset and
about 7 bytes of table (numbered: 4 bytes, and the table only out of order); per integer id: 8
bytes of value and about 7 of table. Decoding gives back exactly what was encoded: ``int`` as
``int`` (``int64`` arrays when every id decoded is an integer), ``str`` as the same ``str``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from core.errors import InputError
from monitor.index.hashtable import U64, SlotTable, mix
from monitor.index.levels import I32, I64, gather_ranges, resized
from monitor.index.numbered import digit_counts, format_rows, prefixes_of, split
from monitor.index.texts import (
    U8,
    decode_rows,
    hash_rows,
    pack_strings,
    padded,
    plain_ascii,
    same_rows,
)

#: Slots are int32.
MAX_IDS = 2**31 - 1
#: The tags of an id's stable hash (:meth:`IdMap.id_hashes`, ``match_id``): an integer's and a
#: string's hashes differ even where their bytes agree.
INT_ID_TAG = np.uint64(0x6A09E667F3BCC908)
STR_ID_TAG = np.uint64(0xBB67AE8584CAA73B)
#: Prefixes of numbered ids a map keeps as codes (one byte an id); past them, ids are text.
MAX_PREFIXES = 255
#: The largest text offset a ``uint32`` end holds (beyond it the ends become ``int64``).
TEXT_OFFSET_MAX = 2**32 - 1
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
        self._end: npt.NDArray[np.integer[Any]] | None = None
        self._is_string: npt.NDArray[np.bool_] | None = None  # once both kinds are present
        self._text: U8 = np.empty(0, np.uint8)
        self._text_size = 0
        #: Whether every string id so far is numbered (their prefixes ``_prefixes``; then
        #: ``_number`` holds their numbers by slot, and there is no text).
        self._numbered = True
        self._prefixes: list[bytes] = []
        self._prefix_index: dict[bytes, int] = {}
        #: The code of each numbered slot's prefix, once there are two prefixes.
        self._codes: npt.NDArray[np.uint8] | None = None
        self._number: npt.NDArray[np.integer[Any]] | None = None
        #: Whether string ids are found by binary search over ``_number`` (no table yet).
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
            "text": self._text,
            "text ends": self._end,
            "numbers": self._number,
            "prefix codes": self._codes,
            "int values": self._value,
        }
        out = {name: int(a.nbytes) for name, a in arrays.items() if a is not None}
        out["kinds"] = 0 if self._is_string is None else int(self._is_string.nbytes)
        out["hash tables"] = self._ints.nbytes + self._strings.nbytes
        return out

    # -- encode ------------------------------------------------------------------------------

    def encode(self, column: npt.NDArray[np.generic], add: bool = True) -> I32:
        """Slots of a column of external ids; unknown ids get new ones, or -1 if not ``add``."""
        if column.dtype.kind in "iu":
            return self._encode_ints(_int64(column), add)
        values = column.tolist()
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
        unique, first, inverse = np.unique(values, return_index=True, return_inverse=True)
        hashes = mix(unique.view(np.uint64))
        if self._value is None:
            slots = np.full(unique.shape[0], -1, np.int32)
        else:
            known = self._value
            slots = self._ints.find(hashes, lambda rows, s: known[s] == unique[rows])
        missing = _in_order(np.flatnonzero(slots < 0), first)
        if missing.shape[0] and add:
            new = self._grow(missing.shape[0], strings=False)
            assert self._value is not None
            self._value[new] = unique[missing]
            slots[missing] = new
            self._ints.add(hashes[missing], new, lambda: self._int_entries(int(new[0])))
        return slots[inverse.reshape(-1)]

    def _encode_strings(self, strings: list[str], add: bool) -> I32:
        buffer, lengths = pack_strings(strings)
        starts = np.zeros(lengths.shape[0], np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        rows = padded(buffer, starts, lengths)
        if self._numbered:
            ok, starts, numbers = split(rows, lengths)
            # Without ``add``, strings that are not numbered are simply unknown.
            codes = self._prefix_codes(rows, starts, ok, add) if ok.all() or not add else None
            if codes is not None:
                return self._encode_numbered(codes, numbers, rows, lengths, add)
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
        if self._end is not None:
            slots = self._strings.find(
                hashes, lambda r, s: same_rows(rows[r], lengths[r], *self._rows(s, rows.shape[1]))
            )
        missing = _in_order(np.flatnonzero(slots < 0), first)
        if missing.shape[0] and add:
            new = self._grow(missing.shape[0], strings=True)
            self._append_text(rows[missing], lengths[missing], new)
            slots[missing] = new
            self._strings.add(hashes[missing], new, lambda: self._string_entries(int(new[0])))
        return slots[inverse]

    def _prefix_codes(
        self, rows: U8, starts: I64, ok: npt.NDArray[np.bool_], add: bool
    ) -> I64 | None:
        """The code of each numbered row's prefix, new prefixes added if ``add`` (None: more
        than :data:`MAX_PREFIXES` in all); -1 for rows not numbered or of a prefix unknown."""
        codes = np.full(rows.shape[0], -1, np.int64)
        at = np.flatnonzero(ok)
        found, inverse = prefixes_of(rows[at], starts[at])
        known = np.array([self._prefix_index.get(p, -1) for p in found], np.int64)
        for i in np.flatnonzero(known < 0).tolist() if add else []:
            if len(self._prefixes) == MAX_PREFIXES:
                return None
            known[i] = self._add_prefix(found[i])
        codes[at] = known[inverse]
        return codes

    def _add_prefix(self, prefix: bytes) -> int:
        """A new prefix's code; a second one ends the binary search and gives codes by slot."""
        if self._prefixes and self._sorted:
            self._build_string_table()
        self._prefix_index[prefix] = len(self._prefixes)
        self._prefixes.append(prefix)
        if len(self._prefixes) == 2:
            self._codes = np.zeros(self._capacity, np.uint8)
        return len(self._prefixes) - 1

    def _encode_numbered(self, codes: I64, numbers: I64, rows: U8, lengths: I64, add: bool) -> I32:
        """:meth:`_encode_strings` of numbered strings (the code of each one's prefix, -1 where
        it cannot be known)."""
        out = np.full(codes.shape[0], -1, np.int32)
        at = np.flatnonzero(codes >= 0)
        codes, numbers = codes[at], numbers[at]
        if len(self._prefixes) > 1:  # unique (code, number) pairs
            pairs = np.ascontiguousarray(np.stack([codes, numbers], 1)).view("V16").reshape(-1)
            _, first, inverse = np.unique(pairs, return_index=True, return_inverse=True)
        else:
            _, first, inverse = np.unique(numbers, return_index=True, return_inverse=True)
        codes, numbers, rows, lengths = (
            codes[first],
            numbers[first],
            rows[at][first],
            lengths[at][first],
        )
        slots = self._find_numbers(codes, numbers, lambda: self._hash(rows, lengths))
        missing = _in_order(np.flatnonzero(slots < 0), first)
        if missing.shape[0] and add:
            slots[missing] = self._add_numbered(
                codes[missing], numbers[missing], rows[missing], lengths[missing]
            )
        out[at] = slots[inverse.reshape(-1)]
        return out

    def _find_numbers(self, codes: I64, numbers: I64, hashes: Callable[[], U64]) -> I32:
        """Slots of numbered strings by their prefixes' codes and their numbers (``hashes``:
        their strings' hashes)."""
        if self._number is None:
            return np.full(numbers.shape[0], -1, np.int32)
        known = self._number
        if self._sorted:  # one prefix; the numbers of slots 0 .. size - 1, ascending
            # Needles of the numbers' own type (no copy of the numbers); larger ones are absent.
            fits = numbers <= np.iinfo(known.dtype).max
            at = np.searchsorted(
                known[: self._size], np.where(fits, numbers, 0).astype(known.dtype)
            )
            hit = fits & (at < self._size)
            hit[hit] = known[at[hit]] == numbers[hit]
            return np.where(hit, at, -1).astype(np.int32)
        prefixes = self._codes
        if prefixes is None:
            return self._strings.find(hashes(), lambda rows, s: known[s] == numbers[rows])
        return self._strings.find(
            hashes(), lambda rows, s: (known[s] == numbers[rows]) & (prefixes[s] == codes[rows])
        )

    def _add_numbered(self, codes: I64, numbers: I64, rows: U8, lengths: I64) -> I32:
        """Append unique numbered strings, unknown so far, in order."""
        last = self._number[self._size - 1] if self._number is not None and self._size else -1
        if self._sorted and not (numbers[0] > last and bool((numbers[1:] > numbers[:-1]).all())):
            self._build_string_table()  # out of order
        new = self._grow(numbers.shape[0], strings=True)
        assert self._number is not None
        if int(numbers.max()) > np.iinfo(self._number.dtype).max:
            self._number = self._number.astype(np.int64)
        self._number[new] = numbers
        if self._codes is not None:
            self._codes[new] = codes
        if not self._sorted:
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
        if self._number is not None:
            self._end = np.zeros(self._capacity + 1, np.uint32)
            strings = self._string_mask()
            sizes = np.zeros(self._size, np.int64)
            sizes[strings] = self._numbered_lengths(np.flatnonzero(strings))
            ends = np.cumsum(sizes)
            total = int(ends[-1]) if self._size else 0
            if total > TEXT_OFFSET_MAX:
                self._end = self._end.astype(np.int64)
            self._end[1 : self._size + 1] = ends
            self._end[self._size + 1 :] = total
            self._text = np.zeros(max(total * 9 // 8, 1 << 16), np.uint8)
            slots = np.flatnonzero(strings)
            for lo in range(0, slots.shape[0], REHASH_CHUNK):
                chunk = slots[lo : lo + REHASH_CHUNK]
                rows, lengths = self._string_rows(chunk)
                inside = np.arange(rows.shape[1]) < lengths[:, None]
                start = int(self._end[chunk[0]])
                self._text[start : start + int(lengths.sum())] = rows[inside]
            self._text_size = total
        self._number = None
        self._codes = None
        self._prefixes, self._prefix_index = [], {}

    def _hash(self, rows: U8, lengths: I64) -> U64:
        hashes = hash_rows(rows, lengths)
        return hashes if self._hash_mask is None else hashes & self._hash_mask

    def _spans(self, slots: npt.NDArray[np.integer]) -> tuple[I64, I64]:
        """Where the text of each string slot starts, and its length in bytes."""
        assert self._end is not None
        at = slots.astype(np.int64)
        starts = self._end[at].astype(np.int64)
        return starts, self._end[at + 1].astype(np.int64) - starts

    def _rows(self, slots: I32, width: int) -> tuple[U8, I64]:
        """The padded text rows of string ``slots`` and their lengths."""
        assert self._end is not None
        starts, lengths = self._spans(slots)
        return padded(self._text, starts, np.minimum(lengths, width), width), lengths

    def _append_text(self, rows: U8, lengths: I64, slots: I32) -> None:
        assert self._end is not None
        total = int(lengths.sum())
        if self._text_size + total > TEXT_OFFSET_MAX and self._end.dtype != np.int64:
            self._end = self._end.astype(np.int64)
        if self._text_size + total > self._text.shape[0]:  # an eighth more: amortized copies
            capacity = max(self._text_size + total, self._text.shape[0] * 9 // 8, 1 << 16)
            self._text = resized(self._text, capacity, 0)
        inside = np.arange(rows.shape[1]) < lengths[:, None]
        self._text[self._text_size : self._text_size + total] = rows[inside]
        self._end[slots.astype(np.int64) + 1] = self._text_size + np.cumsum(lengths)
        self._text_size += total

    def _grow(self, n: int, strings: bool) -> I32:
        """``n`` new slots of one kind, allocating the arrays that kind needs."""
        start = self._size
        if start + n > MAX_IDS:
            raise InputError(f"more than {MAX_IDS} distinct event ids")
        if start + n > self._capacity:
            self._capacity = max(start + n, self._capacity + self._capacity // 8, 1024)
            if self._value is not None:
                self._value = resized(self._value, self._capacity, 0)
            if self._end is not None:
                self._end = resized(self._end, self._capacity + 1, self._text_size)
            if self._number is not None:
                self._number = resized(self._number, self._capacity, 0)
            if self._codes is not None:
                self._codes = resized(self._codes, self._capacity, 0)
            if self._is_string is not None:
                self._is_string = resized(self._is_string, self._capacity, False)
        if not strings and self._sorted:  # the binary search needs string ids only
            self._build_string_table()
        had_strings = self._has_strings
        if self._is_string is None and start and had_strings != strings:  # now both kinds
            self._is_string = np.full(self._capacity, had_strings, np.bool_)
        if strings and self._numbered and self._number is None:
            self._number = np.zeros(self._capacity, np.uint32)
        if strings and not self._numbered and self._end is None:
            self._end = np.zeros(self._capacity + 1, np.uint32)
        if not strings and self._value is None:
            self._value = np.zeros(self._capacity, np.int64)
        new = np.arange(start, start + n, dtype=np.int32)
        if self._end is not None:
            self._end[start + 1 : start + n + 1] = self._text_size
        if self._is_string is not None:
            self._is_string[new] = strings
        self._size += n
        return new

    @property
    def _has_strings(self) -> bool:
        return self._end is not None or self._number is not None

    def _int_entries(self, below: int) -> tuple[U64, I32]:
        """Hashes and slots of the integer ids of slots ``< below`` (those in the table)."""
        slots = np.flatnonzero(~self._string_mask()[:below]).astype(np.int32)
        assert self._value is not None
        return mix(self._value[slots].view(np.uint64)), slots

    def _string_entries(self, below: int) -> tuple[U64, I32]:
        """Hashes and slots of the string ids of slots ``< below`` (those in the table)."""
        slots = np.flatnonzero(self._string_mask()[:below]).astype(np.int32)
        hashes = np.empty(slots.shape[0], np.uint64)
        for lo in range(0, slots.shape[0], REHASH_CHUNK):
            hashes[lo : lo + REHASH_CHUNK] = self._hash(
                *self._string_rows(slots[lo : lo + REHASH_CHUNK])
            )
        return hashes, slots

    def _string_rows(self, slots: npt.NDArray[np.integer]) -> tuple[U8, I64]:
        """The padded rows of string ``slots`` (as text or numbered) and their lengths."""
        if self._number is not None:
            codes = (
                np.zeros(slots.shape[0], np.int64) if self._codes is None else self._codes[slots]
            )
            return format_rows(self._prefixes, codes, self._number[slots].astype(np.int64))
        starts, lengths = self._spans(slots)
        return padded(self._text, starts, lengths), lengths

    def _string_mask(self) -> npt.NDArray[np.bool_]:
        """Which slots hold strings."""
        if self._is_string is not None:
            return self._is_string[: self._size]
        return np.full(self._size, self._has_strings, np.bool_)

    # -- decode ------------------------------------------------------------------------------

    def decode(self, slots: npt.NDArray[np.integer]) -> npt.NDArray[np.generic]:
        """External ids of slots: ``int64`` when all are integers, else ``object``."""
        strings = self._string_mask()[slots]
        if not strings.any():
            assert self._value is not None or not slots.shape[0]
            return np.empty(0, np.int64) if self._value is None else self._value[slots]
        out = np.empty(slots.shape[0], dtype=object)
        if not strings.all():
            assert self._value is not None
            out[~strings] = self._value[slots[~strings]].astype(object)
        rows, lengths = self._string_rows(slots[strings])
        starts = np.arange(rows.shape[0], dtype=np.int64) * rows.shape[1]
        out[strings] = decode_rows(rows.reshape(-1), starts, lengths)
        return out

    def column(self, slots: npt.NDArray[np.integer]) -> npt.NDArray[np.generic]:
        """External ids of slots as an output column (:mod:`core.columns`) without a Python
        object per id where it can: ``int64`` when all are integers, fixed-width ASCII bytes
        when all are strings JSON writes as they are (the common ``tx-91``), else
        :meth:`decode`'s ``object`` array."""
        strings = self._string_mask()[slots]
        if not strings.any() or not strings.all():
            return self.decode(slots)
        rows, lengths = self._string_rows(slots)
        if not plain_ascii(rows, lengths):
            return self.decode(slots)
        return rows.view(f"S{rows.shape[1]}").reshape(-1)

    def id_hashes(self, slots: npt.NDArray[np.integer]) -> U64:
        """The stable hash of each slot's external id, from the stored bytes and values (no
        Python object per id): an integer's ``mix(value ^ INT_ID_TAG)``, a string's
        :func:`~monitor.index.texts.hash_rows` of its UTF-8 bytes ``^ STR_ID_TAG``; what
        ``match_id`` hashes for the decoded id."""
        out = np.empty(slots.shape[0], np.uint64)
        strings = self._string_mask()[slots]
        if not strings.all():
            assert self._value is not None
            values = self._value[slots[~strings]].view(np.uint64)
            out[~strings] = mix(values ^ INT_ID_TAG)
        if strings.any():
            out[strings] = hash_rows(*self._string_rows(slots[strings])) ^ STR_ID_TAG
        return out

    # -- persistence -------------------------------------------------------------------------

    def export(self, start: int = 0) -> bytes:
        """The ids of slots ``start ..`` as bytes, for :meth:`restore`.

        Layout (little-endian, that of the vertex dictionary's export): ``n`` (u32); per id a
        kind byte (0 int, 1 str); per id the int64 value (0 for strings); per string its UTF-8
        length (u32); the UTF-8 bytes.
        """
        return self._export(np.arange(start, max(start, self._size), dtype=np.int64))

    def subset(self, slots: I32) -> IdMap:
        """A new map of the ids of ``slots`` (ascending) only: the ``i``-th of them has slot
        ``i`` there (compaction keeps the ids of live events, in their order)."""
        out = IdMap(self._hash_bits)
        out.restore(self._export(slots.astype(np.int64)))
        return out

    def _export(self, slots: I64) -> bytes:
        """The ids of ascending ``slots`` in the layout of :meth:`export`."""
        kinds = self._string_mask()[slots]
        ints = np.zeros(slots.shape[0], "<i8")
        if self._value is not None:
            ints[~kinds] = self._value[slots[~kinds]]
        texts = b""
        lengths = np.empty(0, "<u4")
        if self._end is not None and slots.shape[0]:  # string texts follow each other by slot
            at = slots[kinds]
            starts, spans = self._spans(at)
            lengths = spans.astype("<u4")
            texts = _gathered(self._text, starts, starts + spans)
        elif self._number is not None and slots.shape[0]:
            lengths, texts = self._numbered_texts(slots[kinds])
        head = np.uint32(slots.shape[0]).astype("<u4").tobytes()
        return b"".join(
            [head, kinds.astype(np.uint8).tobytes(), ints.tobytes(), lengths.tobytes(), texts]
        )

    def _numbered_texts(self, slots: I64) -> tuple[npt.NDArray[np.uint32], bytes]:
        """The lengths and the text, one after the other, of numbered string ``slots``."""
        lengths = self._numbered_lengths(slots)
        parts = []
        for lo in range(0, slots.shape[0], REHASH_CHUNK):
            rows, sizes = self._string_rows(slots[lo : lo + REHASH_CHUNK])
            parts.append(rows[np.arange(rows.shape[1]) < sizes[:, None]].tobytes())
        return lengths.astype("<u4"), b"".join(parts)

    def _numbered_lengths(self, slots: npt.NDArray[np.integer]) -> I64:
        """The lengths in bytes of numbered string ``slots``."""
        assert self._number is not None
        sizes = np.array([len(p) for p in self._prefixes], np.int64)
        codes = np.zeros(slots.shape[0], np.int64) if self._codes is None else self._codes[slots]
        lengths: I64 = sizes[codes] + digit_counts(self._number[slots].astype(np.int64))
        return lengths

    def restore(self, blob: bytes) -> None:
        """Append the ids of an :meth:`export` blob; they get the next slots, in order."""
        n = int(np.frombuffer(blob, "<u4", 1)[0])
        kinds = np.frombuffer(blob, np.uint8, n, 4).astype(np.bool_)
        ints = np.frombuffer(blob, "<i8", n, 4 + n).astype(np.int64)
        lengths = np.frombuffer(blob, "<u4", int(kinds.sum()), 4 + 9 * n).astype(np.int64)
        offset = 4 + 9 * n + 4 * lengths.shape[0]
        if offset + int(lengths.sum()) != len(blob):
            raise ValueError(f"event id blob of {len(blob)} bytes does not hold {n} ids")
        text = np.frombuffer(blob, np.uint8, len(blob) - offset, offset)
        starts = np.zeros(lengths.shape[0], np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        # Runs of one kind, in blob order (slots are given out in order), in bounded chunks.
        changes = np.flatnonzero(kinds[1:] != kinds[:-1]) + 1
        edges = sorted({0, n, *changes.tolist(), *range(0, n, REHASH_CHUNK)})
        nth_string: I64 = np.cumsum(kinds, dtype=np.int64) - kinds
        for lo, hi in itertools.pairwise(edges):
            if kinds[lo]:
                i, j = int(nth_string[lo]), int(nth_string[lo]) + hi - lo
                self._add_strings(padded(text, starts[i:j], lengths[i:j]), lengths[i:j])
            else:
                self._add_ints(ints[lo:hi])

    def _add_ints(self, values: I64) -> None:
        """Append unique integer ids, unknown so far, in order."""
        new = self._grow(values.shape[0], strings=False)
        assert self._value is not None
        self._value[new] = values
        self._ints.add(mix(values.view(np.uint64)), new, lambda: self._int_entries(int(new[0])))

    def _add_strings(self, rows: U8, lengths: I64) -> None:
        """Append unique string ids (padded rows), unknown so far, in order."""
        if self._numbered:
            ok, starts, numbers = split(rows, lengths)
            codes = self._prefix_codes(rows, starts, ok, add=True) if ok.all() else None
            if codes is not None:
                self._add_numbered(codes, numbers, rows, lengths)
                return
            self._to_text()
        new = self._grow(rows.shape[0], strings=True)
        self._append_text(rows, lengths, new)
        self._strings.add(self._hash(rows, lengths), new, lambda: self._string_entries(int(new[0])))


def _int64(column: npt.NDArray[np.generic]) -> I64:
    """Integer ids as ``int64`` (Python ints beyond 64 bits are an input error)."""
    if column.dtype.kind == "u" and column.shape[0] and int(column.max()) >= 2**63:
        raise InputError("event id out of the 64-bit integer range")
    try:
        return column.astype(np.int64)
    except OverflowError as exc:
        raise InputError(f"event id out of the 64-bit integer range: {exc}") from exc


def _gathered(text: U8, starts: I64, ends: I64) -> bytes:
    """The bytes ``text[starts[i]:ends[i]]`` one after the other (ranges ascending, apart),
    gathered in chunks so that the positions never take more than a chunk's worth."""
    if not starts.shape[0]:
        return b""
    if int(ends[-1] - starts[0]) == int((ends - starts).sum()):  # one run: a slice
        return text[int(starts[0]) : int(ends[-1])].tobytes()
    parts = []
    for lo in range(0, starts.shape[0], REHASH_CHUNK):
        _, positions = gather_ranges(starts[lo : lo + REHASH_CHUNK], ends[lo : lo + REHASH_CHUNK])
        parts.append(text[positions].tobytes())
    return b"".join(parts)


def _in_order(missing: I64, first: I64) -> I64:
    """``missing`` (unique ids of a batch) in order of first appearance in the batch."""
    return missing[np.argsort(first[missing], kind="stable")]


def _of_type(types: npt.NDArray[np.object_], kind: type) -> npt.NDArray[np.bool_]:
    """Which entries of an ``object`` array of types are exactly ``kind``."""
    return np.asarray(types == np.asarray(kind, dtype=object), np.bool_)
