"""Source twins: keys whose generated sources differ only in their header share one module."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from cache_helpers import Generator, fields, numba_source

import ustc
import ustc.cache as cache
from ustc.cache import _store, _twins


def _headed(key_line: str, body: str) -> str:
    return f"# ustc generated kernel\n# key     : {key_line}\n#\n{body}"


def _pair(body: str = None):
    """Two loads whose sources share ``body`` under different headers: (module, key) each."""
    body = numba_source() if body is None else body
    first = cache.load(fields(), Generator(_headed("one", body)))
    second = cache.load(fields(op="y(i) = 2 * x(i) + 1 (nonunique)"), Generator(_headed("two", body)))
    return first, second


def test_body_hash_skips_only_the_leading_comment_block():
    body = "x = 1\n# a comment inside the body\ny = 2\n"
    assert _twins.body_hash(_headed("a", body)) == _twins.body_hash(_headed("b", body)) == _twins.body_hash(body)
    assert _twins.body_hash(_headed("a", body)) != _twins.body_hash(_headed("a", body.replace("2", "3")))
    assert _twins.body_hash("") == _twins.body_hash("# only a header\n")


def test_a_twin_key_gets_the_loaded_module_and_keeps_its_own_entry(cache_dir):
    (one, key1), (two, key2) = _pair()
    assert key1 != key2 and two is one and one.__name__ == cache.module_name(key1)
    s = cache.stats()
    assert (s["misses"], s["generated"], s["twins"]) == (2, 2, 1)
    record2 = _store.read_record(_store.files(key2)[1])
    assert record2["same_source"] == key1 and "same_source" not in _store.read_record(_store.files(key1)[1])
    assert {e.key for e in cache.entries()} == {key1, key2}
    assert "key     : two" in cache.source_file(key2).read_text() == cache.source(key2[:16])
    assert cache.load(fields(op="y(i) = 2 * x(i) + 1 (nonunique)"), Generator("unused"))[0] is one


def test_a_different_body_is_not_a_twin(cache_dir):
    (one, _), (two, key2) = _pair_of_bodies(numba_source(1), numba_source(2))
    assert two is not one and two.k(1.0) == 4.0 and one.k(1.0) == 3.0
    assert cache.stats()["twins"] == 0
    assert "same_source" not in _store.read_record(_store.files(key2)[1])


def _pair_of_bodies(body1: str, body2: str):
    first = cache.load(fields(), Generator(_headed("one", body1)))
    second = cache.load(fields(op="other"), Generator(_headed("two", body2)))
    return first, second


def test_a_new_process_finds_the_twin_on_disk_and_numba_loads_its_code(cache_dir):
    body = numba_source(7)
    one, key1 = cache.load(fields(), Generator(_headed("one", body)))
    assert one.k(1.0) == 9.0  # compiled into Numba's cache next to key1's file
    cache._forget()  # as a new process: nothing in memory, key1's module not imported
    del sys.modules[cache.module_name(key1)]
    two, key2 = cache.load(fields(op="twin"), Generator(_headed("two", body)))
    assert two is not one and two.__name__ == cache.module_name(key1)
    assert two.k(1.0) == 9.0
    assert sum(two.k.stats.cache_hits.values()) == 1 and not sum(two.k.stats.cache_misses.values())
    cache._forget()  # a disk hit of key2 runs key1's module too
    del sys.modules[cache.module_name(key1)]
    three, key3 = cache.load(fields(op="twin"), Generator("unused"))
    assert key3 == key2 and three.__name__ == cache.module_name(key1) and three.k(1.0) == 9.0
    assert cache.stats()["disk_hits"] == 1


def test_a_removed_or_changed_twin_is_never_trusted(cache_dir):
    (one, key1), (two, key2) = _pair("VALUE = 1\n")
    py1, js1 = _store.files(key1)
    py1.write_text(_headed("one", "VALUE = 2\n"))  # key1's file no longer matches its record
    cache._forget()
    again, _ = cache.load(fields(op="y(i) = 2 * x(i) + 1 (nonunique)"), Generator("unused"))
    assert again.__name__ == cache.module_name(key2) and again.VALUE == 1
    js1.unlink()
    py1.unlink()
    third, key3 = cache.load(fields(op="third"), Generator(_headed("three", "VALUE = 1\n")))
    assert third.__name__ == cache.module_name(key3)  # the index named key1, which is gone
    assert "same_source" not in _store.read_record(_store.files(key3)[1])
    assert _twins.find(_twins.body_hash("VALUE = 1\n")) == key3


@pytest.mark.parametrize("garbage", [b"", b"not a key", b"\xff\xfe", b"0" * 64])
def test_a_malformed_index_is_ignored(cache_dir, garbage):
    body = "VALUE = 3\n"
    cache.load(fields(), Generator(_headed("one", body)))
    _twins.index_file(_twins.body_hash(body)).write_bytes(garbage)
    module, key = cache.load(fields(op="other"), Generator(_headed("two", body)))
    assert module.__name__ == cache.module_name(key) and module.VALUE == 3


def test_clear_and_prune_take_the_index_with_them(cache_dir):
    (_, key1), (_, key2) = _pair("VALUE = 4\n")
    kernels = cache_dir / "kernels"
    assert len(list(kernels.glob("ustc_s_*.key"))) == 1
    for path in _store.files(key1):
        path.unlink()
    assert cache.prune(1.0) == 0 and not list(kernels.glob("ustc_s_*.key"))  # it named key1, now gone
    cache.load(fields(op="fourth"), Generator(_headed("four", "VALUE = 5\n")))
    assert cache.prune(1.0) == 0 and len(list(kernels.glob("ustc_s_*.key"))) == 1
    assert cache.clear() == 2 and not list(kernels.iterdir())


def test_generated_kernels_that_differ_only_in_a_level_property_share_one_module(cache_dir):
    """A nonordered or nonunique column level does not change a dense-output SpMV's loops: three
    keys, three entries, one module."""
    rng = np.random.default_rng(0)
    dense = rng.random((5, 4)) * (rng.random((5, 4)) < 0.5)
    x = rng.random(4)
    for level in ("compressed", "compressed(nonordered)", "compressed(nonunique)"):
        a = ustc.Tensor.from_package(dense).convert(f"(d0, d1) -> (d0 : dense, d1 : {level})")
        np.testing.assert_allclose(np.asarray(ustc.matmul(a, x)), dense @ x)
    s = cache.stats()
    assert (s["generated"], s["twins"]) == (3, 2) and len(cache.entries()) == 3
    records = [_store.read_record(_store.files(e.key)[1]) for e in cache.entries()]
    assert len({r.get("same_source", r["key"]) for r in records}) == 1


def test_a_memory_hit_after_the_cache_moved_still_names_its_own_source(cache_dir, tmp_path, monkeypatch):
    (_, key1), (_, key2) = _pair()
    own = {key: cache.source_file(key) for key in (key1, key2)}
    monkeypatch.setenv("USTC_CACHE_DIR", str(tmp_path / "elsewhere"))  # no entry there
    for key, fieldset in ((key1, fields()), (key2, fields(op="y(i) = 2 * x(i) + 1 (nonunique)"))):
        module, again = cache.load(fieldset, Generator("never called on a memory hit"))
        assert again == key and cache.source_file(key) == own[key] and own[key].exists()
        assert f"# key     : {'one' if key == key1 else 'two'}" in own[key].read_text(encoding="utf-8")
