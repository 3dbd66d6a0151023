"""One import namespace `sdk`: the card's top-level folders are linked into it and found by plain discovery."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CARD_FOLDERS = ("targets", "quantize", "remote", "kernels", "boards")


def test_card_folders_are_linked_into_sdk():
    for name in CARD_FOLDERS:
        link = ROOT / "sdk" / name
        assert link.is_symlink(), f"sdk/{name} must be a link to ../{name}"
        assert link.resolve() == (ROOT / name).resolve()


def test_discovery_finds_every_package_folder():
    from setuptools import find_packages

    found = set(find_packages(str(ROOT), include=["sdk", "sdk.*"]))
    expected = {"sdk"}
    for init in (ROOT / "sdk").rglob("__init__.py"):
        expected.add(".".join(init.parent.relative_to(ROOT).parts))
    for name in CARD_FOLDERS:
        for init in (ROOT / name).rglob("__init__.py"):
            expected.add(".".join(("sdk", *init.parent.relative_to(ROOT).parts)))
    assert found == expected


def test_subpackages_import_from_the_checkout_root():
    out = subprocess.run([sys.executable, "-c", "import sdk.targets, sdk.remote.agent, sdk.quantize; print('ok')"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "ok", out.stderr


def test_symbolic_shape_inference_is_installed():
    """MAC counts lean on ONNX Runtime's symbolic shape inference, which needs sympy; onnxruntime
    1.32 lists it only under an extra, so the project declares it. In a fresh venv without it, the
    flat and the original ddddocr-ocr counted 910,589,952 and 507,346,944 MACs (equal with it)."""
    from onnx import TensorProto, helper

    from sdk.formats.onnx_macs import symbolic_shapes

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    shape = helper.make_node("Shape", ["x"], ["s"])
    reshape = helper.make_node("Reshape", ["x", "s"], ["y"])
    proto = helper.make_model(helper.make_graph([shape, reshape], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    inferred = symbolic_shapes(proto)
    assert inferred is not None, "onnxruntime's symbolic shape inference is unavailable (pip install sympy)"
    dims = inferred.graph.output[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims] == ["n", 4]
