"""EdgeFileSource: formats, gzip, stdin, dead letters, strict mode, batch boundaries, and the
vectorized path against the per-line path and a line-by-line reference."""

from __future__ import annotations

import gzip
import io
import itertools
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import connectors.files
from connectors.files import EdgeFileSource
from connectors.formats import decode_json_record, decode_text_line, parse_text_line
from core.errors import ConfigError, InputError
from core.records import INT64_MAX, DeadLetter, UpdateBatch

Row = tuple[str, tuple[object, ...], int, int]
"""(relation, ids, diff, seq) of one update."""

SNAP = b"# Directed graph\n# FromNodeId\tToNodeId\n0 1\n0 2\n1 2\n2 0\n"


def write(tmp_path: Path, content: bytes, name: str = "edges.txt") -> str:
    path = tmp_path / name
    if name.endswith(".gz"):
        path.write_bytes(gzip.compress(content))
    else:
        path.write_bytes(content)
    return str(path)


def rows(batches: Iterable[UpdateBatch]) -> list[Row]:
    """Every update of ``batches`` in stream order, ids as Python values."""
    out: list[Row] = []
    for batch in batches:
        for relation, part in batch.parts.items():
            columns = [c.tolist() for c in part.columns]
            for i, (diff, seq) in enumerate(
                zip(part.diff.tolist(), part.seq.tolist(), strict=True)
            ):
                out.append((relation, tuple(c[i] for c in columns), diff, seq))
    return sorted(out, key=lambda r: r[3])


def typed(values: Iterable[Row]) -> list[tuple[object, ...]]:
    """Rows with the type of every id, so that 12 and "12" differ."""
    return [(r, tuple((type(v), v) for v in ids), d, s) for r, ids, d, s in values]


def check_consecutive(batches: list[UpdateBatch], max_updates: int) -> None:
    """Batches follow each other, hold at most max_updates (only the last fewer), and every
    part's seq lies inside its batch, strictly increasing."""
    expected_seq = 0
    for i, batch in enumerate(batches):
        assert batch.first_seq == expected_seq
        assert 0 < batch.count <= max_updates
        if i < len(batches) - 1:
            assert batch.count == max_updates
        assert sum(len(p) for p in batch.parts.values()) == batch.count
        for part in batch.parts.values():
            assert all(len(c) == len(part) for c in part.columns)
            assert np.all(np.diff(part.seq) > 0)
            assert part.seq.min() >= batch.first_seq
            assert part.seq.max() < batch.first_seq + batch.count
        expected_seq += batch.count


def reference(
    path: str, lines: list[bytes], json: bool = False, arities: dict[str, int] | None = None
) -> tuple[list[Row], list[str]]:
    """Decode line by line with the public per-line decoders; dead-letter positions. A
    relation's arity is the one in ``arities``, else its first tuple's."""
    out: list[Row] = []
    dead: list[str] = []
    arity: dict[str, int] = dict(arities or {})
    for number, line in enumerate(lines, start=1):
        position = f"{path}:{number}"
        try:
            if json:
                stripped = line.strip()
                if not stripped or stripped[:1] in (b"#", b"%"):
                    continue
                update = decode_json_record(line, position=position)
            else:
                text_update = decode_text_line(line, position=position)
                if text_update is None:
                    continue
                update = text_update
        except InputError:
            dead.append(position)
            continue
        if arity.setdefault(update.relation, len(update.values)) != len(update.values):
            dead.append(position)
            continue
        out.append((update.relation, update.values, update.diff, len(out)))
    return out, dead


# Text files ------------------------------------------------------------------------------------


def test_snap_file_with_header(tmp_path: Path) -> None:
    path = write(tmp_path, SNAP)
    source = EdgeFileSource(path)
    batches = list(source.batches(100))
    assert len(batches) == 1
    part = batches[0].parts["e"]
    assert part.columns[0].dtype == np.int64 and part.columns[1].dtype == np.int64
    assert part.columns[0].tolist() == [0, 0, 1, 2]
    assert part.columns[1].tolist() == [1, 2, 2, 0]
    assert part.diff.dtype == np.int8 and part.diff.tolist() == [1, 1, 1, 1]
    assert part.seq.tolist() == [0, 1, 2, 3]
    assert (source.lines_read, source.updates_read, source.dead_letters) == (6, 4, 0)
    assert source.bytes_read == source.total_bytes == len(SNAP)
    assert source.format == "text"


