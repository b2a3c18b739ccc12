"""``ustc cache list | show KEY | stats | clear | path | prune [--older-than DAYS] [--max-size SIZE]``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest
from cache_helpers import Generator, fields

import ustc.cache as cache
from ustc.cache import _store
from ustc.cli import main
from ustc.cli.cache_cmd import human_time, short_format


def _load(n: int, **extra) -> str:
    return cache.load(fields(op=f"y(i) = A(i,j) * x(j) + {n}", **extra), Generator(f"VALUE = {n}\n"))[1]


def _cli(capsys, *argv) -> tuple[int, str, str]:
    code = main(["cache", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_path(capsys, cache_dir):
    assert _cli(capsys, "path") == (0, f"{cache_dir}\n", "")


def test_list(capsys, cache_dir):
    code, out, _ = _cli(capsys, "list")
    assert code == 0 and out == f"no cached kernels in {cache_dir / 'kernels'}\n"
    old = _load(1, formats=["(d0, d1) -> (d1 : dense, d0 : compressed)", "(d0, d1) -> (d0 floordiv 2 : dense, "
                            "d1 floordiv 3 : compressed, d0 mod 2 : dense, d1 mod 3 : dense)"])
    new = _load(2)

    def backdate(record):
        record["last_used"] = time.time() - 3 * 86400
        return True

    _store.update_record(old, backdate)
    code, out, _ = _cli(capsys, "list")
    lines = out.splitlines()
    assert code == 0 and len(lines) == 4
    assert re.split(r"\s{2,}", lines[0]) == ["key", "op", "target", "dtypes", "formats", "size", "hits",
                                            "last used"]
    first = re.split(r"\s{2,}", lines[2])
    assert first[0] == new[:12] and first[1] == "y(i) = A(i,j) * x(j) + 2"
    assert first[2:] == ["cpu", "float64,int32", "CSR", "10 B", "0", "just now"]
    second = re.split(r"\s{2,}", lines[3])
    assert second[0] == old[:12] and second[4].startswith("CSC ; (d0 floordiv 2:dense, ")
    assert second[4].endswith("...") and re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d", second[7])


def test_show(capsys, cache_dir):
    key = _load(3)
    code, out, err = _cli(capsys, "show", key[:8])
    assert code == 0 and err == ""
    head, source = out.split("\n\n", 1)
    assert source == "VALUE = 3\n"
    record = dict(re.split(r"\s+:\s", line, maxsplit=1) for line in head.splitlines())
    assert record["key"] == key and record["module"] == cache.module_name(key)
    assert record["op"] == "y(i) = A(i,j) * x(j) + 3" and record["target"] == "cpu"
    assert record["format"] == "(d0, d1) -> (d0 : dense, d1 : compressed)"
    assert record["size"] == "10 bytes" and record["hits"] == "0" and record["compile"] == "-"


def test_show_errors_are_one_line_and_exit_1(capsys, cache_dir):
    for argv in (("show", "abc"), ("show", "not-hex")):
        code, out, err = _cli(capsys, *argv)
        assert code == 1 and out == ""
        assert err.startswith("ustc cache show: error: ") and err.count("\n") == 1


def test_stats_reports_disk_aggregates(capsys, cache_dir):
    a, b = _load(1), _load(2)
    for key, seconds, hits in ((a, 0.5, 3), (b, 0.25, 2)):
        def change(record, seconds=seconds, hits=hits):
            record.update(compile_seconds=seconds, hits=hits)
            return True

        _store.update_record(key, change)
    code, out, _ = _cli(capsys, "stats")
    rows = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in out.splitlines()[2:])
    assert code == 0
    assert rows["entries"] == "2" and rows["hits"] == "5" and rows["source bytes"] == "20"
    assert rows["compile seconds"] == "0.750" and rows["compile seconds saved (est.)"] == "2.000"
    assert rows["bytes"].startswith(f"{cache.stats()['bytes']} (")


def test_clear_and_prune(capsys, cache_dir):
    _load(1), _load(2)
    assert _cli(capsys, "prune", "--older-than", "1")[:2] == (0, "removed 0 cached kernels not used for 1 day\n")
    assert _cli(capsys, "prune", "--older-than", "0")[:2] == (0, "removed 2 cached kernels not used for 0 days\n")
    _load(3)
    assert _cli(capsys, "clear")[:2] == (0, f"removed 1 cached kernel from {cache_dir / 'kernels'}\n")
    assert cache.entries() == []


@pytest.mark.parametrize("argv", [["cache"], ["cache", "nope"], ["cache", "prune"],
                                  ["cache", "prune", "--older-than", "-2"], ["cache", "prune", "--max-size", "lots"],
                                  ["cache", "show"]])
def test_usage_errors_exit_2(capsys, argv):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2 and "usage: ustc cache" in capsys.readouterr().err


def test_in_a_real_process(cache_dir):
    key = _load(4)
    env = dict(os.environ, USTC_CACHE_DIR=str(cache_dir))
    done = subprocess.run([sys.executable, "-m", "ustc.cli.main", "cache", "list"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert key[:12] in done.stdout


def test_human_time_and_short_format():
    now = 1_800_000_000.0
    assert human_time(now - 5, now) == "just now"
    assert human_time(now - 180, now) == "3 min ago"
    assert human_time(now - 7200, now) == "2 h ago"
    assert human_time(now - 3 * 86400, now) == time.strftime("%Y-%m-%d %H:%M", time.localtime(now - 3 * 86400))
    assert short_format("(d0, d1) -> (d0 : dense, d1 : compressed)") == "CSR"
    assert short_format("(d0, d1, d2) -> (d0 : compressed, d1 : compressed, d2 : compressed)") == "CSF(3)"
    assert short_format("ndarray") == "ndarray"
    assert short_format("(d0) -> (d0 : delta(4))") == "(d0:delta(4))"


def test_prune_to_a_size_removes_the_least_recently_used(capsys, cache_dir):
    keys = [_load(n) for n in range(3)]
    now = time.time()
    for age, key in zip((1, 3, 2), keys):   # keys[1] oldest, then keys[2]
        _store.update_record(key, lambda r, t=now - age * 86400: r.update(last_used=t) or True)
    cache._forget()                          # nothing held by this process
    one = sum(p.stat().st_size for p in (cache_dir / "kernels").glob(f"{cache.module_name(keys[0])}.*"))
    code, out, _ = _cli(capsys, "prune", "--max-size", str(one))
    assert code == 0 and out == f"removed 2 least recently used kernels to fit {one} bytes\n"
    assert [e.key for e in cache.entries()] == [keys[0]]
