#!/usr/bin/env bash
# Issue 51's checks on a lent GPU machine, in two calls of under 7.5 and 3.5 minutes (with
# the machine's start, about 12.5 of a session's 15 minutes of device time):
#   `check`: 0 and 1; `bench`: 2 and 3 (each call's files come back on their own)
#   0. bench/capture_probe.py: the fast path's update captured, and 50 of its updates bit
#      for bit the standard path's, in-process (seconds; torch's message if capture fails)
#   1. gpu-check: the deterministic pair one chain on the standard path and on the fast path
#      (compute.replay_on_device + compute.cuda_graphs), the same chain on both, the gpu
#      pair parting, the audit on CUDA, and 1, 4, 8 and 16 runs sharing the GPU on each path,
#      every chain the pair's, with agent steps/s after annealing (about 5.5 min)
#   2. bench/gpu_profile.py: where one agent step's time goes on each path (under 1 min)
#   3. bench/gpu_throughput.py at K = 1, and CleanRL's dqn_atari.py on the same GPU, one
#      run each, timed after annealing alike (about 1.5 min)
# Each step has its own time limit, so a slow one cannot take the others' results with it.
# Here, first: tools/device_wheels.sh. Then, with the device tool, one call after the other
# (the machine stays warm between them):
#   run(command="bash tools/gpu_session.sh check", carry=[".whl", ".cleanrl"], timeout_s=450)
#   run(command="bash tools/gpu_session.sh bench", carry=[".whl", ".cleanrl"], timeout_s=210)
# What comes back (at most 8 files a call): each step's whole output (STEP.log),
# session.log and nvidia-smi.txt; gpu-check.md and .json (or, if cut off, its partial
# record) and gpu-check-train.log (check); throughput.json and throughput-train.log (bench).
# Each part starts from empty directories: a rerun on the warm machine must not find the
# last call's finished runs (a finished run returns at once).
#
# Issue 65's, two more parts, one call each (tools/device_wheels.sh first, as above):
#   `mps`: its first line says whether nvidia-cuda-mps-control exists there; then
#      bench/gpu_throughput.py at K = 8 and 16 on both paths three times, one after the
#      other: as today (the runs taking turns), under MPS (--mps), and under MPS with the
#      host's settings (--mps --blocking-sync --pin); each run's chain held to the chain it
#      has alone, every time (about 6 min; each sweep may take 150 s)
#        run(command="bash tools/gpu_session.sh mps", carry=[".whl"], timeout_s=500)
#   `probe`: the universal numerics on the GPU: the probe (tools/universal_probe.py) on
#      the CPU's kernels and on the GPU's (Triton), each compared with
#      tests/golden/universal-probe.json; the tiny training chain on the GPU against
#      tests/golden/universal-tiny-nips.hashes.jsonl; bench/universal_numerics.py --device
#      cuda (about 6 min at most). numba comes from .numba/ (llvmlite's 57 MiB wheel, xz'd,
#      does not fit beside .whl in one call's 64 MiB) unless the host has its own; the
#      chain's ale-py and pydantic come from a `wheels` call just before, on the warm machine:
#        run(command="bash tools/gpu_session.sh wheels", carry=[".whl"], timeout_s=60)
#        run(command="bash tools/gpu_session.sh probe", carry=[".numba"], timeout_s=560)
# What comes back: mps: session.log, nvidia-smi.txt, mps-binary.txt, throughput-{plain,mps,
# host}.json, mps-control.log and steps.tar.gz (each step's whole output and train.log);
# probe: session.log, universal-probe{,-cuda}.{json,log}, universal-chain-cuda.{log,jsonl},
# universal-bench-cuda.log.
set -uo pipefail
part=${1:?"which part: check, bench, mps, wheels or probe"}
OUT=${OUT:-build/gpu-session}
mkdir -p "$OUT"
if [ "$part" = mps ]; then  # first: is MPS there at all
  control=$(command -v nvidia-cuda-mps-control)
  echo "mps: nvidia-cuda-mps-control ${control:-not found on PATH}" | tee "$OUT/mps-binary.txt"
