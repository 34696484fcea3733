"""The universal golden probe: a few DQN updates of the Nature network on synthetic
minibatches, every op in reprodqn.universal's kernels, hashed. It needs only torch, numpy
and numba beside reprodqn's source, so it runs where the study cannot: another torch
version in its own venv, an emulated CPU (tools/emulated/), a GPU host (`--device cuda`:
the Triton kernels). Its hash must equal the one in tests/golden/universal-probe.json on
every machine and backend. `--backend triton` runs the GPU's kernels on the CPU, under
Triton's interpreter with the spec's fma (slow: a check of their order without a GPU).

    PYTHONPATH=src python tools/universal_probe.py [--updates 4] [--threads 1]
        [--device cpu|cuda] [--backend numba|triton]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform

import numpy as np
import torch

from reprodqn.dqn.network import build_q_network
from reprodqn.universal import backend, cpu, learning, optim
from reprodqn.universal.guard import UniversalOnly

BATCH, ACTIONS, GAMMA = 8, 4, 0.99


def _setup(threads: int, device: str, cpu_backend: str) -> str:
    """The backend, and what it is."""
    cpu.set_threads(threads)
    backend.use(cpu_backend)
    if device == "cpu" and cpu_backend == "numba":
        return "numba"
    from reprodqn.universal import cuda

    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # read when triton is first imported
        cuda.exact_interpreter()
    return cuda.configure(torch.device(device))


def probe(updates: int, threads: int, device: str = "cpu", cpu_backend: str = "numba") -> dict:
    kernels = _setup(threads, device, cpu_backend)
    generator = torch.Generator().manual_seed(125)
    online = build_q_network("nature", ACTIONS, 4, 84, generator, numerics="universal")
    target = build_q_network("nature", ACTIONS, 4, 84, generator, numerics="universal")
    online, target = online.to(device), target.to(device)
    target.requires_grad_(False)
    optimizer = optim.RMSprop(online.parameters(), lr=0.00025, alpha=0.95, eps=0.01)
    draws = np.random.Generator(np.random.PCG64(7))
    losses = []
    for _ in range(updates):
        states = torch.from_numpy(draws.integers(0, 256, (BATCH, 4, 84, 84), dtype=np.uint8))
        following = torch.from_numpy(draws.integers(0, 256, (BATCH, 4, 84, 84), dtype=np.uint8))
        states, following = states.to(device), following.to(device)
        actions = torch.from_numpy(draws.integers(0, ACTIONS, BATCH))
        rewards = draws.integers(-1, 2, BATCH).astype(np.float32)
        not_terminal = draws.random(BATCH) > 0.1
        with UniversalOnly():
            with torch.no_grad():
                next_q = learning.max_q(target(following))
                targets = learning.td_target(
                    rewards, next_q, not_terminal, GAMMA, "float64", states.device
                )
            loss = learning.q_loss(online(states), actions, targets, "huber", "mean")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        losses.append(float(loss.detach()))
    digest = hashlib.sha256()
    for name, tensor in online.state_dict().items():
        digest.update(name.encode() + tensor.cpu().numpy().tobytes())
    digest.update(np.asarray(losses, np.float32).tobytes())
    with torch.inference_mode(), UniversalOnly():
        greedy = learning.greedy_actions(online(states)).tolist()
    return {
        "sha256": digest.hexdigest(),
        "greedy": greedy,
        "updates": updates,
        "machine": platform.machine(),
        "torch": torch.__version__,
        "threads": threads,
        "kernels": kernels,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--backend", choices=("numba", "triton"), default="numba")
    args = parser.parse_args()
    print(json.dumps(probe(args.updates, args.threads, args.device, args.backend)))


if __name__ == "__main__":
    main()
