"""What ustc needs on the GPU machine, and whether what is installed there will do.

:data:`REQUIREMENTS` is the one list both scripts read: ``prepare.py`` downloads a wheel
for each (in order, optional ones only while the kit stays within its budget) and
``validate.py`` installs a kit wheel only where :func:`decide` finds the installed
version missing or outside the requirement's specifier.

Specifiers are the small subset this kit writes (``==0.68.*``, ``>=1.2,<2``, ``!=3.14.1``):
versions compare by their numeric release only (``2.11.0+cu130`` is ``(2, 11, 0)``; a
pre-release such as ``0.50.0rc1`` counts as its release, which is what a GPU image's
nightly builds need here).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Requirement:
    """A distribution ustc needs: ``name`` (PyPI spelling), ``spec`` (``pip download`` /
    :func:`satisfies` syntax). ``xz``: ship the wheel xz-packed (it is too large plain);
    ``optional``: the GPU image normally has it, so the kit carries it only if room is left."""

    name: str
    spec: str
    xz: bool = False
    optional: bool = False

    @property
    def pip(self) -> str:
        """The requirement as pip reads it: ``numba==0.68.*``."""
        return f"{self.name}{self.spec}"


#: pyproject's runtime dependencies the GPU image may lack or have in other versions
#: (numpy < 2.6 and scipy come with the image and are too large to carry).
REQUIREMENTS: tuple[Requirement, ...] = (
    Requirement("numba", "==0.68.*"),
    Requirement("llvmlite", "==0.50.*", xz=True),
    Requirement("numba-cuda", ">=0.30.4,<0.31"),
    Requirement("lark", ">=1.2,<2"),
    Requirement("platformdirs", ">=4"),
    Requirement("networkx", ">=3.2"),
    Requirement("cuda-pathfinder", ">=1.4,<2"),
    Requirement("packaging", ">=20"),
    Requirement("cuda-core", ">=0.5.1,<2", optional=True),
    Requirement("cuda-bindings", ">=12.9.1,<14", optional=True),
)

#: present in the image and checked, never installed by the kit
CHECKED_ONLY: tuple[Requirement, ...] = (
    Requirement("numpy", ">=1.26,<2.6"),
    Requirement("scipy", ">=1.11"),
)


def normalise(name: str) -> str:
    """PEP 503 name: ``Numba_CUDA`` → ``numba-cuda``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def release(version: str) -> tuple[int, ...]:
    """The numeric release of ``version``: ``"2.11.0+cu130"`` → ``(2, 11, 0)``; ``"0.50.0rc1"`` → ``(0, 50, 0)``."""
    head = re.match(r"\s*v?(\d+(?:\.\d+)*)", version)
    if head is None:
        raise ValueError(f"not a version: {version!r}")
    return tuple(int(p) for p in head.group(1).split("."))


def _padded(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    n = max(len(a), len(b))
    return a + (0,) * (n - len(a)), b + (0,) * (n - len(b))


def _clause(version: tuple[int, ...], clause: str) -> bool:
    match = re.fullmatch(r"\s*(==|!=|>=|<=|>|<|~=)\s*([0-9][0-9a-zA-Z.*+]*)\s*", clause)
    if match is None:
        raise ValueError(f"unsupported version clause: {clause!r}")
    op, text = match.groups()
    if text.endswith(".*"):
        if op not in ("==", "!="):
            raise ValueError(f"a wildcard needs == or !=: {clause!r}")
        prefix = release(text[:-2])
        same = version[:len(prefix)] == prefix
        return same if op == "==" else not same
    a, b = _padded(version, release(text))
    if op == "~=":
        upper = release(text)[:-1]
        return a >= b and version[:len(upper)] == upper
    return {"==": a == b, "!=": a != b, ">=": a >= b, "<=": a <= b, ">": a > b, "<": a < b}[op]


def satisfies(version: str | None, spec: str) -> bool:
    """Whether ``version`` meets every comma-separated clause of ``spec`` (None: not installed)."""
    if version is None:
        return False
    mine = release(version)
    return all(_clause(mine, c) for c in spec.split(",") if c.strip())


@dataclass(frozen=True)
class Decision:
    """What ``validate.py`` does about one requirement: ``keep`` the installed version,
    ``install`` the kit's wheel, or report it ``unavailable`` (needed, but not in the kit)."""

    name: str
    spec: str
    found: str | None
    action: str          # "keep" | "install" | "unavailable"
    wheel: str = ""      # the kit file installed (install)
    version: str = ""    # the kit wheel's version (install)

    def line(self) -> str:
        have = self.found or "missing"
        if self.action == "install":
            return f"{self.name}: {have}, needs {self.spec} -> install {self.version} from {self.wheel}"
        if self.action == "unavailable":
            return f"{self.name}: {have}, needs {self.spec} -> NOT IN THE KIT, tests may fail"
        return f"{self.name}: {have} satisfies {self.spec}"


def decide(found: dict, entries, requirements=REQUIREMENTS + CHECKED_ONLY) -> tuple[Decision, ...]:
    """One :class:`Decision` per requirement, from installed versions ``found``
    (``{name: version or None}``) and the kit's manifest ``entries`` (objects with
    ``name``, ``version``, ``file``)."""
    wheels = {normalise(e.name): e for e in entries}
    out = []
    for req in requirements:
        have = found.get(normalise(req.name))
        if satisfies(have, req.spec):
            out.append(Decision(req.name, req.spec, have, "keep"))
            continue
        entry = wheels.get(normalise(req.name))
        if entry is None or not satisfies(entry.version, req.spec):
            out.append(Decision(req.name, req.spec, have, "unavailable"))
        else:
            out.append(Decision(req.name, req.spec, have, "install", entry.file, entry.version))
    return tuple(out)
