"""PPO on reprodqn/Breakout-v0 (train mode), exact: a single-file research script that
stands on reprodqn's public API (`reprodqn.exact`) alone.

The algorithm is Schulman et al.'s PPO with the Atari settings of their paper and of
CleanRL's ppo_atari: 8 environments, 128-step rollouts, GAE(0.95), 4 epochs of 4
minibatches, clip 0.1, entropy 0.01, Adam at 2.5e-4 annealed to 0, gradients clipped at
0.5. The game is reprodqn's training game (the authors' preprocessing, a lost life ends an
episode, rewards clipped to +-1), in Gymnasium's synchronous vector env.

Exactness costs the lines marked `# exact`: the CPU floor before torch, the process
set-up, the run's records, three named streams, the hash chain, and the resume point.
Killed at any moment and started again with the same command, the run goes on from its
last resume point and ends with the chain an uninterrupted run ends with.

    python examples/ppo_breakout.py --out runs/ppo/0 --steps 1000000
    reprodqn verify runs/ppo/0 their/runs/ppo/0
    reprodqn evaluate-policy runs/ppo/0/policy.pt --out evaluations/ppo/0
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

from reprodqn import exact

exact.cpu_floor("portable")  # exact: before torch (its kernels are chosen at the first op)

import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.utils import skip_init  # noqa: E402

from reprodqn.envs import env_id  # noqa: E402  (registers reprodqn/Breakout-v0, ...)

NOT_CONFIG = ("out", "until")  # where the run goes and where this sitting stops


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True, help="the run's folder")
    p.add_argument("--game", default="breakout", help="any ROM id ale-py ships")
    p.add_argument("--steps", type=int, default=1_000_000, help="environment steps, all envs")
    p.add_argument("--envs", type=int, default=8)
    p.add_argument("--rollout", type=int, default=128, help="steps per env per update")
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--minibatches", type=int, default=4)
    p.add_argument("--lr", type=float, default=2.5e-4)
    p.add_argument("--gamma", type=float, default=0.99)
    p.add_argument("--gae-lambda", type=float, default=0.95)
    p.add_argument("--clip", type=float, default=0.1)
    p.add_argument("--entropy-coef", type=float, default=0.01)
    p.add_argument("--value-coef", type=float, default=0.5)
    p.add_argument("--max-grad-norm", type=float, default=0.5)
    p.add_argument("--threads", type=int, default=1, help="torch threads (results depend on it)")
    p.add_argument("--seed-init", type=int, default=1, help="the network's initial weights")
    p.add_argument("--seed-actions", type=int, default=2, help="the policy's action draws")
    p.add_argument("--seed-minibatch", type=int, default=3, help="the minibatch shuffles")
    p.add_argument("--seed-envs", type=int, default=4, help="env i's no-op starts: seed + i")
    p.add_argument("--checkpoint-every", type=int, default=10, help="updates between checkpoints")
    p.add_argument("--resume-every", type=int, default=10, help="updates between resume points")
    p.add_argument(
        "--until", type=int, default=None, help="stop at the first update to reach this step"
    )
    return p.parse_args(argv)


class ActorCritic(nn.Module):
    """The Nature torso with a policy and a value head, initialised orthogonally (gains
    sqrt(2), 0.01 and 1) from the init stream alone: layers are built without torch's
    default initialisation, which would draw from its global generator."""

    def __init__(self, n_actions: int, generator: torch.Generator):
        super().__init__()
        self.torso = nn.Sequential(
            skip_init(nn.Conv2d, 4, 32, 8, stride=4),
            nn.ReLU(),
            skip_init(nn.Conv2d, 32, 64, 4, stride=2),
            nn.ReLU(),
            skip_init(nn.Conv2d, 64, 64, 3, stride=1),
            nn.ReLU(),
            nn.Flatten(),
            skip_init(nn.Linear, 64 * 7 * 7, 512),
            nn.ReLU(),
        )
        self.policy = skip_init(nn.Linear, 512, n_actions)
        self.value = skip_init(nn.Linear, 512, 1)
        layers = [m for m in self.torso if isinstance(m, nn.Conv2d | nn.Linear)]
        for layer, gain in [*((m, 2**0.5) for m in layers), (self.policy, 0.01), (self.value, 1)]:
            nn.init.orthogonal_(layer.weight, gain, generator=generator)
            nn.init.zeros_(layer.bias)

    def forward(self, frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.torso(frames.float() / 255.0)
        return self.policy(features), self.value(features).squeeze(-1)


class GreedyPolicy(nn.Module):
    """What `reprodqn evaluate-policy` plays: uint8 frame stacks -> the policy's logits,
    argmax taken by the evaluator."""

    def __init__(self, model: ActorCritic):
        super().__init__()
        self.model = model

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        return self.model(frames)[0]


def make_envs(args: argparse.Namespace) -> tuple[gym.vector.SyncVectorEnv, np.ndarray]:
    """The environments, each seeded (its no-op starts), and their first observations."""
    game = env_id(args.game)
    envs = gym.vector.SyncVectorEnv(
        [lambda: gym.make(game, mode="train", reward_clip=1.0) for _ in range(args.envs)],
        autoreset_mode=gym.vector.AutoresetMode.DISABLED,  # reset by hand: no hidden state
    )
    obs = envs.reset(seed=[args.seed_envs + i for i in range(args.envs)])[0]
    return envs, obs


def collect(args, envs, model, streams, obs, scores, log, step):
    """One rollout of args.rollout steps in every env: the batch, the next observation,
    and each finished game's score logged."""
    n, t_max = args.envs, args.rollout
    batch = {
        "obs": torch.zeros((t_max, n, 4, 84, 84), dtype=torch.uint8),
        "actions": torch.zeros((t_max, n), dtype=torch.long),
        "logprobs": torch.zeros((t_max, n)),
        "values": torch.zeros((t_max, n)),
        "rewards": torch.zeros((t_max, n)),
        "dones": torch.zeros((t_max, n)),
    }
    for t in range(t_max):
        batch["obs"][t] = torch.from_numpy(obs)
        with torch.no_grad():
            logits, value = model(batch["obs"][t])
        logp = logits.log_softmax(-1)
        action = torch.multinomial(logp.exp(), 1, generator=streams["actions"]).squeeze(1)  # exact
        batch["actions"][t], batch["values"][t] = action, value
        batch["logprobs"][t] = logp.gather(1, action[:, None]).squeeze(1)
        obs, reward, terminated, truncated, info = envs.step(action.numpy())
        done = terminated | truncated
        batch["rewards"][t] = torch.from_numpy(reward.astype(np.float32))
        batch["dones"][t] = torch.from_numpy(done.astype(np.float32))
        scores += info["raw_reward"]
        for i in np.flatnonzero(info["game_over"] | truncated):
            log.write({"step": step + (t + 1) * n, "env": int(i), "score": float(scores[i])})
            scores[i] = 0.0
        if done.any():
            obs = envs.reset(options={"reset_mask": done})[0]
    return batch, obs


