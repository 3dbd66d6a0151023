"""Board.benchmark() and the host runner return the one result type (sdk.result.BenchResult)."""
from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from sdk.errors import ResultFormatError
from sdk.result import BenchResult, schema_path


@pytest.fixture(scope="module")
def validator():
    return jsonschema.Draft202012Validator(json.loads(Path(schema_path()).read_text()))


def _valid(validator, doc):
    errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
    assert not errors, "; ".join(f"{'.'.join(map(str, e.path))}: {e.message}" for e in errors[:5])


def test_host_runner_and_local_board_give_the_same_class(validator, client_home, conv_model):
    from sdk.remote import Board
    from sdk.validation.runners import HostRunner

    with HostRunner("onnxruntime", name="host:onnxruntime") as host:
        h = host.benchmark(conv_model, runs=10, min_seconds=0, warmup=1, input_shapes={"x": [1, 3, 16, 16]})
    with Board("local") as board:
        b = board.benchmark(conv_model, runs=10, min_seconds=0, warmup=1, idle_seconds=0,
                            input_shapes={"x": (1, 3, 16, 16)}, samples=True)
    assert type(h) is BenchResult and type(b) is BenchResult
    assert h.board_name == "host:onnxruntime" and b.board_name == "local"
    # the "no power" blocks are one definition: same keys here and from the agent
    assert set(h.power.to_dict()) - {"tried"} == set(b.power.to_dict()) - {"tried"}
    assert set(h.energy.to_dict()) == set(b.energy.to_dict())
    for r in (h, b):
        _valid(validator, r.to_dict(samples=True))
        assert r.stats.noise is not None and r.stats.ci95.keys() == {"p50", "p90", "p99"}
    assert b.transfer is not None and b.agent["version"] and b.model["remote_path"]


def test_a_board_that_answers_malformed_json_fails_with_its_name(client_home, tmp_path, monkeypatch, conv_model):
    """A board whose 'python' prints a bench answer without latency statistics (a real process)."""
    from sdk.remote import Board

    fake = tmp_path / "fake-python"
    fake.write_text("#!/bin/sh\nhead -n 1 > /dev/null\necho '{\"latency_ms\": {\"count\": 3}, \"throughput_ips\": 1}'\n")
    fake.chmod(0o755)
    (tmp_path / "boards").mkdir()
    (tmp_path / "boards" / "odd.toml").write_text(f'[connection]\nhost = "local"\npython = "{fake}"\n')
    monkeypatch.setenv("EDGESDK_BOARDS_PATH", str(tmp_path / "boards"))
    with Board("odd") as board:
        with pytest.raises(ResultFormatError, match=r"^board 'odd': malformed bench result: latency_ms.mean"):
            board.benchmark(conv_model, runs=1, min_seconds=0, idle_seconds=0)
