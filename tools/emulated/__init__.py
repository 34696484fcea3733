"""Emulated CPUs for the universal numerics mode's checks: an arm64 root and a qemu-user
runner (arm64_root.sh, run.sh), and a probe that an FMA chain gives one hash on each."""
