"""`reprodqn gpu-check` (`make gpu-check`): what a user with a GPU runs first. Two runs of
the deterministic group must give one hash chain; the gpu group's two runs (the same seeds,
nondeterministic kernels allowed) are expected to part, and where is said, by checkpoint and
then op by op (two traces of the group's first updates, compared by trace-diff); the audit
runs on CUDA; the study's throughput is measured with 1, 2 and 4 runs sharing the GPU, each
of which must give the deterministic pair's chain (sharing is a launch setting); a short
report names the GPU, driver, CUDA and cuDNN. Every run is a `reprodqn train` process of its
own, at a short scale of the study's real network and batch. With no GPU it says so in one
line and exits 3; `--device cpu` rehearses the same checks on the CPU, where the gpu group
emulates its kernels (compute.cpu_reduction_order)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from reprodqn.core import workspace
from reprodqn.core.atomic import write_json, write_text
from reprodqn.core.errors import InputError

NO_GPU_EXIT = 3
NEVER = {"weights": None, "losses": None}  # first_parting of two equal chains
TRACE_UPDATES = 20  # enough for the first parting op: on a GPU and in the emulation, update 1


class NoGpu(Exception):
    """No CUDA device where one was asked for: one line, exit NO_GPU_EXIT."""


def scale(steps: int) -> list[str]:
    """The study's network and batch on a short schedule: learning from a sixth of the run,
    three checkpoints, the target copied three times."""
    start = max(steps // 6, 300)
    return [
        f"train.steps={steps}",
        f"train.checkpoint_every={steps // 3}",
        f"train.resume_every={steps}",
        f"train.log_every={max(steps // 12, 1)}",
        f"replay.learning_starts={start}",
        f"replay.capacity={steps + 100}",
        f"agent.target_sync_every={max(steps // 6, 1)}",
        f"agent.epsilon_decay_steps={max(steps // 3, 1)}",
    ]


def command(name: str, params: Path, overrides: list[str], runs_dir: Path) -> list[str]:
    """A `reprodqn NAME` process over these params and overrides, runs kept in runs_dir."""
    return [
        sys.executable,
        "-m",
        "reprodqn.cli",
        name,
        "--params",
        str(params),
        "--runs-dir",
        str(runs_dir),
        *(a for item in overrides for a in ("--set", item)),
    ]


def launch(
    runs: list[tuple[str, int]], params: Path, overrides: list[str], runs_dir: Path, log: Path
) -> float:
    """Train these runs at once, each in its own process; seconds until the last ends."""
    argv = command("train", params, overrides, runs_dir)
    start = time.perf_counter()
    with open(log, "a") as out:
        procs = [
            subprocess.Popen([*argv, "--group", group, "--run", str(run)], stdout=out, stderr=out)
            for group, run in runs
        ]
        codes = [p.wait() for p in procs]
    if any(codes):
        raise InputError(f"gpu-check: a training run failed (exit {codes}); see {log}")
    return time.perf_counter() - start


def op_parting(params: Path, overrides: list[str], out: Path, log: Path) -> dict:
    """Where the gpu group's two runs part, op by op: its first TRACE_UPDATES updates traced
    twice, each in a process of its own, as two runs would be, then compared."""
    from reprodqn.forensics import trace_diff

    paths = []
    for name in ("a", "b"):
        paths.append(out / f"gpu-trace-{name}.jsonl")
        argv = command("trace", params, overrides, out / f"trace-runs-{name}")
        argv += ["--group", "gpu", "--run", "0", "--from-resume", "0"]
        argv += ["--updates", str(TRACE_UPDATES), "--out", str(paths[-1])]
        with open(log, "a") as sink:
            if subprocess.run(argv, stdout=sink, stderr=sink).returncode:
                raise InputError(f"gpu-check: tracing the gpu group failed; see {log}")
    compared = trace_diff.compare(*paths)
    return {"updates": TRACE_UPDATES, "first": compared["first"]}


def first_parting(a: list[dict], b: list[dict]) -> dict:
    """The first checkpoint step at which two chains' weights, and their loss chains, differ."""
    from reprodqn.report.analysis import CHAINS, RunResult, first_divergence

    first, second = RunResult("", 0, a), RunResult("", 1, b)
    return {name: first_divergence(first, second, key) for name, key in CHAINS.items()}


