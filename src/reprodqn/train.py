"""The training loop of one run, its checkpoints and hash chain, and exact resume.

`train()` is a generator: it writes the run's files and yields events (process records,
checkpoints, resume points) so progress printing and experiment tracking stay outside it.

A run directory holds:
  config.json        the resolved run config and its digest
  determinism.json   the numerics settings applied
  checkpoints/       step-NNNNNNNNN.safetensors, one per checkpoint interval (and step 0)
  hashes.jsonl       per checkpoint: step, weights SHA-256, loss-chain SHA-256, updates
  process.jsonl      loss, epsilon, game scores, steps/s every log_every steps
  resume/            the latest resume point and latest.json naming it with file hashes
  complete.json      written last; a run with it is finished
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file as load_tensors
from safetensors.torch import save_file as save_tensors

from reprodqn import determinism, provenance, workspace
from reprodqn.agent import DQNAgent
from reprodqn.atari import FrameHistory, TrainingEnv
from reprodqn.checkpoints import cpu_weights, save_weights
from reprodqn.config import RunConfig
from reprodqn.errors import InputError
from reprodqn.files import append_line, fsync_dir, read_json, sha256_file, truncate, write_json
from reprodqn.replay import ReplayMemory
from reprodqn.rng import TRAINING_STREAMS, Streams, torch_generator

EMPTY_CHAIN = "0" * 64


# ---------------------------------------------------------------------------------------------
# Events


@dataclass(frozen=True)
class Started:
    step: int
    total: int
    resumed: bool


@dataclass(frozen=True)
class ProcessRecord:
    step: int
    record: dict


@dataclass(frozen=True)
class CheckpointWritten:
    step: int
    weights_sha256: str
    loss_chain_sha256: str
    updates: int
    path: Path


@dataclass(frozen=True)
class ResumePointWritten:
    step: int


@dataclass(frozen=True)
class Finished:
    step: int
    already: bool = False


# ---------------------------------------------------------------------------------------------
# Small pieces


def epsilon_at(step: int, agent_config, learning_starts: int) -> float:
    """Linear annealing from epsilon_start to epsilon_final, counted from learning_starts."""
    progress = (step - learning_starts) / agent_config.epsilon_decay_steps
    progress = min(max(progress, 0.0), 1.0)
    start, final = agent_config.epsilon_start, agent_config.epsilon_final
    return start + progress * (final - start)


def chain_losses(chain: str, losses: np.ndarray) -> str:
    """Extend the loss hash chain: h_k = SHA-256(h_{k-1} || float32 loss_k)."""
    state = bytes.fromhex(chain)
    for value in losses.astype(np.float32, copy=False):
        state = hashlib.sha256(state + struct.pack("<f", value)).digest()
    return state.hex()


@dataclass
class _Accumulators:
    """Process metrics gathered since the last process.jsonl line."""

    loss_sum: float = 0.0
    loss_count: int = 0
    game_scores: list = field(default_factory=list)
    episodes: int = 0


# ---------------------------------------------------------------------------------------------
# The run


class Run:
    """All state of one training run, composed from parts that each save and restore."""

    def __init__(self, config: RunConfig, run_dir: Path, device: torch.device):
        self.config = config
        self.dir = run_dir
        env_cfg = config.env
        seeds = config.seeds.model_dump()
        self.streams = Streams({name: seeds[name] for name in TRAINING_STREAMS})
        sticky = self.streams["sticky"] if env_cfg.sticky_p > 0 else None
        self.env = TrainingEnv(env_cfg, sticky, self.streams["noop"])
        self.history = FrameHistory(env_cfg.history_length, env_cfg.screen_size)
        self.replay = ReplayMemory(config.replay.capacity, env_cfg.history_length,
                                   env_cfg.screen_size)
        self.agent = DQNAgent(config.agent, self.env.n_actions, env_cfg.history_length,
                              env_cfg.screen_size, device, torch_generator(seeds["init"]))
        self.step = 0
        self.updates = 0
        self.loss_chain = EMPTY_CHAIN
        self.pending_losses: list[torch.Tensor] = []
        self.episode_first = True
        self.game_score = 0
        self.acc = _Accumulators()
        self.history.reset(self.env.begin_episode())

    # -- one agent step ----------------------------------------------------------------------
    def advance(self) -> None:
        cfg = self.config
        epsilon = epsilon_at(self.step, cfg.agent, cfg.replay.learning_starts)
        action = self.agent.act(self.history.frames, epsilon, self.streams["exploration"])
        frame, reward, terminal, truncated, game_over = self.env.step(action)
        self.game_score += reward
        clip = cfg.env.reward_clip
        self.replay.add(self.history.frames[-1], action, min(max(reward, -clip), clip),
                        terminal, first=self.episode_first)
        if terminal or truncated:
            if truncated:
                self.replay.add_final(frame)
            self.acc.episodes += 1
            if game_over or truncated:
                self.acc.game_scores.append(self.game_score)
                self.game_score = 0
            self.history.reset(self.env.begin_episode())
            self.episode_first = True
        else:
            self.history.push(frame)
            self.episode_first = False

        self.step += 1
        if self.step > cfg.replay.learning_starts and self.step % cfg.agent.update_every == 0:
            batch = self.replay.sample(cfg.agent.batch_size, self.streams["minibatch"])
            self.pending_losses.append(self.agent.update(batch))
            self.updates += 1
        if self.step % cfg.agent.target_sync_every == 0:
            self.agent.sync_target()

    def flush_losses(self) -> None:
        """Fold pending losses into the chain (batched so CUDA syncs once per flush)."""
        if self.pending_losses:
            losses = torch.stack(self.pending_losses).cpu().numpy()
            self.pending_losses.clear()
            self.loss_chain = chain_losses(self.loss_chain, losses)
            self.acc.loss_sum += float(losses.astype(np.float64).sum())
            self.acc.loss_count += len(losses)

    # -- resume state ------------------------------------------------------------------------
    def scalars(self) -> dict:
        return {
            "step": self.step,
            "updates": self.updates,
            "loss_chain": self.loss_chain,
            "episode_first": self.episode_first,
            "game_score": self.game_score,
            "accumulators": self.acc.__dict__,
            "streams": self.streams.get_state(),
        }

    def restore_scalars(self, state: dict) -> None:
        self.step = int(state["step"])
        self.updates = int(state["updates"])
        self.loss_chain = state["loss_chain"]
        self.episode_first = bool(state["episode_first"])
        self.game_score = int(state["game_score"])
        self.acc = _Accumulators(**state["accumulators"])
        self.streams.set_state(state["streams"])


# ---------------------------------------------------------------------------------------------
# Resume points: a directory per point, named by resume/latest.json with every file's hash.
# latest.json is replaced atomically only after the directory is complete, so a SIGKILL at
# any moment leaves the previous point intact.


def save_resume_point(run: Run, offsets: dict[str, int]) -> None:
    resume_dir = run.dir / "resume"
    name = f"step-{run.step:09d}"
    target = resume_dir / name
    staging = resume_dir / f".{name}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)

    save_tensors(run.agent.get_state(), str(staging / "learner.safetensors"))
    replay_scalars, replay_arrays = run.replay.get_state()
    for array_name, array in replay_arrays.items():
        np.save(staging / f"replay.{array_name}.npy", array, allow_pickle=False)
    env_state = run.env.get_state()
    emulator = env_state.pop("emulator")
    np.save(staging / "emulator.screens.npy", emulator.pop("screens"), allow_pickle=False)
    np.save(staging / "history.npy", run.history.frames, allow_pickle=False)
    state = {
        "config_digest": run.config.digest(),
        "run": run.scalars(),
        "replay": replay_scalars,
        "env": env_state,
        "emulator": {**emulator, "ale": base64.b64encode(emulator["ale"]).decode()},
        "log_offsets": offsets,
    }
    (staging / "state.json").write_text(json.dumps(state, sort_keys=True))
    files = {}
    for path in sorted(staging.iterdir()):
        with open(path, "rb") as handle:
            os.fsync(handle.fileno())
        files[path.name] = sha256_file(path)
    fsync_dir(staging)
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    fsync_dir(resume_dir)
    write_json(resume_dir / "latest.json", {"step": run.step, "directory": name, "files": files})
    for old in resume_dir.iterdir():
        if old.is_dir() and old.name != name:
            shutil.rmtree(old, ignore_errors=True)


def load_resume_point(run: Run) -> dict[str, int] | None:
    """Restore `run` from its latest resume point; returns the log offsets, or None."""
    latest_path = run.dir / "resume" / "latest.json"
    if not latest_path.exists():
        return None
    latest = read_json(latest_path, "resume point index")
    point = run.dir / "resume" / str(latest.get("directory", ""))
    for name, expected in latest.get("files", {}).items():
        path = point / name
        if not path.exists():
            raise InputError(f"{path}: missing from the resume point")
        if sha256_file(path) != expected:
            raise InputError(f"{path}: SHA-256 does not match {latest_path} (corrupted)")
    state = read_json(point / "state.json", "resume state")
    if state["config_digest"] != run.config.digest():
        raise InputError(f"{point}: resume point was written with different params")

    run.agent.set_state(load_tensors(str(point / "learner.safetensors"),
                                     device=str(run.agent.device)))
    arrays = {
        name: np.load(point / f"replay.{name}.npy", mmap_mode="r", allow_pickle=False)
        for name in ("frames", "actions", "rewards", "terminals", "starts", "depths")
    }
    run.replay.set_state(state["replay"], arrays)
    emulator = dict(state["emulator"])
    emulator["ale"] = base64.b64decode(emulator["ale"])
    emulator["screens"] = np.load(point / "emulator.screens.npy", allow_pickle=False)
    run.env.set_state({**state["env"], "emulator": emulator})
    run.history.frames[...] = np.load(point / "history.npy", allow_pickle=False)
    run.restore_scalars(state["run"])
    return state["log_offsets"]


# ---------------------------------------------------------------------------------------------
# The loop


LOGS = ("hashes.jsonl", "process.jsonl")


def prepare_run_dir(config: RunConfig, run_dir: Path, restart: bool,
                    fingerprint: str) -> None:
    """Check an existing run directory belongs to these params and these experimental
    conditions (or discard it on request): results never mix either."""
    stale = workspace.stale_reason(run_dir, config.digest(), fingerprint)
    if stale and not restart:
        raise InputError(f"{run_dir}: holds a run trained with {stale}; rerun with "
                         "--restart to discard it")
    if stale or (restart and not (run_dir / "config.json").exists() and run_dir.exists()):
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json(run_dir / "config.json", {"digest": config.digest(), "fingerprint": fingerprint,
                                         "config": config.model_dump(mode="json")})


def train(config: RunConfig, run_dir: Path, restart: bool = False) -> Iterator[object]:
    """Train one run to completion, resuming from its last resume point if there is one."""
    run_dir = Path(run_dir)
    device, applied = determinism.configure(config.compute.device, config.compute.threads,
                                            config.compute.deterministic_gpu)
    conditions = provenance.collect(config.compute)
    prepare_run_dir(config, run_dir, restart, conditions["fingerprint"])
    if (run_dir / "complete.json").exists():
        yield Finished(step=config.train.steps, already=True)
        return
    write_json(run_dir / "determinism.json", applied)
    write_json(run_dir / "conditions.json", conditions)
    run = Run(config, run_dir, device)
    offsets = load_resume_point(run)
    if offsets is None:  # a fresh start: drop anything a killed first attempt left behind
        for name in LOGS:
            (run_dir / name).unlink(missing_ok=True)
        shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
        offsets = {name: 0 for name in LOGS}
    for name in LOGS:
        truncate(run_dir / name, offsets[name])
    yield Started(step=run.step, total=config.train.steps, resumed=run.step > 0)

    tcfg = config.train
    if run.step == 0:
        yield _checkpoint(run)
    last_time, last_step = time.monotonic(), run.step
    while run.step < tcfg.steps:
        run.advance()
        step = run.step
        if step % tcfg.log_every == 0 or step == tcfg.steps:
            run.flush_losses()
            now = time.monotonic()
            rate = (step - last_step) / max(now - last_time, 1e-9)
            last_time, last_step = now, step
            yield _process_record(run, rate)
        if step % tcfg.checkpoint_every == 0 or step == tcfg.steps:
            yield _checkpoint(run)
        if step % tcfg.resume_every == 0 and step < tcfg.steps:
            run.flush_losses()
            save_resume_point(run, {name: (run_dir / name).stat().st_size for name in LOGS})
            yield ResumePointWritten(step)
    write_json(run_dir / "complete.json",
               {"step": run.step, "updates": run.updates, "loss_chain_sha256": run.loss_chain})
    shutil.rmtree(run_dir / "resume", ignore_errors=True)
    yield Finished(step=run.step)


def _process_record(run: Run, rate: float) -> ProcessRecord:
    acc = run.acc
    record = {
        "step": run.step,
        "updates": run.updates,
        "loss": acc.loss_sum / acc.loss_count if acc.loss_count else None,
        "epsilon": epsilon_at(run.step, run.config.agent, run.config.replay.learning_starts),
        "episodes": acc.episodes,
        "game_scores": acc.game_scores,
        "steps_per_second": round(rate, 2),
    }
    append_line(run.dir / "process.jsonl", json.dumps(record))
    run.acc = _Accumulators()
    return ProcessRecord(run.step, record)


def _checkpoint(run: Run) -> CheckpointWritten:
    run.flush_losses()
    path = workspace.checkpoint_path(run.dir, run.step)
    digest = save_weights(path, cpu_weights(run.agent.online), {
        "step": run.step, "network": run.config.agent.network,
        "n_actions": run.env.n_actions, "history_length": run.config.env.history_length,
        "screen_size": run.config.env.screen_size,
    })
    line = {"step": run.step, "weights_sha256": digest, "loss_chain_sha256": run.loss_chain,
            "updates": run.updates}
    append_line(run.dir / "hashes.jsonl", json.dumps(line, sort_keys=True))
    return CheckpointWritten(run.step, digest, run.loss_chain, run.updates, path)
