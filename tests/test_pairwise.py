"""tests/pairwise.py: the cover holds every value pair, is deterministic and much smaller than
the product it replaces."""

from __future__ import annotations

import itertools

from hypothesis import given, settings, strategies as st

from pairwise import pairwise, uncovered_pairs


@settings(max_examples=60)
@given(st.lists(st.integers(1, 6), min_size=0, max_size=5))
def test_every_pair_is_covered(sizes):
    axes = [[f"a{n}v{v}" for v in range(size)] for n, size in enumerate(sizes)]
    cases = pairwise(*axes)
    assert uncovered_pairs(axes, cases) == []
    assert all(len(case) == len(axes) for case in cases)
    assert len(cases) <= max(1, len(list(itertools.product(*axes))))
    assert cases == pairwise(*axes)


def test_much_smaller_than_the_product():
    axes = [list(range(12)), list(range(5)), list(range(6)), [False, True]]
    cases = pairwise(*axes)
    assert uncovered_pairs(axes, cases) == []
    assert len(cases) <= 80 < 12 * 5 * 6 * 2


def test_an_uncovered_pair_is_reported():
    axes = [[1, 2], ["x", "y"], [None]]
    assert uncovered_pairs(axes, [(1, "x", None)]) == [
        (0, 1, 1, "y"), (0, 2, 1, "x"), (0, 2, 1, "y"), (0, 2, 2, None), (1, "y", 2, None)]


def test_an_empty_axis_gives_no_cases():
    assert pairwise([1, 2], [], [3]) == []
