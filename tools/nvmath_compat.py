"""Run nvmath-python's UST examples and tests on ustc, changing only their imports.

    python tools/nvmath_compat.py PATH/TO/nvmath-python [--write docs/compat.md] [--timeout 300] [-k PATTERN]

Copies ``examples/sparse/ust``, ``examples/sparse/generic/matmul`` and
``tests/nvmath_tests/sparse/ust`` of an nvmath-python checkout into a temporary
directory, rewrites their ``nvmath`` imports to ``ustc.ust`` (nothing else in
the files changes), and runs each file on the CPU: an example as a script, a
test file under pytest. Files that need a GPU (CuPy, CUDA devices, cuda.core)
or nvmath-python's CUDA code generator are skipped with the reason; a test that
fails only because it asks for a CUDA device counts as skipped. The results
table goes to stdout and, with ``--write``, between the result markers of the
given Markdown file.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

SOURCES = ("examples/sparse/ust", "examples/sparse/generic/matmul", "tests/nvmath_tests/sparse/ust")
START, END = "<!-- nvmath-compat results: start -->", "<!-- nvmath-compat results: end -->"

# Evidence that a file needs a GPU (regex, reason).
GPU_ONLY = (
    (r"^\s*import cupy|^\s*from cupy|cupyx", "uses CuPy (GPU arrays)"),
    (r"from cuda\.core|import cuda\.core", "uses cuda.core (a CUDA memory resource)"),
    (r"numba\.cuda", "compiles a CUDA device function with numba.cuda"),
    (r"^device_id = 0\b|device=0\b|device_id=0\b|\.cuda\(\)", "puts tensors on CUDA device 0"),
)
# Imports of nvmath-python internals that have no ustc counterpart.
INTERNAL = (
    (r"\bust\._emitter\b", "tests nvmath-python's CUDA C++ kernel emitter (internal)"),
    (r"\bnvmath\.memory\b", "implements an nvmath-python CUDA memory manager"),
)

CONFTEST = '''
import pytest

GPU_WORDS = ("Torch not compiled with CUDA", "no NVIDIA driver", "CUDA driver", "cudaError", "No CUDA GPUs",
             "needs CuPy", "CUDA device")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed or call.excinfo is None:
        return
    exc = call.excinfo.value
    text = f"{type(exc).__name__}: {exc}"
    from ustc.errors import DeviceError

    if isinstance(exc, DeviceError) or any(word in text for word in GPU_WORDS):
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1] or 0, "needs a CUDA device: " + text.splitlines()[0][:150])
'''


@dataclass
class Result:
    path: str
    status: str                  # pass, fail, skip
    reason: str = ""
    counts: dict = field(default_factory=dict)
    failures: list = field(default_factory=list)
    passed: list = field(default_factory=list)


def rewrite_imports(text: str) -> str:
    """``text`` with every nvmath import pointed at ustc.ust; all other lines unchanged."""
    out = []
    for line in text.splitlines(keepends=True):
        stripped = line.lstrip()
        indent = line[:len(line) - len(stripped)]
        m = re.match(r"from nvmath\.sparse import (.+)$", stripped.rstrip("\n"))
        if m and not m.group(1).startswith("("):
            names = [n.strip() for n in m.group(1).split("#")[0].split(",") if n.strip()]
            plain = [n for n in names if n.split(" as ")[0] != "ust"]
            ust = [n for n in names if n.split(" as ")[0] == "ust"]
            lines = [f"{indent}from ustc import {', '.join(ust)}\n"] if ust else []
            lines += [f"{indent}from ustc.ust import {', '.join(plain)}\n"] if plain else []
            out += lines
            continue
        if stripped.startswith(("from nvmath.sparse.ust", "import nvmath.sparse.ust")):
            line = indent + stripped.replace("nvmath.sparse.ust", "ustc.ust", 1)
        elif stripped.startswith("from nvmath.sparse.generic import") or stripped.startswith(
                "from nvmath.sparse import ("):
            line = indent + re.sub(r"nvmath\.sparse(\.generic)?", "ustc.ust", stripped, count=1)
        elif re.match(r"import nvmath\s*(#.*)?$", stripped):
            line = indent + "from ustc.ust import nvmath\n"
        out.append(line)
    return "".join(out)


def classify(text: str, example: bool) -> str | None:
    """Why a file cannot run here (nvmath internals; an example that needs a GPU), else None.
    Test files always run: their GPU cases skip themselves or count as skipped (see CONFTEST)."""
    for pattern, why in INTERNAL:
        if re.search(pattern, text, re.M):
            return why
    for pattern, why in GPU_ONLY if example else ():
        if re.search(pattern, text, re.M):
            return f"GPU-only: {why}"
    return None


def last_error(output: str) -> str:
    lines = [ln.strip() for ln in output.strip().splitlines() if ln.strip()]
    errors = [ln for ln in lines if re.match(r"^[A-Za-z_.]+(Error|Exception|Operation|Warning)\b", ln)]
    return (errors[-1] if errors else (lines[-1] if lines else "no output"))[:200]


def run_example(path: Path, timeout: int) -> Result:
    env = dict(os.environ, PYTHONPATH=str(path.parent), MPLBACKEND="Agg")
    try:
        done = subprocess.run([sys.executable, path.name], cwd=path.parent, capture_output=True, text=True,
                              timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return Result(str(path), "fail", f"timed out after {timeout} s")
    if done.returncode == 0:
        return Result(str(path), "pass")
    return Result(str(path), "fail", last_error(done.stderr or done.stdout))


def run_tests(path: Path, timeout: int, root: Path, extra: list[str] = ()) -> Result:
    report = path.with_suffix(".xml")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", f"--rootdir={root}",
           f"--junitxml={report}", *extra, str(path)]
    try:
        done = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=timeout,
                              env=dict(os.environ, MPLBACKEND="Agg"))
    except subprocess.TimeoutExpired:
        return Result(str(path), "fail", f"timed out after {timeout} s")
    if not report.exists():
        return Result(str(path), "fail", last_error(done.stdout + done.stderr))
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    failures, passed = [], []
    for case in ET.parse(report).getroot().iter("testcase"):
        kinds = {child.tag for child in case}
        if kinds & {"failure", "error"}:
            counts["failed"] += 1
            node = next(child for child in case if child.tag in ("failure", "error"))
            message = (node.get("message") or node.text or "").strip().splitlines()
            failures.append((case.get("name"), (message[0] if message else "")[:160]))
        elif "skipped" in kinds:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
            passed.append(case.get("name"))
    if not sum(counts.values()):
        return Result(str(path), "fail", last_error(done.stdout + done.stderr))
    status = "fail" if counts["failed"] else "pass" if counts["passed"] else "skip"
    reason = f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped"
    return Result(str(path), status, reason, counts, failures, passed)


class _DropMessageChecks(ast.NodeTransformer):
    """Removes the asserts that read an exception caught by ``pytest.raises(...) as name``
    (directly, ``name.value``, or through a variable assigned from it): what is left checks
    only that the right exception type is raised for the same call."""

    def visit_FunctionDef(self, node):
        caught = {item.optional_vars.id for w in ast.walk(node) if isinstance(w, ast.With) for item in w.items
                  if isinstance(item.optional_vars, ast.Name) and _is_raises(item.context_expr)}
        for stmt in ast.walk(node):  # message = str(e.value)
            if isinstance(stmt, ast.Assign) and _names(stmt.value) & caught:
                caught |= {t.id for t in stmt.targets if isinstance(t, ast.Name)}
        if caught:
            _strip(node, caught)
        return node


def _is_raises(expr) -> bool:
    return isinstance(expr, ast.Call) and getattr(expr.func, "attr", getattr(expr.func, "id", "")) == "raises"


def _names(node) -> set:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _strip(node, caught: set) -> None:
    for field in ("body", "orelse", "finalbody"):
        block = getattr(node, field, None)
        if isinstance(block, list):
            kept = [s for s in block if not (isinstance(s, ast.Assert) and _names(s.test) & caught)]
            setattr(node, field, kept or [ast.Pass()])
            for s in kept:
                _strip(s, caught)


def without_message_checks(text: str) -> str:
    """A test module's source with its exception-message asserts removed (see _DropMessageChecks)."""
    return ast.unparse(_DropMessageChecks().visit(ast.parse(text)))


