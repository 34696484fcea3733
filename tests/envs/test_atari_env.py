"""The Gymnasium environment: both libraries' env checkers pass without warnings, eval mode
plays the evaluator's episodes and train mode the trainer's game, and every episode's
result, keyed by its index, is the same however many vector environments play it, in
Gymnasium's and Stable-Baselines3's vector envs alike."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

from reprodqn.config.params import EnvConfig, load_params
from reprodqn.core import packaged
from reprodqn.core.errors import InputError
from reprodqn.determinism.rng import GAME_STREAMS, Streams
from reprodqn.dqn.network import build_q_network, q_values
from reprodqn.envs import atari
from reprodqn.evaluation import start_states
from reprodqn.evaluation.protocol import EpisodeSpec, Protocol, play
from reprodqn.training.atari import TrainingEnv
from tests.helpers import PARAMS

CAP = 400  # frames per eval episode here: long enough for lives lost and relaunches
EPISODES = 10


def policy(observation: np.ndarray) -> int:
    """An action that depends on the screen, so a wrong frame changes what follows."""
    return int(observation[-1].sum()) % 4


@pytest.mark.parametrize("mode", atari.MODES)
def test_both_libraries_env_checkers_pass_without_warnings(mode):
    env = gym.make(atari.ENV_ID, mode=mode, max_frames=CAP).unwrapped
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails
        check_env(env)
        sb3_check_env(env, warn=True)
    made = gym.make(atari.ENV_ID, mode=mode)
    assert made.unwrapped.get_action_meanings() == ["NOOP", "FIRE", "RIGHT", "LEFT"]
    assert gym.make(f"reprodqn.envs:{atari.ENV_ID}").spec.id == atari.ENV_ID


@pytest.mark.parametrize("mode", atari.MODES)
def test_rgb_array_renders_the_screen_and_leaves_the_game_as_it_was(mode):
    """What RecordVideo needs: the emulator's screen, every step; a rendered run plays the
    same frames and rewards as one never rendered."""
    plain = gym.make(atari.ENV_ID, mode=mode, max_frames=CAP)
    rendered = gym.make(atari.ENV_ID, mode=mode, max_frames=CAP, render_mode="rgb_array")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(rendered.unwrapped)
    observations = []
    for env in (plain, rendered):
        observation, _ = env.reset(seed=3)
        seen, screens = [(observation, 0.0)], []
        for step in range(120):  # FIRE and moves, as the screen tells: the game goes on
            action = (policy(observation) + step) % 4
            observation, reward, terminated, truncated, _ = env.step(action)
            seen.append((observation, reward))
            if env.render_mode:
                screens.append(env.render())
            if terminated or truncated:
                observation, _ = env.reset()
        observations.append(seen)
    assert plain.render() is None
    assert all(
        np.array_equal(a[0], b[0]) and a[1:] == b[1:] for a, b in zip(*observations, strict=True)
    )
    assert screens[0].shape == (210, 160, 3) and screens[0].dtype == np.uint8
    assert len({screen.tobytes() for screen in screens}) > 10  # the game moves on screen
    with pytest.raises(InputError, match="render_mode 'human': expected 'rgb_array' or None"):
        atari.AtariEnv(render_mode="human")


def test_render_fps_follows_the_frame_skip():
    """A recorded video plays at the game's speed: 60 emulator frames/s over the skip."""
    assert gym.make(atari.ENV_ID).metadata["render_fps"] == 15
    skip_two = atari.AtariEnv(env_config={"frame_skip": 2}, render_mode="rgb_array")
    assert skip_two.metadata["render_fps"] == 30
    assert atari.AtariEnv.metadata["render_fps"] == 15  # the class's is not changed


@pytest.mark.parametrize("sticky_p", [0.0, 0.25], ids=["start-states", "sticky"])
def test_eval_mode_plays_the_evaluators_episodes(sticky_p):
    net = build_q_network("nips", 4, 4, 84, torch.Generator().manual_seed(5))
    env = atari.AtariEnv(mode="eval", max_frames=1200, sticky_p=sticky_p)
    # chunks of 1: the env steps one episode at a time; play() then batches nothing either
    protocol = Protocol("breakout", 4, 4, 84, 1200, sticky_p, 1, "linear", "authors")
    specs = [
        EpisodeSpec(k, sticky_seed=k) if sticky_p else EpisodeSpec(k, start_sequence=k)
        for k in range(4)
    ]
    expected = play(net, specs, protocol, env.sequences)
    for result in expected:
        observation, info = env.reset(options={"episode": result.episode})
        assert info["episode_index"] == result.episode
        score, done = 0.0, False
        while not done:
            action = int(q_values(net, observation[None], protocol.chunk).argmax())
            observation, reward, terminated, truncated, info = env.step(action)
            score += reward
            done = terminated or truncated
        assert (score, info["frames"]) == (result.score, result.frames)
    if not sticky_p:  # from the reset screen an untrained net never scores: no variety there
        assert len({r.score for r in expected} | {r.frames for r in expected}) > 2


