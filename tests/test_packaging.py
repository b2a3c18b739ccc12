"""The wheel ships every package: pyproject's explicit list covers each directory with an __init__.py."""

import pathlib
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_every_package_is_listed():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    dirs = config["package-dir"]
    found = set()
    for package, folder in dirs.items():
        base = ROOT / folder
        for init in base.rglob("__init__.py"):
            if "__pycache__" in init.parts:
                continue
            rel = init.parent.relative_to(base).parts
            name = ".".join((package, *rel))
            # a sub-folder mapped elsewhere in package-dir belongs to that mapping
            if not any(name != p and name.startswith(p + ".") and p in dirs and p != package for p in dirs):
                found.add(name)
    missing = sorted(found - listed)
    assert not missing, f"packages missing from pyproject.toml [tool.setuptools] packages: {missing}"
