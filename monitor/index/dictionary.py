"""The vertex dictionary: external vertex ids (``int`` or ``str``) <-> dense ``int32`` ids.

Dense ids are handed out batch by batch (a batch's new ids in the order of their values) and
never reused, so every index can be addressed by them. Integer ids are found in a hash table of
dense ids (a :class:`~monitor.index.hashtable.SlotTable`, about 7 bytes per vertex) whose keys
are the dictionary's own column of values: one compiled probe per id of a batch, where a sorted
map's binary search missed the caches a dozen times; only the ids not found are sorted, to be
numbered. String ids go through a Python dict, one lookup per distinct string of a batch.

The *order* of vertices, used by filters such as ``a < b``, is that of the external ids: integers
by value, strings lexicographically, every integer before every string.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from core.errors import InputError
from monitor.index.hashtable import U64, SlotTable, mix
from monitor.index.levels import I32, I64
from monitor.index.texts import unique_strings
from monitor.index.unique import unique_inverse

#: Dense ids are int32; one less than 2**31 keeps ``key << 32 | value`` packing positive.
MAX_VERTICES = 2**31 - 1


def integer_ids(column: npt.NDArray[np.generic]) -> tuple[npt.NDArray[np.bool_], I64]:
    """Which ids of an ``object`` column are integers, and their values (``InputError`` beyond
    64 bits)."""
    is_int = np.fromiter((type(v) is int for v in column), np.bool_, column.shape[0])
    try:
        ints = column[is_int].astype(np.int64)
    except OverflowError as exc:
        raise InputError(f"vertex id out of the 64-bit integer range: {exc}") from exc
    return is_int, ints


class VertexDictionary:
    """External vertex ids <-> dense ids."""

    def __init__(self) -> None:
        self._ints = SlotTable()
        self._strings: dict[str, int] = {}
        self._int_value: I64 = np.empty(0, np.int64)
        self._is_string: npt.NDArray[np.bool_] = np.empty(0, np.bool_)
        self._string_of: dict[int, str] = {}
        self._size = 0
        self._order: I64 | None = None

    def __len__(self) -> int:
        return self._size

    @property
    def nbytes(self) -> int:
        """Approximate bytes held (arrays exactly; strings by their length plus dict overhead)."""
        arrays = self._ints.nbytes + int(self._int_value.nbytes + self._is_string.nbytes)
        return arrays + sum(len(s) + 120 for s in self._strings)

    def encode(self, column: npt.NDArray[np.generic], add: bool = True) -> I32:
        """Dense ids of a column of external ids; unknown ids get new ones, or -1 if not ``add``."""
        if column.dtype == np.int64:
            return self._encode_ints(column.astype(np.int64, copy=False), add)
        out = np.empty(column.shape[0], np.int32)
        is_int, ints = integer_ids(column)
        if is_int.any():
            out[is_int] = self._encode_ints(ints, add)
        if not is_int.all():
            out[~is_int] = self._encode_strings(column[~is_int], add)
        return out

    def _encode_ints(self, values: I64, add: bool) -> I32:
        hashes = mix(values.view(np.uint64))
        # only integer ids are in the table: no kind to check
        ids = self._ints.find_values(hashes, self._int_value, values)
        missing = np.flatnonzero(ids < 0)
        if missing.shape[0] and add:
            fresh, inverse = unique_inverse(values[missing])
            new_ids = self._grow(fresh.shape[0])
            self._int_value[new_ids] = fresh
            start = int(new_ids[0])
            self._ints.add(mix(fresh.view(np.uint64)), new_ids, lambda: self._int_entries(start))
            ids[missing] = new_ids[inverse]
        return ids

    def _int_entries(self, end: int) -> tuple[U64, I32]:
        """The hashes and dense ids of the integer ids below dense id ``end`` (what the table
        holds before an addition, placed again when it grows)."""
        ids = np.flatnonzero(~self._is_string[:end]).astype(np.int32)
        return mix(self._int_value[ids].view(np.uint64)), ids

    def _encode_strings(self, values: npt.NDArray[np.generic], add: bool) -> I32:
        """Ids of string vertex ids (another type of id, not an integer: named by its text)."""
        if not all(type(v) is str for v in set(values.tolist())):
            values = np.array([v if type(v) is str else str(v) for v in values.tolist()], object)
        names, inverse = unique_strings(values)
        get = self._strings.get
        ids = np.fromiter((get(name, -1) for name in names), np.int32, len(names))
        missing = np.flatnonzero(ids < 0)
        if missing.shape[0] and add:
            fresh = [names[i] for i in missing.tolist()]
            new_ids = self._grow(len(fresh))
            ids[missing] = new_ids
            self._is_string[new_ids] = True
            numbers = new_ids.tolist()
            self._strings.update(zip(fresh, numbers, strict=True))
            self._string_of.update(zip(numbers, fresh, strict=True))
        return ids[inverse]

    def _grow(self, n: int) -> I32:
        start = self._size
        if start + n > MAX_VERTICES:
            raise InputError(f"more than {MAX_VERTICES} distinct vertices")
        if start + n > self._int_value.shape[0]:
            capacity = max(start + n, 2 * self._int_value.shape[0], 1024)
            self._int_value = np.resize(self._int_value, capacity)
            self._is_string = np.resize(self._is_string, capacity)
        self._int_value[start : start + n] = 0
        self._is_string[start : start + n] = False
        self._size += n
        self._order = None
        return np.arange(start, start + n, dtype=np.int32)

    def decode(self, dense: npt.NDArray[np.integer]) -> npt.NDArray[np.generic]:
        """External ids of dense ids: ``int64`` when all are integers, else ``object``."""
        ints: I64 = self._int_value[dense]
        if not self._string_of:
            return ints
        strings = self._is_string[dense]
        if not strings.any():
            return ints
        out: npt.NDArray[np.generic] = ints.astype(object)
        out[strings] = [self._string_of[int(i)] for i in dense[strings]]
        return out

    def export(self, start: int = 0) -> bytes:
        """The entries of dense ids ``start ..`` as bytes, for :meth:`restore`.

        Layout (little-endian): ``n`` (u32); per entry a kind byte (0 int, 1 str); per entry the
        int64 value (0 for strings); per string its UTF-8 length (u32); the UTF-8 bytes.
        """
        end = self._size
        n = max(0, end - start)
        kinds = self._is_string[start:end].astype(np.uint8)
        ints = self._int_value[start:end].astype("<i8")
        strings = [self._string_of[start + i].encode() for i in np.flatnonzero(kinds).tolist()]
        lengths = np.asarray([len(b) for b in strings], dtype="<u4")
        return b"".join(
            [
                np.uint32(n).astype("<u4").tobytes(),
                kinds.tobytes(),
                ints.tobytes(),
                lengths.tobytes(),
                *strings,
            ]
        )

    def restore(self, blob: bytes) -> None:
        """Append the entries of an :meth:`export` blob; they get the next dense ids, in order."""
        n = int(np.frombuffer(blob, "<u4", 1)[0])
        kinds = np.frombuffer(blob, np.uint8, n, 4).astype(np.bool_)
        ints = np.frombuffer(blob, "<i8", n, 4 + n).astype(np.int64)
        strings_at = np.flatnonzero(kinds)
        lengths = np.frombuffer(blob, "<u4", strings_at.shape[0], 4 + 9 * n).astype(np.int64)
        offset = 4 + 9 * n + 4 * strings_at.shape[0]
        if offset + int(lengths.sum()) != len(blob):
            raise ValueError(f"vertex blob of {len(blob)} bytes does not hold {n} entries")
        ids = self._grow(n)
        self._int_value[ids] = ints
        self._is_string[ids] = kinds
        int_ids = ids[~kinds]
        if int_ids.shape[0]:
            start = int(ids[0])
            hashes = mix(ints[~kinds].view(np.uint64))
            self._ints.add(hashes, int_ids, lambda: self._int_entries(start))
        ends = np.cumsum(lengths) + offset
        for dense, stop, length in zip(
            ids[kinds].tolist(), ends.tolist(), lengths.tolist(), strict=True
        ):
            name = blob[stop - length : stop].decode()
            self._strings[name] = dense
            self._string_of[dense] = name

    def order_keys(self) -> I64:
        """Per dense id, an ``int64`` that orders vertices as their external ids are ordered."""
        if not self._string_of:
            return self._int_value[: self._size]
        if self._order is None:
            n = self._size
            strings = self._is_string[:n]
            int_ids = np.flatnonzero(~strings)
            str_ids = np.flatnonzero(strings)
            ranked = np.concatenate(
                [
                    int_ids[np.argsort(self._int_value[int_ids], kind="stable")],
                    str_ids[np.argsort(np.array([self._string_of[int(i)] for i in str_ids]))],
                ]
            )
            order = np.empty(n, np.int64)
            order[ranked] = np.arange(n, dtype=np.int64)
            self._order = order
        return self._order
