"""`reprodqn gpu-check` (`make gpu-check`): what a user with a GPU runs first. Two runs of
the deterministic group must give one hash chain; two more on the fast path
(compute.replay_on_device and compute.cuda_graphs) must give one chain, the same one; the
gpu group's two runs (the same seeds, nondeterministic kernels allowed) are expected to
part, and where is said, by checkpoint and then op by op (two traces of the group's first
updates, compared by trace-diff); the audit runs on CUDA; throughput is measured with K
runs sharing the GPU on both paths (1, 4, 8 and 16 by default: gpu_sharing), each of which
must give the deterministic pair's chain (sharing is a launch setting); a short report names
the GPU, driver, CUDA and cuDNN. Every run is a `reprodqn train` process of its own, at a
short scale of the study's real network and batch. With no GPU it says so in one line and
exits 3; `--device cpu` rehearses the same checks on the CPU, where the gpu group emulates
its kernels (compute.cpu_reduction_order) and the fast path is the device replay alone.
Each check's result goes into gpu-check.partial.json as it comes, with its seconds, so a
check cut off by a time limit leaves what it had measured."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from reprodqn.core import progress, workspace
from reprodqn.core.atomic import write_json, write_text
from reprodqn.core.errors import InputError
from reprodqn.study import gpu_launch, gpu_sharing
from reprodqn.study.gpu_launch import AS_BEFORE, Settings, command, launch
from reprodqn.study.gpu_launch import sharing as sharing_launcher

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


def parted_from(alone: list[dict], chains: dict[str, dict[str, list]]) -> dict[str, dict]:
    """Each shared run whose chain is not the one its seeds give alone, and where it parts."""
    parted = {}
    for path, by_k in chains.items():
        for k, runs in by_k.items():
            for i, chain in enumerate(runs):
                found = first_parting(alone, chain)
                if found != NEVER:
                    parted[f"{path} path, {k} sharing, run {i}"] = found
    return parted


def fast_path(
    params: Path, settings: list[str], device: str, standard: list[dict], out: Path, log: Path
) -> dict:
    """The deterministic pair on the fast path: one chain, and the standard path's. Where
    it is not the standard path's, one run with the device replay alone says whether the
    graphs or the replay made the difference."""
    extra = gpu_sharing.FAST[device]
    runs_dir = out / "fast-runs"
    try:
        launch(
            [("deterministic", 0), ("deterministic", 1)], params, [*settings, *extra], runs_dir, log
        )
    except InputError as error:  # said in the report; the standard path's checks go on
        return {"settings": extra, "failed": gpu_sharing.failure(error, log)}
    pair = [workspace.read_hashes(workspace.run_dir(runs_dir, "deterministic", i)) for i in (0, 1)]
    found = {
        "settings": extra,
        "pair": first_parting(*pair),
        "against_standard": first_parting(standard, pair[0]),
    }
    if found["against_standard"] != NEVER and len(extra) > 1:
        replay_dir = out / "device-replay-runs"
        try:
            launch([("deterministic", 0)], params, [*settings, extra[0]], replay_dir, log)
        except InputError as error:
            found["device_replay_failed"] = gpu_sharing.failure(error, log)
            return found
        alone = workspace.read_hashes(workspace.run_dir(replay_dir, "deterministic", 0))
        found["device_replay_against_standard"] = first_parting(standard, alone)
    return found


def require_device(device: str) -> None:
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        raise NoGpu(
            f"gpu-check: no CUDA device visible to torch {torch.__version__} (CUDA "
            f"build: {torch.version.cuda or 'none'}); run it on a machine with an "
            "NVIDIA GPU and its driver, or --device cpu to rehearse on the CPU"
        )


def check(
    params: Path,
    overrides: list[str],
    device: str,
    steps: int,
    sharing: list[int],
    out: Path,
    launch_settings: Settings = AS_BEFORE,
) -> dict:
    import torch

    from reprodqn.config.params import load_params, resolve_run
    from reprodqn.determinism import provenance
    from reprodqn.forensics import audit

    require_device(device)
    launch_settings.refuse(device)  # before the first run, not at the sweep
    out.mkdir(parents=True, exist_ok=True)
    log = out / "train.log"
    settings = gpu_sharing.in_standard_numerics(
        [*scale(steps), f"compute.device={device}", *overrides]
    )
    result: dict = {
        "device": device,
        "gpu": provenance.gpu_info(),
        "torch": torch.__version__,
        "steps": steps,
        "settings": settings,
        "study_holds": gpu_sharing.study_holds(params, overrides),
    }
    stage = progress.StagedRecord(out / "gpu-check.partial.json", result, "gpu-check")
    chains = {}
    for group, key in (("deterministic", "deterministic"), ("gpu", "gpu_group")):
        runs_dir = out / "runs"
        launch([(group, 0), (group, 1)], params, settings, runs_dir, log)
        chains[group] = [
            workspace.read_hashes(workspace.run_dir(runs_dir, group, run)) for run in (0, 1)
        ]
        stage.done(key, first_parting(*chains[group]))
    stage.done("gpu_group_ops", op_parting(params, settings, out, log))
    study = load_params(params, settings)
    audited = audit.audit(
        resolve_run(study, "deterministic", 0),
        study.evaluation.inference_chunk,
        out / workspace.AUDIT,
        out / "audit-scratch",
    )
    stage.done("audit", audit.summary(audited))
    alone = chains["deterministic"][0]
    stage.done("fast_path", fast_path(params, settings, device, alone, out, log))
    shared(params, settings, device, sharing, out, launch_settings, alone, stage)
    result["replicable"] = replicable(result)
    write_json(out / "gpu-check.json", result)
    write_text(out / "gpu-check.md", report(result))
    return result


def shared(
    params: Path,
    settings: list[str],
    device: str,
    sharing: list[int],
    out: Path,
    launch_settings: Settings,
    alone: list[dict],
    stage: progress.StagedRecord,
) -> None:
    """The sweep of runs sharing the device under its launch settings, each held to `alone`."""
    with sharing_launcher(launch_settings, device, out / "mps-control.log") as launcher:
        swept = gpu_sharing.sweep(
            launcher,
            params,
            settings,
            device,
            sharing,
            out,
            out / "train.log",
            lambda swept: stage.note(
                sharing=swept["rates"], sharing_parted=parted_from(alone, swept["chains"])
            ),
        )
    stage.done("sharing_launch", launcher.record())
    stage.done("sharing", swept["rates"])
    stage.done("sharing_parted", parted_from(alone, swept["chains"]))


def replicable(result: dict) -> bool:
    """One chain everywhere: the pair, the fast path, every shared run; nothing failed."""
    fast = result["fast_path"]
    return (
        result["deterministic"] == NEVER
        and "failed" not in fast
        and fast["pair"] == NEVER
        and fast["against_standard"] == NEVER
        and not any("failed" in by_k for by_k in result["sharing"].values())
        and not result["sharing_parted"]
    )


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
    rates = result["sharing"]
    lines = gpu_sharing.table(rates)
    if result["device"] == "cuda" and result["replicable"]:
        path, k, rate = gpu_sharing.best_sharing(rates)
        tried = max(int(k) for by_k in rates.values() for k in gpu_sharing.measured(by_k))
        lines += [
            "",
            f"Most agent steps per second: {rate:.0f} in all, with {k} runs sharing the GPU "
            f"on the {path} path. " + _advice(path, k, tried, result.get("study_holds", {})),
        ]
    return lines


def _advice(path: str, k: int, tried: int, holds: dict) -> str:
    """REPRODQN_RUNS_PER_GPU for a study: the best K, as far as the study's own runs fit."""
    fits = holds.get(path, k)
    if fits < 1:
        return (
            f"A study's runs, each with a replay of {holds['capacity']:,} transitions, do not "
            f"fit in this machine's memory on the {path} path: a smaller replay.capacity, or "
            "the other path."
        )
    advised = min(k, fits)
    flags = " ".join("--set " + s for s in gpu_sharing.FAST["cuda"])
    return (
        f"For a study, `REPRODQN_RUNS_PER_GPU={advised}`"
        + (f" with `{flags}`" if path == "fast" else "")
        + (
            f" ({advised}, not {k}: this machine's memory holds {advised} of the study's "
            f"runs on the {path} path, each with a replay of {holds['capacity']:,} "
            "transitions)"
            if advised < k
            else ""
        )
        + " (the default is the most that pay, as far as the GPU's and the host's memory "
        "hold). It is a launch setting: each run's chain is the same however many share."
        + (
            f" {k} is the most this check tried: `--sharing {k} {2 * k}` tries more."
            if k == tried and advised == k
            else ""
        )
    )


