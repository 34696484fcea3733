"""Every game ale-py ships: env.game takes any ROM id and refuses others by their nearest
ids; a game's network has its minimal action set's size; the authors' Breakout rules carry
over by what a game has (FIRE, lives), and a game without start states is evaluated from
its reset screen after its own no-ops, named as not the paper's protocol."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from reprodqn import envs
from reprodqn.config.params import load_params
from reprodqn.core.errors import InputError
from reprodqn.evaluation.protocol import Episode, EpisodeSpec, Protocol, episode_specs
from reprodqn.training.atari import FIRE, Emulator, FrameHistory, minimal_action_set
from tests.helpers import PARAMS, TINY, train_tiny

# one game of each kind: no FIRE, FIRE at index 0, no lives, stalls without FIRE (Breakout
# is the last kind and every other test's game)
KINDS = {"ms_pacman": "no FIRE", "backgammon": "FIRE at 0", "pong": "no lives"}


def test_env_game_is_any_rom_and_a_wrong_one_names_the_nearest():
    assert load_params(PARAMS, ["env.game=space_invaders"]).env.game == "space_invaders"
    with pytest.raises(InputError, match=r"env.game: .*\(nearest: space_invaders\)"):
        load_params(PARAMS, ["env.game=SpaceInvaders"])
    with pytest.raises(InputError, match=r"env.game: .*\(nearest: pong\), got 'pongg'"):
        load_params(PARAMS, ["env.game=pongg"])


def test_a_rom_the_emulator_cannot_play_is_refused_with_the_reason():
    """combat was refused as not a game "the installed ale-py ships", which ships it."""
    with pytest.raises(InputError) as refused:
        load_params(PARAMS, ["env.game=combat"])
    assert str(refused.value).startswith(
        "--set env.game=combat: env.game: ale-py ships combat's ROM, but the game has no "
        "single-player mode and ALE ends the process that loads it (it registers no "
        "ALE/Combat-v5)"
    )


@pytest.mark.parametrize("game", sorted(KINDS))
def test_each_kind_of_game_has_its_env_its_actions_and_its_rules(game):
    actions = minimal_action_set(game)
    assert (FIRE in actions) == (KINDS[game] != "no FIRE")
    assert (actions[0] == FIRE) == (KINDS[game] == "FIRE at 0")
    for mode in ("train", "eval"):
        env = gym.make(envs.env_id(game), mode=mode, max_frames=400)
        assert env.action_space.n == len(actions)
        check_env(env.unwrapped, skip_render_check=True)
    emulator = Emulator(game, 0.0, None, 84)
    assert emulator.relaunches == (FIRE in actions)  # the sweep is for FIRE
    emulator.reset_game()
    assert (emulator.lives() == 0) == (KINDS[game] == "no lives")


def test_a_game_without_fire_loses_a_life_and_plays_on_without_the_sweep():
    protocol = Protocol("ms_pacman", 4, 4, 84, 18_000, 0.0, 16, "linear", "authors")
    emulator = Emulator("ms_pacman", 0.0, None, 84)
    history = FrameHistory(4, 84)
    (spec,) = episode_specs(protocol, 1, 0, 30)
    episode = Episode(emulator, history, protocol, spec, None)
    lives = episode.lives
    emulator.relaunch = lambda: pytest.fail("the sweep ran in a game without FIRE")
    while episode.lives == lives:
        episode.step(0)  # NOOP until a ghost takes a life
    assert episode.lives == lives - 1 and episode.frames < 18_000


def test_episodes_without_start_states_draw_their_own_noops_and_are_reproducible():
    protocol = Protocol("pong", 4, 4, 84, 18_000, 0.0, 16, "linear", "authors")
    specs = episode_specs(protocol, 8, 0, 30)
    assert all(1 <= s.noops <= 30 for s in specs) and len({s.noops for s in specs}) > 1
    assert specs == episode_specs(protocol, 8, 0, 30)
    assert specs[3:] != episode_specs(protocol, 8, 3, 30)[3:]  # seeds sticky_seed_start + k
    assert EpisodeSpec(0, start_sequence=0).record() == {
        "episode": 0,
        "start_sequence": 0,
        "sticky_seed": None,
    }  # fmt: skip  (an evaluation's digest from before these episodes existed is kept)


@pytest.mark.parametrize("game", sorted(KINDS))
def test_a_tiny_run_trains_and_is_evaluated_on_each_kind_of_game(game, tmp_path):
    params = load_params(PARAMS, [*TINY, f"env.game={game}", "compute.device=cpu"])
    hashes = train_tiny(params, tmp_path / "run")
    assert len(hashes) == 4 and hashes[-1]["updates"] > 0
    env = gym.make(envs.env_id(game), mode="eval", max_frames=600, start_sequences="none")
    _, info = env.reset(options={"episode": 2})
    score, done = 0.0, False
    while not done:
        _, reward, terminated, truncated, info = env.step(int(np.int64(0)))
        score, done = score + reward, terminated or truncated
    assert info["noops"] == episode_specs(env.unwrapped.protocol, 3, 0, 30)[2].noops
    assert info["frames"] <= 600


@pytest.mark.slow
def test_every_rom_resets_steps_and_reaches_a_life_loss_or_the_cap():
    """Each of ale-py's ROMs: an eval episode from its reset screen under a fixed cycle of
    its minimal actions, until a life is lost, the game ends or the cap (a few seconds)."""
    from reprodqn.config.games import rom_ids

    ended = {}
    for game in rom_ids():
        protocol = Protocol(game, 4, 4, 84, 4_000, 0.0, 16, "linear", "authors")
        emulator = Emulator(game, 0.0, None, 84)
        (spec,) = episode_specs(protocol, 1, 0, 30)
        episode = Episode(emulator, FrameHistory(4, 84), protocol, spec, None)
        lives, n, over, capped = episode.lives, len(emulator.action_set), False, False
        steps = 0
        while not (over or capped) and episode.lives == lives:
            _, over, capped = episode.step(steps % n)
            steps += 1
        ended[game] = "life" if episode.lives < lives else "over" if over else "cap"
    assert len(ended) == len(rom_ids()) >= 100
    assert ended["breakout"] in ("life", "over") and ended["pong"] in ("over", "cap")


def test_the_other_games_page_lists_every_game_with_its_rules_as_ale_reports_them():
    """The rules table is generated (make docs-tables): stale, it fails here."""
    from tools.games_table import GAMES_TABLE, PAGE, game_rules, games_table

    found = GAMES_TABLE.search(PAGE.read_text())
    assert found and found.group(2) == games_table(), "docs/games.md is stale"
    assert game_rules("ms_pacman")["evaluation"] == "plays on"  # no FIRE: no sweep
    assert game_rules("pong")["training"] == "never happens"  # no lives
    assert game_rules("backgammon")["fire"] == "at 0"


def test_an_evaluation_without_start_states_is_named_as_not_the_papers_protocol():
    from reprodqn.evaluation import start_states
    from reprodqn.evaluation.stage import protocol_episodes

    params = load_params(PARAMS, ["env.game=pong", "evaluation.start_sequences=none"])
    _, specs, sequences, _, used = protocol_episodes(params, params.evaluation, None)
    assert sequences is None and len(specs) == 100 and all(s.noops for s in specs)
    assert used["protocol"].startswith("not the paper's") and used["file"] == "none"
    assert start_states.describe(used).startswith("none: not the paper's")
    pongs = load_params(PARAMS, ["evaluation.start_sequences=start_sequences/pong.json"])
    with pytest.raises(InputError, match="start states of 'pong', but env.game is 'breakout'"):
        protocol_episodes(pongs, pongs.evaluation, None)  # Pong's states, on Breakout


def test_pongs_start_states_ship_with_their_ranker_and_are_its_envs_default():
    """start_sequences/pong.json, the paper's method run with a ranker that plays
    (experiments/game_start_states.py): its ranker's chain is the committed learning
    record's, its weights that chain's, and the Pong env plays from it by default."""
    import json

    from reprodqn.core import packaged
    from reprodqn.evaluation import start_states
    from tests.helpers import ROOT

    shipped = packaged.game_start_sequences("pong")
    assert shipped is not None and shipped.resolve() == ROOT / "start_sequences" / "pong.json"
    doc = start_states.load(shipped)
    assert doc["game"] == "pong" and doc["count"] == 100
    ranker = doc["provenance"]["ranker"]
    record = [
        json.loads(line)
        for line in (ROOT / "docs/learning/pong-ranker/hashes.jsonl").read_text().splitlines()
    ]
    assert ranker["chain"] == record[: len(ranker["chain"])]
    assert ranker["chain"][-1]["step"] == ranker["checkpoint_step"]
    assert doc["provenance"]["ranker_weights_sha256"] == ranker["chain"][-1]["weights_sha256"]
    score = doc["provenance"]["greedy_score"]
    assert len(score["selected"]) == len(score["resets"]) == 100
    env = gym.make("reprodqn/Pong-v0", mode="eval", max_frames=400)
    assert Path(env.unwrapped.start_sequences).resolve() == shipped.resolve()
    _, info = env.reset(options={"episode": 3})
    assert info["start_sequence"] == 3
    assert packaged.game_start_sequences("boxing") is None  # none made: none by default
