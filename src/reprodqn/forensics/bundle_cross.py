"""The facts a bundle states twice, each pair cross-checked by `reprodqn verify BUNDLE`: a
manifest and crate rewritten after an edit make the files agree with the manifest, not
with each other.

  code        the wheel's entries are its RECORD's and code/'s files (a checkout's: src/)
  pipeline    every param dvc.lock recorded for a stage is params.yaml's value
  conditions  fingerprint.json's hash is its fields', and its fields results/conditions.json's;
              each run's conditions name the same machine and fingerprint; the lock pins
              the versions the conditions recorded, and only pins (no index, no URL), and
              names the torch build they recorded
  runs        complete.json is the chain's last line; process.jsonl's chain hashes are the
              chain's where both have a step (a loss value itself only --rerun checks)

Each function returns what held in one line, or raises Disagrees naming the two files
and the field where they part."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import zipfile
from pathlib import Path

import yaml

from reprodqn.core import workspace
from reprodqn.core.digests import json_digest
from reprodqn.forensics.chains import plural

WHEELS, CODE = "wheels", "code"
LOCK = "requirements.lock"
# what the same machine writes the same in each run's conditions and in results/'s
SAME_MACHINE = (("fingerprint",), ("device_name",), ("cpu", "model"), ("cpu", "architecture"))
TORCH_BUILD = re.compile(r"# torch==(\S+?):")  # the lock's header: the build the study ran
PIN = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==([^\s;\\]+)")


class Disagrees(Exception):
    """Two parts of a bundle that say different things: the link and one line."""

    def __init__(self, link: str, detail: str):
        super().__init__(f"{link}: {detail}")
        self.link, self.detail = link, detail


def wheel_entries(directory: Path) -> tuple[str, dict[str, bytes]] | None:
    """The bundle's one wheel, by name in the bundle, and its entries; None if none."""
    found = sorted((directory / WHEELS).glob("*.whl"))
    if not found:
        return None
    if len(found) > 1:
        raise Disagrees("code", f"{WHEELS}/: {len(found)} wheels, a bundle ships one")
    name = f"{WHEELS}/{found[0].name}"
    try:
        with zipfile.ZipFile(found[0]) as archive:
            return name, {i.filename: archive.read(i) for i in archive.infolist() if not i.is_dir()}
    except (zipfile.BadZipFile, OSError):
        raise Disagrees("code", f"{name}: not a wheel (not a zip archive)") from None


def code(directory: Path) -> str:
    """The wheel against its own RECORD, then against the code the bundle shows a reader:
    code/ (a workspace's bundle), or src/ (a checkout's), file for file."""
    found = wheel_entries(directory)
    if found is None:
        return "no wheel shipped"
    name, entries = found
    _record(name, entries)
    shown = directory / CODE
    if shown.is_dir():
        files = {
            p.relative_to(shown).as_posix(): p.read_bytes()
            for p in shown.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts  # Python's, should a reader run it
        }
        # the code first: a dist-info file (RECORD) differs because a module does
        for entry in sorted(set(entries) | set(files), key=lambda e: (".dist-info/" in e, e)):
            if entries.get(entry) != files.get(entry):
                where = "only in the wheel" if entry not in files else "not the wheel's"
                where = "not in the wheel" if entry not in entries else where
                raise Disagrees("code", f"{CODE}/{entry}: {where} ({name})")
        return f"{name} holds exactly {CODE}/'s {plural(len(files), 'file')}"
    source = directory / "src"
    compared = [e for e in entries if e.startswith("reprodqn/") and e.endswith(".py")]
    for entry in compared:
        path = source / entry
        if not path.is_file() or path.read_bytes() != entries[entry]:
            raise Disagrees("code", f"src/{entry}: not the wheel's ({name})")
    return f"{name}'s {plural(len(compared), 'module')} are src/'s"


def _record(name: str, entries: dict[str, bytes]) -> None:
    """Each entry's SHA-256 as the wheel's RECORD lists it, and no entry unlisted."""
    records = [e for e in entries if e.endswith(".dist-info/RECORD")]
    if len(records) != 1:
        raise Disagrees("code", f"{name}: no RECORD (not a wheel as bundle makes them)")
    listed = {}
    for line in entries[records[0]].decode(errors="replace").splitlines():
        path, _, rest = line.partition(",")
        listed[path] = rest.split(",")[0].removeprefix("sha256=")
    for entry, data in entries.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        if entry != records[0] and listed.get(entry) != digest:
            raise Disagrees("code", f"{name}: {entry} is not as its RECORD lists it")


