"""Whole pipelines on boards: the agent runs every stage and glue step (nothing round-trips per
stage), on the local board and on a REAL OpenSSH server on loopback, with power from the agent's
SIMULATED Jetson sysfs tree; outputs must be identical to the host's."""
from __future__ import annotations

import pytest

from sdk.kernels.pipelines import GlueSpec, Pipeline, PipelineSpec, RunConfig
from sdk.remote import Board
from tests import pipelinefiles as pf
from tests.remote.sshd import needs_sshd, trust

pytest.importorskip("cv2")
CFG = RunConfig(frames=2, warmup=0)


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    return pf.text_pages(tmp_path_factory.mktemp("pages"))


@pytest.fixture(scope="module")
def docs(tmp_path_factory):
    return pf.documents(tmp_path_factory.mktemp("docs"))


@pytest.fixture(scope="module")
def specs(pages, docs):
    """Loaded (corpus references resolved) before client_home moves HOME, and the corpus cache with it."""
    return PipelineSpec.load(pf.OCR_SPEC), PipelineSpec.load(pf.LAYOUT_SPEC)


@needs_sshd
@pytest.mark.ssh
def test_both_corpus_pipelines_on_the_loopback_board_match_the_host(client_home, sshd, board_profile, tmp_path,
                                                                     pages, docs, specs):
    from sdk.remote.agent.power.simulate import SimulatedBoard

    trust(client_home, sshd)
    sysfs = tmp_path / "sysfs"
    name = board_profile("orin-sim", extra=f'[power]\nsensors = ["ina3221-hwmon"]\nsysfs_root = "{sysfs}"\n')
    ocr, layout = Pipeline(specs[0]), Pipeline(specs[1])
    host_ocr, host_layout = ocr.run(pages, CFG), layout.run(docs, CFG)
    with SimulatedBoard(sysfs, layout="jetson-jp5"):
        with Board(name) as board:
            b_ocr = ocr.run(pages, CFG, board=board)
            b_layout = layout.run(docs, CFG, board=board)
            trips = board.round_trips
            again = layout.run(docs, RunConfig(frames=5, warmup=1), board=board)
            # pushed already: one look per model (2) and image (3), then ONE agent call for all frames and stages
            assert board.round_trips - trips == 2 + 3 + 1
            assert again.frames == 5 and again.outputs_by_input() == b_layout.outputs_by_input()
    for host, remote in ((host_ocr, b_ocr), (host_layout, b_layout)):
        assert remote.outputs_by_input() == host.outputs_by_input()
        assert remote.board["name"] == "orin-sim" and remote.device["where"] == "board"
        assert remote.energy["measured"] and remote.energy["mj_per_frame"] > 0
        assert "ina3221" in str(remote.energy["source"])
        assert [s["model"]["path"] for s in remote.stages] == [s["model"]["path"] for s in host.stages]
        assert all(s["model"]["remote_path"].startswith(str(tmp_path / "board-orin-sim")) for s in remote.stages)
        assert remote.pipeline["spec"] == host.pipeline["spec"]
        assert remote.timeline and remote.throughput["overlapped_fps"] > 0
    assert any(it["text"] for it in b_ocr.outputs_by_input()["page.png"])


def test_local_board_runs_user_glue_and_says_why_there_is_no_energy(client_home, tmp_path, docs, specs, monkeypatch):
    glue = tmp_path / "myglue.py"
    glue.write_text("def tag(frame, tag='x'):\n    for it in frame.items:\n        it['tag'] = tag + it['label']\n")
    spec = specs[1].with_models(specs[1].models())
    spec.stages[1].post.append(GlueSpec(f"{glue}:tag", {"tag": "deg"}))
    pipe = Pipeline(spec)
    host = pipe.run(docs, CFG)
    # the local board with no sensors at all (a sysfs root with nothing in it)
    boards = tmp_path / "boards"
    boards.mkdir()
    (boards / "bare.toml").write_text(f'name = "bare"\n[connection]\nhost = "local"\nworkdir = "{tmp_path / "wd"}"\n'
                                      f'[power]\nsensors = ["hwmon"]\nsysfs_root = "{tmp_path / "nosys"}"\n')
    monkeypatch.setenv("EDGESDK_BOARDS_PATH", str(boards))
    remote = pipe.run(docs, CFG, board="bare")
    assert remote.outputs_by_input() == host.outputs_by_input()
    assert all(it["tag"].startswith("deg") for items in remote.outputs_by_input().values() for it in items)
    assert not remote.energy["measured"] and "hwmon" in remote.energy["reason"]


def test_agent_pipeline_request_errors(specs, tmp_path):
    from sdk.errors import ConfigError, InputError
    from sdk.remote.agent.commands import run_command

    doc = specs[1].to_dict()
    with pytest.raises(ConfigError, match="unknown key"):
        run_command("pipeline", {"spec": doc, "inputs": [{"path": "x"}], "bogus": 1})
    with pytest.raises(ConfigError, match="needs inputs"):
        run_command("pipeline", {"spec": doc, "inputs": []})
    with pytest.raises(InputError, match="does not exist on the board"):
        run_command("pipeline", {"spec": doc, "inputs": [{"name": "a.png", "path": str(tmp_path / "a.png")}]})
    moved = dict(doc, stages=[dict(doc["stages"][0], model=str(tmp_path / "gone.onnx"))] + doc["stages"][1:])
    with pytest.raises(InputError, match="is not on the board"):
        run_command("pipeline", {"spec": moved, "inputs": [{"path": "x"}]})
