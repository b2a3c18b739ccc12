"""Shared helpers for the benchmark scripts: machine description and docs/benchmarks.md sections.

Every ``benchmarks/bench_<name>.py`` prints its table and, with ``--write``,
replaces (or appends) its own ``## <title>`` section of ``docs/benchmarks.md``
through :func:`write_section`; the file is created with :data:`HEADER` first.
"""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo, else ``platform.processor()``, else 'unknown CPU'."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def machine() -> str:
    """One line: CPU model, core count (as ``nproc`` counts them), OS and Python version."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (f"{cpu_model()}, {cores} cores (nproc), {platform.system()} {platform.machine()}, "
            f"Python {platform.python_version()}")


HEADER = """# Benchmarks

Every benchmark is a script in `benchmarks/`; run one from the repository root,
after `pip install -e .`, with

    python benchmarks/bench_<name>.py --write

It prints a table and, with `--write`, replaces its own section of this file.
Each section names the machine it was measured on.
"""


def write_section(title: str, body: str, path: Path = DOC) -> Path:
    """Replace the ``## title`` section of ``path`` with ``body`` (or append it); return the path.

    The section runs from its heading to the next ``## `` heading or the end of
    the file. A missing file is created with :data:`HEADER`.
    """
    text = path.read_text() if path.exists() else HEADER
    section = f"## {title}\n\n{body.strip()}\n"
    pattern = re.compile(rf"^## {re.escape(title)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(text):
        text = pattern.sub(lambda _: section + "\n", text, count=1).rstrip() + "\n"
    else:
        text = text.rstrip() + "\n\n" + section
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
