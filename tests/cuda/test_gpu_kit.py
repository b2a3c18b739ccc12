"""The GPU validation kit (tools/gpu_kit) without a GPU and without network: manifests and
the 64 MiB budget over fake wheels, the xz round trip, version specifiers, what validate.py
finds and decides (importlib.metadata mocked), and the commands it would run (dry run)."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

KIT = Path(__file__).resolve().parents[2] / "tools" / "gpu_kit"
sys.path.insert(0, str(KIT))

import kit_needs  # noqa: E402
import kit_probe  # noqa: E402
import kit_wheels  # noqa: E402
import prepare  # noqa: E402
import validate  # noqa: E402


def fake_wheel(folder: Path, name: str, version: str, payload: bytes = b"x" * 1000) -> Path:
    """A small valid wheel (deflated, like PyPI's) named as pip names them."""
    path = folder / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(f"{name.replace('-', '_')}/__init__.py", payload)
        z.writestr(f"{name.replace('-', '_')}-{version}.dist-info/METADATA",
                   f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return path


def fake_kit(folder: Path, versions: dict, xz=("llvmlite",), project_bytes=0, budget=kit_wheels.BUDGET):
    folder.mkdir(parents=True, exist_ok=True)
    entries = []
    for name, version in versions.items():
        wheel = fake_wheel(folder, name, version, payload=(name * 500).encode())
        if name in xz:
            packed, digest = kit_wheels.pack_xz(wheel, folder)
            wheel.unlink()
            entries.append(kit_wheels.entry(packed, "", digest))
        else:
            entries.append(kit_wheels.entry(wheel))
    manifest = kit_wheels.Manifest(tuple(entries), project_bytes, budget)
    kit_wheels.write(folder, manifest)
    return manifest


GOOD = {"numba": "0.68.1", "llvmlite": "0.50.0", "numba-cuda": "0.30.4", "lark": "1.3.1", "platformdirs": "4.3.6",
        "networkx": "3.4", "cuda-pathfinder": "1.9.0", "packaging": "24.2", "cuda-core": "0.6.0",
        "cuda-bindings": "13.0.1", "numpy": "2.3.5", "scipy": "1.16.0"}


def mock_metadata(monkeypatch, versions: dict) -> None:
    def version(name):
        key = kit_needs.normalise(name)
        if versions.get(key) is None:
            raise importlib.metadata.PackageNotFoundError(name)
        return versions[key]

    monkeypatch.setattr(importlib.metadata, "version", version)


# -- names, versions, specifiers ----------------------------------------------------------

@pytest.mark.parametrize("filename, expected", [
    ("numba_cuda-0.30.4-cp312-cp312-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl", ("numba-cuda", "0.30.4")),
    ("llvmlite-0.50.0-cp312-cp312-manylinux_2_27_x86_64.whl.xz", ("llvmlite", "0.50.0")),
    ("lark-1.3.1-py3-none-any.whl", ("lark", "1.3.1")),
    ("foo-2.0-1build-py3-none-any.whl", ("foo", "2.0")),
])
def test_wheel_names(filename, expected):
    assert kit_wheels.wheel_name_version(filename) == expected


def test_wheel_name_refuses_other_files():
    with pytest.raises(ValueError):
        kit_wheels.wheel_name_version("numba-0.68.1.tar.gz")


@pytest.mark.parametrize("version, spec, ok", [
    ("0.68.1", "==0.68.*", True), ("0.68.0rc1", "==0.68.*", True), ("0.61.2", "==0.68.*", False),
    ("0.30.4", ">=0.30.4,<0.31", True), ("0.30.3", ">=0.30.4,<0.31", False), ("0.31.0", ">=0.30.4,<0.31", False),
    ("2.11.0+cu130", ">=2.5", True), ("1.3.1", ">=1.2,<2", True), ("2.0", ">=1.2,<2", False),
    ("3.14.1", "!=3.14.1", False), ("3.14", "!=3.14.1", True), ("1.4.2", "~=1.4", True), ("2.0", "~=1.4", False),
    (None, ">=0", False),
])
def test_specifiers(version, spec, ok):
    assert kit_needs.satisfies(version, spec) is ok


def test_bad_specifiers_are_refused():
    with pytest.raises(ValueError):
        kit_needs.satisfies("1.0", ">=1.*")
    with pytest.raises(ValueError):
        kit_needs.satisfies("1.0", "=>1")


def test_requirements_match_pyproject():
    """Every kit requirement the project pins is spelled as pyproject pins it."""
    text = (KIT.parents[1] / "pyproject.toml").read_text()
    assert '"numba>=0.68,<0.69"' in text and '"llvmlite>=0.50,<0.51"' in text and '"lark>=1.2,<2"' in text
    names = {kit_needs.normalise(r.name) for r in kit_needs.REQUIREMENTS}
    assert {"numba", "llvmlite", "numba-cuda", "lark", "platformdirs", "networkx"} <= names
    assert [r.name for r in kit_needs.REQUIREMENTS if r.xz] == ["llvmlite"]


# -- manifest and budget --------------------------------------------------------------------

def test_manifest_records_every_file_and_round_trips(tmp_path):
    manifest = fake_kit(tmp_path / "kit", {"numba": "0.68.1", "llvmlite": "0.50.0", "lark": "1.3.1"},
                        project_bytes=123)
    read = kit_wheels.read(tmp_path / "kit")
    assert read == manifest
    for e in read.entries:
        path = tmp_path / "kit" / e.file
        assert e.size == path.stat().st_size and e.sha256 == kit_wheels.sha256(path)
    assert [e.file.endswith(".xz") for e in read.entries] == [False, True, False]
    assert read.total == sum(e.size for e in read.entries) + 123
    data = json.loads((tmp_path / "kit" / "manifest.json").read_text())
    assert data["fits"] is True and data["total"] == read.total
    assert kit_wheels.verify(tmp_path / "kit", read) == []


def test_verify_finds_missing_and_changed_files(tmp_path):
    manifest = fake_kit(tmp_path / "kit", {"numba": "0.68.1", "lark": "1.3.1"})
    (tmp_path / "kit" / manifest.entries[0].file).write_bytes(b"changed")
    (tmp_path / "kit" / manifest.entries[1].file).unlink()
    problems = kit_wheels.verify(tmp_path / "kit", manifest)
    assert len(problems) == 2 and "differs" in problems[0] and "missing" in problems[1]


def test_budget_check():
    e = kit_wheels.Entry("a", "1", "a-1-py3-none-any.whl", "0" * 64, 40 * 2**20, "a-1-py3-none-any.whl", "0" * 64)
    assert kit_wheels.Manifest((e,), 20 * 2**20).fits
    over = kit_wheels.Manifest((e,), 30 * 2**20)
    assert not over.fits and "DOES NOT FIT" in over.summary()
    assert kit_wheels.Manifest((e,), 0, budget=2**20).summary().endswith("DOES NOT FIT")


def test_optional_wheels_are_dropped_first_when_over_budget():
    mib = 2**20

    def e(name, size):
        return kit_wheels.Entry(name, "1", name, "", size * mib, name, "")

    entries = [e("numba", 40), e("cuda-core", 10), e("cuda-bindings", 10)]
    kept, dropped = prepare.select(entries, {"cuda-core", "cuda-bindings"}, project=5 * mib, budget=64 * mib)
    assert [x.name for x in kept] == ["numba", "cuda-core"] and [x.name for x in dropped] == ["cuda-bindings"]
    kept, dropped = prepare.select(entries, {"cuda-core", "cuda-bindings"}, project=30 * mib, budget=64 * mib)
    assert [x.name for x in kept] == ["numba"] and len(dropped) == 2


def test_project_bytes_counts_what_travels(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "a.py").write_bytes(b"a" * 100)
    (repo / "notes.txt").write_bytes(b"n" * 10)           # untracked, not ignored: travels
    (repo / ".gitignore").write_text("ignored/\n")
    (repo / "ignored").mkdir()
    (repo / "ignored" / "big").write_bytes(b"b" * 5000)   # ignored: stays
    (repo / "kit").mkdir()
    (repo / "kit" / "w.whl").write_bytes(b"w" * 700)      # the kit itself: counted as the kit, not the project
    subprocess.run(["git", "-C", str(repo), "add", "a.py"], check=True)
    assert prepare.project_bytes(repo, exclude=repo / "kit") == 100 + 10 + len("ignored/\n")


def test_download_commands_name_the_gpu_machine():
    argv = prepare.download_command(kit_needs.REQUIREMENTS[0], Path("/tmp/x"), python="py")
    assert argv[:4] == ["py", "-m", "pip", "download"]
    assert "--no-deps" in argv and "--only-binary=:all:" in argv
    assert argv[argv.index("--python-version") + 1] == "3.12" and argv[argv.index("--abi") + 1] == "cp312"
    assert "manylinux_2_28_x86_64" in argv and argv[-1] == "numba==0.68.*"


def test_prepare_dry_run_prints_one_download_per_requirement(capsys, tmp_path):
    assert prepare.main([str(tmp_path / "kit"), "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(kit_needs.REQUIREMENTS)
    assert [line for line in lines if line.endswith("# then xz")][0].split()[-4] == "llvmlite==0.50.*"
    assert not (tmp_path / "kit").exists()


# -- xz --------------------------------------------------------------------------------------

def test_xz_round_trip_gives_a_stored_wheel_with_the_same_files(tmp_path):
    wheel = fake_wheel(tmp_path, "llvmlite", "0.50.0", payload=bytes(range(256)) * 400)
    packed, digest = kit_wheels.pack_xz(wheel, tmp_path / "kit")
    assert packed.name == wheel.name + ".xz" and wheel.exists()
    assert not list((tmp_path / "kit").glob("*.stored"))
    restored = kit_wheels.unpack_xz(packed, tmp_path / "out")
    assert restored.name == wheel.name and kit_wheels.sha256(restored) == digest
    with zipfile.ZipFile(wheel) as a, zipfile.ZipFile(restored) as b:
        assert a.namelist() == b.namelist()
        assert all(a.read(n) == b.read(n) for n in a.namelist())
        assert {i.compress_type for i in b.infolist()} == {zipfile.ZIP_STORED}
        assert b.testzip() is None
    assert packed.stat().st_size < restored.stat().st_size


# -- what the GPU machine has and what validate does -----------------------------------------

def test_installed_versions_through_importlib_metadata(monkeypatch):
    mock_metadata(monkeypatch, {"numba": "0.61.0", "torch": "2.11.0+cu130"})
    found = kit_probe.installed(["numba", "Numba_CUDA", "torch"])
    assert found == {"numba": "0.61.0", "numba-cuda": None, "torch": "2.11.0+cu130"}


def test_decisions(tmp_path, monkeypatch):
    manifest = fake_kit(tmp_path / "kit", {"numba": "0.68.1", "llvmlite": "0.50.0", "numba-cuda": "0.30.4",
                                           "lark": "1.3.1", "platformdirs": "4.3.6", "networkx": "3.4",
                                           "cuda-pathfinder": "1.9.0", "packaging": "24.2"})
    found = dict(GOOD, numba="0.61.2", llvmlite="0.44.0", lark=None, **{"cuda-core": None, "numba-cuda": "0.30.4"})
    mock_metadata(monkeypatch, found)
    decisions = {d.name: d for d in kit_needs.decide(kit_probe.installed(kit_probe.all_names()), manifest.entries)}
    assert decisions["numba"].action == "install" and decisions["numba"].version == "0.68.1"
    assert decisions["llvmlite"].action == "install" and decisions["llvmlite"].wheel.endswith(".whl.xz")
    assert decisions["lark"].action == "install" and "missing" in decisions["lark"].line()
    assert decisions["numba-cuda"].action == "keep" and decisions["platformdirs"].action == "keep"
    assert decisions["cuda-core"].action == "unavailable" and "NOT IN THE KIT" in decisions["cuda-core"].line()
    assert decisions["numpy"].action == "keep"


def test_nothing_to_install_when_everything_matches(tmp_path, monkeypatch):
    manifest = fake_kit(tmp_path / "kit", {"numba": "0.68.1"})
    mock_metadata(monkeypatch, GOOD)
    decisions = kit_needs.decide(kit_probe.installed(kit_probe.all_names()), manifest.entries)
    assert {d.action for d in decisions} == {"keep"}
    steps = validate.plan(tmp_path / "kit", tmp_path / "out", Path("/repo"), decisions, python="py")
    assert [s.name for s in steps] == ["install ustc", "numba.cuda.detect", "pytest -m gpu", "bench_gpu --write"]


def test_plan_commands(tmp_path):
    d = [kit_needs.Decision("llvmlite", "==0.50.*", "0.44.0", "install", "llvmlite-0.50.0-cp312-x.whl.xz", "0.50.0"),
         kit_needs.Decision("lark", ">=1.2,<2", None, "install", "lark-1.3.1-py3-none-any.whl", "1.3.1"),
         kit_needs.Decision("numba", "==0.68.*", "0.68.1", "keep")]
    options = validate.Options(pytest_args=("-x",), bench_args=("--repeat", "5"))
    steps = validate.plan(Path("/k"), Path("/o"), Path("/r"), d, options, python="py", unpacked=Path("/u"))
    by = {s.name: s for s in steps}
    assert by["unpack llvmlite"].argv == ("/k/llvmlite-0.50.0-cp312-x.whl.xz", "/u")
    pip = by["install kit wheels"].argv
    assert pip[:4] == ("py", "-m", "pip", "install") and "--no-index" in pip and "--no-deps" in pip
    assert pip[-2:] == ("llvmlite==0.50.0", "lark==1.3.1") and ("--find-links", "/u") == pip[-4:-2]
    assert by["install ustc"].argv[-2:] == ("-e", "/r") and "--no-build-isolation" in by["install ustc"].argv
    test = by["pytest -m gpu"]
    assert test.argv[3:5] == ("-m", "gpu") and "--junitxml=/o/pytest.xml" in test.argv and test.argv[-1] == "-x"
    assert test.cwd == "/r" and test.log == "pytest.log"
    assert by["bench_gpu --write"].argv == ("py", "benchmarks/bench_gpu.py", "--write", "--repeat", "5")
    assert [s.name for s in steps].index("unpack llvmlite") < [s.name for s in steps].index("install kit wheels")
    assert "xz -d" in by["unpack llvmlite"].line() and "(cd /r && py -m pytest" in test.line()
    quiet = validate.plan(Path("/k"), Path("/o"), Path("/r"), d, validate.Options(tests=False, bench=False))
    assert not {"pytest -m gpu", "bench_gpu --write"} & {s.name for s in quiet}


def test_validate_dry_run_writes_versions_and_plan(tmp_path, monkeypatch, capsys):
    fake_kit(tmp_path / "kit", {"numba": "0.68.1", "llvmlite": "0.50.0"})
    mock_metadata(monkeypatch, dict(GOOD, numba="0.61.0", llvmlite="0.44.0", torch="2.11.0"))
    monkeypatch.setattr(kit_probe, "gpu", lambda: {"source": "test", "name": "NVIDIA H100 80GB HBM3"})
    rc = validate.main([str(tmp_path / "kit"), str(tmp_path / "out"), "--dry-run", "--bench-args", "--repeat 3"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "numba: 0.61.0, needs ==0.68.* -> install 0.68.1" in out and "xz -d" in out
    versions = json.loads((tmp_path / "out" / "versions.json").read_text())
    assert versions["before"]["distributions"]["torch"] == "2.11.0"
    assert versions["before"]["gpu"]["name"].startswith("NVIDIA H100")
    assert {d["name"]: d["action"] for d in versions["decisions"]}["llvmlite"] == "install"
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["dry_run"] and summary["steps"][-1]["command"].endswith("--write --repeat 3) >> bench.log")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["summary.json", "versions.json"]


def test_validate_stops_on_a_tampered_kit(tmp_path, monkeypatch):
    manifest = fake_kit(tmp_path / "kit", {"numba": "0.68.1"})
    (tmp_path / "kit" / manifest.entries[0].file).write_bytes(b"other")
    mock_metadata(monkeypatch, GOOD)
    monkeypatch.setattr(kit_probe, "gpu", lambda: {"error": "none"})
    assert validate.main([str(tmp_path / "kit"), str(tmp_path / "out"), "--no-tests", "--no-bench"]) == 1
    assert json.loads((tmp_path / "out" / "summary.json").read_text())["problems"]


def test_steps_run_and_log(tmp_path):
    wheel = fake_wheel(tmp_path, "lark", "1.3.1")
    packed, digest = kit_wheels.pack_xz(wheel, tmp_path / "kit")
    unpack = validate.Step("unpack lark", "unpack", (str(packed), str(tmp_path / "u")), "setup.log")
    assert validate.run_step(unpack, tmp_path)["rc"] == 0
    assert digest in (tmp_path / "setup.log").read_text()
    ok = validate.Step("hello", "run", (sys.executable, "-c", "print('hello')"), "setup.log")
    assert validate.run_step(ok, tmp_path)["rc"] == 0
    slow = validate.Step("slow", "run", (sys.executable, "-c", "import time; time.sleep(5)"), "x.log", timeout=1)
    assert validate.run_step(slow, tmp_path)["rc"] == 124
    assert "hello" in (tmp_path / "setup.log").read_text() and "timed out" in (tmp_path / "x.log").read_text()


def test_gpu_probe_without_nvidia_smi(monkeypatch):
    monkeypatch.setattr(kit_probe.shutil, "which", lambda name: None)
    assert kit_probe.gpu_from_smi() == {"error": "nvidia-smi not found"}


def test_gpu_probe_parses_nvidia_smi(monkeypatch):
    monkeypatch.setattr(kit_probe.shutil, "which", lambda name: "/usr/bin/nvidia-smi")

    def run(argv, **kw):
        return subprocess.CompletedProcess(argv, 0, "NVIDIA H100 80GB HBM3, 580.159.04, 81559 MiB, 9.0\n", "")

    found = kit_probe.gpu_from_smi(run)
    assert found["name"] == "NVIDIA H100 80GB HBM3" and found["driver_version"] == "580.159.04"
    assert found["compute_cap"] == "9.0" and found["count"] == 1


def test_bench_section(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "benchmarks.md").write_text("# B\n\n## CPU\n\nx\n\n## GPU kernels\n\n| a |\n\n## Next\n\ny\n")
    assert validate.bench_section(tmp_path) == "## GPU kernels\n\n| a |\n"
    assert validate.bench_section(tmp_path / "none") == ""
