"""External delegates loaded by path, with options.

This machine has no Edge TPU or GPU delegate, so a stand-in is built here from C (SIMULATED
accelerator): a real TFLite external delegate library (``tflite_plugin_create_delegate`` /
``tflite_plugin_destroy_delegate``, the ABI of ``libedgetpu.so.1`` and the GPU delegate) that
records its options and its Prepare call and claims no nodes, so the model still runs on the CPU
kernels. Options make it fail to create (``fail``), fail its Prepare (``reject``) or refuse
dynamic tensors like most accelerators (``static``).
"""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests import tiers

from sdk.errors import BuildError, TargetUnavailableError
from sdk.targets import get_target
from sdk.targets.tflite import TFLiteTarget

DATA = Path(__file__).resolve().parent.parent / "data"
FLOAT = DATA / "digits_float.tflite"

_CC = shutil.which("cc") or shutil.which("gcc")
_AVAIL = TFLiteTarget.availability(deep=True)
pytestmark = [
    tiers.needs("tflite", _AVAIL.available, f"no working TFLite runtime: {_AVAIL.reason}"),
    tiers.needs("gxx", _CC is not None, "no C compiler (cc/gcc) to build the stand-in delegate"),
]

_SOURCE = r"""
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The TfLiteDelegate struct of tensorflow/lite/core/c/common.h, with opaque context pointers. */
typedef struct Delegate {
    void* data_;
    int (*Prepare)(void* context, struct Delegate* delegate);
    void* CopyFromBufferHandle;
    void* CopyToBufferHandle;
    void* FreeBufferHandle;
    int64_t flags;
    void* opaque_delegate_builder;
} Delegate;

typedef struct { char log[1024]; int reject; int is_static; } State;

static void note(State* s, const char* text) {
    if (!s->log[0]) return;
    FILE* f = fopen(s->log, "a");
    if (f) { fputs(text, f); fputc('\n', f); fclose(f); }
}

static int prepare(void* context, Delegate* d) {   /* claims no nodes: the CPU kernels run them */
    State* s = (State*)d->data_;
    note(s, "prepare");
    return s->reject ? 1 : 0;                       /* kTfLiteError : kTfLiteOk */
}

Delegate* tflite_plugin_create_delegate(char** keys, char** values, int n, void (*report_error)(const char*)) {
    State* s = (State*)calloc(1, sizeof(State));
    char line[2048];
    int i;
    for (i = 0; i < n; i++) {
        if (strcmp(keys[i], "log") == 0) strncpy(s->log, values[i], sizeof(s->log) - 1);
        if (strcmp(keys[i], "reject") == 0) s->reject = atoi(values[i]);
        if (strcmp(keys[i], "static") == 0) s->is_static = atoi(values[i]);
    }
    for (i = 0; i < n; i++) {
        snprintf(line, sizeof(line), "option %s=%s", keys[i], values[i]);
        note(s, line);
        if (strcmp(keys[i], "fail") == 0 && atoi(values[i])) {
            report_error("stand-in delegate: no device found");
            free(s);
            return NULL;
        }
    }
    Delegate* d = (Delegate*)calloc(1, sizeof(Delegate));
    d->data_ = s;
    d->Prepare = prepare;
    d->flags = s->is_static ? 0 : 1;                /* kTfLiteDelegateFlagsAllowDynamicTensors */
    note(s, "created");
    return d;
}

void tflite_plugin_destroy_delegate(Delegate* d) {
    if (!d) return;
    note((State*)d->data_, "destroyed");
    free(d->data_);
    free(d);
}
"""


@pytest.fixture(scope="module")
def delegate_lib(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("delegate")
    src = d / "standin_delegate.c"
    src.write_text(_SOURCE)
    lib = d / "libstandin_delegate.so"
    proc = subprocess.run([_CC, "-shared", "-fPIC", "-O1", "-o", str(lib), str(src)], capture_output=True, text=True)
    if proc.returncode != 0:
        tiers.require_or_skip("gxx", f"could not build the stand-in delegate: {proc.stderr.strip()[:200]}")
    return lib


def test_delegate_gets_options_and_the_graph(delegate_lib, tmp_path):
    log = tmp_path / "log.txt"
    x = np.load(DATA / "digits_ref.npz")["x"][:4]
    with get_target("tflite").open(FLOAT) as s:
        want = s.run({"image": x})["output_0"]
    t = get_target("tflite", delegate=str(delegate_lib), delegate_options={"log": str(log), "device": ":0"})
    art = t.prepare(FLOAT)
    assert art.metadata["delegates"] == [{"path": str(delegate_lib), "options": {"device": ":0", "log": str(log)}}]
    with t.open(art) as s:
        got = s.run({"image": x})["output_0"]
    np.testing.assert_allclose(got, want, atol=1e-5)
    lines = log.read_text().splitlines()
    assert "option device=:0" in lines and "created" in lines and "prepare" in lines


def test_delegate_options_as_json_text_and_xnnpack_off(delegate_lib, tmp_path):
    log = tmp_path / "log.txt"
    t = get_target("tflite", delegate=str(delegate_lib), xnnpack=False,
                   delegate_options=json.dumps({"log": str(log), "cache": True}))
    with t.open(FLOAT) as s:
        s.runner({"image": np.zeros((1, 8, 8, 1), np.float32)})()
    assert "option cache=true" in log.read_text().splitlines()


def test_delegate_that_fails_to_create_is_clear(delegate_lib):
    t = get_target("tflite", delegate=str(delegate_lib), delegate_options={"fail": 1})
    with pytest.raises(TargetUnavailableError, match="no device found"):
        t.prepare(FLOAT)


@pytest.mark.parametrize("opts", [{"reject": 1}, {"static": 1}], ids=["prepare-fails", "static-only"])
def test_delegate_that_rejects_the_graph_is_a_build_error(delegate_lib, opts):
    t = get_target("tflite", delegate=str(delegate_lib), delegate_options=opts)
    with pytest.raises(BuildError, match="could not be applied to the model"):
        t.prepare(FLOAT)


def test_cli_bench_with_delegate(delegate_lib, tmp_path, capsys):
    from sdk.cli import main

    log = tmp_path / "log.txt"
    out_json = tmp_path / "r.json"
    args = ["bench", str(FLOAT), "-t", "tflite", "-o", f"delegate={delegate_lib}",
            "-o", "delegate_options=" + json.dumps({"log": str(log)}), "--runs", "3", "--warmup", "0",
            "--min-seconds", "0", "--json", str(out_json)]
    try:
        main(args)
    except SystemExit as exc:
        assert not exc.code, capsys.readouterr().err
    d = json.loads(out_json.read_text())
    assert d["runtime"]["delegates"][0]["path"] == str(delegate_lib)
    assert "prepare" in log.read_text().splitlines()


def test_cli_delegate_failure_is_one_line(delegate_lib, capsys):
    from sdk.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["bench", str(FLOAT), "-t", "tflite", "-o", f"delegate={delegate_lib}",
              "-o", 'delegate_options={"fail": 1}'])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "no device found" in lines[0]
