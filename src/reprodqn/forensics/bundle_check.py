"""`reprodqn verify BUNDLE`: every link of an unpacked bundle that holds without training,
checked in seconds, in order, stopping at the first that fails.

  manifest     every file has the SHA-256 MANIFEST.sha256 gives, and none is unlisted
  signature    the manifest is signed by the key given (--signer), or by the key whose
               fingerprint is shown, or said unsigned
  crate        ro-crate-metadata.json lists the manifest's files with the same SHA-256s
  code         the wheel is its RECORD's and code/'s (bundle_cross, as the next three)
  params       params.yaml gives every run the config digest its config.json records,
               and that config gives the same digest
  pipeline, conditions, runs
               the other facts the bundle states twice, each pair cross-checked
  checkpoints  each shipped checkpoint holds the weights its chain line records
  report       the report rebuilt from the bundle's runs and eval.csv files is the shipped
               one, file by file (Table 1, curves, variance tests, verdict, metrics, pages)
  page         REPLICATE.md is the page the bundle's files give (its commands, the wheel's
               hash), not one pointing elsewhere
  attestations each signed replication statement in the bundle or beside it holds, and
               who replicated it on which machine (attestation)
  evaluate     with --evaluate K, K episodes played again from the shipped checkpoints give
               their eval.csv rows (bundle_replay)

A manifest rewritten after an edit passes the first link and fails a later one: the parts
of a bundle say the same thing several times over. What no link covers, and the verdict
says: that the chains are what training computes and the scores what the checkpoints play
(`verify --rerun` retrains a run for that; without shipped checkpoints only a replay
checks a score), and the checker itself when it is the bundle's own wheel. A consistent
bundle's verdict also says where its results replicate (determinism.replication_scope)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from reprodqn.core import workspace
from reprodqn.core.atomic import read_json
from reprodqn.core.errors import InputError
from reprodqn.determinism.replication_scope import recorded_conditions, where_it_replicates
from reprodqn.forensics import bundle_cross
from reprodqn.forensics.chains import plural

LINKS = (
    *("manifest", "signature", "crate", "code", "params", "pipeline", "conditions", "runs"),
    *("checkpoints", "report", "page", "attestations", "evaluate"),
)
CHECKPOINT_NAME = re.compile(r"step-(\d+)\.safetensors")
CROSS = (  # (link, check): the facts stated twice (bundle_cross), after params
    ("pipeline", bundle_cross.pipeline),
    ("conditions", bundle_cross.conditions),
    ("runs", bundle_cross.runs),
)
LinkBroken = bundle_cross.Disagrees  # a link that does not hold: its name and one line


def check(directory: Path, signer: Path | None = None, evaluate: int = 0) -> dict:
    """Every link of the unpacked bundle in `directory`, in LINKS' order: what each
    covered, and the first that fails (None when all hold); `evaluate` episodes replayed
    (0: the evaluate link is left out)."""
    from reprodqn.report import bundle

    directory = Path(directory)
    if not directory.is_dir():
        raise InputError(f"{directory}: not a directory (expected an unpacked bundle)")
    if not (directory / bundle.MANIFEST).exists():
        raise InputError(
            f"{directory}: no {bundle.MANIFEST} (expected an unpacked reprodqn bundle, "
            "reprodqn-bundle/ in its archive)"
        )
    held: list[str] = []
    signature = "unsigned"
    try:
        listed = _manifest(directory)
        held.append(f"manifest: {plural(len(listed), 'file')}")
        signature = _signature(directory, signer)
        held.append(f"signature: {signature}")
        held.append(f"crate: {_crate(directory, listed)}")
        held.append(f"code: {bundle_cross.code(directory)}")
        params = _load_params(directory)
        held.append(f"params: {_params(directory, params)}")
        held += [f"{link}: {cross(directory)}" for link, cross in CROSS]
        held.append(f"checkpoints: {_checkpoints(directory)}")
        held.append(f"report: {_report(directory, params)}")
        held.append(f"page: {_page(directory)}")
        held.append(f"attestations: {_attestations(directory)}")
        if evaluate:
            held.append(f"evaluate: {_evaluate(directory, params, evaluate)}")
    except LinkBroken as broken:
        return {"ok": False, "held": held, "failed": str(broken), "signature": signature}
    unvouched = [bundle_cross.checker(directory), _needs_replication(directory)]
    replicates = where_it_replicates(recorded_conditions(directory), "This bundle's results")
    return {
        "ok": True, "held": held, "failed": None, "signature": signature,
        "unvouched": unvouched, "replicates": replicates,
    }  # fmt: skip


def apply_floor(directory: Path) -> None:
    """The bundle's CPU floor, before torch loads, so that its episodes (--evaluate) play
    as they played (a params.yaml that does not load is left for the params link to name)."""
    from reprodqn.config.params import load_params
    from reprodqn.determinism import isa

    try:
        compute = load_params(Path(directory) / "params.yaml").compute
    except (InputError, OSError):
        return
    isa.apply(compute.cpu_isa, compute.numerics)


def _needs_replication(directory: Path) -> str:
    """What only training again can check, said plainly in the verdict."""
    shipped = any((directory / workspace.RUNS).glob("*/*/checkpoints/*.safetensors"))
    scores = (
        "the scores are what the shipped checkpoints play (--evaluate K replays some), but "
        "not that training computes those checkpoints"
        if shipped
        else "no checkpoints are shipped, so a score (eval.csv) and the chains are checked "
        "only by training again"
    )
    return (
        f"needs a replication: {scores}: verify --reference after one, or verify --rerun "
        "GROUP/RUN --until STEP for one run (it replays the episodes of steps 0 and STEP)"
    )


def summary(result: dict, seconds: float | None = None) -> str:
    """What `reprodqn verify BUNDLE` prints: the first link that fails, else each that held."""
    if not result["ok"]:
        return f"verify: BROKEN: {result['failed']}"
    took = f" in {seconds:.1f} s" if seconds is not None else ""
    lines = [f"verify: consistent{took}, every link that holds without training:"]
    lines += [f"  {line}" for line in result["held"]]
    lines += [result["replicates"]] if result.get("replicates") else []
    lines += result.get("unvouched", [])
    return "\n".join(lines)


def _manifest(directory: Path) -> dict[str, str]:
    from reprodqn.report.bundle import MANIFEST, check_manifest, read_manifest

    bad = check_manifest(directory, everywhere=True)
    if bad:
        raise LinkBroken(
            "manifest",
            f"{plural(len(bad), 'file')} not as {MANIFEST} lists (first: {bad[0]})",
        )
    return read_manifest(directory)


def _signature(directory: Path, signer: Path | None) -> str:
    from reprodqn.report import signing

    try:
        return signing.check(directory, signer)
    except signing.SignatureError as error:
        raise LinkBroken("signature", str(error)) from None


def _crate(directory: Path, listed: dict[str, str]) -> str:
    """The crate's File entities against the manifest: the same names, the same SHA-256s."""
    path = directory / workspace.CRATE
    if not path.exists():
        raise LinkBroken("crate", f"{workspace.CRATE}: not in the bundle")
    try:
        graph = json.loads(path.read_text())["@graph"]
    except (ValueError, KeyError, TypeError):
        raise LinkBroken("crate", f"{workspace.CRATE}: not an RO-Crate (no @graph)") from None
    files = {
        entity["@id"]: entity.get("sha256")
        for entity in graph
        if isinstance(entity, dict) and "File" in _types(entity)
    }
    expected = set(listed) - {workspace.CRATE}
    for name in sorted(expected | set(files)):
        if name not in files:
            raise LinkBroken("crate", f"{name}: in the manifest, not in {workspace.CRATE}")
        if name not in expected:
            raise LinkBroken("crate", f"{name}: in {workspace.CRATE}, not in the manifest")
        if files[name] != listed[name]:
            raise LinkBroken(
                "crate",
                f"{name}: {workspace.CRATE} gives SHA-256 {str(files[name])[:12]}, the "
                f"manifest {listed[name][:12]} (a crate from before the files changed)",
            )
    return f"{plural(len(files), 'file')}, each with the manifest's SHA-256"


