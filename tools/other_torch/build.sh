#!/usr/bin/env bash
# A venv with another torch than the lock's, for the universal mode's check under a second
# torch version (tests/universal/test_other_torch.py): torch 2.11.0, whose oneDNN (3.10)
# parts the standard chain from 2.13's (docs/replication.md), with numpy and numba.
# PyPI's x86 torch is a CUDA build whose libraries link cuDNN, cuBLAS, NCCL and more: instead
# of 3 GB of nvidia wheels, make_cuda_stubs.py gives each missing library a stub whose every
# function aborts (the CPU never calls them). Needs gcc and readelf; about 530 MB of downloads.
#   tools/other_torch/build.sh [VENV] [TORCH]   (default build/torch-2.11, 2.11.0)
set -euo pipefail
venv=${1:-build/torch-2.11}
version=${2:-2.11.0}
here=$(cd "$(dirname "$0")" && pwd)
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import torch, numba" 2>/dev/null; then
  exit 0
fi
rm -rf "$venv"
python3.11 -m venv "$venv"
pip=("$venv/bin/python" -m pip install -q --no-cache-dir)
# the lock's own torch is the only one this machine caps (/etc/xdg/pip): lift it for this venv
PIP_CONSTRAINT= "${pip[@]}" --no-deps "torch==$version"
"${pip[@]}" filelock fsspec jinja2 networkx sympy typing-extensions 'setuptools>=77,<82' \
  'numpy>=2.0,<2.6' 'numba>=0.68,<0.69'
"${pip[@]}" --no-deps nvidia-cuda-runtime==13.0.96 nvidia-cuda-cupti==13.0.85
"$venv/bin/python" "$here/make_cuda_stubs.py"
"$venv/bin/python" -c "import torch; print('torch', torch.__version__, 'ready in', '$venv')"
