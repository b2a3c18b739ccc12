"""Format parsing: time to parse typical format texts, first time and cached.

    python benchmarks/bench_parse.py [--repeat N] [--write]

For each format text:

* **first time**: ``parse.cache_clear()``, then one ``parse(text)``; the
  median over ``N`` such runs, in µs. This is the full path: Lark LALR parse,
  syntax tree, level registry, validation (``TensorFormat`` construction).
* **cached**: ``parse(text)`` again with the text in the cache; the median
  over ``N`` batches of 1000 calls, per call, in µs.

It also reports the one-time cost every process pays once: building the LALR
parser from ``grammar/format.lark`` (``grammar_parser.cache_clear()``, then
the first parse), measured in this process and in fresh processes (where
Python's own ``re`` caches are cold, too).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

import lark

import ustc
from ustc.format import parser

from _report import machine, write_section

FORMATS: list[tuple[str, str]] = [
    ("CSR", "(i, j) -> (i : dense, j : compressed)"),
    ("COO", "(i, j) -> (i : compressed(nonunique), j : singleton)"),
    ("BSR 2x2 (DSL)", "(i, j) -> (i floordiv 2 : dense, j floordiv 2 : compressed, i mod 2 : dense, j mod 2 : dense)"),
    ("DIA", "(i, j) -> (j - i : compressed, i : range)"),
    ("delta(4)", "(i, j) -> (i : dense, j : delta(4))"),
    ("structured 2:4", "(i, j) -> (i : dense, j floordiv 4 : dense, j mod 4 : structured[2, 4])"),
    ("MLIR + widths", "#sparse_tensor.encoding<{ map = (i, j) -> (i : dense, j : compressed), "
                      "posWidth = 32, crdWidth = 16 }>"),
    ("named BSR(2, 2)", "BSR(2, 2)"),
    ("CSF(8) (DSL)", str(ustc.formats.CSF(8))),
]

BATCH = 1000
COLD_SNIPPET = ("import time, ustc.format.parser as p; t = time.perf_counter_ns(); "
                "p.parse('(i, j) -> (i : dense, j : compressed)'); print(time.perf_counter_ns() - t)")


def first_time_us(text: str, repeat: int) -> float:
    """Median µs of one uncached ``parse(text)`` (grammar already built)."""
    parser.grammar_parser()
    samples = []
    for _ in range(repeat):
        parser.parse.cache_clear()
        start = time.perf_counter_ns()
        parser.parse(text)
        samples.append(time.perf_counter_ns() - start)
    return statistics.median(samples) / 1e3


def cached_us(text: str, repeat: int) -> float:
    """Median µs per call of ``parse(text)`` with the text already cached."""
    parser.parse(text)
    samples = []
    for _ in range(repeat):
        start = time.perf_counter_ns()
        for _ in range(BATCH):
            parser.parse(text)
        samples.append((time.perf_counter_ns() - start) / BATCH)
    return statistics.median(samples) / 1e3


def grammar_build_ms(repeat: int) -> float:
    """Median ms of the first CSR parse after ``grammar_parser.cache_clear()`` (in this process)."""
    samples = []
    for _ in range(repeat):
        parser.grammar_parser.cache_clear()
        parser.parse.cache_clear()
        start = time.perf_counter_ns()
        parser.parse(FORMATS[0][1])
        samples.append(time.perf_counter_ns() - start)
    return statistics.median(samples) / 1e6


def cold_process_ms(repeat: int) -> float:
    """Median ms of the first CSR parse in a fresh interpreter (``import ustc`` not counted)."""
    samples = [int(subprocess.run([sys.executable, "-c", COLD_SNIPPET], check=True, capture_output=True,
                                  text=True).stdout) for _ in range(repeat)]
    return statistics.median(samples) / 1e6


def measure(repeat: int) -> tuple[list[tuple[str, str, str]], float, float]:
    """Rows ``(label, first-time µs, cached µs)`` and the two one-time costs in ms."""
    rows = [(label, f"{first_time_us(text, repeat):.1f}", f"{cached_us(text, max(repeat // 10, 5)):.3f}")
            for label, text in FORMATS]
    return rows, grammar_build_ms(max(repeat // 20, 5)), cold_process_ms(5)


def report(rows, build_ms: float, cold_ms: float, repeat: int) -> str:
    """The results as Markdown: table, one-time costs, the texts measured, the machine."""
    lines = ["| format | first time (µs) | cached (µs) |", "|---|---:|---:|"]
    lines += [f"| {label} | {first} | {cached} |" for label, first, cached in rows]
    lines += ["",
              f"One-time grammar build (first parse after `grammar_parser.cache_clear()`, CSR): "
              f"{build_ms:.1f} ms in a warm process; first CSR parse in a fresh process: {cold_ms:.1f} ms.",
              "",
              f"Medians of {repeat} first-time parses (`parse.cache_clear()` before each) and of "
              f"{max(repeat // 10, 5)} batches of {BATCH} cached parses. ustc {ustc.__version__}, "
              f"lark {lark.__version__}; {machine()}.",
              "",
              "Texts:", ""]
    lines += [f"- {label}: `{text}`" for label, text in FORMATS]
    return "\n".join(lines)


def main(argv=None) -> int:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--repeat", type=int, default=200, help="samples per median (default 200)")
    args.add_argument("--write", action="store_true", help="write the '## Format parsing' section")
    opts = args.parse_args(argv)
    rows, build_ms, cold_ms = measure(opts.repeat)
    text = report(rows, build_ms, cold_ms, opts.repeat)
    print(text)
    if opts.write:
        print(f"\nwrote {write_section('Format parsing', text)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