def test_train_mode_is_the_trainers_game_from_its_seed():
    env = atari.AtariEnv(mode="train", reward_clip=1.0)
    streams = Streams(dict.fromkeys(GAME_STREAMS, 7), "authors")
    game = TrainingEnv(EnvConfig(), None, streams["noop"])
    observation, _ = env.reset(seed=7)
    assert np.array_equal(observation[-1], game.begin_episode())
    rewards = life_losses = 0
    actions = np.random.default_rng(1).integers(0, 4, 3000)  # a random policy scores
    for t, action in enumerate(actions.tolist()):
        observation, reward, terminated, truncated, info = env.step(action)
        frame, raw, terminal, cut, game_over = game.step(action)
        assert np.array_equal(observation[-1], frame) and terminated == terminal, t
        assert reward == float(np.clip(raw, -1, 1)) and info["raw_reward"] == raw
        rewards += raw > 0
        life_losses += info["life_lost"]
        if terminal or cut:
            observation, _ = env.reset()
            assert np.array_equal(observation[-1], game.begin_episode())
    assert rewards and life_losses  # points scored and lives lost on the way
    again = atari.AtariEnv(mode="train")
    assert np.array_equal(again.reset(seed=7)[0], env.reset(seed=7)[0])


def play_vector(step, reset, n: int, same_step: bool = False) -> dict[int, tuple]:
    """Play until episodes 0..EPISODES-1 are done; (score, frames) per episode index."""
    found: dict[int, tuple] = {}
    observations = reset()
    for _ in range(10_000):
        observations, ended = step([policy(o) for o in observations])
        for index, score, frames in ended:
            found.setdefault(index, (score, frames))
        if all(k in found for k in range(EPISODES)):
            return {k: found[k] for k in range(EPISODES)}
    raise AssertionError(f"{n} envs never finished episodes 0..{EPISODES - 1}: {found}")


def gymnasium_vector(n: int, mode: str, autoreset) -> dict[int, tuple]:
    envs = gym.make_vec(
        atari.ENV_ID,
        num_envs=n,
        vectorization_mode=mode,
        vector_kwargs={"autoreset_mode": autoreset},
        mode="eval",
        max_frames=CAP,
        episode_stride=n,
    )
    same_step = autoreset == gym.vector.AutoresetMode.SAME_STEP

    def step(actions):
        observations, _, terminated, truncated, infos = envs.step(np.array(actions))
        done = terminated | truncated
        source = infos["final_info"] if same_step and "final_info" in infos else infos
        ended = [
            (int(source["episode_index"][i]), float(source["score"][i]), int(source["frames"][i]))
            for i in np.flatnonzero(done)
        ]
        return observations, ended

    try:
        return play_vector(step, lambda: envs.reset(seed=0)[0], n)
    finally:
        envs.close()


def sb3_vector(n: int, cls) -> dict[int, tuple]:
    def make():
        return atari.AtariEnv(mode="eval", max_frames=CAP, episode_stride=n)

    envs = cls([make] * n)
    envs.seed(0)

    def step(actions):
        observations, _, dones, infos = envs.step(np.array(actions))
        ended = [
            (infos[i]["episode_index"], float(infos[i]["score"]), infos[i]["frames"])
            for i in np.flatnonzero(dones)
        ]
        return observations, ended

    try:
        return play_vector(step, envs.reset, n)
    finally:
        envs.close()


@pytest.fixture(scope="module")
def alone() -> dict[int, tuple]:
    """Each episode played by one environment of its own."""
    env = atari.AtariEnv(mode="eval", max_frames=CAP)
    results = {}
    for k in range(EPISODES):
        observation, _ = env.reset(options={"episode": k})
        done = False
        while not done:
            observation, _, terminated, truncated, info = env.step(policy(observation))
            done = terminated or truncated
        results[k] = (float(info["score"]), info["frames"])
    return results


