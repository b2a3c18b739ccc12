"""Across processes: Numba's cache is reused, and concurrent writers are safe."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

from cache_helpers import fields, numba_source

import ustc.cache as cache
from ustc.cache import _store

# argv: offset, go-file ('' = start at once), ready-file ('' = none). Prints json of stats().
WORKER = textwrap.dedent('''
    import json, os, sys, time
    import numba  # imported before the start signal, so the processes race on the cache itself
    import ustc.cache as cache
    sys.path.insert(0, {tests!r})
    from cache_helpers import fields, numba_source

    offset, go, ready = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    if ready:
        open(ready, "w").close()
    while go and not os.path.exists(go):
        time.sleep(0.002)
    module, key = cache.load(fields(op=f"y(i) = 2 * x(i) + {{offset}}"), lambda: numba_source(offset))
    t0 = time.perf_counter()
    result = module.k(2.0)
    cache.note_first_call(key, module.k, time.perf_counter() - t0)
    print(json.dumps({{"key": key, "result": result, "stats": cache.stats()}}))
''').format(tests=os.path.dirname(os.path.abspath(__file__)))


def _env(cache_dir) -> dict:
    return dict(os.environ, USTC_CACHE_DIR=str(cache_dir))


def _run(cache_dir, offset: int = 1) -> dict:
    done = subprocess.run([sys.executable, "-c", WORKER, str(offset), "", ""], env=_env(cache_dir),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_second_process_loads_instead_of_compiling(cache_dir):
    first = _run(cache_dir)
    assert first["result"] == 5.0
    s = first["stats"]
    assert (s["generated"], s["compiled"], s["loaded"], s["disk_hits"]) == (1, 1, 0, 0)
    assert s["compile_seconds"] > 0 and s["entries"] == 1

    second = _run(cache_dir)
    assert second["key"] == first["key"] and second["result"] == 5.0
    s = second["stats"]
    assert (s["generated"], s["compiled"], s["loaded"], s["disk_hits"]) == (0, 0, 1, 1)
    (entry,) = cache.entries()
    assert entry.hits == 1 and entry.compile_seconds == first["stats"]["compile_seconds"]


def test_concurrent_writers_of_one_key_and_of_distinct_keys(cache_dir, tmp_path):
    go = tmp_path / "go"
    offsets = [1, 1, 1, 1, 2, 3, 4, 5]
    workers = []
    for n, offset in enumerate(offsets):
        ready = tmp_path / f"ready{n}"
        workers.append((ready, subprocess.Popen(
            [sys.executable, "-c", WORKER, str(offset), str(go), str(ready)], env=_env(cache_dir),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))
    deadline = time.monotonic() + 120
    while not all(ready.exists() for ready, _ in workers) and time.monotonic() < deadline:
        time.sleep(0.01)
    go.touch()
    outputs = []
    for _, proc in workers:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        outputs.append(json.loads(out))

    assert [o["result"] for o in outputs] == [4.0 + offset for offset in offsets]
    assert len({o["key"] for o in outputs[:4]}) == 1
    assert len({o["key"] for o in outputs}) == 5
    assert sum(o["stats"]["generated"] + o["stats"]["disk_hits"] for o in outputs[:4]) >= 4
    found = cache.entries()
    assert sorted(e.key for e in found) == sorted({o["key"] for o in outputs})
    for offset, output in zip(offsets, outputs):
        record, problem = _store.inspect(output["key"], fields(op=f"y(i) = 2 * x(i) + {offset}"))
        assert problem is None and record is not None
        assert _store.files(output["key"])[0].read_text() == numba_source(offset)
    assert not list((cache_dir / "kernels").glob(".*.tmp"))
