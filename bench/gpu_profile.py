"""Where one agent step's time goes on the device, after annealing, on the standard path
and the fast one: torch.profiler over a block of real steps of the training loop, with the
loop's parts labelled (the emulator step, acting, the update and target copy), then the
ops and kernels that take the most host and device time.

    .venv/bin/python bench/gpu_profile.py [--device cuda] [--steps 400] [--rows 12]

On a GPU the host's share is what the fast path removes: the update's ~150 kernel launches
become one graph launch, the minibatch's six copies one. `--device cpu` runs it on a CPU
(both paths' host code; graphs need CUDA).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import common
import torch
from torch.profiler import ProfilerActivity, profile, record_function

from reprodqn.config.params import resolve_run
from reprodqn.determinism import numerics
from reprodqn.study import gpu_sharing
from reprodqn.training.loop import Run

PARTS = {"env.step": ("env", "step"), "act": ("agent", "act"), "learn": (None, "learn")}


def labelled(run: Run) -> None:
    """Each part of the step runs inside a record_function of its name."""
    for label, (owner, name) in PARTS.items():
        target = run if owner is None else getattr(run, owner)
        plain = getattr(target, name)

        def wrapped(*args, _plain=plain, _label=label, **kwargs):
            with record_function(_label):
                return _plain(*args, **kwargs)

        setattr(target, name, wrapped)


def profile_path(path: str, extra: list[str], args) -> None:
    overrides = [
        gpu_sharing.STANDARD_NUMERICS,  # the fast path is the standard numerics'
        "replay.learning_starts=1000",
        "replay.capacity=20000",
        "agent.epsilon_decay_steps=1",
        f"compute.device={args.device}",
        *extra,
    ]
    config = resolve_run(common.load(overrides), "deterministic", 0)
    device, _ = numerics.configure(
        config.compute.device, config.compute.threads, config.compute.deterministic_gpu
    )
    run = Run(config, Path(tempfile.mkdtemp()), device)
    while run.step < 1000 + 200:  # replay filled, annealed, graphs captured, kernels warm
        run.advance()
    labelled(run)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    start = time.perf_counter()
    with profile(activities=activities) as prof:
        for _ in range(args.steps):
            run.advance()
        run.flush_losses()
    seconds = time.perf_counter() - start
    print(f"\n## {path} path ({' '.join(extra) or 'defaults'}), {device}")
    print(
        f"{args.steps} agent steps in {seconds:.2f} s under the profiler: "
        f"{1000 * seconds / args.steps:.3f} ms a step ({args.steps / seconds:.0f} steps/s)"
    )
    averages = prof.key_averages()
    for label in PARTS:
        found = [e for e in averages if e.key == label]
        if found:
            share = found[0].cpu_time_total / 1e6 / seconds
            print(
                f"  {label:9} {found[0].cpu_time_total / 1e3 / args.steps:8.3f} ms a step "
                f"on the host ({100 * share:.0f}%), {found[0].count} calls"
            )
    sort = "cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    print(averages.table(sort_by=sort, row_limit=args.rows, max_name_column_width=48))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--rows", type=int, default=12)
    args = parser.parse_args()
    for path, extra in gpu_sharing.paths(args.device).items():
        profile_path(path, extra, args)
    if torch.cuda.is_available():
        torch.cuda.synchronize()


if __name__ == "__main__":
    common.run_main(main)
