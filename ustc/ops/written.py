"""Host side of sparse outputs the kernel writes in their own format (``codegen.writer``).

The kernel runs twice with the same code: a counting pass (``emit`` 0) leaves
each iterated level's position count in ``counts``; :func:`plan_buffers` turns
the counts into every buffer's length and dtype and refuses, before allocating,
a result that would not fit the memory budget; the filling pass (``emit`` 1)
writes the buffers; :func:`tensor_of` lets each level finalize its buffers
(``pos`` of parents without children) and makes the tensor. A format with a
workspace level (``codegen.writer.Strategy.WORKSPACE``) runs three times:
count, collect (``emit`` 1, the workspaces reset in between; then the levels
finalize, so every segment is in place), fill (``emit`` 2).

A kernel that writes in chunks (the plan's ``split``: ``codegen.writer``'s
parallel chunks) gets a table of counts, one row per chunk (one per thread:
Numba hands each thread a fixed block of a ``prange``, so more chunks would
not balance better): the counting pass fills the rows, :func:`run` turns them
into each chunk's starting positions (an exclusive prefix over the rows, per
level) and the totals size the buffers.

**On the cuda target** (``codegen.optimize.CUDA``: only split writers) the
kernel's chunks are spread over GPU threads, a thread per chunk, and the table
has as many rows as :class:`Place` says (``ustc.ops.cuda_host.writer_place``:
enough chunks for every multiprocessor, a few in the simulator, never more than
the outermost loop's extent). The count table and the buffers live where the
kernel runs: NumPy arrays on the host (the simulator, or host operands, which
Numba copies to the device and back), CuPy arrays for operands on a GPU. Only
the small table of counts comes to the host to size the output (refused past
the memory budget before anything is allocated); the chunks' starting
positions go back. The levels' ``finalize`` hooks are NumPy code: on a GPU each
level's ``pos`` buffer (one entry per parent, never per entry) makes the round
trip to the host for it, its other buffers stay on the device (the cuda target
writes no level that collects, whose hook rewrites coordinates). Batched
storage lives on the host only: a batched output for operands on a device is
refused (DeviceError) before any kernel runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import DeviceError, StorageError
from ..format.ir import TensorFormat
from ..memory import BUDGET_VARIABLE, memory_budget
from ..tensor import batch
from ..tensor.dtypes import buffer_dtypes
from ..tensor.storage import Layout
from ..tensor.tensor import Tensor


@dataclass(frozen=True)
class BufferPlan:
    """Lengths and dtypes of a written tensor's buffers, known before any is allocated."""

    layout: Layout
    lengths: tuple[tuple[tuple[int, str], int], ...]   # ((level, name), length)
    dtypes: tuple[tuple[tuple[int, str], np.dtype], ...]
    positions: tuple[int, ...]                         # positions of every level
    value_dtype: np.dtype

    @property
    def nvalues(self) -> int:
        return self.positions[-1] if self.positions else 1

    @property
    def nbytes(self) -> int:
        dtypes = dict(self.dtypes)
        return sum(n * dtypes[key].itemsize for key, n in self.lengths) + self.nvalues * self.value_dtype.itemsize

    def allocate(self, xp=np) -> tuple[dict, np.ndarray]:
        """The filling passes' buffers (arrays of module ``xp``: NumPy, or CuPy on a GPU): zeroed
        where the kernel may leave elements unwritten (``pos`` of untouched parents, padding values,
        packed words start at 0), uninitialised where it writes every one (:func:`overwritten`): a
        zeroed array of a size the allocator recycles from its heap is cleared eagerly, an empty
        one costs nothing."""
        fmt = self.layout.fmt
        dtypes = dict(self.dtypes)
        buffers = {key: (xp.empty if overwritten(fmt, *key) else xp.zeros)(n, dtype=dtypes[key])
                   for key, n in self.lengths}
        return buffers, (xp.empty if overwritten(fmt, fmt.nlevels - 1, "vals") else xp.zeros)(
            self.nvalues, dtype=self.value_dtype)


