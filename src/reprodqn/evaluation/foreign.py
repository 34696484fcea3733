"""Policies trained elsewhere, evaluated under the paper's protocol (`reprodqn
evaluate-policy`) by the evaluator itself (its chunks, its worker processes, its eval.csv):
a Stable-Baselines3 DQN `.zip` with `CnnPolicy`, whose Q-network is the Nature network
(NatureCNN: the same convolutions, /255 scaling and 512-unit layer), read as data into
reprodqn's own Q-network; or a TorchScript module (`.pt`, `.ts`) mapping uint8
(N, 4, 84, 84) observations to (N, n_actions) Q-values (the game's minimal action set) or
(N,) actions.

Only the zip's `policy.pth` is read, with torch.load(weights_only=True): SB3's other
members are cloudpickle, which would run code from the file.
"""

from __future__ import annotations

import io
import json
import sys
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from reprodqn.core import packaged, workspace
from reprodqn.core.atomic import no_empty_folder_left
from reprodqn.core.digests import sha256_file
from reprodqn.core.errors import InputError
from reprodqn.determinism.checkpoints import save_weights
from reprodqn.dqn.network import QNetwork
from reprodqn.evaluation import start_states
from reprodqn.evaluation.protocol import (
    TORCHSCRIPT_SUFFIXES,
    Evaluator,
)
from reprodqn.evaluation.stage import evaluate_run, evaluation_digest, protocol_episodes
from reprodqn.training.atari import minimal_action_set

if TYPE_CHECKING:
    from reprodqn.config.params import Params

SB3_MEMBER = "policy.pth"
# SB3 DQN CnnPolicy's online network -> reprodqn's Nature network (layers: conv, relu, conv,
# relu, conv, relu, flatten, linear, relu, linear)
SB3_LAYERS = {
    "q_net.features_extractor.cnn.0": "layers.0",
    "q_net.features_extractor.cnn.2": "layers.2",
    "q_net.features_extractor.cnn.4": "layers.4",
    "q_net.features_extractor.linear.0": "layers.7",
    "q_net.q_net.0": "layers.9",
}


def sb3_network(
    path: Path, n_actions: int, history_length: int, screen_size: int, game: str = "breakout"
) -> QNetwork:
    """The online Q-network of an SB3 DQN zip, in reprodqn's Nature network; one line for a
    file that is not one, or whose network does not fit these observations and the game's
    actions (naming the game)."""
    try:
        with zipfile.ZipFile(path) as archive:
            data = archive.read(SB3_MEMBER)
            _check_sb3_class(path, archive)
    except (OSError, zipfile.BadZipFile, KeyError) as error:
        reason = (
            "not found"
            if isinstance(error, FileNotFoundError)
            else (f"no {SB3_MEMBER} in it" if isinstance(error, KeyError) else "not a zip file")
        )
        raise InputError(
            f"{path}: {reason}; expected a Stable-Baselines3 DQN model saved with model.save()"
        ) from None
    try:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as error:  # any unreadable payload is bad input, named in one line
        raise InputError(
            f"{path}: {SB3_MEMBER} is not a weights file ({error})".splitlines()[0]
        ) from None
    net = QNetwork("nature", n_actions, history_length, screen_size)
    expected = net.state_dict()
    mapped = {}
    for theirs, ours in SB3_LAYERS.items():
        for kind in ("weight", "bias"):
            name, target = f"{theirs}.{kind}", f"{ours}.{kind}"
            tensor = state.get(name) if isinstance(state, dict) else None
            if tensor is None:
                raise InputError(
                    f"{path}: no {name}; expected a DQN with CnnPolicy "
                    f"(NatureCNN), the Nature network ({TORCHSCRIPT_ROUTE})"
                )
            if ours == "layers.9" and tensor.shape[1:] == expected[target].shape[1:]:
                _check_actions(path, int(tensor.shape[0]), n_actions, game)
            if tensor.shape != expected[target].shape:
                raise InputError(
                    f"{path}: {name} has shape {tuple(tensor.shape)}, expected "
                    f"{tuple(expected[target].shape)} (observations uint8 "
                    f"({history_length}, {screen_size}, {screen_size}), {n_actions} actions)"
                )
            mapped[target] = tensor.to(torch.float32)
    net.load_state_dict(mapped)
    return net.eval()