def test_simple_lines_do_not_go_through_the_line_decoder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SNAP header is decoded line by line; the edges, even around an odd line, are not."""
    calls: list[bytes] = []

    def counting(line: bytes, default_relation: str) -> object:
        calls.append(line)
        return parse_text_line(line, default_relation)

    monkeypatch.setattr(connectors.files, "parse_text_line", counting)
    edges = b"".join(b"%d %d\n" % (i, i + 1) for i in range(1000))
    path = write(tmp_path, SNAP + edges + b"- 5 6\n" + edges)
    got = rows(EdgeFileSource(path).batches(10_000))
    assert len(got) == 4 + 2000 + 1
    assert sorted(calls) == sorted([b"# Directed graph", b"# FromNodeId\tToNodeId", b"- 5 6"])


def test_every_text_form_in_one_file(tmp_path: Path) -> None:
    content = (
        b"1 2\n"
        b"+ 3 4\n"
        b"- 1 2\n"
        b"alice bob transfer\n"
        b"- x12 12 transfer\n"
        b"+ flagged(7)\n"
        b"-owns(alice, 42, x)\n"
        b"\n"
        b"% comment\n"
        b"5\t6\r\n"
        b"007 -3\n"
    )
    path = write(tmp_path, content)
    got = rows(EdgeFileSource(path).batches(3))
    assert typed(got) == typed(
        [
            ("e", (1, 2), 1, 0),
            ("e", (3, 4), 1, 1),
            ("e", (1, 2), -1, 2),
            ("transfer", ("alice", "bob"), 1, 3),
            ("transfer", ("x12", 12), -1, 4),
            ("flagged", (7,), 1, 5),
            ("owns", ("alice", 42, "x"), -1, 6),
            ("e", (5, 6), 1, 7),
            ("e", ("007", -3), 1, 8),
        ]
    )


def test_string_and_int_ids_share_a_relation(tmp_path: Path) -> None:
    path = write(tmp_path, b"1 2\nx 3\n4 5\n")
    (batch,) = EdgeFileSource(path).batches(10)
    part = batch.parts["e"]
    assert part.columns[0].dtype == object
    assert part.columns[0].tolist() == [1, "x", 4]
    assert part.columns[1].dtype == np.int64
    assert part.seq.tolist() == [0, 1, 2]


def test_default_relation(tmp_path: Path) -> None:
    path = write(tmp_path, b"1 2\n+ 3 4 other\n")
    (batch,) = EdgeFileSource(path, default_relation="follows").batches(10)
    assert sorted(batch.parts) == ["follows", "other"]


def test_last_line_without_newline_and_crlf(tmp_path: Path) -> None:
    path = write(tmp_path, b"1 2\r\n3 4\r\n5 6")
    source = EdgeFileSource(path)
    assert [r[1] for r in rows(source.batches(10))] == [(1, 2), (3, 4), (5, 6)]
    assert source.lines_read == 3


def test_byte_order_mark_is_dropped(tmp_path: Path) -> None:
    path = write(tmp_path, b"\xef\xbb\xbf1 2\n3 4\n")
    assert [r[1] for r in rows(EdgeFileSource(path, block_size=1).batches(10))] == [(1, 2), (3, 4)]


def test_long_lines_across_small_blocks(tmp_path: Path) -> None:
    ids = ["v" * 50 + str(i) for i in range(20)]
    content = "".join(f"{a} {b}\n" for a, b in itertools.pairwise(ids)).encode()
    path = write(tmp_path, content)
    got = rows(EdgeFileSource(path, block_size=7).batches(4))
    assert [r[1] for r in got] == list(itertools.pairwise(ids))


def test_empty_and_comment_only_files(tmp_path: Path) -> None:
    for content in (b"", b"# only\n# comments\n", b"\n\n"):
        source = EdgeFileSource(write(tmp_path, content))
        assert list(source.batches(10)) == []
        assert source.updates_read == 0
        assert source.lines_read == content.count(b"\n")


# Dead letters and strict mode ------------------------------------------------------------------

BAD = b"1 2\n1 2 3 4\n3 4\nr(1, 2)\nr(1, 2, 3)\n+\n5 6\n"


def test_dead_letters_are_reported_counted_and_skipped(tmp_path: Path) -> None:
    path = write(tmp_path, BAD)
    letters: list[DeadLetter] = []
    source = EdgeFileSource(path, on_dead_letter=letters.append)
    got = rows(source.batches(2))
    assert [(r[0], r[1], r[3]) for r in got] == [
        ("e", (1, 2), 0),
        ("e", (3, 4), 1),
        ("r", (1, 2), 2),
        ("e", (5, 6), 3),
    ]
    assert source.dead_letters == 3
    assert [d.position for d in letters] == [f"{path}:2", f"{path}:5", f"{path}:6"]
    assert [d.raw for d in letters] == [b"1 2 3 4", b"r(1, 2, 3)", b"+"]
    assert "got 4 fields" in letters[0].reason
    assert letters[1].reason == f"relation 'r' has 2 ids per tuple (since {path}:4), got 3"
    assert "a sign alone" in letters[2].reason
    assert (source.lines_read, source.updates_read) == (7, 4)


def test_dead_letters_without_a_callback_are_still_counted(tmp_path: Path) -> None:
    source = EdgeFileSource(write(tmp_path, BAD))
    assert len(rows(source.batches(100))) == 4
    assert source.dead_letters == 3


def test_strict_mode_raises_after_yielding_the_updates_before(tmp_path: Path) -> None:
    path = write(tmp_path, BAD)
    source = EdgeFileSource(path, strict=True)
    seen: list[UpdateBatch] = []
    with pytest.raises(InputError) as caught:
        for batch in source.batches(100):
            seen.append(batch)
    assert caught.value.position == f"{path}:2"
    assert str(caught.value).startswith(f"{path}:2: expected 2 ids")
    assert [r[1] for r in rows(seen)] == [(1, 2)]
    assert (source.dead_letters, source.lines_read, source.updates_read) == (0, 2, 1)


def test_strict_mode_error_inside_a_fast_block(tmp_path: Path) -> None:
    edges = b"".join(b"%d %d\n" % (i, i) for i in range(500))
    path = write(tmp_path, edges + b"1 x y z\n" + edges)
    seen: list[UpdateBatch] = []
    with pytest.raises(InputError) as caught:
        for batch in EdgeFileSource(path, strict=True).batches(64):
            seen.append(batch)
    assert caught.value.position == f"{path}:501"
    check_consecutive(seen, 64)
    assert len(rows(seen)) == 500


def test_json_dead_letters_have_line_positions(tmp_path: Path) -> None:
    content = b'{"src": 1, "dst": 2}\n{"op": "upsert", "src": 1, "dst": 2}\n{"src": 3, "dst": 4}\n'
    letters: list[DeadLetter] = []
    source = EdgeFileSource(write(tmp_path, content, "u.jsonl"), on_dead_letter=letters.append)
    assert [r[1] for r in rows(source.batches(10))] == [(1, 2), (3, 4)]
    assert [(d.position.rsplit(":", 1)[1], d.reason) for d in letters] == [
        ("2", "op must be 'insert' or 'delete', got 'upsert'")
    ]


# Arities known before reading (the queries', the index's) -------------------------------------

ODD_FIRST = b"e(1, 2, 3)\nflagged(4, 5)\n1 2\n+ flagged(4)\n2 3\n- 1 2\n"
ODD_FIRST_JSON = b"\n".join(
    orjson.dumps(r)
    for r in [
        {"relation": "e", "tuple": [1, 2, 3]},
        {"relation": "flagged", "tuple": [4, 5]},
        {"src": 1, "dst": 2},
        {"relation": "flagged", "tuple": [4]},
        {"relation": "e", "tuple": [2, 3]},
        {"op": "delete", "src": 1, "dst": 2},
    ]
)


@pytest.mark.parametrize("content", [ODD_FIRST, ODD_FIRST_JSON], ids=["text", "json"])
@pytest.mark.parametrize("fast_path", [True, False])
@pytest.mark.parametrize("block_size", [1, 16, 1 << 20])
def test_a_known_arity_wins_over_an_odd_first_line(
    tmp_path: Path, content: bytes, fast_path: bool, block_size: int
) -> None:
    """The odd first lines are the bad ones; the lines after them are read as without them."""
    path = write(tmp_path, content)
    known = {"e": 2, "flagged": 1}
    letters: list[DeadLetter] = []
    source = EdgeFileSource(
        path,
        arities=known,
        fast_path=fast_path,
        block_size=block_size,
        on_dead_letter=letters.append,
    )
    assert rows(source.batches(2)) == [
        ("e", (1, 2), 1, 0),
        ("flagged", (4,), 1, 1),
        ("e", (2, 3), 1, 2),
        ("e", (1, 2), -1, 3),
    ]
    assert [(d.position, d.reason) for d in letters] == [
        (f"{path}:1", "relation 'e' has 2 ids per tuple, got 3"),
        (f"{path}:2", "relation 'flagged' has 1 id per tuple, got 2"),
    ]
    assert (source.dead_letters, source.lines_read, source.updates_read) == (2, 6, 4)
    assert known == {"e": 2, "flagged": 1}


def test_without_known_arities_the_first_line_decides(tmp_path: Path) -> None:
    path = write(tmp_path, ODD_FIRST)
    letters: list[DeadLetter] = []
    got = rows(EdgeFileSource(path, on_dead_letter=letters.append).batches(10))
    assert got == [("e", (1, 2, 3), 1, 0), ("flagged", (4, 5), 1, 1)]
    assert [d.reason for d in letters] == [
        f"relation 'e' has 3 ids per tuple (since {path}:1), got 2",
        f"relation 'flagged' has 2 ids per tuple (since {path}:2), got 1",
        f"relation 'e' has 3 ids per tuple (since {path}:1), got 2",
        f"relation 'e' has 3 ids per tuple (since {path}:1), got 2",
    ]


def test_strict_mode_stops_at_an_odd_first_line(tmp_path: Path) -> None:
    path = write(tmp_path, ODD_FIRST)
    with pytest.raises(InputError) as caught:
        list(EdgeFileSource(path, strict=True, arities={"e": 2}).batches(10))
    assert str(caught.value) == f"{path}:1: relation 'e' has 2 ids per tuple, got 3"


@pytest.mark.parametrize("fast_path", [True, False])
@pytest.mark.parametrize("content", [b"1 2\n3 4\n", b"1 2\ne(5, 6, 7)\n3 4\n# c\n"])
def test_src_dst_lines_of_a_default_relation_known_with_three_ids(
    tmp_path: Path, fast_path: bool, content: bytes
) -> None:
    """No ``src dst`` line takes the vectorized path into a relation of another arity."""
    path = write(tmp_path, content)
    letters: list[DeadLetter] = []
    source = EdgeFileSource(
        path, arities={"e": 3}, fast_path=fast_path, on_dead_letter=letters.append
    )
    got = rows(source.batches(10))
    assert got == ([("e", (5, 6, 7), 1, 0)] if b"e(" in content else [])
    assert [d.reason for d in letters] == ["relation 'e' has 3 ids per tuple, got 2"] * 2
    assert [d.raw for d in letters] == [b"1 2", b"3 4"]


def test_a_relation_not_known_still_learns_its_first_line(tmp_path: Path) -> None:
    path = write(tmp_path, BAD)
    letters: list[DeadLetter] = []
    source = EdgeFileSource(path, arities={"e": 2}, on_dead_letter=letters.append)
    assert [(r[0], r[1]) for r in rows(source.batches(10))] == [
        ("e", (1, 2)),
        ("e", (3, 4)),
        ("r", (1, 2)),
        ("e", (5, 6)),
    ]
    assert letters[1].reason == f"relation 'r' has 2 ids per tuple (since {path}:4), got 3"


# JSON files and format detection ---------------------------------------------------------------

JSONL = b"\n".join(
    orjson.dumps(r)
    for r in [
        {"src": 1, "dst": 2},
        {"op": "delete", "src": "1", "dst": 2, "relation": "t"},
        {"op": "insert", "relation": "owns", "tuple": ["alice", 42, "x"]},
        {"relation": "flagged", "tuple": [INT64_MAX]},
    ]
)


def test_json_lines_file_is_detected(tmp_path: Path) -> None:
    path = write(tmp_path, b"# header\n\n" + JSONL + b"\n")
    source = EdgeFileSource(path)
    got = rows(source.batches(10))
    assert source.format == "json"
    assert typed(got) == typed(
        [
            ("e", (1, 2), 1, 0),
            ("t", ("1", 2), -1, 1),
            ("owns", ("alice", 42, "x"), 1, 2),
            ("flagged", (INT64_MAX,), 1, 3),
        ]
    )


def test_detection_looks_past_a_block_of_comments(tmp_path: Path) -> None:
    path = write(tmp_path, b"# c\n" * 50 + JSONL)
    source = EdgeFileSource(path, block_size=16)
    assert len(rows(source.batches(10))) == 4
    assert source.format == "json"
    assert source.lines_read == 54


def test_explicit_format_wins(tmp_path: Path) -> None:
    text = EdgeFileSource(write(tmp_path, JSONL, "a.jsonl"), format="text")
    assert rows(text.batches(10)) == []
    assert text.dead_letters == 4
    json = EdgeFileSource(write(tmp_path, b"1 2\n", "b.txt"), format="json")
    assert rows(json.batches(10)) == []
    assert json.dead_letters == 1


# Gzip and stdin --------------------------------------------------------------------------------


def test_gzip_is_read_transparently(tmp_path: Path) -> None:
    content = SNAP + b"".join(b"%d %d\n" % (i, i * 7) for i in range(5000)) + b"+ a b t\n"
    plain = EdgeFileSource(write(tmp_path, content, "e.txt"))
    packed = EdgeFileSource(write(tmp_path, content, "e.txt.gz"), block_size=4096)
    assert typed(rows(packed.batches(999))) == typed(rows(plain.batches(999)))
    assert packed.total_bytes == (tmp_path / "e.txt.gz").stat().st_size
    assert packed.bytes_read == packed.total_bytes < len(content)
    assert packed.lines_read == plain.lines_read


def test_gzip_is_recognized_by_its_magic_bytes(tmp_path: Path) -> None:
    path = tmp_path / "edges.bin"
    path.write_bytes(gzip.compress(b"1 2\n"))
    assert [r[1] for r in rows(EdgeFileSource(str(path)).batches(10))] == [(1, 2)]


def test_truncated_gzip_is_an_input_error(tmp_path: Path) -> None:
    path = tmp_path / "broken.txt.gz"
    path.write_bytes(gzip.compress(b"1 2\n" * 10_000)[:-40])
    with pytest.raises(InputError, match="compressed input is corrupt or truncated") as caught:
        list(EdgeFileSource(str(path)).batches(10))
    assert caught.value.position == str(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read input: No such file") as caught:
        EdgeFileSource(str(tmp_path / "nope.txt"))
    assert caught.value.position == str(tmp_path / "nope.txt")


@pytest.mark.parametrize("compress", [False, True])
def test_stdin(monkeypatch: pytest.MonkeyPatch, compress: bool) -> None:
    content = b"1 2\nbad line here x\n3 4\n"
    data = gzip.compress(content) if compress else content
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    letters: list[DeadLetter] = []
    source = EdgeFileSource("-", on_dead_letter=letters.append)
    assert source.total_bytes is None
    assert [r[1] for r in rows(source.batches(10))] == [(1, 2), (3, 4)]
    assert [d.position for d in letters] == ["<stdin>:2"]
    assert source.bytes_read == len(data)


def test_stdin_through_a_real_pipe() -> None:
    program = (
        "from connectors.files import EdgeFileSource\n"
        "s = EdgeFileSource('-')\n"
        "n = sum(b.count for b in s.batches(1000))\n"
        "print(n, s.lines_read, s.dead_letters, s.bytes_read)\n"
    )
    content = SNAP + b"".join(b"%d %d\n" % (i, i) for i in range(10_000))
    for data in (content, gzip.compress(content)):
        done = subprocess.run(
            [sys.executable, "-c", program], input=data, capture_output=True, check=True
        )
        assert done.stdout.split() == [b"10004", b"10006", b"0", str(len(data)).encode()]


# Configuration errors --------------------------------------------------------------------------


def test_configuration_errors(tmp_path: Path) -> None:
    path = write(tmp_path, b"1 2\n")
    with pytest.raises(ConfigError, match="format must be one of auto, text, json; got 'csv'"):
        EdgeFileSource(path, format="csv")
    with pytest.raises(ConfigError, match="default relation name '9' is not allowed"):
        EdgeFileSource(path, default_relation="9")
    with pytest.raises(ConfigError, match="max_updates must be at least 1; got 0"):
        EdgeFileSource(path).batches(0)


# Batch boundaries and the fast path against the slow path --------------------------------------


@pytest.mark.parametrize("max_updates", [1, 2, 3, 7, 64, 1000, 10**6])
def test_batch_boundaries_neither_lose_nor_duplicate(tmp_path: Path, max_updates: int) -> None:
    content = (
        SNAP
        + b"".join(b"%d %d\n" % (i, i + 1) for i in range(300))
        + b"+ a b t\n# c\n- 1 2\n"
        + b"".join(b"%d %d\n" % (i, i + 2) for i in range(300))
        + b"r(1)\n"
    )
    path = write(tmp_path, content)
    expected, _ = reference(path, content.split(b"\n"))
    for block_size in (64, 1 << 20):
        batches = list(EdgeFileSource(path, block_size=block_size).batches(max_updates))
        check_consecutive(batches, max_updates)
        assert typed(rows(batches)) == typed(expected)


def test_records_split_and_concat_work_on_source_batches(tmp_path: Path) -> None:
    content = b"".join(b"%d %d\n" % (i, i) for i in range(100)) + b"+ x y t\n" + b"5 5\n" * 50
    path = write(tmp_path, content)
    batches = list(EdgeFileSource(path, block_size=128).batches(17))
    whole = UpdateBatch.concat(batches)
    assert (whole.first_seq, whole.count) == (0, 151)
    head, tail = whole.split(100)
    assert rows([head]) == rows(batches)[:100]
    assert rows([tail]) == rows(batches)[100:]
    again = UpdateBatch.concat([*batches[:3], UpdateBatch.concat(batches[3:])])
    assert rows([again]) == rows([whole])


def test_ego_facebook_fast_and_slow_paths_agree(datasets: Path) -> None:
    path = str(datasets / "ego-facebook.txt.gz")
    fast = EdgeFileSource(path)
    fast_batches = list(fast.batches(50_000))
    check_consecutive(fast_batches, 50_000)
    assert (fast.lines_read, fast.updates_read, fast.dead_letters) == (176_470, 176_468, 0)
    assert fast.bytes_read == fast.total_bytes
    first = fast_batches[0].parts["e"]
    assert first.columns[0][:3].tolist() == [1, 2, 3] and first.columns[1][:3].tolist() == [0, 0, 0]
    slow = EdgeFileSource(path, fast_path=False)
    slow_batches = list(slow.batches(50_000))
    assert len(slow_batches) == len(fast_batches)
    for a, b in zip(fast_batches, slow_batches, strict=True):
        assert (a.first_seq, a.count, sorted(a.parts)) == (b.first_seq, b.count, sorted(b.parts))
        for relation, part in a.parts.items():
            other = b.parts[relation]
            for x, y in zip(part.columns, other.columns, strict=True):
                assert x.dtype == y.dtype and np.array_equal(x, y)
            assert np.array_equal(part.diff, other.diff) and np.array_equal(part.seq, other.seq)


small_ints = st.integers(0, 50).map(str)
ids = st.one_of(
    small_ints,
    small_ints,
    st.integers(0, 10**18 - 1).map(str),
    st.sampled_from(["007", "-3", "x", "x12", str(INT64_MAX), str(INT64_MAX + 1), "1" * 19]),
)
text_lines = st.one_of(
    st.tuples(small_ints, small_ints).map(" ".join),
    st.tuples(small_ints, small_ints).map(" ".join),
    st.tuples(ids, ids).map(" ".join),
    st.tuples(ids, ids).map("\t".join),
    st.tuples(st.sampled_from(["+", "-"]), ids, ids).map(" ".join),
    st.tuples(ids, ids, st.sampled_from(["e", "t", "r"])).map(" ".join),
    st.tuples(st.sampled_from(["+ ", "- ", "", "-"]), st.sampled_from(["r", "e", "f"]), ids).map(
        lambda t: f"{t[0]}{t[1]}({t[2]})"
    ),
    st.tuples(st.sampled_from(["e", "q"]), ids, ids, ids).map(
        lambda t: f"{t[0]}({t[1]}, {t[2]}, {t[3]})"
    ),
    st.sampled_from(
        ["", "  ", "# comment", "% mm", "1", "1 2 3 4", "+", "1 2 9x", "e(", "1  2", " 3 4"]
    ),
)


def read_checked(
    path: Path,
    expected: list[Row],
    expected_dead: list[str],
    max_updates: int,
    known: dict[str, int],
    **options: Any,
) -> tuple[EdgeFileSource, list[UpdateBatch]]:
    """Read ``path`` with ``options`` and the ``known`` arities: consecutive batches holding
    the reference's updates, and its dead letters at their positions."""
    letters: list[DeadLetter] = []
    source = EdgeFileSource(path, on_dead_letter=letters.append, arities=known, **options)
    batches = list(source.batches(max_updates))
    check_consecutive(batches, max_updates)
    assert typed(rows(batches)) == typed(expected)
    assert [d.position for d in letters] == expected_dead
    return source, batches


