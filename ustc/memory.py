"""The memory budget: how many bytes ustc may allocate for one result before refusing it.

Sizes are known before memory is touched (a count pass, a padding count), so a
request that cannot fit raises :class:`~ustc.errors.StorageError` instead of
dying in ``MemoryError`` or swapping.
"""

from __future__ import annotations

import os

from .errors import UstcError

BUDGET_VARIABLE = "USTC_MEMORY_BUDGET"


def memory_budget() -> int:
    """Bytes a conversion may allocate for one level's buffers before it refuses with StorageError.

    ``USTC_MEMORY_BUDGET`` (a byte count, read at every call) overrides it;
    otherwise it is the memory available now: ``MemAvailable`` of
    ``/proc/meminfo`` where there is one (free memory plus what the kernel
    can reclaim), else ``SC_AVPHYS_PAGES * SC_PAGE_SIZE``, else the total
    physical memory, else unlimited (``2**63 - 1``).
    """
    text = os.environ.get(BUDGET_VARIABLE, "").strip()
    if text:
        try:
            budget = int(text)
        except ValueError:
            budget = -1
        if budget < 0:
            raise UstcError(f"{BUDGET_VARIABLE} must be a number of bytes (a non-negative integer), "
                            f"got {text!r}")
        return budget
    try:
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                if line.startswith(b"MemAvailable:"):
                    fields = line.split()
                    return int(fields[1]) * (1024 if fields[2:3] == [b"kB"] else 1)
    except (OSError, ValueError, IndexError):
        pass
    for pages in ("SC_AVPHYS_PAGES", "SC_PHYS_PAGES"):
        try:
            count, size = os.sysconf(pages), os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, ValueError, OSError):
            continue
        if count > 0 and size > 0:
            return count * size
    return 2 ** 63 - 1