def overwritten(fmt: TensorFormat, k: int, name: str) -> bool:
    """Whether the writer stores every element of level ``k``'s buffer ``name`` (``vals``: the
    values, at the last level's positions): the coordinates of a level written position by
    position (``split_append``: each position its own word; a singleton: its parent's
    position), and the values when such a level is the last one and stores no padding (a
    locate level's positions include coordinates no entry reached, a padded level's padding
    holds 0). Never ``pos``: parents without children keep 0 until ``finalize``, nor the
    coordinates of a level that ``collects`` (it reads the zeros of slots no entry took)."""
    t = fmt.levels[k].type
    by_position = t.split_append or t.one_child
    return by_position and not t.pads if name == "vals" else name == "crd" and by_position and not t.collects


def count_buffers(fmt: TensorFormat, value_dtype: np.dtype, xp=np) -> tuple[dict, np.ndarray]:
    """Empty buffers for the counting pass, in the dtypes a small result would take (the two
    passes then share one compiled signature)."""
    dtypes = buffer_dtypes(fmt, (1,) * fmt.nlevels, (0,) * fmt.nlevels, 0)
    return {key: xp.zeros(0, dtype=d) for key, d in dtypes.items()}, xp.zeros(0, dtype=value_dtype)


def plan_buffers(fmt: TensorFormat, shape, counts: np.ndarray, value_dtype: np.dtype) -> BufferPlan:
    """The buffers for the kernel's ``counts``; StorageError when they exceed the memory budget."""
    layout = Layout.of(fmt, shape)
    lengths, positions, parents = {}, [], 1
    for k, level in enumerate(fmt.levels):
        count = level.type.written_positions(parents, layout.level_shape[k], int(counts[k]))
        for name, n in level.type.write_lengths(parents, count).items():
            lengths[(k, name)] = n
        positions.append(count)
        parents = count
    most = max((n for k, n in enumerate(positions) if "pos" in fmt.levels[k].type.buffers), default=0)
    dtypes = buffer_dtypes(fmt, layout.level_shape, layout.origins, most)
    plan = BufferPlan(layout, tuple(lengths.items()), tuple((key, dtypes[key]) for key in lengths),
                      tuple(positions), np.dtype(value_dtype))
    budget = memory_budget()
    if plan.nbytes > budget:
        raise StorageError(f"a {fmt} tensor of shape {tuple(shape)} would store {plan.nvalues:,} values "
                           f"({plan.nbytes:,} bytes with its index buffers), more than the memory budget of "
                           f"{budget:,} bytes ({BUDGET_VARIABLE} sets it)")
    return plan


CHUNKS_PER_THREAD = 1  # rows of a split kernel's count table per thread (a prange is split statically)
_INT32_MAX = np.iinfo(np.int32).max


@dataclass(frozen=True)
class Place:
    """Where a written output's buffers live and how many chunks a split kernel runs: ``xp`` the
    array module (NumPy; CuPy for a kernel on a GPU whose operands live there), ``chunks`` the rows
    of the table of counts (at least 1), ``device`` the result tensor's device and ``package``
    its package."""

    xp: object
    chunks: int
    device: str = "cpu"
    package: str | None = None

    @property
    def on_host(self) -> bool:
        return self.xp is np

    def to_host(self, a) -> np.ndarray:
        return a if self.on_host else self.xp.asnumpy(a)

    def to_device(self, a):
        return a if self.on_host else self.xp.asarray(a)


