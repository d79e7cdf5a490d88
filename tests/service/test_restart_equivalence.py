"""State built in one run equals state built across many restarts (in-process property test)."""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from connectors.files import EdgeFileSource
from core.records import Checkpoint, UpdateBatch
from monitor.index.graph import GraphIndex
from monitor.index.store import StateStore
from monitor.query.parser import parse_queries
from monitor.service.epochs import EpochProcessor
from monitor.service.filejob import FileJob, run_file_job
from monitor.service.settings import Settings

QUERIES = parse_queries(
    """
    tri(a, b, c) := e(a, b), e(b, c), e(a, c).
    tagged(a, b) := e(a, b), tag(b), a != b.
    """
)

VERTEX = st.sampled_from(["0", "1", "2", "x"])
LINE = st.one_of(
    st.tuples(st.sampled_from(["+", "+", "-"]), VERTEX, VERTEX).map(" ".join),
    st.tuples(st.sampled_from(["+", "-"]), VERTEX).map(lambda t: f"{t[0]} tag({t[1]})"),
    # Tuples of other lengths than the queries' (bad lines), and of a relation no query reads,
    # whose arity is its first line's: a restarted source reads it from the restored index.
    st.tuples(st.sampled_from(["tag", "e", "seen"]), st.lists(VERTEX, min_size=1, max_size=3)).map(
        lambda t: f"{t[0]}({', '.join(t[1])})"
    ),
)


class StoppingSource(EdgeFileSource):
    """A source that ends after ``limit`` batches, as if the process had stopped there."""

    limit: int | None = None

    def batches(self, max_updates: int) -> Iterator[UpdateBatch]:
        batches = super().batches(max_updates)
        return batches if self.limit is None else itertools.islice(batches, self.limit)


def run_once(stream: Path, state: Path, output: Path, batch: int, limit: int | None) -> None:
    def open_source(path: str, start: Checkpoint | None, skip_to: int) -> EdgeFileSource:
        source = StoppingSource(
            path, start=start, skip_to=skip_to, block_size=32, arities=processor.arities
        )
        source.limit = limit
        return source

    processor = EpochProcessor(
        QUERIES,
        Settings(batch_size=batch, compaction_min=2, snapshot_min_bytes=400, snapshot_ratio=0.5),
    )
    run_file_job(
        processor, FileJob(str(stream), open_source, state_dir=str(state), output=str(output))
    )


def stored(state: Path) -> tuple[list[object], dict[str, set[tuple[object, ...]]]]:
    index = GraphIndex()
    with StateStore.open(state, read_only=True) as store:
        store.load(index)
        meta = store.meta
    assert meta is not None
    vertices = index.dictionary.decode(np.arange(len(index.dictionary))).tolist()
    relations = {
        name: set(
            zip(*[index.dictionary.decode(c).tolist() for c in index.tuples(name)], strict=True)
        )
        for name in index.relations
    }
    return [meta.epoch, meta.position["seq"], meta.output_bytes, vertices], relations


@settings(max_examples=80)
@example(  # a resumed source groups relations in another order: ids must not depend on it
    lines=["+ tag(2)"] * 3
    + ["- tag(0)"] * 2
    + ["+ 2 2", "- 0 0", "- 0 0", "+ tag(0)", "+ 1 0"]
    + ["+ 0 0"],
    batch=2,
    stops=[2],
)
@example(
    lines=["+ 0 1", "+ 1 2", "- 0 1", "+ 0 2", "+ tag(1)", "+ 2 0", "- 1 2", "+ 0 1"] * 3,
    batch=2,
    stops=[1, 1, 2, 1],
)
@example(  # the restart is past seen's first line; its first line after it has 3 ids
    lines=["seen(0, 1)", "+ 0 1", "tag(0, 1)", "+ 1 2", "- 0 1", "seen(2, x, 1)", "seen(1, 2)"],
    batch=2,
    stops=[2],
)
@given(
    lines=st.lists(LINE, min_size=8, max_size=70),
    batch=st.integers(1, 8),
    stops=st.lists(st.integers(0, 4), max_size=8),
)
def test_restarted_runs_build_the_state_and_output_of_one_run(
    lines: list[str], batch: int, stops: list[int]
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        stream = root / "stream.txt"
        stream.write_text("\n".join(lines) + "\n")
        run_once(stream, root / "one", root / "one.jsonl", batch, None)
        for limit in stops:
            run_once(stream, root / "many", root / "many.jsonl", batch, limit)
        run_once(stream, root / "many", root / "many.jsonl", batch, None)
        assert (root / "many.jsonl").read_bytes() == (root / "one.jsonl").read_bytes()
        assert stored(root / "many") == stored(root / "one")