#: Arities known before reading: the relations of ``text_lines`` and ``json_lines``, and one
#: neither has.
KNOWN = st.dictionaries(st.sampled_from(["e", "t", "r", "f", "q", "z"]), st.integers(1, 3))


@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lines=st.lists(text_lines, max_size=60),
    crlf=st.booleans(),
    final_newline=st.booleans(),
    block_size=st.sampled_from([1, 5, 16, 64, 1 << 20]),
    max_updates=st.sampled_from([1, 3, 10, 1000]),
    known=KNOWN,
)
def test_fast_path_equals_slow_path_equals_reference(
    tmp_path: Path,
    lines: list[str],
    crlf: bool,
    final_newline: bool,
    block_size: int,
    max_updates: int,
    known: dict[str, int],
) -> None:
    newline = "\r\n" if crlf else "\n"
    content = (newline.join(lines) + (newline if final_newline and lines else "")).encode()
    path = write(tmp_path, content, "mixed.txt")
    expected, expected_dead = reference(path, [line.encode() for line in lines], arities=known)
    outcomes = []
    for fast_path in (True, False):
        source, batches = read_checked(
            path,
            expected,
            expected_dead,
            max_updates,
            known,
            fast_path=fast_path,
            block_size=block_size,
        )
        assert source.dead_letters == len(expected_dead)
        assert source.updates_read == len(expected)
        assert source.lines_read == len(lines) - (
            1 if lines and lines[-1] == "" and not final_newline else 0
        )
        outcomes.append(batches)
    for a, b in zip(*outcomes, strict=True):
        assert (a.first_seq, a.count) == (b.first_seq, b.count)
        assert typed(rows([a])) == typed(rows([b]))


