#!/usr/bin/env bash
# Build (once) and cache a Debian arm64 userland for the emulated aarch64 test board (issue 23).
#
#   scripts/arm_rootfs.sh            -> prints the rootfs folder on its last line of stdout
#   EDGESDK_ARM_CACHED_ONLY=1 scripts/arm_rootfs.sh   -> the same when built, else exit 3 (no build)
#
# The board: Debian bookworm arm64 (minbase) with Debian's python3 and python3-numpy, and the
# aarch64 wheels of onnxruntime (the host's version, so outputs compare like for like) and
# ai-edge-litert unpacked into /usr/local/lib/python3.11/dist-packages. Its binaries run on this x86
# machine through qemu-user-static and binfmt_misc (registered here with the F flag, so they also
# run inside a chroot). Cached in ${EDGESDK_CI_CACHE:-~/.cache/edgesdk-ci}/arm64-rootfs/<key>, the
# key a hash of this script and the wheel versions; a finished build is marked by .complete.
#
# Needs root (mmdebstrap --mode=root, mknod), the mmdebstrap, qemu-user-static and binfmt-support
# Debian packages (.ci/run installs them), the Debian mirror and the package index.
# Exits non-zero with one "error: ..." line naming what is missing.
set -euo pipefail

ORT_VERSION="${EDGESDK_ARM_ORT_VERSION:-$(python -c 'import importlib.metadata as m; print(m.version("onnxruntime"))')}"
LITERT_VERSION="${EDGESDK_ARM_LITERT_VERSION:-$(python -c 'import importlib.metadata as m; print(m.version("ai-edge-litert"))' 2>/dev/null || echo 2.3.0)}"
SUITE=bookworm
PYVER=3.11
MIRROR="${EDGESDK_ARM_MIRROR:-http://deb.debian.org/debian}"
CACHE="${EDGESDK_CI_CACHE:-$HOME/.cache/edgesdk-ci}/arm64-rootfs"
# Pure-Python or aarch64-wheel dependencies of the two runtimes (numpy comes from Debian).
PY_DEPS="flatbuffers packaging protobuf>=4.25.8 ml_dtypes backports.strenum tqdm typing-extensions"

die() { echo "error: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "building the arm64 rootfs needs root (mmdebstrap --mode=root)"
command -v mmdebstrap >/dev/null || die "mmdebstrap is missing: apt-get install mmdebstrap"
QEMU="$(command -v qemu-aarch64-static || true)"
[ -n "$QEMU" ] || die "qemu-aarch64-static is missing: apt-get install qemu-user-static binfmt-support"

# binfmt_misc: mount it if needed and make sure the aarch64 entry is enabled.
if [ ! -e /proc/sys/fs/binfmt_misc/status ]; then
    mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc 2>/dev/null \
        || die "cannot mount binfmt_misc (mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc needs CAP_SYS_ADMIN)"
fi
if [ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]; then
    command -v update-binfmts >/dev/null || die "update-binfmts is missing: apt-get install binfmt-support"
    update-binfmts --import qemu-aarch64 >/dev/null 2>&1 || true
    update-binfmts --enable qemu-aarch64 >/dev/null 2>&1 || true
fi
grep -q '^enabled' /proc/sys/fs/binfmt_misc/qemu-aarch64 2>/dev/null \
    || die "the binfmt_misc entry qemu-aarch64 is not enabled (update-binfmts --enable qemu-aarch64)"

# The cache key: what goes into the rootfs (bump RECIPE when the steps below change what they make).
RECIPE="1 $SUITE $PYVER minbase python3 python3-numpy $PY_DEPS"
KEY="$(printf '%s' "$RECIPE" | sha256sum | cut -c1-12)-ort${ORT_VERSION}-litert${LITERT_VERSION}"
ROOT="$CACHE/$KEY"
if [ -e "$ROOT/.complete" ]; then
    echo "$ROOT"
    exit 0
fi
# EDGESDK_ARM_CACHED_ONLY=1: only say where a built rootfs is; exit 3 when there is none
[ -z "${EDGESDK_ARM_CACHED_ONLY:-}" ] || exit 3

mkdir -p "$CACHE"
rm -rf "$ROOT.tmp"
start=$(date +%s)
echo "building the arm64 rootfs in $ROOT (Debian $SUITE, onnxruntime $ORT_VERSION, ai-edge-litert $LITERT_VERSION)" >&2
mmdebstrap --quiet --mode=root --arch=arm64 --variant=minbase --include=python3,python3-numpy \
    "$SUITE" "$ROOT.tmp" "deb $MIRROR $SUITE main" >&2 \
    || die "mmdebstrap failed (Debian mirror $MIRROR reachable? binfmt for arm64 working?)"

SITE="$ROOT.tmp/usr/local/lib/python$PYVER/dist-packages"
mkdir -p "$SITE"
PLAT="--platform manylinux_2_28_aarch64 --platform manylinux_2_27_aarch64 --platform manylinux_2_17_aarch64 --platform manylinux2014_aarch64"
# shellcheck disable=SC2086
python -m pip install -q --no-deps --only-binary=:all: $PLAT --python-version "$PYVER" --implementation cp \
    --abi "cp${PYVER/./}" --target "$SITE" "onnxruntime==$ORT_VERSION" "ai-edge-litert==$LITERT_VERSION" $PY_DEPS >&2 \
    || die "could not fetch the aarch64 wheels of onnxruntime $ORT_VERSION / ai-edge-litert $LITERT_VERSION"
rm -rf "$SITE/bin"

# The board's own python3 must import both runtimes (run through qemu, in the chroot).
chroot "$ROOT.tmp" /usr/bin/python3 -c "import platform, numpy, onnxruntime, ai_edge_litert.interpreter; assert platform.machine() == 'aarch64', platform.machine()" >&2 \
    || die "the arm64 python3 cannot import numpy/onnxruntime/ai_edge_litert"
mkdir -p "$ROOT.tmp/root" "$ROOT.tmp/home"
# sshd's ChrootDirectory wants the root and its parents owned by root and not group/other writable.
chown root:root "$ROOT.tmp" && chmod 755 "$ROOT.tmp"
echo "built in $(( $(date +%s) - start )) s" > "$ROOT.tmp/.complete"
mv "$ROOT.tmp" "$ROOT"
cat "$ROOT/.complete" >&2
echo "$ROOT"
