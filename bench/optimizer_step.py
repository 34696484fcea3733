"""One optimizer step on the Nature network's parameters, ours against torch's, with the
dead ReLU units a trained network has (zero gradients, so zero second moments in most of
fc1): prints each optimizer's step time and ours / torch's, and checks the bits match.

    .venv/bin/python bench/optimizer_step.py --rounds 5 --steps 20
"""

from __future__ import annotations

import argparse
import time

import common  # noqa: F401 -- applies the CPU floor before torch loads
import torch

from reprodqn.dqn.network import build_q_network
from reprodqn.dqn.optimizers import Adam, CenteredRMSprop, RMSprop

PAIRS = {  # name: (ours, torch's or None, kwargs)
    "rmsprop (authors')": (
        RMSprop,
        lambda p, **k: torch.optim.RMSprop(p, foreach=False, **k),
        {"lr": 2.5e-4, "alpha": 0.95, "eps": 0.01},
    ),
    "adam (Dopamine)": (
        Adam,
        lambda p, **k: torch.optim.Adam(p, foreach=False, fused=False, **k),
        {"lr": 6.25e-5, "betas": (0.9, 0.999), "eps": 1.5e-4},
    ),
    "rmsprop_centered (DeepMind)": (
        CenteredRMSprop,
        None,
        {"lr": 2.5e-4, "alpha": 0.95, "eps": 0.01},
    ),
}


def gradients(net, generator, dead_fraction: float) -> list[torch.Tensor]:
    """Gradients of the size a trained network sees (1e-5..1e-4), fc1's dead rows zero."""
    grads = [torch.randn(p.shape, generator=generator) * 3e-5 for p in net.parameters()]
    fc1 = [g for g in grads if g.dim() == 2][0]
    fc1[: int(dead_fraction * fc1.shape[0])] = 0.0
    return grads


def time_steps(make, kwargs, grads, steps: int) -> tuple[float, list[torch.Tensor]]:
    generator = torch.Generator().manual_seed(0)
    net = build_q_network("nature", 4, 4, 84, generator)
    optimizer = make(list(net.parameters()), **kwargs)
    for param, grad in zip(net.parameters(), grads, strict=True):
        param.grad = grad.clone()
    optimizer.step()  # state created outside the timing
    start = time.perf_counter()
    for _ in range(steps):
        optimizer.step()
    return (time.perf_counter() - start) / steps, [p.detach() for p in net.parameters()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--dead", type=float, default=0.75, help="fraction of fc1 rows dead")
    args = parser.parse_args()
    torch.set_num_threads(1)
    net = build_q_network("nature", 4, 4, 84, torch.Generator().manual_seed(0))
    grads = gradients(net, torch.Generator().manual_seed(1), args.dead)
    print(f"{'optimizer':<28} {'ours ms':>8} {'torch ms':>9} {'ours/torch':>10} same bits")
    for name, (ours, theirs, kwargs) in PAIRS.items():
        best_ours, best_theirs, same = float("inf"), float("inf"), None
        for _ in range(args.rounds):  # interleaved rounds, best of each: noise-robust
            ours_time, ours_weights = time_steps(ours, kwargs, grads, args.steps)
            best_ours = min(best_ours, ours_time)
            if theirs is not None:
                their_time, their_weights = time_steps(theirs, kwargs, grads, args.steps)
                best_theirs = min(best_theirs, their_time)
                same = all(
                    torch.equal(a, b) for a, b in zip(ours_weights, their_weights, strict=True)
                )
        if theirs is None:
            print(f"{name:<28} {best_ours * 1e3:>8.2f} {'-':>9} {'-':>10} (torch has none)")
        else:
            print(
                f"{name:<28} {best_ours * 1e3:>8.2f} {best_theirs * 1e3:>9.2f} "
                f"{best_ours / best_theirs:>10.3f} {same}"
            )


if __name__ == "__main__":
    main()