def pipeline(directory: Path) -> str:
    """Each param dvc.lock records for a stage against params.yaml's value."""
    lock, params = directory / "dvc.lock", directory / "params.yaml"
    if not lock.exists():
        return "no dvc.lock shipped"
    try:
        stages = yaml.safe_load(lock.read_text())["stages"]
        ours = yaml.safe_load(params.read_text())
    except (yaml.YAMLError, KeyError, TypeError, OSError):
        raise Disagrees("pipeline", "dvc.lock: not a DVC lock file (no stages)") from None
    count, flat = 0, dict(_leaves(ours))  # dotted, as DVC writes keys (some hold dots)
    for stage, entry in sorted(stages.items()):
        recorded = ((entry or {}).get("params") or {}).get("params.yaml") or {}
        for key, value in _leaves(recorded):
            found = flat.get(key, "(none)")
            if not _same(found, value):
                raise Disagrees(
                    "pipeline",
                    f"dvc.lock's stage {stage} ran with {key} = {value!r}, params.yaml gives "
                    f"{found!r} (params.yaml edited after the study ran?)",
                )
            count += 1
    return f"the {plural(count, 'param')} dvc.lock's stages ran with are params.yaml's"


def _same(ours, recorded) -> bool:
    """A value as params.yaml and dvc.lock write it (YAML 1.1 reads DVC's 1e-06 as a
    string): equal, or the same number."""
    if ours == recorded:
        return True
    numbers = (int, float)
    if isinstance(ours, numbers) and isinstance(recorded, str | int | float):
        try:
            return float(recorded) == float(ours) and not isinstance(ours, bool)
        except ValueError:
            return False
    return False


def _leaves(tree: dict, prefix: str = "") -> list[tuple[str, object]]:
    found: list[tuple[str, object]] = []
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            found += _leaves(value, f"{prefix}{key}.")
        else:
            found.append((f"{prefix}{key}", value))
    return found


def _lookup(tree, dotted: str):
    for part in dotted.split("."):
        if not isinstance(tree, dict) or part not in tree:
            return "(none)"
        tree = tree[part]
    return tree


def conditions(directory: Path) -> str:
    """fingerprint.json, each run's conditions and the lock against results/conditions.json."""
    from reprodqn.determinism.provenance import fingerprint_fields

    path = workspace.conditions_path(directory)
    if not path.exists():
        return "no results/conditions.json shipped"
    ours = _json(path)
    recorded = _json(workspace.fingerprint_path(directory))
    name = f"{workspace.RESULTS}/{workspace.FINGERPRINT}"
    if recorded:
        if json_digest(recorded.get("fields")) != recorded.get("fingerprint"):
            raise Disagrees("conditions", f"{name}: its fingerprint is not its fields' hash")
        if recorded.get("fields") != fingerprint_fields(ours):
            raise Disagrees("conditions", f"{name}: its fields are not results/conditions.json's")
        if recorded.get("fingerprint") != ours.get("fingerprint"):
            raise Disagrees("conditions", f"{name}: not results/conditions.json's fingerprint")
    runs = 0
    for run_path in sorted((directory / workspace.RUNS).glob(f"*/*/{workspace.CONDITIONS}")):
        run = _json(run_path)
        for keys in SAME_MACHINE:
            theirs, mine = _lookup(run, ".".join(keys)), _lookup(ours, ".".join(keys))
            if theirs != mine:
                raise Disagrees(
                    "conditions",
                    f"{run_path.relative_to(directory)} gives {'.'.join(keys)} {theirs!r}, "
                    f"results/conditions.json {mine!r}",
                )
        runs += 1
    pins = _lock(directory, ours.get("packages") or {})
    return (
        f"fingerprint.json is its fields' and results/conditions.json's; the "
        f"{plural(runs, 'run')}' conditions name its machine; {pins}"
    )


