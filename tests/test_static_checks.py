"""The static-check configuration stays in step with the code it guards."""
from __future__ import annotations

from pathlib import Path

from sdk.config import load_toml
from sdk.remote.agent import CORE_MODULES

ROOT = Path(__file__).resolve().parent.parent


def test_every_module_the_agent_bundles_is_linted_for_python_38():
    """The zipapp runs on Python 3.8: each core module it bundles is checked by ruff as 3.8 code."""
    per_file = load_toml(ROOT / "pyproject.toml")["tool"]["ruff"]["per-file-target-version"]
    py38 = {path for path, version in per_file.items() if version == "py38"}
    missing = [m for m in CORE_MODULES if f"sdk/{m}.py" not in py38]
    assert not missing, f"add to [tool.ruff.per-file-target-version] as py38: {missing}"
    assert {"remote/agent/**/*.py", "targets/**/*.py", "sdk/formats/*.py"} <= py38


def test_every_test_folder_is_a_package():
    """tests/ is a package (helpers import as `tests.remote.sshd`; any test file runs alone): a
    folder of tests without __init__.py would be imported by its basename and could clash."""
    folders = {p.parent for p in (ROOT / "tests").rglob("test_*.py")}
    missing = sorted(str(f.relative_to(ROOT)) for f in folders if not (f / "__init__.py").is_file())
    assert not missing, f"add an __init__.py to: {missing}"
