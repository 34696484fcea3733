"""`reprodqn evaluate-policy` on TorchScript policies: Q-values or actions, each scored by
the evaluator exactly as the same network's own checkpoint is; a file that is not such a
policy is one line and writes nothing."""

from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest
import torch

from reprodqn.core import workspace
from reprodqn.dqn.network import build_q_network
from reprodqn.evaluation import start_states
from reprodqn.evaluation.protocol import EpisodeSpec, Protocol, play
from tests.helpers import PARAMS, ROOT, cli_env

EPISODES, CAP = 4, 800
# torch 2.13 deprecates TorchScript's own API, which these tests must use to make policies
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.:DeprecationWarning")


class Greedy(torch.nn.Module):
    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, frames):
        return self.net(frames).argmax(dim=1)


class ThreeActions(torch.nn.Module):
    def forward(self, frames):
        return frames.float().flatten(1)[:, :3]


def command(policy, out) -> list[str]:
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
        "--workers",
        "2",
        "--start-sequences",
        str(ROOT / "start_sequences" / "authors.json"),
    ]


@pytest.fixture(scope="module")
def net():
    return build_q_network("nature", 4, 4, 84, torch.Generator().manual_seed(11)).eval()


@pytest.mark.parametrize("output", ["q-values", "actions"])
def test_a_torchscript_policy_is_scored_as_its_network(net, tmp_path, output):
    example = torch.zeros(16, 4, 84, 84, dtype=torch.uint8)
    module = net if output == "q-values" else Greedy(net)
    torch.jit.save(torch.jit.trace(module, example), tmp_path / "policy.pt")
    result = subprocess.run(
        command(tmp_path / "policy.pt", tmp_path / "out"),
        capture_output=True,
        text=True,
        env=cli_env(),
    )
    assert result.returncode == 0, result.stderr
    with open(tmp_path / "out" / workspace.EVAL_CSV) as handle:
        ours = [(int(r["score"]), int(r["frames"])) for r in csv.DictReader(handle)]
    sequences = start_states.load(ROOT / "start_sequences" / "authors.json")["sequences"]
    protocol = Protocol("breakout", 4, 4, 84, CAP, 0.0, 16, "linear", "authors")
    expected = play(
        net, [EpisodeSpec(k, start_sequence=k) for k in range(EPISODES)], protocol, sequences
    )
    assert ours == [(r.score, r.frames) for r in expected]
    assert len(set(ours)) > 1


def test_a_file_that_is_no_such_policy_is_one_line_and_writes_nothing(tmp_path):
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not torchscript")
    three = tmp_path / "three.pt"
    torch.jit.save(torch.jit.script(ThreeActions()), three)
    torch.jit.save(torch.jit.script(Greedy(ThreeActions())), tmp_path / "greedy.pt")
    unknown = command(tmp_path / "greedy.pt", tmp_path / "out-unknown")
    unknown[unknown.index("--start-sequences") + 1] = str(tmp_path / "theirs.json")
    result = subprocess.run(unknown, capture_output=True, text=True, env=cli_env())
    assert result.returncode == 2 and "theirs.json" in result.stderr
    assert result.stderr.count("\n") == 1 and not (tmp_path / "out-unknown").exists()
    for policy, message in (
        (garbage, "not a TorchScript module"),
        (three, "a policy of 3 actions, but env.game breakout has 4"),
        (tmp_path / "missing.pt", "missing.pt: not found"),
    ):
        out = tmp_path / f"out-{policy.stem}"
        result = subprocess.run(command(policy, out), capture_output=True, text=True, env=cli_env())
        assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
        assert message in result.stderr and not out.exists()


class Always(torch.nn.Module):
    """One action on every frame that shows the game (the all-black frames of the file
    check get action 0)."""

    def __init__(self, action: int):
        super().__init__()
        self.action = action

    def forward(self, frames):
        return (frames.flatten(1).amax(1) > 0).long() * self.action


