"""The guard on every quantize run (issue 21, item 1): without --eval, part of the calibration data
(spread over it where it can be cut sample by sample, else its last part) is held out (never used for ranges) and the default budget is checked on it; too few samples is
one warning line, ``budget.checked: false``, and a failure under --strict."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from sdk.preprocess import PreprocessSpec
from sdk.quantize import quantize
from sdk.quantize.guard import split
from sdk.sources import open_source
from sdk.tensors import TensorSpec
from tests.quantize import qmodels


def _specs():
    return [TensorSpec("x", (1, 3, 12, 12), "float32")]


def test_split_holds_out_a_fifth_at_least_8_spread_over_the_data():
    data = [{"x": np.full((1, 3, 12, 12), i, np.float32)} for i in range(48)]
    head, held, why = split(open_source(data, _specs()))
    assert why is None and len(head) == 38 and len(held) == 10
    picked = [2, 7, 12, 16, 21, 26, 31, 36, 40, 45]                           # one in about 5, not the tail
    assert [int(f["x"].flat[0]) for f, _ in held.samples()] == picked
    assert [int(f["x"].flat[0]) for f in head] == [i for i in range(48) if i not in picked]  # the ranges read these only
    assert held.how == "spread over the data, about one in 5"
    head, held, _ = split(open_source(data[:20], _specs()))
    assert len(head) == 12 and len(held) == 8                                  # 20% of 20 is 4: at least 8
    src = open_source(data[:15], _specs())
    same, none, why = split(src)
    assert same is src and none is None and "15 calibration samples are too few" in why
    _, none, why = split(open_source(iter(data), _specs()))
    assert none is None and "how many samples" in why


def test_array_files_keep_the_last_part_held_out(tmp_path):
    """.npy/.npz rows are sharded by position across workers: their held-out part stays the tail."""
    np.savez(tmp_path / "c.npz", x=np.arange(20, dtype=np.float32)[:, None, None, None] * np.ones((1, 3, 12, 12), np.float32))
    head, held, _ = split(open_source(str(tmp_path / "c.npz"), _specs()))
    assert [int(f["x"].flat[0]) for f in head] == list(range(12))
    assert [int(f["x"].flat[0]) for f, _ in held.samples()] == list(range(12, 20)) and held.how == "the last ones"


def test_an_image_folder_holds_out_files_spread_over_it(tmp_path):
    """One image per file: the held-out files are spread over the folder's order, and the calibration
    part no longer lists them (an executor that ships files to workers reads none of them)."""
    cv2 = pytest.importorskip("cv2", reason="opencv-python-headless is not installed")
    for i in range(20):
        cv2.imwrite(str(tmp_path / f"img{i:02d}.png"), np.full((12, 12, 3), 10 * i, np.uint8))
    src = open_source(str(tmp_path), _specs(), PreprocessSpec(size=(12, 12), std=(1.0, 1.0, 1.0)))
    head, held, _ = split(src)
    picked = [1, 3, 6, 8, 11, 13, 16, 18]
    assert [f.name for f in held.source.files] == [f"img{i:02d}.png" for i in picked]
    assert [f.name for f in head.files] == [f"img{i:02d}.png" for i in range(20) if i not in picked]
    assert [round(float(f["x"].max())) for f, _ in held.samples()] == [10 * i for i in picked]
    assert len(list(head)) == 12 and head.fingerprint() != src.fingerprint()


def test_split_fingerprint_differs_from_the_whole(residual_calib):
    src = open_source(str(residual_calib), _specs())
    head, _, _ = split(src)
    assert head.fingerprint() != src.fingerprint() and head.fingerprint() == split(src)[0].fingerprint()


def test_run_without_eval_checks_the_default_budget_on_held_out_samples(residual_model, residual_calib):
    res = quantize(residual_model, residual_calib, workers=1, speed_check=False, use_cache=False)
    b = res.report["budget"]
    assert b["checked"] is True and b["default"] is True and b["by_role"] is True and b["holds"] is True
    assert "10 held-out calibration samples" in b["checked_on"]
    assert res.report["calibration"]["samples"] == 38 and res.report["accuracy"]["samples"] == 10
    assert b["roles"]  # the role chosen per output is named
    out = res.report["accuracy"]["outputs"]["logits"]      # 100 values, all within 2%: Wilson's low end 0.974
    assert out["role"] == "values" and 0.95 <= out["role_interval"][0] < 1.0 == out["role_interval"][1]
    assert out["role_established"] is True and b["established"] is True
    assert not any("cannot establish" in w for w in res.report["warnings"])


def _classifier(path):
    """The residual net's layers with a Softmax head: logits[N, 10] -> probabilities (the classes role)."""
    g = qmodels.G(0)
    s = g.op("Relu", [g.conv("x", 3, 8)])
    r = g.conv(g.op("Relu", [g.conv(s, 8, 8)]), 8, 8)
    p = g.op("Softmax", [g.gemm_head(g.op("Relu", [g.op("Add", [s, r])]), 8)], axis=1)
    return g.save(path, ["N", 3, 12, 12], p, ["N", 10])


