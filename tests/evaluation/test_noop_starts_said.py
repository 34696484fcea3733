"""A game without start states is evaluated from no-op starts, not the paper's protocol: the
eval env says so once, in a warning, and `evaluate` and `evaluate-policy` in the lines that
give its scores (before, only eval.json said it)."""

from __future__ import annotations

import json
import warnings

import gymnasium as gym
import pytest
import torch

from reprodqn import envs
from reprodqn.config.params import load_params
from reprodqn.core import workspace
from reprodqn.determinism.checkpoints import save_weights
from reprodqn.dqn.network import QNetwork
from reprodqn.evaluation.foreign import evaluate_policy_file
from reprodqn.evaluation.stage import evaluate_stage
from tests.helpers import PARAMS

NOOPS = "from no-op starts (no start states: not the paper's protocol)"
SEAQUEST = [
    "env.game=seaquest",
    "evaluation.start_sequences=none",
    "evaluation.episodes=2",
    "evaluation.max_frames=120",
]


def test_the_eval_env_warns_once_where_no_start_states_are_its_default(monkeypatch):
    monkeypatch.setattr(envs.atari, "_NOOP_STARTS_SAID", set())
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        for _ in range(3):  # as a vector env makes its copies
            gym.make(envs.env_id("seaquest"), mode="eval")
        gym.make(envs.env_id("tennis"), mode="eval", start_sequences="none")  # chosen: quiet
        gym.make(envs.env_id("pong"), mode="eval")  # the package's start states
        gym.make(envs.env_id("seaquest"), mode="train")  # no-op starts are training's own
    (warning,) = [w for w in said if "start states" in str(w.message)]
    assert str(warning.message).startswith(
        "reprodqn/Seaquest-v0: neither the package nor this directory has start states for "
        "seaquest (start_sequences/seaquest.json, which `reprodqn select --set "
        "env.game=seaquest` writes), so each eval episode starts at the reset screen after "
        "1..30 no-ops from its own seed: not the paper's protocol"
    )


def test_evaluate_says_no_op_starts_beside_each_score_and_when_already_done(tmp_path, capsys):
    params = load_params(PARAMS, SEAQUEST)
    run_dir = workspace.run_dir(tmp_path / "runs", "deterministic", 0)
    meta = {"network": "nips", "n_actions": 18, "history_length": 4, "screen_size": 84}
    sha = save_weights(
        workspace.checkpoint_path(run_dir, 0), QNetwork("nips", 18, 4, 84).state_dict(), meta
    )
    config = {"config": {"env": {"game": "seaquest"}}, "digest": "d", "fingerprint": "f"}
    (run_dir / workspace.RUN_CONFIG).write_text(json.dumps(config))
    line = {"step": 0, "weights_sha256": sha, "loss_chain_sha256": "l"}
    (run_dir / workspace.HASHES).write_text(json.dumps(line) + "\n")
    (run_dir / workspace.COMPLETE).write_text("{}")
    for _ in range(2):
        evaluate_stage(params, "deterministic", 0, tmp_path / "runs", tmp_path / "evals", None, 1)
    scored, again = capsys.readouterr().err.strip().splitlines()[-2:]
    assert f"step 0: mean score 0.00 {NOOPS} (" in scored
    assert again == f"evaluate deterministic/0: already evaluated {NOOPS}"


@pytest.mark.filterwarnings("ignore:`torch.jit.:DeprecationWarning")
def test_evaluate_policy_says_no_op_starts_in_its_summary(tmp_path, capsys):
    class Noop(torch.nn.Module):
        def forward(self, frames):
            return torch.zeros(frames.shape[0], dtype=torch.long)

    torch.jit.save(torch.jit.script(Noop()), tmp_path / "noop.pt")
    evaluate_policy_file(tmp_path / "noop.pt", tmp_path / "out", load_params(PARAMS, SEAQUEST))
    summary = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"on 2 episodes: mean score 0.00 {NOOPS}; its game not checked " in summary
