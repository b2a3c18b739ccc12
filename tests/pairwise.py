"""Pairwise (2-way covering) parameter sets, to test many axes without their full product.

``pairwise(formats, dtypes, shapes)`` returns tuples such that every value of every axis
appears, and every pair of values of any two axes appears together in at least one tuple.
Most defects need one value or one interaction of two (a format with a dtype, a dtype with
an empty shape); the full product of three registry-sized axes mostly recompiles the same
kernels. The choice is deterministic (greedy, first best), so a CI run always tries the
same cases; use it in ``pytest.mark.parametrize`` like a product::

    @pytest.mark.parametrize("fmt,dtype,shape", pairwise(FORMATS, DTYPES, SHAPES))

Axes of one value or a single axis give their plain product.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

__all__ = ["pairwise", "uncovered_pairs"]


def _pairs_of(case: Sequence[int]) -> set[tuple[int, int, int, int]]:
    return {(a, case[a], b, case[b]) for a, b in itertools.combinations(range(len(case)), 2)}


def uncovered_pairs(axes: Sequence[Sequence], cases: Iterable[Sequence]) -> list[tuple]:
    """The value pairs ``(axis_a, value_a, axis_b, value_b)`` of ``axes`` that no case of
    ``cases`` holds together (empty when ``cases`` is a pairwise cover)."""
    seen = set()
    for case in cases:
        seen |= _pairs_of([list(axis).index(v) for axis, v in zip(axes, case)])
    want = [(a, i, b, j) for a, b in itertools.combinations(range(len(axes)), 2)
            for i in range(len(axes[a])) for j in range(len(axes[b]))]
    return [(a, axes[a][i], b, axes[b][j]) for a, i, b, j in want if (a, i, b, j) not in seen]


def pairwise(*axes: Sequence) -> list[tuple]:
    """Cases covering every pair of values of any two of ``axes`` (see the module docstring).

    Each axis must be non-empty; an empty axis gives no cases, as ``itertools.product``."""
    axes = [list(axis) for axis in axes]
    if any(not axis for axis in axes):
        return []
    if len(axes) < 3:
        return list(itertools.product(*axes))
    todo = _all_pairs(axes)
    cases = []
    while todo:
        cases.append(_best_case(axes, todo))
        todo -= _pairs_of(cases[-1])
    return [tuple(axis[i] for axis, i in zip(axes, case)) for case in cases]


def _all_pairs(axes) -> set[tuple[int, int, int, int]]:
    return {(a, i, b, j) for a, b in itertools.combinations(range(len(axes)), 2)
            for i in range(len(axes[a])) for j in range(len(axes[b]))}


def _best_case(axes, todo) -> tuple[int, ...]:
    """Start from the first uncovered pair and fill the other axes one by one, each with the
    value that covers most uncovered pairs against the values chosen so far."""
    a, i, b, j = min(todo)
    case: list[int | None] = [None] * len(axes)
    case[a], case[b] = i, j
    for axis in range(len(axes)):
        if case[axis] is not None:
            continue
        gains = [sum((min(axis, o), v if axis < o else case[o], max(axis, o), case[o] if axis < o else v)
                     in todo for o in range(len(axes)) if case[o] is not None)
                 for v in range(len(axes[axis]))]
        case[axis] = gains.index(max(gains))
    return tuple(case)