def test_a_policy_that_returns_actions_plays_any_games_actions_and_no_other(tmp_path):
    """Pong has 6 actions: its last is played (it was one-hot over Breakout's 4, and
    failed); an action the game lacks is one line naming it, and writes nothing."""
    pong = [*command(tmp_path / "policy.pt", tmp_path / "out"), "--set", "env.game=pong"]
    pong[pong.index("--start-sequences") + 1] = str(ROOT / "start_sequences" / "pong.json")
    for action, out in ((5, "out-5"), (6, "out-6")):
        torch.jit.save(torch.jit.script(Always(action)), tmp_path / f"always-{action}.pt")
        argv = [
            str(tmp_path / f"always-{action}.pt") if a.endswith("policy.pt") else a for a in pong
        ]
        argv[argv.index("--out-dir") + 1] = str(tmp_path / out)
        result = subprocess.run(argv, capture_output=True, text=True, env=cli_env())
        if action == 5:
            assert result.returncode == 0, result.stderr
            assert (tmp_path / out / workspace.EVAL_CSV).exists()
        else:
            assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
            assert "returned action 6; expected 0 to 5 (the game's 6 actions)" in result.stderr
            assert not (tmp_path / out).exists()


class SixQValues(torch.nn.Module):
    """A Pong-sized policy: six Q-values, the first the largest."""

    def forward(self, frames):
        return torch.nn.functional.one_hot(
            torch.zeros(frames.shape[0], dtype=torch.long), 6
        ).float()


def test_game_picks_the_games_packaged_start_states_and_another_games_policy_is_named(tmp_path):
    """`evaluate-policy --game pong` from outside any workspace plays Pong's own start
    states (it needed --set env.game=pong and --start-sequences too); without it, Pong's
    policy on Breakout is one line naming both action counts (it was "shape (6,512) vs
    (4,512)", naming no game)."""
    torch.jit.save(torch.jit.script(SixQValues()), tmp_path / "pong.pt")
    base = [sys.executable, "-m", "reprodqn.cli", "evaluate-policy", str(tmp_path / "pong.pt")]
    small = ["--set", "evaluation.episodes=2", "--set", "evaluation.max_frames=200"]
    argv = [*base, "--out-dir", str(tmp_path / "out"), "--game", "pong", *small, "--workers", "1"]
    done = subprocess.run(argv, capture_output=True, text=True, env=cli_env(), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    used = json.loads((tmp_path / "out" / workspace.EVAL_JSON).read_text())["start_states"]
    assert used["file"].endswith("start_sequences/pong.json")
    assert (
        used["sequences_sha256"]
        == start_states.load(ROOT / "start_sequences" / "pong.json")["sequences_sha256"]
    )
    argv = [*base, "--out-dir", str(tmp_path / "breakout"), *small]
    done = subprocess.run(argv, capture_output=True, text=True, env=cli_env(), cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "a policy of 6 actions, but env.game breakout has 4 (" in done.stderr
    assert "--game NAME" in done.stderr and not (tmp_path / "breakout").exists()


def test_an_sb3_model_of_another_games_actions_is_named_as_such(tmp_path):
    import io
    import zipfile

    from reprodqn.core.errors import InputError
    from reprodqn.dqn.network import QNetwork
    from reprodqn.evaluation.foreign import SB3_LAYERS, sb3_network

    ours = QNetwork("nature", 6, 4, 84).state_dict()
    state = {
        f"{theirs}.{kind}": ours[f"{mine}.{kind}"]
        for theirs, mine in SB3_LAYERS.items()
        for kind in ("weight", "bias")
    }
    buffer = io.BytesIO()
    torch.save(state, buffer)
    with zipfile.ZipFile(tmp_path / "pong.zip", "w") as archive:
        archive.writestr("policy.pth", buffer.getvalue())
    with pytest.raises(InputError, match="a policy of 6 actions, but env.game breakout has 4"):
        sb3_network(tmp_path / "pong.zip", 4, 4, 84, "breakout")
    assert sb3_network(tmp_path / "pong.zip", 6, 4, 84, "pong") is not None
