#!/usr/bin/env bash
# Here, before a lent GPU session: what tools/gpu_session.sh carries to the GPU machine,
# which has python3.12 and torch but none of these, and no network.
#   .whl/      ale-py, gymnasium, pydantic and their needs (the lock's versions), and tyro
#              and its needs for CleanRL's dqn_atari.py
#   .cleanrl/  CleanRL's dqn_atari.py and cleanrl_utils/, from a fetched vwxyzjn/cleanrl
#              (CLEANRL_GIT: its git directory, default the fetch tool's mirror)
#   .numba/    numba's wheel and llvmlite's files as an xz tarball, for the universal probe
#              (gpu_session.sh probe): llvmlite's wheel is 57 MiB, its xz 39 MiB, so they
#              travel in a call of their own: run(carry=[".numba"])
# All are git-ignored, so they travel only when named: run(carry=[".whl", ".cleanrl"]).
set -euo pipefail
cd "$(dirname "$0")/.."
rm -rf .whl .cleanrl .numba && mkdir -p .whl .cleanrl .numba
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$p")
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp "${platforms[@]}" -d .whl \
  ale-py==0.12.1 gymnasium==1.4.0 farama-notifications==0.0.6 \
  pydantic==2.14.3 pydantic-core==2.50.4 annotated-types==0.8.0 typing-inspection==0.4.5 \
  typing-extensions==4.16.0 tyro docstring-parser typeguard shtab
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp "${platforms[@]}" -d .numba numba==0.68.1 llvmlite==0.50.0
unpacked=$(mktemp -d)
python3 -m zipfile -e .numba/llvmlite-*.whl "$unpacked"
tar -C "$unpacked" -cf - . | xz -6 -T0 >.numba/llvmlite.tar.xz
rm -rf "$unpacked" .numba/llvmlite-*.whl
CLEANRL_GIT=${CLEANRL_GIT:-/work/.mirror/vwxyzjn+cleanrl/repo}
if [ -d "$CLEANRL_GIT" ]; then
  git --git-dir="$CLEANRL_GIT" archive HEAD cleanrl/dqn_atari.py cleanrl_utils/__init__.py \
    cleanrl_utils/atari_wrappers.py cleanrl_utils/buffers.py | tar -x -C .cleanrl
else
  echo "device_wheels: no CleanRL checkout at $CLEANRL_GIT; the bench prints its published rate" >&2
fi
du -sh .whl .cleanrl .numba
