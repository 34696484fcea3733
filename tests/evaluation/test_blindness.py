"""The blind-network alarm is raised for a network blind to the screen and stays quiet for
one that learned to look (a committed checkpoint of the authors-2018 learning check)."""

from __future__ import annotations

import json

import pytest
import torch

from reprodqn.config.params import load_params, resolve_run
from reprodqn.determinism.checkpoints import weights_sha256
from reprodqn.determinism.rng import torch_generator
from reprodqn.dqn.network import build_q_network
from reprodqn.evaluation import start_states
from reprodqn.evaluation.blindness import ALARM_CHECKPOINT, alarm, read_probe, write_probe
from reprodqn.evaluation.probe import probe
from reprodqn.evaluation.protocol import Protocol, end_state_histories, load_network
from tests.helpers import PARAMS, ROOT

RUN = ROOT / "docs" / "learning" / "authors-2018"  # the learning check's committed records
LEARNED_STEP = 150_000
LEARNED = ROOT / "tests" / "data" / f"authors-2018-step{LEARNED_STEP}.safetensors"


@pytest.fixture(scope="module")
def states():
    """The end states of the authors' 100 start sequences, and the evaluation's chunk."""
    params = load_params(PARAMS, overlay=[ROOT / "presets" / "authors-2018.yaml"])
    protocol = Protocol.for_run(resolve_run(params, "deterministic", 0), params.evaluation)
    sequences = start_states.load(ROOT / params.evaluation.start_sequences)["sequences"]
    return end_state_histories(sequences, protocol), protocol.chunk


def recorded(step: int) -> dict:
    lines = [json.loads(line) for line in (RUN / "hashes.jsonl").read_text().splitlines()]
    return next(line for line in lines if line["step"] == step)


def step0_network():
    """The run's step-0 network, rebuilt from its init seed and checked against its chain."""
    net = build_q_network("nips", 4, 4, 84, torch_generator(123))
    assert weights_sha256(net.state_dict()) == recorded(0)["weights_sha256"]
    return net.eval()


def series(step0: dict, later: list[dict]) -> list[dict]:
    """Probe records at step 0 and three later checkpoints, 50K steps apart."""
    return [{"step": 0, **step0}] + [
        {"step": 50_000 * (k + 1), **found} for k, found in enumerate(later)
    ]


def test_a_network_blind_to_the_screen_raises_the_alarm(states):
    histories, chunk = states
    start = probe(step0_network(), histories, chunk)
    blind = step0_network()
    with torch.no_grad():  # the first layer sees nothing: every state gives the same Q
        blind.layers[0].weight.zero_()
    found = probe(blind, histories, chunk)
    assert found["q_spread"] == 0.0 and found["greedy_actions"] == 1
    raised = alarm(series(start, [found] * ALARM_CHECKPOINT))
    assert raised is not None and raised["step"] == 150_000 and raised["ratio"] == 0.0
    # a network that stays as it began is as blind as at step 0: raised too
    assert alarm(series(start, [start] * ALARM_CHECKPOINT))["ratio"] == 1.0


def test_a_network_that_learned_to_look_does_not(states, tmp_path):
    histories, chunk = states
    start = probe(step0_network(), histories, chunk)
    learned = probe(
        load_network(LEARNED, recorded(LEARNED_STEP)["weights_sha256"], torch.device("cpu")),
        histories,
        chunk,
    )
    assert learned["q_spread"] > 2 * start["q_spread"] and learned["greedy_actions"] > 1
    records = series(start, [start, start, learned])  # judged at the third checkpoint only
    assert alarm(records) is None
    write_probe(tmp_path, records)
    assert read_probe(tmp_path) == records  # probe.csv round-trips exactly
    assert alarm(records[:ALARM_CHECKPOINT]) is None  # too few checkpoints: not judged
