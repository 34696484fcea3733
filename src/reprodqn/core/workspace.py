"""Where a study keeps its files, and how its records are read back.

One owner for every path and record format that more than one stage uses: training,
evaluation, the report, verify, tracking and the bundle all reach a run's files through
here, so those stages depend on this layout, not on each other's source.

  runs/<group>/<run>/         a training run (training.loop says what it holds)
  evaluations/<group>/<run>/  eval.csv, eval.json (its own out: DVC forbids nesting)
  results/                    conditions.json, fingerprint.json, sbom.cdx.json
  reports/                    the report stage's output
  start_sequences/            candidates, ranking, the selected and imported sequences
  ranker/                     the DQN that ranks Breakout's candidates (ranker-<game>/ another's)
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

from reprodqn.core.atomic import read_json
from reprodqn.core.errors import InputError

RUNS = Path("runs")
EVALUATIONS = Path("evaluations")
RESULTS = Path("results")
REPORTS = Path("reports")
START_SEQUENCES = Path("start_sequences")
RANKER = Path("ranker")  # the select stage's ranking DQN
RESUME_POINTS = Path("resume-points")  # made for a bundle: `reprodqn resume-point`
SCRATCH = Path("build")  # what forensics retrains and writes on the way: never a result
RESULT_DIRS = (
    START_SEQUENCES,
    RESULTS,
    EVALUATIONS,
    REPORTS,
    RESUME_POINTS,
)  # what a bundle ships whole

# record names: every module names these files through here, never by a literal
CHECKPOINTS = "checkpoints"  # a run's folder of weight checkpoints
RESUME = "resume"  # a run's folder of resume points
HASHES = "hashes.jsonl"  # a run's hash chain, one line per checkpoint
PROCESS = "process.jsonl"  # a run's process metrics, one line per log_every steps
RUN_CONFIG = "config.json"  # a run's resolved config with its digest and fingerprint
CONDITIONS = "conditions.json"  # the experimental conditions (a run's, or results/)
FINGERPRINT = "fingerprint.json"  # results/: what of the conditions changes numbers
SBOM = "sbom.cdx.json"  # results/: the CycloneDX bill of materials
EVALUATION_STATES = "evaluation_states.json"  # results/: the start states evaluation plays
DETERMINISM = "determinism.json"  # a run's numerics settings as applied
COMPLETE = "complete.json"  # a finished run's last counters
EVAL_CSV = "eval.csv"  # an evaluation: one row per checkpoint and episode
EVAL_JSON = "eval.json"  # an evaluation's digest, protocol and start states
EVAL_PROGRESS = "eval.progress.jsonl"  # an evaluation under way, checkpoint by checkpoint
AUDIT = "audit.json"  # results/: the nondeterminism audit
MANIFEST = "MANIFEST.sha256"  # a bundle's: every file's SHA-256 (sha256sum's format)
CRATE = "ro-crate-metadata.json"  # a bundle's RO-Crate: what each of its files is
SIGNATURE = "MANIFEST.sha256.sig"  # a signed bundle's: the manifest's OpenSSH signature
SIGNER = "SIGNER.pub"  # a signed bundle's: the public key it was signed with
INSTALLED = "installed.json"  # results/: the installed reprodqn a workspace ran (version, digest)
REPLICATE = "REPLICATE.md"  # a bundle's first page, which only an unpacked archive holds
RESUME_INDEX = "latest.json"  # in a resume directory: its latest point, with file hashes
CHAINS = {"weights": "weights_sha256", "losses": "loss_chain_sha256"}  # hashes.jsonl's chains
RUN_LOGS = (HASHES, PROCESS)  # a run's append-only logs, cut back on resume
# files of one run that describe it (a bundle ships these; checkpoints only on request)
RUN_RECORDS = (HASHES, PROCESS, RUN_CONFIG, CONDITIONS, DETERMINISM, COMPLETE)
PROGRESS_RECORD = "progress.json"  # a training run's latest progress line, for the study
EVAL_CSV_FIELDS = ("step", "episode", "start_sequence", "sticky_seed", "score", "frames")
ACTOR_WORKERS = "actor_workers.jsonl"  # lockstep actors: each sitting's worker processes
PROBE_CSV = "probe.csv"  # the blind-network probe per checkpoint, beside eval.csv
CANDIDATES = "candidates.json"  # start_sequences/: Breakout's candidates (GAME-candidates.json)
SELECTED = "selected.json"  # start_sequences/: Breakout's draw by the method (GAME.json)
RANKING = "ranking.csv"  # start_sequences/: each candidate's max-Q and rank (GAME-ranking.csv)
RANKER_WEIGHTS = "ranker.safetensors"  # in a ranker's folder: the weights that rank
RANKER_RECORD = "ranker.json"  # in a ranker's folder: its game, params, steps and chain


def run_dir(runs: Path, group: str, run: int) -> Path:
    return Path(runs) / group / str(run)


def eval_dir(evaluations: Path, group: str, run: int) -> Path:
    return Path(evaluations) / group / str(run)


def resume_points_dir(root: Path, group: str, run: int) -> Path:
    return Path(root) / RESUME_POINTS / group / str(run)


@dataclass(frozen=True)
class StartStateFiles:
    """A game's files of the paper's start-state method, in a workspace."""

    candidates: Path  # the candidates stage's random sequences
    ranker: Path  # the ranker's folder: its run, RANKER_WEIGHTS, RANKER_RECORD
    selected: Path  # the start states drawn, which evaluation plays
    ranking: Path  # every candidate's max-Q and rank


def game_start_sequences(game: str, root: Path = Path(".")) -> Path:
    """start_sequences/GAME.json: a game's own start states (Breakout's are the authors')."""
    return Path(root) / START_SEQUENCES / f"{game}.json"


