"""A policy carries its game where its format allows (issue 72, item 5): a TorchScript
file's extra file `game`, an SB3 zip's `env_id` or `game` saved with model.save(include=).
A Seaquest policy asked to play Montezuma's Revenge (18 actions each) was scored, exit 0;
now the mismatch is one line naming both, and a file that names no game is said to be
unchecked. A PPO zip is refused pointing to the TorchScript route."""

from __future__ import annotations

import io
import json
import zipfile

import pytest
import torch

from reprodqn.config.params import load_params
from reprodqn.core.errors import InputError
from reprodqn.dqn.network import QNetwork
from reprodqn.evaluation.foreign import SB3_LAYERS, check_named_game, evaluate_policy_file
from tests.helpers import PARAMS

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.:DeprecationWarning")
DQN_POLICY = {"__module__": "stable_baselines3.dqn.policies"}


class Zeros(torch.nn.Module):
    def forward(self, frames):
        return torch.zeros(frames.shape[0], 18)


def scripted(path, game: str | None):
    files = {"game": game} if game else {}
    torch.jit.save(torch.jit.script(Zeros()), str(path), _extra_files=files)
    return path


def sb3_zip(path, data: dict):
    ours = QNetwork("nature", 18, 4, 84).state_dict()
    state = {
        f"{theirs}.{kind}": ours[f"{mine}.{kind}"]
        for theirs, mine in SB3_LAYERS.items()
        for kind in ("weight", "bias")
    }
    buffer = io.BytesIO()
    torch.save(state, buffer)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("policy.pth", buffer.getvalue())
        archive.writestr("data", json.dumps(data))
    return path


def test_a_policy_naming_its_game_is_refused_on_another_with_as_many_actions(tmp_path):
    policies = [
        scripted(tmp_path / "seaquest.pt", "seaquest"),
        sb3_zip(
            tmp_path / "seaquest.zip", {"policy_class": DQN_POLICY, "env_id": "ALE/Seaquest-v5"}
        ),
    ]
    for policy in policies:
        with pytest.raises(InputError) as refused:
            check_named_game(policy, "montezuma_revenge")
        assert str(refused.value).startswith(f"{policy}: a policy of ")
        assert "but env.game is montezuma_revenge (evaluate it on the game" in str(refused.value)
        assert "checked" in check_named_game(policy, "seaquest")


def test_the_summary_says_whether_the_game_was_checked(tmp_path, capsys):
    params = load_params(
        PARAMS,
        ["env.game=seaquest", "evaluation.episodes=1", "evaluation.max_frames=40"]
        + ["evaluation.start_sequences=none"],
    )
    for name, game, said in [
        ("named.pt", "SeaquestNoFrameskip-v4", "its game seaquest checked (the file names "),
        ("unnamed.pt", None, "its game not checked (the file names none; a TorchScript file"),
    ]:
        policy = scripted(tmp_path / name, game)
        done = evaluate_policy_file(policy, tmp_path / name.replace(".", "-"), params)
        assert said in done["game"] and said in capsys.readouterr().err


def test_an_sb3_zip_of_another_algorithm_points_to_the_torchscript_route(tmp_path):
    from reprodqn.evaluation.foreign import sb3_network

    ppo = {"policy_class": {"__module__": "stable_baselines3.common.policies"}}
    with pytest.raises(InputError) as refused:
        sb3_network(sb3_zip(tmp_path / "ppo.zip", ppo), 18, 4, 84, "seaquest")
    line = str(refused.value)
    assert "a policy of stable_baselines3.common.policies, not a Stable-Baselines3 DQN's" in line
    assert "another model goes through TorchScript: a .pt mapping uint8 (N, 4, 84, 84)" in line
