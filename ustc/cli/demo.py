"""``ustc demo``: the main job, a tour of what ustc does, with real output.

The tour is a list of sections, ``SECTIONS``: a title and a function that
returns the section's text as blocks (strings, printed one blank line apart).
Every block is computed by the library on the spot and is deterministic (no
timings, addresses or paths). Later stages add sections (conversion, kernels,
the cache) by appending to the list.
"""

from __future__ import annotations

from typing import Callable

from .. import formats
from ..errors import FormatError
from ..format import Dimension, LevelFormat, LevelProperty, TensorFormat
from . import demo_kernels, demo_ops, demo_tensors
from .table import render

RULE = "=" * 78


def spellings() -> list[str]:
    """One format per spelling: DSL text, MLIR wrapper with widths, object API, named format."""
    i, j = Dimension("i"), Dimension("j")
    examples = [
        ("bare DSL", "(i, j) -> (j : dense, i : compressed)  # CSC", TensorFormat.parse),
        ("MLIR wrapper", "#sparse_tensor.encoding<{ map = (row, col) -> (row : compressed(nonunique), "
                         "col : singleton(soa)), posWidth = 32, crdWidth = 16 }>", TensorFormat.parse),
        ("object API", "TensorFormat([i, j], {i: LevelFormat.DENSE, j: (LevelFormat.DELTA, 4)})",
         lambda _: TensorFormat([i, j], {i: LevelFormat.DENSE, j: (LevelFormat.DELTA, 4)})),
        ("named format", "BSR(2, 3)", TensorFormat.parse),
    ]
    blocks = []
    for kind, source, build in examples:
        fmt = build(source)
        blocks.append(f"{kind}:\n  input     : {source}\n  signature : {fmt.signature}\n  repr      : {fmt!r}")
    return blocks


def equality() -> list[str]:
    """Different spellings of one format are equal: equality goes by the signature."""
    r, c = Dimension("r"), Dimension("c")
    csc = _parsed("(i, j) -> (j : dense, i : compressed)",
                  "#sparse_tensor.encoding<{ map = (r, c) -> (c : dense, r : compressed) }>", "CSC")
    csc.append(("TensorFormat([r, c], {c: LevelFormat.DENSE, r: LevelFormat.COMPRESSED})",
                TensorFormat([r, c], {c: LevelFormat.DENSE, r: LevelFormat.COMPRESSED})))
    bsr = _parsed("BSR(2, 3)",
                  "(i, j) -> (i // 2 : dense, j / 3 : compressed, i % 2 : dense, j % 3 : dense)",
                  "{l0, l1, l2, l3} (i = 2 * l0 + l2, j = 3 * l1 + l3) -> "
                  "(i floordiv 2 : dense, j floordiv 3 : compressed, i mod 2 : dense, j mod 3 : dense)")
    coo = _parsed("(i, j) -> (i : compressed(nonunique), j : singleton)")
    coo.append(("TensorFormat([r, c], {r: (LevelFormat.COMPRESSED, LevelProperty.NONUNIQUE), "
                "c: LevelFormat.SINGLETON})",
                TensorFormat([r, c], {r: (LevelFormat.COMPRESSED, LevelProperty.NONUNIQUE),
                                      c: LevelFormat.SINGLETON})))
    coo.append(("formats.COO()", formats.COO()))
    roundtrip = all(TensorFormat.parse(str(nf.format())) == nf.format() for nf in formats.NAMED)
    return [_equal_block("CSC", csc), _equal_block("BSR(2, 3)", bsr), _equal_block("COO", coo),
            f"parse(str(f)) == f for every named format f: {roundtrip}"]


def _parsed(*texts: str) -> list[tuple[str, TensorFormat]]:
    """``(text, TensorFormat.parse(text))`` for each text."""
    return [(text, TensorFormat.parse(text)) for text in texts]


def _equal_block(title: str, spelled: list[tuple[str, TensorFormat]]) -> str:
    """Each spelling on a line, then whether all are one format (one signature)."""
    lines = [f"{title}, {len(spelled)} spellings:"] + [f"  {source}" for source, _ in spelled]
    same = len({fmt for _, fmt in spelled}) == 1
    lines.append(f"  all equal: {same}, signature {spelled[0][1].signature}")
    return "\n".join(lines)


def named_formats() -> list[str]:
    """The named-format table: name and parameters, an example instance, its DSL text."""
    return [render(("name", "example", "DSL text"), formats.table())]


def derived_facts() -> list[str]:
    """Level extents, inverse map, one entry's level coordinates and buffers, on a 5 x 7 matrix."""
    shape, entry = (5, 7), (4, 1)
    blocks = []
    for fmt in (formats.BSR(2, 3), formats.DIAI):
        levels = fmt.level_coordinates(entry)
        facts = [
            (f"level_shape{shape}", fmt.level_shape(shape)),
            ("inverse map (dim_exprs)", ", ".join(f"{d.name} = {e}" for d, e in zip(fmt.dims, fmt.dim_exprs))),
            (f"level_coordinates{entry}", levels),
            (f"dim_coordinates{levels}", fmt.dim_coordinates(levels)),
            ("buffers", ", ".join(f"{b}[{k}]" for k, b in fmt.buffers) + ", values"),
        ]
        blocks.append(f"{fmt.name}: {fmt.text}\n" + _aligned(facts))
    return blocks


def _aligned(facts: list[tuple[str, object]]) -> str:
    """``label : value`` lines, indented two spaces, colons in one column."""
    width = max(len(label) for label, _ in facts)
    return "\n".join(f"  {label.ljust(width)} : {value}" for label, value in facts)


def errors() -> list[str]:
    """One syntax error and one semantic error, as the user sees them (``str`` of the exception)."""
    bad = ["(i, j) -> (i : dense, j : compresed)",
           "(i, j) -> (i : dense,\n           i mod 2 : dense, j : compressed)"]
    blocks = []
    for text in bad:
        shown = "\n".join("    " + line for line in text.splitlines())
        try:
            TensorFormat.parse(text)
        except FormatError as exc:
            blocks.append(f"parse:\n{shown}\n{type(exc).__name__}: {exc}")
        else:
            blocks.append(f"parse:\n{shown}\nno error raised (unexpected)")
    return blocks


SECTIONS: list[tuple[str, Callable[[], list[str]]]] = [
    ("Formats in four spellings: signature and repr", spellings),
    ("One format, many spellings", equality),
    ("Named formats", named_formats),
    ("Derived facts on a 5 x 7 matrix", derived_facts),
    ("Errors name the place and the rule", errors),
    ("Tensor storage in several formats", demo_tensors.storage),
    ("Converting between any two formats", demo_tensors.conversion),
    ("Zero-copy interop", demo_tensors.interop),
    ("Fused sparsification", demo_tensors.sparsification),
    ("A kernel in index notation, generated and compiled", demo_kernels.jit_kernel),
    ("Operations on mixed formats", demo_kernels.operations),
    ("Planned SpMV in three formats, and the route each took", demo_ops.planned_spmv),
    ("A CG solve over one planned Matmul", demo_ops.cg_solve),
    ("The kernel cache", demo_kernels.kernel_cache),
]


def run(args=None) -> int:
    """Print every section of ``SECTIONS`` under a numbered header; return 0."""
    print("ustc demo: what ustc can do so far, with real output")
    for number, (title, section) in enumerate(SECTIONS, 1):
        print(f"\n{RULE}\n{number}. {title}\n{RULE}\n")
        print("\n\n".join(section()))
    return 0