def _types(entity: dict) -> list:
    kind = entity.get("@type", [])
    return [kind] if isinstance(kind, str) else list(kind)


def _load_params(directory: Path):
    from reprodqn.config.params import load_params

    path = directory / "params.yaml"
    if not path.exists():
        raise LinkBroken("params", "params.yaml: not in the bundle")
    try:
        return load_params(path)
    except InputError as error:
        raise LinkBroken("params", str(error)) from None


def _params(directory: Path, params) -> str:
    """params.yaml -> each run's config digest -> the digest its config.json records ->
    the digest of the config it records."""
    from reprodqn.config.params import RunConfig, resolve_run

    runs = 0
    for group in params.study.studied_groups():
        for run in range(params.study.runs(group)):
            run_dir = workspace.run_dir(directory / workspace.RUNS, group, run)
            name = f"runs/{group}/{run}/{workspace.RUN_CONFIG}"
            if not (run_dir / workspace.RUN_CONFIG).exists():
                if workspace.read_hashes(run_dir):
                    raise LinkBroken("params", f"{name}: missing beside its chain")
                continue  # a run the study never trained: the report says so
            recorded = read_json(run_dir / workspace.RUN_CONFIG, "run config")
            digest = recorded.get("digest")
            expected = resolve_run(params, group, run)
            if expected.digest() != digest:
                raise LinkBroken(
                    "params",
                    f"params.yaml gives {group}/{run} config digest {expected.digest()[:12]}, "
                    f"{name} records {str(digest)[:12]}"
                    + _differing(expected.model_dump(mode="json"), recorded.get("config")),
                )
            try:
                own = RunConfig.from_record(recorded.get("config")).digest()
            except ValueError:
                raise LinkBroken("params", f"{name}: its config is not a run's config") from None
            if own != digest:
                raise LinkBroken(
                    "params",
                    f"{name}: its config gives digest {own[:12]}, it records {str(digest)[:12]} "
                    "(the config edited after the run)"
                    + _differing(expected.model_dump(mode="json"), recorded.get("config")),
                )
            runs += 1
    return (
        f"params.yaml gives each of the {plural(runs, 'run')} the digest its "
        f"{workspace.RUN_CONFIG} records"
    )