def _lock(directory: Path, packages: dict) -> str:
    """requirements.lock: pins only (a line that installs from elsewhere is named), each at
    the version the conditions recorded where they recorded one."""
    path = directory / LOCK
    if not path.exists():
        return f"no {LOCK} shipped"
    versions = {k.lower(): str(v).split("+")[0] for k, v in packages.items() if v}
    count = 0
    for number, line in enumerate(path.read_text().splitlines(), 1):
        _torch_build(line, str(packages.get("torch") or ""))
        text = line.split(" #")[0].strip().removesuffix("\\").strip()
        if not text or text.startswith("#") or text.startswith("--hash="):
            continue
        matched = PIN.fullmatch(text.split(" --hash=")[0].strip())
        if matched is None:
            raise Disagrees(
                "conditions",
                f"{LOCK}: line {number} is not a pin 'name==version' ({text[:60]!r}): "
                "it installs from elsewhere",
            )
        package, version = matched.group(1).lower(), matched.group(3)
        if package in versions and versions[package] != version:
            raise Disagrees(
                "conditions",
                f"{LOCK} pins {package}=={version}, results/conditions.json records "
                f"{versions[package]}",
            )
        count += 1
    return f"{LOCK}'s {plural(count, 'pin')} are the recorded versions"


def _torch_build(line: str, recorded: str) -> None:
    """The build the lock's header names for torch (report.lock), against the recorded one."""
    named = TORCH_BUILD.match(line)
    if named and recorded and named.group(1) != recorded:
        raise Disagrees(
            "conditions",
            f"{LOCK} names torch {named.group(1)}, results/conditions.json records {recorded}",
        )


def runs(directory: Path) -> str:
    """complete.json and process.jsonl against each run's chain, where the chain has a line
    for their step; a finished chain without complete.json named."""
    count = records = 0
    for run_dir in sorted((directory / workspace.RUNS).glob("*/*")):
        chain = {line["step"]: line for line in workspace.read_hashes(run_dir)}
        if not chain:
            continue
        name = run_dir.relative_to(directory).as_posix()
        _complete(run_dir, name, chain)
        for record in workspace.read_process(run_dir):
            line = chain.get(record.get("step"))
            if line is None:
                continue
            for key in ("loss_chain_sha256", "updates"):
                if key in record and key in line and record[key] != line[key]:
                    raise Disagrees(
                        "runs",
                        f"{name}/{workspace.PROCESS}: step {record['step']}'s {key} is not "
                        f"its {workspace.HASHES} line's",
                    )
            records += 1
        count += 1
    return (
        f"{plural(count, 'run')}' complete.json and {plural(records, 'process record')} at "
        "chain steps agree with their chains (a loss value itself: verify --rerun)"
    )


def _complete(run_dir: Path, name: str, chain: dict[int, dict]) -> None:
    last = chain[max(chain)]
    done = _json(run_dir / workspace.COMPLETE)
    if not done:
        steps = _lookup(_json(run_dir / workspace.RUN_CONFIG), "config.train.steps")
        if steps == last["step"]:
            raise Disagrees(
                "runs",
                f"{name}: its chain reaches the last step ({steps:,}) but "
                f"{workspace.COMPLETE} is missing (removed?)",
            )
        return
    for key in ("step", "updates", "loss_chain_sha256"):
        if done.get(key) != last.get(key):
            raise Disagrees(
                "runs",
                f"{name}/{workspace.COMPLETE}: {key} {done.get(key)!r}, its chain's last line "
                f"{last.get(key)!r}",
            )


def _json(path: Path) -> dict:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def checker(directory: Path) -> str:
    """Which reprodqn runs this check: the bundle's own wheel cannot vouch for that wheel
    (one altered to say "consistent" would say it), so the line says what does."""
    from reprodqn.core import packaged
    from reprodqn.report.wheel import package_tree

    found = wheel_entries(directory)
    ours = package_tree()
    own = (
        found is not None
        and all(found[1].get(entry) == data for entry, data in ours.items())
        and {e for e in found[1] if e.startswith("reprodqn/")} == set(ours)
    )
    if own:
        return (
            f"checked by the bundle's own wheel (reprodqn {packaged.version()}): it cannot "
            "vouch for itself, so this verdict is worth what the archive's SHA-256 and "
            "signature are, checked with sha256sum and ssh-keygen before installing "
            "(REPLICATE.md, step 1)"
        )
    return (
        f"checked by reprodqn {packaged.version()} from outside the bundle (its files are "
        "not the bundle's wheel's)"
    )
