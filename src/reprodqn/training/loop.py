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
  actor_workers.jsonl  lockstep runs with game workers: each sitting's worker pids
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import torch

from reprodqn.config.params import RunConfig
from reprodqn.core import run_lock, storage, workspace
from reprodqn.core.atomic import append_line, read_json, truncate, write_json
from reprodqn.core.errors import InputError
from reprodqn.core.events import (
    CheckpointWritten,
    Finished,
    ProcessRecord,
    ResumePointWritten,
    Started,
    Stepped,
)
from reprodqn.core.workers import actor_workers
from reprodqn.determinism import log_lines, numerics, provenance, resume
from reprodqn.determinism.checkpoints import cpu_weights
from reprodqn.determinism.rng import TRAINING_STREAMS, Streams, torch_generator
from reprodqn.dqn.agent import make_agent
from reprodqn.dqn.cuda_graphs import CudaGraphs
from reprodqn.dqn.device_replay import DeviceReplayMemory
from reprodqn.dqn.prioritized_replay import PrioritizedReplay, check_memory
from reprodqn.dqn.replay import ReplayMemory
from reprodqn.training.atari import FrameHistory, TrainingEnv, frame_env
from reprodqn.training.lockstep import LockstepRun
from reprodqn.training.run_state import Accumulators, RunState
from reprodqn.universal.record import universal_record

# ---------------------------------------------------------------------------------------------
# The run


def build_replay(config: RunConfig, device: torch.device) -> ReplayMemory | PrioritizedReplay:
    """The authors' uniform replay, with n-step returns when agent.n_step > 1, wrapped in
    proportional prioritized sampling when replay.prioritized; its frames in the device's
    memory when compute.replay_on_device."""
    env_cfg = config.env
    if config.compute.replay_on_device:  # uniform, 1-step (the config holds it to that)
        return DeviceReplayMemory(
            config.replay.capacity,
            env_cfg.history_length,
            env_cfg.screen_size,
            device,
            config.replay.episode_time_wraps,
        )
    if config.replay.prioritized:  # before anything is allocated
        check_memory(config.replay.capacity, env_cfg.screen_size)
    memory = ReplayMemory(
        config.replay.capacity,
        env_cfg.history_length,
        env_cfg.screen_size,
        config.replay.episode_time_wraps,
        config.agent.n_step,
        config.agent.discount,
        config.compute.numerics == "universal",
    )
    if not config.replay.prioritized:
        return memory
    if config.compute.numerics == "universal":  # p ** alpha the same on every machine
        from reprodqn.universal.rounding import power64

        return PrioritizedReplay(memory, config.priority, power64)
    return PrioritizedReplay(memory, config.priority)


class Run(RunState):
    """All state of one training run, composed from parts that each save and restore."""

    replay: ReplayMemory | PrioritizedReplay

    def __init__(self, config: RunConfig, run_dir: Path, device: torch.device):
        self.config = config
        self.dir = run_dir
        env_cfg = frame_env(config)  # the resize its frames get in its numerics mode
        seeds = config.seeds.model_dump()
        self.streams = Streams(
            {name: seeds[name] for name in TRAINING_STREAMS}, config.seeds.generator
        )
        sticky = self.streams["sticky"] if env_cfg.sticky_p > 0 else None
        self.env = TrainingEnv(env_cfg, sticky, self.streams["noop"])
        self.history = FrameHistory(env_cfg.history_length, env_cfg.screen_size)
        self.replay = build_replay(config, device)
        self.agent = make_agent(
            config.agent,
            n_actions=self.env.n_actions,
            history_length=env_cfg.history_length,
            screen_size=env_cfg.screen_size,
            device=device,
            init_generator=torch_generator(seeds["init"]),
            learning_starts=config.replay.learning_starts,
            reward_clip=env_cfg.reward_clip,
            priority_config=config.priority if config.replay.prioritized else None,
            reduction_order=config.compute.cpu_reduction_order,
            numerics=config.compute.numerics,
        )
        if config.compute.cuda_graphs:
            self.agent.graphs = cuda_graphs(self.replay, self.agent, device)
        self.n_actions = self.env.n_actions
        self.start_counters()
        self.episode_step = 0  # the authors' time_since_term: steps since the episode began
        self.game_score = 0
        self.history.reset(self.env.begin_episode())

    # -- one agent step ----------------------------------------------------------------------
    def advance(self) -> None:
        """One agent step in the authors' order (dqn/train.py ~93-137): act, store the
        transition, end the episode if it ended (or at an evaluation point), learn."""
        action = self.agent.act(self.history.frames, self.streams["exploration"])
        frame, reward, terminal, truncated, game_over = self.env.step(action)
        self.game_score += reward
        self.replay.add(frame, action, self.agent.clip_reward(reward), terminal, self.episode_step)
        self.episode_step += 1
        cut = self.evaluation_cut(self.step)
        if terminal or truncated or cut:
            if cut:  # their evaluation ran here, then reset_game() (stored: not terminal)
                self.env.end_game()
            self.game_score = self.episode_ended(self.game_score, game_over or truncated or cut)
            self.history.reset(self.env.begin_episode())
            self.episode_step = 0
        else:
            self.history.push(frame)
        self.learn(self.step)
        self.step += 1

    # -- exact resume: what one actor adds to RunState's ---------------------------------------
    def own_counters(self) -> dict:
        return {"episode_step": self.episode_step, "game_score": self.game_score}

    def set_own_counters(self, counters: dict) -> None:
        self.episode_step = int(counters["episode_step"])
        self.game_score = int(counters["game_score"])

    def games_state(self) -> dict:
        return {"env": self.env.get_state(), "history": self.history.get_state()}

    def set_games_state(self, state: dict) -> None:
        self.env.set_state(state["env"])
        self.history.set_state(state["history"])


