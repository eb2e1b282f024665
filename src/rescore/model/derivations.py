"""The top-level assignments of a problem module, read with `ast`: which names the module derives from
others (`out_channels = in_channels`, `groups = in_channels`, `scale_shape = (out_channels, 1, 1)`),
so that a varied size carries the names derived from it (worker/problem_sizes.py evaluates them).

A KernelBench problem states its sizes as module-level assignments; some follow others, and the
benchmark's own sizes keep those relations. Re-binding one name alone (in_channels = 7 with groups
still 3) builds a problem the benchmark never had, and a kernel written for it then "crashes".
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class Assignment:
    """One top-level `targets = value` statement of a module, in source order."""

    targets: tuple[str, ...]  # the names bound (several for `height, width = 32, 32`)
    value: ast.expr
    reads: frozenset[str]  # the names the value reads

    @property
    def text(self) -> str:
        return f"{', '.join(self.targets)} = {ast.unparse(self.value)}"


def top_level_assignments(source: str) -> list[Assignment]:
    """Every top-level assignment to plain names (and tuples of them), in source order."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found: list[Assignment] = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        names = _target_names(target)
        if names:
            reads = frozenset(n.id for n in ast.walk(value) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load))
            found.append(Assignment(names, value, reads))
    return found


def _target_names(target: ast.expr) -> tuple[str, ...]:
    if isinstance(target, ast.Name):
        return (target.id,)
    if isinstance(target, (ast.Tuple, ast.List)) and all(isinstance(e, ast.Name) for e in target.elts):
        return tuple(e.id for e in target.elts)  # type: ignore[union-attr]
    return ()


def following(assignments: Iterable[Assignment], free: Iterable[str]) -> Iterator[Assignment]:
    """The assignments, in order, whose value reads one of the `free` names or a name an earlier one
    of them binds; an assignment to a free name is never one (its value is the free one's)."""
    free = set(free)
    moved = set(free)
    for assignment in assignments:
        if set(assignment.targets) & free or not assignment.reads & moved:
            continue
        moved |= set(assignment.targets)
        yield assignment


def derived_names(source: str, free: list[str]) -> dict[str, str]:
    """The names whose top-level value is computed, directly or through another such name, from one
    of the `free` names: name -> its assignment, as written. A derived name is not a free size."""
    return {name: a.text for a in following(top_level_assignments(source), free) for name in a.targets}
