"""Vectorized edge lists: blocks of text lines parsed by numpy, no Python code per line.

A *simple* line is ``src<SP or TAB>dst`` with both ids canonical unsigned decimals of at most
18 digits (so below 10**18 and inside int64): exactly the lines that ``parse_text_line`` turns
into ``(default_relation, (int, int), +1)``. Blocks of such lines are parsed by numpy, with no
Python code per line; everything else goes through ``parse_text_line``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

_DIGITS = b"0123456789"
_TAB_TO_SPACE = bytes.maketrans(b"\t", b" ")
_SIMPLE_MAX_DIGITS = 18
_POWERS_OF_TEN = 10 ** np.arange(1, _SIMPLE_MAX_DIGITS, dtype=np.int64)


def parse_edge_block(block: bytes) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None:
    """The ``(src, dst)`` columns of a block made only of simple lines, else ``None``.

    Called by the file source on every block of a text input before anything slower. ``block``
    is whole lines, each ending with ``\\n`` (no ``\\r``). Costs a few passes over the bytes in C.
    """
    lines = block.count(b"\n")
    if lines == 0 or block[-1:] != b"\n":
        return None
    separators = block.translate(_TAB_TO_SPACE, _DIGITS)
    if len(separators) != 2 * lines:
        return None
    pairs = np.frombuffer(separators, dtype=np.uint8).reshape(lines, 2)
    if not ((pairs[:, 0] == 32).all() and (pairs[:, 1] == 10).all()):
        return None
    values = np.fromstring(block, dtype=np.int64, sep=" ")
    if values.shape[0] != 2 * lines:
        return None
    # The canonical digits of the values, counted up to 18 per value, add up to the digits in
    # the block only if no id has a leading zero or more than 18 digits (which would also be
    # where fromstring saturates on overflow).
    digits = values.shape[0] + sum(int(np.count_nonzero(values >= p)) for p in _POWERS_OF_TEN)
    if digits != len(block) - 2 * lines:
        return None
    return np.ascontiguousarray(values[0::2]), np.ascontiguousarray(values[1::2])


def classify_edge_lines(
    block: bytes,
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp], npt.NDArray[np.bool_]]:
    """Per line of ``block``: its start offset, the offset of its ``\\n``, and whether it is simple.

    Called by the file source on a block that :func:`parse_edge_block` refused (comments, signs,
    relation names, string ids, bad lines), so that its simple lines still take the vectorized
    path. ``block`` is whole lines, each ending with ``\\n``.
    """
    data = np.frombuffer(block, dtype=np.uint8)
    nondigit = np.flatnonzero((data - 48) >= 10)
    kinds = data[nondigit]
    newline_at = np.flatnonzero(kinds == 10)
    ends = nondigit[newline_at]
    starts = np.empty_like(ends)
    if ends.shape[0]:
        starts[0] = 0
        starts[1:] = ends[:-1] + 1
    inside = np.diff(newline_at, prepend=-1) - 1
    separator = np.maximum(newline_at - 1, 0)
    separator_at = nondigit[separator]
    separator_kind = kinds[separator]
    src_digits = separator_at - starts
    dst_digits = ends - separator_at - 1
    last = data.shape[0] - 1
    simple = (
        (inside == 1)
        & ((separator_kind == 32) | (separator_kind == 9))
        & (src_digits >= 1)
        & (src_digits <= _SIMPLE_MAX_DIGITS)
        & (dst_digits >= 1)
        & (dst_digits <= _SIMPLE_MAX_DIGITS)
        & ~((data[np.minimum(starts, last)] == 48) & (src_digits > 1))
        & ~((data[np.minimum(separator_at + 1, last)] == 48) & (dst_digits > 1))
    )
    return starts, ends, simple


def parse_edge_lines(
    block: bytes,
    starts: npt.NDArray[np.intp],
    ends: npt.NDArray[np.intp],
    simple: npt.NDArray[np.bool_],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The ``(src, dst)`` columns of the simple lines of ``block``, in line order.

    Called after :func:`classify_edge_lines`: consecutive simple lines are cut out as runs, joined
    and parsed by numpy in one call, so the Python work is per run, not per line.
    """
    edges = np.diff(simple.astype(np.int8), prepend=np.int8(0), append=np.int8(0))
    run_first = np.flatnonzero(edges == 1)
    run_end = np.flatnonzero(edges == -1)
    begin = starts[run_first].tolist()
    stop = (ends[run_end - 1] + 1).tolist()
    text = b"".join([block[b:s] for b, s in zip(begin, stop, strict=True)])
    values = np.fromstring(text, dtype=np.int64, sep=" ") if text else np.empty(0, np.int64)
    if values.shape[0] != 2 * int(np.count_nonzero(simple)):
        raise AssertionError("classify_edge_lines accepted a line numpy cannot parse as 2 ints")
    return np.ascontiguousarray(values[0::2]), np.ascontiguousarray(values[1::2])
