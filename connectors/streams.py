"""Reading an input stream in blocks of whole lines: files, gzip and stdin, from an offset.

The file source (:mod:`connectors.files`) decodes what these read: :class:`Input` opens a path
(``-`` for stdin) at a byte offset of the decompressed stream, recognizing gzip by its magic
bytes and counting the bytes taken from the file; :func:`blocks` cuts the stream into blocks that
end at line ends; :func:`detect_format` tells JSON Lines from text by the first line that is
not a comment.
"""

from __future__ import annotations

import gzip
import io
import os
import sys
import zlib
from collections.abc import Iterator
from typing import IO, Literal, Protocol

from connectors.formats import is_comment
from core.errors import InputError

Format = Literal["auto", "text", "json"]
FORMATS: tuple[Format, ...] = ("auto", "text", "json")
#: Bytes read at a time.
BLOCK_SIZE = 8 << 20
_GZIP_MAGIC = b"\x1f\x8b"
_UTF8_BOM = b"\xef\xbb\xbf"


class CountingReader:
    """A binary stream that counts the bytes read through it (for ``bytes_read``)."""

    mode = "rb"

    def __init__(self, inner: IO[bytes]) -> None:
        self._inner = inner
        self.count = 0

    def read(self, size: int = -1) -> bytes:
        data = self._inner.read(size)
        self.count += len(data)
        return data

    def seek(self, offset: int, whence: int = 0, /) -> int:
        raise io.UnsupportedOperation("the input is read once, front to back")


class Input:
    """The opened input: the raw stream's byte counter and the (decompressed) stream."""

    def __init__(self, path: str, offset: int = 0) -> None:
        self._path = path
        self._offset = offset
        self._file: IO[bytes] | None = None
        self._gzip: gzip.GzipFile | None = None

    def __enter__(self) -> tuple[CountingReader, ByteStream]:
        if self._path == "-":
            raw: IO[bytes] = sys.stdin.buffer
        else:
            try:
                raw = self._file = open(self._path, "rb")
            except OSError as error:
                raise InputError(
                    f"cannot read input: {error.strerror}", position=self._path
                ) from None
        counter = CountingReader(raw)
        if starts_with_gzip_magic(raw):
            self._gzip = gzip.GzipFile(fileobj=counter, mode="rb")
            stream: ByteStream = GzipStream(self._gzip, self._path)
            discard(stream, self._offset)
            return counter, stream
        if self._offset and raw.seekable():
            size = os.fstat(raw.fileno()).st_size
            if self._offset > size:
                raise InputError(
                    f"the input ends before the restart position ({self._offset - size} bytes "
                    "short); is it the same input as before?",
                    position=self._path,
                )
            raw.seek(self._offset)
            counter.count = self._offset
        else:
            discard(counter, self._offset)
        return counter, counter

    def __exit__(self, *exc: object) -> None:
        if self._gzip is not None:
            self._gzip.close()
        if self._file is not None:
            self._file.close()


class GzipStream:
    """A gzip stream whose corruption errors become :class:`InputError` s."""

    def __init__(self, inner: gzip.GzipFile, path: str) -> None:
        self._inner = inner
        self._path = path

    def read(self, size: int = -1) -> bytes:
        try:
            return self._inner.read(size)
        except (OSError, EOFError, zlib.error) as error:
            raise InputError(
                f"compressed input is corrupt or truncated ({error}); recompress or re-fetch it",
                position=self._path,
            ) from None


def discard(stream: ByteStream, n: int) -> None:
    """Read and drop ``n`` bytes (restarting inside a stream that cannot seek)."""
    while n > 0:
        data = stream.read(min(n, BLOCK_SIZE))
        if not data:
            raise InputError(
                f"the input ends before the restart position ({n} bytes short); is it the "
                "same input as before?"
            )
        n -= len(data)


def starts_with_gzip_magic(raw: IO[bytes]) -> bool:
    peek = getattr(raw, "peek", None)
    if peek is not None:
        return bytes(peek(2)[:2]) == _GZIP_MAGIC
    if raw.seekable():
        start = raw.tell()
        magic = raw.read(2)
        raw.seek(start)
        return magic == _GZIP_MAGIC
    return False


class ByteStream(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


def split_lines(block: bytes) -> list[bytes]:
    """The lines of a block of whole lines, without their terminators."""
    lines = block.split(b"\n")
    lines.pop()
    return lines


def blocks(
    stream: ByteStream, block_size: int, at_start: bool = True
) -> Iterator[tuple[bytes, int]]:
    """Whole lines, about ``block_size`` bytes at a time, each block ending with ``\\n``, with
    the number of stream bytes each block stands for.

    A UTF-8 byte order mark at the start of the stream is dropped (and counted in the first
    block's length, so that offsets stay those of the stream).
    """
    data = stream.read(block_size)
    while 0 < len(data) < len(_UTF8_BOM):
        more = stream.read(block_size)
        if not more:
            break
        data += more
    chunk = data.removeprefix(_UTF8_BOM) if at_start else data
    extra = len(data) - len(chunk)
    carry: list[bytes] = []
    while data:
        cut = chunk.rfind(b"\n")
        if cut < 0:
            carry.append(chunk)
        else:
            carry.append(chunk[: cut + 1])
            block = b"".join(carry)
            yield block, len(block) + extra
            extra = 0
            carry = [chunk[cut + 1 :]]
        data = chunk = stream.read(block_size)
    tail = b"".join(carry)
    if tail:
        yield tail + b"\n", len(tail) + extra


def comment_prefix(block: bytes) -> int:
    """How many bytes of blank and comment lines ``block`` starts with."""
    start = 0
    while start < len(block) and block[start] in b"#%\n \t":
        end = block.find(b"\n", start) + 1
        if not is_comment(block[start:end]):
            break
        start = end
    return start


def detect_format(block: bytes) -> Format | None:
    """``"json"`` if the first line that is not blank or a comment starts with ``{``."""
    start = 0
    while start < len(block):
        end = block.find(b"\n", start)
        line = block[start:end]
        if not is_comment(line):
            return "json" if line.lstrip().startswith(b"{") else "text"
        start = end + 1
    return None
