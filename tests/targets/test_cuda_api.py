"""The CUDA backends against the REAL pycuda and cuda-python packages (no GPU needed): every module
attribute the backends use resolves, every call passes an argument count the function accepts,
every ``from pycuda... import`` names something that module has, and the methods called on their
objects (contexts, streams, events, allocations) exist.

CI installs both (.ci/run: pycuda built from source over a generated libcuda link stub,
cuda-python from its wheel) and requires the ``gpu-apis`` tier (tests/tiers.py), so a missing package fails
there instead of skipping. This is what would have caught ``from pycuda.compiler import
CompileError`` (it lives in ``pycuda.driver``)."""
from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

from tests import tiers

import sdk.targets.cuda

CUDA_DIR = Path(sdk.targets.cuda.__file__).parent  # the files this import uses, wherever sdk comes from

#: file -> {local name of a module in the code: the real module}
ROOTS = {
    "pycuda_backend.py": {"_drv": "pycuda.driver", "drv": "pycuda.driver"},
    "cudapython_backend.py": {"_cu": "cuda.bindings.driver", "cu": "cuda.bindings.driver",
                              "driver": "cuda.bindings.driver", "_nvrtc": "cuda.bindings.nvrtc",
                              "nvrtc": "cuda.bindings.nvrtc"},
}
#: Methods the pycuda backend calls on pycuda objects (not reachable from a module name).
PYCUDA_METHODS = [("pycuda.driver", "Device", "retain_primary_context"), ("pycuda.driver", "Context", "push"),
                  ("pycuda.driver", "Context", "pop"), ("pycuda.driver", "Stream", "synchronize"),
                  ("pycuda.driver", "Stream", "handle"), ("pycuda.driver", "Stream", "wait_for_event"), ("pycuda.driver", "Event", "record"),
                  ("pycuda.driver", "Event", "synchronize"), ("pycuda.driver", "Event", "time_since"),
                  ("pycuda.driver", "DeviceAllocation", "free"),
                  ("pycuda.compiler", "SourceModule", "get_function"), ("pycuda.driver", "Function", "_launch_kernel"),
                  ("pycuda.driver", "Function", "prepare"), ("pycuda.driver", "Function", "prepared_async_call")]


def _module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        tiers.require_or_skip("gpu-apis", f"{name} is not installed or does not import ({exc}); .ci/run installs it")


def _chain(node: ast.AST) -> Tuple[Optional[str], List[str]]:
    """(root name, [attr, ...]) of ``root.a.b``; root is a Name or the last attribute of ``self.x``."""
    parts: List[str] = []
    while isinstance(node, ast.Attribute):
        parts.insert(0, node.attr)
        if isinstance(node.value, ast.Name) and node.value.id == "self" and len(parts) > 1:
            return parts[0], parts[1:]
        node = node.value
    return (node.id, parts) if isinstance(node, ast.Name) else (None, parts)


