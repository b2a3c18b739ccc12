"""Static checks of generated CUDA kernels' machine code, with no GPU and no driver.

Each generated kernel states under its ``# schedule:`` line what its schedule promises
(:func:`codegen.emit_cuda.promises`)::

    # promises: at most 128 registers a thread (2 blocks of 256 threads a multiprocessor), warp shuffles, no atomics
    @cuda.jit(cache=True, **bounds(256, 2))

:func:`check_run` compiles every kernel a prepared ``cuda`` program launches to PTX for
sm_90 with the kernel's own launch bounds, links it to a cubin with nvJitLink, and holds
the result to that promise (:func:`problems`):

* it links, with zero spill stores and loads and no stack frame or local memory
  (``ld.local`` / ``st.local`` absent from the PTX);
* registers within the budget, and the launch bounds reached the PTX (``.maxntid``,
  ``.minnctapersm``);
* warp shuffles exactly where the schedule shuffles, atomics (``atom`` / ``red``)
  exactly where it updates atomically, read-only loads (``ld.global.nc``) exactly where
  it reads operands it never writes (``codegen.cuda_loads``).

Occupancy (:func:`codegen.cuda_machine.occupancy`) is reported, not checked.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field

from .cuda_machine import Instructions, Occupancy, Resources, instructions, occupancy, resources
from .plans import plans_of

ARCH = (9, 0)
PROMISE = re.compile(r"^# promises: at most (\d+) registers a thread \((\d+) blocks of (\d+) threads a "
                     r"multiprocessor\), (no )?warp shuffles, (no )?atomics(?:, (no )?(read-only) loads)?(, vector loads)?\n"
                     r"(?:#[^\n]*\n)*@cuda\.jit[^\n]*\n"
                     r"def (\w+)\(", re.M)


@dataclass(frozen=True)
class Promise:
    """What a kernel's schedule promises about its machine code."""

    max_registers: int
    min_blocks: int
    threads: int
    shuffles: bool
    atomics: bool
    readonly: bool = False    # loads operands it never writes through ld.global.nc
    vectors: bool = False     # reads a row's values in vector loads (ld.global.nc.v2 / .v4)


def declared(source: str) -> dict[str, Promise]:
    """``{kernel name: Promise}`` from a generated CUDA module's ``# promises:`` lines."""
    return {m.group(9): Promise(int(m.group(1)), int(m.group(2)), int(m.group(3)), not m.group(4), not m.group(5),
                                bool(m.group(7)) and not m.group(6), bool(m.group(8)))
            for m in PROMISE.finditer(source)}


def problems(promise: Promise, res: Resources, ins: Instructions) -> tuple[str, ...]:
    """Where the machine code breaks ``promise`` (empty: it keeps it)."""
    out = []
    if res.spill_stores or res.spill_loads:
        out.append(f"spills: {res.spill_stores} bytes stored, {res.spill_loads} bytes loaded")
    if not 0 < res.registers <= promise.max_registers:
        out.append(f"{res.registers} registers, budget {promise.max_registers}")
    if res.stack or res.local or ins.local_loads or ins.local_stores:
        out.append(f"local memory: {res.stack} bytes stack, {res.local} bytes lmem, "
                   f"{ins.local_loads} ld.local, {ins.local_stores} st.local")
    if (ins.max_threads, ins.min_blocks) != (promise.threads, promise.min_blocks):
        out.append(f"launch bounds in the PTX: .maxntid {ins.max_threads}, .minnctapersm {ins.min_blocks}; "
                   f"declared {promise.threads}, {promise.min_blocks}")
    if bool(ins.shuffles) != promise.shuffles:
        out.append(f"{ins.shuffles} shfl.sync, the schedule {'shuffles' if promise.shuffles else 'has no shuffles'}")
    if bool(ins.atomics) != promise.atomics:
        out.append(f"{ins.atomics} atomics, the schedule {'updates atomically' if promise.atomics else 'has none'}")
    if promise.vectors and not ins.vector_loads:
        out.append("no vector loads, the schedule reads the row's values in vector loads")
    if bool(ins.readonly_loads) != promise.readonly:
        out.append(f"{ins.readonly_loads} ld.global.nc, the kernel "
                   f"{'reads operands through the read-only path' if promise.readonly else 'has no read-only loads'}")
    return tuple(out)


