#!/usr/bin/env bash
# A venv with another torch than the lock's, for the universal mode's check under a second
# torch version (tests/universal/test_other_torch.py): torch 2.11.0, whose oneDNN (3.10)
# parts the standard chain from 2.13's (docs/replication.md), with numpy and numba, and
# triton 3.6 (torch 2.11's), whose interpreter runs the GPU backend's kernels on this CPU.
# PyPI's x86 torch is a CUDA build whose libraries link cuDNN, cuBLAS, NCCL and more: instead
# of 3 GB of nvidia wheels, make_cuda_stubs.py gives each missing library a stub whose every
# function aborts (the CPU never calls them). Needs gcc and readelf; about 530 MB of downloads.
#   tools/other_torch/build.sh [VENV] [TORCH]   (default build/torch-2.11, 2.11.0)
set -euo pipefail
venv=${1:-build/torch-2.11}
version=${2:-2.11.0}
here=$(cd "$(dirname "$0")" && pwd)
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c "import torch, numba, ale_py, triton, pytest" 2>/dev/null; then
  exit 0
fi
rm -rf "$venv"
python3.11 -m venv "$venv"
pip=("$venv/bin/python" -m pip install -q --no-cache-dir)
# the lock's own torch is the only one this machine caps (/etc/xdg/pip): lift it for this venv
PIP_CONSTRAINT= "${pip[@]}" --no-deps "torch==$version"
# numpy below 2.4, whose int() of a 1-element array is an error that triton 3.6's interpreter hits
"${pip[@]}" filelock fsspec jinja2 networkx sympy typing-extensions 'setuptools>=77,<82' \
  'numpy>=2.0,<2.4' 'numba>=0.68,<0.69'
# what `reprodqn train` needs besides (the tiny universal chain runs with the game), and pytest
# for the GPU kernels' tests under the interpreter
"${pip[@]}" 'ale-py==0.12.1' 'opencv-python-headless>=4.8' 'pydantic>=2.6,<3' 'pyyaml>=6' \
  'safetensors>=0.4' 'gymnasium>=1.0,<2' pytest
# triton: the GPU backend's kernels, run here by its interpreter (universal/cuda.py)
"${pip[@]}" --no-deps nvidia-cuda-runtime==13.0.96 nvidia-cuda-cupti==13.0.85 triton==3.6.0
"$venv/bin/python" "$here/make_cuda_stubs.py"
"$venv/bin/python" -c "import torch; print('torch', torch.__version__, 'ready in', '$venv')"
