"""Stable-Baselines3 as a real client of the environment: its DQN learns the same
parameters twice from one seed, and `reprodqn evaluate-policy` on its saved model scores
every episode as SB3's own `evaluate_policy` does on the eval env."""

from __future__ import annotations

import csv
import subprocess
import sys
import zipfile

import gymnasium as gym
import pytest
import torch
from stable_baselines3 import DQN
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.logger import Logger

from reprodqn.core import workspace
from reprodqn.envs import atari
from tests.helpers import PARAMS, cli_env

EPISODES, CAP = 6, 1200


def build(seed: int = 0) -> DQN:
    env = atari.AtariEnv(mode="train", reward_clip=1.0)
    model = DQN(
        "CnnPolicy",
        env,
        buffer_size=2_000,
        learning_starts=500,
        train_freq=4,
        target_update_interval=500,
        seed=seed,
        device="cpu",
    )
    model.set_logger(Logger(None, []))  # SB3's default makes a log folder in /tmp per call
    return model


def learn(seed: int = 0) -> DQN:
    return build(seed).learn(total_timesteps=1_500)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    saved = tmp_path_factory.mktemp("sb3") / "dqn.zip"
    trained = learn()
    trained.save(saved)
    return trained, saved


def test_sb3_dqn_learns_the_same_parameters_twice_from_one_seed(model):
    first, _ = model
    again = learn()
    ours, theirs = first.policy.state_dict(), again.policy.state_dict()
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[name], theirs[name]) for name in ours)
    weights = "q_net.q_net.0.weight"  # the seed reaches the model: another draws other ones
    assert not torch.equal(
        build(0).policy.state_dict()[weights], build(1).policy.state_dict()[weights]
    )


def evaluate_policy_command(policy, out, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "reprodqn.cli",
        "evaluate-policy",
        str(policy),
        "--out-dir",
        str(out),
        "--params",
        str(PARAMS),
        "--set",
        f"evaluation.episodes={EPISODES}",
        "--set",
        f"evaluation.max_frames={CAP}",
        *extra,
    ]


def test_evaluate_policy_scores_every_episode_as_sb3s_own_evaluation(model, tmp_path):
    trained, saved = model
    out = tmp_path / "out"
    result = subprocess.run(
        evaluate_policy_command(saved, out, "--workers", "2"),
        capture_output=True,
        text=True,
        env=cli_env(),
    )
    assert result.returncode == 0, result.stderr
    assert "sha256 " in result.stderr.strip().splitlines()[-1]
    with open(out / workspace.EVAL_CSV) as handle:
        rows = list(csv.DictReader(handle))
    ours = [(float(r["score"]), int(r["frames"])) for r in rows]
    env = gym.make(atari.ENV_ID, mode="eval", max_frames=CAP)  # plays episodes 0, 1, ...
    scores, lengths = evaluate_policy(
        trained,
        env,
        n_eval_episodes=EPISODES,
        deterministic=True,
        return_episode_rewards=True,
        warn=False,
    )
    theirs = [(float(s), int(n) * 4) for s, n in zip(scores, lengths, strict=True)]
    assert [int(r["episode"]) for r in rows] == list(range(EPISODES))
    assert ours == theirs
    assert len(set(ours)) > 1


def test_a_file_that_is_no_sb3_cnn_dqn_is_one_line_and_writes_nothing(model, tmp_path):
    trained, _ = model
    three_frames = tmp_path / "three-frames.zip"
    state = dict(trained.policy.state_dict())
    state["q_net.features_extractor.cnn.0.weight"] = torch.zeros(32, 3, 8, 8)
    with zipfile.ZipFile(three_frames, "w") as archive, archive.open("policy.pth", "w") as f:
        torch.save(state, f)
    text = tmp_path / "policy.zip"
    text.write_text("not a zip")
    empty = tmp_path / "empty.zip"
    with zipfile.ZipFile(empty, "w") as archive:
        archive.writestr("data", "{}")
    mlp = tmp_path / "mlp.zip"
    DQN("MlpPolicy", gym.make("CartPole-v1"), device="cpu").save(mlp)
    for policy, message in (
        (text, "not a zip file"),
        (empty, "no policy.pth in it"),
        (mlp, "no q_net.features_extractor.cnn.0.weight"),
        (three_frames, "has shape (32, 3, 8, 8), expected (32, 4, 8, 8)"),
        (tmp_path / "missing.zip", "not found"),
    ):
        out = tmp_path / f"out-{policy.stem}"
        result = subprocess.run(
            evaluate_policy_command(policy, out), capture_output=True, text=True, env=cli_env()
        )
        assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
        assert message in result.stderr and not out.exists()


@pytest.mark.parametrize("sticky_p", [0.0, 0.25], ids=["start-states", "sticky"])
def test_a_reprodqn_network_in_sb3_scores_the_evaluators_episodes(model, sticky_p):
    """A reprodqn Nature network mapped into SB3's DQN and played by SB3's evaluate_policy
    (batch-1 forwards) against the evaluator's results (chunks of 16), episode by episode."""
    from reprodqn.dqn.network import build_q_network
    from reprodqn.evaluation.foreign import SB3_LAYERS
    from reprodqn.evaluation.protocol import EpisodeSpec, Protocol, play

    trained, _ = model
    net = build_q_network("nature", 4, 4, 84, torch.Generator().manual_seed(11))
    ours = net.state_dict()
    sb3 = DQN(
        "CnnPolicy",
        atari.AtariEnv(mode="eval", max_frames=CAP, sticky_p=sticky_p),
        buffer_size=1_000,
        device="cpu",
    )
    state = sb3.policy.state_dict()
    for theirs, name in SB3_LAYERS.items():
        for kind in ("weight", "bias"):
            state[f"{theirs}.{kind}"] = ours[f"{name}.{kind}"]
    sb3.policy.load_state_dict(state)
    env = gym.make(atari.ENV_ID, mode="eval", max_frames=CAP, sticky_p=sticky_p)
    scores, lengths = evaluate_policy(
        sb3,
        env,
        n_eval_episodes=EPISODES,
        deterministic=True,
        return_episode_rewards=True,
        warn=False,
    )
    protocol = Protocol("breakout", 4, 4, 84, CAP, sticky_p, 16, "linear", "authors")
    specs = [
        EpisodeSpec(k, sticky_seed=k) if sticky_p else EpisodeSpec(k, start_sequence=k)
        for k in range(EPISODES)
    ]
    expected = play(net, specs, protocol, env.unwrapped.sequences)
    assert [(float(s), int(n) * 4) for s, n in zip(scores, lengths, strict=True)] == [
        (float(r.score), r.frames) for r in expected
    ]
