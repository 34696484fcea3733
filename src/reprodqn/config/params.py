"""params.yaml, loaded once and validated into frozen, typed objects.

This is the one place for defaults and for input errors: every other module receives a
validated config and trusts it. Each field's description is its documentation; units are
agent steps (one action, = `frame_skip` emulator frames) unless a name says frames.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, ValidationError, model_validator

from reprodqn.config import sources
from reprodqn.config.compute import (
    SPEED_OPTIONS,
    ComputeConfig,
    check_speed_options,
    check_universal,
)
from reprodqn.config.games import GameId
from reprodqn.config.selection import RankerConfig, StartStatesConfig, check_ranker_checkpoint
from reprodqn.config.study import StudyConfig
from reprodqn.config.types import Frozen, PositiveInt, Probability, Seed
from reprodqn.config.variants import VARIANT_KNOBS, check_actors, check_n_step
from reprodqn.core import packaged
from reprodqn.core.digests import json_digest
from reprodqn.core.errors import InputError
from reprodqn.determinism import rng

# knobs that runs recorded before them lack: left out of the digest at the value they had
# before they existed (their default, or sources.BEFORE_IT_EXISTED's)
DIGEST_OPTIONAL = {**VARIANT_KNOBS, "compute": ("cpu_reduction_order", "numerics")}
# where and how fast: in the universal mode these change no bit of a run
UNIVERSAL_WHERE = ("device", "threads", "cpu_isa", "deterministic_gpu")


class EnvConfig(Frozen):
    """The Atari game through ale-py: frame skip, preprocessing, no-ops, sticky actions."""

    game: GameId = Field(
        "breakout", description="Any ROM id ale-py ships (e.g. pong); the paper: breakout."
    )
    frame_skip: PositiveInt = Field(4, description="Emulator frames per agent step.")
    history_length: PositiveInt = Field(4, description="Preprocessed frames stacked per state.")
    screen_size: PositiveInt = Field(84, description="Side of the square preprocessed frame.")
    noop_max: Annotated[int, Field(ge=0)] = Field(
        30, description="Training episodes start with 1..noop_max no-op frames (noop stream)."
    )
    sticky_p: Annotated[float, Field(ge=0.0, lt=1.0)] = Field(
        0.0, description="Per-frame probability of repeating the previous action (sticky stream)."
    )
    life_loss_ends_episode: bool = Field(
        True, description="A lost life ends the training episode (terminal for learning)."
    )
    max_episode_frames: PositiveInt = Field(
        108_000, description="Training episodes are truncated (not ended) after this many frames."
    )
    reward_clip: Annotated[float, Field(gt=0.0)] = Field(
        1.0, description="Learning rewards are clipped to [-reward_clip, reward_clip]."
    )
    sticky_survives_reset: bool = Field(
        True,
        description="In training, a new game keeps the previous action for sticky "
        "repeats (the authors' wrapper); false: it restarts from NOOP (ALE's own reset).",
    )
    resize: Literal["linear", "linear_exact"] = Field(
        "linear",
        description="OpenCV interpolation of the 84x84 resize: INTER_LINEAR (the "
        "authors' cv2.resize default; in the universal numerics computed by reprodqn in "
        "integers, OpenCV's bytes on every machine) or INTER_LINEAR_EXACT.",
    )


class AgentConfig(Frozen):
    """The DQN: network, optimizer, update and target-sync cadence, exploration."""

    network: Literal["nature", "nips"] = Field("nature", description="Q-network architecture.")
    discount: Annotated[float, Field(gt=0.0, le=1.0)] = Field(0.99, description="Gamma.")
    optimizer: Literal["rmsprop", "rmsprop_centered", "adam"] = Field(
        "rmsprop",
        description="rmsprop: torch's (the authors'); rmsprop_centered: DeepMind "
        "2015's (centred, eps inside the root); adam: torch's Adam (adam_* below).",
    )
    learning_rate: Annotated[float, Field(gt=0.0)] = Field(2.5e-4, description="Step size.")
    rmsprop_alpha: Annotated[float, Field(gt=0.0, lt=1.0)] = Field(0.95, description="Decay.")
    rmsprop_eps: Annotated[float, Field(gt=0.0)] = Field(
        0.01,
        description="RMSprop epsilon: "
        "after the square root (rmsprop), inside it (rmsprop_centered).",
    )
    adam_eps: Annotated[float, Field(gt=0.0)] = Field(1.5e-4, description="Adam epsilon.")
    adam_beta1: Annotated[float, Field(ge=0.0, lt=1.0)] = Field(0.9, description="Adam beta1.")
    adam_beta2: Annotated[float, Field(ge=0.0, lt=1.0)] = Field(0.999, description="Adam beta2.")
    loss: Literal["huber", "mse"] = Field(
        "huber",
        description="Per-sample loss: Huber (its "
        "gradient is the TD error clipped to +-1) or squared TD error.",
    )
    loss_reduction: Literal["mean", "sum"] = Field(
        "mean",
        description="Over the minibatch: "
        "mean (the authors') or sum (DeepMind 2015's summed gradient).",
    )
    batch_size: PositiveInt = Field(32, description="Transitions per update.")
    update_every: PositiveInt = Field(4, description="Agent steps between updates.")
    target_sync_every: PositiveInt = Field(10_000, description="Agent steps between target copies.")
    epsilon_start: Probability = Field(1.0, description="Exploration rate until learning starts.")
    epsilon_final: Probability = Field(0.1, description="Exploration rate after annealing.")
    epsilon_decay_steps: PositiveInt = Field(
        1_000_000, description="Agent steps of linear annealing, counted from learning_starts."
    )
    target_dtype: Literal["float32", "float64"] = Field(
        "float64",
        description="Precision of r + gamma max Q' before it is stored in float32 "
        "(the authors: float64).",
    )
    double: bool = Field(
        False,
        description="Double DQN target (van Hasselt et al. 2016): the online network "
        "picks argmax_a Q(s', a), the target network values it.",
    )
    dueling: bool = Field(
        False,
        description="Dueling head (Wang et al. 2016): Q = V + A - mean_a A, on the same torso.",
    )
    n_step: PositiveInt = Field(
        1,
        description="Steps summed in the return before bootstrapping, cut at terminals "
        "and episode ends (1: the authors' one-step target).",
    )


class ReplayConfig(Frozen):
    """Replay memory: its size and when learning starts."""

    capacity: Annotated[int, Field(ge=8)] = Field(1_000_000, description="Transitions stored.")
    learning_starts: Annotated[int, Field(ge=6)] = Field(
        50_000, description="Agent steps of pure exploration; updates come at steps beyond it."
    )
    episode_time_wraps: bool = Field(
        True,
        description="Keep each transition's step-in-episode in 8 bits, as the authors' "
        "uint8 episode_time, so sampled windows across a 256-step wrap are dropped too.",
    )
    prioritized: bool = Field(
        False,
        description="Proportional prioritized replay (Schaul et al. 2016; settings in "
        "the priority section); false: the authors' uniform sampling.",
    )


class PriorityConfig(Frozen):
    """Prioritized replay: used only when replay.prioritized is true."""

    alpha: Probability = Field(0.6, description="Priority exponent: P(i) ~ p_i^alpha.")
    beta_start: Probability = Field(0.4, description="Importance-sampling exponent at first.")
    beta_steps: PositiveInt = Field(
        20_000_000,
        description="Agent steps after learning_starts over which beta rises linearly to 1.",
    )
    eps: Annotated[float, Field(gt=0.0)] = Field(1e-6, description="Added to every |delta|.")
    importance_weights: bool = Field(
        True,
        description="Weight each sample's loss by (N P(i))^-beta / max over the batch; "
        "false: no weights (R2D2).",
    )
    eta: Probability = Field(
        0.0,
        description="R2D2 mixture: p = eta max|delta| + (1 - eta) mean|delta| over the "
        "n-step window's TD errors; 0 = plain |delta| of the sampled transition.",
    )


class TrainConfig(Frozen):
    """Length of a run and how often it writes checkpoints, resume points and logs."""

    steps: PositiveInt = Field(20_000_000, description="Agent steps of training.")
    checkpoint_every: PositiveInt = Field(
        250_000, description="Agent steps between weight checkpoints (the evaluation interval)."
    )
    resume_every: PositiveInt = Field(
        1_000_000, description="Agent steps between resume points (full training state)."
    )
    log_every: PositiveInt = Field(10_000, description="Agent steps between process.jsonl lines.")
    end_episode_at_evaluation: bool = Field(
        True,
        description="End the training episode (a new game) at every evaluation point "
        "after learning starts, as the authors' in-training evaluation did.",
    )
    actors: PositiveInt = Field(
        1,
        description="Games stepped in lockstep, one transition each per round (1: the "
        "paper's single actor). Steps count transitions; N must divide steps, the "
        "checkpoint, resume and log intervals and replay.capacity.",
    )


class SeedsConfig(Frozen):
    """One seed per random stream of a run (the paper varies one per group)."""

    init: Seed = Field(123, description="Network initialisation stream.")
    exploration: Seed = Field(123, description="Epsilon-greedy stream.")
    minibatch: Seed = Field(123, description="Replay sampling stream.")
    sticky: Seed = Field(123, description="Sticky-action stream (used only when sticky_p > 0).")
    noop: Seed = Field(123, description="No-op start stream.")
    generator: rng.Family = Field(
        "authors",
        description="authors: numpy RandomState (MT19937) per stream with the "
        "authors' draw calls; pcg64: numpy's PCG64 Generator.",
    )


# the seeds are the run's streams, named once in rng
assert tuple(SeedsConfig.model_fields)[:-1] == rng.RUN_STREAMS, "SeedsConfig != RUN_STREAMS"


class EvaluationConfig(Frozen):
    """The paper's evaluation protocol: greedy episodes from start states."""

    episodes: PositiveInt = Field(100, description="Greedy episodes per checkpoint.")
    max_frames: PositiveInt = Field(
        18_000, description="Emulator frames of play after the start sequence (5 minutes)."
    )
    sticky_seed_start: Seed = Field(
        0, description="Environment group: episode k uses sticky seed sticky_seed_start + k."
    )
    start_sequences: str = Field(
        "start_sequences/authors.json",
        description="The start-sequence file evaluated on: the authors' states (Breakout; "
        "left at this default, another env.game plays its own packaged file, else none), "
        "start_sequences/selected.json from the select stage, a game's own file "
        "(start_sequences/pong.json), or none: the reset screen after no-ops.",
    )
    inference_chunk: PositiveInt = Field(
        16, description="States per Q-network call (fixed, so batching changes no result)."
    )


