"""The inputs of the reference benchmark: one graph as the edge files both systems read.

A graph (ego-Facebook from ``../shared/datasets``, or R-MAT from :mod:`bench.rmat`) comes from
:func:`bench.workloads.load_graph`: a simple undirected graph, each edge once as ``(u, v)``
with ``u < v`` (self loops and duplicates dropped), in an order shuffled with a fixed seed.
Oriented low id -> high id like this, the reference's directed ``motif`` counts each
undirected triangle (4-clique) once, and so does our ``triangle`` (``4-clique``) query read
without ``--undirected``.

:func:`prepare` writes it as text, ``src dst`` per line, three times over: the whole graph
(the reference reads one file: its first ``preload`` lines are loaded, the rest streamed), its
first ``preload`` lines (our ``--preload``) and the rest (our ``--edges``). The text is built
with array operations: fixed-width decimal digits per column, leading zeros masked out.
Files are named by a digest of the edge array, so a changed graph or order never reuses a
stale file.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from bench.workloads import GraphSpec, load_graph

I64 = npt.NDArray[np.int64]

ROOT = Path(__file__).resolve().parent.parent
EGO_FACEBOOK = ROOT.parent / "shared" / "datasets" / "ego-facebook.txt.gz"

#: Rows encoded at once: bounds the scratch memory of :func:`edge_lines` (~200 bytes a row).
CHUNK = 1 << 20

_ZERO, _SPACE, _NEWLINE = ord("0"), ord(" "), ord("\n")


@dataclass(frozen=True)
class EdgeFiles:
    """One graph as text: ``whole`` = ``preload`` followed by ``rest``, line for line."""

    name: str
    edges: int
    preloaded: int
    whole: Path
    preload: Path
    rest: Path
    empty: Path

    @property
    def streamed(self) -> int:
        return self.edges - self.preloaded


def edge_lines(pairs: I64) -> bytes:
    """``src dst`` lines (ASCII, ``\\n`` ended) of an ``(n, 2)`` array of non-negative ids."""
    if pairs.shape[0] == 0:
        return b""
    if int(pairs.min()) < 0:
        raise ValueError("vertex ids must be non-negative")
    width = len(str(int(pairs.max())))
    powers = np.int64(10) ** np.arange(width - 1, -1, -1, dtype=np.int64)
    values = pairs[:, :, None]
    chars = np.empty((pairs.shape[0], 2, width + 1), np.uint8)
    chars[:, :, :width] = (values // powers) % 10 + _ZERO
    chars[:, 0, width] = _SPACE
    chars[:, 1, width] = _NEWLINE
    keep = np.ones(chars.shape, np.bool_)
    # A digit is kept from the value's leading one on; the units digit always (the value 0).
    keep[:, :, :width] = (values >= powers) | (powers == 1)
    return chars[keep].tobytes()


def write_edges(pairs: I64, path: Path) -> None:
    """``pairs`` as :func:`edge_lines` into ``path`` (written aside, then renamed)."""
    partial = path.with_name(path.name + ".partial")
    with partial.open("wb") as handle:
        for lo in range(0, int(pairs.shape[0]), CHUNK):
            handle.write(edge_lines(pairs[lo : lo + CHUNK]))
    partial.replace(path)


def graph_spec(name: str) -> GraphSpec:
    """``ego-facebook`` or ``rmat-N`` (``N`` edges, ``k``/``M`` suffixes allowed)."""
    if name == "ego-facebook":
        return GraphSpec(name, path=str(EGO_FACEBOOK))
    if name.startswith("rmat-"):
        count = name.removeprefix("rmat-")
        scale = {"k": 1_000, "M": 1_000_000}.get(count[-1:], 1)
        digits = count[:-1] if scale > 1 else count
        return GraphSpec(name, edges=int(digits) * scale, seed=1)
    raise ValueError(f"unknown graph {name!r}: expected ego-facebook or rmat-N (rmat-2M)")


def prepare(name: str, cache: Path, order_seed: int = 0, preload: float = 0.5) -> EdgeFiles:
    """The edge files of graph ``name`` in ``cache`` (written unless already there)."""
    cache.mkdir(parents=True, exist_ok=True)
    pairs = load_graph(graph_spec(name), cache / "graphs", order_seed)
    digest = hashlib.sha256(np.ascontiguousarray(pairs).tobytes()).hexdigest()[:12]
    m = int(pairs.shape[0])
    cut = int(m * preload)
    stem = f"{name}-{digest}"
    files = EdgeFiles(
        name=name,
        edges=m,
        preloaded=cut,
        whole=cache / f"{stem}.txt",
        preload=cache / f"{stem}.p{cut}.preload.txt",
        rest=cache / f"{stem}.p{cut}.rest.txt",
        empty=cache / "empty.txt",
    )
    for path, part in (
        (files.whole, pairs),
        (files.preload, pairs[:cut]),
        (files.rest, pairs[cut:]),
    ):
        if not path.exists():
            write_edges(part, path)
    files.empty.touch()
    return files
