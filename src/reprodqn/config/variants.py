"""The DQN family in params: which algorithm a config names, which knobs are its switches
(their defaults, the params models', are the authors' DQN), the limits the switches must
respect, and the presets. Kept apart from the params models (config.params) so the report
and tracking can name an algorithm without the whole loader."""

from __future__ import annotations

from pathlib import Path

from reprodqn.core import packaged
from reprodqn.core.errors import InputError


def _preset_files(params_path: str | Path) -> dict[str, Path]:
    """The package's presets, then those in presets/ beside the params file (a workspace's
    own, which win by name)."""
    found = {p.stem: p for p in packaged.presets_dir().glob("*.yaml")}
    found |= {p.stem: p for p in (Path(params_path).parent / "presets").glob("*.yaml")}
    return found


def preset_names(params_path: str | Path) -> list[str]:
    """Each preset is a params overlay (`reprodqn params --preset NAME`, `make smoke
    PRESET=NAME`): the package's presets and any in presets/ beside the params file."""
    return sorted(_preset_files(params_path))


def preset_path(params_path: str | Path, name: str) -> Path:
    """The overlay file of a preset; one line for an unknown name."""
    found = _preset_files(params_path)
    if name not in found:
        raise InputError(
            f"--preset {name}: no such preset (the package's, or presets/{name}.yaml beside "
            f"{params_path}); expected one of {', '.join(sorted(found))}"
        )
    return found[name]


# the DQN-family switches, by section; their defaults (the models') are the authors' DQN
VARIANT_KNOBS = {
    "agent": (
        "double",
        "dueling",
        "n_step",
        "optimizer",
        "loss",
        "loss_reduction",
        "adam_eps",
        "adam_beta1",
        "adam_beta2",
    ),
    "replay": ("prioritized",),
    "train": ("actors",),
}


def check_n_step(config) -> None:
    """An n-step window plus a state's history must fit in what replay holds when learning
    starts (and in its capacity), or no transition could ever be sampled."""
    room = min(config.replay.learning_starts, config.replay.capacity)
    most = room - config.env.history_length - 2
    if config.agent.n_step > most:
        raise ValueError(
            f"agent.n_step ({config.agent.n_step}) exceeds what replay history "
            f"allows: at most {most} (min(replay.learning_starts, "
            f"replay.capacity) - env.history_length - 2)"
        )


def check_actors(config) -> None:
    """N lockstep actors store N transitions per round: every interval counted in steps
    must hold whole rounds, and each actor gets an equal share of replay. Prioritized
    replay keeps one sum tree over one memory, so it stays single-actor."""
    n = config.train.actors
    if n == 1:
        return
    counts = {
        "train.steps": config.train.steps,
        "train.checkpoint_every": config.train.checkpoint_every,
        "train.resume_every": config.train.resume_every,
        "train.log_every": config.train.log_every,
        "replay.capacity": config.replay.capacity,
    }
    for name, value in counts.items():
        if value % n:
            raise ValueError(f"{name} ({value}) must be a multiple of train.actors ({n})")
    if config.replay.prioritized:
        raise ValueError(f"train.actors ({n}) > 1 needs uniform replay (replay.prioritized: false)")


OPTIMIZER_NAMES = {"rmsprop": "RMSprop", "rmsprop_centered": "centred RMSProp", "adam": "Adam"}


def algorithm_name(config) -> str:
    """The algorithm a config trains, in the papers' words, with its optimizer: 'DQN
    (RMSprop)', 'Double DQN (Adam)', 'Dueling Double DQN, 3-step, prioritized replay with
    R2D2 priority (centred RMSProp)' ..."""
    agent = config.agent
    name = ("Dueling " if agent.dueling else "") + ("Double DQN" if agent.double else "DQN")
    extras = [f"{agent.n_step}-step"] if agent.n_step > 1 else []
    if config.replay.prioritized:
        extras.append(
            "prioritized replay" + (" with R2D2 priority" if config.priority.eta > 0 else "")
        )
    if config.train.actors > 1:
        extras.append(f"{config.train.actors} lockstep actors")
    return f"{', '.join([name, *extras])} ({OPTIMIZER_NAMES[agent.optimizer]})"
