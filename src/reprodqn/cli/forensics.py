"""The forensic commands: check a replication against a shipped study (`verify`, its
spot-check `--rerun`, and the `resume-point`s a bundle ships), and find where and why it
parts (`trace`, `trace-diff`), what determinism rests on (`audit`), and whether a GPU
keeps it (`gpu-check`). Thin layers over verify, rerun, trace, trace_diff, audit and
gpu_check."""

from __future__ import annotations

import sys
from pathlib import Path

from reprodqn.cli.common import load as _load
from reprodqn.cli.common import positive_int
from reprodqn.cli.common import stage as _stage
from reprodqn.core import workspace
from reprodqn.core.errors import InputError


def cmd_resume_point(args) -> int:
    from reprodqn.config.params import resolve_run
    from reprodqn.core.progress import RunProgress
    from reprodqn.forensics import rerun
    from reprodqn.training.run_game import check_run_game

    group, run = rerun.parse_run(args.run)
    config = resolve_run(_load(args), group, run)
    run_dir = workspace.run_dir(args.runs_dir, group, run)
    if not (run_dir / workspace.COMPLETE).exists():
        raise InputError(f"{run_dir}: not a finished run (no complete.json)")
    check_run_game(run_dir, config.env.game)
    if not 0 <= args.step <= config.train.steps:
        raise InputError(f"--step {args.step}: expected 0..{config.train.steps}")
    out = args.out_dir / group / str(run)
    progress = RunProgress(
        f"resume-point {group}/{run}", args.step, 0, config.replay.learning_starts
    )  # retrains from 0, as verify --rerun
    rerun.make_resume_point(
        config,
        run_dir,
        Path("build/resume-point") / group / str(run),
        out,
        args.step,
        progress=progress.update,
    )
    print(
        f"resume-point: {group}/{run} at step {args.step}, on the run's own chain -> {out}",
        file=sys.stderr,
    )
    return 0


def cmd_trace(args) -> int:
    from reprodqn.config.params import resolve_run
    from reprodqn.core.progress import Progress
    from reprodqn.forensics import trace
    from reprodqn.training.run_game import check_run_game

    config = resolve_run(_load(args), args.group, args.run)
    run_dir = workspace.run_dir(args.runs_dir, args.group, args.run)
    check_run_game(run_dir, config.env.game)  # a run not trained here has none to check
    out = args.out or Path("build/trace") / f"{args.group}-{args.run}-from-{args.from_resume}.jsonl"
    progress = Progress(f"trace {args.group}/{args.run}", args.updates, unit="updates")
    info = trace.trace(
        config,
        run_dir,
        args.from_resume,
        args.updates,
        out,
        resume_dir=args.resume,
        progress=progress.update,
    )
    print(
        f"trace: {info['updates']} updates, {info['ops']:,} ops, "
        f"{info['seconds_per_update'] * 1e3:.0f} ms/update -> {out}",
        file=sys.stderr,
    )
    return 0


def cmd_audit(args) -> int:
    from reprodqn.config.params import resolve_run
    from reprodqn.forensics import audit

    params = _load(args)
    config = resolve_run(params, args.group, args.run)
    result = audit.audit(config, params.evaluation.inference_chunk, args.out, Path("build/audit"))
    print(audit.summary(result), file=sys.stderr)
    print(f"audit: -> {args.out}", file=sys.stderr)
    return 0


def cmd_trace_diff(args) -> int:
    from reprodqn.forensics import trace_diff

    result = trace_diff.compare(args.a, args.b)
    print(trace_diff.summary(result))
    return 0 if result["first"] is None else 1


def cmd_verify(args) -> int:
    from reprodqn.forensics import attestation, chains, verify

    if args.folders:
        return _verify_folders(args)
    for option in ("signer", "evaluate"):
        if getattr(args, option) is not None:
            raise InputError(f"verify --{option}: only with one unpacked bundle (verify BUNDLE)")
    if args.reference is None:
        raise InputError("verify: expected --reference DIR, or two result folders: verify A B")
    if args.attest is not None:
        attestation.require_bundle(args.reference)
    if args.rerun is not None:
        from reprodqn.determinism import isa
        from reprodqn.forensics import rerun

        if args.until is None:
            raise InputError("verify --rerun: expected --until STEP")
        group, run = rerun.parse_run(args.rerun)
        verify.check_bundle(args.reference)
        config = rerun.shipped_config(args.reference, group, run, args.params, args.overrides)
        isa.apply(config.compute.cpu_isa, config.compute.numerics)  # before torch loads
        from reprodqn.config.params import load_params

        evaluation = load_params(
            rerun.shipped_params(args.reference, args.params), args.overrides
        ).evaluation
        result = verify.spot_check(
            args.reference,
            config,
            args.until,
            args.scratch / group / str(run),
            evaluation,
            args.episodes,
        )
        print(verify.spot_check_summary(result))
        if args.attest is not None:
            scratch = args.scratch / group / str(run)
            print(attestation.attest_spot_check(args.reference, result, scratch, args.attest))
        return 0 if result["identical"] else 1
    if args.until is not None:
        raise InputError("verify --until: only with --rerun GROUP/RUN or result folders")
    params = _load(args)
    result = verify.verify(args.root, args.reference, params.study)
    print(verify.summary(result))
    if args.attest is not None:
        print(attestation.attest(args.root, args.reference, result, args.attest))
    return chains.exit_code(result)


