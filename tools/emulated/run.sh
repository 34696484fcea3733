#!/usr/bin/env bash
# Run a Python command on an emulated CPU, with this work tree's src/ (and root) first on
# the path, so the emulated Python imports this checkout's reprodqn.
#   tools/emulated/run.sh aarch64 ROOT -- python ARGS...   ROOT: the arm64 root that
#       arm64_root.sh made (its python3.11 and opt/pysite: numpy, numba, torch 2.9.1)
#   tools/emulated/run.sh nehalem VENV -- python ARGS...   VENV: an x86-64 venv (default
#       the checkout's .venv: the lock's torch 2.13.0 and numba), run on qemu's Nehalem-v1
#       (SSE4.2, no AVX, no FMA)
# EMULATED_CPU overrides qemu's -cpu (aarch64 default neoverse-n1, a Graviton2 core).
# Both are qemu-user, ~100x slower than native: keep what runs there tiny.
set -euo pipefail

usage() {
    echo "usage: $0 {aarch64|nehalem} ROOT -- python ARGS..." >&2
    exit 2
}
[[ $# -ge 4 && $3 == "--" ]] || usage
target=$1
root=$(realpath -m "$2")
shift 3
[[ $1 == python || $1 == python3 ]] || { echo "$0: the command after -- must start with python, not '$1'" >&2; exit 2; }
shift
tree=$(cd "$(dirname "$0")/../.." && pwd)
export PYTHONHASHSEED=${PYTHONHASHSEED:-0}

case $target in
aarch64)
    python=$root/usr/bin/python3.11
    [[ -x $python ]] || { echo "$0: no arm64 root at $root (expected $python): run tools/emulated/arm64_root.sh $root" >&2; exit 2; }
    cpu=${EMULATED_CPU:-neoverse-n1}
    # LLVM on aarch64 Linux reads the CPU from /proc/cpuinfo, which qemu-user leaves the
    # host's (x86), so numba would compile for "generic": name the emulated core instead,
    # as numba finds it on a real one.
    export NUMBA_CPU_NAME=${NUMBA_CPU_NAME:-$cpu}
    unset OPENBLAS_CORETYPE  # an x86 core name, if the host sets one
    export PYTHONPATH=$tree/src:$tree:$root/opt/pysite${PYTHONPATH:+:$PYTHONPATH}
    exec qemu-aarch64-static -cpu "$cpu" -L "$root" "$python" "$@"
    ;;
nehalem)
    python=$root/bin/python
    [[ -x $python ]] || python=$root/bin/python3  # a system prefix such as /usr
    [[ -x $python ]] || { echo "$0: no x86-64 venv at $root (expected $python)" >&2; exit 2; }
    cpu=${EMULATED_CPU:-Nehalem-v1}
    # Not the host's OPENBLAS_CORETYPE (this machine exports Haswell): numpy's OpenBLAS
    # would run AVX2 kernels and die on an illegal instruction at import.
    export OPENBLAS_CORETYPE=Nehalem
    export PYTHONPATH=$tree/src:$tree${PYTHONPATH:+:$PYTHONPATH}
    exec qemu-x86_64-static -cpu "$cpu" "$python" "$@"
    ;;
*)
    echo "$0: unknown target '$target' (expected aarch64 or nehalem)" >&2
    exit 2
    ;;
esac
