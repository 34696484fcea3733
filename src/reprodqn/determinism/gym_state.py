"""A Gymnasium environment as a part of a resume point, without private attributes in the
script: `exact.GymEnv(env)` saves and restores the env's random generator and its
spaces', the counters of Gymnasium's standard wrappers (TimeLimit, RecordEpisodeStatistics,
OrderEnforcing, Autoreset, FrameStackObservation, the normalising wrappers), the
classic-control envs' physical state, an Atari game through ALE's own state (its RNG
included), and any env or wrapper with get_state()/set_state() of its own.

What it does not know is refused when the adapter is made, naming the wrapper or env: a
wrapper whose state it cannot see would be left as it was, and the resumed run would part
from the uninterrupted one without a word.
"""

from __future__ import annotations

import collections
from typing import Any

import numpy as np

from reprodqn.core.errors import InputError

# each wrapper's and env's own state, by class name: the attributes that change as it runs
WRAPPER_STATE: dict[str, tuple[str, ...]] = {
    "TimeLimit": ("_elapsed_steps",),
    "OrderEnforcing": ("_has_reset",),
    "RecordEpisodeStatistics": (
        "episode_count",
        "episode_start_time",
        "episode_returns",
        "episode_lengths",
        "time_queue",
        "return_queue",
        "length_queue",
    ),
    "Autoreset": ("autoreset",),
    "FrameStackObservation": ("obs_queue",),
    "NormalizeObservation": ("obs_rms",),
    "NormalizeReward": ("return_rms", "discounted_reward"),
    "TimeAwareObservation": ("timesteps",),
}
STATELESS_WRAPPERS = frozenset(  # they compute from what they are given, keeping nothing
    {"TransformObservation", "TransformAction", "TransformReward", "ClipAction", "ClipReward"}
    | {"RescaleAction", "RescaleObservation", "FlattenObservation", "ReshapeObservation"}
    | {"ResizeObservation", "GrayscaleObservation", "DtypeObservation", "FilterObservation"}
    | {"DiscretizeAction", "DiscretizeObservation"}
    | {"PassiveEnvChecker"}  # its flags say what it has checked: warnings, never numbers
)
CHECKED = ("checked_reset", "checked_step", "checked_data_reuse")  # the run checked it already
ENV_STATE: dict[str, tuple[str, ...]] = {  # Gymnasium's classic control
    "CartPoleEnv": ("state", "steps_beyond_terminated"),
    "MountainCarEnv": ("state",),
    "Continuous_MountainCarEnv": ("state",),
    "PendulumEnv": ("state", "last_u"),
    "AcrobotEnv": ("state",),
}
ATARI = "AtariEnv"  # ale_py's: its game, emulator and RNG through ALE's cloneState


class GymEnv:
    """A Gymnasium env (wrappers and all) as a resume point's part: `parts = {"env":
    exact.GymEnv(env), ...}`. An env it cannot capture is refused here, in one line."""

    def __init__(self, env: Any):
        self.env = env
        self.layers = _layers(env)
        for layer in self.layers:
            _capturable(layer)

    def get_state(self) -> dict:
        return {str(index): _layer_state(layer) for index, layer in enumerate(self.layers)}

    def set_state(self, state: dict) -> None:
        names = [type(layer).__name__ for layer in self.layers]
        saved = [state[str(index)]["class"] for index in range(len(state))]
        if saved != names:
            raise InputError(
                f"GymEnv: the resume point holds the env {saved}; this run has {names}"
            )
        for index, layer in enumerate(self.layers):
            _set_layer_state(layer, state[str(index)])


def _layers(env: Any) -> list:
    """The wrappers from the outside in, then the env itself."""
    layers = [env]
    while hasattr(layers[-1], "env") and layers[-1] is not getattr(layers[-1], "unwrapped", None):
        layers.append(layers[-1].env)
    return layers


