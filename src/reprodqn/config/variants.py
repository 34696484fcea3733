"""The DQN family in params: which algorithm a config names, the knobs' defaults (the authors'
DQN), and the limits the switches must respect. Kept apart from config.py's schema so
the report and tracking can name an algorithm without the whole loader."""

from __future__ import annotations

from pathlib import Path

from reprodqn.core.errors import InputError

# params overlays in presets/ beside params.yaml: presets/<name>.yaml
# (`reprodqn params --preset NAME`, `make smoke PRESET=NAME`)
PRESETS = ("double", "dueling", "per", "r2d2-priority", "authors-2018", "deepmind-2015",
           "adam")


def preset_path(params_path: str | Path, name: str) -> Path:
    """The overlay file of a preset, in presets/ beside the params file; one line for an
    unknown name."""
    if name not in PRESETS:
        raise InputError(f"--preset {name}: unknown variant; expected one of "
                         f"{', '.join(PRESETS)}")
    return Path(params_path).parent / "presets" / f"{name}.yaml"

# the DQN-family switches (issue 13); these values are the authors' DQN
VARIANT_DEFAULTS = {"agent": {"double": False, "dueling": False, "n_step": 1,
                              "optimizer": "rmsprop", "loss": "huber",
                              "loss_reduction": "mean", "adam_eps": 1.5e-4,
                              "adam_beta1": 0.9, "adam_beta2": 0.999},
                    "replay": {"prioritized": False},
                    "train": {"actors": 1}}


def check_n_step(config) -> None:
    """An n-step window plus a state's history must fit in what replay holds when learning
    starts (and in its capacity), or no transition could ever be sampled."""
    room = min(config.replay.learning_starts, config.replay.capacity)
    most = room - config.env.history_length - 2
    if config.agent.n_step > most:
        raise ValueError(f"agent.n_step ({config.agent.n_step}) exceeds what replay history "
                         f"allows: at most {most} (min(replay.learning_starts, "
                         f"replay.capacity) - env.history_length - 2)")


def check_actors(config) -> None:
    """N lockstep actors store N transitions per round: every interval counted in steps
    must hold whole rounds, and each actor gets an equal share of replay. Prioritized
    replay keeps one sum tree over one memory, so it stays single-actor."""
    n = config.train.actors
    if n == 1:
        return
    counts = {"train.steps": config.train.steps,
              "train.checkpoint_every": config.train.checkpoint_every,
              "train.resume_every": config.train.resume_every,
              "train.log_every": config.train.log_every,
              "replay.capacity": config.replay.capacity}
    for name, value in counts.items():
        if value % n:
            raise ValueError(f"{name} ({value}) must be a multiple of train.actors ({n})")
    if config.replay.prioritized:
        raise ValueError(f"train.actors ({n}) > 1 needs uniform replay "
                         "(replay.prioritized: false)")


OPTIMIZER_NAMES = {"rmsprop": "RMSprop", "rmsprop_centered": "centred RMSProp",
                   "adam": "Adam"}


def algorithm_name(config) -> str:
    """The algorithm a config trains, in the papers' words, with its optimizer: 'DQN
    (RMSprop)', 'Double DQN (Adam)', 'Dueling Double DQN, 3-step, prioritized replay with
    R2D2 priority (centred RMSProp)' ..."""
    agent = config.agent
    name = ("Dueling " if agent.dueling else "") + ("Double DQN" if agent.double else "DQN")
    extras = [f"{agent.n_step}-step"] if agent.n_step > 1 else []
    if config.replay.prioritized:
        extras.append("prioritized replay" + (" with R2D2 priority" if config.priority.eta > 0
                                              else ""))
    if config.train.actors > 1:
        extras.append(f"{config.train.actors} lockstep actors")
    return f"{', '.join([name, *extras])} ({OPTIMIZER_NAMES[agent.optimizer]})"
