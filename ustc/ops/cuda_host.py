"""Host side of the ``cuda`` target: devices, schedules, generated modules, launches.

:mod:`ustc.ops.runtime` calls in here when ``target="cuda"``. Nothing here imports
``numba.cuda`` at module level (``import ustc`` stays free of it).

* Where kernels run: on a GPU (CuPy arrays and torch CUDA tensors are passed
  zero-copy through ``__cuda_array_interface__``; host arrays are copied by Numba),
  or in Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``), where NumPy arrays play
  device arrays. Without either, running raises :class:`ustc.DeviceError`; generating
  source and PTX (``ustc compile --target cuda``) needs neither.
* The cache key adds the compute capability (``"simulator"`` there), the caller's
  schedule and the lanes per row that row statistics ask for
  (:func:`codegen.cuda_schedule.vector_width`), so one kernel serves every matrix
  whose rows fall in the same bucket.
* Sparse outputs: a writer kernel (``codegen.writer``; the plan's ``split``) writes the
  output in its own format, a thread per chunk: the host sizes the buffers from the
  table of counts (:func:`writer_place`: its rows and where the buffers live,
  ``ustc.ops.written``). Any other sparse output is counted and filled as coordinate
  lists on the device; the host assembles the output format (then moves it to the
  operands' device).
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading

import numpy as np

from ..errors import DeviceError
from ..tensor import packages
from ..tensor.tensor import Tensor

_compile_only = threading.local()


def simulator() -> bool:
    """Kernels run in Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``)."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


@functools.lru_cache(maxsize=1)
def compute_capability() -> str:
    """``"9.0"`` for the current device, ``"simulator"``, or ``"none"`` without a device."""
    if simulator():
        return "simulator"
    from numba import cuda

    if not cuda.is_available():
        return "none"
    major, minor = cuda.get_current_device().compute_capability
    return f"{major}.{minor}"


def require_device() -> None:
    if compute_capability() != "none":
        return
    raise DeviceError("the cuda target needs an NVIDIA GPU with a CUDA driver, or Numba's CUDA simulator "
                      "(NUMBA_ENABLE_CUDASIM=1); 'ustc compile --target cuda' works without either")


# -- operands ------------------------------------------------------------------------------

def device_array(value):
    """A device array (CuPy, or torch CUDA viewed through DLPack) or None for host data."""
    if packages.is_cupy(value):
        return value
    if packages.is_torch(value) and value.device.type == "cuda":  # pragma: no cover - needs a GPU
        import cupy

        return cupy.from_dlpack(value.detach())
    return None


def check_devices(bindings: dict) -> str:
    """The device all tensor operands share; DeviceError naming both when they differ."""
    seen: dict[str, str] = {}
    for name, value in bindings.items():
        if isinstance(value, Tensor):
            device = value.device
        elif packages.is_cupy(value) or packages.is_torch(value):
            device = packages.device_of(value)
        else:
            continue
        seen.setdefault(device, name)
    if len(seen) > 1:
        (d0, n0), (d1, n1) = list(seen.items())[:2]
        raise DeviceError(f"operands live on different devices: '{n0}' is on {d0}, '{n1}' is on {d1}; "
                          f"move them with t.to('{d1}') or t.to('{d0}')")
    return next(iter(seen), "cpu")


# -- cache key and generation --------------------------------------------------------------

def row_statistics(tensors: dict) -> tuple[dict, list]:
    """``({"A:1": lanes}, ["A:1", ...])``: lanes for compressed levels whose mean / longest
    segment asks for them (:func:`~ustc.codegen.cuda_schedule.vector_width`), and the levels
    whose segments are skewed (:func:`~ustc.codegen.cuda_schedule.skewed`)."""
    from ..codegen.cuda_schedule import skewed, vector_width

    widths, skew = {}, []
    for name, b in tensors.items():
        t = b.value
        if not isinstance(t, Tensor):
            continue
        for (k, kind), pos in t.raw_buffers.items():
            if kind != "pos" or getattr(pos, "ndim", 1) != 1 or len(pos) < 2:
                continue
            longest = int((pos[1:] - pos[:-1]).max())
            mean = float((pos[-1] - pos[0]) / (len(pos) - 1))
            if vector_width(mean, longest):
                widths[f"{name}:{k}"] = vector_width(mean, longest)
            if skewed(mean, longest):
                skew.append(f"{name}:{k}")
    return widths, sorted(skew)


def lane_buckets(run) -> dict:
    """``{"A:2": 2, "k": 16}``: :func:`~ustc.codegen.cuda_schedule.lane_bucket` of every level
    size of the tensor operands and of every index extent (block_tile widths)."""
    from ..codegen.cuda_schedule import lane_bucket

    out = {f"{i}": lane_bucket(n) for i, n in run.extents.items()}
    for name, b in run.tensors.items():
        if isinstance(b.value, Tensor):
            for k, n in enumerate(b.value.layout.level_shape):
                out[f"{name}:{k}"] = lane_bucket(n)
    return out


