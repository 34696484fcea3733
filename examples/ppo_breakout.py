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

`--numerics universal` computes every float of acting and learning in reprodqn's universal
kernels (docs/universal-numerics.md): one chain at every CPU floor and thread count, on any
torch version. Its departures, each forced by the mode: the weights start U(-b, b),
b = 1/sqrt(fan_in) (an orthogonal init needs LAPACK's QR), actions are drawn by the
spec's inverse-CDF rule, and the loss's gradient is the spec's hand-written one.

    python examples/ppo_breakout.py --out runs/ppo/0 --steps 1000000
    reprodqn verify runs/ppo/0 their/runs/ppo/0
    reprodqn evaluate-policy runs/ppo/0/policy.pt --out evaluations/ppo/0
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np

from reprodqn import exact
from reprodqn.exact import universal

FLOOR = sys.argv[sys.argv.index("--cpu-floor") + 1] if "--cpu-floor" in sys.argv else "portable"
exact.cpu_floor(FLOOR)  # exact: before torch (its kernels are chosen at the first op)

import torch  # noqa: E402
from torch import nn  # noqa: E402

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
    p.add_argument("--cpu-floor", default="portable", help="read before torch is imported")
    p.add_argument("--numerics", choices=("standard", "universal"), default="standard")
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
    default initialisation, which would draw from its global generator. Universal: the
    same layers from reprodqn.exact.universal, U(-b, b) from the same stream."""

    def __init__(self, n_actions: int, generator: torch.Generator, numerics: str = "standard"):
        super().__init__()
        kind = universal if numerics == "universal" else nn
        self.torso = nn.Sequential(
            exact.uninitialised(kind.Conv2d, 4, 32, 8, stride=4),
            kind.ReLU(),
            exact.uninitialised(kind.Conv2d, 32, 64, 4, stride=2),
            kind.ReLU(),
            exact.uninitialised(kind.Conv2d, 64, 64, 3, stride=1),
            kind.ReLU(),
            nn.Flatten(),
            exact.uninitialised(kind.Linear, 64 * 7 * 7, 512),
            kind.ReLU(),
        )
        self.policy = exact.uninitialised(kind.Linear, 512, n_actions)
        self.value = exact.uninitialised(kind.Linear, 512, 1)
        if numerics == "universal":
            universal.init_(self, generator)
            return
        layers = [m for m in self.torso if isinstance(m, nn.Conv2d | nn.Linear)]
        for layer, gain in [*((m, 2**0.5) for m in layers), (self.policy, 0.01), (self.value, 1)]:
            nn.init.orthogonal_(layer.weight, gain, generator=generator)
            nn.init.zeros_(layer.bias)

    def forward(self, frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.torso(frames.float() / 255.0)
        return self.policy(features), self.value(features).squeeze(-1)


class UniversalActorCritic(ActorCritic):
    """ActorCritic in the universal numerics; its two heads read the torso through
    universal.fork, whose gradients meet in the mode's arithmetic."""

    def __init__(self, n_actions: int, generator: torch.Generator):
        super().__init__(n_actions, generator, "universal")

    def forward(self, frames: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        for_policy, for_value = universal.fork(self.torso(universal.scale_frames(frames)))
        return self.policy(for_policy), self.value(for_value).squeeze(-1)


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
            if args.numerics == "universal":
                action, logprob, value = act_universal(model, batch["obs"][t], streams)
            else:
                logits, value = model(batch["obs"][t])
                logp = logits.log_softmax(-1)
                action = torch.multinomial(logp.exp(), 1, generator=streams["actions"])  # exact
                action = action.squeeze(1)
                logprob = logp.gather(1, action[:, None]).squeeze(1)
        batch["actions"][t], batch["values"][t], batch["logprobs"][t] = action, value, logprob
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


def exact_guard(args):
    """Universal: torch refused any float op the mode does not cover."""
    return universal.strict() if args.numerics == "universal" else contextlib.nullcontext()


def act_universal(model, frames, streams):
    """The policy's draw in the universal spec: 24 random bits per env from the actions
    stream (integers), the first action whose running probability exceeds them."""
    with universal.strict():
        logits, value = model(frames)
    logp = universal.log_softmax(logits.numpy())
    bits = torch.randint(0, 1 << 24, (len(logp),), generator=streams["actions"])  # exact
    action = universal.sample(logp, bits.numpy())
    chosen = logp[np.arange(len(logp)), action]
    return torch.from_numpy(action), torch.from_numpy(chosen), value


def advantages(args, batch, next_value):
    """Generalised advantage estimates and returns (Schulman et al. 2016)."""
    gamma, gamma_lambda, zeros = args.gamma, args.gamma * args.gae_lambda, torch.zeros
    if args.numerics == "universal":  # numpy's float32 operations, each correctly rounded
        batch = {k: v.numpy() for k, v in batch.items()}
        next_value, zeros = next_value.numpy(), np.zeros
        gamma, gamma_lambda = np.float32(gamma), np.float32(gamma_lambda)
    adv = zeros(batch["rewards"].shape, dtype=batch["rewards"].dtype)
    running = zeros(args.envs, dtype=adv.dtype)
    for t in reversed(range(args.rollout)):
        value_next = next_value if t == args.rollout - 1 else batch["values"][t + 1]
        live = 1.0 - batch["dones"][t]
        delta = batch["rewards"][t] + gamma * value_next * live - batch["values"][t]
        running = delta + gamma_lambda * live * running
        adv[t] = running
    returns = adv + batch["values"]
    if args.numerics == "universal":
        return torch.from_numpy(adv), torch.from_numpy(returns)
    return adv, returns


def learn(args, model, optimizer, streams, batch, adv, returns) -> torch.Tensor:
    """args.epochs passes over the rollout in shuffled minibatches; every minibatch's loss."""
    flat = {k: v.flatten(0, 1) for k, v in batch.items()}
    adv, returns = adv.flatten(), returns.flatten()
    size = args.rollout * args.envs
    losses = []
    for _ in range(args.epochs):
        order = torch.randperm(size, generator=streams["minibatch"])  # exact
        for idx in order.split(size // args.minibatches):
            if args.numerics == "universal":
                losses.append(step_universal(args, model, optimizer, flat, idx, adv, returns))
                continue
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


def step_universal(args, model, optimizer, flat, idx, adv, returns) -> torch.Tensor:
    """One minibatch's update in the universal spec (the same loss, written as its order)."""
    normalized = universal.normalize(adv[idx].numpy())
    with universal.strict():
        logits, value = model(flat["obs"][idx])
        loss = universal.ppo_loss(
            logits, value, flat["actions"][idx], flat["logprobs"][idx], normalized,
            returns[idx], args.clip, args.value_coef, args.entropy_coef,
        )  # fmt: skip
        optimizer.zero_grad()
        loss.backward()
        universal.clip_grad_norm_(model.parameters(), args.max_grad_norm)
        optimizer.step()
    return loss.detach()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    config = {k: v for k, v in vars(args).items() if k not in NOT_CONFIG}
    process = exact.setup(threads=args.threads, numerics=args.numerics)  # exact
    exact.start_run(args.out, config, process)  # exact: refuses a folder of another config
    seeds = {"init": args.seed_init, "actions": args.seed_actions, "minibatch": args.seed_minibatch}
    streams = exact.Streams(torch=seeds)  # exact
    envs, obs = make_envs(args)
    n_actions = int(envs.single_action_space.n)
    network = UniversalActorCritic if args.numerics == "universal" else ActorCritic
    model = network(n_actions, streams["init"])  # exact: init stream
    adam = universal.Adam if args.numerics == "universal" else torch.optim.Adam
    optimizer = adam(model.parameters(), lr=args.lr, betas=(0.9, 0.999), eps=1e-5)
    chain = exact.HashChain(args.out, args.numerics)  # exact
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
        with torch.no_grad(), exact_guard(args):
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
        with universal.outside("the policy's standard twin"):  # exact: neither acts nor learns
            if args.numerics == "universal":  # the same weights in torch's layers, scriptable
                twin = ActorCritic(n_actions, torch.Generator().manual_seed(0))
                twin.load_state_dict(model.state_dict())
                model = twin
            exact.save_policy(GreedyPolicy(model), args.out / "policy.pt")  # exact
    envs.close()


if __name__ == "__main__":
    exact.main(main)  # a refusal of exact: one line on stderr, exit 2
