"""ustc.cache.load: memory, disk and miss paths, keys, records, the memory bound, first calls."""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import numba
import numpy as np
import pytest
from cache_helpers import Generator, fields, numba_source

import ustc._version
import ustc.cache as cache
from ustc.cache import _key, _state, _store
from ustc.errors import KernelError


def test_miss_then_memory_hit_then_disk_hit(cache_dir):
    gen = Generator(numba_source())
    module, key = cache.load(fields(), gen)
    assert module.k.py_func(2.0) == 5.0
    assert gen.calls == 1
    s = cache.stats()
    assert (s["misses"], s["generated"], s["hits"], s["rebuilt"]) == (1, 1, 0, 0)
    assert s["entries"] == 1 and s["bytes"] > 0

    again, key2 = cache.load(fields(), gen)
    assert again is module and key2 == key and gen.calls == 1
    s = cache.stats()
    assert (s["hits"], s["memory_hits"], s["disk_hits"]) == (1, 1, 0)

    cache._forget()
    from_disk, key3 = cache.load(fields(), gen)
    assert key3 == key and from_disk is not module and gen.calls == 1
    assert from_disk.k.py_func(2.0) == 5.0
    s = cache.stats()
    assert (s["hits"], s["memory_hits"], s["disk_hits"], s["misses"], s["generated"]) == (2, 1, 1, 1, 1)
    record = _store.read_record(_store.files(key)[1])
    assert record["hits"] == 1 and record["last_used"] >= record["created"]


def test_module_is_registered_under_its_key_name(cache_dir):
    module, key = cache.load(fields(), Generator(numba_source()))
    name = cache.module_name(key)
    assert name == "ustc_k_" + key[:24] and module.__name__ == name
    assert sys.modules[name] is module
    assert Path(module.__file__) == cache_dir / "kernels" / f"{name}.py"


def test_record_holds_what_was_generated(cache_dir):
    text = numba_source()
    before = time.time()
    _, key = cache.load(fields(), Generator(text))
    py, js = _store.files(key)
    record = json.loads(js.read_text())
    assert record["key"] == key and record["fields"] == fields()
    assert py.read_text(encoding="utf-8") == text
    assert record["size"] == len(text.encode()) and len(record["sha256"]) == 64
    assert before - 1 <= record["created"] <= time.time() and record["hits"] == 0
    assert record["compile_seconds"] is None and record["generate_seconds"] >= 0
    assert (record["ustc"], record["numba"]) == (ustc._version.__version__, numba.__version__)


def test_key_is_canonical_and_covers_every_field():
    key = cache.kernel_key(fields())
    assert len(key) == 64 and int(key, 16) >= 0
    reordered = dict(reversed(list(fields().items())))
    assert cache.kernel_key(reordered) == key
    assert cache.kernel_key(fields(formats=("(d0, d1) -> (d0 : dense, d1 : compressed)",))) == key
    assert cache.kernel_key(fields(target="cuda")) != key
    assert cache.kernel_key(fields(dtypes=["float32", "int32"])) != key
    assert cache.kernel_key(fields(op="y(i) = 3 * x(i)")) != key


@pytest.mark.parametrize("bad", [{"f": object()}, {"f": float("nan")}, {1: "int key"}, ["not", "a dict"]])
def test_fields_must_be_a_json_mapping(bad):
    with pytest.raises(TypeError, match="fields"):
        cache.kernel_key(bad)


def test_a_changed_compiler_fingerprint_is_a_miss_not_a_stale_hit(cache_dir, monkeypatch):
    """While the version string stays put, an edited code generator (another fingerprint of the
    compiler's sources) must not load the kernel the old one wrote: from memory or from disk."""
    from ustc.codegen import notation as nt
    from ustc.ops import runtime

    old = Generator("VALUE = 1\n")
    first, old_key = cache.load(fields(), old)
    program = nt.Program((nt.Statement(nt.Access("y", ("i",)), nt.Access("x", ("i",))),))
    run_key = runtime.prepare(program, {"y": np.zeros(3), "x": np.ones(3)}, "cpu").key
    monkeypatch.setattr(_key, "compiler_fingerprint", lambda: "f" * 16)
    new = Generator("VALUE = 2\n")
    module, key = cache.load(fields(), new)           # no cache._forget(): the memory layer must miss too
    assert key != old_key and new.calls == 1 and module.VALUE == 2 and first.VALUE == 1
    assert _store.read_record(_store.files(key)[1])["compiler"] == "f" * 16
    assert runtime.prepare(program, {"y": np.zeros(3), "x": np.ones(3)}, "cpu").key != run_key
    monkeypatch.undo()
    again, key = cache.load(fields(), Generator("unused"))
    assert key == old_key and again.VALUE == 1       # the old compiler's kernel is still its own


