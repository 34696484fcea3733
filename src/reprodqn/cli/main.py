"""`reprodqn <stage> ...`: one subcommand per pipeline stage, each a thin layer over a module.

Every subcommand takes --params (default params.yaml) and repeatable --set key.path=value.
Input errors print one line and exit 2; nothing already written is touched.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from reprodqn.cli import common, forensics, start_states, tools
from reprodqn.cli.common import load as _load
from reprodqn.cli.common import positive_int, refuse_inside_a_bundle, resolve_params_path
from reprodqn.cli.common import stage as _stage
from reprodqn.core import lifeline, storage, workspace
from reprodqn.core.errors import InputError, MachineError
from reprodqn.study import gpu_launch

# ---------------------------------------------------------------------------------------------
# Stage commands: each a few lines over a module


def cmd_train(args) -> int:
    from reprodqn.config.params import resolve_run
    from reprodqn.core.progress import report_training
    from reprodqn.evaluation import start_states
    from reprodqn.study import launch, tracking
    from reprodqn.training.loop import train
    from reprodqn.training.run_numerics import keep_recorded_numerics, named_on_command_line

    params = _load(args)
    run_dir = workspace.run_dir(args.runs_dir, args.group, args.run)
    config, kept = keep_recorded_numerics(
        resolve_run(params, args.group, args.run), run_dir, named_on_command_line(args.overrides)
    )
    notes = start_states.check_before_training(params.evaluation, [config])  # as study's
    launch.adopt_launch_environment(config.compute.threads, args.relaunch_argv)  # may re-exec
    for note in [kept, *notes] if kept else notes:
        print(f"train {args.group}/{args.run}: {note}", file=sys.stderr)
    events = train(config, run_dir, restart=args.restart)
    if args.track:
        events = tracking.track_training(events, config, run_dir)
    report_training(
        events, f"train {args.group}/{args.run}", record=run_dir / workspace.PROGRESS_RECORD
    )
    return 0


def cmd_evaluate(args) -> int:
    from reprodqn.core import run_lock
    from reprodqn.evaluation import blindness, probe
    from reprodqn.evaluation.stage import evaluate_stage
    from reprodqn.study import tracking

    params = _load(args)
    label = f"evaluate {args.group}/{args.run}"
    out_dir = workspace.eval_dir(args.evaluations_dir, args.group, args.run)
    with (
        run_lock.hold(out_dir, label, run_lock.wait_from_env()),
        storage.failures(
            label,
            out_dir,
            lambda: "every checkpoint already evaluated is kept in its progress journal",
        ),
    ):
        done = evaluate_stage(
            params,
            args.group,
            args.run,
            args.runs_dir,
            args.evaluations_dir,
            args.start_sequences,
            args.workers,
        )
        alarm = probe.probe_stage(params, done, args.start_sequences)
    if alarm:
        print(f"evaluate {args.group}/{args.run}: {blindness.alarm_line(alarm)}", file=sys.stderr)
    if args.track:
        tracking.track_evaluation(done.config, done.run_dir, done.out_dir, done.digest)
    return 0


def cmd_evaluate_policy(args) -> int:
    from reprodqn.core.workers import default_workers
    from reprodqn.evaluation.foreign import evaluate_policy_file

    evaluate_policy_file(
        args.policy,
        args.out_dir,
        _load(args),
        args.start_sequences,
        args.workers or default_workers(threads=1),
    )
    return 0


def cmd_conditions(args) -> int:
    from reprodqn.determinism import provenance

    conditions = provenance.write_conditions(_load(args).compute, args.out_dir)
    print(
        f"conditions: {conditions['device_name']} ({conditions['cpu']['model']}), "
        f"fingerprint {conditions['fingerprint'][:12]} -> {args.out_dir}",
        file=sys.stderr,
    )
    return 0


def cmd_study(args) -> int:
    import os

    from reprodqn.config.params import resolve_run
    from reprodqn.core.workers import Footprint, cores_per_training_job
    from reprodqn.evaluation import start_states
    from reprodqn.study import stages

    params = _load(args)
    argv = ["--params", str(args.params.resolve())]  # what a job needs to load these params
    for item in args.overrides:
        argv += ["--set", item]
    resume_every = params.train.resume_every if args.stage == "train" else None
    cores = params.compute.threads
    footprint = Footprint()
    if args.stage == "train":  # lockstep runs' game workers count too (REPRODQN_ACTOR_WORKERS)
        configs = [resolve_run(params, g, r) for g, r in params.study.run_ids()]
        for note in start_states.check_before_training(params.evaluation, configs):
            print(f"study train: {note}", file=sys.stderr)
        cores = cores_per_training_job(cores, max(config.train.actors for config in configs))
        footprint = stages.training_footprint(configs)
    launcher = args.launcher or os.environ.get("REPRODQN_LAUNCHER", "local")
    stages.run_study(
        params,
        args.stage,
        argv,
        args.runs_dir,
        args.evaluations_dir,
        lambda: stages.make_executor(
            launcher,
            args.workers,
            cores,
            args.launcher_config,
            resume_every,
            args.runs_dir,
            entry=main,
            footprint=footprint,
        ),
    )
    return 0


def cmd_report(args) -> int:
    from reprodqn.report import study_records, writer
    from reprodqn.study import mlflow_store, tracking

    params = _load(args)
    study = study_records.load_study(args.root, params.study)
    study_records.require_evaluated(study, args.root)
    summary = writer.write_report(study, args.out_dir, **writer.report_arguments(params, args.root))
    if mlflow_store.enabled() and not args.no_track:
        files = sorted(p for p in args.out_dir.iterdir() if p.is_file())
        tracking.log_study(params, workspace.current_fingerprint(), summary["metrics"], files)
    print(
        f"report: Table 1, figures, variance tests -> {args.out_dir}; deterministic group "
        f"replicable: {summary['metrics']['replicable']}",
        file=sys.stderr,
    )
    return 0


# ---------------------------------------------------------------------------------------------


def _run_arguments(p, what: str) -> None:
    p.add_argument("--group", required=True, help="study group, e.g. deterministic")
    p.add_argument("--run", required=True, type=int, help="run index within the group")
    p.add_argument("--runs-dir", type=Path, default=workspace.RUNS, help="default: runs")
    p.add_argument("--track", action="store_true", help=f"log the {what} to MLflow")


def _evaluation_arguments(p) -> None:
    """What every evaluating stage takes: its worker count and start sequences."""
    p.add_argument(
        "--workers",
        type=positive_int,
        default=None,
        help="worker processes (default: $REPRODQN_WORKERS or one per core)",
    )
    p.add_argument(
        "--start-sequences",
        type=Path,
        default=None,
        help="default: evaluation.start_sequences in params (left at the authors', the "
        "game's own where the package carries them, else none)",
    )


def _add_pipeline_stages(sub) -> None:
    """The dvc.yaml stages, in data-flow order."""
    _add_start_state_stages(sub)
    _add_run_stages(sub)
    _add_study_stages(sub)


def _add_start_state_stages(sub) -> None:
    """The conditions record, then the start sequences: candidates, ranker, selection."""
    p = _stage(sub, "conditions", "record the experimental conditions and an SBOM", cmd_conditions)
    p.add_argument("--out-dir", type=Path, default=workspace.RESULTS)
    start_states.add_commands(sub)


def _add_run_stages(sub) -> None:
    """One run: train it, evaluate it; or evaluate a policy trained elsewhere."""
    p = _stage(sub, "train", "train one agent of the study into runs/GROUP/RUN", cmd_train)
    _run_arguments(p, "run")
    p.add_argument(
        "--restart",
        action="store_true",
        help="discard an existing run trained with different params",
    )
    p = _stage(sub, "evaluate", "evaluate every checkpoint of runs/GROUP/RUN", cmd_evaluate)
    _run_arguments(p, "evaluation")
    p.add_argument("--evaluations-dir", type=Path, default=workspace.EVALUATIONS)
    _evaluation_arguments(p)
    p = _stage(
        sub,
        "evaluate-policy",
        "evaluate a policy trained elsewhere under the paper's protocol",
        cmd_evaluate_policy,
    )
    p.add_argument(
        "policy",
        type=Path,
        help="a Stable-Baselines3 DQN .zip (CnnPolicy), or a "
        "TorchScript .pt/.ts: uint8 (N, 4, 84, 84) -> (N, A) Q-values (A: the game's "
        "actions) or (N,) "
        "actions",
    )
    p.add_argument(
        "--out-dir",
        type=Path,
        required=True,
        help="where eval.csv and eval.json go (and the policy as a checkpoint)",
    )
    common.add_game_argument(p)
    _evaluation_arguments(p)


def _add_study_stages(sub) -> None:
    """Every run of the study at once, then its report."""
    p = _stage(sub, "study", "train or evaluate every group x run of the study", cmd_study)
    p.add_argument("stage", choices=("train", "evaluate"), help="the stage, for every run")
    p.add_argument(
        "--workers",
        type=positive_int,
        default=None,
        help="parallel jobs (default: $REPRODQN_WORKERS, else one per GPU or core)",
    )
    p.add_argument(
        "--launcher",
        choices=("local", "slurm"),
        default=None,
        help="where jobs run (default: $REPRODQN_LAUNCHER, else local)",
    )
    p.add_argument(
        "--launcher-config",
        type=Path,
        default=None,
        help="Slurm settings (default: launcher.yaml if present)",
    )
    p.add_argument("--runs-dir", type=Path, default=workspace.RUNS)
    p.add_argument("--evaluations-dir", type=Path, default=workspace.EVALUATIONS)
    p = _stage(sub, "report", "Table 1, figures, variance tests, replicability", cmd_report)
    p.add_argument(
        "--root", type=Path, default=Path("."), help="workspace holding runs/ and evaluations/"
    )
    p.add_argument("--out-dir", type=Path, default=workspace.REPORTS)
    p.add_argument("--no-track", action="store_true", help="do not log the study to MLflow")


def build_parser() -> argparse.ArgumentParser:
    from reprodqn import __version__

    parser = argparse.ArgumentParser(prog="reprodqn", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"reprodqn {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="STAGE")
    _add_pipeline_stages(sub)
    tools.add_commands(sub)
    forensics.add_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.relaunch_argv = sys.argv[1:] if argv is None else None  # a command line's own
    if os.environ.get(gpu_launch.BLOCKING_SYNC):  # a launch setting: before torch's context
        refused = gpu_launch.apply_blocking_sync()
        if refused:
            print(f"reprodqn: {refused}", file=sys.stderr)
    with lifeline.stop_on_sigterm():
        return _run(args)


def _run(args) -> int:
    try:
        refuse_inside_a_bundle(args)
        resolve_params_path(args)
        if hasattr(args, "params") and args.handler is not tools.cmd_params:
            _load(args)
        return args.handler(args)
    except InputError as exc:
        print(f"reprodqn: error: {exc}", file=sys.stderr)
        return 2
    except MachineError as exc:
        print(f"reprodqn: machine error: {exc}", file=sys.stderr)
        return 3
    except ModuleNotFoundError as exc:  # the light install: the study's stack is an extra
        print(f"reprodqn: error: {common.not_installed(exc, args.command)}", file=sys.stderr)
        return 2
    except Exception as exc:  # a full disk met outside a stage's own handling (MLflow's)
        found = storage.describe(
            exc, args.command, Path.cwd(), "every file already written is complete"
        )
        if found is None:
            raise
        print(f"reprodqn: machine error: {found}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print("reprodqn: interrupted", file=sys.stderr)
        return 130
    except lifeline.Terminated:
        print(
            f"reprodqn {args.command}: stopped by SIGTERM, its workers with it; what it "
            "finished is kept, and running it again resumes",
            file=sys.stderr,
        )
        return lifeline.TERMINATED_EXIT
