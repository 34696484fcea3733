"""What determinism costs on this machine: the same work with and without each setting the
project applies.

On the CPU the settings are: the thread pin (compute.threads, 1, against torch's default of
one thread per core), the instruction-set floor (compute.cpu_isa, portable, against
AVX-512 where the machine has it, and against the machine's widest), every layer routed
to oneDNN (dqn.network, against torch's own dispatch, which sends the fully connected
layers and batch-1 convolutions to MKL: at the portable floor on MKL's vendor-independent
COMPATIBLE branch, and at the avx2 floor on its AVX2 branch, Intel-only bits, the fastest
MKL gives), and torch's deterministic-algorithms flag; in evaluation, Q-values in fixed
chunks of 16 states (zero-padded) against one forward over whatever episodes are still
live. On CUDA, when present, also cuDNN deterministic without benchmarking and the cuBLAS
workspace (the flag, cuDNN and CUBLAS_WORKSPACE_CONFIG on or off together).

Training is measured as Nature-network updates at batch 32 plus one batch-1 acting forward
per agent step (the loop's two torch costs), each configuration in its own process (the
floor is read when torch loads), the processes alternating round by round so a drift in
machine speed hits all alike; medians are printed with the ratio to "every setting off".
Evaluation chunking is measured in this process on a live-episode profile of 100 episodes
ending one by one.

    .venv/bin/python bench/determinism_overhead.py [--rounds 5] [--seconds 6]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# name: (floor, threads or 0 for torch's default, deterministic flag, layers in oneDNN)
CONFIGS = {
    "every setting on (as the study runs)": ("portable", 1, True, True),
    "torch dispatch, MKL COMPATIBLE": ("portable", 1, True, False),
    "torch dispatch, MKL AVX2 (Intel-only)": ("avx2", 1, True, False),
    "avx512 floor": ("avx512", 1, True, True),
    "no ISA floor (native)": ("native", 1, True, True),
    "no thread pin (torch default)": ("portable", 0, True, True),
    "deterministic-algorithms flag off": ("portable", 1, False, True),
    "every setting off": ("native", 0, False, False),
}


@contextlib.contextmanager
def torch_dispatch():
    """The network's layers back on torch's own dispatch (the routing the study replaces)."""
    from torch import nn

    from reprodqn.dqn import network

    routed = network.OneDnnConv2d.forward, network.OneDnnLinear.forward
    network.OneDnnConv2d.forward = nn.Conv2d.forward
    network.OneDnnLinear.forward = nn.Linear.forward
    try:
        yield
    finally:
        network.OneDnnConv2d.forward, network.OneDnnLinear.forward = routed


def worker(floor: str, threads: int, deterministic: bool, onednn: bool, seconds: float) -> None:
    """Agent steps per second of the loop's torch work under one configuration."""
    from reprodqn.determinism import isa

    isa.apply(floor)
    with contextlib.nullcontext() if onednn else torch_dispatch():
        timed(threads, deterministic, seconds)


def timed(threads: int, deterministic: bool, seconds: float) -> None:
    """The timing itself: an update and update_every greedy actions per cycle."""
    import numpy as np
    import torch

    from reprodqn.config.params import load_params
    from reprodqn.determinism import numerics
    from reprodqn.dqn.agent import make_agent

    params = load_params(ROOT / "params.yaml")
    default_threads = torch.get_num_threads()  # torch's own: one per physical core
    device, applied = numerics.configure(
        "cuda" if torch.cuda.is_available() else "cpu", threads or default_threads, deterministic
    )
    agent = make_agent(
        params.agent,
        n_actions=4,
        history_length=4,
        screen_size=84,
        device=device,
        init_generator=torch.Generator().manual_seed(0),
        learning_starts=0,
        reward_clip=1.0,
    )
    from batches import random_batches

    batch = random_batches(1, params, np.random.default_rng(0))[0]
    state = batch["states"][0]
    every = params.agent.update_every

    def cycle():  # one update and update_every greedy steps: update_every agent steps
        agent.update(batch)
        for _ in range(every):
            agent.greedy_action(state)

    for _ in range(3):
        cycle()
    cycles, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        cycle()
        cycles += 1
    if device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    print(
        json.dumps(
            {
                "steps_per_second": cycles * every / elapsed,
                "capability": torch.backends.cpu.get_cpu_capability(),
                "threads": torch.get_num_threads(),
                "device": applied["device"],
            }
        )
    )