def _uses(path: Path, roots: Dict[str, str]) -> Iterator[Tuple[str, List[str], Optional[int], List[str], int]]:
    """(module, attribute chain, positional count or None, keyword names, line) of each use."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    called = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        fn, args = node.func, list(node.args)
        if isinstance(fn, ast.Attribute) and fn.attr == "_call" and len(args) >= 2:  # self._call(what, fn, *args)
            fn, args = args[1], args[2:]
        root, chain = _chain(fn)
        if root in roots and chain and not any(isinstance(a, ast.Starred) for a in args):
            called.add(id(fn))
            yield roots[root], chain, len(args), [k.arg for k in node.keywords if k.arg], node.lineno
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and id(node) not in called:
            root, chain = _chain(node)
            if root in roots and chain and not isinstance(getattr(node, "ctx", None), ast.Store):
                yield roots[root], chain, None, [], node.lineno


_BOOST_PARAM = re.compile(r"\((\w+)\)(\w+)")


def _boost_counts(doc: str, is_class: bool) -> Optional[Tuple[int, int]]:
    """(required, total) parameters of a Boost.Python signature ``f( (T)a [, (T)b=1]) -> R``."""
    first = doc.strip().splitlines()[0] if doc and doc.strip() else ""
    m = re.match(r"\s*\w+\((.*)\)\s*->", first)
    if not m:
        return None
    params = m.group(1)
    head, _, optional = params.partition("[")
    req, opt = len(_BOOST_PARAM.findall(head)), len(_BOOST_PARAM.findall(optional))
    drop = 1 if is_class else 0  # arg1 is self
    return req - drop, req + opt - drop


def _accepts(obj: Any, nargs: int, kwargs: List[str]) -> Optional[str]:
    target = obj.__init__ if inspect.isclass(obj) else obj
    try:
        sig = inspect.signature(target)
        try:
            sig.bind(*([None] * (nargs + (1 if inspect.isclass(obj) else 0))), **{k: None for k in kwargs})
        except TypeError as exc:
            return f"{sig}: {exc}"
        return None
    except (TypeError, ValueError):
        counts = _boost_counts(getattr(target, "__doc__", "") or "", inspect.isclass(obj))
        if counts is None:
            return None  # undocumented signature: resolution alone is checked
        lo, hi = counts
        return None if lo <= nargs + len(kwargs) <= hi else f"takes {lo}..{hi} arguments, we pass {nargs + len(kwargs)}"


def _check_file(fname: str) -> Tuple[List[str], int]:
    problems, checked = [], 0
    for mod_name, chain, nargs, kwargs, line in _uses(CUDA_DIR / fname, ROOTS[fname]):
        obj: Any = _module(mod_name)
        where = f"{fname}:{line}: {mod_name}.{'.'.join(chain)}"
        try:
            for part in chain:
                obj = getattr(obj, part)
        except AttributeError:
            problems.append(f"{where} does not exist")
            continue
        if nargs is not None:
            why = _accepts(obj, nargs, kwargs)
            if why:
                problems.append(f"{where}: {why}")
                continue
        checked += 1
    return problems, checked


def _imports(fname: str, prefix: str) -> Iterator[Tuple[str, str, int]]:
    tree = ast.parse((CUDA_DIR / fname).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(prefix):
            for alias in node.names:
                yield node.module, alias.name, node.lineno


def test_pycuda_names_and_calls():
    _module("pycuda.driver")
    problems, checked = _check_file("pycuda_backend.py")
    for module, name, line in _imports("pycuda_backend.py", "pycuda"):
        if not hasattr(_module(module), name):
            problems.append(f"pycuda_backend.py:{line}: from {module} import {name}: {module} has no {name}")
    for module, cls, attr in PYCUDA_METHODS:
        if not hasattr(getattr(_module(module), cls), attr):
            problems.append(f"{module}.{cls}.{attr} does not exist")
    assert not problems, "\n".join(problems)
    assert checked >= 15


def test_cuda_python_names_and_calls():
    _module("cuda.bindings.driver")
    problems, checked = _check_file("cudapython_backend.py")
    for module, name, line in _imports("cudapython_backend.py", "cuda.bindings"):
        if not hasattr(_module(module), name):
            problems.append(f"cudapython_backend.py:{line}: from {module} import {name}")
    assert not problems, "\n".join(problems)
    assert checked >= 25


def test_compile_error_is_pycuda_drivers():
    """The bug issue 13 found on an H200: CompileError lives in pycuda.driver, not pycuda.compiler."""
    drv = _module("pycuda.driver")
    assert issubclass(drv.CompileError, Exception)
    src = (CUDA_DIR / "pycuda_backend.py").read_text(encoding="utf-8")
    assert "from pycuda.driver import CompileError" in src


def test_the_checker_finds_a_wrong_name(tmp_path, monkeypatch):
    """The walker is not vacuous: a backend that calls a name pycuda lacks, or passes too many
    arguments, is reported."""
    _module("pycuda.driver")
    bad = tmp_path / "pycuda_backend.py"
    bad.write_text("class B:\n    def f(self):\n        self._drv.mem_alocate(4)\n"
                   "        self._call('x', self._drv.memset_d32, 1, 2, 3, 4, 5)\n")
    monkeypatch.setattr(sys_modules_self(), "CUDA_DIR", tmp_path)
    problems, _ = _check_file("pycuda_backend.py")
    assert any("mem_alocate does not exist" in p for p in problems)
    assert any("memset_d32" in p and "we pass 5" in p for p in problems), problems


def sys_modules_self() -> Any:
    import sys

    return sys.modules[__name__]


def test_probe_driver_symbols_exist_in_the_driver_library():
    """probe.py and the pycuda backend (host registration) call libcuda through ctypes: each
    symbol exists in the driver library here (the real driver, or CI's link stub generated from cuda.h)."""
    import ctypes

    from sdk.targets.cuda.probe import driver_library_path

    path = driver_library_path()
    try:
        lib = ctypes.CDLL("libcuda.so.1") if path is None else ctypes.CDLL(path)
    except OSError as exc:
        tiers.require_or_skip("gpu-apis", f"no libcuda here, not even a link stub ({exc})")
    names = set()
    for source in ("probe.py", "pycuda_backend.py"):
        tree = ast.parse((CUDA_DIR / source).read_text(encoding="utf-8"))
        names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                  and n.value.id == "lib" and n.attr.startswith("cu")}
        names |= {c.value for c in ast.walk(tree) if isinstance(c, ast.Constant) and isinstance(c.value, str)
                  and re.fullmatch(r"cu[A-Z]\w+", c.value) and source == "probe.py"}
    assert {"cuInit", "cuDeviceGetCount", "cuDeviceTotalMem_v2", "cuMemHostRegister_v2", "cuMemHostUnregister"} <= names
    missing = sorted(n for n in names if not hasattr(lib, n) and n != "cuDeviceTotalMem")
    assert not missing, f"not exported by {path}: {missing}"
