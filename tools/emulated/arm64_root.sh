#!/usr/bin/env bash
# Make an arm64 Debian bookworm root in DEST that qemu-aarch64-static runs without binfmt
# or chroot (`qemu-aarch64-static -L DEST DEST/usr/bin/python3.11`), with aarch64 wheels of
# numpy, numba and a CPU torch in DEST/opt/pysite. Idempotent: each stage is skipped when
# its marker is there. Usage: tools/emulated/arm64_root.sh DEST   (e.g. ../emu-root/arm64, beside the checkout)
set -euo pipefail

if [[ $# -ne 1 ]]; then
    echo "usage: $0 DEST (the folder the arm64 root goes in, outside any work tree)" >&2
    exit 2
fi
DEST=$(realpath -m "$1")
MIRROR=${MIRROR:-http://deb.debian.org/debian}
HOST_PYTHON=${HOST_PYTHON:-python3}
# The lock's versions, but torch 2.9.1: the registry's 2.13.0 aarch64 wheel is CUDA-linked
# (needs libcudart, fails under qemu); 2.9.1's is a CPU build. Listed in full and installed
# with --no-deps: with --platform, pip still reads the dependencies' markers against this
# host (platform_machine == "x86_64") and would ask for torch's CUDA wheels.
WHEELS=(numpy==2.4.6 numba==0.68.1 llvmlite==0.50.0 torch==2.9.1
    filelock==4.2.11 typing-extensions==4.16.0 sympy==1.14.0 mpmath==1.3.0
    networkx==3.6.1 jinja2==3.1.6 markupsafe==3.0.4 fsspec==2026.9.0
    # what `reprodqn train` imports besides torch: the game (ale-py carries its ROMs),
    # the frames, the config and the checkpoints
    ale-py==0.12.1 gymnasium==1.4.0 farama-notifications==0.0.6 cloudpickle==3.1.2
    opencv-python-headless==5.0.0.93 pydantic==2.14.3 pydantic-core==2.50.4
    annotated-types==0.8.0 typing-inspection==0.4.5 pyyaml==6.0.3 safetensors==0.8.0
    scipy==1.17.1 nvidia-ml-py==13.615.71)
PACKAGES=python3,python3.11,libpython3.11-stdlib,libstdc++6,libgomp1,ca-certificates

need() {  # install a Debian package when its command is missing
    command -v "$1" >/dev/null 2>&1 && return
    echo "installing $2" >&2
    apt-get install -y "$2" >/dev/null || { apt-get update >/dev/null && apt-get install -y "$2" >/dev/null; }
}
need debootstrap debootstrap
need qemu-aarch64-static qemu-user-static
need dpkg-deb dpkg

mkdir -p "$DEST"
start=$SECONDS

# Stage 1: debootstrap's first (foreign) stage downloads every package and unpacks only the
# required ones; the second stage would need to run arm64 dpkg, so unpack the rest (python3
# and its libraries) with dpkg-deb -x instead. No maintainer scripts run: none is needed to
# start Python.
if [[ ! -e "$DEST/.stage1-done" ]]; then
    echo "debootstrap --foreign --arch=arm64 bookworm -> $DEST" >&2
    debootstrap --foreign --arch=arm64 --variant=minbase --include="$PACKAGES" \
        bookworm "$DEST" "$MIRROR" >"$DEST.debootstrap.log" 2>&1 \
        || { echo "debootstrap failed: see $DEST.debootstrap.log" >&2; exit 1; }
    for deb in "$DEST"/var/cache/apt/archives/*.deb; do
        dpkg-deb -x "$deb" "$DEST"
    done
    touch "$DEST/.stage1-done"
fi

QEMU=(qemu-aarch64-static -L "$DEST")
"${QEMU[@]}" "$DEST/usr/bin/python3.11" -c 'import sys, platform; print("arm64 root python", sys.version.split()[0], platform.machine())'

# Stage 2: wheels. pip under qemu is ~100x slower, so the host's pip picks aarch64 wheels
# (binary only, cp311) into a folder that run.sh puts on the emulated Python's path.
SITE="$DEST/opt/pysite"
marker="$SITE/.installed-$(printf '%s\n' "${WHEELS[@]}" | sha256sum | cut -c1-16)"
if [[ ! -e "$marker" ]]; then
    echo "pip (host) aarch64 wheels ${WHEELS[*]} -> $SITE" >&2
    rm -rf "$SITE"
    PIP_ROOT_USER_ACTION=ignore "$HOST_PYTHON" -m pip install --quiet --no-deps --target "$SITE" --only-binary=:all: \
        --implementation cp --python-version 3.11 --abi cp311 \
        --platform manylinux_2_28_aarch64 --platform manylinux2014_aarch64 \
        "${WHEELS[@]}" 2> >(grep -v 'is ignored: it is neither' >&2)
    touch "$marker"
fi

"${QEMU[@]}" "$DEST/usr/bin/python3.11" -c '
import sys; sys.path.insert(0, sys.argv[1])
import numpy, numba, torch
print("aarch64 imports: numpy", numpy.__version__, "numba", numba.__version__, "torch", torch.__version__)
' "$SITE"
echo "arm64 root ready in $DEST ($((SECONDS - start)) s this run)" >&2
