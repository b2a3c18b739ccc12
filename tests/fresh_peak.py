"""Peak traced memory of one call, measured in a fresh interpreter.

tracemalloc counts the allocations of every thread in the process. A pytest-xdist worker
carries threads that earlier tests left running (cluster heartbeats, pools), so a peak taken
there can include theirs: CI saw 93-297 KB of such noise against a 64 KB allowance. A fresh
process runs only the measured code.
"""

from __future__ import annotations

import json
import subprocess
import sys

_MEASURE = """
gc.collect()
tracemalloc.start()
base = tracemalloc.get_traced_memory()[0]
out = {call}
peak = tracemalloc.get_traced_memory()[1] - base
tracemalloc.stop()
print(json.dumps({{"peak": peak, "nbytes": int(out.nbytes), "allowed": int({allowed})}}))
"""


def fresh_peak(setup: str, call: str, allowed: str = "0") -> dict:
    """Run ``setup`` (Python source; gc, json, tracemalloc, numpy as np, ustc and Tensor are
    imported) in a new interpreter, then ``out = call`` under tracemalloc. Returns ``peak``
    (bytes above the traced memory before the call), ``nbytes`` (``out.nbytes``) and
    ``allowed`` (the expression ``allowed`` evaluated after the call)."""
    script = ("import gc, json, tracemalloc\nimport numpy as np\nimport ustc\nfrom ustc import Tensor\n"
              + setup + _MEASURE.format(call=call, allowed=allowed))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def random_dense_source(shape: tuple[int, int], dtype: str, density: float, seed: int) -> str:
    """Setup source binding ``x``: a random array with about ``density`` nonzeros."""
    return (f"rng = np.random.default_rng({seed})\n"
            f"x = rng.standard_normal({shape}).astype(np.{dtype})\n"
            f"x[rng.random(x.shape) >= {density}] = 0\n")
