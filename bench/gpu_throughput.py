"""Agent steps per second on one GPU with K runs sharing it, the standard path against the
fast one (compute.replay_on_device and compute.cuda_graphs) in one sitting: per run and in
all, after annealing (epsilon at 0.1, 95% of the paper's 20M steps), each run a `reprodqn
train` process of the study's network and batch, and each run's chain held to the chain
the deterministic pair has alone. Then the paper's study (30 runs x 20M agent steps) at the
best rate: its wall-clock on this GPU, and on a node of 8 such GPUs (Slurm: one job per
GPU, K runs each).

With --cleanrl, CleanRL's dqn_atari.py runs once on the same GPU, timed after annealing as
bench/cleanrl_compare.py times it; without, its published rate is printed, named as such.

    .venv/bin/python bench/gpu_throughput.py [--sharing 1 4 8 16] [--steps 6000]
        [--device cuda] [--out DIR] [--cleanrl DIR --cleanrl-python PY]
        [--mps] [--blocking-sync] [--pin]

--mps, --blocking-sync and --pin are launch settings of the runs sharing the GPU, as in
`reprodqn gpu-check` (study/gpu_launch.py), recorded with the rates under "launch".

`--device cpu` rehearses it (the fast path is then the device replay alone).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import common

from reprodqn.cli.forensics import add_launch_settings
from reprodqn.forensics import gpu_check
from reprodqn.study import gpu_launch, gpu_sharing

STUDY_STEPS = 30 * 20_000_000  # the paper: 6 groups x 5 runs x 20M agent steps
CLEANRL_PUBLISHED = 455  # agent steps/s: 10M steps in about 365 min, from CleanRL's docs' plots


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sharing", type=int, nargs="+", default=[1, 4, 8, 16])
    parser.add_argument("--steps", type=int, default=6000, help="agent steps per run")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--out", type=Path, default=None, help="runs and the record here")
    parser.add_argument("--cleanrl", type=Path, default=None, metavar="DIR")
    parser.add_argument("--cleanrl-python", default=sys.executable, metavar="PY")
    add_launch_settings(parser)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="gpu-throughput-"))
    out.mkdir(parents=True, exist_ok=True)
    settings = gpu_sharing.in_standard_numerics(
        [*gpu_check.scale(args.steps), f"compute.device={args.device}"]
    )
    launch = gpu_launch.Settings(args.mps, args.blocking_sync, args.pin)
    with gpu_launch.sharing(launch, args.device, out / "mps-control.log") as launcher:
        swept = gpu_sharing.sweep(
            launcher, common.PARAMS, settings, args.device, args.sharing, out, out / "train.log"
        )
    first = swept["chains"]["standard"].get(str(args.sharing[0]))
    if not first:  # nothing to hold the chains to: say why, with the runs' last lines
        print("\n".join(gpu_sharing.table(swept["rates"])))
        reason = swept["rates"]["standard"].get("failed", "no chain recorded")
        print(f"gpu_throughput: the standard path failed: {reason}", file=sys.stderr)
        return 2
    alone = first[0]
    parted = gpu_check.parted_from(alone, swept["chains"])
    # the chain itself (its last line), to hold another session's runs to
    record = {"settings": settings, "rates": swept["rates"], "parted": parted, "chain": alone[-1]}
    record["launch"] = launcher.record()
    print("\n".join(gpu_sharing.table(swept["rates"])))
    print(gpu_launch.describe(record["launch"]))
    print("every run's chain: " + ("the one it has alone" if not parted else f"PARTED {parted}"))
    path, k, rate = gpu_sharing.best_sharing(swept["rates"])
    print(projection(path, k, rate, args.device))
    standard_one = swept["rates"]["standard"].get("1", {}).get("annealed")
    fast_one = swept["rates"]["fast"].get("1", {}).get("annealed")
    if standard_one and fast_one:
        print(f"one run alone, fast / standard path: {fast_one / standard_one:.2f}x")
    record["cleanrl"] = cleanrl_rate(args)
    (out / "gpu-throughput.json").write_text(json.dumps(record, indent=2) + "\n")
    print(f"record: {out / 'gpu-throughput.json'}", file=sys.stderr)
    return 1 if parted else 0


def projection(path: str, k: int, rate: float, device: str) -> str:
    one_gpu = STUDY_STEPS / rate / 3600
    return (
        f"best: {rate:.0f} agent steps/s in all, {k} runs on the {path} path. The paper's "
        f"study ({STUDY_STEPS / 1e6:.0f}M agent steps): {one_gpu:.1f} h ({one_gpu / 24:.2f} "
        f"days) on this {device}; {one_gpu / 8:.1f} h on 8 of them (one Slurm job per GPU, {k} "
        f"runs each, {8 * k} cores for their games)"
    )


def cleanrl_rate(args) -> dict:
    if args.cleanrl is None:
        print(
            f"CleanRL dqn_atari.py: not run here; its published rate is about "
            f"{CLEANRL_PUBLISHED} agent steps/s on one GPU (10M steps in about 365 minutes, "
            "read from its docs' time plots)"
        )
        return {"published": CLEANRL_PUBLISHED}
    from cleanrl_compare import cleanrl

    rate = cleanrl(
        args.cleanrl.resolve(), args.cleanrl_python, 1, args.steps, 5000, cuda=args.device == "cuda"
    )
    print(f"CleanRL dqn_atari.py on this {args.device}, after annealing: {rate:.1f} agent steps/s")
    return {"measured": rate}


if __name__ == "__main__":
    common.run_main(main)
