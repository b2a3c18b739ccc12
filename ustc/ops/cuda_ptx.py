"""PTX and cubins of generated CUDA kernels, without a GPU or a CUDA driver.

:func:`compile_run` runs a prepared ``cuda`` program with launches recorded instead
of made (:func:`ustc.ops.cuda_host.compile_only`), then compiles every recorded
kernel for the recorded argument types with ``numba.cuda.compile_ptx`` (NVVM, from
the ``cuda`` extra's wheels) and links the PTX to a cubin with nvJitLink
(``cuda.bindings.nvjitlink``). The linker's verbose log gives registers, spills and
stack per kernel. Numba's CUDA simulator has no ``compile_ptx``: run this in a
process without ``NUMBA_ENABLE_CUDASIM``.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass

from ..errors import UstcError

ARCH = (9, 0)


@dataclass(frozen=True)
class CompiledKernel:
    name: str            # kernel function in the generated module
    statement: str
    signature: str       # the argument types it was compiled for
    ptx: str
    cubin_bytes: int
    registers: int
    spill_stores: int    # bytes
    spill_loads: int     # bytes
    stack: int           # bytes of stack frame
    log: str

    def report(self) -> str:
        return (f"{self.name}: {self.registers} registers, {self.spill_stores} bytes spill stores, "
                f"{self.spill_loads} bytes spill loads, {self.stack} bytes stack, cubin {self.cubin_bytes} bytes "
                f"(sm_{ARCH[0]}{ARCH[1]})")


def compile_run(run, cc: tuple[int, int] = ARCH) -> list[CompiledKernel]:
    """Every kernel ``run`` launches, compiled to PTX for ``cc`` and linked to a cubin."""
    from . import cuda_host

    if cuda_host.simulator():
        raise UstcError("PTX needs NVVM, which Numba's CUDA simulator replaces: unset NUMBA_ENABLE_CUDASIM")
    record: list = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with cuda_host.compile_only(record):
            run.run()
    statements = {p.function: p.statement for p in _plans(run)}
    out, seen = [], set()
    for name, kernel, args in record:
        sig = tuple(_typeof(a) for a in args)
        if (name, sig) in seen:
            continue
        seen.add((name, sig))
        out.append(compile_kernel(name, kernel, sig, statements.get(name, ""), cc))
    return out


def _plans(run):
    from .. import cache
    from ..codegen.plans import plans_of

    module, _ = cache.load(run.fields, run.generate)
    return plans_of(module)


def _typeof(value):
    import numba

    return numba.typeof(value)


def compile_kernel(name: str, kernel, sig: tuple, statement: str = "", cc=ARCH) -> CompiledKernel:
    from numba import cuda

    if cuda.compile_ptx is None:  # pragma: no cover - simulator
        raise UstcError("numba.cuda.compile_ptx is unavailable (simulator mode)")
    bounds = getattr(kernel, "targetoptions", {}).get("launch_bounds")  # the schedule's, as launched
    ptx, _ = cuda.compile_ptx(kernel.py_func, sig, cc=cc, launch_bounds=bounds)
    size, log = link(ptx, cc)
    info = parse_log(log)
    return CompiledKernel(name, statement, ", ".join(str(t) for t in sig), ptx, size, **info, log=log)


def link(ptx: str, cc=ARCH) -> tuple[int, str]:
    """Link ``ptx`` to a cubin with nvJitLink; returns (cubin size, verbose log)."""
    from cuda.bindings import nvjitlink

    handle = nvjitlink.create(2, [f"-arch=sm_{cc[0]}{cc[1]}", "-verbose"])
    try:
        data = ptx.encode()
        try:
            nvjitlink.add_data(handle, nvjitlink.InputType.PTX, data, len(data), "kernel.ptx")
            nvjitlink.complete(handle)
        except nvjitlink.nvJitLinkError as exc:
            raise UstcError(f"nvJitLink failed: {exc}\n{_log(nvjitlink, handle, error=True)}") from None
        size = nvjitlink.get_linked_cubin_size(handle)
        cubin = bytearray(size)
        nvjitlink.get_linked_cubin(handle, cubin)
        return size, _log(nvjitlink, handle)
    finally:
        nvjitlink.destroy(handle)


def _log(nvjitlink, handle, error: bool = False) -> str:
    size = (nvjitlink.get_error_log_size if error else nvjitlink.get_info_log_size)(handle)
    buf = bytearray(size)
    if size:
        (nvjitlink.get_error_log if error else nvjitlink.get_info_log)(handle, buf)
    return buf.decode(errors="replace").rstrip("\x00")


def parse_log(log: str) -> dict:
    """Registers, spills and stack from ptxas' verbose lines (the largest over the functions)."""
    def biggest(pattern: str) -> int:
        return max((int(m) for m in re.findall(pattern, log)), default=0)

    return {"registers": biggest(r"[Uu]sed (\d+) registers"),
            "spill_stores": biggest(r"(\d+) bytes spill stores"),
            "spill_loads": biggest(r"(\d+) bytes spill loads"),
            "stack": biggest(r"(\d+) bytes stack frame")}
