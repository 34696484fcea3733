"""What the universal numerics mode costs: the training loop (the Nature network, batch 32,
an update every 4 agent steps, epsilon annealed, the emulator included) in the standard
mode and in the universal mode, each a `reprodqn train` process at 1 thread, alternating
round by round so a drift in machine speed hits both alike; then the batched evaluation
forward (16 states, the protocol's chunk) and the greedy action's (1 state) in this
process. Prints each mode's agent steps per second (the median after annealing, from
process.jsonl) and, last, `ratio X.XX`: universal / standard. `--contended` runs it all
again beside one busy process per core (started and stopped here), as on a machine shared
with other jobs. `--device cuda` runs both on a GPU (the universal mode's Triton kernels
against cuDNN and cuBLAS), the evaluation forward synchronised. Both modes take the authors'
resize (env.resize linear: OpenCV's in the standard mode, reprodqn's integer one in the
universal mode, as a run gets it). `--preset authors-2018` benches the laptop study's
agent (the NIPS network, an update every 2 steps, the float64 target) instead of
params.yaml's. `--threads 2` runs each training process at compute.threads 2 (the
forwards stay at 1 thread).

    .venv/bin/python bench/universal_numerics.py [--rounds 2] [--steps 2400] [--contended]
        [--preset authors-2018] [--threads 2]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODES = {"standard": ["compute.numerics=standard"], "universal": ["compute.numerics=universal"]}
PARAMS = ROOT / "params.yaml"


def preset_params(preset: str, folder: str) -> Path:
    """params.yaml with the preset applied (`reprodqn params`), in `folder`."""
    out = Path(folder) / "params.yaml"
    argv = [sys.executable, "-m", "reprodqn.cli", "params", "--params", str(PARAMS)]
    argv += ["--preset", preset, "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"}
    subprocess.run(argv, check=True, capture_output=True, env=env, cwd=ROOT)
    return out


def loop_rate(
    mode: str, steps: int, device: str = "cpu", params: Path = PARAMS, threads: int = 1
) -> float:
    """Median agent steps/s of one run's log records after annealing."""
    overrides = [
        f"compute.threads={threads}",
        f"compute.device={device}",
        "env.resize=linear",
        "replay.learning_starts=400",
        "replay.capacity=10000",
        "agent.epsilon_decay_steps=400",
        f"train.steps={steps}",
        "train.log_every=200",
        f"train.checkpoint_every={steps}",
        f"train.resume_every={steps}",
        *MODES[mode],
    ]
    with tempfile.TemporaryDirectory() as runs:
        argv = [
            sys.executable,
            "-m",
            "reprodqn.cli",
            "train",
            "--group",
            "deterministic",
            "--run",
            "0",
            "--params",
            str(params),
            "--runs-dir",
            runs,
        ]
        for item in overrides:
            argv += ["--set", item]
        env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}", "PYTHONHASHSEED": "0"}
        subprocess.run(argv, check=True, capture_output=True, env=env, cwd=runs)
        records = [
            json.loads(line)
            for line in (Path(runs) / "deterministic" / "0" / "process.jsonl").open()
        ]
    annealed = [r["steps_per_second"] for r in records if r["step"] > 800]
    return statistics.median(annealed)


def forward_rate(numerics: str, device: str = "cpu", batch: int = 16, rounds: int = 20) -> float:
    """Forwards of `batch` states per second, no gradient (as evaluation and acting)."""
    import numpy as np
    import torch

    from reprodqn.dqn.network import build_q_network

    torch.set_num_threads(1)
    net = build_q_network("nature", 4, 4, 84, torch.Generator().manual_seed(1), numerics=numerics)
    net = net.to(device)
    pixels = np.random.default_rng(0).integers(0, 256, (batch, 4, 84, 84), np.uint8)
    states = torch.from_numpy(pixels).to(device)
    with torch.inference_mode():
        net(states)
        if device == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        for _ in range(rounds):
            net(states)
        if device == "cuda":
            torch.cuda.synchronize()
    return rounds / (time.perf_counter() - started)


def _spin() -> None:
    while True:
        pass


@contextlib.contextmanager
def busy_cores(contended: bool):
    """One process spinning on each core while the block runs (nothing when not contended)."""
    spinners = [
        multiprocessing.Process(target=_spin, daemon=True) for _ in range(os.cpu_count() or 1)
    ]
    if contended:
        for spinner in spinners:
            spinner.start()
    try:
        yield
    finally:
        for spinner in spinners:
            if spinner.is_alive():
                spinner.terminate()
                spinner.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=2400)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--contended", action="store_true", help="beside a busy process per core")
    parser.add_argument("--preset", help="a preset over params.yaml (e.g. authors-2018)")
    parser.add_argument("--threads", type=int, default=1, help="compute.threads of each run")
    args = parser.parse_args()
    folder = tempfile.mkdtemp()
    params = preset_params(args.preset, folder) if args.preset else PARAMS
    state = f"{os.cpu_count()} busy processes beside it" if args.contended else "quiet"
    rates: dict[str, list[float]] = {mode: [] for mode in MODES}
    with busy_cores(args.contended):
        for round_ in range(args.rounds):
            for mode in MODES if round_ % 2 == 0 else reversed(MODES):
                rates[mode].append(loop_rate(mode, args.steps, args.device, params, args.threads))
                print(f"round {round_ + 1}: {mode} {rates[mode][-1]:.1f} agent steps/s", flush=True)
        from reprodqn.universal import cpu

        cpu.set_threads(1)
        for batch, name in ((16, "evaluation forward (16 states)"), (1, "greedy action (1 state)")):
            forward = {mode: forward_rate(mode, args.device, batch) for mode in MODES}
            print(
                f"{name}: standard {forward['standard']:.1f}/s, universal "
                f"{forward['universal']:.1f}/s, ratio "
                f"{forward['universal'] / forward['standard']:.2f}"
            )
    standard, universal = (statistics.median(rates[m]) for m in MODES)
    print(
        f"training loop after annealing: standard {standard:.1f}, universal {universal:.1f} "
        f"agent steps/s ({args.threads} thread(s) per run, {args.device}, {state}, "
        f"{args.preset or 'params.yaml'})"
    )
    print(f"ratio {universal / standard:.2f}")


if __name__ == "__main__":
    main()
