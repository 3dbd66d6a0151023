"""TensorRT API conformance: every TensorRT name and call the target and the board agent use,
checked against the REAL Python bindings of each supported major (8.6 for JetPack 5, 10.x for
JetPack 6/7, 11.x the newest), and the capability-driven build plan on each.

The bindings wheels (``tensorrt-bindings`` 8.6.1, ``tensorrt-cu12-bindings`` 10.x,
``tensorrt-cu13-bindings`` 11.x, about 1 MB each) are installed by .ci/run, each into its own
folder, listed in ``EDGESDK_TRT_BINDINGS``. Their compiled module links against libnvinfer,
libnvinfer_plugin, libnvonnxparser (and libnvparsers on 8.x), hundreds of MB that no machine here
has: stub libraries exporting the entry points the module imports (compiled here with gcc; every
one returns NULL/0) let ``import tensorrt_bindings`` succeed, which exposes the whole API with its
pybind11 signatures. Nothing can build or run an engine this way (that needs a GPU): this checks
names, signatures and the plan, each major in its own process."""
from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests import tiers

import sdk
import sdk.remote.agent
import sdk.targets.tensorrt
from sdk.targets.tensorrt.api import OPTIONAL, REQUIRED, VARIABLE_TYPES

ROOT = Path(sdk.__file__).parent.parent  # the sys.path folder this `sdk` came from (links not resolved)
TRT_DIR = Path(sdk.targets.tensorrt.__file__).parent
AGENT_DIR = Path(sdk.remote.agent.__file__).parent

#: The C entry points the bindings import (nm -D --undefined-only tensorrt.so), plus the C++ ones of
#: libnvparsers (UFF/Caffe parsers, 8.x only) under their mangled names.
STUB_C = r"""
#include <stddef.h>
void* createInferBuilder_INTERNAL(void* logger, int version) { return NULL; }
void* createInferRuntime_INTERNAL(void* logger, int version) { return NULL; }
void* createInferRefitter_INTERNAL(void* engine, void* logger, int version) { return NULL; }
void* getPluginRegistry(void) { return NULL; }
void* getBuilderPluginRegistry(int capability) { return NULL; }
int initLibNvInferPlugins(void* logger, const char* ns) { return 0; }
void* createNvOnnxParser_INTERNAL(void* network, void* logger, int version) { return NULL; }
void* createNvOnnxParserRefitter_INTERNAL(void* refitter, void* logger, int version) { return NULL; }
int getNvOnnxParserVersion(void) { return 0; }
void* uff_create(void) __asm__("_ZN11nvuffparser15createUffParserEv");
void* uff_create(void) { return NULL; }
void uff_fieldmap(void* self, const char* n, const void* d, int t, int len)
    __asm__("_ZN11nvuffparser8FieldMapC1EPKcPKvNS_9FieldTypeEi");
void uff_fieldmap(void* self, const char* n, const void* d, int t, int len) {}
void* caffe_create(void) __asm__("_ZN14nvcaffeparser117createCaffeParserEv");
void* caffe_create(void) { return NULL; }
void caffe_shutdown(void) __asm__("_ZN14nvcaffeparser123shutdownProtobufLibraryEv");
void caffe_shutdown(void) {}
"""
STUB_LIBS = ("nvinfer", "nvinfer_plugin", "nvonnxparser", "nvparsers")
MAJORS = (8, 10, 11)


def _binding_dirs():
    """Folders holding one ``tensorrt_bindings`` each (EDGESDK_TRT_BINDINGS, else the CI cache)."""
    env = os.environ.get("EDGESDK_TRT_BINDINGS")
    if env:
        return [Path(p) for p in env.split(os.pathsep) if p]
    cache = Path(os.environ.get("EDGESDK_CI_CACHE", Path.home() / ".cache" / "edgesdk-ci")) / "trt-bindings"
    return sorted(p for p in cache.glob("*") if (p / "tensorrt_bindings").is_dir())


def _version_of(folder: Path) -> str:
    for info in folder.glob("tensorrt*bindings-*.dist-info"):
        return info.name[: -len(".dist-info")].split("-")[1]
    return "?"


DIRS = {}
for _d in _binding_dirs():
    DIRS.setdefault(int(_version_of(_d).split(".")[0]) if _version_of(_d)[0].isdigit() else 0, _d)