def start_state_files(game: str) -> StartStateFiles:
    """One set of files per game, so that a second game overwrites nothing of the first:
    Breakout's as its DVC stages name them (candidates.json, ranker/, selected.json), another
    game's named by it, its draw start_sequences/GAME.json, the file `--set env.game=GAME`
    then plays (packaged.game_start_sequences_name)."""
    if game == "breakout":
        folder = START_SEQUENCES
        return StartStateFiles(folder / CANDIDATES, RANKER, folder / SELECTED, folder / RANKING)
    return StartStateFiles(
        START_SEQUENCES / f"{game}-{CANDIDATES}",
        Path(f"{RANKER}-{game}"),
        game_start_sequences(game),
        START_SEQUENCES / f"{game}-{RANKING}",
    )


def conditions_path(root: Path = Path(".")) -> Path:
    return Path(root) / RESULTS / CONDITIONS


def fingerprint_path(root: Path = Path(".")) -> Path:
    return Path(root) / RESULTS / FINGERPRINT


def sbom_path(root: Path = Path(".")) -> Path:
    return Path(root) / RESULTS / SBOM


def is_unpacked_bundle(root: Path) -> bool:
    """An unpacked bundle: its first page, or (a bundle made before it had one) its manifest
    and crate. A workspace that was bundled holds the crate, written beside its archive."""
    root = Path(root)
    return (root / REPLICATE).exists() or ((root / MANIFEST).exists() and (root / CRATE).exists())


def checkpoints_dir(run: Path) -> Path:
    """A run's weight checkpoints, one safetensors file per checkpoint step."""
    return Path(run) / CHECKPOINTS


def resume_dir(run: Path) -> Path:
    """A run's resume points: its whole state, the latest named by RESUME_INDEX."""
    return Path(run) / RESUME


def checkpoint_path(run: Path, step: int) -> Path:
    return checkpoints_dir(run) / f"step-{step:09d}.safetensors"


def read_hashes(run: Path) -> list[dict]:
    """hashes.jsonl: one line per checkpoint (step, weights and loss-chain SHA-256, updates)."""
    return _read_jsonl(Path(run) / HASHES)


def read_process(run: Path) -> list[dict]:
    """process.jsonl: one record per log_every steps (loss, epsilon, scores, loss chain)."""
    return _read_jsonl(Path(run) / PROCESS)


def _read_jsonl(path: Path) -> list[dict]:
    """A run's log, none where it has none; a torn or altered line is one line naming it
    (every record is an object with its step)."""
    if not path.exists():
        return []
    records = []
    for number, text in enumerate(path.read_text().splitlines(), 1):
        if text.strip():
            try:
                record = json.loads(text)
            except json.JSONDecodeError:
                raise InputError(f"{path}: line {number} is not JSON (corrupted?)") from None
            if not isinstance(record, dict) or not isinstance(record.get("step"), int):
                raise InputError(
                    f"{path}: line {number} is not a record with a whole-number step (corrupted?)"
                )
            records.append(record)
    return records


def read_eval(out_dir: Path) -> list[dict]:
    """eval.csv as rows of strings, one per checkpoint and episode."""
    with open(Path(out_dir) / EVAL_CSV, newline="") as handle:
        return list(csv.DictReader(handle))


def eval_scores(out_dir: Path) -> dict[int, list[float]]:
    """Per checkpoint step, the episode scores in episode order (empty if not evaluated)."""
    scores: dict[int, list[float]] = {}
    if (Path(out_dir) / EVAL_CSV).exists():
        for row in read_eval(out_dir):
            scores.setdefault(int(row["step"]), []).append(float(row["score"]))
    return scores


def current_fingerprint(root: Path = Path(".")) -> str | None:
    """The conditions fingerprint the conditions stage recorded, if it has run."""
    path = fingerprint_path(root)
    return read_json(path, "fingerprint")["fingerprint"] if path.exists() else None


def stale_reason(run: Path, digest: str, fingerprint: str | None) -> str | None:
    """Why the run in `run` does not belong to these params and conditions, or None if it
    does (also None when nothing is there yet). An unknown fingerprint is never a match."""
    config_path = Path(run) / RUN_CONFIG
    if not config_path.exists():
        return None
    recorded = read_json(config_path, "run config")
    if recorded.get("digest") != digest:
        return f"different params (digest {str(recorded.get('digest'))[:12]}, now {digest[:12]})"
    if fingerprint is None or recorded.get("fingerprint") != fingerprint:
        return (
            f"different experimental conditions (fingerprint "
            f"{str(recorded.get('fingerprint'))[:12]}, now {str(fingerprint)[:12]})"
        )
    return None


def is_finished(run: Path, digest: str, fingerprint: str | None) -> bool:
    """Complete, with these params and conditions."""
    return (
        (Path(run) / COMPLETE).exists()
        and (Path(run) / RUN_CONFIG).exists()
        and stale_reason(run, digest, fingerprint) is None
    )


def latest_resume_step(resume_dir: Path) -> int | None:
    """The step of a resume directory's latest point, from its index (files unchecked:
    resume.load checks them); None where there is none."""
    latest = Path(resume_dir) / RESUME_INDEX
    if not latest.exists():
        return None
    try:
        return int(read_json(latest, "resume point index")["step"])
    except (KeyError, ValueError, TypeError):
        raise InputError(f"{latest}: damaged resume point index (no step)") from None
