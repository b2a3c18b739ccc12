"""Validate ustc on a GPU machine without network access, from a kit ``prepare.py`` made.

    python3 tools/gpu_kit/validate.py KIT OUT [--dry-run] [--no-tests] [--no-bench]
                                      [--pytest-args "..."] [--bench-args "..."]

1. reports what it finds (Python, torch, cupy, numba, numba-cuda, llvmlite, ..., the GPU
   and driver through ``nvidia-smi`` or ``cuda.bindings``);
2. installs from KIT only what is missing or outside ustc's requirement
   (:func:`kit_needs.decide`; xz wheels decompressed first), then ustc itself
   (``pip install --no-index --no-deps --no-build-isolation -e REPO``);
3. runs ``pytest -m gpu`` and ``benchmarks/bench_gpu.py --write``;
4. writes into OUT (at most 8 files, as the device tool returns them): ``versions.json``
   (before / after / decisions / kit), ``setup.log`` (pip, ``numba.cuda.detect()``),
   ``pytest.log``, ``pytest.xml`` (JUnit), ``bench.log``, ``benchmarks_gpu.md`` (the
   ``## GPU kernels`` section bench_gpu.py wrote to docs/benchmarks.md) and
   ``summary.json`` (each step's command, exit status and seconds).

``--dry-run`` does steps 1 and 4 only: the decisions and the command lines it would run.
Exit status: 0 when every step ran and passed, 1 otherwise (a test failure included).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import kit_needs  # noqa: E402
import kit_probe  # noqa: E402
import kit_wheels  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
UNPACKED = Path("/tmp/ustc-gpu-kit-wheels")
SECTION = "## GPU kernels"
KIT_PYTHON = "3.12"    # prepare.py downloads wheels for this Python
DETECT = ("import numba, numba_cuda, llvmlite; from numba import cuda; "
          "print('numba', numba.__version__, 'numba-cuda', numba_cuda.__version__, 'llvmlite', llvmlite.__version__); "
          "cuda.detect()")


@dataclass(frozen=True)
class Step:
    """One thing validate does: ``unpack`` an xz wheel (``argv`` = source, target folder)
    or ``run`` ``argv`` in ``cwd``, its output appended to ``OUT/log``."""

    name: str
    kind: str            # "unpack" | "run"
    argv: tuple[str, ...]
    log: str
    cwd: str = ""
    timeout: int = 600

    def line(self) -> str:
        if self.kind == "unpack":
            return f"[{self.name}] xz -d {self.argv[0]} -> {self.argv[1]}/"
        where = f"(cd {shlex.quote(self.cwd)} && " if self.cwd else ""
        return f"[{self.name}] {where}{shlex.join(self.argv)}{')' if where else ''} >> {self.log}"


@dataclass(frozen=True)
class Options:
    tests: bool = True
    bench: bool = True
    pytest_args: tuple[str, ...] = ()
    bench_args: tuple[str, ...] = ()
    pytest_timeout: int = 420
    bench_timeout: int = 300


def plan(kit: Path, out: Path, repo: Path, decisions, options: Options = Options(),
         python: str = sys.executable, unpacked: Path = UNPACKED) -> tuple[Step, ...]:
    """The steps for ``decisions`` (:func:`kit_needs.decide`), in order."""
    installs = [d for d in decisions if d.action == "install"]
    steps = [Step(f"unpack {d.name}", "unpack", (str(kit / d.wheel), str(unpacked)), "setup.log")
             for d in installs if d.wheel.endswith(kit_wheels.XZ)]
    pip = (python, "-m", "pip", "install", "--no-index", "--no-deps", "--no-cache-dir", "--disable-pip-version-check")
    if installs:
        links = ("--find-links", str(kit), "--find-links", str(unpacked))
        pins = tuple(f"{d.name}=={d.version}" for d in installs)
        steps.append(Step("install kit wheels", "run", pip + ("--upgrade",) + links + pins, "setup.log", timeout=300))
    steps.append(Step("install ustc", "run", pip + ("--no-build-isolation", "-e", str(repo)), "setup.log",
                      timeout=300))
    steps.append(Step("numba.cuda.detect", "run", (python, "-c", DETECT), "setup.log", timeout=120))
    if options.tests:
        steps.append(Step("pytest -m gpu", "run", (python, "-m", "pytest", "-m", "gpu", "-p", "no:cacheprovider", "-rA",
                                                   f"--junitxml={out / 'pytest.xml'}", *options.pytest_args),
                          "pytest.log", str(repo), options.pytest_timeout))
    if options.bench:
        steps.append(Step("bench_gpu --write", "run", (python, "benchmarks/bench_gpu.py", "--write", *options.bench_args),
                          "bench.log", str(repo), options.bench_timeout))
    return tuple(steps)


def run_step(step: Step, out: Path) -> dict:
    """Run one step, its output appended to its log; returns its record for summary.json."""
    t0 = time.perf_counter()
    with open(out / step.log, "a", encoding="utf-8") as log:
        log.write(f"\n==== {step.line()}\n")
        log.flush()
        try:
            if step.kind == "unpack":
                wheel = kit_wheels.unpack_xz(Path(step.argv[0]), Path(step.argv[1]))
                log.write(f"{wheel} ({wheel.stat().st_size} bytes, sha256 {kit_wheels.sha256(wheel)})\n")
                rc = 0
            else:
                env = {**os.environ, "PYTHONUNBUFFERED": "1"}
                rc = subprocess.run(list(step.argv), cwd=step.cwd or None, stdout=log, stderr=subprocess.STDOUT,
                                    env=env, timeout=step.timeout).returncode
        except subprocess.TimeoutExpired:
            log.write(f"\n==== timed out after {step.timeout} s\n")
            rc = 124
        except OSError as exc:
            log.write(f"\n==== failed: {exc}\n")
            rc = 127
    return {"step": step.name, "command": step.line(), "rc": rc, "seconds": round(time.perf_counter() - t0, 1)}


def bench_section(repo: Path) -> str:
    """The ``## GPU kernels`` section of docs/benchmarks.md ("" when absent)."""
    path = repo / "docs" / "benchmarks.md"
    if not path.is_file():
        return ""
    lines, out = path.read_text(encoding="utf-8").splitlines(), []
    for line in lines:
        if out and line.startswith("## "):
            break
        if out or line.strip() == SECTION:
            out.append(line)
    return "\n".join(out).rstrip() + "\n" if out else ""