def cuda_graphs(replay, agent, device: torch.device) -> CudaGraphs:
    """compute.cuda_graphs on the device this run resolved to: refused on a CPU."""
    if device.type != "cuda":
        raise InputError(
            f"compute.cuda_graphs: true needs a CUDA device; this run's compute.device "
            f"resolved to {device.type} (set compute.cuda_graphs: false on a CPU)"
        )
    assert isinstance(replay, DeviceReplayMemory)  # the config requires replay_on_device
    return CudaGraphs(agent, replay)


# ---------------------------------------------------------------------------------------------
# The loop


LOGS = workspace.RUN_LOGS
STEPPED_EVERY = 100  # agent steps between Stepped events: well under a second at any rate


def prepare_run_dir(config: RunConfig, run_dir: Path, restart: bool, fingerprint: str) -> None:
    """Check an existing run directory belongs to these params and these experimental
    conditions (or discard it on request): results never mix either."""
    stale = workspace.stale_reason(run_dir, config.digest(), fingerprint)
    if stale and not restart:
        changed = _changed_params(run_dir, config)
        raise InputError(
            f"{run_dir}: holds a run trained with {stale}{changed}; rerun with --restart to "
            "discard it"
        )
    if stale or (restart and not (run_dir / workspace.RUN_CONFIG).exists() and run_dir.exists()):
        for child in run_dir.iterdir():  # all but the lock this process holds
            if child.name != run_lock.LOCK_NAME:
                shutil.rmtree(child) if child.is_dir() else child.unlink()
    run_dir.mkdir(parents=True, exist_ok=True)
    write_json(
        run_dir / workspace.RUN_CONFIG,
        {
            "digest": config.digest(),
            "fingerprint": fingerprint,
            "config": config.model_dump(mode="json"),
        },
    )


def _changed_params(run_dir: Path, config: RunConfig) -> str:
    """The params that differ from those the run was trained with, named with both values."""
    from reprodqn.determinism.provenance import differing_values

    recorded = read_json(run_dir / workspace.RUN_CONFIG, "run config").get("config")
    if not isinstance(recorded, dict):
        return ""
    changed = differing_values(config.model_dump(mode="json"), recorded, ("now", "recorded"))
    return f": {'; '.join(changed)}" if changed else ""


def train(
    config: RunConfig, run_dir: Path, restart: bool = False, until: int | None = None
) -> Iterator[object]:
    """Train one run to completion, resuming from its last resume point if there is one.
    With `until`, stop after that step and leave a resume point there instead (a spot-check
    of a shipped run, or a resume point to ship). The run's lock is held throughout: a
    second writer is refused, or an executor's job waits (run_lock)."""
    run_dir = Path(run_dir)
    what = f"train {config.group}/{config.run}"
    with (
        run_lock.hold(run_dir, what, run_lock.wait_from_env()),
        storage.failures(what, run_dir, lambda: resume.kept_point(workspace.resume_dir(run_dir))),
    ):
        yield from _train(config, run_dir, restart, until)


def _train(config: RunConfig, run_dir: Path, restart: bool, until: int | None) -> Iterator[object]:
    device, applied = numerics.configure(
        config.compute.device, config.compute.threads, config.compute.deterministic_gpu
    )
    applied |= numerics.configure_universal(config.compute.numerics, config.compute.threads, device)
    conditions = provenance.collect(config.compute)
    prepare_run_dir(config, run_dir, restart, conditions["fingerprint"])
    if (run_dir / workspace.COMPLETE).exists():
        yield Finished(step=config.train.steps, already=True)
        return
    write_json(run_dir / workspace.DETERMINISM, applied)
    write_json(run_dir / workspace.CONDITIONS, conditions)
    run = make_run(config, run_dir, device)
    try:
        yield from _steps(run, until)
    finally:
        run.close()


def make_run(config: RunConfig, run_dir: Path, device: torch.device) -> RunState:
    """The paper's single actor, or N lockstep actors (train.actors) whose games run in
    REPRODQN_ACTOR_WORKERS processes."""
    if config.train.actors == 1:
        return Run(config, run_dir, device)
    return LockstepRun(config, run_dir, device, actor_workers())


