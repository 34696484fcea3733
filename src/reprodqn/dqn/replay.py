"""Replay memory as the authors' code keeps it (repro_dqn dqn/replaybuffer.py): one 84x84
uint8 frame per agent step (7.06 GB for 1M steps, where stored 4-frame stacks of s and s'
would take 28 GB), stacks rebuilt on sampling, and their rule for what may be sampled.

Slot i holds the frame seen after the action of some step t, that action, its clipped
reward, whether the episode ended with it, and t's index within its episode
(episode_time). Index i stands for the transition s = frames i-4..i-1, a_i, r_i,
s' = frames i-3..i. Indices are drawn one at a time, uniform in [history, size - 2]
(their randint(hist_len, size - 1)), and a draw is dropped and drawn again when:
  - the window i-history..i touches the write position (it would mix old and new data),
  - a terminal lies in i-history..i-1 (s would span two episodes),
  - episode_time is not strictly increasing over i-history..i-1 (an episode began inside s).
So every state trained on holds 4 real frames of one episode (one life): the first steps
of each episode, whose acting state had zero padding, are never learned from. episode_time
is uint8 in their code, so windows across each 256-step wrap are dropped too
(replay.episode_time_wraps). An episode cut without a terminal (the evaluation cut, a
truncation) leaves one transition whose s' starts the next episode, as in their code.

n-step returns (agent.n_step > 1) are computed when sampled, from the stored rewards, so
memory stays one frame per step: index i stands for s_i, a_i, G = sum_{k<m} gamma^k r_{i+k}
and the state after step i+m-1, bootstrapped with gamma^m. The window stops at m < n when
step i+m-1 was terminal (a life loss with life_loss_ends_episode; no bootstrap), or when
step i+m began a new episode without one (a cut: bootstrap from the last state before it).
A per-slot `starts` flag records episode beginnings exactly (episode_time wraps at 256);
with n > 1 the transition whose s and a straddle a cut is not sampled, and the window
i-history..i+n-1 must not touch the write position. Indices are drawn from [history,
size - n], the authors' range when n = 1.
"""

from __future__ import annotations

import numpy as np

from reprodqn.determinism.rng import Stream

_ARRAYS = ("frames", "actions", "rewards", "terminals", "episode_time")
MAX_REDRAWS = 1_000_000  # their loop would spin forever; a buffer this bad is a bug


def replay_bytes(capacity: int, frame_size: int) -> int:
    """What a uniform memory of this capacity takes: a frame and 7 bytes of action,
    reward, terminal and episode time per slot (7.06 GB at 1M Atari frames)."""
    return capacity * (frame_size * frame_size + 7)


