"""pyproject.toml ships every package folder under the one `sdk` namespace."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(sys.version_info < (3, 11), reason="tomllib is Python 3.11+")
def test_every_package_folder_is_listed():
    import tomllib

    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(cfg["packages"])
    dirs = {pkg: ROOT / path for pkg, path in cfg["package-dir"].items()}
    assert all(pkg == "sdk" or pkg.startswith("sdk.") for pkg in dirs), "one import namespace: sdk"
    found = set()
    for pkg, base in dirs.items():
        for init in base.rglob("__init__.py"):
            rel = init.parent.relative_to(base).parts
            found.add(".".join((pkg, *rel)))
    # a folder mapped on its own (sdk.targets <- targets/) is not also a subfolder of sdk/
    assert found - listed == set(), f"package folders missing from pyproject packages: {sorted(found - listed)}"
    assert listed - found == set(), f"listed packages without a folder: {sorted(listed - found)}"
