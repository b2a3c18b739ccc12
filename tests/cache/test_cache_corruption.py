"""A damaged entry is never trusted: it is logged, rebuilt, and the result is correct."""

from __future__ import annotations

import json
import logging

import pytest
from cache_helpers import Generator, fields, numba_source

import ustc.cache as cache
from ustc.cache import _store


def _truncate_py(py, js):
    py.write_bytes(py.read_bytes()[: len(py.read_bytes()) // 2])


def _edit_py(py, js):  # same length, different content: only the hash can tell
    text = py.read_text()
    py.write_text(text.replace("2.0", "3.0"))


def _delete_py(py, js):
    py.unlink()


def _empty_py(py, js):
    py.write_bytes(b"")


def _garble_json(py, js):
    js.write_bytes(b"{\"key\": \"abc\", \x00\xff garbage")


def _delete_json(py, js):
    js.unlink()


def _json_not_an_object(py, js):
    js.write_text("[1, 2, 3]")


def _json_missing_hash(py, js):
    record = json.loads(js.read_text())
    del record["sha256"]
    js.write_text(json.dumps(record))


def _json_other_key(py, js):
    record = json.loads(js.read_text())
    record["key"] = "f" * 64
    js.write_text(json.dumps(record))


def _json_other_fields(py, js):
    record = json.loads(js.read_text())
    record["fields"]["target"] = "cuda"
    js.write_text(json.dumps(record))


DAMAGE = {f.__name__.lstrip("_"): f for f in (
    _truncate_py, _edit_py, _delete_py, _empty_py, _garble_json, _delete_json, _json_not_an_object,
    _json_missing_hash, _json_other_key, _json_other_fields)}

EXPECTED_PROBLEM = {
    "truncate_py": "does not match its recorded hash", "edit_py": "does not match its recorded hash",
    "delete_py": "is missing", "empty_py": "does not match its recorded hash",
    "garble_json": "is unreadable", "delete_json": "is missing", "json_not_an_object": "is unreadable",
    "json_missing_hash": "is unreadable", "json_other_key": "belongs to another key",
    "json_other_fields": "different kernel fields",
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_entry_is_logged_and_rebuilt(cache_dir, caplog, damage):
    text = numba_source()
    _, key = cache.load(fields(), Generator(text))
    py, js = _store.files(key)
    DAMAGE[damage](py, js)
    cache._forget()
    cache.reset_stats()

    gen = Generator(text)
    with caplog.at_level(logging.WARNING, logger="ustc.cache"):
        module, key2 = cache.load(fields(), gen)
    assert key2 == key and gen.calls == 1
    assert module.k.py_func(2.0) == 5.0
    warnings = [r for r in caplog.records if r.name == "ustc.cache" and r.levelno == logging.WARNING]
    assert len(warnings) == 1
    message = warnings[0].getMessage()
    assert py.name in message and "rebuilding" in message and EXPECTED_PROBLEM[damage] in message
    s = cache.stats()
    assert (s["rebuilt"], s["generated"], s["misses"], s["hits"]) == (1, 1, 1, 0)
    record, problem = _store.inspect(key, fields())
    assert problem is None and record is not None and py.read_text() == text

    cache._forget()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="ustc.cache"):
        cache.load(fields(), Generator("unused"))
    assert not caplog.records and cache.stats()["disk_hits"] == 1


def test_a_leftover_temp_file_is_ignored_and_cleared(cache_dir):
    _, key = cache.load(fields(), Generator("VALUE = 1\n"))
    kernels = cache_dir / "kernels"
    leftover = kernels / f".{cache.module_name(key)}.abc123.tmp"
    leftover.write_text("VALUE = ")  # a writer that died before os.replace
    cache._forget()
    module, _ = cache.load(fields(), Generator("unused"))
    assert module.VALUE == 1 and cache.stats()["disk_hits"] == 1
    assert cache.clear() == 1
    assert list(kernels.iterdir()) == []
