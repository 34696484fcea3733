"""The select stage: a trained DQN whose max_a Q(s, a) at each candidate's end state ranks
the candidates (paper supplement), and the draw from the top. Kept apart from start_states,
which only draws and reads sequences, so the candidates stage does not depend on the
trainer. A ranker's folder holds its weights and a record of them (its game, params, steps
and chain), which the drawn file carries: one folder per game (workspace.start_state_files),
and a finished ranker is replaced only on request, as `train` replaces a run."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import torch

from reprodqn.config.params import ranker_run
from reprodqn.core import workspace
from reprodqn.core.atomic import atomic_open, read_json, write_json
from reprodqn.core.errors import InputError
from reprodqn.core.progress import report_training
from reprodqn.determinism.checkpoints import load_weights, read_metadata
from reprodqn.determinism.rng import GENERATOR, stream
from reprodqn.dqn.network import q_values
from reprodqn.evaluation.protocol import Protocol, end_state_histories, load_network
from reprodqn.evaluation.start_states import BREAKOUT_ACTIONS, document
from reprodqn.training.loop import train


def prepare_ranker(params, out: Path, restart: bool = False) -> dict:
    """Train the ranking DQN (or adopt `ranker.checkpoint`) into out/RANKER_WEIGHTS, with
    out/RANKER_RECORD saying where its weights came from: its game, its params, its steps
    and its chain to the checkpoint used. A finished ranker of another game or other params
    in `out` is kept unless `restart`."""
    out, game = Path(out), params.env.game
    config = None if params.ranker.checkpoint else ranker_run(params)
    if config is None:
        wanted = {"game": game, "source": str(params.ranker.checkpoint)}
    else:
        wanted = {"game": game, "source": "trained", "config_digest": config.digest()}
    _keep_another(out, wanted, config, restart)
    if config is None:
        source = Path(str(params.ranker.checkpoint))
        history = _adopted_history(source)
    else:
        run = out / "run"
        report_training(train(config, run, restart=restart), "ranker")
        source = workspace.checkpoint_path(run, config.train.steps)
        history = {"steps": config.train.steps, **_run_history(run, config.train.steps)}
    _, meta = load_weights(source)
    with atomic_open(out / workspace.RANKER_WEIGHTS, "wb") as handle, open(source, "rb") as src:
        shutil.copyfileobj(src, handle)
    record = {
        **wanted,
        **history,
        "weights_sha256": meta["weights_sha256"],
        "network": meta["network"],
    }
    write_json(out / workspace.RANKER_RECORD, record)
    return record


def _keep_another(out: Path, wanted: dict, config, restart: bool) -> None:
    """A finished ranker in `out` of another game, other params or another source is kept,
    in one line naming --restart; with it, its weights and record go (its run is discarded
    by `train` itself, or resumed where it is this ranker's)."""
    path = out / workspace.RANKER_RECORD
    if not path.is_file():
        return
    held = read_json(path, "ranker record")
    held_as = {key: held.get(key, "breakout" if key == "game" else None) for key in wanted}
    if held_as == wanted:
        return
    if restart:
        path.unlink()
        (out / workspace.RANKER_WEIGHTS).unlink(missing_ok=True)
        return
    changed = ""
    recorded = held.get("run_config", {}).get("config")
    if config is not None and isinstance(recorded, dict):
        from reprodqn.determinism.provenance import differing_values

        found = differing_values(config.model_dump(mode="json"), recorded, ("now", "recorded"))
        changed = f": {'; '.join(found)}" if found else ""
    raise InputError(
        f"{out}: holds the finished ranker of {_described(held_as)}, not of "
        f"{_described(wanted)}{changed}; rerun with --restart to discard it, or rank into "
        "another folder with --out"
    )


def _described(identity: dict) -> str:
    if identity.get("source") == "trained":
        how = f"trained with params digest {str(identity.get('config_digest'))[:12]}"
    else:
        how = f"adopted from {identity.get('source')}"
    return f"{identity.get('game')} ({how})"


def _run_history(run: Path, step: int) -> dict:
    """A run's part in a ranker's record: the checkpoint used, the chain to it, the config."""
    return {
        "checkpoint_step": step,
        "chain": [line for line in workspace.read_hashes(run) if line["step"] <= step],
        "run_config": read_json(run / workspace.RUN_CONFIG, "run config"),
    }


def _adopted_history(source: Path) -> dict:
    """An adopted checkpoint's step; with its run's chain where it sits in a run's folder of
    checkpoints and that chain reaches it with its weights."""
    meta = read_metadata(source)
    if meta.get("step") is None:
        return {}
    step, run = int(meta["step"]), source.parent.parent
    if source.parent.name != workspace.CHECKPOINTS or not (run / workspace.RUN_CONFIG).is_file():
        return {"checkpoint_step": step}
    history = _run_history(run, step)
    last = history["chain"][-1] if history["chain"] else {}
    if last.get("step") != step or last.get("weights_sha256") != meta.get("weights_sha256"):
        return {"checkpoint_step": step}
    return history


def ranker_record(ranker: Path, game: str) -> dict:
    """What select records of its ranker: the record beside its weights (its game, params,
    steps and chain), checked to be these weights' and, where it names one, this game's; a
    weights file alone is recorded as its name and step."""
    ranker = Path(ranker)
    meta = read_metadata(ranker)
    beside = ranker.with_name(workspace.RANKER_RECORD)
    if not beside.is_file():
        step = meta.get("step")
        alone = {"source": ranker.name, "weights_sha256": meta.get("weights_sha256")}
        return alone if step is None else {**alone, "checkpoint_step": int(step)}
    record = read_json(beside, "ranker record")
    if record.get("weights_sha256") != meta.get("weights_sha256"):
        raise InputError(
            f"{beside}: describes other weights than {ranker}'s (rerun `reprodqn ranker`)"
        )
    if record.get("game", game) != game:
        raise InputError(
            f"{ranker}: the ranker of {record['game']!r}, but env.game is {game!r} (rank "
            f"with {game}'s: `reprodqn ranker --set env.game={game}`)"
        )
    return record


def max_q_of_end_states(ranker: Path, sequences, params) -> tuple[np.ndarray, str]:
    """max_a Q(s, a) at the end of each start sequence, and the ranker's weights hash."""
    net = load_network(ranker, None, torch.device("cpu"))  # checks its embedded hash
    protocol = Protocol.for_run(params, params.evaluation)
    histories = end_state_histories(sequences, protocol)
    return q_values(net, histories, protocol.chunk).max(axis=1), read_metadata(ranker)[
        "weights_sha256"
    ]


# ---------------------------------------------------------------------------------------------
# Ranking and selection


def rank(max_q: np.ndarray) -> np.ndarray:
    """Ranks 1..N by max-Q, highest first; ties keep candidate order."""
    order = np.argsort(-max_q, kind="stable")
    ranks = np.empty(len(max_q), dtype=np.int64)
    ranks[order] = np.arange(1, len(max_q) + 1)
    return ranks


def select(
    candidates: dict,
    max_q: np.ndarray,
    config,
    ranker: dict,
    candidates_sha256: str,
) -> tuple[dict, str]:
    """The start-sequence file of `selected` drawn from the `top_k` by max-Q, recording the
    ranker (`ranker`: its weights_sha256, and its game, steps and chain where known), and
    ranking.csv's text: every candidate's max-Q and rank."""
    sequences = candidates["sequences"]
    ranks = rank(max_q)
    lines = ["index,length,max_q,rank"]
    lines += [f"{i},{len(s)},{float(max_q[i])!r},{ranks[i]}" for i, s in enumerate(sequences)]
    top = np.argsort(ranks, kind="stable")[: config.top_k]  # candidate indices, best first
    rng = stream(config.selection_seed)
    chosen = sorted(int(i) for i in rng.choice(top, size=config.selected, replace=False))
    doc = document(
        [sequences[i] for i in chosen],
        {
            "stage": "select",
            "candidate_indices": chosen,
            "candidates_sha256": candidates_sha256,
            "ranker_weights_sha256": ranker["weights_sha256"],
            "ranker": ranker,
            "ranking": f"max_a Q(s, a) at the end state; top {config.top_k} of {len(sequences)}",
            "selection": f"{config.selected} drawn without replacement from the top "
            f"{config.top_k}: {GENERATOR}.choice",
            "selection_seed": config.selection_seed,
            "candidates_seed": candidates["provenance"].get("seed"),
        },
        candidates.get("game", "breakout"),
        tuple(candidates.get("action_set", BREAKOUT_ACTIONS)),
    )
    return doc, "\n".join(lines) + "\n"