def _write_json(path: Path, data) -> None:
    path.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")


def validate(kit: Path, out: Path, repo: Path, options: Options, dry_run: bool) -> int:
    out.mkdir(parents=True, exist_ok=True)
    before = kit_probe.report()
    manifest = kit_wheels.read(kit)
    problems = [] if dry_run else kit_wheels.verify(kit, manifest)
    decisions = kit_needs.decide(before["distributions"], manifest.entries)
    steps = plan(kit, out, repo, decisions, options)
    versions = {"before": before, "kit": {"summary": manifest.summary(), "problems": problems},
                "decisions": [asdict(d) for d in decisions]}
    if before["python"]["version"].rsplit(".", 1)[0] != KIT_PYTHON and any(d.action == "install" for d in decisions):
        print(f"warning: the kit's wheels are for Python {KIT_PYTHON}, this is {before['python']['version']}")
    for d in decisions:
        print(d.line())
    for s in steps:
        print(s.line())
    if dry_run or problems:
        _write_json(out / "versions.json", versions)
        _write_json(out / "summary.json", {"dry_run": dry_run, "problems": problems,
                                           "steps": [{"step": s.name, "command": s.line()} for s in steps]})
        print("\n".join(problems) or "dry run: nothing installed or run")
        return 1 if problems else 0
    records = []
    for step in steps:
        records.append(run_step(step, out))
        print(f"{step.name}: exit {records[-1]['rc']} in {records[-1]['seconds']} s", flush=True)
        if records[-1]["rc"] and step.log == "setup.log":
            break   # nothing after a failed install means anything
    versions["after"] = kit_probe.report()
    _write_json(out / "versions.json", versions)
    section = bench_section(repo)
    if section and options.bench:
        (out / "benchmarks_gpu.md").write_text(section, encoding="utf-8")
    ok = len(records) == len(steps) and all(r["rc"] == 0 for r in records)
    _write_json(out / "summary.json", {"ok": ok, "steps": records})
    return 0 if ok else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kit", type=Path, help="the folder prepare.py filled")
    ap.add_argument("out", type=Path, help="where the results go (on the device machine: $OUT)")
    ap.add_argument("--repo", type=Path, default=REPO, help="the ustc checkout (default: this one)")
    ap.add_argument("--dry-run", action="store_true", help="report and print the plan; install and run nothing")
    ap.add_argument("--no-tests", action="store_true", help="skip pytest -m gpu")
    ap.add_argument("--no-bench", action="store_true", help="skip benchmarks/bench_gpu.py --write")
    ap.add_argument("--pytest-args", default="", help="extra pytest arguments, one shell-quoted string")
    ap.add_argument("--bench-args", default="", help="extra bench_gpu.py arguments, e.g. '--repeat 5'")
    ap.add_argument("--pytest-timeout", type=int, default=Options.pytest_timeout)
    ap.add_argument("--bench-timeout", type=int, default=Options.bench_timeout)
    args = ap.parse_args(argv)
    options = Options(not args.no_tests, not args.no_bench, tuple(shlex.split(args.pytest_args)),
                      tuple(shlex.split(args.bench_args)), args.pytest_timeout, args.bench_timeout)
    return validate(args.kit.resolve(), args.out.resolve(), args.repo.resolve(), options, args.dry_run)


if __name__ == "__main__":
    sys.exit(main())