def test_a_budget_the_held_out_samples_cannot_establish_is_said_and_fails_strict(tmp_path):
    """10 held-out rows all agreeing hold a top-1 bound of 0.99, but cannot establish it (Wilson's
    90% interval reaches 0.79): one warning line naming the output, its score and interval, and about
    how many samples would establish it (268 rows agreeing: Wilson's low end 268/270.7 = 0.990, so 268
    held out, a fifth of 1340 calibration samples); the model is written; --strict makes it a failure
    (exit 1 in the CLI)."""
    model = _classifier(tmp_path / "cls.onnx")
    calib = tmp_path / "calib.npz"
    np.savez(calib, x=qmodels.make_data(48, (3, 12, 12), seed=1))
    res = quantize(model, calib, workers=1, speed_check=False, use_cache=False)
    b, out = res.report["budget"], next(iter(res.report["accuracy"]["outputs"].values()))
    assert b["holds"] is True and b["established"] is False and res.ok
    assert res.report["fallback_layers"] == [] and "too few to establish the bound" in b["fallback_aim"]
    assert out["role"] == "classes" and out["role_score"] == 1.0 and out["role_established"] is False
    assert abs(out["role_interval"][0] - 0.7871) < 1e-4 and out["role_interval_level"] == 0.9
    weak = [w for w in res.report["warnings"] if "cannot establish" in w]
    assert len(weak) == 1 and "the budget holds on 10 samples" in weak[0] and "0.7871-1.0000" in weak[0], weak
    assert out["role_units"] == [10, 10]
    assert weak[0].endswith("give more calibration data (about 1340 samples like these: 268 held out), "
                            "or --eval with more samples"), weak
    strict = quantize(model, calib, workers=1, speed_check=False, use_cache=False, strict=True)
    assert not strict.ok and any("cannot establish" in f for f in strict.failures)
    evald = quantize(model, calib, eval_data=[{"x": x[None]} for x in qmodels.make_data(12, (3, 12, 12), seed=5)], workers=1,
                     speed_check=False, use_cache=False)    # with --eval, the fix is more --eval samples
    said = [w for w in evald.report["warnings"] if "cannot establish" in w]
    assert len(said) == 1 and "the budget holds on 12 samples" in said[0] and said[0].endswith("give --eval more samples (about 268 samples like these)")
    r = _sdk("quantize", model, "--calib", calib, "-o", tmp_path / "q.onnx", "--no-speed-check", "--no-cache",
             "--workers", "1", "--strict")
    assert r.returncode == 1 and (tmp_path / "q.onnx").is_file(), r.stderr
    assert "90% interval 0.7871-1.0000" in r.stdout and "cannot establish" in r.stdout + r.stderr
    assert "Traceback" not in r.stderr


def test_the_fallback_aims_at_a_budget_its_samples_establish(residual_model, residual_calib, monkeypatch):
    """A cosine bound between the full INT8 residual net's 90% interval low end (about 0.999988 on its
    10 held-out samples) and its score (0.999991) is met, not established. By default the fallback
    goes on to the fewest float layers whose interval keeps the bound; ``margin=False`` stops at the score."""
    from sdk.quantize import roles

    kw = dict(workers=1, speed_check=False, use_cache=False, output_roles={"logits": "cosine"})
    first = quantize(residual_model, residual_calib, margin=False, **kw).report["accuracy"]["outputs"]["logits"]
    bound = (first["role_interval"][0] + first["role_score"]) / 2    # this CPU's own figures: met, not established
    monkeypatch.setattr(roles.Cosine, "default_min", bound)
    met = quantize(residual_model, residual_calib, margin=False, **kw)
    b, out = met.report["budget"], met.report["accuracy"]["outputs"]["logits"]
    assert b["holds"] is True and b["established"] is False and met.report["fallback_layers"] == []
    assert out["role_interval"][0] < bound <= out["role_score"] and b["fallback_aim"].endswith("(margin off)")
    wide = quantize(residual_model, residual_calib, **kw)
    b, out = wide.report["budget"], wide.report["accuracy"]["outputs"]["logits"]
    assert b["holds"] is True and b["established"] is True and wide.ok, wide.failures
    assert out["role_interval"][0] >= bound and 0 < len(wide.report["fallback_layers"]) < 8
    assert b["fallback_aim"].startswith("a margin: each role's interval")
    assert not any("cannot establish" in w for w in wide.report["warnings"])