@pytest.mark.parametrize("n", [1, 2, 4, 5])
@pytest.mark.parametrize("autoreset", ["NEXT_STEP", "SAME_STEP"])
def test_gymnasium_sync_vector_env_plays_each_episode_as_alone(alone, n, autoreset):
    assert gymnasium_vector(n, "sync", gym.vector.AutoresetMode[autoreset]) == alone


@pytest.mark.parametrize("n", [2, 5])
@pytest.mark.parametrize("autoreset", ["NEXT_STEP", "SAME_STEP"])
def test_gymnasium_async_vector_env_plays_each_episode_as_alone(alone, n, autoreset):
    assert gymnasium_vector(n, "async", gym.vector.AutoresetMode[autoreset]) == alone


@pytest.mark.parametrize("n", [1, 2, 4, 5])
def test_sb3_dummy_vec_env_plays_each_episode_as_alone(alone, n):
    assert sb3_vector(n, DummyVecEnv) == alone


@pytest.mark.parametrize("n", [2, 5])
def test_sb3_subproc_vec_env_plays_each_episode_as_alone(alone, n):
    assert sb3_vector(n, SubprocVecEnv) == alone


def test_bad_input_is_one_line(tmp_path):
    with pytest.raises(InputError, match="mode 'play': expected one of train, eval"):
        atari.AtariEnv(mode="play")
    env = atari.AtariEnv(mode="eval")
    with pytest.raises(InputError, match=r"episode 100: expected 0 to 99 \(the 100 start"):
        env.reset(options={"episode": 100})
    with pytest.raises(InputError, match="missing.json"):
        atari.AtariEnv(mode="eval", start_sequences=tmp_path / "missing.json")
    with pytest.raises(InputError, match=r"^env: sticky_p: input should be less than 1, got 2$"):
        atari.AtariEnv(env_config={"sticky_p": 2})
    with pytest.raises(InputError) as unknown:  # said as params.yaml's are: no pydantic tail
        atari.AtariEnv(game="SpaceInvaders")
    assert str(unknown.value) == (
        "env: game: expected one of the 104 games the installed ale-py ships (nearest: "
        "space_invaders), got 'SpaceInvaders'"
    )
    assert start_states.load(packaged.authors_start_sequences())["count"] == 100


def test_a_start_state_file_is_found_by_the_clis_rule_a_workspaces_then_the_packages(
    tmp_path, monkeypatch
):
    """From outside a workspace the env said start_sequences/pong.json was not found,
    where the CLI found the package's copy; inside one, the workspace's file comes first."""
    from reprodqn.evaluation.stage import protocol_episodes

    name = "start_sequences/pong.json"
    monkeypatch.chdir(tmp_path)  # no workspace here
    env = gym.make("reprodqn/Pong-v0", mode="eval", start_sequences=name, max_frames=CAP)
    package = packaged.game_start_sequences("pong")
    assert env.unwrapped.start_sequences == str(package)
    workspace = tmp_path / "start_sequences"
    workspace.mkdir()
    (workspace / "pong.json").write_bytes(package.read_bytes())
    for chosen in (name, None):  # named, and the game's default
        env = gym.make("reprodqn/Pong-v0", mode="eval", start_sequences=chosen, max_frames=CAP)
        assert env.unwrapped.start_sequences == name  # the workspace's own, as the CLI's
    params = load_params(PARAMS, ["env.game=pong", f"evaluation.start_sequences={name}"])
    assert protocol_episodes(params, params.evaluation, None)[4]["file"] == name


def test_importing_reprodqn_envs_registers_every_game_and_the_old_path_is_an_alias():
    """gym.make needed `import reprodqn.envs.breakout` first, a module named for one game
    that served every game; now reprodqn.envs registers them, as ale-py's module does."""
    import subprocess
    import sys

    from tests.helpers import cli_env

    code = """
import warnings
import gymnasium as gym
import reprodqn.envs
gym.register_envs(reprodqn.envs)
assert all(f"reprodqn/{n}-v0" in gym.registry for n in ("Breakout", "Pong", "MsPacman"))
assert isinstance(gym.make("reprodqn/Pong-v0").unwrapped, reprodqn.envs.AtariEnv)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    from reprodqn.envs.breakout import BreakoutEnv, env_id
assert BreakoutEnv is reprodqn.envs.AtariEnv and env_id("pong") == "reprodqn/Pong-v0"
assert [w.category for w in caught] == [DeprecationWarning], caught
"""
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=cli_env()
    )
    assert done.returncode == 0, done.stderr