def test_the_compiler_fingerprint_is_computed_once_and_cheaply():
    _key.compiler_fingerprint.cache_clear()
    t0 = time.perf_counter()
    fingerprint = _key.compiler_fingerprint()
    seconds = time.perf_counter() - t0
    assert len(fingerprint) == 16 and _key.versions()["compiler"] == fingerprint
    assert seconds < 0.05, seconds                # ~1 ms: ~40 files read without importing them
    names = {p.name for p in _key._source_files()}
    assert {"lower.py", "emit_cuda.py", "compressed.py", "batch.py", "runtime.py", "cuda_host.py"} <= names


@pytest.mark.parametrize("which", ["ustc", "numba"])
def test_a_version_change_is_a_miss_never_a_crash(cache_dir, monkeypatch, which):
    gen = Generator(numba_source())
    _, old_key = cache.load(fields(), gen)
    if which == "ustc":
        monkeypatch.setattr(ustc._version, "__version__", "99.0.0")
    else:
        monkeypatch.setattr(numba, "__version__", "0.99.0")
    new_key = cache.kernel_key(fields())
    assert new_key != old_key
    cache._forget()
    module, key = cache.load(fields(), gen)
    assert key == new_key and module.k.py_func(1.0) == 3.0
    assert gen.calls == 2
    s = cache.stats()
    assert (s["misses"], s["generated"], s["rebuilt"], s["entries"]) == (2, 2, 0, 2)
    record = _store.read_record(_store.files(key)[1])
    assert record[which] in ("99.0.0", "0.99.0")


def test_generate_errors_propagate_and_leave_nothing(cache_dir):
    def broken():
        raise ValueError("codegen bug")

    with pytest.raises(ValueError, match="codegen bug"):
        cache.load(fields(), broken)
    assert cache.entries() == []
    with pytest.raises(KernelError, match="expected the source as str"):
        cache.load(fields(), lambda: b"bytes")
    assert cache.entries() == []


def test_a_module_that_fails_to_execute_is_a_kernel_error(cache_dir):
    f = fields(op="broken")
    with pytest.raises(KernelError, match=r"ustc_k_[0-9a-f]{24}\.py failed to import: RuntimeError: boom"):
        cache.load(f, lambda: "raise RuntimeError('boom')\n")
    assert cache.module_name(cache.kernel_key(f)) not in sys.modules


def test_directories_are_private_whatever_the_umask(tmp_path, monkeypatch):
    root = tmp_path / "deep" / "cache"
    monkeypatch.setenv("USTC_CACHE_DIR", str(root))
    old = os.umask(0)
    try:
        cache.load(fields(), Generator("VALUE = 1\n"))
    finally:
        os.umask(old)
    assert cache.path() == root
    for directory in (root, root / "kernels"):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700


def test_an_existing_root_keeps_its_mode_but_kernels_is_private(tmp_path, monkeypatch):
    root = tmp_path / "shared"
    root.mkdir()
    os.chmod(root, 0o755)
    monkeypatch.setenv("USTC_CACHE_DIR", str(root))
    (root / "kernels").mkdir(mode=0o777)
    os.chmod(root / "kernels", 0o777)
    cache.load(fields(), Generator("VALUE = 1\n"))
    assert stat.S_IMODE(root.stat().st_mode) == 0o755
    assert stat.S_IMODE((root / "kernels").stat().st_mode) == 0o700