def _fast_line(result: dict) -> str:
    fast, steps = result["fast_path"], result["steps"]
    named = " ".join(fast["settings"])
    if "failed" in fast:
        last = " / ".join(fast["failed"].splitlines()[-3:])
        return f"- The fast path (`{named}`): **it failed**: {last}"
    if fast["pair"] != NEVER:
        return f"- The fast path (`{named}`), two runs: **they {_parted(fast['pair'], steps)}**"
    line = f"- The fast path (`{named}`), two runs: **one hash chain**, " + (
        "**the standard path's**"
        if fast["against_standard"] == NEVER
        else f"but against the standard path's they {_parted(fast['against_standard'], steps)}"
    )
    if "device_replay_failed" in fast:
        line += "; the device replay alone failed: " + fast["device_replay_failed"].splitlines()[0]
    if "device_replay_against_standard" in fast:
        alone = fast["device_replay_against_standard"]
        line += "; the device replay alone: " + (
            "the standard chain, so the graphs differ"
            if alone == NEVER
            else f"it {_parted(alone, steps)} too"
        )
    if result["device"] == "cpu":
        line += " (on a CPU the fast path is the device replay alone: graphs need CUDA)"
    return line


def report(result: dict) -> str:
    from reprodqn.forensics import trace_diff

    steps = result["steps"]
    pair = result["deterministic"]
    shared = result["sharing_parted"]
    counts = sorted(
        {int(k) for by_k in result["sharing"].values() for k in gpu_sharing.measured(by_k)}
    )
    lines = [
        "# gpu-check",
        "",
        f"- Device: {result['device']}. {_machine(result)}.",
        "- Two deterministic runs, same seeds, each in its own process: "
        + ("**one hash chain**" if pair == NEVER else f"**they {_parted(pair, steps)}**"),
        _fast_line(result),
        "- The same runs sharing the device, "
        + ", ".join(str(k) for k in counts)
        + " at a time, on both paths: "
        + (
            "**the same chain**"
            if not shared
            else "**they part**: "
            + "; ".join(f"{name} {_parted(found, steps)}" for name, found in shared.items())
        ),
        "- " + gpu_launch.describe(result["sharing_launch"]),
        f"- The gpu group's two runs, same seeds: they {_parted(result['gpu_group'], steps)}",
        f"- Op by op, over their first {result['gpu_group_ops']['updates']} updates: "
        + trace_diff.first_line(result["gpu_group_ops"]["first"]),
        f"- Audit on {result['device']}: {result['audit']}",
        "",
        *_throughput_lines(result),
        "",
        f"Each run: {steps:,} agent steps at `{' '.join(result['settings'])}`.",
        "",
    ]
    return "\n".join(lines)


def main(
    params: Path,
    overrides: list[str],
    device: str,
    steps: int,
    sharing: list[int],
    out: Path,
    launch_settings: Settings = AS_BEFORE,
) -> int:
    try:
        result = check(params, overrides, device, steps, sharing, out, launch_settings)
    except NoGpu as error:
        print(error, file=sys.stderr)
        return NO_GPU_EXIT
    print(report(result))
    print(f"gpu-check: -> {out / 'gpu-check.md'}", file=sys.stderr)
    return 0 if result["replicable"] else 1