def _verify_folders(args) -> int:
    """Two result folders of any training script that keeps reprodqn.exact's chain, or one
    such run rerun here to --until."""
    from reprodqn.forensics import chains, script_rerun

    if args.reference is not None or args.rerun is not None or args.attest is not None:
        raise InputError("verify FOLDER...: result folders take no --reference, --rerun, --attest")
    for option in ("signer", "evaluate"):
        if getattr(args, option) is not None and (len(args.folders) != 1 or args.until is not None):
            raise InputError(f"verify --{option}: only with one unpacked bundle (verify BUNDLE)")
    if len(args.folders) == 1 and args.until is not None:
        result = script_rerun.rerun(args.folders[0], args.until, args.scratch, args.script)
        print(script_rerun.rerun_summary(result))
        return 0 if result["identical"] else 1
    if len(args.folders) == 1:
        return _verify_bundle(args.folders[0], args.signer, args.evaluate)
    if len(args.folders) != 2:
        raise InputError(
            "verify: expected an unpacked bundle (verify BUNDLE), two result folders (A B), "
            "or one with --until STEP"
        )
    result = chains.compare(args.folders[0], args.folders[1], until=args.until)
    print(chains.summary(result))
    return chains.exit_code(result)


def _verify_bundle(directory: Path, signer: Path | None, evaluate: int | None) -> int:
    """`verify BUNDLE`: every link of one unpacked bundle that holds without training, and
    with --evaluate, episodes replayed from its checkpoints."""
    import time

    from reprodqn.forensics import bundle_check

    if evaluate:
        bundle_check.apply_floor(directory)
    started = time.perf_counter()
    result = bundle_check.check(directory, signer, evaluate or 0)
    print(bundle_check.summary(result, time.perf_counter() - started))
    return 0 if result["ok"] else 1


def cmd_gpu_check(args) -> int:
    from reprodqn.forensics import gpu_check

    _load(args)  # the CPU floor, before torch loads
    settings = gpu_check.Settings(args.mps, args.blocking_sync, args.pin)  # study.gpu_launch's
    return gpu_check.main(
        args.params, args.overrides, args.device, args.steps, args.sharing, args.out, settings
    )


def add_commands(sub) -> None:
    """verify, resume-point, trace, trace-diff, audit and gpu-check."""
    _add_verify(sub)
    _add_trace(sub)
    _add_audit(sub)


def _add_verify(sub) -> None:
    """Comparing with another copy, and keeping a resume point for the bundle."""
    p = _stage(
        sub,
        "verify",
        "compare this workspace's runs with another copy or any two result folders, "
        "or check an unpacked bundle on its own",
        cmd_verify,
    )
    p.add_argument(
        "folders",
        nargs="*",
        type=Path,
        metavar="FOLDER",
        help="an unpacked bundle to check on its own (no training), or two result folders "
        "of any script that keeps reprodqn.exact's hash chain",
    )
    p.add_argument("--reference", type=Path, help="another workspace or an unpacked bundle")
    p.add_argument(
        "--root",
        type=Path,
        default=Path("."),
        help="with --reference: the workspace to check (default: this directory)",
    )
    p.add_argument(
        "--rerun",
        default=None,
        metavar="GROUP/RUN",
        help="spot-check: retrain this one run here and compare its chains",
    )
    p.add_argument(
        "--until",
        type=positive_int,
        default=None,
        metavar="STEP",
        help="with --rerun, or one result folder: the step to retrain to; with two "
        "folders: the step to compare through",
    )
    _add_verify_options(p)
    p = _stage(
        sub,
        "resume-point",
        "retrain a finished run to STEP and keep the resume "
        "point there for the bundle (make bundle RESUME=STEP)",
        cmd_resume_point,
    )
    p.add_argument("run", metavar="GROUP/RUN", help="the finished run, e.g. deterministic/0")
    p.add_argument("--step", type=int, required=True, help="the step the resume point is at")
    p.add_argument("--runs-dir", type=Path, default=workspace.RUNS)
    p.add_argument("--out-dir", type=Path, default=workspace.RESUME_POINTS)