def wording_only(path: Path, names: list[str], timeout: int, root: Path) -> set[str]:
    """Which of the failing tests ``names`` of the file ``path`` pass once their exception-message
    asserts are removed: they raise the expected exception type and differ only in its text."""
    probe = path.with_name(path.stem + "_types_only.py")
    probe.write_text(without_message_checks(path.read_text()))
    base = sorted({name.split("[")[0] for name in names})
    try:
        result = run_tests(probe, timeout, root, ["-k", " or ".join(base)])
    finally:
        probe.unlink()
    return set(names) & set(result.passed)


def prepare(checkout: Path, work: Path) -> list[tuple[str, Path]]:
    files = []
    for rel in SOURCES:
        src = checkout / rel
        if not src.is_dir():
            raise SystemExit(f"{src} is not a directory: is {checkout} an nvmath-python checkout?")
        dst = work / rel
        dst.mkdir(parents=True, exist_ok=True)
        for f in sorted(src.glob("*.py")):
            (dst / f.name).write_text(rewrite_imports(f.read_text()))
            if f.name != "__init__.py" and (rel.startswith("examples") or f.name.startswith("test_")):
                files.append((f"{rel}/{f.name}", dst / f.name))
    for d in ("tests", "tests/nvmath_tests", "tests/nvmath_tests/sparse"):
        (work / d / "__init__.py").touch()
    (work / "tests/nvmath_tests/sparse/ust/conftest.py").write_text(CONFTEST)
    return files