def check(
    params: Path, overrides: list[str], device: str, steps: int, sharing: list[int], out: Path
) -> dict:
    import torch

    from reprodqn.config.params import load_params, resolve_run
    from reprodqn.determinism import provenance
    from reprodqn.forensics import audit

    if device == "cuda" and not torch.cuda.is_available():
        raise NoGpu(
            f"gpu-check: no CUDA device visible to torch {torch.__version__} (CUDA "
            f"build: {torch.version.cuda or 'none'}); run it on a machine with an "
            "NVIDIA GPU and its driver, or --device cpu to rehearse on the CPU"
        )
    out.mkdir(parents=True, exist_ok=True)
    log = out / "train.log"
    settings = [*scale(steps), f"compute.device={device}", *overrides]
    chains = {}
    for group in ("deterministic", "gpu"):
        runs_dir = out / "runs"
        launch([(group, 0), (group, 1)], params, settings, runs_dir, log)
        chains[group] = [
            workspace.read_hashes(workspace.run_dir(runs_dir, group, run)) for run in (0, 1)
        ]
    ops = op_parting(params, settings, out, log)
    study = load_params(params, settings)
    audited = audit.audit(
        resolve_run(study, "deterministic", 0),
        study.evaluation.inference_chunk,
        out / workspace.AUDIT,
        out / "audit-scratch",
    )
    throughput, sharing_parted = {}, {}
    for k in sharing:
        runs_dir = out / f"sharing-{k}"
        seconds = launch([("deterministic", i) for i in range(k)], params, settings, runs_dir, log)
        throughput[k] = k * steps / seconds
        for i in range(k):  # the same seeds as the pair: the same chain, however many share
            chain = workspace.read_hashes(workspace.run_dir(runs_dir, "deterministic", i))
            found = first_parting(chains["deterministic"][0], chain)
            if found != NEVER:
                sharing_parted[f"{k} sharing, run {i}"] = found
    result = {
        "device": device,
        "gpu": provenance.gpu_info(),
        "torch": torch.__version__,
        "steps": steps,
        "settings": settings,
        "deterministic": first_parting(*chains["deterministic"]),
        "gpu_group": first_parting(*chains["gpu"]),
        "gpu_group_ops": ops,
        "audit": audit.summary(audited),
        "throughput_steps_per_second": throughput,
        "sharing_parted": sharing_parted,
    }
    result["replicable"] = result["deterministic"] == NEVER and not sharing_parted
    write_json(out / "gpu-check.json", result)
    write_text(out / "gpu-check.md", report(result))
    return result


def _machine(result: dict) -> str:
    gpu = result["gpu"]
    if not gpu.get("present"):
        return f"no GPU: rehearsed on the CPU, torch {result['torch']}"
    names = ", ".join(f"{d['name']} (compute capability {d['capability']})" for d in gpu["devices"])
    return (
        f"{names}; driver {gpu.get('driver') or 'unknown'}, CUDA "
        f"{gpu.get('cuda')}, cuDNN {gpu.get('cudnn')}, torch {result['torch']}"
    )


def _parted(found: dict, steps: int) -> str:
    if found == NEVER:
        return f"never part in {steps:,} steps"
    return (
        f"part: weights at checkpoint step {found['weights']}, loss chain at "
        f"checkpoint step {found['losses']}"
    )


def _throughput_lines(result: dict) -> list[str]:
    rates = result["throughput_steps_per_second"]
    lines = ["| runs sharing the device | agent steps/s in all | per run |", "|---|---|---|"]
    lines += [f"| {k} | {rate:.1f} | {rate / int(k):.1f} |" for k, rate in rates.items()]
    if result["device"] == "cuda" and not result["sharing_parted"]:
        best = max(rates, key=lambda k: rates[k])
        lines += [
            "",
            f"Most agent steps per second with {best} runs sharing the GPU: for a study, "
            f"`REPRODQN_WORKERS` = {best} x the GPUs (the default is one per GPU). It is a "
            "launch setting: each run's chain is the same however many share."
            + (
                f" {best} is the most this check tried: `--sharing {best} {2 * int(best)}` "
                "tries more."
                if int(best) == max(int(k) for k in rates)
                else ""
            ),
        ]
    return lines


def report(result: dict) -> str:
    from reprodqn.forensics import trace_diff

    steps = result["steps"]
    pair = result["deterministic"]
    shared = result["sharing_parted"]
    lines = [
        "# gpu-check",
        "",
        f"- Device: {result['device']}. {_machine(result)}.",
        "- Two deterministic runs, same seeds, each in its own process: "
        + ("**one hash chain**" if pair == NEVER else f"**they {_parted(pair, steps)}**"),
        "- The same runs sharing the device, "
        + ", ".join(str(k) for k in result["throughput_steps_per_second"])
        + " at a time: "
        + (
            "**the same chain**"
            if not shared
            else "**they part**: "
            + "; ".join(f"{name} {_parted(found, steps)}" for name, found in shared.items())
        ),
        f"- The gpu group's two runs, same seeds: they {_parted(result['gpu_group'], steps)}",
        f"- Op by op, over their first {result['gpu_group_ops']['updates']} updates: "
        + trace_diff.first_line(result["gpu_group_ops"]["first"]),
        f"- Audit on {result['device']}: {result['audit']}",
        "",
        *_throughput_lines(result),
        "",
        f"Each run: {steps:,} agent steps at `{' '.join(result['settings'])}` "
        "(start-up and replay filling included).",
        "",
    ]
    return "\n".join(lines)


def main(
    params: Path, overrides: list[str], device: str, steps: int, sharing: list[int], out: Path
) -> int:
    try:
        result = check(params, overrides, device, steps, sharing, out)
    except NoGpu as error:
        print(error, file=sys.stderr)
        return NO_GPU_EXIT
    print(report(result))
    print(f"gpu-check: -> {out / 'gpu-check.md'}", file=sys.stderr)
    return 0 if result["replicable"] else 1