class Params(Frozen):
    """Everything in params.yaml."""

    env: EnvConfig
    agent: AgentConfig
    replay: ReplayConfig
    train: TrainConfig
    seeds: SeedsConfig
    compute: ComputeConfig
    study: StudyConfig
    evaluation: EvaluationConfig = EvaluationConfig()
    start_states: StartStatesConfig = StartStatesConfig()
    ranker: RankerConfig = RankerConfig()
    priority: PriorityConfig = PriorityConfig()

    @model_validator(mode="after")
    def _evaluation_fits(self) -> Params:
        if self.evaluation.episodes > self.start_states.selected:
            raise ValueError(
                f"evaluation.episodes ({self.evaluation.episodes}) exceeds "
                f"start_states.selected ({self.start_states.selected})"
            )
        check_n_step(self)
        check_actors(self)
        check_speed_options(self)
        check_universal(self)
        return self


class RunConfig(Frozen):
    """What one training run needs: the base config with its group's changes applied."""

    group: str
    run: Annotated[int, Field(ge=0)]
    env: EnvConfig
    agent: AgentConfig
    replay: ReplayConfig
    train: TrainConfig
    seeds: SeedsConfig
    compute: ComputeConfig
    priority: PriorityConfig = PriorityConfig()

    @model_validator(mode="after")
    def _n_step_fits(self) -> RunConfig:
        check_n_step(self)
        check_actors(self)
        check_speed_options(self)
        check_universal(self)
        return self

    @classmethod
    def from_record(cls, config: Any) -> RunConfig:
        """A run's config.json config: the knobs it lacks as they were before they existed
        (a run recorded before compute.numerics computed in the standard numerics)."""
        return cls.model_validate(sources.fill_before_it_existed(copy.deepcopy(config)))

    def digest(self) -> str:
        """SHA-256 of everything that determines the run's outputs (not its name, nor the
        resume interval, which changes when state is saved but no result)."""
        return self._digest(compute=True)

    def experiment_digest(self) -> str:
        """The digest without `compute`: the same experiment computed with other threads
        or another instruction set (what a trace compares across machines)."""
        return self._digest(compute=False)

    def _digest(self, compute: bool) -> str:
        """The variant knobs and the CPU reduction order at their defaults (the authors' DQN,
        a fixed order), and the priority section unless replay is prioritized, are left out:
        they change nothing then, and runs trained before they existed keep their digests."""
        exclude: dict[str, Any] = {
            "group": True,
            "run": True,
            "train": {"resume_every"},
            "compute": set(SPEED_OPTIONS) if compute else True,
        }
        if compute and self.compute.numerics == "universal":
            exclude["compute"] = {*SPEED_OPTIONS, *UNIVERSAL_WHERE}
        body = self.model_dump(mode="json", exclude=exclude)
        for section, knobs in DIGEST_OPTIONAL.items():
            if section not in body:
                continue
            fields = type(getattr(self, section)).model_fields
            was = {
                k: sources.BEFORE_IT_EXISTED.get(f"{section}.{k}", fields[k].default) for k in knobs
            }
            body[section] = {k: v for k, v in body[section].items() if k not in was or was[k] != v}
        if not self.replay.prioritized:
            del body["priority"]
        return json_digest(body)