def test_too_few_samples_is_one_warning_and_not_checked(residual_model):
    calib = [{"x": x[None]} for x in qmodels.make_data(12, (3, 12, 12), seed=3)]
    res = quantize(residual_model, calib, workers=1, speed_check=False, use_cache=False)
    assert res.report["budget"] == {"checked": False, "why": res.report["budget"]["why"], "holds": None}
    assert sum("accuracy was not checked" in w for w in res.report["warnings"]) == 1 and res.ok
    assert res.report["calibration"]["samples"] == 12                           # all of them for ranges
    strict = quantize(residual_model, calib, workers=1, speed_check=False, use_cache=False, strict=True)
    assert not strict.ok and any("accuracy was not checked" in f for f in strict.failures)


def _sdk(*args):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (os.getcwd(), env.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-m", "sdk", *map(str, args)], capture_output=True, text=True,
                          timeout=300, env=env)


def test_cli_says_what_accuracy_was_checked_on(residual_model, residual_calib, tmp_path):
    out, rep = tmp_path / "q.onnx", tmp_path / "r.json"
    r = _sdk("quantize", residual_model, "--calib", residual_calib, "-o", out, "--no-speed-check", "--no-cache",
             "--report", rep, "--workers", "1")
    assert r.returncode == 0, r.stderr
    assert "budget checked on 10 held-out calibration samples" in r.stdout
    assert json.loads(rep.read_text())["budget"]["checked"] is True
    r = _sdk("quantize", residual_model, "--calib", residual_calib, "-o", out, "--no-speed-check", "--no-cache",
             "--report", rep, "--workers", "1", "--no-margin")
    assert r.returncode == 0 and json.loads(rep.read_text())["budget"]["fallback_aim"].endswith("(margin off)")
    few = tmp_path / "few.npz"
    np.savez(few, x=qmodels.make_data(10, (3, 12, 12), seed=4))
    r = _sdk("quantize", residual_model, "--calib", few, "-o", out, "--no-speed-check", "--no-cache", "--strict",
             "--workers", "1")
    assert r.returncode == 1
    assert "accuracy was not checked: 10 calibration samples are too few" in r.stdout + r.stderr
    assert "Traceback" not in r.stderr


def test_units_to_establish_is_the_fewest_that_put_wilsons_low_end_at_the_bound():
    """The count the warning sizes its advice from: at that count the low end reaches the bound, one
    fewer does not; a share at or under the bound has none; a recognizer's characters per sample turn it
    into samples."""
    from sdk.quantize.accuracy import _samples_to_establish, units_to_establish
    from sdk.quantize.roles import wilson_interval

    for share, bound in ((1.0, 0.99), (0.995, 0.99), (1.0, 0.95), (0.97, 0.95)):
        n = units_to_establish(share, bound, 0.9)
        assert wilson_interval(share * n, n, 0.9)[0] >= bound > wilson_interval(share * (n - 1), n - 1, 0.9)[0]
    assert units_to_establish(1.0, 0.99, 0.9) == 268
    assert units_to_establish(0.99, 0.99, 0.9) is None and units_to_establish(0.98, 0.99, 0.9) is None
    row = {"role_units": [51, 51], "role_min": 0.99, "role_interval_level": 0.9}   # 8 lines, 51 characters
    assert _samples_to_establish(row, 8) == 43          # ceil(268 * 8 / 51)
    assert _samples_to_establish({"role_min": 0.95, "role_interval_level": 0.9}, 8) is None   # a pooled score


def test_a_detection_score_on_fewer_than_16_samples_is_not_established():
    """A detection mAP's bootstrap over 8 images cannot see the kinds of image they lack (layout-cdla's
    INT8 .tflite: 0.989 on 8 held-out pages, 0.922-0.947 on unseen sets): its interval still steers the
    fallback's margin, but the budget is not called established, and the warning says how many would do."""
    from sdk.quantize.accuracy import Evaluation, add_intervals, established, not_established
    from sdk.quantize.roles import get_role

    def head(shift):        # [1, A, 4 + 1]: 3 pixel boxes, the candidate's moved by ``shift`` px
        a = np.zeros((1, 3, 5), np.float32)
        for i in range(3):
            a[0, i, :5] = [40 + 60 * i + shift, 40, 30, 30, 0.9]
        return a

    role = get_role("detections", layout="anchors", boxes="xywh")
    for n, claimed in ((8, False), (16, True)):
        res = Evaluation(samples=n, outputs={"out": {"role_score": 1.0, "role_min": role.min_score,
                                                     "role_metric": role.metric}})
        res.pairs = {"out": ([head(0)] * n, [head(1)] * n)}
        add_intervals(res, {"out": role}, keep_pairs=True)
        row = res["outputs"]["out"]
        assert row["role_interval_keeps"] is True and established(res, {"out": role})   # the margin search's view
        assert row["role_established"] is claimed
        said = not_established(res, eval_given=False)
        if claimed:
            assert said is None and "role_min_samples" not in row
        else:
            assert row["role_min_samples"] == 16 and "fewer than the 16 samples it needs" in said, said
            assert said.endswith("give more calibration data (about 80 samples like these: 16 held out), "
                                 "or --eval with more samples"), said
