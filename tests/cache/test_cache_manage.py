"""entries(), show()/source(), prune() and clear()."""

from __future__ import annotations

import os
import time

import pytest
from cache_helpers import Generator, fields, numba_source

import ustc.cache as cache
from ustc.cache import _store
from ustc.errors import KernelError, UstcError

DAY = 86400.0


def _load(n: int, **extra):
    return cache.load(fields(op=f"op{n}", **extra), Generator(f"VALUE = {n}\n"))[1]


def _set_last_used(key: str, when: float) -> None:
    def change(record):
        record["last_used"] = when
        return True

    assert _store.update_record(key, change) is not None


def test_entries_describe_each_kernel_most_recent_first(cache_dir):
    keys = [_load(n) for n in range(3)]
    now = time.time()
    for age, key in zip((3, 1, 2), keys):
        _set_last_used(key, now - age * DAY)
    found = cache.entries()
    assert [e.key for e in found] == [keys[1], keys[2], keys[0]]
    entry = found[0]
    assert isinstance(entry, cache.Entry)
    assert (entry.op, entry.target) == ("op1", "cpu")
    assert entry.formats == ("(d0, d1) -> (d0 : dense, d1 : compressed)",)
    assert entry.dtypes == ("float64", "int32")
    assert entry.size == len("VALUE = 1\n") and entry.hits == 0 and entry.compile_seconds is None
    assert entry.path == cache_dir / "kernels" / f"{cache.module_name(keys[1])}.py"
    with pytest.raises(AttributeError):
        entry.hits = 5  # frozen


def test_entries_are_described_from_compiler_operands_too(cache_dir):
    f = {"op": "y(i) = A(i,j) * x(j)", "target": "cpu", "scalars": {},
         "operands": {"y": {"format": "ndarray", "ndim": 1, "dtype": "float64"},
                      "A": {"format": "(d0, d1) -> (d0 : dense, d1 : compressed)", "dtype": "float64",
                            "index": ["int32"]},
                      "x": {"format": "ndarray", "ndim": 1, "dtype": "float64"}}}
    cache.load(f, Generator("VALUE = 0\n"))
    (entry,) = cache.entries()
    assert entry.formats == ("(d0, d1) -> (d0 : dense, d1 : compressed)", "ndarray", "ndarray")
    assert entry.dtypes == ("float64", "int32")


def test_unreadable_records_are_skipped(cache_dir):
    keys = [_load(n) for n in range(2)]
    _store.files(keys[0])[1].write_text("{not json")
    assert [e.key for e in cache.entries()] == [keys[1]]
    assert cache.stats()["entries"] == 1


def test_show_and_source_by_key_prefix(cache_dir):
    key = _load(7)
    entry = cache.show(key[:6])
    assert entry.key == key and entry.op == "op7"
    assert cache.show(key.upper()[:10]).key == key
    assert cache.show(cache.module_name(key)).key == key
    assert cache.source(key[:8]) == "VALUE = 7\n"


def test_unknown_or_ambiguous_prefixes_are_kernel_errors(cache_dir):
    by_first_digit: dict[str, list[int]] = {}
    n = 0
    while True:  # find two kernels whose keys share a first digit
        by_first_digit.setdefault(cache.kernel_key(fields(op=f"op{n}"))[0], []).append(n)
        if len(by_first_digit[cache.kernel_key(fields(op=f"op{n}"))[0]]) == 2:
            break
        n += 1
    digit = cache.kernel_key(fields(op=f"op{n}"))[0]
    for m in by_first_digit[digit]:
        _load(m)
    with pytest.raises(KernelError, match=f"prefix '{digit}' is ambiguous: it matches 2 kernels"):
        cache.show(digit)
    other = next(c for c in "0123456789abcdef" if c not in by_first_digit)
    with pytest.raises(KernelError, match=f"no cached kernel has a key starting with '{other}'"):
        cache.source(other)
    for bad in ("", "xyz", "12 34"):
        with pytest.raises(UstcError, match="not a kernel key"):
            cache.show(bad)


def test_prune_removes_entries_not_used_recently(cache_dir):
    old, recent = _load(1), _load(2)
    _set_last_used(old, time.time() - 10 * DAY)
    _set_last_used(recent, time.time() - 1 * DAY)
    orphan = cache_dir / "kernels" / "ustc_k_0123456789abcdef01234567.json"
    orphan.write_text("garbage")
    os.utime(orphan, (time.time() - 30 * DAY,) * 2)
    assert cache.prune(5) == 2
    assert [e.key for e in cache.entries()] == [recent]
    assert not orphan.exists() and not _store.files(old)[0].exists()
    assert cache.prune(5) == 0
    assert cache.prune(0.5) == 1 and cache.entries() == []
    for bad in (-1, float("nan"), "5"):
        with pytest.raises(ValueError, match="older_than_days"):
            cache.prune(bad)


def test_prune_forgets_pruned_modules(cache_dir):
    key = _load(1)
    _set_last_used(key, time.time() - 10 * DAY)
    assert cache.prune(1) == 1
    cache.reset_stats()
    _load(1)
    assert cache.stats()["generated"] == 1


