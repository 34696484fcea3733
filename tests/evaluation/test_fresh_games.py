"""A checkpoint's episodes on Seaquest, where ALE's reset_game alone keeps part of the last
game: each episode's result is a fresh game's, with 1 worker or 2 and in any order, though
`evaluate` reuses each worker's emulators across episodes and checkpoints."""

from __future__ import annotations

import torch

from reprodqn.core.workspace import read_eval
from reprodqn.determinism.checkpoints import save_weights
from reprodqn.dqn.network import QNetwork
from reprodqn.evaluation.protocol import Emulators, EpisodeSpec, Evaluator, Protocol, play
from reprodqn.evaluation.stage import evaluate_run, evaluation_digest

PROTOCOL = Protocol("seaquest", 4, 4, 84, 3000, 0.0, 2, "linear", "authors")
DOWNRIGHT = 8  # of Seaquest's 18 actions: the game ends in about 1,500 frames
# no-op starts whose result a reused emulator changed from its fourth game on (unfixed)
SPECS = [EpisodeSpec(0, noops=7), EpisodeSpec(1, noops=19)]


class Always(torch.nn.Module):
    """The checkpoints' policy without their forward pass (the same action every step)."""

    def __init__(self):
        super().__init__()
        self.q = torch.nn.Parameter(torch.eye(18)[DOWNRIGHT], requires_grad=False)

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        return self.q.expand(len(frames), -1)


def checkpoint_tensors(bias: float) -> dict[str, torch.Tensor]:
    """A Q-network whose Q-values are its output bias: it always picks DOWNRIGHT."""
    net = QNetwork("nips", 18, 4, 84)
    with torch.no_grad():
        for p in net.parameters():
            p.zero_()
        net.layers[-1].bias[DOWNRIGHT] = bias
    return dict(net.state_dict())


def outcomes(results) -> list[tuple[int, int, int]]:
    return [(r.episode, r.score, r.frames) for r in results]


def test_seaquest_episodes_are_fresh_games_with_any_workers_and_in_any_order(tmp_path):
    run_dir, hashes = tmp_path / "run", []
    for step in (0, 100, 200, 300):  # four checkpoints: a fourth game on each emulator
        path = run_dir / "checkpoints" / f"step-{step:09d}.safetensors"
        meta = {"step": step, "network": "nips", "n_actions": 18}
        meta |= {"history_length": 4, "screen_size": 84}
        digest = save_weights(path, checkpoint_tensors(1.0 + step), meta)
        hashes.append({"step": step, "weights_sha256": digest})
    digest = evaluation_digest(PROTOCOL, SPECS, "s", hashes)
    files = {}
    for workers in (1, 2):
        with Evaluator(PROTOCOL, None, workers) as evaluator:
            out = tmp_path / f"workers-{workers}"
            list(evaluate_run(run_dir, out, hashes, evaluator, SPECS, digest))
        files[workers] = (out / "eval.csv").read_bytes()
    assert files[1] == files[2]
    fresh = outcomes(play(Always(), SPECS, PROTOCOL, None))  # an emulator each, new
    rows = [(int(r["episode"]), int(r["score"]), int(r["frames"])) for r in read_eval(out)]
    assert rows == fresh * 4
    one = Emulators(PROTOCOL)  # either episode second or fourth on the same emulator
    in_turn = [play(Always(), [spec], PROTOCOL, None, one)[0] for spec in SPECS * 2]
    assert outcomes(in_turn) == fresh * 2
