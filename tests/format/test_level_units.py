"""A level type is one unit: code outside its own modules asks its capabilities and hooks,
never its keyword (``ustc/format/levels/<type>.py`` are the only places that may)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import ustc
from ustc.format.levels import LEVEL_TYPES

ROOT = Path(ustc.__file__).resolve().parent
SOURCES = sorted(ROOT.rglob("*.py")) + sorted((ROOT.parent / "codegen").rglob("*.py"))
LEVELS = ROOT / "format" / "levels"
KEYWORDS = {t.keyword for t in LEVEL_TYPES}


def _keyword_literal(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and node.value in KEYWORDS:
        return True
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_keyword_literal(e) for e in node.elts)
    return False


def _reads_keyword(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "keyword"


def keyword_comparisons(source: str) -> list[int]:
    """Lines comparing something with a level keyword or reading ``.keyword`` in a comparison."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_keyword_literal(s) or _reads_keyword(s) for s in sides):
                lines.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in ("startswith", "endswith") and _reads_keyword(node.func.value):
            lines.append(node.lineno)
    return lines


def test_sources_are_found():
    assert len(SOURCES) > 50 and any(p.parent.name == "codegen" for p in SOURCES)


@pytest.mark.parametrize("path", [p for p in SOURCES if LEVELS not in p.parents],
                         ids=lambda p: str(p.relative_to(ROOT.parent)))
def test_no_level_keyword_is_compared_outside_the_level_modules(path):
    found = keyword_comparisons(path.read_text(encoding="utf-8"))
    assert not found, f"{path.name} compares level keywords at lines {found}: ask a capability instead"


def test_the_check_catches_the_ways_keywords_were_compared():
    samples = ['x = lv.type.keyword == "singleton"', 'x = kw in ("compressed", "delta")',
               'x = ref.keyword != "delta"', 'x = "dense" == kinds[0]', 'x = a.keyword == b.keyword',
               'x = ref.keyword.startswith("comp")']
    for text in samples:
        assert keyword_comparisons(text) == [1], text
    assert keyword_comparisons('x = lv.type.one_child and mode == "dense_rows"') == []


@pytest.mark.parametrize("ltype", LEVEL_TYPES, ids=lambda t: t.keyword)
def test_capabilities_are_consistent(ltype):
    """Locate levels own no buffers and are full; iterated levels own a coordinate buffer or a
    fixed shape (structured's crd, singleton's crd); a stateful level keeps positions in pos."""
    t = ltype()
    assert t.iterate is not t.locate
    if t.locate:
        assert t.buffers == () and t.full
    else:
        assert "crd" in t.buffers
    if t.batched:
        assert t.locate
    if t.stateful:
        assert "pos" in t.buffers