def run(fmt: TensorFormat, shape, dtype, plan, call: Callable[[dict], object], place: Place | None = None) -> Tensor:
    """The output of a kernel that writes ``fmt`` itself (``plan``: its
    :class:`~ustc.codegen.plans.StatementPlan`): ``call(state)`` runs the kernel once with
    the buffers in ``state`` (``levels``, ``vals``, ``counts``, ``layout``, ``work``, ``emit``);
    count, size (refused past the memory budget), (collect, finalize,) fill, finalize.
    ``place``: where the buffers live and the chunks a split kernel runs (default: NumPy, a
    chunk per Numba thread, :func:`chunk_rows`)."""
    place = place or Place(np, chunk_rows() if plan.split else 1)
    if place.device != "cpu" and fmt.batch_levels:
        raise DeviceError(f"a {fmt} tensor on '{place.device}': batched storage lives on the host only; "
                          f"write it from host operands, or call .to('cpu') on the operands first")
    xp = place.xp
    layout = Layout.of(fmt, shape)
    rows = place.chunks if plan.split else 0
    counts = xp.zeros((rows, fmt.nlevels) if rows else fmt.nlevels, np.int64)
    buffers, values = count_buffers(fmt, dtype, xp)
    work = workspaces(fmt, layout, plan.params)
    state = {"levels": buffers, "vals": values, "counts": counts, "layout": layout, "work": work}
    call({**state, "emit": 0})
    totals = table = place.to_host(counts)  # the one transfer the sizing needs: levels x chunks
    if rows:  # each chunk's counts -> where it starts, per level
        totals = table.sum(axis=0)
        ends = np.cumsum(table, axis=0)
        table[0] = 0
        table[1:] = ends[:-1]
        state["counts"] = place.to_device(table)
    sizes = plan_buffers(fmt, shape, totals, dtype)
    buffers, values = sizes.allocate() if place.on_host else sizes.allocate(xp)
    state.update(levels=buffers, vals=values)
    if plan.writer == 3:  # collect each parent's coordinates, place them, then fill
        reset(work)
        call({**state, "emit": 1})
        finalize(fmt, sizes, buffers, place)
    call({**state, "emit": plan.writer - 1})
    return tensor_of(fmt, sizes, buffers, values, place=place)


def chunk_rows() -> int:
    """Rows of a split kernel's count table: :data:`CHUNKS_PER_THREAD` per Numba thread."""
    import numba

    return numba.get_num_threads() * CHUNKS_PER_THREAD


def workspaces(fmt: TensorFormat, layout: Layout, roles) -> dict[int, np.ndarray]:
    """One workspace per level the kernel writes through one (``out_work`` roles): a slot per
    coordinate of the level, each -1 (no parent met it yet), holding parent positions and then
    the level's own positions: int32 when the level's positions fit (a DIA output's diagonals),
    else int64. They are O(level extent), which the shape bounds, and are counted against the
    memory budget."""
    levels = [role.level for role in roles if role.kind == "out_work"]
    dtypes = {k: np.dtype(np.int32 if math.prod(layout.level_shape[:k + 1]) <= _INT32_MAX else np.int64)
              for k in levels}
    nbytes = sum(layout.level_shape[k] * dtypes[k].itemsize for k in levels)
    if nbytes > memory_budget():
        raise StorageError(f"the workspaces writing a {fmt} tensor of shape {layout.shape} need {nbytes:,} bytes, "
                           f"more than the memory budget ({BUDGET_VARIABLE} sets it)")
    return {k: np.full(layout.level_shape[k], -1, dtype=dtypes[k]) for k in levels}


def reset(work: dict[int, np.ndarray]) -> None:
    """Workspaces as before the counting pass (no parent has met any coordinate)."""
    for w in work.values():
        w.fill(-1)


def finalize(fmt: TensorFormat, plan: BufferPlan, buffers: dict, place: Place | None = None) -> None:
    """Each level's finalize hook, in place (idempotent: :func:`tensor_of` applies it again).
    On a GPU (``place``) a level's ``pos`` buffer goes to the host for the hook and back."""
    parents = 1
    for k, level in enumerate(fmt.levels):
        own = {name: buffers[(k, name)] for name in level.type.buffers}
        moved = set()
        if place is not None and not place.on_host and "pos" in own:
            own["pos"], moved = place.to_host(own["pos"]), {"pos"}
        for name, buf in level.type.finalize(own, parents, plan.positions[k]).items():
            buffers[(k, name)] = place.to_device(buf) if name in moved else buf
        parents = plan.positions[k]


def tensor_of(fmt: TensorFormat, plan: BufferPlan, buffers: dict, values: np.ndarray, package=None,
              place: Place | None = None) -> Tensor:
    """The tensor of the filled buffers, each level's finalize hook applied (on ``place``'s device,
    in its package when ``package`` is not given)."""
    finalize(fmt, plan, buffers, place)
    device = "cpu" if place is None else place.device
    package = package if package is not None or place is None else place.package
    if fmt.batch_levels:  # (:func:`run` refuses batched outputs on a device)
        buffers, values = batch.split(fmt, plan.layout.level_shape, buffers, values)
    return Tensor(fmt, plan.layout.shape, buffers, values, device=device, package=package)
