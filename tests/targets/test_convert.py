"""``sdk.targets.convert``: dispatch on the output suffix, errors before any work, the CLI's lines."""
from __future__ import annotations

import shutil

import pytest

from sdk.errors import InputError, UnknownNameError
from sdk.targets.convert import CONVERTERS, ConvertOptions, ConvertResult, convert
from tests.clirun import run_cli


@pytest.fixture()
def copy_converter():
    """A converter for '.copy' that copies the model byte for byte (registered for the test only)."""
    saved = CONVERTERS.snapshot()
    seen = []

    def _copy(src, dst, options):
        seen.append(options)
        shutil.copyfile(src, dst)
        return ConvertResult(source=str(src), output=str(dst), format="copy", extras={"note": str(dst) + ".txt"})

    CONVERTERS.register(".copy", _copy)
    yield seen
    CONVERTERS.restore(saved)


def test_dispatch_by_suffix(copy_converter, example_model, tmp_path):
    out = tmp_path / "m.COPY"
    res = convert(example_model, out, ConvertOptions(input_shapes={"image": (1, 1, 8, 8)}))
    assert out.read_bytes() == example_model.read_bytes()
    assert res.format == "copy" and res.seconds > 0
    assert copy_converter[0].input_shapes == {"image": (1, 1, 8, 8)}
    assert res.to_dict()["schema"] == "edgesdk.convert/1"


def test_errors_name_the_problem(copy_converter, example_model, tmp_path):
    with pytest.raises(UnknownNameError, match=r"unknown converter '\.foo'.*\.copy"):
        convert(example_model, tmp_path / "m.foo")
    with pytest.raises(InputError, match="no suffix"):
        convert(example_model, tmp_path / "m")
    with pytest.raises(InputError, match="not found"):
        convert(tmp_path / "absent.onnx", tmp_path / "m.copy")
    with pytest.raises(InputError, match="source model itself"):
        convert(example_model, example_model)
    assert not (tmp_path / "m.foo").exists()


def test_cli(copy_converter, example_model, tmp_path, capsys):
    out = tmp_path / "m.copy"
    code, stdout, stderr = run_cli(["convert", example_model, "-o", out], capsys)
    assert code == 0, stderr
    assert f"wrote {out} (copy" in stdout
    code, _, stderr = run_cli(["convert", example_model, "-o", tmp_path / "m.foo"], capsys)
    assert code == 2 and stderr.startswith("error: unknown converter '.foo'")
    code, _, stderr = run_cli(["convert", example_model, "-o", tmp_path / "m2.copy", "--int8"], capsys)
    assert code == 2 and "--int8 needs --calib" in stderr