RUN_SECTIONS = ("env", "agent", "replay", "train", "seeds", "compute", "priority")


# ---------------------------------------------------------------------------------------------
# Loading


def load_params(
    path: str | Path = "params.yaml",
    overrides: list[str] | tuple = (),
    overlay: str | Path | list | None = None,
    notice=None,
) -> Params:
    """Read params.yaml, apply overlay files in order (partial params files, e.g. a variant
    preset, then the smoke scale) and `--set key.path=value` overrides, validate, and
    resolve every group's run config so that a bad value in any group's `set` is refused
    now, by every command. Raises InputError; `notice` gets a line naming lacking keys."""
    raw = sources.load_raw(path)
    sources.check_complete(raw, Params, str(path), packaged.version(), notice)
    origin = {}
    overlays = [] if overlay is None else overlay if isinstance(overlay, list) else [overlay]
    for item in overlays:
        sources.merge(raw, sources.load_raw(item), [], str(item))
    for item in overrides:
        key, value = sources.parse_override(item)
        sources.set_dotted(raw, key, value, source=f"--set {item}")
        origin[key] = f"--set {item}"
    params = _validate(Params, raw, str(path), origin)
    check_ranker_checkpoint(params.ranker)
    for group in params.study.studied_groups():  # every group's config, not only this run's
        resolve_run(params, group, 0)
    return params


