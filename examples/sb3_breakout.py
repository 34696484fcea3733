"""Stable-Baselines3's DQN on reprodqn/Breakout-v0: the recipe docs/agents.md shows (the
part between the snippet markers), run by tests/examples/test_sb3_recipe.py at a tiny scale.

- No AtariWrapper, no VecFrameStack: the env is already the authors' Atari preprocessing
  (max of two screens, grayscale, 84x84, 4 frames stacked channel-first, no-op starts, a
  lost life terminal), and CnnPolicy takes its (4, 84, 84) uint8 observations as they are.
  SB3's AtariWrapper expects ALE's raw env and fails on it.
- Learn in mode="train" with reward_clip=1.0 (the authors' learner). There an episode is a
  life and its rewards are clipped, so SB3 would log ep_rew_mean per life, clipped;
  GameScore makes what it logs each whole game's raw score.
- Score in mode="eval": the paper's protocol (the game's start states, raw rewards, a lost
  life not terminal, whole games), with SB3's evaluate_policy here, or
  `reprodqn evaluate-policy dqn.zip` for reprodqn's own evaluator.

    python examples/sb3_breakout.py --steps 10000000 --out dqn.zip
"""

from __future__ import annotations

import argparse

# --8<-- [start:recipe]
import gymnasium as gym
from stable_baselines3 import DQN
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.monitor import Monitor

import reprodqn.envs

gym.register_envs(reprodqn.envs)  # reprodqn/Breakout-v0, reprodqn/Pong-v0, ...


class GameScore(gym.Wrapper):
    """What SB3 logs as an episode (ep_rew_mean, ep_len_mean): each whole game's raw score
    and steps, where Monitor's own entries are single lives with clipped rewards."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.score, self.steps = 0.0, 0

    def reset(self, *, seed=None, options=None):
        if seed is not None:  # a fresh game; a plain reset goes on with this one
            self.score, self.steps = 0.0, 0
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        observation, reward, terminated, truncated, info = self.env.step(action)
        self.score, self.steps = self.score + info["raw_reward"], self.steps + 1
        life = info.pop("episode", None)  # Monitor's entry: one life, clipped
        if info["game_over"] or truncated:
            info["episode"] = {"r": self.score, "l": self.steps, "t": life["t"] if life else 0}
            self.score, self.steps = 0.0, 0
        return observation, reward, terminated, truncated, info


def train(steps: int, game: str = "Breakout", seed: int = 0, **dqn) -> DQN:
    """SB3's DQN on reprodqn's training game: the authors' preprocessing, a lost life
    terminal, rewards clipped to +-1; sticky actions off (the paper's; ALE v5's: 0.25)."""
    env = gym.make(f"reprodqn/{game}-v0", mode="train", reward_clip=1.0, sticky_p=0)
    env = GameScore(Monitor(env))  # Monitor inside, so SB3 adds no Monitor of its own
    model = DQN("CnnPolicy", env, seed=seed, **dqn)  # no AtariWrapper, no VecFrameStack
    return model.learn(total_timesteps=steps)


def score(model: DQN, game: str = "Breakout", episodes: int = 100, **eval_env):
    """The paper's protocol: episode k is a whole game from the game's start state k, raw
    points, greedy actions."""
    env = Monitor(gym.make(f"reprodqn/{game}-v0", mode="eval", sticky_p=0, **eval_env))
    return evaluate_policy(  # it reads Monitor's entries: here each a whole game, raw
        model, env, n_eval_episodes=episodes, deterministic=True, return_episode_rewards=True
    )


# --8<-- [end:recipe]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=10_000_000, help="agent steps")
    p.add_argument("--game", default="Breakout", help="ALE's name: Breakout, Pong, MsPacman")
    p.add_argument("--out", default="dqn.zip", help="the saved model")
    p.add_argument("--episodes", type=int, default=100, help="evaluation episodes")
    args = p.parse_args(argv)
    model = train(args.steps, args.game, buffer_size=100_000, learning_starts=50_000)
    model.save(args.out)
    scores, _ = score(model, args.game, args.episodes)
    print(f"{args.game}: mean score {sum(scores) / len(scores):.2f} over {len(scores)} games")


if __name__ == "__main__":
    main()