def chunking(rounds: int) -> tuple[float, float]:
    """Q-values per second with fixed chunks of 16 and with one variable-size forward, over
    100 live episodes ending one by one (the evaluator's profile)."""
    from reprodqn.determinism import isa

    isa.apply("portable")
    import numpy as np
    import torch

    from reprodqn.determinism import numerics
    from reprodqn.dqn.network import build_q_network, q_values

    numerics.configure("cpu", 1, True)
    net = build_q_network("nature", 4, 4, 84, torch.Generator().manual_seed(0)).eval()
    states = np.random.default_rng(0).integers(0, 256, (100, 4, 84, 84), dtype=np.uint8)
    live = [n for n in range(100, 0, -1) for _ in range(3)]
    fixed, variable = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        for n in live:
            q_values(net, states[:n], 16)
        fixed.append(sum(live) / (time.perf_counter() - start))
        start = time.perf_counter()
        with torch.inference_mode():
            for n in live:
                net(torch.from_numpy(states[:n])).numpy()
        variable.append(sum(live) / (time.perf_counter() - start))
    return statistics.median(fixed), statistics.median(variable)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=6.0, help="per configuration per round")
    parser.add_argument(
        "--worker",
        nargs=4,
        help=argparse.SUPPRESS,
        metavar=("FLOOR", "THREADS", "DETERMINISTIC", "ONEDNN"),
    )
    args = parser.parse_args()
    if args.worker:
        floor, threads, deterministic, onednn = args.worker
        worker(floor, int(threads), deterministic == "1", onednn == "1", args.seconds)
        return

    from reprodqn.determinism import isa

    configs = {
        name: config
        for name, config in CONFIGS.items()
        if set(isa.REQUIRED_FLAGS[config[0]]) <= isa.machine_flags()
    }
    rates: dict[str, list[float]] = {name: [] for name in configs}
    seen: dict[str, dict] = {}
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    for round_ in range(args.rounds):
        for name, (floor, threads, deterministic, onednn) in configs.items():
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--seconds",
                    str(args.seconds),
                    "--worker",
                    floor,
                    str(threads),
                    "1" if deterministic else "0",
                    "1" if onednn else "0",
                ],
                capture_output=True,
                text=True,
                check=True,
                env=env,
            )
            result = json.loads(out.stdout.strip().splitlines()[-1])
            rates[name].append(result["steps_per_second"])
            seen[name] = result
        print(f"round {round_ + 1}/{args.rounds} done", file=sys.stderr, flush=True)
    off = statistics.median(rates["every setting off"])
    mkl_avx2 = statistics.median(rates["torch dispatch, MKL AVX2 (Intel-only)"])
    print(
        "training (a Nature update at batch 32 + a batch-1 acting forward per agent step), "
        f"{args.rounds} rounds x {args.seconds:.0f} s, {os.cpu_count()} cores"
    )
    print(
        f"{'configuration':40} {'steps/s':>8} {'vs off':>7} {'vs MKL AVX2':>11}  kernels, "
        "threads, device"
    )
    for name in configs:
        median = statistics.median(rates[name])
        info = seen[name]
        print(
            f"{name:40} {median:8.1f} {median / off:7.3f} {median / mkl_avx2:11.3f}  "
            f"{info['capability']}, {info['threads']}, {info['device']}"
        )
    fixed, variable = chunking(args.rounds)
    print(
        f"\nevaluation Q-values/s, 100 episodes ending one by one: fixed chunks of 16 "
        f"{fixed:.0f}, one variable forward {variable:.0f}: ratio {fixed / variable:.3f}"
    )


if __name__ == "__main__":
    main()