def test_path_reads_the_environment_at_call_time(tmp_path, monkeypatch):
    import platformdirs

    monkeypatch.setenv("USTC_CACHE_DIR", str(tmp_path / "a"))
    assert cache.path() == tmp_path / "a"
    monkeypatch.setenv("USTC_CACHE_DIR", str(tmp_path / "b"))
    assert cache.path() == tmp_path / "b"
    assert cache.kernels_dir() == tmp_path / "b" / "kernels"
    monkeypatch.delenv("USTC_CACHE_DIR")
    assert cache.path() == Path(platformdirs.user_cache_dir("ustc"))


def test_an_unusable_directory_is_a_clear_kernel_error(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("USTC_CACHE_DIR", str(blocker))
    with pytest.raises(KernelError, match="USTC_CACHE_DIR"):
        cache.load(fields(), Generator("VALUE = 1\n"))


def test_the_memory_layer_is_bounded(cache_dir, monkeypatch):
    monkeypatch.setattr(_state, "MEMORY_CAPACITY", 2)
    modules = [cache.load(fields(op=f"op{n}"), Generator(f"VALUE = {n}\n")) for n in range(3)]
    assert [m.VALUE for m, _ in modules] == [0, 1, 2]
    assert cache.module_name(modules[0][1]) in sys.modules  # evicted but still importable by Numba
    cache.load(fields(op="op2"), Generator("unused"))
    cache.load(fields(op="op0"), Generator("unused"))
    s = cache.stats()
    assert (s["memory_hits"], s["disk_hits"], s["generated"]) == (1, 1, 3)


def _dispatcher(hits: int = 0, misses: int = 0):
    return SimpleNamespace(stats=SimpleNamespace(cache_hits=Counter({"sig": hits} if hits else {}),
                                                 cache_misses=Counter({"sig": misses} if misses else {})))


def test_note_first_call_bookkeeping(cache_dir):
    _, key = cache.load(fields(), Generator("VALUE = 1\n"))
    cache.note_first_call(key, _dispatcher(misses=1), 0.5)
    cache.note_first_call(key, _dispatcher(misses=1), 0.9)  # a later compile keeps the first time
    assert _store.read_record(_store.files(key)[1])["compile_seconds"] == 0.5
    cache.note_first_call(key, _dispatcher(hits=1), 0.1)
    cache.note_first_call(key, _dispatcher(hits=1), 0.7)  # slower than compiling: saves nothing
    cache.note_first_call(key, object(), 0.1)  # no stats: nothing to learn
    cache.note_first_call("0" * 64, _dispatcher(hits=1), 0.1)  # no record: counted, nothing saved
    s = cache.stats()
    assert (s["compiled"], s["loaded"]) == (2, 3)
    assert s["compile_seconds"] == pytest.approx(1.4)
    assert s["compile_seconds_saved"] == pytest.approx(0.4)


def test_numba_compiles_once_then_loads_from_its_cache(cache_dir):
    module, key = cache.load(fields(), Generator(numba_source()))
    t0 = time.perf_counter()
    assert module.k(2.0) == 5.0
    cache.note_first_call(key, module.k, time.perf_counter() - t0)
    assert (cache.stats()["compiled"], cache.stats()["loaded"]) == (1, 0)
    assert _store.read_record(_store.files(key)[1])["compile_seconds"] > 0
    assert list((cache_dir / "kernels" / "__pycache__").glob(cache.module_name(key) + ".*.nbi"))

    cache._forget()  # as a new process would: a fresh module and dispatcher from the same file
    module, key = cache.load(fields(), Generator("unused"))
    t0 = time.perf_counter()
    assert module.k(2.0) == 5.0
    cache.note_first_call(key, module.k, time.perf_counter() - t0)
    s = cache.stats()
    assert (s["compiled"], s["loaded"], s["disk_hits"]) == (1, 1, 1)


def test_threads_share_one_module_per_key(cache_dir):
    import threading

    gen = Generator("VALUE = 1\n")
    results = []
    threads = [threading.Thread(target=lambda: results.append(cache.load(fields(), gen))) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert gen.calls == 1 and len({id(m) for m, _ in results}) == 1
    assert cache.stats()["memory_hits"] == 7