def _own(layer: Any) -> bool:
    """The layer keeps its own state (reprodqn's envs, a script's own wrapper)."""
    kind = type(layer)
    return callable(getattr(kind, "get_state", None)) and callable(getattr(kind, "set_state", None))


def _capturable(layer: Any) -> None:
    name = type(layer).__name__
    if _own(layer) or name in WRAPPER_STATE or name in STATELESS_WRAPPERS:
        return
    if name in ENV_STATE or name == ATARI:
        return
    kind = "wrapper" if layer is not getattr(layer, "unwrapped", layer) else "env"
    raise InputError(
        f"GymEnv: the {kind} {name} ({type(layer).__module__}) keeps a state this adapter "
        "does not know, which a resume would leave as it was; give it get_state()/set_state()"
    )


def _layer_state(layer: Any) -> dict:
    name = type(layer).__name__
    state: dict[str, Any] = {"class": name}
    if _own(layer):
        state["own"] = layer.get_state()
    elif name == ATARI:
        state["ale"] = bytes(layer.ale.cloneState(include_rng=True).serialize())
    for attribute in WRAPPER_STATE.get(name, ()) + ENV_STATE.get(name, ()):
        state[attribute] = _value(getattr(layer, attribute))
    if layer is getattr(layer, "unwrapped", None):
        state["np_random"] = _generator_state(getattr(layer, "_np_random", None))
        state["np_random_seed"] = getattr(layer, "_np_random_seed", None)
    for space in ("_action_space", "_observation_space", "action_space", "observation_space"):
        found = vars(layer).get(space)
        if found is not None:
            state[space] = _generator_state(getattr(found, "_np_random", None))
    return state


def _set_layer_state(layer: Any, state: dict) -> None:
    name = type(layer).__name__
    if name == "PassiveEnvChecker":  # its first step compares with a reset this env lacks
        for flag in CHECKED:
            setattr(layer, flag, True)
    if "own" in state:
        layer.set_state(state["own"])
    if "ale" in state:
        from ale_py import ALEState

        layer.ale.restoreState(ALEState(state["ale"]))
    for attribute in WRAPPER_STATE.get(name, ()) + ENV_STATE.get(name, ()):
        setattr(layer, attribute, _restored(getattr(layer, attribute), state[attribute]))
    if "np_random" in state:
        layer._np_random = _generator(state["np_random"])
        layer._np_random_seed = state["np_random_seed"]
    for space in ("_action_space", "_observation_space", "action_space", "observation_space"):
        if space in state:
            vars(layer)[space]._np_random = _generator(state[space])


def _value(value: Any) -> Any:
    """A wrapper's attribute as a resume point holds it (deques and running statistics as
    dicts, arrays copied)."""
    if isinstance(value, collections.deque):
        return {"deque": [_value(item) for item in value], "maxlen": value.maxlen}
    if type(value).__name__ == "RunningMeanStd":
        return {"mean": np.array(value.mean), "var": np.array(value.var), "count": value.count}
    return np.array(value) if isinstance(value, np.ndarray) else value


def _restored(current: Any, saved: Any) -> Any:
    if isinstance(current, collections.deque):
        return collections.deque(
            [np.array(item) if isinstance(item, np.ndarray) else item for item in saved["deque"]],
            maxlen=saved["maxlen"],
        )
    if type(current).__name__ == "RunningMeanStd":
        current.mean, current.var = np.array(saved["mean"]), np.array(saved["var"])
        current.count = saved["count"]
        return current
    return np.array(saved) if isinstance(saved, np.ndarray) else saved


def _generator_state(generator: np.random.Generator | None) -> dict | None:
    return None if generator is None else dict(generator.bit_generator.state)


def _generator(state: dict | None) -> np.random.Generator | None:
    if state is None:
        return None
    generator = np.random.Generator(getattr(np.random, state["bit_generator"])())
    generator.bit_generator.state = state
    return generator