def fields(run) -> dict:
    widths, skew = row_statistics(run.tensors)
    return {"cc": compute_capability(), "schedule": None if run.schedule is None else str(run.schedule),
            "widths": widths, "skew": skew, "lanes": lane_buckets(run)}


def _level(text: str):
    name, _, level = text.rpartition(":")
    return (name, int(level)) if name else text


def generate(run, operands: dict, header: tuple) -> str:
    """The CUDA module's source: kernels, launch wrappers, ``PLAN`` and ``SCHEDULES``."""
    from ..codegen import cuda_bfloat16, cuda_blocks, optimize
    from ..codegen.compile import compile_program
    from ..codegen.cuda_schedule import choose_schedule
    from ..codegen.emit_cuda import CudaEmitter
    from ..codegen.plans import plans_text

    module = compile_program(run.program, operands, header, optimize.CUDA)
    module = cuda_bfloat16.explicit(module, frozenset(n for n, o in operands.items() if o.dtype == "bfloat16"))
    module = cuda_blocks.constant_sizes(module, fixed_sizes(module, operands))  # block shapes compile-time
    f = run.fields
    widths = {_level(k): w for k, w in f["widths"].items()}
    lanes = {_level(k): w for k, w in f["lanes"].items()}
    skew = frozenset(_level(k) for k in f["skew"])
    sim = f["cc"] == "simulator"
    dtypes = {name: o.dtype for name, o in operands.items()}  # vector loads take whole 16 bytes of values
    schedules = {fn.name: choose_schedule(fn, widths, run.schedule, simulator=sim, lanes=lanes, skew=skew,
                                          dtypes=dtypes) for fn in module.functions}
    text = CudaEmitter().emit(module, schedules)
    described = {name: s.describe() for name, s in schedules.items()}
    return text + f"\n\n{plans_text(module.meta['plan'])}\nSCHEDULES = {described!r}\n"


def fixed_sizes(module, operands: dict) -> dict:
    """``{function: {(tensor, level): size}}``: the level sizes a kernel takes whose value its
    operand's format fixes whatever the shape (``i mod r``: a block's rows), for
    :func:`ustc.codegen.cuda_blocks.constant_sizes`. A converted operand's format is the plan's."""
    from ..codegen.roles import Kind
    from ..format.ir import TensorFormat

    out = {}
    for plan in module.meta.get("plan", ()):
        convert, alias = dict(plan.convert), dict(plan.alias)
        fixed = {}
        for role in plan.params:
            if role.kind is not Kind.SIZE:
                continue
            text = convert.get(role.tensor)
            fmt = TensorFormat.parse(text) if text else operands[alias.get(role.tensor, role.tensor)].format
            size = _fixed_extent(fmt, role.level)
            if size is not None:
                fixed[(role.tensor, role.level)] = size
        out[plan.function] = fixed
    return out


def _fixed_extent(fmt, level: int):
    """The extent of ``fmt``'s ``level`` when no dimension's size changes it, else None."""
    small, large = (fmt.level_shape((n,) * fmt.ndim)[level] for n in (1 << 20, (1 << 21) + 3))
    return small if small == large else None


# -- sparse outputs written in their own format ----------------------------------------------

#: chunks of a writer kernel per multiprocessor: a thread per chunk, 256 keep every SM's warps
#: busy while the table of counts (chunks x levels x 8 bytes) stays small to bring to the host
CHUNKS_PER_SM = 256
#: the simulator runs each thread in Python: a few chunks, so small tensors still cross borders
SIMULATED_CHUNKS = 3
#: multiprocessors assumed where no device can be asked (a model of one runs the kernel): an H100's
NOMINAL_SMS = 132


def writer_chunks(extent: int) -> int:
    """Rows of a writer kernel's table of counts: :data:`CHUNKS_PER_SM` per multiprocessor (of
    the device, or :data:`NOMINAL_SMS` without one; a few in the simulator, 1 when launches are
    only recorded), at most ``extent`` (the outermost loop's: a chunk ends at a border of that
    index, so more would be empty), at least 1."""
    if getattr(_compile_only, "record", None) is not None:
        chunks = 1
    elif simulator():
        chunks = SIMULATED_CHUNKS
    elif compute_capability() == "none":
        chunks = NOMINAL_SMS * CHUNKS_PER_SM
    else:  # pragma: no cover - needs a GPU
        from numba import cuda

        chunks = cuda.get_current_device().MULTIPROCESSOR_COUNT * CHUNKS_PER_SM
    return max(1, min(chunks, int(extent)))


def writer_place(device: str, extent: int):
    """:class:`ustc.ops.written.Place` of a writer kernel on the cuda target, on the operands'
    ``device``: CuPy buffers when they live on a GPU, else NumPy (the simulator's device
    arrays, its 'cuda' tensors included; on a GPU Numba copies host arrays over and back),
    with :func:`writer_chunks` rows."""
    from .written import Place

    if device == "cuda" and not simulator():  # pragma: no cover - needs a GPU
        import cupy

        return Place(cupy, writer_chunks(extent), device="cuda", package=packages.CUPY)
    return Place(np, writer_chunks(extent), device=device)


