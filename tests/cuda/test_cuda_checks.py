"""The static checks' parts without compiling: the linker log, PTX counts, occupancy
arithmetic (sm_90), the promises a generated module declares, and what breaks them.
The compiled correctness matrix is checked in ``test_ptx.py``."""

from __future__ import annotations

import pytest

from ustc.codegen import cuda_checks, cuda_machine
from ustc.codegen.cuda_schedule import Schedule
from ustc.codegen.emit_cuda import Mapping, promises

LOG = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_ZN4k' for 'sm_90'
ptxas info    : Function properties for _ZN4k
ptxas         .     16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers
info    : Function properties for '_ZN4k':
info    : used 40 registers, used 1 barriers, 16 stack, 2048 bytes smem, 816 bytes cmem[0], 24 bytes lmem
"""

PTX = """.visible .entry k(
.maxntid 256, 1, 1
.minnctapersm 2
{
	ld.global.nc.v4.u32 	{%r1, %r2, %r3, %r4}, [%rd1];
	ld.global.f64 	%fd1, [%rd2];
	ld.global.v2.f64 	{%fd2, %fd3}, [%rd3];   // ld.local.f64 in a comment does not count
	shfl.sync.down.b32	%r5|%p1, %r6, 4, 31, -1;
	vote.sync.ballot.b32 	%r7, %p2, -1;
	atom.global.add.f64 	%fd4, [%rd4], %fd1;
	red.global.add.u32 	[%rd5], 1;
	st.local.u32 	[%rd6], %r1;
	ld.local.u32 	%r8, [%rd6];
}
"""


def test_resources_from_the_linker_log():
    r = cuda_machine.resources(LOG)
    assert (r.registers, r.spill_stores, r.spill_loads, r.stack) == (40, 8, 4, 16)
    assert (r.shared, r.constant, r.local, r.barriers) == (2048, 816, 24, 1)
    assert cuda_machine.resources("").registers == 0


def test_instruction_counts():
    i = cuda_machine.instructions(PTX)
    assert (i.local_loads, i.local_stores, i.atomics, i.shuffles, i.votes) == (1, 1, 2, 1, 1)
    assert (i.global_loads, i.vector_loads, i.readonly_loads) == (3, 2, 1)
    assert (i.max_threads, i.min_blocks) == (256, 2)


@pytest.mark.parametrize("registers, threads, shared, blocks, warps, limit", [
    (32, 256, 0, 8, 64, "registers"),      # 32 x 32 = 1024 a warp: 64 warps, all of them
    (40, 256, 0, 6, 48, "registers"),      # 1280 a warp (rounded to 256): 51 warps -> 6 blocks of 8
    (128, 256, 0, 2, 16, "registers"),     # the launch bounds' budget: 2 blocks
    (16, 32, 0, 32, 32, "blocks"),         # one-warp blocks: at most 32 blocks
    (16, 1024, 0, 2, 64, "warps"),
    (32, 256, 100_000, 2, 16, "shared memory"),   # 101,120 bytes a block with the reserved KiB
])
def test_occupancy(registers, threads, shared, blocks, warps, limit):
    o = cuda_machine.occupancy(registers, threads, shared)
    assert (o.blocks, o.warps, o.limit) == (blocks, warps, limit)
    assert o.fraction == warps / 64 and f"{warps}/64 warps" in o.describe()


def test_occupancy_of_an_impossible_kernel():
    assert cuda_machine.occupancy(300, 256).blocks == 0


def test_register_budget_follows_the_launch_bounds():
    assert Schedule().max_registers == 128                        # 65536 / (256 x 2)
    assert Schedule(threads=128).max_registers == 255             # capped
    assert Schedule(threads=512, min_blocks=1).max_registers == 128
    assert Schedule(threads=96, min_blocks=3).max_registers == 224   # 227 rounded down to 8
    with pytest.raises(ValueError):
        Schedule(min_blocks=0)
    with pytest.raises(ValueError):
        Schedule(threads=1024, min_blocks=3)


SOURCE = '''
# schedule: warp_per_row(width=8), 256 threads/block — requested
# promises: at most 128 registers a thread (2 blocks of 256 threads a multiprocessor), warp shuffles, no atomics
@cuda.jit(cache=True, **bounds(256, 2))
def kernel_0(y, x):
    pass


# schedule: serial, one thread — no loop runs in parallel
# promises: at most 255 registers a thread (2 blocks of 32 threads a multiprocessor), no warp shuffles, atomics, read-only loads
@cuda.jit(cache=True, **bounds(32, 2))
def kernel_1(y, x):
    pass
'''


def test_declared_promises():
    found = cuda_checks.declared(SOURCE)
    assert found == {"kernel_0": cuda_checks.Promise(128, 2, 256, True, False),
                     "kernel_1": cuda_checks.Promise(255, 2, 32, False, True, True)}


def test_the_emitter_states_what_the_mapping_does():
    assert promises(Mapping(None), Schedule("serial", threads=32, max_blocks=1)).endswith(
        "(2 blocks of 32 threads a multiprocessor), no warp shuffles, no atomics, no read-only loads")
    assert promises(Mapping(None, atomic=True), Schedule(), readonly=True).endswith(
        "no warp shuffles, atomics, read-only loads")


def test_problems_name_each_broken_promise():
    promise = cuda_checks.Promise(32, 2, 256, shuffles=False, atomics=False, readonly=True)
    found = cuda_checks.problems(promise, cuda_machine.resources(LOG), cuda_machine.instructions(PTX))
    text = "\n".join(found)
    assert "spills: 8 bytes stored, 4 bytes loaded" in text and "40 registers, budget 32" in text
    assert "local memory: 16 bytes stack, 24 bytes lmem, 1 ld.local, 1 st.local" in text
    assert "1 shfl.sync, the schedule has no shuffles" in text and "2 atomics, the schedule has none" in text
    assert len(found) == 5                      # the launch bounds match


def test_a_kept_promise_has_no_problems():
    clean = "\n".join(line for line in PTX.splitlines() if "local" not in line and "atom" not in line
                      and "red." not in line)
    log = LOG.replace("16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads",
                      "0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads").replace(
        "16 stack", "0 stack").replace("24 bytes lmem", "0 bytes lmem")
    promise = cuda_checks.Promise(128, 2, 256, shuffles=True, atomics=False, readonly=True)
    assert cuda_checks.problems(promise, cuda_machine.resources(log), cuda_machine.instructions(clean)) == ()
    plain = cuda_checks.Promise(128, 2, 256, shuffles=True, atomics=False, readonly=False)
    assert cuda_checks.problems(plain, cuda_machine.resources(log), cuda_machine.instructions(clean)) == (
        "1 ld.global.nc, the kernel has no read-only loads",)
    wrong_bounds = cuda_checks.Promise(128, 4, 128, shuffles=True, atomics=False, readonly=True)
    assert cuda_checks.problems(wrong_bounds, cuda_machine.resources(log), cuda_machine.instructions(clean)) == (
        "launch bounds in the PTX: .maxntid 256, .minnctapersm 2; declared 128, 4",)
