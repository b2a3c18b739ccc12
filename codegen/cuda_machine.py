"""Facts about compiled CUDA kernels, read without a GPU: resources from the linker's
verbose log, instruction counts from PTX, and occupancy from both (sm_90 limits).

* :func:`resources` parses nvJitLink's ``-verbose`` info log (ptxas' lines): registers,
  spill stores / loads, stack frame, shared, constant and local memory, barriers.
* :func:`instructions` counts PTX opcodes the static checks care about: local-memory
  loads and stores, atomics and reductions, warp shuffles and votes, vector and
  read-only (``.nc``) global loads.
* :func:`occupancy` is the CUDA occupancy calculator's arithmetic for one multiprocessor
  (:data:`SM90`): blocks resident at once, limited by registers, shared memory, warps or
  the block count.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Machine:
    """One multiprocessor's limits (CUDA C Programming Guide, compute capability table)."""

    name: str
    registers: int = 65536        # 32-bit registers
    register_unit: int = 256      # registers are allocated to a warp in units of this many
    max_registers: int = 255      # a thread
    warps: int = 64
    blocks: int = 32
    shared: int = 233472          # bytes (228 KiB)
    shared_unit: int = 128
    shared_reserved: int = 1024   # bytes the system keeps per block


SM90 = Machine("sm_90")


@dataclass(frozen=True)
class Resources:
    """What ptxas allotted one kernel (bytes, except registers and barriers)."""

    registers: int
    spill_stores: int
    spill_loads: int
    stack: int
    shared: int
    constant: int
    local: int
    barriers: int


def _largest(pattern: str, text: str) -> int:
    return max((int(m) for m in re.findall(pattern, text)), default=0)


def resources(log: str) -> Resources:
    """:class:`Resources` from a linker log of one kernel (the largest figure where a log
    lists several functions: a kernel and device functions it was not inlined into)."""
    return Resources(registers=_largest(r"[Uu]sed (\d+) registers", log),
                     spill_stores=_largest(r"(\d+) bytes spill stores", log),
                     spill_loads=_largest(r"(\d+) bytes spill loads", log),
                     stack=max(_largest(r"(\d+) bytes stack frame", log), _largest(r"(\d+) stack\b", log)),
                     shared=_largest(r"(\d+) bytes smem", log),
                     constant=_largest(r"(\d+) bytes cmem\[0\]", log),
                     local=_largest(r"(\d+) bytes lmem", log),
                     barriers=_largest(r"used (\d+) barriers", log))


@dataclass(frozen=True)
class Instructions:
    """Counts of PTX instructions (static: each occurrence in the text once)."""

    local_loads: int
    local_stores: int
    atomics: int          # atom.* and red.*
    shuffles: int         # shfl.sync
    votes: int            # vote.sync (ballot, any, all)
    global_loads: int
    vector_loads: int     # ld.global[.nc].v2 / .v4
    readonly_loads: int   # ld.global.nc
    max_threads: int      # .maxntid (0: no launch bounds)
    min_blocks: int       # .minnctapersm


PATTERNS = {"local_loads": r"\bld\.local\.", "local_stores": r"\bst\.local\.", "atomics": r"\b(?:atom|red)\.",
            "shuffles": r"\bshfl\.sync\.", "votes": r"\bvote\.sync\.", "global_loads": r"\bld\.global\.",
            "vector_loads": r"\bld\.global\.(?:nc\.)?(?:[a-z]+\.)*v[24]\.", "readonly_loads": r"\bld\.global\.nc\."}


def instructions(ptx: str) -> Instructions:
    """:class:`Instructions` of a PTX module (comments dropped first)."""
    code = re.sub(r"//[^\n]*", "", ptx)
    counts = {name: len(re.findall(pattern, code)) for name, pattern in PATTERNS.items()}
    return Instructions(**counts, max_threads=_largest(r"\.maxntid\s+(\d+)", code),
                        min_blocks=_largest(r"\.minnctapersm\s+(\d+)", code))


@dataclass(frozen=True)
class Occupancy:
    """Blocks of one kernel a multiprocessor holds at once, and what limits them."""

    blocks: int
    warps: int
    fraction: float       # of the multiprocessor's warps
    limit: str            # "registers" | "shared memory" | "warps" | "blocks"

    def describe(self, machine: Machine = SM90) -> str:
        return (f"{self.blocks} blocks, {self.warps}/{machine.warps} warps ({self.fraction:.0%}) a multiprocessor, "
                f"limited by {self.limit}")


def _up(n: int, unit: int) -> int:
    return -(-n // unit) * unit


def occupancy(registers: int, threads: int, shared: int = 0, machine: Machine = SM90) -> Occupancy:
    """The occupancy of blocks of ``threads`` threads using ``registers`` a thread and ``shared``
    bytes of shared memory a block (the occupancy calculator's rules: registers by warp in
    ``register_unit`` steps, shared memory in ``shared_unit`` steps plus the reserved bytes)."""
    if threads <= 0 or registers > machine.max_registers:
        return Occupancy(0, 0, 0.0, "registers" if threads > 0 else "warps")
    warps = -(-threads // 32)
    per_warp = _up(max(registers, 1) * 32, machine.register_unit)
    limits = {"blocks": machine.blocks, "warps": machine.warps // warps,
              "registers": machine.registers // per_warp // warps,
              "shared memory": machine.shared // _up(shared + machine.shared_reserved, machine.shared_unit)}
    limit = min(limits, key=lambda k: (limits[k], k != "registers"))
    blocks = limits[limit]
    return Occupancy(blocks, blocks * warps, blocks * warps / machine.warps, limit)