json_relations = st.sampled_from(["e", "r", "f"])
json_ops = st.sampled_from(["insert", "delete"])
json_lines = st.one_of(
    st.fixed_dictionaries(
        {"src": st.integers(0, 9), "dst": st.integers(0, 9)},
        optional={"relation": json_relations, "op": json_ops},
    ).map(orjson.dumps),
    st.fixed_dictionaries(
        {"tuple": st.lists(st.integers(0, 9) | st.sampled_from(["a", "b"]), max_size=3)},
        optional={"relation": json_relations, "op": json_ops},
    ).map(orjson.dumps),
    st.sampled_from([b"", b"# comment", b"{", b"[1, 2]", b'{"src": 1}']),
)


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lines=st.lists(json_lines, max_size=40),
    block_size=st.sampled_from([1, 16, 1 << 20]),
    max_updates=st.sampled_from([1, 3, 1000]),
    known=KNOWN,
)
def test_json_lines_equal_the_reference(
    tmp_path: Path, lines: list[bytes], block_size: int, max_updates: int, known: dict[str, int]
) -> None:
    path = write(tmp_path, b"\n".join(lines) + b"\n", "mixed.jsonl")
    expected, expected_dead = reference(path, lines, json=True, arities=known)
    given_arities = dict(known)
    read_checked(
        path, expected, expected_dead, max_updates, known, format="json", block_size=block_size
    )
    assert known == given_arities
