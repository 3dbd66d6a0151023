"""CLI fuzz tier: a table of 200+ bad inputs, each run as a user runs `sdk` (a subprocess), each
asserting the house rule: one ``error:`` line on stderr (progress lines may precede it), exit 2
for a usage or input error (1 for a failed check: a NO-GO, a board that failed), no traceback, no "unexpected" fallback, nothing left behind (the working
folder stays empty, no output file or folder appears).

The categories are those of the hardening issue; the test prints tried / handled / failed per
category. Cases are built from a few families: usage errors for every command, bad numbers,
missing/wrong/corrupt files, bad shapes and options, bad output paths (a folder, a special file,
a missing folder, a file as folder, an unwritable place), bad boards and profiles, and the
quantizer's inputs.
"""
from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Dict, List, NamedTuple, Tuple

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "examples" / "digits" / "digits_cnn.onnx"
SHAPE = ("--input-shape", "image=1x1x8x8")


class Case(NamedTuple):
    category: str
    args: Tuple[str, ...]
    code: int = 2            # expected exit status
    outputs: Tuple[str, ...] = ()   # paths that must not exist afterwards


def _scratch(root: Path) -> Dict[str, str]:
    """Input files of every kind, made once."""
    f: Dict[str, str] = {}
    d = root / "in"
    d.mkdir()
    (d / "folder").mkdir()
    f["dir"] = str(d / "folder")
    (d / "empty.onnx").write_bytes(b"")
    f["empty"] = str(d / "empty.onnx")
    (d / "garbage.onnx").write_bytes(os.urandom(4096))
    f["garbage"] = str(d / "garbage.onnx")
    (d / "text.onnx").write_text("this is not a model\n")
    f["text"] = str(d / "text.onnx")
    (d / "garbage.tflite").write_bytes(os.urandom(2048))
    f["tflite"] = str(d / "garbage.tflite")
    (d / "model.xyz").write_bytes(MODEL.read_bytes())
    f["xyz"] = str(d / "model.xyz")
    (d / "spec.toml").write_bytes(b"\x00\xff\xfe binary \x80\x81")
    f["binspec"] = str(d / "spec.toml")
    (d / "badspec.toml").write_text("[budgets\nlatency = ")
    f["badspec"] = str(d / "badspec.toml")
    (d / "unknown_target.toml").write_text('target = "nosuch"\n')
    f["spec_target"] = str(d / "unknown_target.toml")
    (d / "stats.npz").write_bytes(b"PK\x03\x04 this is a corrupt zip")
    f["stats"] = str(d / "stats.npz")
    rng = np.random.default_rng(0)
    np.save(d / "good.npy", rng.random((4, 1, 8, 8), dtype=np.float32))
    f["data"] = str(d / "good.npy")
    np.save(d / "empty.npy", np.zeros((0, 1, 8, 8), np.float32))
    f["empty_data"] = str(d / "empty.npy")
    np.save(d / "wrong.npy", rng.random((4, 3, 5), dtype=np.float32))
    f["wrong_data"] = str(d / "wrong.npy")
    np.save(d / "nan.npy", np.full((4, 1, 8, 8), np.nan, np.float32))
    f["nan_data"] = str(d / "nan.npy")
    (d / "notnpy.npy").write_bytes(os.urandom(300))
    f["bad_npy"] = str(d / "notnpy.npy")
    (d / "imgs").mkdir()
    for i in range(3):
        (d / "imgs" / f"broken{i}.jpg").write_bytes(os.urandom(500))
    f["bad_images"] = str(d / "imgs")
    np.save(d / "labels.npy", np.arange(4))
    f["labels"] = str(d / "labels.npy")
    boards = root / "boards"
    boards.mkdir()
    (boards / "broken.toml").write_text("name = [\n")
    (boards / "nohost.toml").write_text('name = "nohost"\n[connection]\nuser = "x"\n')
    (boards / "refused.toml").write_text('name = "refused"\n[connection]\nhost = "127.0.0.1"\nport = 1\n')
    f["boards"] = str(boards)
    for name, location in (("ext_missing", "weights.bin"), ("ext_escape", "../../../../etc/passwd")):
        f[name] = _external_data_model(d / f"{name}.onnx", location)
    f["missing"] = str(root / "nope" / "missing.onnx")
    f["missing_dir"] = str(root / "no" / "such" / "folder")
    return f