def _differing(ours: dict, recorded) -> str:
    from reprodqn.determinism.provenance import differing_values

    found = differing_values(ours, recorded or {}, ("params.yaml", workspace.RUN_CONFIG))
    wanted = [line for line in found if not line.startswith("compute.")] or found
    return f": {'; '.join(wanted[:3])}" if wanted else ""


def _checkpoints(directory: Path) -> str:
    from reprodqn.forensics.checkpoint_files import CheckpointMismatch, check_run

    count = 0
    for run_dir in sorted((directory / workspace.RUNS).glob("*/*")):
        try:
            # a file missing from a bundle is its manifest's to name (the first link)
            count += check_run(run_dir, directory, every_line=False)
        except CheckpointMismatch as error:
            raise LinkBroken("checkpoints", str(error)) from None
    return (
        f"{plural(count, 'shipped checkpoint')}, each with its chain line's weights"
        if count
        else "none shipped (bundle --checkpoints ships them)"
    )


def _evaluate(directory: Path, params, count: int) -> str:
    from reprodqn.forensics import bundle_replay

    try:
        return bundle_replay.replay(directory, params, count)
    except bundle_replay.Mismatch as error:
        raise LinkBroken("evaluate", str(error)) from None


def _report(directory: Path, params) -> str:
    """The report files rebuilt from the bundle's runs against the shipped ones; report.html
    from the rebuilt report.md with the shipped figures."""
    from reprodqn.report import html, study_records, writer

    reports = directory / workspace.REPORTS
    if not reports.is_dir():
        return "none shipped"
    study = study_records.load_study(directory, params.study)
    texts = writer.report_texts(study, **writer.report_arguments(params, directory))
    texts["report.html"] = html.render(texts["report.md"], reports)
    compared = []
    for name, text in texts.items():
        path = reports / name
        if not path.exists():
            continue
        shipped = path.read_text()
        if shipped != text:
            raise LinkBroken(
                "report",
                f"reports/{name}: not what the bundle's runs and eval.csv files give"
                + _first_line(shipped, text),
            )
        compared.append(name)
    if not compared:
        raise LinkBroken("report", "reports/: none of the report's files is there")
    return f"{plural(len(compared), 'file')} rebuilt from the runs' eval.csv files, identical"


def _page(directory: Path) -> str:
    """REPLICATE.md against the page the bundle's files give: its commands (the install
    line, the wheel's hash) are the bundle's, not pointing elsewhere."""
    from reprodqn.report import bundle

    path = directory / workspace.REPLICATE
    if not path.exists():
        raise LinkBroken("page", f"{workspace.REPLICATE}: not in the bundle")
    try:
        expected = bundle.shipped_page(directory)
    except InputError as error:
        raise LinkBroken("page", str(error)) from None
    shipped = path.read_text()
    if shipped != expected:
        raise LinkBroken(
            "page",
            f"{workspace.REPLICATE}: not the page the bundle's files give"
            + _first_line(shipped, expected, "generated"),
        )
    return f"{workspace.REPLICATE} is the page the bundle's files give, command for command"


def _attestations(directory: Path) -> str:
    """The signed replication statements in the bundle or beside it (attestation)."""
    from reprodqn.forensics import attestation

    try:
        return attestation.check(directory)
    except attestation.Forged as error:
        raise LinkBroken("attestations", str(error)) from None


EXCERPT = 60  # characters of each side shown from just before where they part


def _first_line(shipped: str, rebuilt: str, other: str = "rebuilt") -> str:
    """Where a shipped file first differs from the rebuilt one: each line's excerpt starts
    just before the first character where they part, so the two never read the same."""
    pairs = zip(shipped.splitlines(), rebuilt.splitlines(), strict=False)
    for number, (a, b) in enumerate(pairs, 1):
        if a != b:
            start = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), None)
            start = min(len(a), len(b)) if start is None else start
            cut = max(0, start - 20)
            lead = "…" if cut else ""
            return (
                f" (line {number}, column {start + 1}: shipped {lead + a[cut : cut + EXCERPT]!r}, "
                f"{other} {lead + b[cut : cut + EXCERPT]!r})"
            )
    return " (of another length)"
