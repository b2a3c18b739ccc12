"""The user docs are executable: every example in docs/dsl.md and docs/ops.md runs and prints what it shows."""

import doctest
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"


@pytest.mark.parametrize("name", ["dsl.md", "ops.md"])
def test_doc_examples(name):
    result = doctest.testfile(str(DOCS / name), module_relative=False,
                              optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0
    assert result.failed == 0