def _add_verify_options(p) -> None:
    """verify BUNDLE's --signer, --rerun's --episodes and --scratch, and --script."""
    p.add_argument(
        "--signer",
        type=Path,
        default=None,
        metavar="KEY",
        help="with BUNDLE: the signer's OpenSSH public key (or an allowed_signers file) the "
        "manifest's signature must verify against",
    )
    p.add_argument(
        "--attest", type=Path, default=None, metavar="KEY",
        help="with --reference BUNDLE: sign a statement of this replication (with --rerun: "
        "of this spot-check) with an OpenSSH private key (an in-toto Statement in "
        "attestations/ beside the bundle)",
    )  # fmt: skip
    p.add_argument(
        "--episodes",
        type=int,
        default=10,
        metavar="K",
        help="with --rerun: evaluation episodes of the first and the last checkpoint "
        "retrained that are replayed against the reference's eval.csv (default 10; 0: none)",
    )
    p.add_argument(
        "--evaluate",
        type=positive_int,
        default=None,
        metavar="K",
        help="with BUNDLE: K evaluation episodes, evenly spaced over its eval.csv rows, "
        "replayed from the checkpoints it ships (bundle --checkpoints) against their rows",
    )

    p.add_argument(
        "--scratch",
        type=Path,
        default=Path("build/rerun"),
        help="where a retrained run goes (default build/rerun): with --rerun GROUP/RUN, "
        "and with one result folder and --until STEP (then empty or absent)",
    )
    p.add_argument(
        "--script",
        type=Path,
        default=None,
        help="with one result folder: the script that wrote it, where its recorded path "
        "is not this machine's",
    )


def _add_trace(sub) -> None:
    """Every op's output hashed over a window of updates, and two traces compared."""
    what = "re-run N updates from a resume point, hashing every op's and universal kernel's output"
    p = _stage(sub, "trace", what, cmd_trace)
    p.add_argument("--group", required=True, help="study group, e.g. deterministic")
    p.add_argument("--run", required=True, type=int, help="run index within the group")
    p.add_argument(
        "--from-resume",
        required=True,
        type=int,
        metavar="STEP",
        help="the window's first step (0: from scratch)",
    )
    p.add_argument("--updates", required=True, type=int, metavar="N", help="updates traced")
    p.add_argument(
        "--resume",
        type=Path,
        default=None,
        metavar="DIR",
        help="a resume directory at STEP (default: the run's own, else retrain to STEP here)",
    )
    p.add_argument("--runs-dir", type=Path, default=workspace.RUNS)
    p.add_argument(
        "--out", type=Path, default=None, help="default build/trace/GROUP-RUN-from-STEP.jsonl"
    )
    p = sub.add_parser("trace-diff", help="the first update and op where two traces differ")
    p.add_argument("a", type=Path, help="a trace (reprodqn trace --out)")
    p.add_argument("b", type=Path, help="the other trace, of the same window")
    p.set_defaults(handler=cmd_trace_diff)


def _add_audit(sub) -> None:
    """What the study needs to be deterministic on CUDA, and the checks to run on a GPU."""
    p = _stage(
        sub,
        "audit",
        "list every aten op the study runs and what it needs to be "
        "deterministic on CUDA; check global RNGs, threads, ISA, cuBLAS, cuDNN",
        cmd_audit,
    )
    p.add_argument("--group", default="deterministic", help="the run whose ops are listed")
    p.add_argument("--run", type=int, default=0, help="its index in the group")
    p.add_argument("--out", type=Path, default=workspace.RESULTS / workspace.AUDIT)
    p = _stage(
        sub,
        "gpu-check",
        "on a GPU, first: two deterministic runs give one chain, on the standard path "
        "and the fast one, the gpu group's part, the audit, throughput with K runs "
        "sharing it",
        cmd_gpu_check,
    )
    p.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default="cuda",
        help="cpu rehearses the checks on the CPU (default cuda)",
    )
    p.add_argument("--steps", type=int, default=3000, help="agent steps per run")
    p.add_argument(
        "--sharing",
        type=int,
        nargs="+",
        default=[1, 4, 8, 16],
        metavar="K",
        help="runs at once for the throughput table, on each path (default 1 4 8 16)",
    )
    p.add_argument("--out", type=Path, default=Path("build/gpu-check"))
    add_launch_settings(p)


def add_launch_settings(p) -> None:
    """How the runs sharing the GPU are started: launch settings, none of which changes a chain."""
    p.add_argument(
        "--mps",
        action="store_true",
        help="under an MPS daemon of its own, started and stopped here, so that their "
        "kernels run concurrently (no SM limit); without the binary, said and run without",
    )
    p.add_argument(
        "--blocking-sync",
        action="store_true",
        help="each run's thread blocks while it waits on the GPU instead of spinning",
    )
    p.add_argument("--pin", action="store_true", help="each run pinned to a core of its own")
