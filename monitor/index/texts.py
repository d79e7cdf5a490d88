"""Strings as bytes in one buffer: packing a batch, hashing, comparing and decoding by column.

A batch of Python strings becomes its UTF-8 bytes, one buffer, and each string's length (with
``surrogatepass``, so every ``str`` a JSON decoder can produce round-trips exactly). Per-string
work is done on a *padded* matrix, one row per string, its bytes then zeros up to a width that
is a multiple of 8: hashing reads the rows as ``uint64`` words, comparing reads whole rows, and
the loops run over the words of the longest string, never over the strings.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import orjson

from core.compiled import AVAILABLE, ENABLED, njit
from monitor.index.hashtable import U64, mix
from monitor.index.levels import I64, gather_ranges, resized

U8 = npt.NDArray[np.uint8]
ENCODING = ("utf-8", "surrogatepass")


def pack_strings(strings: list[str], joined: str | None = None) -> tuple[U8, I64]:
    """The UTF-8 bytes of ``strings`` back to back, and each string's length in bytes
    (``joined``: ``"".join(strings)`` when the caller has it)."""
    data = ("".join(strings) if joined is None else joined).encode(*ENCODING)
    lengths = np.fromiter(map(len, strings), np.int64, len(strings))
    if len(data) != int(lengths.sum()):  # not all ASCII: lengths in bytes differ from chars
        lengths = np.fromiter((len(s.encode(*ENCODING)) for s in strings), np.int64, len(strings))
    return np.frombuffer(data, np.uint8), lengths


def string_places(strings: list[str], joined: str | None = None) -> tuple[U8, I64, I64]:
    """A buffer holding the UTF-8 bytes of each of ``strings``, and where each starts and how
    long it is: the JSON array ``orjson`` writes of them (one call in C; no length asked of each
    string in Python: half :func:`pack_strings`' time on 10k ids) when it escapes nothing,
    else :func:`pack_strings`' bytes back to back."""
    if strings:
        try:
            text = orjson.dumps(strings)
        except TypeError:  # orjson.JSONEncodeError: not all str, or a lone surrogate
            pass
        else:
            buffer = np.frombuffer(text, np.uint8)
            quotes = np.flatnonzero(buffer == 0x22)
            # no backslash: nothing escaped, so the quotes are the strings' own, two each
            if quotes.shape[0] == 2 * len(strings) and not bool((buffer == 0x5C).any()):
                starts = quotes[0::2] + 1
                return buffer, starts, quotes[1::2] - starts
    buffer, lengths = pack_strings(strings, joined)
    starts = np.zeros(lengths.shape[0], np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    return buffer, starts, lengths


def unique_strings(strings: npt.NDArray[np.generic]) -> tuple[list[str], npt.NDArray[np.intp]]:
    """``np.unique`` of an array of Python strings, with each one's index among them, exact:
    numpy's fixed-width strings drop trailing NUL characters (``"a"`` and ``"a\\0"`` would be
    one), so a batch holding a NUL anywhere is sorted as Python objects instead (slower)."""
    values = strings.tolist()
    if "\x00" in "".join(values):
        unique, inverse = np.unique(strings, return_inverse=True)
    else:
        unique, inverse = np.unique(strings.astype(str), return_inverse=True)
    return unique.tolist(), inverse.reshape(-1)


def padded(
    buffer: U8, starts: I64, lengths: I64, width: int | None = None, *, compiled: bool = ENABLED
) -> U8:
    """One row per string (``buffer[starts[i]: starts[i] + lengths[i]]``), zero padded to
    ``width`` (default: the longest, rounded up to a multiple of 8; a longer string is cut)."""
    if width is None:
        longest = int(lengths.max()) if lengths.shape[0] else 0
        width = max(8, -(-longest // 8) * 8)
    out = np.zeros((lengths.shape[0], width), np.uint8)
    if compiled:  # a copy per row: 5-7x faster than the masked gather on ids of ~10 bytes
        _copy_rows(buffer, starts, np.minimum(lengths, width), out)
        return out
    columns = np.arange(width, dtype=np.int64)
    inside = columns < lengths[:, None]
    out[inside] = buffer[(starts[:, None] + columns)[inside]]
    return out


def warm() -> None:
    """Load (or compile, the first time on a machine) the row copy, the row hashes and the
    plain-text test before the first epoch."""
    if ENABLED:  # strings packed by pack_strings are a read-only view of their bytes
        for buffer in (np.zeros(1, np.uint8), np.frombuffer(b"a", np.uint8)):
            rows = padded(buffer, np.zeros(1, np.int64), np.ones(1, np.int64))
            hash_rows(rows, np.ones(1, np.int64))
            plain_ascii(rows, np.ones(1, np.int64))


#: What the hash of a row starts from, mixed with its length.
_LENGTH_SEED = 0x9E3779B97F4A7C15

if AVAILABLE:
    from monitor.index.hashtable import mix_one

    @njit(cache=True, nogil=True)
    def _copy_rows(buffer, starts, lengths, out):  # type: ignore[no-untyped-def]
        """Row ``i`` of ``out`` starts with ``buffer[starts[i]: starts[i] + lengths[i]]``
        (unsigned indices, as in :mod:`connectors.json_place`: no wraparound checks)."""
        for i in range(starts.shape[0]):
            first, row = np.uint64(starts[i]), out[i]
            for j in range(np.uint64(lengths[i])):
                row[j] = buffer[first + j]

    @njit(cache=True, nogil=True)
    def _hash_words(words, lengths):  # type: ignore[no-untyped-def]
        """:func:`hash_rows` over the rows' words."""
        n, width = words.shape
        out = np.empty(n, np.uint64)
        seed = np.uint64(_LENGTH_SEED)
        for i in range(n):
            length = lengths[i]
            h = mix_one(np.uint64(length) ^ seed)
            for j in range(width):
                if length > 8 * j:
                    h = mix_one(h ^ words[i, j])
            out[i] = h
        return out

    @njit(cache=True, nogil=True)
    def _plain_ascii(rows, lengths):  # type: ignore[no-untyped-def]
        """:func:`plain_ascii` in one pass: the string's bytes printable, the padding below a
        space."""
        n, width = rows.shape
        for i in range(n):
            length = lengths[i]
            if length <= 0:
                return False
            for j in range(width):
                b = rows[i, j]
                if j < length:
                    if b < 0x20 or b >= 0x7F or b == 0x22 or b == 0x5C:
                        return False
                elif b >= 0x20:
                    return False
        return True


def plain_ascii(rows: U8, lengths: I64, *, compiled: bool = ENABLED) -> bool:
    """Whether every padded row holds text that JSON writes as it is between quotes: printable
    ASCII without ``"`` or ``\\``, none empty (the padding is zeros)."""
    if not rows.shape[0]:
        return True
    if compiled:
        return bool(_plain_ascii(rows, lengths))
    if not bool((lengths > 0).all()) or bool((rows >= 0x7F).any()):
        return False
    if bool(((rows == ord('"')) | (rows == ord("\\"))).any()):
        return False
    # Bytes below a space are the padding only: as many as the rows leave unused.
    return int(np.count_nonzero(rows < 0x20)) == rows.size - int(lengths.sum())


def hash_rows(rows: U8, lengths: I64, *, compiled: bool = ENABLED) -> U64:
    """A 64-bit hash of each padded row and its length (the same at any padding): the length
    mixed, then each word of the string's (compiled: one pass per row; in numpy, one pass of
    whole-array steps per word column)."""
    words = np.ascontiguousarray(rows).view("<u8")
    if compiled:
        hashed: U64 = _hash_words(words, lengths)
        return hashed
    h = mix(lengths.astype(np.uint64) ^ np.uint64(_LENGTH_SEED))
    for j in range(words.shape[1]):  # the words a string has, whatever the padding
        h = np.where(lengths > 8 * j, mix(h ^ words[:, j]), h)
    return h


def same_rows(a: U8, a_lengths: I64, b: U8, b_lengths: I64) -> npt.NDArray[np.bool_]:
    """Whether row ``i`` of ``a`` holds the same string as row ``i`` of ``b``."""
    width = min(a.shape[1], b.shape[1])
    same = a_lengths == b_lengths
    same &= a_lengths <= width
    same &= (a[:, :width] == b[:, :width]).all(axis=1)
    return np.asarray(same, np.bool_)


def decode_rows(buffer: U8, starts: I64, lengths: I64) -> npt.NDArray[np.object_]:
    """The strings at ``starts``/``lengths`` of ``buffer``, as an ``object`` array of ``str``."""
    out = np.empty(lengths.shape[0], dtype=object)
    if not lengths.shape[0]:
        return out
    rows = padded(buffer, starts, lengths)
    fixed = rows.view(f"S{rows.shape[1]}").reshape(-1)
    ascii_only = not (rows >= 0x80).any()
    texts = fixed.astype(f"U{rows.shape[1]}") if ascii_only else np.char.decode(fixed, *ENCODING)
    out[:] = texts.astype(object)
    # Fixed-width byte strings drop trailing NULs: decode those few one by one.
    ends = starts + lengths
    nul = np.flatnonzero(lengths > 0)
    nul = nul[buffer[ends[nul] - 1] == 0]
    for i in nul.tolist():
        out[i] = bytes(buffer[starts[i] : starts[i] + lengths[i]]).decode(*ENCODING)
    return out


#: The largest text offset a ``uint32`` end holds (beyond it the ends become ``int64``).
TEXT_OFFSET_MAX = 2**32 - 1


class TextStrings:
    """Strings by slot in one text buffer: slot ``s`` holds ``text[end[s]:end[s + 1]]`` (a slot
    of another kind holds nothing). Ends are ``uint32`` (4 bytes a slot) while the text fits in
    4 GiB, then ``int64``; the text grows by an eighth."""

    def __init__(self, capacity: int) -> None:
        self.end: npt.NDArray[np.integer] = np.zeros(capacity + 1, np.uint32)
        self.text: U8 = np.empty(0, np.uint8)
        self.size = 0

    def breakdown(self) -> dict[str, int]:
        return {"text": int(self.text.nbytes), "text ends": int(self.end.nbytes)}

    @classmethod
    def of_sizes(cls, capacity: int, sizes: I64) -> TextStrings:
        """Room for slots ``0 ..`` whose strings have ``sizes`` bytes (0: none), ends set, for
        :meth:`fill` to write."""
        out = cls(capacity)
        ends = np.cumsum(sizes)
        total = int(ends[-1]) if ends.shape[0] else 0
        if total > TEXT_OFFSET_MAX:
            out.end = out.end.astype(np.int64)
        out.end[1 : sizes.shape[0] + 1] = ends
        out.end[sizes.shape[0] + 1 :] = total
        out.text = np.zeros(max(total * 9 // 8, 1 << 16), np.uint8)
        out.size = total
        return out

    def fill(self, slots: npt.NDArray[np.integer], rows: U8, lengths: I64) -> None:
        """Write the strings of ascending ``slots`` (no other string between them), whose ends
        :meth:`of_sizes` set."""
        inside = np.arange(rows.shape[1]) < lengths[:, None]
        start = int(self.end[int(slots[0])])
        self.text[start : start + int(lengths.sum())] = rows[inside]

    def grow(self, capacity: int) -> None:
        self.end = resized(self.end, capacity + 1, self.size)

    def open(self, start: int, n: int) -> None:
        """Slots ``start .. start + n - 1`` are new: empty until :meth:`append` fills them."""
        self.end[start + 1 : start + n + 1] = self.size

    def spans(self, slots: npt.NDArray[np.integer]) -> tuple[I64, I64]:
        """Where the text of each slot starts, and its length in bytes."""
        at = slots.astype(np.int64)
        starts = self.end[at].astype(np.int64)
        return starts, self.end[at + 1].astype(np.int64) - starts

    def rows(self, slots: npt.NDArray[np.integer], width: int | None = None) -> tuple[U8, I64]:
        """The padded rows of ``slots`` (cut at ``width`` if given) and their full lengths."""
        starts, lengths = self.spans(slots)
        cut = lengths if width is None else np.minimum(lengths, width)
        return padded(self.text, starts, cut, width), lengths

    def append(self, rows: U8, lengths: I64, slots: npt.NDArray[np.integer]) -> None:
        """Write the padded ``rows`` as the strings of the new ``slots`` (in slot order)."""
        total = int(lengths.sum())
        if self.size + total > TEXT_OFFSET_MAX and self.end.dtype != np.int64:
            self.end = self.end.astype(np.int64)
        if self.size + total > self.text.shape[0]:  # an eighth more: amortized copies
            capacity = max(self.size + total, self.text.shape[0] * 9 // 8, 1 << 16)
            self.text = resized(self.text, capacity)
        inside = np.arange(rows.shape[1]) < lengths[:, None]
        self.text[self.size : self.size + total] = rows[inside]
        self.end[slots.astype(np.int64) + 1] = self.size + np.cumsum(lengths)
        self.size += total

    def texts(self, slots: I64, chunk: int) -> tuple[npt.NDArray[np.uint32], bytes]:
        """The lengths and the text, one after the other, of ascending ``slots`` (gathered
        ``chunk`` at a time, so that the positions never take more than a chunk's worth)."""
        starts, lengths = self.spans(slots)
        ends = starts + lengths
        if not starts.shape[0]:
            return lengths.astype("<u4"), b""
        if int(ends[-1] - starts[0]) == int(lengths.sum()):  # one run: a slice
            return lengths.astype("<u4"), self.text[int(starts[0]) : int(ends[-1])].tobytes()
        parts = []
        for lo in range(0, starts.shape[0], chunk):
            _, positions = gather_ranges(starts[lo : lo + chunk], ends[lo : lo + chunk])
            parts.append(self.text[positions].tobytes())
        return lengths.astype("<u4"), b"".join(parts)
