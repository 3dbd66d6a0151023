#!/usr/bin/env bash
# Sourced by .ci/run: the real TensorRT Python bindings of each supported major, each in its own
# folder (they all install as `tensorrt_bindings`), for the API conformance test
# (tests/targets/test_tensorrt_api.py). About 1 MB each; no TensorRT libraries (the test compiles
# stubs). 8.6.1 is the JetPack 5 line (the only 8.x bindings wheel on PyPI; cp38-cp311 only),
# 10.x JetPack 6/7, 11.x the newest. Exports EDGESDK_TRT_BINDINGS (folders, ':'-separated).

TRT_BINDINGS_SPECS="${TRT_BINDINGS_SPECS:-tensorrt-bindings==8.6.1 tensorrt-cu12-bindings==10.3.0 tensorrt-cu13-bindings==11.4.0.106}"
_root="${EDGESDK_CI_CACHE:-$HOME/.cache/edgesdk-ci}/trt-bindings"
_dirs=""
for _spec in $TRT_BINDINGS_SPECS; do
    _dir="$_root/${_spec//==/-}"
    if [ ! -d "$_dir/tensorrt_bindings" ]; then
        rm -rf "$_dir"
        python -m pip install -q --no-deps --target "$_dir" "$_spec" \
            || { echo "warning: could not install $_spec (its conformance test will fail)"; rm -rf "$_dir"; continue; }
    fi
    _dirs="${_dirs:+$_dirs:}$_dir"
done
export EDGESDK_TRT_BINDINGS="$_dirs"
echo "TensorRT bindings for the API conformance test: $EDGESDK_TRT_BINDINGS"