TORCHSCRIPT_ROUTE = (
    "another model goes through TorchScript: a .pt mapping uint8 (N, 4, 84, 84) "
    "observations to Q-values or actions, as docs/agents.md shows"
)
GAME_FILE = "game"  # a TorchScript file's extra file naming its game (torch.jit.save)
SB3_GAME_KEYS = ("game", "env_id")  # an SB3 zip's attributes naming it (model.save(include=))


def _sb3_data(archive: zipfile.ZipFile) -> dict:
    """An SB3 zip's `data` member: JSON (its cloudpickled values are never unpickled)."""
    try:
        data = json.loads(archive.read("data"))
    except (KeyError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _check_sb3_class(path: Path, archive: zipfile.ZipFile) -> None:
    """A zip of another SB3 algorithm (PPO, A2C...) is named as such, with the route that
    evaluates it."""
    policy = _sb3_data(archive).get("policy_class")
    module = policy.get("__module__", "") if isinstance(policy, dict) else ""
    if module and module != "stable_baselines3.dqn.policies":
        raise InputError(
            f"{path}: a policy of {module}, not a Stable-Baselines3 DQN's; {TORCHSCRIPT_ROUTE}"
        )


def named_game(path: Path) -> str | None:
    """The game a policy file names, where its format allows: a TorchScript file's extra
    file `game`, an SB3 zip's `game` or `env_id` saved with model.save(include=...)."""
    if path.suffix in TORCHSCRIPT_SUFFIXES:
        files = {GAME_FILE: ""}
        torch.jit.load(str(path), map_location="cpu", _extra_files=files)
        named = files[GAME_FILE]
        return (named.decode() if isinstance(named, bytes) else named) or None
    with zipfile.ZipFile(path) as archive:
        data = _sb3_data(archive)
    return next((data[k] for k in SB3_GAME_KEYS if isinstance(data.get(k), str)), None)


def check_named_game(path: Path, game: str) -> str:
    """The policy's own game against the one it is asked to play: a mismatch is one line
    naming both; returns what the summary says of it."""
    from reprodqn.config.games import game_named

    named = named_game(path)
    if named is None:
        return (
            "its game not checked (the file names none; a TorchScript file can: "
            f"torch.jit.save(module, path, _extra_files={{'{GAME_FILE}': '{game}'}}))"
        )
    if game_named(named) != game:
        raise InputError(
            f"{path}: a policy of {named}, but env.game is {game} (evaluate it on the game "
            "it was trained on: --game NAME)"
        )
    return f"its game {game} checked (the file names {named})"


def _check_actions(path: Path, actions: int, n_actions: int, game: str) -> None:
    """A policy's action count is the game's: another game's network is named as such."""
    if actions != n_actions:
        raise InputError(
            f"{path}: a policy of {actions} actions, but env.game {game} has {n_actions} "
            "(evaluate it on the game it was trained on: --game NAME)"
        )


def check_scripted(
    path: Path, n_actions: int, history_length: int, screen_size: int, game: str = "breakout"
) -> None:
    """A TorchScript policy that loads and answers a batch of observations with Q-values or
    actions; one line otherwise."""
    if not path.exists():
        raise InputError(f"{path}: not found")
    try:
        module = torch.jit.load(str(path), map_location="cpu").eval()
    except Exception as error:  # torch's many load errors: each is bad input, in one line
        raise InputError(f"{path}: not a TorchScript module ({error})".splitlines()[0]) from None
    shape = (2, history_length, screen_size, screen_size)
    try:
        with torch.inference_mode():
            out = module(torch.zeros(shape, dtype=torch.uint8))
    except Exception as error:  # its own code failed on our observations
        raise InputError(
            f"{path}: fails on uint8 {shape} observations ({error})".splitlines()[0]
        ) from None
    actions = out.dim() == 1 and not out.is_floating_point()
    if out.dim() == 2 and out.shape[0] == 2:
        _check_actions(path, int(out.shape[1]), n_actions, game)
    if not (actions or tuple(out.shape) == (2, n_actions)):
        raise InputError(
            f"{path}: returns shape {tuple(out.shape)} for uint8 {shape} "
            f"observations; expected (2, {n_actions}) Q-values or (2,) integer "
            "actions"
        )


def _as_checkpoint(net: QNetwork, out_dir: Path, env, n_actions: int, source: str) -> str:
    """An SB3 model's network as reprodqn's step-0 checkpoint; its weights' SHA-256."""
    metadata = {
        "step": 0,
        "network": "nature",
        "n_actions": n_actions,
        "history_length": env.history_length,
        "screen_size": env.screen_size,
        "source": source,
    }
    return save_weights(workspace.checkpoint_path(out_dir, 0), net.state_dict(), metadata)


def evaluate_policy_file(
    policy: str | Path,
    out_dir: str | Path,
    params: Params | None = None,
    start_sequences: str | Path | None = None,
    workers: int = 1,
) -> dict:
    """Evaluate a policy file under the paper's protocol (`reprodqn evaluate-policy` in
    Python): its episodes into out_dir (eval.csv, eval.json, and an SB3 model's network as
    a reprodqn checkpoint, step 0); returns the policy's SHA-256 and its mean score.

    Args:
        policy: an SB3 DQN `.zip` (CnnPolicy) or a TorchScript `.pt`/`.ts` module mapping
            uint8 (N, 4, 84, 84) to (N, n_actions) Q-values or (N,) actions.
        out_dir: where the results go (made if missing).
        params: loaded params (`config.params.load_params`); None: the package's own.
        start_sequences: a start-sequence file; None: params' (for another game than
            Breakout, its own where params keep the default: start_states.for_game).
        workers: evaluation processes; the results never depend on it.
    """
    if params is None:
        from reprodqn.config.params import load_params

        params = load_params(packaged.default_params())
    env, policy, out_dir = params.env, Path(policy), Path(out_dir)
    n_actions = len(minimal_action_set(env.game))
    shape = (n_actions, env.history_length, env.screen_size, env.game)
    scripted = policy.suffix in TORCHSCRIPT_SUFFIXES
    if scripted:
        check_scripted(policy, *shape)
    else:
        net = sb3_network(policy, *shape)
    game_said = check_named_game(policy, env.game)
    chosen = start_sequences or start_states.for_game(params.evaluation, env.game)
    protocol, specs, sequences, sequences_sha, used = protocol_episodes(
        params, params.evaluation, Path(chosen)
    )
    policy_sha256 = sha256_file(policy)
    # a TorchScript policy is evaluated from its own file, its hash checked in every worker
    policies = {0: policy.resolve()} if scripted else None
    source = f"{policy.name} (sha256 {policy_sha256})"
    digest = policy_sha256 if scripted else _as_checkpoint(net, out_dir, env, n_actions, source)
    hashes = [{"step": 0, "weights_sha256": digest}]
    # a policy may fail in play (an action the game lacks)
    with no_empty_folder_left(out_dir), Evaluator(protocol, sequences, workers) as evaluator:
        key = evaluation_digest(protocol, specs, sequences_sha, hashes)
        (done,) = evaluate_run(out_dir, out_dir, hashes, evaluator, specs, key, used, policies)
    print(
        f"evaluate-policy: {policy} (sha256 {policy_sha256}) on {len(specs)} episodes: "
        f"{start_states.mean_score(done.mean_score, used)}; {game_said} -> "
        f"{out_dir / workspace.EVAL_CSV}",
        file=sys.stderr,
    )
    return {"policy_sha256": policy_sha256, "mean_score": done.mean_score, "game": game_said}
