"""The timed path goes through the base class's error translation: a runtime failure inside
``benchmark_session()`` (the latency loop's ``Session.runner()``) is an InferenceError, and on the
CLI one ``error:`` line, never a traceback. The model is real ONNX whose run fails in ONNX Runtime
itself (a Reshape that cannot hold), so nothing is mocked."""
from __future__ import annotations

import pytest

from sdk.errors import InferenceError
from sdk.targets import get_target
from sdk.targets.measure import benchmark_session
from tests import modelzoo
from tests.clirun import run_cli


@pytest.fixture(scope="module")
def failing_model(tmp_path_factory):
    return modelzoo.fails_at_run(tmp_path_factory.mktemp("fail") / "fails_at_run.onnx")


@pytest.mark.parametrize("io_binding", [False, True])
def test_runtime_failure_in_benchmark_session_is_inference_error(failing_model, io_binding):
    with get_target("onnxruntime", io_binding=io_binding).open(failing_model) as session:
        with pytest.raises(InferenceError, match="onnxruntime failed to run") as exc:
            benchmark_session(session, input_shapes={"x": (1, 4)}, warmup=1, runs=3, min_seconds=0)
        assert exc.value.__cause__ is not None  # the runtime's own error is kept as the cause


@pytest.mark.parametrize("extra", [[], ["-o", "io_binding=true"]])
def test_runtime_failure_during_bench_is_one_error_line(failing_model, capsys, extra):
    code, out, err = run_cli(["bench", failing_model, "--input-shape", "x=1x4", "--runs", "3",
                              "--min-seconds", "0", "--warmup", "1", *extra], capsys)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code != 0 and len(lines) == 1, err
    assert lines[0].startswith("error: onnxruntime failed to run") and "Traceback" not in err


def test_runtime_failure_names_the_reduce_command_that_finds_the_node(failing_model, capsys, tmp_path):
    """The one error line ends with the `sdk debug reduce` command for the target that ran (the
    model format's default, onnxruntime, here) with the same shapes, and that command, run as
    printed, names the Reshape."""
    import shlex

    code, _, err = run_cli(["bench", failing_model, "--input-shape", "x=1x4", "--runs", "3",
                            "--min-seconds", "0", "--warmup", "1"], capsys)
    line = err.strip()
    assert code != 0 and "\n" not in line, err
    command = line.split("; explain: ", 1)[1]
    argv = shlex.split(command)
    assert argv[:3] == ["sdk", "debug", "reduce"] and "@onnxruntime" in command and "x=1x4" in argv, command
    code, out, err = run_cli([*argv[1:], "--out", str(tmp_path)], capsys)
    assert code == 0, err
    assert "Reshape" in out and (tmp_path / "failing.onnx").is_file(), out