@pytest.fixture(scope="module")
def stub_dir(tmp_path_factory):
    gcc = shutil.which("gcc")
    if gcc is None:
        tiers.require_or_skip("gxx", "gcc not found: cannot compile the TensorRT stub libraries")
    d = tmp_path_factory.mktemp("trt-stubs")
    src = d / "stub.c"
    src.write_text(STUB_C)
    for major in MAJORS:
        for lib in STUB_LIBS:
            out = d / f"lib{lib}.so.{major}"
            subprocess.run([gcc, "-shared", "-fPIC", f"-Wl,-soname,{out.name}", "-o", str(out), str(src)],
                           check=True, capture_output=True)
    return d


PROBE = r"""
import json, sys
import tensorrt_bindings as trt
sys.modules["tensorrt"] = trt
from sdk.targets.tensorrt.api import check_api
from sdk.targets.tensorrt.build import build_config, capabilities, network_flags, precision_plan
from sdk.errors import InputError
caps = capabilities(trt)
rep = check_api(trt)
plans = {}
for name, opts, qdq in (("fp32", {}, False), ("fp16", {"precision": "fp16"}, False),
                        ("int8-qdq", {"precision": "int8"}, True),
                        ("int8-cache", {"precision": "int8", "calibration_cache": "c.cache"}, False),
                        ("int8-none", {"precision": "int8"}, False)):
    try:
        plan = precision_plan(caps, build_config(opts), qdq)
        plans[name] = {"flags": list(plan.builder_flags), "strongly_typed": plan.strongly_typed,
                       "convert_fp16": plan.convert_fp16, "int8_mode": plan.int8_mode,
                       "network_flags": network_flags(trt, caps, plan)}
    except InputError as exc:
        plans[name] = {"error": exc.message}
enum = trt.NetworkDefinitionCreationFlag
print(json.dumps({"version": trt.__version__, "caps": caps.__dict__, "missing": rep.missing,
                  "bad_calls": rep.bad_calls, "checked": rep.checked, "optional_present": rep.optional_present,
                  "plans": plans, "strongly_typed_bit": int(enum.STRONGLY_TYPED) if caps.strongly_typed_flag else None,
                  "explicit_batch_bit": int(enum.EXPLICIT_BATCH) if caps.explicit_batch_flag else None}))
"""


def _probe(folder: Path, stubs: Path) -> dict:
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(stubs), env.get("LD_LIBRARY_PATH")]))
    env["PYTHONPATH"] = os.pathsep.join([str(folder), str(ROOT)])
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, f"importing the TensorRT bindings in {folder} failed:\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _need(major: int) -> Path:
    if major not in DIRS:
        if os.environ.get("EDGESDK_TRT_BINDINGS"):
            pytest.fail(f"EDGESDK_TRT_BINDINGS lists no TensorRT {major}.x bindings ({os.environ['EDGESDK_TRT_BINDINGS']})")
        tiers.require_or_skip("trt-bindings", f"no TensorRT {major}.x bindings wheel installed "
                                              "(.ci/run installs them; see EDGESDK_TRT_BINDINGS)")
    return DIRS[major]


@pytest.mark.parametrize("major", MAJORS)
def test_every_name_and_call_exists(major, stub_dir):
    got = _probe(_need(major), stub_dir)
    assert got["version"].startswith(f"{major}.")
    assert got["missing"] == [] and got["bad_calls"] == [], json.dumps(got, indent=1)
    assert len(got["checked"]) >= len(REQUIRED)


def test_tensorrt_8_plan(stub_dir):
    got = _probe(_need(8), stub_dir)
    caps, plans = got["caps"], got["plans"]
    assert caps["weak_typing"] and caps["implicit_int8"] and caps["explicit_batch_flag"]
    assert plans["fp32"]["network_flags"] == 1 << got["explicit_batch_bit"]
    assert plans["fp16"]["flags"] == ["FP16"] and not plans["fp16"]["convert_fp16"]
    assert plans["int8-qdq"] == {**plans["int8-qdq"], "flags": ["INT8", "FP16"], "int8_mode": "explicit"}
    assert plans["int8-cache"]["int8_mode"] == "implicit"
    assert "no Q/DQ nodes" in plans["int8-none"]["error"]


def test_tensorrt_10_plan(stub_dir):
    got = _probe(_need(10), stub_dir)
    caps, plans = got["caps"], got["plans"]
    assert caps["weak_typing"] and caps["implicit_int8"] and caps["strongly_typed_flag"]
    assert plans["fp16"]["flags"] == ["FP16"] and not plans["fp16"]["strongly_typed"]
    assert plans["int8-cache"]["int8_mode"] == "implicit"