# -- launching -----------------------------------------------------------------------------

def launcher(module, name: str, views: dict):
    """The launch wrapper of the kernel ``name``, bound to the operands' current stream."""
    launch = getattr(module, "launch_" + name)
    record = getattr(_compile_only, "record", None)
    if record is not None:
        return functools.partial(_recorded, module, name, launch, record)
    require_device()
    if simulator():
        install_simulated_shuffle()
    stream = current_stream(views.values())
    return functools.partial(on_stream, launch, stream) if stream is not None else launch


def on_stream(launch, stream, *args):
    """``launch(*args, stream=stream)`` with every device array viewed unsynchronised.

    Numba synchronises the stream named in an argument's ``__cuda_array_interface__``
    before each launch (a host wait for all queued work). The kernel runs on the stream
    the operands' package has current, so stream order already puts it after the work
    that wrote them; across streams the caller orders, as CuPy and torch expect."""
    from numba import cuda

    views = [cuda.as_cuda_array(_bits(a), sync=False) if _device_array(a) else a for a in args]
    return launch(*views, stream=stream)


def _bits(a):
    """A bfloat16 device array as its uint16 bits (what the kernels read, ``codegen.cuda_bfloat16``;
    Numba has no bfloat16 array type to view it with)."""
    return a.view(np.uint16) if str(getattr(a, "dtype", "")) == "bfloat16" else a


def _device_array(a) -> bool:
    return hasattr(a, "__cuda_array_interface__") and not getattr(a, "__cuda_ndarray__", False)   # not Numba's


class _Recorder:
    """Stands in for a kernel: ``kernel[grid, block, stream](*args)`` records, launches nothing."""

    def __init__(self, name, kernel, record):
        self.name, self.kernel, self.record = name, kernel, record

    def __getitem__(self, config):
        return lambda *args: self.record.append((self.name, self.kernel, args))


def _recorded(module, name, launch, record, *args):
    kernel = getattr(module, name)
    setattr(module, name, _Recorder(name, kernel, record))
    try:
        return launch(*args)
    finally:
        setattr(module, name, kernel)


@contextlib.contextmanager
def compile_only(record: list):
    """Within: kernels are not launched; ``(name, kernel, arguments)`` of each launch go to
    ``record`` (what :mod:`ustc.ops.cuda_ptx` compiles to PTX). Needs no device."""
    _compile_only.record = record
    try:
        yield record
    finally:
        _compile_only.record = None


def current_stream(values):  # pragma: no cover - a real stream needs a GPU
    """CuPy's (or torch's) current stream as a Numba stream, when an operand lives there."""
    for value in values:
        arrays = [value] if not isinstance(value, Tensor) else [value.raw_values]
        for a in arrays:
            if packages.is_cupy(a):
                import cupy
                from numba import cuda

                return cuda.external_stream(cupy.cuda.get_current_stream().ptr)
            if packages.is_torch(a) and a.device.type == "cuda":
                import torch
                from numba import cuda

                return cuda.external_stream(torch.cuda.current_stream().cuda_stream)
    return None


def place(result: Tensor, device: str) -> Tensor:
    """A sparse output assembled on the host, moved to the operands' device."""
    return result.to(device) if device == "cuda" and result.device != "cuda" else result


# -- the simulator's missing warp shuffle --------------------------------------------------

_SHUFFLE_LOCK = threading.Lock()


def install_simulated_shuffle() -> None:
    """Numba's simulator has no ``shfl_*_sync``; add ``shfl_down_sync`` with the hardware's
    meaning: the 32 lanes of a warp meet at a barrier, each reads lane + delta (its own value
    past the warp's end). Every lane of the warp must call it, as on the GPU."""
    from numba.cuda.simulator import kernelapi

    cls = kernelapi.FakeCUDAModule
    if getattr(cls, "_ustc_shuffle", False):
        return

    def shfl_down_sync(self, mask, value, delta):
        thread = threading.current_thread()
        lane, warp = thread.thread_id % 32, (tuple(thread.blockIdx), thread.thread_id // 32)
        with _SHUFFLE_LOCK:
            warps = self.__dict__.setdefault("_ustc_warps", {})
            if warp not in warps:
                block = self.blockDim.x * self.blockDim.y * self.blockDim.z
                lanes = min(32, block - warp[1] * 32)
                warps[warp] = (threading.Barrier(lanes), [None] * 32, lanes)
            barrier, slots, lanes = warps[warp]
        slots[lane] = value
        barrier.wait()
        source = lane + delta
        out = slots[source] if source < lanes else value
        barrier.wait()
        return type(value)(out) if isinstance(value, (int, float, np.generic)) else out

    cls.shfl_down_sync = shfl_down_sync
    cls._ustc_shuffle = True
