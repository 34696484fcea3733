"""The authors' replay memory with its frames in the compute device's memory
(compute.replay_on_device): on a GPU, a minibatch is gathered where the network reads it,
and the host never waits for the update.

What decides is unchanged: indices are drawn on the host from the minibatch stream by the
authors' rule (replay.py), which reads only the small per-slot arrays kept there (actions,
rewards, terminals, episode times: 10 bytes a slot). The frames (84 x 84 bytes a slot,
7.06 GB at 1M) go to the device as they are stored, one copy a step. An update uploads its
indices with their actions, rewards and terminals packed in one float64 block (each value
exact in float64), and `gather` builds the batch from it on the device with the same
indexing as the host memory's: the same bytes, so the same chain. `gather` is device
operations alone, which a CUDA graph can capture (dqn.cuda_graphs).

The copies go from pageable host memory with non_blocking: the driver stages such a copy
into pinned memory before the call returns (so the array may be freed at once), and it may
wait for the stream's queued work to do so (CUDA's API synchronization notes). That wait
costs nothing here: the greedy action, 9 steps in 10 after annealing, waits for the queued
update anyway. No host wait is asked for besides those the algorithm needs (the greedy
action, the loss chain at each log line).
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from reprodqn.dqn.replay import ReplayMemory

PACKED_ROWS = ("indices", "actions", "rewards", "terminals")


class DeviceReplayMemory(ReplayMemory):
    def __init__(
        self,
        capacity: int,
        history_length: int,
        frame_size: int,
        device: torch.device,
        episode_time_wraps: bool = True,
    ):
        self.device = device
        super().__init__(capacity, history_length, frame_size, episode_time_wraps)
        # i-history .. i, as the host memory's window
        self._device_window = torch.arange(-history_length, 1, device=device)

    def allocate_frames(self, capacity: int, frame_size: int) -> torch.Tensor:
        return torch.zeros(
            (capacity, frame_size, frame_size), dtype=torch.uint8, device=self.device
        )

    def store_frame(self, index: int, frame: np.ndarray) -> None:
        self.frames[index].copy_(torch.from_numpy(frame), non_blocking=True)

    # -- sampling ----------------------------------------------------------------------------
    def pack(self, indices: np.ndarray) -> np.ndarray:
        """A minibatch's indices and its small per-slot values, one float64 block (exact:
        indices below 2^53, uint8 actions, float32 rewards, 0/1 terminals)."""
        rows = (indices, self.actions[indices], self.rewards[indices], self.terminals[indices])
        return np.stack([np.asarray(row, dtype=np.float64) for row in rows])

    def upload(self, indices: np.ndarray, out: torch.Tensor | None = None) -> torch.Tensor:
        """The packed block on the device (into `out` when given: a CUDA graph's input)."""
        packed = torch.from_numpy(self.pack(indices))
        if out is None:
            return packed.to(self.device, non_blocking=True)
        return out.copy_(packed, non_blocking=True)

    def gather(self, packed: torch.Tensor) -> dict[str, torch.Tensor]:
        """The minibatch on the device from a packed block: device operations alone."""
        indices = packed[0].long()
        frames = self.frames[indices[:, None] + self._device_window[None, :]]
        return {
            "states": frames[:, :-1],  # s and s' share 3 frames, as the host memory's
            "next_states": frames[:, 1:],
            "actions": packed[1].long(),
            "rewards": packed[2].float(),
            "terminals": packed[3].bool(),
        }

    def transitions(self, indices: np.ndarray) -> dict:
        return {"indices": indices, **self.gather(self.upload(indices))}

    # -- exact resume ------------------------------------------------------------------------
    def get_state(self) -> dict:
        state = super().get_state()
        state["frames"] = self.frames[: self.size].cpu().numpy()  # one copy, at a resume point
        return state

    def load_rows(self, name: str, source: np.ndarray, size: int) -> None:
        if name != "frames":
            return super().load_rows(name, source, size)
        with warnings.catch_warnings():  # torch warns of any read-only array; this one is read
            warnings.simplefilter("ignore", UserWarning)
            rows = torch.from_numpy(np.ascontiguousarray(source))
        self.frames[:size].copy_(rows)