def test_tensorrt_11_plan(stub_dir):
    """TensorRT 11 has no BuilderFlag.FP16/INT8, no IInt8EntropyCalibrator2, no EXPLICIT_BATCH: fp16
    converts the model and builds strongly typed, int8 needs Q/DQ, a calibration cache is refused."""
    got = _probe(_need(11), stub_dir)
    caps, plans = got["caps"], got["plans"]
    assert not caps["weak_typing"] and not caps["implicit_int8"] and not caps["explicit_batch_flag"]
    assert caps["strongly_typed_flag"]
    assert "BuilderFlag.FP16" not in got["optional_present"]
    assert "IInt8EntropyCalibrator2.__init__" not in got["optional_present"]
    strong = 1 << got["strongly_typed_bit"]
    assert plans["fp32"] == {**plans["fp32"], "flags": [], "strongly_typed": True, "network_flags": strong}
    assert plans["fp16"] == {**plans["fp16"], "flags": [], "convert_fp16": True, "network_flags": strong}
    assert plans["int8-qdq"] == {**plans["int8-qdq"], "flags": [], "int8_mode": "explicit", "network_flags": strong}
    assert "no implicit quantization" in plans["int8-cache"]["error"]


# -- the tables above stay complete ----------------------------------------------------------------


def _uses(path: Path):
    """``trt.A.B`` chains and ``<tensorrt object>.attr`` uses in one source file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        chain, base = [node.attr], node.value
        while isinstance(base, ast.Attribute) and base.attr not in ("_trt", *VARIABLE_TYPES):
            chain.insert(0, base.attr)
            base = base.value
        name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else None
        if name in ("trt", "_trt"):
            yield ".".join(chain), node.lineno
        elif name in VARIABLE_TYPES and len(chain) == 1:
            yield f"{VARIABLE_TYPES[name]}.{chain[0]}", node.lineno


def test_tables_list_every_tensorrt_name_the_code_uses():
    known = set(REQUIRED) | set(OPTIONAL)
    files = sorted(TRT_DIR.glob("*.py")) + sorted(AGENT_DIR.rglob("*.py"))
    unknown = []
    for f in files:
        if f.name == "api.py":
            continue
        for used, line in _uses(f):
            if used not in known and not any(k.startswith(used + ".") for k in known):
                unknown.append(f"{f}:{line}: {used}")
    assert not unknown, "TensorRT names used but not in sdk.targets.tensorrt.api:\n" + "\n".join(unknown)


def test_signature_check_catches_wrong_calls():
    """check_api's pybind11 signature reading, on a stand-in module shaped like TensorRT's."""
    from types import SimpleNamespace

    from sdk.targets.tensorrt.api import _check_call, signatures

    class Builder:
        def create_network(self):
            """create_network(self: tensorrt.Builder, flags: typing.SupportsInt = 0) -> tensorrt.INetworkDefinition"""

        def set_shape(self):
            """set_shape(*args, **kwargs)
Overloaded function.

1. set_shape(self: tensorrt.IOptimizationProfile, input: str, min: tensorrt.Dims, opt: tensorrt.Dims, max: tensorrt.Dims) -> None

2. set_shape(self: tensorrt.IOptimizationProfile, input: str, shapes: Dict[str, List[int]]) -> None
"""

    fake = SimpleNamespace(Builder=Builder)
    assert signatures(Builder.create_network, "create_network") == [[("flags", True)]]
    assert len(signatures(Builder.set_shape, "set_shape")) == 2
    assert _check_call(fake.Builder.create_network, "Builder.create_network", ("flags",)) is None
    assert _check_call(fake.Builder.create_network, "Builder.create_network", ()) is None  # default
    assert "TensorRT has (flags=...)" in _check_call(fake.Builder.create_network, "Builder.create_network",
                                                     ("flags", "extra"))
    assert _check_call(Builder.set_shape, "IOptimizationProfile.set_shape", ("input", "min", "opt", "max")) is None
    assert _check_call(Builder.set_shape, "IOptimizationProfile.set_shape", ("input", "lo", "opt", "hi"))


@pytest.mark.parametrize("major", MAJORS)
def test_one_version_probe_reads_the_bindings_metadata(major):
    """sdk.hostinfo.tensorrt_version (used by the target, the host facts and the board agent) finds
    each bindings wheel from its pip metadata, importing nothing."""
    folder = _need(major)
    code = ("import sys; from sdk.hostinfo import tensorrt_version; v = tensorrt_version(); "
            "assert 'tensorrt_bindings' not in sys.modules; print(v)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(folder), str(ROOT)]))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == _version_of(folder)


def test_target_and_agent_share_the_probe():
    from sdk import hostinfo
    from sdk.remote.agent import facts
    from sdk.targets.tensorrt import target

    assert target.tensorrt_version is hostinfo.tensorrt_version
    assert facts._tensorrt_version is hostinfo.tensorrt_version