def _external_data_model(path: Path, location: str) -> str:
    """An ONNX model whose weight lives in an external file that is missing or outside its folder."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    entry = w.external_data.add()
    entry.key, entry.value = "location", location
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))
    return str(path)


def _bad_outputs(f: Dict[str, str], name: str) -> List[str]:
    """Output paths that must be refused before any work."""
    return [f["dir"], f"/proc/{name}", f"{f['missing_dir']}/{name}", f"/etc/hostname/{name}", "/dev/null", ""]


def _cases(f: Dict[str, str]) -> List[Case]:
    m = str(MODEL)
    cases: List[Case] = []
    add = cases.append
    # -- usage errors: every command --------------------------------------------------------------
    for args in [("nosuch",), ("inspect",), ("bench",), ("quantize",), ("push",), ("validate",), ("robustness",),
                 ("boards", "show"), ("boards", "check"), ("boards", "nosuch"), ("push", m), ("validate", m),
                 ("quantize", m), ("quantize", m, "--calib", f["data"]),
                 ("robustness", m), ("inspect", m, "--bogus"), ("bench", m, "--bogus"), ("push", m, "-b"),
                 ("bench", m, "--runs"), ("targets", "extra"), ("inspect", m, m), ("--nosuch",),
                 ("bench", m, "-t"), ("boards", "--bogus"), ("validate", m, "-b", "local", "--data"),
                 ("quantize", m, "--calib", f["data"], "-o"), ("push", "--board", "local")]:
        add(Case("bad CLI input", args))
    # -- bad numbers -------------------------------------------------------------------------------
    for opt in ("--runs", "--warmup", "--threads", "--seed"):
        for v in ("abc", "-1", "1e99", "", "0x", "nan", "3.5"):
            if opt == "--seed" and v == "-1":
                continue
            add(Case("bad CLI input", ("bench", m, *SHAPE, opt, v)))
    for opt in ("--min-seconds",):
        for v in ("abc", "-1", "nan", "inf", "-inf", "1e400"):
            add(Case("bad CLI input", ("bench", m, *SHAPE, opt, v)))
            add(Case("bad CLI input", ("push", m, "-b", "local", *SHAPE, opt, v)))
    for opt, v in (("--runs", "0"), ("--jobs", "0"), ("--warmup", "-3"), ("--idle-seconds", "nan"),
                   ("--idle-seconds", "-1"), ("--connect-timeout", "0"), ("--connect-timeout", "nan"),
                   ("--precision", "fp8"), ("--precision", "")):
        add(Case("bad CLI input", ("push", m, "-b", "local", *SHAPE, opt, v)))
    for opt, v in (("--limit", "0"), ("--limit", "abc"), ("--limit", "-5")):
        add(Case("bad CLI input", ("validate", m, "-b", "local", "--data", f["data"], opt, v)))
        add(Case("quantizer input", ("quantize", m, "--calib", f["data"], "-o", "q.onnx", opt, v), outputs=("q.onnx",)))
    for opt, v in (("--percentile", "abc"), ("--percentile", "nan"), ("--percentile", "200"), ("--max-drop", "nan"),
                   ("--min-cosine", "abc"), ("--workers", "0"), ("--batch-size", "0"), ("--method", "nosuch"),
                   ("--target", "nosuch"), ("--activation-dtype", "int4")):
        add(Case("quantizer input", ("quantize", m, "--calib", f["data"], "-o", "q.onnx", *SHAPE, opt, v),
                 outputs=("q.onnx",)))
    # -- model files -------------------------------------------------------------------------------
    for key in ("missing", "dir", "empty", "garbage", "text", "tflite", "ext_missing", "ext_escape"):
        p = f[key]
        add(Case("bad CLI input", ("inspect", p)))
        add(Case("bad CLI input", ("bench", p, *SHAPE, "--runs", "1", "--min-seconds", "0")))
        add(Case("bad CLI input", ("push", p, "-b", "local")))
        add(Case("bad CLI input", ("validate", p, "-b", "local", "--data", f["data"])))
        add(Case("quantizer input", ("quantize", p, "--calib", f["data"], "-o", "q.onnx"), outputs=("q.onnx",)))
        add(Case("bad CLI input", ("robustness", p, "--data", f["data"])))
    # -- shapes, options, preprocessing ------------------------------------------------------------
    for shape in ("image=axb", "image=2000000000x1x8x8", "image=1e23x1x8x8", "image=-1x1x8x8", "image=0x1x8x8",
                  "image=1x1x8", "nosuch=1x1x8x8", "image", "=1x1x8x8", "image=1x1x8x8x", "image=1:2",
                  "image=1x1x99999x99999"):
        add(Case("bad CLI input", ("bench", m, "--input-shape", shape, "--runs", "1", "--min-seconds", "0")))
        # inspect only counts MACs: a huge but well-formed shape is fine there
        add(Case("bad CLI input", ("inspect", m, "--input-shape", shape),
                 code=0 if shape in ("image=2000000000x1x8x8",) else 2))
        add(Case("bad CLI input", ("push", m, "-b", "local", "--input-shape", shape)))
    for opt in ("threads=abc", "threads=-4", "nosuch=1", "=1", "threads", "providers=nosuch",
                "graph_optimization=maybe"):
        add(Case("bad CLI input", ("bench", m, *SHAPE, "-o", opt, "--runs", "1", "--min-seconds", "0")))
    for pre in ("size=axb", "size=0x0", "mean=a,b,c", "layout=XYZ", "nosuch=1", "size", f["binspec"], f["missing"]):
        add(Case("bad CLI input", ("validate", m, "-b", "local", "--data", f["bad_images"], "--preprocess", pre)))
        add(Case("quantizer input", ("quantize", m, "--calib", f["bad_images"], "-o", "q.onnx", "--preprocess", pre),
                 outputs=("q.onnx",)))
    # -- data, labels, specs -----------------------------------------------------------------------
    for key in ("missing", "dir", "empty_data", "wrong_data", "bad_npy", "bad_images", "text"):
        add(Case("bad CLI input", ("validate", m, "-b", "local", "--data", f[key])))
        add(Case("bad CLI input", ("bench", m, *SHAPE, "--data", f[key], "--runs", "1", "--min-seconds", "0")))
        add(Case("quantizer input", ("quantize", m, "--calib", f[key], "-o", "q.onnx", *SHAPE), outputs=("q.onnx",)))
    add(Case("quantizer input", ("quantize", m, "--calib", f["nan_data"], "-o", "q.onnx", *SHAPE), outputs=("q.onnx",)))
    for key in ("missing", "text", "garbage", "dir"):
        add(Case("bad CLI input", ("validate", m, "-b", "local", "--data", f["data"], "--labels", f[key])))
    for key in ("missing", "binspec", "badspec", "spec_target", "dir"):
        add(Case("bad CLI input", ("validate", m, "-b", "local", "--data", f["data"], "--spec", f[key])))
    add(Case("bad CLI input", ("validate", m, "-b", "local", "--data", f["data"], "--reference", "nosuch")))
    add(Case("bad CLI input", ("validate", m, "-b", "local", "--data", f["data"], "--reference-model", f["garbage"])))
    # a corrupt --stats file is "not matching": calibrated again and replaced, with a warning (exit 0)
    # (--no-speed-check: whether INT8 beats FP32 on this tiny model is not what this case is about)
    add(Case("quantizer input", ("quantize", m, "--calib", f["data"], "-o", "q.onnx", *SHAPE, "--stats", f["stats"],
                                 "--no-speed-check"), code=0))
    # -- boards and profiles -----------------------------------------------------------------------
    for b in ("nosuch", "broken", "nohost", "host:nosuch", "", "../../etc/passwd", f["badspec"]):
        add(Case("bad CLI input", ("push", m, "-b", b, *SHAPE)))
        add(Case("bad CLI input", ("validate", m, "-b", b, "--data", f["data"])))
        add(Case("bad CLI input", ("boards", "show", b)))
        add(Case("bad CLI input", ("boards", "check", b)))
    add(Case("faults", ("push", m, "-b", "refused", *SHAPE), code=1))
    add(Case("faults", ("push", m, "-b", "refused", "-b", "refused", *SHAPE), code=1))
    add(Case("faults", ("boards", "check", "refused"), code=2))
    add(Case("faults", ("validate", m, "-b", "refused", "--data", f["data"], "--quiet"), code=1))
    # -- output paths: refused before any work, nothing created ------------------------------------
    for out in _bad_outputs(f, "x.json"):
        add(Case("bad CLI input", ("bench", m, *SHAPE, "--runs", "1", "--min-seconds", "0", "--json", out)))
        add(Case("bad CLI input", ("push", m, "-b", "local", *SHAPE, "--json", out)))
        add(Case("bad CLI input", ("validate", m, "-b", "local", "--data", f["data"], "--json", out)))
        add(Case("bad CLI input", ("boards", "check", "local", "--json", out)))
        add(Case("bad CLI input", ("robustness", m, "--data", f["data"], "--json", out)))
    for out in _bad_outputs(f, "r.html"):
        add(Case("bad CLI input", ("validate", m, "-b", "local", "--data", f["data"], "--report", out)))
        add(Case("bad CLI input", ("validate", m, "-b", "local", "--data", f["data"], "--junit", out)))
    for opt in ("-o", "--ranges", "--trt-cache", "--report", "--stats"):
        for out in _bad_outputs(f, "q.out"):
            if opt == "--report" and out == "":
                continue
            args = ["quantize", m, "--calib", f["data"], *SHAPE]
            args += ["-o", "q.onnx", opt, out] if opt != "-o" else ["-o", out]
            add(Case("quantizer input", tuple(args), outputs=("q.onnx",)))
    for out in ("/proc/s.npz", f"{f['missing_dir']}/s.npz", f["dir"]):   # unwritable --stats, with --no-cache too
        add(Case("quantizer input", ("quantize", m, "--calib", f["data"], *SHAPE, "-o", "q.onnx", "--no-cache",
                                     "--stats", out), outputs=("q.onnx",)))
    return cases


def _run(case: Case, cwd: Path, env: Dict[str, str]) -> Tuple[Case, int, str, str, List[str]]:
    cwd.mkdir()
    try:
        proc = subprocess.run([sys.executable, "-m", "sdk", *case.args], cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return case, -1, "", "(hung: still running after 120 s)", []
    left = sorted(p.name for p in cwd.iterdir())
    return case, proc.returncode, proc.stdout, proc.stderr, left


def _problem(case: Case, rc: int, out: str, err: str, left: List[str]) -> str:
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    if "Traceback" in err or "Traceback" in out:
        return "traceback"
    if "(unexpected;" in err:
        return "unexpected error (fallback line): " + errors[0][:200]
    if rc != case.code:
        return f"exit {rc}, expected {case.code}: {(errors or err.splitlines() or ['(no stderr)'])[-1][:200]}"
    if case.code == 2 and len(errors) != 1:
        return f"{len(errors)} error lines, stderr: {err.strip()[:300]!r}"
    if left and case.code != 0:            # a command that succeeded wrote its outputs
        return f"left behind: {left}"
    return ""


def test_cli_fuzz_table(tmp_path, capsys):
    f = _scratch(tmp_path)
    cases = _cases(f)
    assert len(cases) >= 200, len(cases)
    env = dict(os.environ, EDGESDK_BOARDS_PATH=f["boards"], HOME=str(tmp_path / "home"), COLUMNS="200")
    (tmp_path / "home").mkdir()
    (tmp_path / "runs").mkdir()
    env.pop("SSH_AUTH_SOCK", None)
    before = sorted(str(p) for p in (tmp_path / "in").rglob("*"))
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(lambda ic: _run(ic[1], tmp_path / "runs" / str(ic[0]), env), enumerate(cases)))
    tried: Counter = Counter()
    failed: Dict[str, List[str]] = defaultdict(list)
    for case, rc, out, err, left in results:
        tried[case.category] += 1
        problem = _problem(case, rc, out, err, left)
        if problem:
            failed[case.category].append(f"sdk {' '.join(case.args)}\n    -> {problem}")
    assert sorted(str(p) for p in (tmp_path / "in").rglob("*")) == before      # inputs untouched, no temp left
    assert not Path(f["missing_dir"]).exists() and not (tmp_path / "no").exists()   # no folder created
    with capsys.disabled():
        print(f"\nCLI fuzz: {len(cases)} cases")
        print(f"{'category':<18}{'tried':>7}{'handled':>9}{'failed':>8}")
        for cat in sorted(tried):
            print(f"{cat:<18}{tried[cat]:>7}{tried[cat] - len(failed[cat]):>9}{len(failed[cat]):>8}")
    problems = [p for cat in sorted(failed) for p in failed[cat]]
    assert not problems, f"{len(problems)} of {len(cases)} cases broke the rule:\n" + "\n".join(problems)
