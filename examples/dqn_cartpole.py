"""DQN on Gymnasium's CartPole-v1, exact: a single-file script that stands on reprodqn's
public API (`reprodqn.exact`) alone, with the env in the resume point through
`exact.GymEnv` (no private attribute in the script).

The algorithm is Mnih et al.'s DQN at CartPole's scale: a two-layer MLP, a numpy replay
memory of 10,000 transitions sampled uniformly, Adam, the Huber loss, a target network
copied every 500 steps, epsilon annealed linearly from 1 to 0.05 over 10,000 steps. The
episode statistics come from Gymnasium's RecordEpisodeStatistics, whose counters GymEnv
saves with the env's RNG, TimeLimit's step count and the cart's state.

Exactness costs the lines marked `# exact`: the CPU floor before torch, the process
set-up, the run's records, the named streams, the hash chain, and the resume point.
Killed at any moment and started again with the same command, the run goes on from its
last resume point and ends with the chain and the returns an uninterrupted run ends with.

    python examples/dqn_cartpole.py --out runs/cartpole/0 --steps 50000
    reprodqn verify runs/cartpole/0 their/runs/cartpole/0
"""

from __future__ import annotations

import argparse
import copy
from pathlib import Path

import gymnasium as gym
import numpy as np

from reprodqn import exact

exact.cpu_floor("portable")  # exact: before torch (its kernels are chosen at the first op)

import torch  # noqa: E402
from torch import nn  # noqa: E402

NOT_CONFIG = ("out", "until")  # where the run goes and where this sitting stops


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="the run's folder")
    p.add_argument("--steps", type=int, default=50_000, help="environment steps")
    p.add_argument("--capacity", type=int, default=10_000, help="replay memory, transitions")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--hidden", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--learning-starts", type=int, default=1_000, help="steps before updates")
    p.add_argument("--target-every", type=int, default=500, help="steps between target copies")
    p.add_argument("--epsilon-end", type=float, default=0.05)
    p.add_argument("--epsilon-steps", type=int, default=10_000, help="steps to anneal over")
    p.add_argument("--threads", type=int, default=1, help="torch threads (results depend on it)")
    p.add_argument("--seed-init", type=int, default=1, help="the network's initial weights")
    p.add_argument("--seed-explore", type=int, default=2, help="epsilon-greedy's draws")
    p.add_argument("--seed-replay", type=int, default=3, help="the minibatches")
    p.add_argument("--seed-env", type=int, default=4, help="the env's first reset")
    p.add_argument("--checkpoint-every", type=int, default=5_000, help="steps")
    p.add_argument("--resume-every", type=int, default=5_000, help="steps")
    p.add_argument("--until", type=int, default=None, help="stop this sitting at this step")
    return p.parse_args(argv)


class QNetwork(nn.Sequential):
    """observation -> one value per action. Built without torch's default initialisation
    (it draws from the global generator) and initialised from the init stream alone."""

    def __init__(self, n_obs: int, n_actions: int, hidden: int, generator: torch.Generator):
        sizes = ((n_obs, hidden), (hidden, hidden))
        layers = [exact.uninitialised(nn.Linear, a, b) for a, b in sizes]
        layers.append(exact.uninitialised(nn.Linear, hidden, n_actions))
        super().__init__(layers[0], nn.ReLU(), layers[1], nn.ReLU(), layers[2])
        for layer in layers:
            nn.init.kaiming_uniform_(layer.weight, nonlinearity="relu", generator=generator)
            nn.init.zeros_(layer.bias)


