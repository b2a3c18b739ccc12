"""The ``ustc`` command line: ``ustc formats`` and ``ustc info``."""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import pytest

import ustc
from ustc import TensorFormat, formats
from ustc.cli import main


def _rows(out: str) -> list[str]:
    lines = out.rstrip("\n").splitlines()
    assert re.fullmatch(r"name +DSL", lines[0])
    assert re.fullmatch(r"-+  -+", lines[1])
    return lines[2:]


def test_formats_lists_every_named_format(capsys):
    assert main(["formats"]) == 0
    rows = _rows(capsys.readouterr().out)
    assert len(rows) == len(formats.NAMED)
    for row, nf in zip(rows, formats.NAMED):
        name, text = re.split(r"\s{2,}", row, maxsplit=1)
        assert name == nf.name + nf.params
        assert text == nf.format().text
        assert TensorFormat.parse(text) == nf.format()


def _ustc_command() -> list[str]:
    script = Path(sys.executable).with_name("ustc")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "ustc.cli.main"]


def test_formats_in_a_real_process(capsys):
    main(["formats"])
    expected = capsys.readouterr().out
    for command in (_ustc_command(), [sys.executable, "-W", "ignore::RuntimeWarning", "-m", "ustc.cli.main"]):
        done = subprocess.run(command + ["formats"], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert done.stdout == expected


def _info(capsys, monkeypatch, cache_dir: str | None) -> str:
    if cache_dir is None:
        monkeypatch.delenv("USTC_CACHE_DIR", raising=False)
    else:
        monkeypatch.setenv("USTC_CACHE_DIR", cache_dir)
    assert main(["info"]) == 0
    return capsys.readouterr().out


def test_info_prints_versions_targets_and_cache(capsys, monkeypatch, tmp_path):
    out = _info(capsys, monkeypatch, str(tmp_path / "kernels"))
    lines = out.splitlines()
    assert re.fullmatch(r"package +version", lines[0])
    versions = dict(re.split(r"\s{2,}", line, maxsplit=1) for line in lines[2:] if line and ":" not in line)
    assert versions["ustc"] == ustc.__version__
    assert versions["python"] == platform.python_version()
    import lark
    import numpy

    assert versions["numpy"] == numpy.__version__
    assert versions["lark"] == lark.__version__
    targets = [line for line in lines if line.startswith("targets")]
    assert len(targets) == 1
    assert re.match(r"targets\s*: cpu\b", targets[0])
    assert "cuda" in targets[0]
    assert f"cache    : {tmp_path / 'kernels'}" in lines


def test_info_cache_defaults_to_the_user_cache_dir(capsys, monkeypatch):
    import platformdirs

    out = _info(capsys, monkeypatch, None)
    assert f"cache    : {platformdirs.user_cache_dir('ustc')}" in out.splitlines()


def test_info_in_a_real_process(tmp_path):
    env = dict(os.environ, USTC_CACHE_DIR=str(tmp_path))
    done = subprocess.run(_ustc_command() + ["info"], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert f"cache    : {tmp_path}" in done.stdout.splitlines()
    assert re.search(r"^targets\s*: cpu\b", done.stdout, re.M)


def test_unknown_or_missing_command_exits_with_usage(capsys):
    for argv in (["no-such-command"], []):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 2
        assert "usage: ustc" in capsys.readouterr().err