def advantages(args, batch, next_value):
    """Generalised advantage estimates and returns (Schulman et al. 2016)."""
    adv = torch.zeros_like(batch["rewards"])
    running = torch.zeros(args.envs)
    for t in reversed(range(args.rollout)):
        value_next = next_value if t == args.rollout - 1 else batch["values"][t + 1]
        live = 1.0 - batch["dones"][t]
        delta = batch["rewards"][t] + args.gamma * value_next * live - batch["values"][t]
        running = delta + args.gamma * args.gae_lambda * live * running
        adv[t] = running
    return adv, adv + batch["values"]


def learn(args, model, optimizer, streams, batch, adv, returns) -> torch.Tensor:
    """args.epochs passes over the rollout in shuffled minibatches; every minibatch's loss."""
    flat = {k: v.flatten(0, 1) for k, v in batch.items()}
    adv, returns = adv.flatten(), returns.flatten()
    size = args.rollout * args.envs
    losses = []
    for _ in range(args.epochs):
        order = torch.randperm(size, generator=streams["minibatch"])  # exact
        for idx in order.split(size // args.minibatches):
            logits, value = model(flat["obs"][idx])
            logp = logits.log_softmax(-1)
            chosen = logp.gather(1, flat["actions"][idx, None]).squeeze(1)
            ratio = (chosen - flat["logprobs"][idx]).exp()
            a = adv[idx]
            a = (a - a.mean()) / (a.std() + 1e-8)
            clipped = ratio.clamp(1 - args.clip, 1 + args.clip)
            policy_loss = -torch.min(ratio * a, clipped * a).mean()
            value_loss = 0.5 * ((value - returns[idx]) ** 2).mean()
            entropy = -(logp.exp() * logp).sum(-1).mean()
            loss = policy_loss + args.value_coef * value_loss - args.entropy_coef * entropy
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
            optimizer.step()
            losses.append(loss.detach())
    return torch.stack(losses)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    config = {k: v for k, v in vars(args).items() if k not in NOT_CONFIG}
    process = exact.setup(threads=args.threads)  # exact
    exact.start_run(args.out, config, process)  # exact: refuses a folder of another config
    seeds = {"init": args.seed_init, "actions": args.seed_actions, "minibatch": args.seed_minibatch}
    streams = exact.Streams(torch=seeds)  # exact
    envs, obs = make_envs(args)
    model = ActorCritic(int(envs.single_action_space.n), streams["init"])  # exact: init stream
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, eps=1e-5)
    chain = exact.HashChain(args.out)  # exact
    log = exact.JsonLog(args.out / "scores.jsonl")
    per_update = args.envs * args.rollout  # environment steps
    updates = args.steps // per_update
    scores, update = np.zeros(args.envs), 0
    parts = {"model": model, "optimizer": optimizer, "streams": streams, "chain": chain}  # exact
    parts |= {"log": log, "envs": [e.unwrapped for e in envs.envs]}  # exact
    saved = exact.load_resume_point(args.out, parts)  # exact
    if saved is None:
        chain.checkpoint(0, model)  # exact
    else:  # exact: the loop's own state, as it was saved
        run = saved["run"]
        obs, scores, update = np.array(run["obs"]), np.array(run["scores"]), int(run["update"])
    end = updates if args.until is None else min(-(-args.until // per_update), updates)
    started, first = time.monotonic(), update
    while update < end:
        for group in optimizer.param_groups:  # linear annealing to 0
            group["lr"] = args.lr * (1 - update / updates)
        step = update * per_update
        batch, obs = collect(args, envs, model, streams, obs, scores, log, step)
        with torch.no_grad():
            next_value = model(torch.from_numpy(obs))[1]
        adv, returns = advantages(args, batch, next_value)
        chain.extend(learn(args, model, optimizer, streams, batch, adv, returns))  # exact
        update += 1
        step = update * per_update
        if update % args.checkpoint_every == 0 or update == updates:
            chain.checkpoint(step, model)  # exact
        if update % args.resume_every == 0 or update == end:
            run = {"obs": obs, "scores": scores, "update": update}
            exact.save_resume_point(args.out, step, parts | {"run": run})  # exact
        rate = (update - first) * per_update / (time.monotonic() - started)
        eta = (end - update) * per_update / max(rate, 1e-9)
        print(f"update {update}/{updates}  step {step:,}  {rate:,.0f} steps/s  ETA {eta:,.0f} s")
    if update == updates:
        exact.save_policy(GreedyPolicy(model), args.out / "policy.pt")  # exact
    envs.close()


if __name__ == "__main__":
    exact.main(main)  # a refusal of exact: one line on stderr, exit 2
