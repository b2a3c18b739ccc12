"""What the GPU machine has: Python, the installed distributions, the GPU and its driver.

Every function returns plain data (JSON-ready) and never raises for something absent:
a missing distribution is ``None``, a machine without ``nvidia-smi`` or CUDA bindings
reports ``{"error": ...}``.
"""

from __future__ import annotations

import importlib.metadata
import platform
import shutil
import subprocess
import sys

import kit_needs

#: reported whether or not the kit touches them
REPORTED = ("torch", "cupy-cuda13x", "cupy-cuda12x", "cupy", "triton", "pytest", "pytest-xdist", "hypothesis",
            "setuptools", "wheel", "pip", "nvidia-nvjitlink", "nvidia-cuda-nvrtc", "nvidia-nvvm", "cuda-toolkit")
SMI_FIELDS = ("name", "driver_version", "memory.total", "compute_cap")


def installed(names) -> dict:
    """``{normalised name: version or None}`` through ``importlib.metadata.version``."""
    out = {}
    for name in names:
        key = kit_needs.normalise(name)
        try:
            out[key] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[key] = None
    return out


def all_names() -> list[str]:
    """Every distribution the kit needs, checks or reports, once each."""
    names = [r.name for r in kit_needs.REQUIREMENTS + kit_needs.CHECKED_ONLY] + list(REPORTED)
    return list(dict.fromkeys(kit_needs.normalise(n) for n in names))


def python_info() -> dict:
    return {"version": platform.python_version(), "executable": sys.executable, "machine": platform.machine(),
            "platform": platform.platform()}


def gpu_from_smi(run=subprocess.run) -> dict:
    """The first GPU as ``nvidia-smi --query-gpu`` reports it."""
    if shutil.which("nvidia-smi") is None:
        return {"error": "nvidia-smi not found"}
    argv = ["nvidia-smi", f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader"]
    try:
        done = run(argv, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        return {"error": f"nvidia-smi failed: {exc}"}
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    if done.returncode != 0 or not lines:
        return {"error": f"nvidia-smi exit {done.returncode}: {done.stderr.strip()[:300]}"}
    values = [v.strip() for v in lines[0].split(",")]
    return {"source": "nvidia-smi", "count": len(lines), **dict(zip(SMI_FIELDS, values))}


def gpu_from_bindings() -> dict:
    """Driver version and the first device's name through ``cuda.bindings.driver``."""
    try:
        from cuda.bindings import driver
    except ImportError as exc:
        return {"error": f"no cuda.bindings: {exc}"}
    try:
        (err,) = driver.cuInit(0)
        if int(err):
            return {"error": f"cuInit: {err}"}
        err, version = driver.cuDriverGetVersion()
        err, device = driver.cuDeviceGet(0)
        err, name = driver.cuDeviceGetName(64, device)
        return {"source": "cuda.bindings", "name": name.split(b"\0")[0].decode(),
                "driver_cuda_version": f"{version // 1000}.{version % 1000 // 10}"}
    except Exception as exc:  # noqa: BLE001 - any driver failure is a report, not a crash
        return {"error": f"cuda.bindings: {exc}"}


def gpu() -> dict:
    found = gpu_from_smi()
    return found if "error" not in found else {**gpu_from_bindings(), "nvidia_smi": found["error"]}


def report() -> dict:
    """Everything above in one dict (``versions.json``'s ``before`` / ``after``)."""
    return {"python": python_info(), "distributions": installed(all_names()), "gpu": gpu()}
