"""The select stage's ranker: a trained DQN whose max_a Q(s, a) at each candidate's end
state ranks the candidates (paper supplement). Kept apart from start_states, which only
draws and reads sequences, so the candidates stage does not depend on the trainer."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import torch

from reprodqn.config.params import ranker_run
from reprodqn.core import workspace
from reprodqn.core.atomic import atomic_open, write_json
from reprodqn.core.progress import report_training
from reprodqn.determinism.checkpoints import load_weights, read_metadata
from reprodqn.dqn.network import q_values
from reprodqn.evaluation.protocol import Protocol, end_state_histories, load_network
from reprodqn.training.loop import train


def prepare_ranker(params, out: Path) -> dict:
    """Train the ranking DQN (or adopt `ranker.checkpoint`) into out/ranker.safetensors,
    with out/ranker.json saying where its weights came from."""
    if params.ranker.checkpoint:
        source = Path(params.ranker.checkpoint)
        _, meta = load_weights(source)
        origin: dict[str, object] = {"source": str(source)}
    else:
        config = ranker_run(params)
        run = out / "run"
        report_training(train(config, run, restart=True), "ranker")
        source = workspace.checkpoint_path(run, config.train.steps)
        _, meta = load_weights(source)
        origin = {
            "source": "trained",
            "steps": config.train.steps,
            "config_digest": config.digest(),
        }
    with atomic_open(out / "ranker.safetensors", "wb") as handle, open(source, "rb") as src:
        shutil.copyfileobj(src, handle)
    record = {**origin, "weights_sha256": meta["weights_sha256"], "network": meta["network"]}
    write_json(out / "ranker.json", record)
    return record


def max_q_of_end_states(ranker: Path, sequences, params) -> tuple[np.ndarray, str]:
    """max_a Q(s, a) at the end of each start sequence, and the ranker's weights hash."""
    net = load_network(ranker, None, torch.device("cpu"))  # checks its embedded hash
    protocol = Protocol.for_run(params, params.evaluation)
    histories = end_state_histories(sequences, protocol)
    return q_values(net, histories, protocol.chunk).max(axis=1), read_metadata(ranker)[
        "weights_sha256"
    ]
