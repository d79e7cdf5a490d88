"""Delta queries that begin alike, run once up to where they part: a trie of plans.

A path of 2 to 6 hops is five queries, one per length (:mod:`monitor.query.paths`), and the delta
queries their last hops seed begin with the same stages: each ranges back over the hops before
its seed, under the same filters, until the hop that closes its ring. Run one by one, the
lengths 5 and 6 of ``bench.typologies``' ``round_trip`` both extend the same 13M prefixes
through their first four stages (of 250M extended in all, on 800k events).

:class:`PlanTrie` puts the delta queries of every query in a trie keyed by what the engine runs:
the seed (its relation, columns and sign of changes, its checks, filters and guards) and then
each stage (its extenders' relations, keys and cuts, its checks and filters), not the atom
numbers or the variable names, which only print. A
:class:`~monitor.engine.pipeline.Pipeline` runs each root's trie as it runs one plan's chain:
it extends each node's prefixes once and hands every plan the bindings of the node its stages
end at, so each plan gets what it would alone, and the stages two plans share run once.

A plan's alternatives (:mod:`monitor.plan.alternatives`) part from it at a node: the node's
child for the plan's stage has the alternative's stage as its other, and the pipeline sends each
prefix down one of the two. That holds only where every plan through the child has the same
alternative there (else a plan through it alone would lose the prefixes sent away): the trie
keeps an alternative only so (:func:`_add_alternatives`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any, TypeVar

from monitor.engine.pipeline import Node
from monitor.plan.plan import Check, DeltaQuery, Extender, Stage

P = TypeVar("P", Extender, Check)


class PlanTrie:
    """The delta queries of queries, by seed, as a trie of their stages."""

    def __init__(self, plans: Iterable[tuple[str, DeltaQuery]]) -> None:
        #: Per seed shape, a plan that seeds it (every plan under it seeds alike) and the root.
        self.roots: dict[Any, tuple[DeltaQuery, Node]] = {}
        by_root: dict[int, list[tuple[str, DeltaQuery]]] = {}
        #: Per plan (by id), the delta query it is an alternative of (its own id if none).
        self._main: dict[int, int] = {}
        for query, plan in plans:
            key = _seed_shape(plan)
            root = self.roots.setdefault(key, (plan, Node(None)))[1]
            _insert(root, query, plan, 0)
            self._main[id(plan)] = id(plan)
            by_root.setdefault(id(root), []).append((query, plan))
        for _, root in self.roots.values():
            _add_alternatives(root, by_root[id(root)], self._main)

    @property
    def shared(self) -> int:
        """How many stages run once for several plans (``explain`` and the tests read it)."""
        return sum(_shared(root, self._main) for _, root in self.roots.values())


def _insert(node: Node, query: str, plan: DeltaQuery, start: int) -> None:
    """``plan``'s stages from ``start`` on below ``node``, ending there."""
    for stage in plan.stages[start:]:
        node = node.children.setdefault(_stage_shape(stage), Node(stage))
    node.ends.append((query, plan))


def _add_alternatives(
    root: Node, plans: list[tuple[str, DeltaQuery]], mains: dict[int, int]
) -> None:
    """The alternatives of ``plans`` (inserted below ``root``) below the nodes where they
    part, where every plan through the stage they replace has the same alternative there: the
    pipeline sends a prefix down one of the two, so no plan may be through one alone."""
    proposed: dict[tuple[int, Any], list[tuple[str, DeltaQuery, int, DeltaQuery]]] = {}
    nodes: dict[int, Node] = {}
    for query, plan in plans:
        for k, alt in plan.alternatives:
            node = root
            for stage in plan.stages[:k]:
                node = node.children[_stage_shape(stage)]
            nodes[id(node)] = node
            proposed.setdefault((id(node), _stage_shape(plan.stages[k])), []).append(
                (query, plan, k, alt)
            )
    added: list[tuple[str, DeltaQuery]] = []
    for (at, main), proposals in proposed.items():
        node = nodes[at]
        shapes = {_stage_shape(alt.stages[k]) for _, _, k, alt in proposals}
        through = {(q, id(p)) for q, p in _ends(node.children[main])}
        if len(shapes) != 1 or through != {(q, id(p)) for q, p, _, _ in proposals}:
            continue
        other = shapes.pop()
        if other in node.children:  # (another plan's own stage: not an alternative)
            continue
        node.alternatives[main] = other
        for query, plan, k, alt in proposals:
            _insert(node, query, alt, k)
            added.append((query, alt))
            mains[id(alt)] = mains[id(plan)]
    if added:
        _add_alternatives(root, added, mains)


def _ends(node: Node) -> list[tuple[str, DeltaQuery]]:
    return [*node.ends, *(e for c in node.children.values() for e in _ends(c))]


def _seed_shape(plan: DeltaQuery) -> Any:
    seed = replace(plan.seed, atom=0)
    checks = tuple(_unnumbered(c) for c in plan.checks)
    guards = tuple(_unnumbered(g) for g in plan.guards)
    return (seed, checks, plan.comparisons, plan.fields, guards)


def _stage_shape(stage: Stage) -> Any:
    return replace(
        stage,
        variable="",
        extenders=tuple(_unnumbered(e) for e in stage.extenders),
        checks=tuple(_unnumbered(c) for c in stage.checks),
    )


def _unnumbered(part: P) -> P:
    """``part`` without its atom's number (printed by ``explain``, never read by the engine)."""
    return replace(part, atom=0)


def _shared(node: Node, main: dict[int, int]) -> int:
    """How many stages below ``node`` run for several delta queries (a plan's alternatives
    are the plan: they do not make its stages shared)."""
    here = int(node.stage is not None and len(_mains(node, main)) > 1)
    return here + sum(_shared(c, main) for c in node.children.values())


def _mains(node: Node, main: dict[int, int]) -> set[int]:
    return {main[id(p)] for _, p in _ends(node)}
