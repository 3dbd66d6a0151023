"""The driver probe against a SIMULATED libcuda: a tiny C library with the handful of driver entry
points the probe calls (cuInit, cuDeviceGet*, ...), built with the system C compiler and put first
on LD_LIBRARY_PATH of a subprocess. It stands in for the NVIDIA driver this machine lacks and
reports an Orin (8.7, integrated), the CUDA toolkit's stub library, or no device."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from tests import tiers

FAKE_LIBCUDA = r"""
#include <stdlib.h>
#include <string.h>
static const char* mode(void) { const char* m = getenv("FAKE_CUDA_MODE"); return m ? m : "orin"; }
int cuInit(unsigned int flags) {
    if (!strcmp(mode(), "stub")) return 34;      /* CUDA_ERROR_STUB_LIBRARY */
    if (!strcmp(mode(), "nodevice")) return 100; /* CUDA_ERROR_NO_DEVICE */
    return 0;
}
int cuDriverGetVersion(int* v) { *v = 12020; return 0; }
int cuDeviceGetCount(int* n) { *n = 1; return 0; }
int cuDeviceGet(int* d, int i) { *d = i; return 0; }
int cuDeviceGetName(char* name, int len, int dev) { strncpy(name, "Orin (simulated)", len); return 0; }
int cuDeviceGetAttribute(int* v, int attr, int dev) { *v = attr == 75 ? 8 : attr == 76 ? 7 : attr == 18 ? 1 : 0; return 0; }
int cuDeviceTotalMem_v2(size_t* b, int dev) { *b = (size_t)30536 << 20; return 0; }
"""

PROBE = ("import json; from sdk.targets.cuda import probe_gpu, require_gpu\n"
         "p = probe_gpu()\n"
         "out = {'available': p.available, 'reason': p.reason, 'driver': p.driver_version,\n"
         "       'devices': [[d.name, list(d.compute_capability), d.integrated, d.memory_mib, d.sm] for d in p.devices]}\n"
         "try:\n    out['required'] = require_gpu().name\n"
         "except Exception as e:\n    out['required'] = type(e).__name__ + ': ' + str(e)\n"
         "print(json.dumps(out))")


@pytest.fixture(scope="module")
def fake_driver(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        tiers.require_or_skip("gxx", "no C compiler to build the simulated libcuda")
    d = tmp_path_factory.mktemp("fake_libcuda")
    (d / "fake.c").write_text(FAKE_LIBCUDA)
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(d / "libcuda.so.1"), str(d / "fake.c")], check=True)
    return d


def _probe(fake_driver, mode):
    env = dict(os.environ, FAKE_CUDA_MODE=mode,
               LD_LIBRARY_PATH=str(fake_driver) + os.pathsep + os.environ.get("LD_LIBRARY_PATH", ""))
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_simulated_orin(fake_driver):
    out = _probe(fake_driver, "orin")
    if out["devices"] and out["devices"][0][0] != "Orin (simulated)":
        tiers.skip_has_gpu("a real NVIDIA driver answered before the simulated one")
    assert out["available"] and out["driver"] == "12.2"
    assert out["devices"] == [["Orin (simulated)", [8, 7], True, 30536, "sm_87"]]
    assert out["required"] == "Orin (simulated)"


@pytest.mark.parametrize("mode,match", [("stub", "STUB_LIBRARY"), ("nodevice", "no CUDA device found")])
def test_simulated_failures_explain(fake_driver, mode, match):
    out = _probe(fake_driver, mode)
    if out["available"]:
        tiers.skip_has_gpu("a real NVIDIA driver answered before the simulated one")
    assert match in out["reason"]
    assert out["required"].startswith("TargetUnavailableError: no usable NVIDIA GPU") and match in out["required"]
