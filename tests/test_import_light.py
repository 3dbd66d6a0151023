"""`import sdk` and `sdk --help` stay fast and import no heavy runtime."""
from __future__ import annotations

import json
import subprocess
import sys
import time

HEAVY = ["onnx", "onnxruntime", "tensorrt", "pycuda", "cuda", "cv2", "paramiko", "ai_edge_litert", "tflite_runtime",
         "tensorflow", "torch", "scipy", "sklearn", "typer", "rich"]


def _modules_after(code: str):
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_import_sdk_is_light():
    mods = _modules_after("import sdk; sdk.__version__")
    loaded = [m for m in HEAVY if m in mods]
    assert loaded == [], f"import sdk pulled in {loaded}"
    assert "numpy" not in mods


def test_public_names_resolve_without_runtimes():
    mods = _modules_after("import sdk; sdk.Model; sdk.get_target; sdk.LatencyStats; sdk.TensorSpec; sdk.errors")
    loaded = [m for m in HEAVY if m in mods]
    assert loaded == [], f"resolving the API pulled in {loaded}"


def test_every_public_name_resolves():
    import sdk

    for name in sdk.__all__:
        assert getattr(sdk, name) is not None


def test_help_is_fast_and_light():
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "sdk", "--help"], capture_output=True, text=True)
    elapsed = time.perf_counter() - t0
    assert proc.returncode == 0 and "bench" in proc.stdout
    imported = {line.split("|")[-1].strip().split(".")[0] for line in proc.stderr.splitlines() if "|" in line}
    loaded = [m for m in HEAVY if m in imported and m not in ("typer", "rich")]
    assert loaded == [], f"sdk --help imported {loaded}"
    assert elapsed < 20  # generous: a guard against importing runtimes, not a timing benchmark


def test_import_without_optional_runtimes(tmp_path):
    """With onnxruntime, onnx, paramiko, cv2 and the TFLite runtimes made unimportable,
    `import sdk`, `sdk targets` and `sdk --help` still work and say what is missing."""
    blocker = tmp_path / "sitecustomize.py"
    blocker.write_text(
        "import sys\n"
        "class _Block:\n"
        "    names = {'onnxruntime', 'onnx', 'paramiko', 'cv2', 'ai_edge_litert', 'tflite_runtime', 'tensorflow',"
        " 'tensorrt', 'pycuda', 'cuda'}\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in self.names:\n"
        "            raise ImportError('blocked for test: ' + name)\n"
        "        return None\n"
        "sys.meta_path.insert(0, _Block())\n")
    env = {"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}
    import os

    env = {**os.environ, **env}
    for args in (["-c", "import sdk; print(sdk.__version__)"], ["-m", "sdk", "--help"], ["-m", "sdk", "targets"]):
        proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env)
        assert proc.returncode == 0, proc.stderr
        assert "Traceback" not in proc.stderr