@dataclass(frozen=True)
class Report:
    """One kernel compiled for one argument signature, and what the checks found."""

    name: str
    statement: str
    signature: str
    promise: Promise
    resources: Resources
    instructions: Instructions
    occupancy: Occupancy
    cubin_bytes: int
    problems: tuple[str, ...]
    ptx: str = field(default="", repr=False, compare=False)

    @property
    def ok(self) -> bool:
        return not self.problems and self.cubin_bytes > 0

    def summary(self) -> str:
        r, i = self.resources, self.instructions
        text = (f"{self.name}: {r.registers} registers (budget {self.promise.max_registers}), "
                f"spills {r.spill_stores}/{r.spill_loads} bytes, stack {r.stack}, lmem {r.local}, smem {r.shared}, "
                f"cubin {self.cubin_bytes} bytes (sm_{ARCH[0]}{ARCH[1]}); occupancy at {self.promise.threads} threads: "
                f"{self.occupancy.describe()}; PTX: {i.global_loads} global loads ({i.vector_loads} vector, "
                f"{i.readonly_loads} read-only), {i.shuffles} shuffles, {i.atomics} atomics, "
                f"{i.local_loads + i.local_stores} local")
        return text + ("; checks: ok" if self.ok else "; CHECKS FAILED: " + "; ".join(self.problems))

    def record(self) -> dict:
        """JSON-ready facts (no PTX)."""
        r, i = self.resources, self.instructions
        return {"name": self.name, "signature": self.signature, "registers": r.registers,
                "budget": self.promise.max_registers, "spill_stores": r.spill_stores, "spill_loads": r.spill_loads,
                "stack": r.stack, "local": r.local, "shared": r.shared, "cubin_bytes": self.cubin_bytes,
                "threads": self.promise.threads, "occupancy": round(self.occupancy.fraction, 4),
                "occupancy_limit": self.occupancy.limit, "shuffles": i.shuffles, "atomics": i.atomics,
                "local_ops": i.local_loads + i.local_stores, "vector_loads": i.vector_loads,
                "readonly_loads": i.readonly_loads,
                "problems": list(self.problems)}


def compile_kernel(kernel, sig: tuple, cc=ARCH) -> tuple[str, str, int]:
    """``(ptx, linker log, cubin bytes)`` of a ``cuda.jit`` kernel for ``sig``, compiled with the
    launch bounds its decorator gave it."""
    from numba import cuda

    from ustc.errors import UstcError
    from ustc.ops.cuda_ptx import link

    if cuda.compile_ptx is None:  # pragma: no cover - the simulator replaces numba.cuda
        raise UstcError("PTX needs NVVM, which Numba's CUDA simulator replaces: unset NUMBA_ENABLE_CUDASIM")
    bounds = getattr(kernel, "targetoptions", {}).get("launch_bounds")
    ptx, _ = cuda.compile_ptx(kernel.py_func, sig, cc=cc, launch_bounds=bounds)
    size, log = link(ptx, cc)
    return ptx, log, size


def _launches(run) -> list:
    from ustc.ops import cuda_host

    record: list = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with cuda_host.compile_only(record):
            run.run()
    return record


def check_run(run, cc=ARCH) -> list[Report]:
    """A :class:`Report` for every kernel (and argument signature) ``run`` launches."""
    import numba

    launches = _launches(run)
    module = run.module
    with open(module.__file__, encoding="utf-8") as fh:
        promised = declared(fh.read())
    statements = {p.function: p.statement for p in plans_of(module)}
    out, seen = [], set()
    for name, kernel, args in launches:
        sig = tuple(numba.typeof(a) for a in args)
        if (name, sig) in seen:
            continue
        seen.add((name, sig))
        out.append(check_kernel(name, kernel, sig, promised[name], statements.get(name, ""), cc))
    return out


def check_kernel(name: str, kernel, sig: tuple, promise: Promise, statement: str = "", cc=ARCH) -> Report:
    """The :class:`Report` of one ``cuda.jit`` kernel (generated or hand-written) compiled for
    ``sig`` with its own launch bounds, linked for ``cc`` and held to ``promise``."""
    ptx, log, size = compile_kernel(kernel, sig, cc)
    res, ins = resources(log), instructions(ptx)
    return Report(name, statement, ", ".join(str(t) for t in sig), promise, res, ins,
                  occupancy(res.registers, promise.threads, res.shared), size, problems(promise, res, ins), ptx)