def test_clear_removes_sources_records_numba_files_and_memory(cache_dir):
    module, key = cache.load(fields(), Generator(numba_source()))
    assert module.k(1.0) == 3.0  # writes Numba's index and object code into __pycache__
    _load(2)
    kernels = cache_dir / "kernels"
    assert list((kernels / "__pycache__").glob("ustc_k_*"))
    assert cache.clear() == 2
    assert list(kernels.iterdir()) == []
    assert cache.entries() == [] and cache.stats()["bytes"] == 0
    assert cache.clear() == 0
    cache.reset_stats()
    _load(2)
    assert cache.stats()["generated"] == 1


def test_housekeeping_on_a_missing_directory(cache_dir):
    assert not cache_dir.exists()
    assert cache.entries() == [] and cache.clear() == 0 and cache.prune(1) == 0
    s = cache.stats()
    assert (s["entries"], s["bytes"]) == (0, 0)
    assert not cache_dir.exists()


def _entry_bytes(cache_dir, key) -> int:
    kernels = cache_dir / "kernels"
    name = cache.module_name(key)
    return sum(p.stat().st_size for p in [*kernels.glob(f"{name}.*"), *(kernels / "__pycache__").glob(f"{name}.*")])


def test_trim_removes_least_recently_used_first_with_their_numba_files(cache_dir):
    keys = [cache.load(fields(op=f"numba{n}"), Generator(numba_source(n)))[1] for n in range(4)]
    for n, key in enumerate(keys):
        module = cache.load(fields(op=f"numba{n}"), Generator(numba_source(n)))[0]
        assert module.k(1.0) == 2.0 + n            # compiled: Numba's files are in __pycache__
    now = time.time()
    for age, key in zip((4, 1, 3, 2), keys):
        _set_last_used(key, now - age * DAY)
    sizes = {key: _entry_bytes(cache_dir, key) for key in keys}
    assert all(size > 0 for size in sizes.values())
    cache._forget()                                  # this process holds none of them now
    assert cache.trim(sum(sizes.values())) == 0
    keep = sizes[keys[1]] + sizes[keys[3]]
    assert cache.trim(keep) == 2
    assert {e.key for e in cache.entries()} == {keys[1], keys[3]}
    assert _entry_bytes(cache_dir, keys[0]) == _entry_bytes(cache_dir, keys[2]) == 0
    assert cache.trim(0) == 0                        # 0: no bound
    with pytest.raises(ValueError):
        cache.trim(-1)


def test_trim_keeps_what_this_process_uses(cache_dir):
    used = _load(1)
    old = _load(2)
    _set_last_used(used, time.time() - 9 * DAY)      # the oldest, but loaded here
    from ustc.cache import _state

    _state.forget([old])
    assert cache.trim(1) == 1
    assert [e.key for e in cache.entries()] == [used]


def test_new_entries_keep_the_directory_within_the_bound(cache_dir, monkeypatch):
    from ustc.cache import _manage, _state

    monkeypatch.setattr(_manage, "TRIM_EVERY", 1)
    first = _load(0)
    per_entry = _entry_bytes(cache_dir, first)
    monkeypatch.setenv("USTC_CACHE_MAX_BYTES", str(3 * per_entry + per_entry // 2))
    for n in range(1, 8):
        _state.forget()                              # as separate processes would: nothing held
        _load(n)
    total = sum(_entry_bytes(cache_dir, e.key) for e in cache.entries())
    assert total <= 3 * per_entry + per_entry // 2 and len(cache.entries()) >= 2
    assert cache.entries()[0].op == "op7"            # the newest stays


def test_a_process_first_write_skips_the_scan_after_a_recent_check(cache_dir, monkeypatch):
    from ustc.cache import _manage

    scans = []
    real = _manage._sizes
    monkeypatch.setattr(_manage, "_sizes", lambda k: scans.append(1) or real(k))
    monkeypatch.setattr(_manage, "_written", 0)
    _load(1)                                         # no check recorded yet: scans, marks
    assert len(scans) == 1 and (cache_dir / "kernels" / _manage.CHECKED).exists()
    monkeypatch.setattr(_manage, "_written", 0)      # a new process
    _load(2)
    assert len(scans) == 1                           # checked within the day: skipped
    old = time.time() - 2 * DAY
    os.utime(cache_dir / "kernels" / _manage.CHECKED, (old, old))
    monkeypatch.setattr(_manage, "_written", 0)
    _load(3)
    assert len(scans) == 2
    cache.clear()
    assert list((cache_dir / "kernels").iterdir()) == []   # the marker goes with the entries


@pytest.mark.parametrize("text, expected", [("0", 0), ("123", 123), ("2G", 2 << 30), ("500M", 500 << 20),
                                            ("1.5GiB", 3 << 29), ("64kb", 64 << 10), (" 1t ", 1 << 40)])
def test_sizes(text, expected):
    from ustc.cache._manage import parse_size

    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "-1", "lots", "2X", "nan", "G"])
def test_bad_sizes(text, monkeypatch):
    from ustc.cache._manage import parse_size

    with pytest.raises(ValueError, match="is not a size"):
        parse_size(text)
    monkeypatch.setenv("USTC_CACHE_MAX_BYTES", text or "x")
    with pytest.raises(KernelError, match="USTC_CACHE_MAX_BYTES"):
        cache.max_bytes()


def test_default_bound(monkeypatch):
    monkeypatch.delenv("USTC_CACHE_MAX_BYTES", raising=False)
    assert cache.max_bytes() == 2 << 30
