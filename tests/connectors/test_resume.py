"""Restarting a file source at a batch's checkpoint continues exactly after that batch."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.files import EdgeFileSource
from core.errors import InputError
from core.records import UpdateBatch


def rows(batches: list[UpdateBatch]) -> list[tuple[int, str, tuple[object, ...], int]]:
    out = []
    for batch in batches:
        for relation, part in batch.parts.items():
            cols = [c.tolist() for c in part.columns]
            for i, seq in enumerate(part.seq.tolist()):
                out.append((seq, relation, tuple(c[i] for c in cols), int(part.diff[i])))
    return sorted(out)


LINE = st.one_of(
    st.tuples(st.integers(0, 50), st.integers(0, 50)).map(lambda t: f"{t[0]} {t[1]}"),
    st.tuples(
        st.sampled_from(["+", "-"]), st.integers(0, 9), st.text("ab", min_size=1, max_size=3)
    ).map(lambda t: f"{t[0]} {t[1]} x{t[2]} rel"),
    st.just("# a comment"),
    st.just(""),
    st.integers(0, 9).map(lambda v: f"+ flag({v})"),
)


@settings(max_examples=60)
@given(
    lines=st.lists(LINE, min_size=1, max_size=80),
    batch=st.integers(1, 9),
    block=st.integers(8, 64),
    compressed=st.booleans(),
    crlf=st.booleans(),
)
def test_restart_at_every_checkpoint_continues_after_the_batch(
    tmp_path_factory: pytest.TempPathFactory,
    lines: list[str],
    batch: int,
    block: int,
    compressed: bool,
    crlf: bool,
) -> None:
    path = tmp_path_factory.mktemp("resume") / ("in.txt.gz" if compressed else "in.txt")
    text = ("\r\n" if crlf else "\n").join(["\ufeff# header", *lines]) + "\n"
    data = text.encode()
    path.write_bytes(gzip.compress(data) if compressed else data)
    whole = list(EdgeFileSource(str(path), block_size=block).batches(batch))
    expected = rows(whole)
    for k, done in enumerate(whole):
        assert done.resume is not None
        end = done.first_seq + done.count
        again = EdgeFileSource(str(path), block_size=block, start=done.resume, skip_to=end)
        rest = list(again.batches(batch))
        assert [b.first_seq for b in rest] == [b.first_seq for b in whole[k + 1 :]]
        assert rows(rest) == [r for r in expected if r[0] >= end]


def test_restart_past_the_end_of_a_shorter_input_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "in.txt"
    path.write_text("1 2\n" * 100)
    batches = list(EdgeFileSource(str(path), block_size=64).batches(10))
    path.write_text("1 2\n")
    late = batches[-1].resume
    assert late is not None and late.offset > 4
    with pytest.raises(InputError, match="same input"):
        list(EdgeFileSource(str(path), start=late, skip_to=100).batches(10))
    assert np.all([b.resume is not None for b in batches])
