"""docs/compat.md is executable: its examples run and print what they show."""

import doctest
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "compat.md"


def test_compat_doc_examples():
    result = doctest.testfile(str(DOC), module_relative=False,
                              optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0
    assert result.failed == 0