def table(results: list[tuple[str, Result]]) -> str:
    rows = ["| file | result | details |", "|---|---|---|"]
    for rel, r in results:
        details = r.reason.replace("|", "\\|")
        if r.failures:  # names and exception types only: the messages quote the tests' own text
            shown = ", ".join(f"`{name}` ({_kind(msg)})" for name, msg in r.failures[:12]).replace("|", "\\|")
            more = f" (+{len(r.failures) - 12} more)" if len(r.failures) > 12 else ""
            details += f". Failing: {shown}{more}"
        rows.append(f"| `{rel}` | {r.status} | {details} |")
    return "\n".join(rows)


def _kind(message: str) -> str:
    if message == "message text only":
        return message
    m = re.match(r"^([A-Za-z_.]*(Error|Exception|Operation))\b", message)
    return m.group(1) if m else "AssertionError"


def summary(results: list[tuple[str, Result]]) -> str:
    lines = []
    for label, prefix in (("examples", "examples/"), ("test files", "tests/")):
        group = [r for rel, r in results if rel.startswith(prefix)]
        counts = {s: sum(r.status == s for r in group) for s in ("pass", "fail", "skip")}
        lines.append(f"- {label}: {counts['pass']} pass, {counts['fail']} fail, {counts['skip']} skip "
                     f"(of {len(group)})")
    cases = {k: sum(r.counts.get(k, 0) for _, r in results) for k in ("passed", "failed", "skipped")}
    lines.append(f"- test cases: {cases['passed']} passed, {cases['failed']} failed, {cases['skipped']} skipped")
    return "\n".join(lines)


def write(markdown: Path, block: str) -> None:
    text = markdown.read_text() if markdown.exists() else f"# nvmath-python compatibility\n\n{START}\n{END}\n"
    if START not in text or END not in text:
        text += f"\n{START}\n{END}\n"
    head, rest = text.split(START, 1)
    markdown.write_text(head + START + "\n" + block + "\n" + END + rest.split(END, 1)[1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkout", type=Path, help="an nvmath-python repository checkout")
    parser.add_argument("--write", type=Path, help="Markdown file whose results section is replaced")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per file (default 300)")
    parser.add_argument("-k", dest="pattern", default="", help="only files whose path contains this")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument("--label", default="", help="a note (e.g. the checkout's commit) printed above the table")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="nvmath-compat-"))
    results = []
    try:
        for rel, path in prepare(args.checkout.resolve(), work):
            if args.pattern not in rel:
                continue
            why = classify(path.read_text(), rel.startswith("examples/"))
            if why:
                result = Result(str(path), "skip", why)
            elif rel.startswith("tests/"):
                result = run_tests(path, args.timeout, work)
                if result.failures:
                    wording = wording_only(path, [n for n, _ in result.failures], args.timeout, work)
                    result.failures = [(n, "message text only" if n in wording else m) for n, m in result.failures]
            else:
                result = run_example(path, args.timeout)
            results.append((rel, result))
            print(f"{result.status:4}  {rel}  {result.reason}", flush=True)
            for name, msg in result.failures:
                print(f"        {name}: {msg}", flush=True)
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    block = "\n\n".join(x for x in (args.label, summary(results), table(results)) if x)
    print("\n" + block)
    if args.write:
        write(args.write, block)
    return 0


if __name__ == "__main__":
    sys.exit(main())