def _restore(run: RunState) -> None:
    """The run at its latest resume point, its logs cut back to that point; or a fresh
    start, without anything a killed first attempt left behind."""
    config, run_dir = run.config, run.dir
    if config.train.resume_every < config.train.steps:
        storage.require_room(
            f"train {config.group}/{config.run}", run_dir, resume_point_bytes(run), "a resume point"
        )
    offsets = run.load_resume_point()
    if offsets is None:
        for name in LOGS:
            (run_dir / name).unlink(missing_ok=True)
        shutil.rmtree(workspace.checkpoints_dir(run_dir), ignore_errors=True)
        offsets = {name: 0 for name in LOGS}
    lines = {"bytes": offsets[workspace.HASHES], log_lines.RECORD: offsets.get(log_lines.RECORD)}
    log_lines.check(run_dir / workspace.HASHES, lines)  # a chain line changed since: refused
    for name in LOGS:
        truncate(run_dir / name, offsets[name])


def _end_step(run: RunState, until: int | None) -> int:
    """The step this sitting stops at: the run's end, or `until` if it is a whole round."""
    tcfg = run.config.train
    end = tcfg.steps if until is None else min(until, tcfg.steps)
    if run.step > end:
        raise InputError(f"{run.dir}: its resume point is at step {run.step}, past {end}")
    if end % tcfg.actors:
        raise InputError(
            f"--until {end}: with {tcfg.actors} lockstep actors a run stops "
            f"only after whole rounds (a multiple of train.actors)"
        )
    return end


def _steps(run: RunState, until: int | None) -> Iterator[object]:
    config, run_dir, tcfg = run.config, run.dir, run.config.train
    _restore(run)
    yield Started(
        step=run.step,
        total=config.train.steps,
        resumed=run.step > 0,
        learning_starts=config.replay.learning_starts,
    )
    end = _end_step(run, until)
    if run.worker_pids:  # which processes stepped the games in this sitting
        append_line(
            run_dir / workspace.ACTOR_WORKERS,
            json.dumps({"step": run.step, "actors": tcfg.actors, "pids": run.worker_pids}),
        )
    if run.step == 0 and not workspace.read_hashes(run_dir):  # a point at step 0 has it
        yield _checkpoint(run)
    last_time, last_step = time.monotonic(), run.step
    while run.step < end:
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
        if step % STEPPED_EVERY < tcfg.actors:  # the round that reached a multiple
            yield Stepped(step)
        if step % tcfg.resume_every == 0 and step < tcfg.steps:
            run.save_resume_point(_log_offsets(run_dir))
            yield ResumePointWritten(step)
    if run.step < tcfg.steps:  # stopped at `until`
        if run.step == 0 or run.step % tcfg.resume_every:
            run.save_resume_point(_log_offsets(run_dir))
            yield ResumePointWritten(run.step)
        return
    write_json(
        run_dir / workspace.COMPLETE,
        {"step": run.step, "updates": run.updates, "loss_chain_sha256": run.loss_chain},
    )
    shutil.rmtree(workspace.resume_dir(run_dir), ignore_errors=True)
    yield Finished(step=run.step)


def resume_point_bytes(run: RunState) -> int:
    """About what one resume point writes: the replay memory's arrays (7.06 GB at 1M) and
    the learner's tensors (weights, target, optimizer state)."""
    arrays = run.replay.nbytes
    tensors = sum(p.numel() * p.element_size() for p in run.agent.online.parameters())
    return arrays + 4 * tensors


def _log_offsets(run_dir: Path) -> dict:
    """Each log's length now (0 before its first line: a resume point can precede it), and
    the chain's lines as they are now, checked at resume."""
    offsets = {
        name: (run_dir / name).stat().st_size if (run_dir / name).exists() else 0 for name in LOGS
    }
    hashes = run_dir / workspace.HASHES
    return offsets | {log_lines.RECORD: log_lines.digests(hashes, offsets[workspace.HASHES])}


def _process_record(run: RunState, rate: float) -> ProcessRecord:
    acc = run.acc
    record = {
        "step": run.step,
        "updates": run.updates,
        "loss": acc.loss_sum / acc.loss_count if acc.loss_count else None,
        "loss_chain_sha256": run.loss_chain,  # where two runs' losses part, to log_every
        "epsilon": run.agent.epsilon.value,
        "episodes": acc.episodes,
        "game_scores": acc.game_scores,
        "steps_per_second": round(rate, 2),
    }
    append_line(run.dir / workspace.PROCESS, json.dumps(record))
    run.acc = Accumulators()
    return ProcessRecord(run.step, record)


def _checkpoint(run: RunState) -> CheckpointWritten:
    run.flush_losses()
    line = run.chain.checkpoint(
        run.step,
        cpu_weights(run.agent.online),
        {
            "network": run.config.agent.network,
            "n_actions": str(run.n_actions),
            "history_length": str(run.config.env.history_length),
            "screen_size": str(run.config.env.screen_size),
            **({"dueling": "True"} if run.config.agent.dueling else {}),  # absent: a plain Q head
            **universal_record(run.config.compute.numerics),  # absent: standard
        },
    )
    path = workspace.checkpoint_path(run.dir, run.step)
    return CheckpointWritten(run.step, line["weights_sha256"], run.loss_chain, run.updates, path)
