"""compute.cuda_graphs: the update and the greedy action, each replayed as one CUDA graph.

An eager update launches some 150 kernels, each costing the host microseconds to launch,
for a minibatch of 32 that the GPU computes in less: the host, not the GPU, sets the pace.
A graph launches them all in one call. What the graph computes is what the eager code
computes, on the same buffers, with the deterministic settings fixed before capture
(numerics.configure runs first): the minibatch gathered from the device replay's packed
block (device_replay), both networks, the TD target, the loss, the backward and the
optimizer's kernels. torch.cuda.CUDAGraph is torch's own capture; written around it here
only what keeping the run's state exact needs:

- Capture records kernels without running them, but the warm-up that must come first
  (lazy optimizer state, cuBLAS and cuDNN handles) runs real updates. Every weight,
  target weight and optimizer tensor is copied to the host first and written back in
  place after (the graph holds their addresses), so the run goes on as if neither
  warm-up nor capture had happened.
- The optimizers count steps in host tensors, which a graph does not replay: each replay
  counts them here (RMSprop's arithmetic never reads the count; Adam's bias correction
  does, so the config refuses Adam with graphs).
- A capture that torch refuses ends the run in one line naming this option, torch's reason
  and the line of ours it came from; the run's state is put back first.
- A loaded resume point gives the optimizer new tensors: `release` drops the graphs and
  the next use captures them again.

With capture=False the same warm-up, restore and static buffers run eagerly: how the
tests hold this module to the plain update's chain on a machine without a GPU.
"""

from __future__ import annotations

import contextlib
import os
import traceback
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from reprodqn.core.errors import InputError
from reprodqn.dqn.device_replay import PACKED_ROWS, DeviceReplayMemory

WHAT = {"loss": "update", "action": "greedy action"}  # each graph, by its output
WARMUP_CALLS = 3  # torch's recipe: a few eager calls on a side stream before capture


class CudaGraphs:
    def __init__(self, agent, replay: DeviceReplayMemory, capture: bool = True):
        self.agent, self.replay, self.capture = agent, replay, capture
        device = agent.device
        frame_shape = tuple(replay.frames.shape[1:])
        self.state = torch.zeros(
            (1, replay.history_length, *frame_shape), dtype=torch.uint8, device=device
        )
        self.packed = torch.zeros(
            (len(PACKED_ROWS), agent.config.batch_size), dtype=torch.float64, device=device
        )
        self.loss: torch.Tensor | None = None
        self.action: torch.Tensor | None = None
        self._update: Callable[[], None] | None = None
        self._act: Callable[[], None] | None = None

    def release(self) -> None:
        self._update = self._act = None

    # -- the two entry points ---------------------------------------------------------------
    def update(self, indices: np.ndarray) -> torch.Tensor:
        """One update on the minibatch at these indices; its loss, a tensor of its own."""
        self.replay.upload(indices, out=self.packed)
        if self._update is None:
            self._update = self._prepare(self._update_body, "loss", changes_state=True)
        self._update()
        assert self.loss is not None
        return self.loss.clone()

    def act(self, state: np.ndarray) -> int:
        """The greedy action in this state (a host wait the algorithm needs: the emulator
        takes the action)."""
        self.state[0].copy_(torch.from_numpy(state), non_blocking=True)
        if self._act is None:
            self._act = self._prepare(self._act_body, "action", changes_state=False)
        self._act()
        assert self.action is not None
        return int(self.action.item())

    # -- what is captured -------------------------------------------------------------------
    def _update_body(self) -> torch.Tensor:
        loss, _ = self.agent.update_with_td_errors(self.replay.gather(self.packed))
        return loss

    def _act_body(self) -> torch.Tensor:
        with torch.no_grad():
            return self.agent.online(self.state).argmax(dim=1)

    def _prepare(
        self, body: Callable[[], torch.Tensor], output: str, changes_state: bool
    ) -> Callable[[], None]:
        """Warm up, capture (or not), put the run's state back, also if either fails;
        returns what one call runs. Outside inference mode (the act is called inside it):
        a first capture there would make torch's generator state inference tensors that a
        later capture may not update (pytorch#166792)."""
        saved = self.agent.tensors() if changes_state else None
        try:
            with torch.inference_mode(False):
                self._warm_up(body)
                graph = self._capture(body, output, changes_state) if self.capture else None
        finally:
            if saved is not None:  # the warm-up's updates, and the host's side of capture
                restore(self.agent, saved)
        if graph is None:

            def eager() -> None:
                setattr(self, output, body())

            return eager
        count = count_steps if changes_state else None

        def replay() -> None:
            graph.replay()
            if count is not None:
                count(self.agent.optimizer)

        return replay

    def _capture(
        self, body: Callable[[], torch.Tensor], output: str, changes_state: bool
    ) -> torch.cuda.CUDAGraph:
        if changes_state:  # the update graph's own gradient buffers
            self.agent.optimizer.zero_grad(set_to_none=True)
        graph = torch.cuda.CUDAGraph()
        capturing = torch.cuda.graph(graph)
        failed: Exception | None = None
        try:
            with capturing:
                try:
                    setattr(self, output, body())
                except Exception as error:  # kept: ending the capture raises its own error
                    failed = error
        except Exception as ending:
            # torch leaves the capture's stream current when ending it raises (and has set
            # none when it failed before capture began; then this restore fails, unsaid)
            with contextlib.suppress(Exception):
                capturing.stream_ctx.__exit__(None, None, None)
            failed = failed or ending
        if failed is not None:
            raise not_captured(output, failed) from failed
        return graph

    def _warm_up(self, body: Callable[[], torch.Tensor]) -> None:
        if self.agent.device.type != "cuda":
            for _ in range(WARMUP_CALLS):
                body()
            return
        side = torch.cuda.Stream(self.agent.device)
        side.wait_stream(torch.cuda.current_stream(self.agent.device))
        with torch.cuda.stream(side):
            for _ in range(WARMUP_CALLS):
                body()
        torch.cuda.current_stream(self.agent.device).wait_stream(side)


def not_captured(output: str, error: Exception) -> InputError:
    """One line: what could not be captured, torch's reason and where, and the way on."""
    frames = traceback.extract_tb(error.__traceback__)
    ours = [frame for frame in frames if f"{os.sep}torch{os.sep}" not in frame.filename]
    where = f", at {Path(ours[-1].filename).name}:{ours[-1].lineno}" if ours else ""
    reason = (str(error).strip().splitlines() or [""])[0]
    return InputError(
        f"compute.cuda_graphs: torch {torch.__version__} could not capture the {WHAT[output]} as a "
        f"CUDA graph ({type(error).__name__}: {reason}{where}); compute.cuda_graphs=false "
        "runs the same chain without graphs"
    )


def restore(agent, saved: dict[str, torch.Tensor]) -> None:
    """Write saved weights, target weights and optimizer state back in place; optimizer
    state that did not exist when saved goes back to its start (zeros, step 0)."""
    with torch.no_grad():
        for prefix, net in (("online.", agent.online), ("target.", agent.target)):
            for name, tensor in net.state_dict().items():
                tensor.copy_(saved[prefix + name])
        optimizer = agent.optimizer
        params = [p for group in optimizer.param_groups for p in group["params"]]
        for index, param in enumerate(params):  # the state dict's numbering
            for key, value in optimizer.state[param].items():
                before = saved.get(f"optimizer.{index}.{key}")
                value.copy_(before) if before is not None else value.zero_()


def count_steps(optimizer: torch.optim.Optimizer) -> None:
    """What the optimizer's host-side step count would have done in an eager step."""
    for state in optimizer.state.values():
        state["step"] += 1