fi
if [ "$part" = probe ]; then  # .whl's packages stay in /tmp/site from the `wheels` call
  mkdir -p /tmp/site
  if ! PYTHONPATH=/tmp/site python3 -c "import numba" 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site \
      .numba/*.whl && tar -xJf .numba/llvmlite.tar.xz -C /tmp/site || exit 1
  fi
else
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
fi
if [ "$part" = wheels ]; then
  echo "wheels: installed in /tmp/site for the probe call"
  exit 0
fi
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 PYTHONHASHSEED=0
export TORCH_SHOW_CPP_STACKTRACES=1  # a refused capture names the op, not only the error
rm -rf /tmp/gpu-check /tmp/throughput /tmp/throughput-*
nvidia-smi >"$OUT/nvidia-smi.txt" 2>&1
log="$OUT/session.log"
step() {  # step SECONDS NAME COMMAND...: run it, time it, its whole output in NAME.log
  local limit=$1 name=$2
  shift 2
  local start=$SECONDS
  echo "== $name (limit ${limit}s)" | tee -a "$log"
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  local code=$?
  tail -n 30 "$OUT/$name.log" >>"$log"
  echo "== $name: exit $code after $((SECONDS - start)) s" | tee -a "$log"
}
if [ "$part" = check ]; then
  step 45 capture-probe python3 bench/capture_probe.py --updates 50
  step 380 gpu-check python3 -m reprodqn.cli gpu-check --params params.yaml \
    --out /tmp/gpu-check --steps 2400 --sharing 1 4 8 16
  cp /tmp/gpu-check/gpu-check.md /tmp/gpu-check/gpu-check.json "$OUT/" 2>/dev/null ||
    cp /tmp/gpu-check/gpu-check.partial.json "$OUT/" 2>/dev/null
  cp /tmp/gpu-check/train.log "$OUT/gpu-check-train.log" 2>/dev/null
  cat "$OUT/gpu-check.md" 2>/dev/null
fi
if [ "$part" = bench ]; then
  step 60 profile python3 bench/gpu_profile.py --steps 300
  step 130 throughput python3 bench/gpu_throughput.py --sharing 1 --steps 3000 \
    --out /tmp/throughput --cleanrl .cleanrl --cleanrl-python python3
  cp /tmp/throughput/gpu-throughput.json "$OUT/throughput.json" 2>/dev/null
  cp /tmp/throughput/train.log "$OUT/throughput-train.log" 2>/dev/null
  tail -n 20 "$OUT/throughput.log" 2>/dev/null
fi
if [ "$part" = mps ]; then
  for variant in plain mps host; do
    case $variant in
      plain) flags=() ;;
      mps) flags=(--mps) ;;
      host) flags=(--mps --blocking-sync --pin) ;;
    esac
    step 150 "throughput-$variant" python3 bench/gpu_throughput.py --sharing 8 16 \
      --steps 2400 --out "/tmp/throughput-$variant" "${flags[@]}"
    cp "/tmp/throughput-$variant/gpu-throughput.json" "$OUT/throughput-$variant.json" 2>/dev/null
    cp "/tmp/throughput-$variant/train.log" "$OUT/throughput-$variant-train.log" 2>/dev/null
  done
  cp /tmp/throughput-host/mps-control.log "$OUT/" 2>/dev/null ||
    cp /tmp/throughput-mps/mps-control.log "$OUT/" 2>/dev/null
  (cd "$OUT" && tar -czf steps.tar.gz throughput-*.log && rm -f throughput-*.log)
fi
if [ "$part" = probe ]; then
  # the CPU's kernels, then the GPU's (Triton) on the same updates, then the tiny training
  # chain on the GPU against its golden record, then the mode's speed on the GPU
  step 100 universal-probe python3 tools/universal_probe.py --updates 4
  step 150 universal-probe-cuda python3 tools/universal_probe.py --updates 4 --device cuda
  for name in universal-probe universal-probe-cuda; do
    grep '^{"sha256"' "$OUT/$name.log" | tail -n 1 >"$OUT/$name.json"
    python3 - "$OUT/$name.json" <<'COMPARE' | tee -a "$log"
import json
import sys

golden = json.load(open("tests/golden/universal-probe.json"))
try:
    got = json.load(open(sys.argv[1]))
except ValueError:
    sys.exit(f"universal probe: no result in {sys.argv[1]} (see its .log)")
same = got["sha256"] == golden["sha256"] and got["greedy"] == golden["greedy"]
print(
    f"universal probe on torch {got['torch']} ({got['machine']}, {got['kernels']}): "
    + ("the golden hash" if same else f"DIFFERS: {got['sha256']}, golden {golden['sha256']}")
)
COMPARE
  done
  chain=(--set compute.numerics=universal --set env.resize=linear_exact --set agent.network=nips
    --set agent.batch_size=8 --set agent.target_sync_every=100 --set agent.epsilon_decay_steps=300
    --set replay.capacity=1000 --set replay.learning_starts=200 --set train.steps=800
    --set train.checkpoint_every=400 --set train.resume_every=400 --set train.log_every=100)
  rm -rf /tmp/universal-chain
  step 150 universal-chain-cuda python3 -m reprodqn.cli train --group deterministic --run 0 \
    --params params.yaml --runs-dir /tmp/universal-chain "${chain[@]}" --set compute.device=cuda
  if cmp -s /tmp/universal-chain/deterministic/0/hashes.jsonl \
    tests/golden/universal-tiny-nips.hashes.jsonl; then
    echo "universal tiny chain on cuda: the golden chain" | tee -a "$log"
  else
    echo "universal tiny chain on cuda: DIFFERS from the golden chain" | tee -a "$log"
  fi
  cp /tmp/universal-chain/deterministic/0/hashes.jsonl "$OUT/universal-chain-cuda.jsonl"
  step 150 universal-bench-cuda python3 bench/universal_numerics.py --rounds 1 --device cuda
fi