class ReplayMemory:
    def __init__(
        self,
        capacity: int,
        history_length: int,
        frame_size: int,
        episode_time_wraps: bool = True,
        n_step: int = 1,
        discount: float = 0.99,
        running_powers: bool = False,
    ):
        self.capacity = capacity
        self.n_step = n_step
        self.discount = discount
        # the universal numerics' gamma^k: running binary64 products, the same bits on every
        # machine (pow is not correctly rounded in every libm); None: `discount ** k`
        self.powers = None
        if running_powers:
            powers = [1.0]
            for _ in range(n_step):
                powers.append(powers[-1] * discount)
            self.powers = np.array(powers)
        # n > 1 only: which slots hold an episode's first step (exact, unlike episode_time)
        self.starts = np.zeros(capacity if n_step > 1 else 0, dtype=bool)
        self.history_length = history_length
        self.frames = self.allocate_frames(capacity, frame_size)
        self.actions = np.zeros(capacity, dtype=np.uint8)
        self.rewards = np.zeros(capacity, dtype=np.float32)
        self.terminals = np.zeros(capacity, dtype=bool)
        self.episode_time = np.zeros(capacity, dtype=np.uint8 if episode_time_wraps else np.int64)
        self.time_modulus = 256 if episode_time_wraps else None
        self.cursor = 0
        self.size = 0
        self._window = np.arange(-history_length, 1)  # i-history .. i

    def __len__(self) -> int:
        return self.size

    def allocate_frames(self, capacity: int, frame_size: int):
        """Where the frames live: host memory here (device_replay keeps them on a GPU)."""
        return np.zeros((capacity, frame_size, frame_size), dtype=np.uint8)

    def store_frame(self, index: int, frame: np.ndarray) -> None:
        self.frames[index] = frame

    @property
    def nbytes(self) -> int:
        return sum(getattr(self, name).nbytes for name in self._arrays())

    def _arrays(self) -> tuple[str, ...]:
        return (*_ARRAYS, "starts") if self.n_step > 1 else _ARRAYS

    # -- writing -----------------------------------------------------------------------------
    def add(
        self, frame: np.ndarray, action: int, reward: float, terminal: bool, episode_time: int
    ) -> None:
        """Store the frame seen after action a_t with a_t, r_t, whether the episode ended,
        and t's index within its episode (the authors' add_item)."""
        i = self.cursor
        self.store_frame(i, frame)
        self.actions[i] = action
        self.rewards[i] = reward
        self.terminals[i] = terminal
        if self.n_step > 1:
            self.starts[i] = episode_time == 0
        self.episode_time[i] = (
            episode_time % self.time_modulus if self.time_modulus else episode_time
        )
        self.size = max(self.size, i + 1)
        self.cursor = (i + 1) % self.capacity

    # -- sampling ----------------------------------------------------------------------------
    def valid(self, index: int) -> bool:
        """Whether index can be sampled (their three checks, in their order)."""
        h, n = self.history_length, self.n_step
        if index + n - 1 >= self.cursor and index - h < self.cursor:
            return False
        return self.history_valid(index)

    def history_valid(self, index: int) -> bool:
        """The checks that stay true until slot `index` is overwritten: s is 4 frames of one
        episode (and, with n > 1, a_i belongs to that episode too)."""
        h, n = self.history_length, self.n_step
        if self.terminals[index - h : index].any():
            return False
        times = self.episode_time[index - h : index].astype(np.int64)
        if not (times[:-1] < times[1:]).all():
            return False
        return n == 1 or not self.starts[index]  # n > 1: s and a_i from one episode

    def sample_indices(self, batch_size: int, rng: Stream) -> np.ndarray:
        """Draw until batch_size valid indices are found; invalid draws are dropped."""
        low, high = self.history_length, self.size - self.n_step
        if high <= low:
            raise ValueError(
                f"replay memory holds {self.size} transitions; sampling needs at "
                f"least {self.history_length + 2}"
            )
        indices: list[int] = []
        redraws = 0
        while len(indices) < batch_size:
            index = rng.integer(low, high)
            if self.valid(index):
                indices.append(index)
            else:
                redraws += 1
                if redraws > MAX_REDRAWS:
                    raise RuntimeError("replay memory holds no sampleable transition")
        return np.array(indices, dtype=np.int64)

    def sample(self, batch_size: int, rng: Stream) -> dict[str, np.ndarray]:
        return self.transitions(self.sample_indices(batch_size, rng))

    def transitions(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        """The transitions at valid indices (n-step ones when n > 1)."""
        if self.n_step > 1:
            return self.n_step_transitions(indices)
        frames = self.frames[indices[:, None] + self._window[None, :]]  # s and s' share 3
        return {
            "indices": indices,
            "states": frames[:, :-1],
            "actions": self.actions[indices],
            "rewards": self.rewards[indices],
            "terminals": self.terminals[indices],
            "next_states": frames[:, 1:],
        }

    def n_step_transitions(self, indices: np.ndarray) -> dict[str, np.ndarray]:
        """s_i, a_i, the n-step return G (float64), gamma^m (0 after a terminal) and the
        state after step i+m-1, for indices whose window i..i+n-1 is written."""
        n, h = self.n_step, self.history_length
        window = indices[:, None] + np.arange(n)[None, :]
        ended = self.terminals[window]
        cut = self.starts[window]
        cut[:, 0] = False
        stop_cut = np.where(cut.any(axis=1), cut.argmax(axis=1), n)  # m = k: k starts anew
        stop_end = np.where(ended.any(axis=1), ended.argmax(axis=1) + 1, n + 1)  # m = k + 1
        length = np.minimum(np.minimum(stop_cut, stop_end), n)
        terminal = stop_end <= np.minimum(stop_cut, n)
        rewards = self.rewards[window].astype(np.float64)
        returns = np.zeros(len(indices), dtype=np.float64)
        powers = self.powers
        for k in range(n):  # r_i + gamma r_{i+1} + ..., term by term in a fixed order
            power = self.discount**k if powers is None else powers[k]
            returns += np.where(k < length, power * rewards[:, k], 0.0)
        reach = self.discount ** length.astype(np.float64) if powers is None else powers[length]
        discounts = np.where(terminal, 0.0, reach)
        last = indices + length - 1  # s' = frames last-h+1 .. last
        state_frames = self.frames[indices[:, None] + np.arange(-h, 0)[None, :]]
        next_frames = self.frames[last[:, None] + np.arange(-h + 1, 1)[None, :]]
        return {
            "indices": indices,
            "states": state_frames,
            "actions": self.actions[indices],
            "rewards": returns,
            "terminals": terminal,
            "discounts": discounts,
            "next_states": next_frames,
            "lengths": length,
        }

    # -- exact resume ------------------------------------------------------------------------
    def get_state(self) -> dict:
        """The write position and the filled part of every array (views, not copies)."""
        arrays = {name: getattr(self, name)[: self.size] for name in self._arrays()}
        return {"cursor": self.cursor, "size": self.size, **arrays}

    def set_state(self, state: dict) -> None:
        size = int(state["size"])
        for name in self._arrays():
            source = state[name]
            if source.shape[0] != size:
                raise ValueError(f"replay array {name} holds {source.shape[0]} rows, not {size}")
            self.load_rows(name, source, size)
        self.size = size
        self.cursor = int(state["cursor"])

    def load_rows(self, name: str, source: np.ndarray, size: int) -> None:
        getattr(self, name)[:size] = source
