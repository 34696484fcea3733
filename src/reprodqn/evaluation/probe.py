"""The blind-network probe: a network's Q-values on the end states of the start sequences
at every checkpoint of a run (what `blindness` records and judges), computed in the
evaluation's fixed chunks with the evaluation's numerics settings."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import torch

from reprodqn.core import packaged, workspace
from reprodqn.determinism import numerics
from reprodqn.dqn.network import q_values
from reprodqn.evaluation import start_states
from reprodqn.evaluation.blindness import alarm, write_probe
from reprodqn.evaluation.protocol import EVAL_THREADS, end_state_histories, load_network
from reprodqn.evaluation.stage import EvaluatedRun


def probe(net: torch.nn.Module, histories: np.ndarray, chunk: int) -> dict:
    """Q's spread across the states, the distinct greedy actions and the mean max-Q."""
    q = q_values(net, histories, chunk).astype(np.float64)
    return {
        "q_spread": float(q.std(axis=0).mean()),
        "greedy_actions": int(len(np.unique(q.argmax(axis=1)))),
        "max_q": float(q.max(axis=1).mean()),
    }


def probe_run(
    run_dir: Path, hashes: list[dict], histories: np.ndarray, chunk: int, device: torch.device
) -> list[dict]:
    """probe() at every checkpoint of a run, each loaded against its recorded hash."""
    return [
        {
            "step": line["step"],
            **probe(
                load_network(
                    workspace.checkpoint_path(run_dir, line["step"]), line["weights_sha256"], device
                ),
                histories,
                chunk,
            ),
        }
        for line in hashes
    ]


def probe_stage(params, done: EvaluatedRun, start_sequences: Path | None) -> dict | None:
    """Probe every checkpoint of an evaluated run on the end states of the evaluation's
    start sequences (sticky groups too), write probe.csv beside eval.csv, and return the
    alarm, if raised. Cheap (one chunked forward per checkpoint), so always redone; none
    without start states."""
    device, _ = numerics.configure(
        done.config.compute.device, EVAL_THREADS, done.config.compute.deterministic_gpu
    )
    chosen = str(start_sequences or start_states.for_game(params.evaluation, done.config.env.game))
    if chosen == start_states.NONE:  # no start states, no end states to probe
        return None
    sequences = start_states.load(packaged.start_sequences(chosen))["sequences"]
    histories = end_state_histories(sequences, dataclasses.replace(done.protocol, sticky_p=0.0))
    records = probe_run(done.run_dir, done.hashes, histories, done.protocol.chunk, device)
    write_probe(done.out_dir, records)
    return alarm(records)