class Replay:
    """A ring buffer of transitions in numpy arrays. Its arrays and counters are its
    state, which the resume point keeps (dtypes and all)."""

    def __init__(self, capacity: int, n_obs: int):
        self.arrays = {
            "obs": np.zeros((capacity, n_obs), np.float32),
            "next_obs": np.zeros((capacity, n_obs), np.float32),
            "action": np.zeros(capacity, np.int64),
            "reward": np.zeros(capacity, np.float32),
            "terminal": np.zeros(capacity, np.float32),
        }
        self.capacity, self.size, self.position = capacity, 0, 0

    def add(self, **transition) -> None:
        for name, value in transition.items():
            self.arrays[name][self.position] = value
        self.position = (self.position + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def sample(self, generator: np.random.Generator, batch: int) -> dict[str, torch.Tensor]:
        rows = generator.integers(0, self.size, batch)
        return {name: torch.from_numpy(array[rows]) for name, array in self.arrays.items()}

    def get_state(self) -> dict:
        return {"arrays": self.arrays, "size": self.size, "position": self.position}

    def set_state(self, state: dict) -> None:
        self.arrays = {name: np.array(array) for name, array in state["arrays"].items()}
        self.size, self.position = int(state["size"]), int(state["position"])


def learn(args, model, target, optimizer, batch) -> torch.Tensor:
    """One update on a minibatch: the Huber loss against the target network's values."""
    with torch.no_grad():
        best_next = target(batch["next_obs"]).max(1).values
        goal = batch["reward"] + args.gamma * (1.0 - batch["terminal"]) * best_next
    chosen = model(batch["obs"]).gather(1, batch["action"][:, None]).squeeze(1)
    loss = nn.functional.smooth_l1_loss(chosen, goal)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.detach()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    config = {k: v for k, v in vars(args).items() if k not in NOT_CONFIG}
    process = exact.setup(threads=args.threads)  # exact
    exact.start_run(args.out, config, process)  # exact: refuses a folder of another config
    seeds = {"explore": args.seed_explore, "replay": args.seed_replay}
    streams = exact.Streams(numpy=seeds, torch={"init": args.seed_init})  # exact
    env = gym.wrappers.RecordEpisodeStatistics(gym.make("CartPole-v1"))
    n_obs, n_actions = env.observation_space.shape[0], int(env.action_space.n)
    model = QNetwork(n_obs, n_actions, args.hidden, streams["init"])  # exact: init stream
    target = copy.deepcopy(model)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    replay = Replay(args.capacity, n_obs)
    returns = exact.JsonLog(args.out / "returns.jsonl")
    chain = exact.HashChain(args.out, results=[returns])  # exact: verify compares returns too
    parts = {"model": model, "target": target, "optimizer": optimizer, "streams": streams}  # exact
    parts |= {"chain": chain, "log": returns, "replay": replay, "env": exact.GymEnv(env)}  # exact
    saved = exact.load_resume_point(args.out, parts)  # exact
    if saved is None:
        obs, step = env.reset(seed=args.seed_env)[0], 0
        chain.checkpoint(0, model)  # exact
    else:  # exact: the loop's own state, as it was saved
        obs, step = saved["run"]["obs"], saved["run"]["step"]
    end = args.steps if args.until is None else min(args.until, args.steps)
    while step < end:
        epsilon = max(args.epsilon_end, 1 - (1 - args.epsilon_end) * step / args.epsilon_steps)
        if streams["explore"].random() < epsilon:  # exact: the explore stream
            action = int(streams["explore"].integers(n_actions))  # exact
        else:
            with torch.no_grad():
                action = int(model(torch.from_numpy(obs)).argmax())
        next_obs, reward, terminated, truncated, info = env.step(action)
        replay.add(obs=obs, next_obs=next_obs, action=action, reward=reward, terminal=terminated)
        obs, step = next_obs, step + 1
        if terminated or truncated:
            episode = info["episode"]
            returns.write(
                {"step": step, "return": float(episode["r"]), "length": int(episode["l"])}
            )
            obs = env.reset()[0]
        if step > args.learning_starts:
            batch = replay.sample(streams["replay"], args.batch)  # exact: the replay stream
            chain.extend(learn(args, model, target, optimizer, batch))  # exact
        if step % args.target_every == 0:
            target.load_state_dict(model.state_dict())
        if step % args.checkpoint_every == 0 or step == args.steps:
            chain.checkpoint(step, model)  # exact
        if step % args.resume_every == 0 or step == end:
            run = {"obs": obs, "step": step}
            exact.save_resume_point(args.out, step, parts | {"run": run})  # exact
    print(f"step {step:,}: {chain.updates:,} updates, chain {chain.loss_chain[:12]}")
    env.close()


if __name__ == "__main__":
    exact.main(main)  # a refusal of exact: one line on stderr, exit 2
