"""R-MAT power-law graphs (Chakrabarti, Zhan, Faloutsos, "R-MAT: A Recursive Model for Graph
Mining", SDM 2004), generated with whole-array numpy operations.

An edge picks one quadrant of the adjacency matrix per level of recursion, with probabilities
``a, b, c, d`` (top-left, top-right, bottom-left, bottom-right); after ``scale`` levels it names
one cell of the ``2**scale x 2**scale`` matrix. Each level is one vectorized draw for a whole
chunk of edges, so there is no Python loop per edge. As in Graph500, vertex ids are then permuted
at random so that the hubs are not all at small ids.

The graphs here are undirected simple graphs: every edge is canonical ``(min, max)``, self loops
are dropped and duplicates merged. :func:`rmat_edges` draws chunks until the requested number of
distinct edges is reached, then keeps exactly that many, in random order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]

#: Edges drawn per vectorized chunk: bounds the generator's scratch memory (~60 bytes per edge).
CHUNK = 1 << 22

#: Graph500's edge factor: edges per vertex when only the number of edges is given.
EDGE_FACTOR = 16


@dataclass(frozen=True)
class RmatParams:
    """Quadrant probabilities; ``d`` is what is left of 1."""

    a: float = 0.57
    b: float = 0.19
    c: float = 0.19

    @property
    def d(self) -> float:
        return 1.0 - self.a - self.b - self.c


def scale_for(edges: int, edge_factor: int = EDGE_FACTOR) -> int:
    """log2 of the number of vertices for ``edges`` edges at ``edge_factor`` edges per vertex."""
    return max(1, math.ceil(math.log2(max(2, edges / edge_factor))))


def rmat_pairs(n: int, scale: int, rng: np.random.Generator, params: RmatParams) -> I64:
    """``n`` raw R-MAT cells as an ``(n, 2)`` array of ``(row, column)`` ids below ``2**scale``."""
    src = np.zeros(n, np.int64)
    dst = np.zeros(n, np.int64)
    ab = params.a + params.b
    a_of_ab = params.a / ab
    c_of_cd = params.c / (1.0 - ab)
    for level in range(scale):
        bit = np.int64(1) << np.int64(level)
        lower = rng.random(n, dtype=np.float32) >= ab
        right_p = np.where(lower, np.float32(1.0 - c_of_cd), np.float32(1.0 - a_of_ab))
        right = rng.random(n, dtype=np.float32) < right_p
        src |= lower.astype(np.int64) * bit
        dst |= right.astype(np.int64) * bit
    return np.stack([src, dst], axis=1)


def canonical_keys(src: I64, dst: I64) -> I64:
    """Undirected edges packed as ``min << 32 | max``, self loops dropped (not deduplicated)."""
    keep = src != dst
    lo: I64 = np.minimum(src[keep], dst[keep])
    hi: I64 = np.maximum(src[keep], dst[keep])
    keys: I64 = (lo << np.int64(32)) | hi
    return keys


def rmat_edges(
    edges: int,
    *,
    scale: int | None = None,
    seed: int = 0,
    params: RmatParams | None = None,
) -> I64:
    """Exactly ``edges`` distinct undirected R-MAT edges as an ``(edges, 2)`` int64 array.

    Rows are ``(u, v)`` with ``u < v``, in random order; vertex ids are below ``2**scale``
    (default :func:`scale_for`). Raises ``ValueError`` if the matrix cannot hold that many edges.
    Deterministic for a given ``(edges, scale, seed, params)``.
    """
    params = params or RmatParams()
    scale = scale_for(edges) if scale is None else scale
    if scale > 31:
        raise ValueError(f"scale {scale} is too large; vertex ids must stay below 2**31")
    vertices = 1 << scale
    if edges > vertices * (vertices - 1) // 2:
        raise ValueError(f"{edges} edges do not fit in a simple graph of {vertices} vertices")
    rng = np.random.default_rng(seed)
    permutation = rng.permutation(vertices).astype(np.int64)
    unique = np.empty(0, np.int64)
    draw = edges
    while unique.shape[0] < edges:
        pieces = [unique]
        for start in range(0, draw, CHUNK):
            cells = rmat_pairs(min(CHUNK, draw - start), scale, rng, params)
            pieces.append(canonical_keys(permutation[cells[:, 0]], permutation[cells[:, 1]]))
        grown = np.unique(np.concatenate(pieces))
        gained = grown.shape[0] - unique.shape[0]
        unique = grown
        missing = edges - unique.shape[0]
        if missing > 0:
            if gained <= 0:
                raise ValueError(f"R-MAT at scale {scale} saturated below {edges} distinct edges")
            # Draw enough for the missing edges at the yield of the last round, plus a margin.
            draw = int(missing * max(1.0, draw / gained) * 1.1) + 1024
    chosen = unique[rng.permutation(unique.shape[0])[:edges]]
    pairs: I64 = np.stack([chosen >> np.int64(32), chosen & np.int64(0xFFFFFFFF)], axis=1)
    return pairs


def degree_summary(pairs: I64) -> dict[str, float]:
    """Vertices, edges, mean and maximum degree of an undirected edge array (for reports)."""
    degrees = np.bincount(pairs.reshape(-1))
    degrees = degrees[degrees > 0]
    return {
        "vertices": float(degrees.shape[0]),
        "edges": float(pairs.shape[0]),
        "mean_degree": float(degrees.mean()) if degrees.shape[0] else 0.0,
        "max_degree": float(degrees.max()) if degrees.shape[0] else 0.0,
    }
