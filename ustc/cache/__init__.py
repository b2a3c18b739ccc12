"""The on-disk kernel cache (design §5).

Generated kernels are Python modules keyed by what the compiler asked for plus the ustc and
numba versions. :func:`load` returns a module from memory, from disk, or by generating it;
Numba's ``cache=True`` inside the generated file then caches machine code across processes.
:func:`note_first_call` records whether the first call compiled or loaded that code.
:func:`entries`, :func:`show`, :func:`source`, :func:`clear`, :func:`prune` and :func:`trim`
look after the directory, which is kept within :func:`max_bytes` (``$USTC_CACHE_MAX_BYTES``,
2 GiB by default) (also ``ustc cache ...`` on the command line), and :func:`stats` counts what
happened in this process.
"""

from ._key import CACHE_LAYOUT, kernel_key, module_name
from ._loader import _forget, load, note_first_call, reset_stats, source_file, stats  # noqa: F401 (_forget: tests)
from ._location import kernels_dir, path
from ._manage import Entry, clear, entries, max_bytes, prune, source, trim
from ._manage import find as show

__all__ = ["CACHE_LAYOUT", "Entry", "clear", "entries", "kernel_key", "kernels_dir", "load", "max_bytes",
           "module_name", "note_first_call", "path", "prune", "reset_stats", "show", "source", "source_file",
           "stats", "trim"]