def resolve_run(params: Params, group: str, run: int) -> RunConfig:
    """The config of run `run` of `group`: group overrides applied, the varied seed set."""
    if group not in params.study.groups:
        raise InputError(f"--group {group}: expected one of {', '.join(params.study.groups)}")
    runs = params.study.runs(group)
    if not runs:
        raise InputError(f"--group {group}: left out of this study (study.left_out)")
    if not 0 <= run < runs:
        raise InputError(f"--run {run}: expected 0..{runs - 1}")
    spec = params.study.groups[group]
    raw = {name: getattr(params, name).model_dump() for name in RUN_SECTIONS}
    raw.update(group=group, run=run)
    origin = {}
    for key, value in spec.set.items():
        sources.set_dotted(raw, key, value, source=f"study.groups.{group}.set.{key}")
        origin[key] = f"study.groups.{group}.set"
    if spec.vary:
        raw["seeds"][spec.vary] = spec.seeds[run]
    return _validate(RunConfig, raw, "params", origin)


def ranker_run(params: Params) -> RunConfig:
    """The ranking DQN: the deterministic group's config with the ranker's own step budget."""
    config = resolve_run(params, "deterministic", 0)
    train = config.train.model_copy(update={"steps": params.ranker.steps})
    return config.model_copy(update={"group": "ranker", "train": train})


def _validate(model: type[BaseModel], raw: dict, source: str, origin: dict[str, str]):
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise InputError(sources.one_line(exc, source, origin)) from None
