"""The `compute` section: where and how a run's numbers are computed (device, threads, GPU
determinism, the CPU's instruction-set floor) and how fast a GPU computes them (the replay
memory in device memory, CUDA graphs). The speed options change how a run is computed,
never what: they are left out of the run's digest, as the resume interval is, and a run
with them gives the chain it has without them (gpu-check holds them to it on a GPU)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from reprodqn.config.types import Frozen, PositiveInt

# how, not what: never in a run's digest, so a run resumes across them
SPEED_OPTIONS = ("replay_on_device", "cuda_graphs")


class ComputeConfig(Frozen):
    """Where and how numbers are computed: device, threads, GPU determinism, CPU ISA, and
    the GPU path's speed options."""

    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="auto = CUDA when available; the device used is recorded."
    )
    threads: PositiveInt = Field(
        1, description="Torch intra-op threads; CPU results depend on it, so it is a param."
    )
    deterministic_gpu: bool = Field(
        True, description="Deterministic CUDA algorithms, cuDNN flags, TF32 off."
    )
    cpu_isa: Literal["portable", "avx2", "avx512", "native"] = Field(
        "portable",
        description="Instruction-set floor for oneDNN, ATen and MKL. portable: "
        "AVX2 kernels (every layer in oneDNN), the same bits on Intel and AMD; avx2: the "
        "same, with MKL's Intel-only AVX2 branch for code outside the network; avx512: "
        "AVX-512 kernels, checked on one vendor's CPUs so far; native: this machine's "
        "widest.",
    )
    cpu_reduction_order: Literal["fixed", "random"] = Field(
        "fixed",
        description="random: each update takes its minibatch's rows in an order "
        "drawn from OS entropy (never a seeded stream), so the loss and every weight "
        "gradient sum the same terms in another order, as nondeterministic GPU kernels do; "
        "the gpu group's on a CPU, and on any device in the universal numerics (whose "
        "kernels are deterministic on a GPU too). On CUDA in the standard numerics the real "
        "kernels decide and this is ignored.",
    )
    numerics: Literal["standard", "universal"] = Field(
        "universal",
        description="universal: every floating-point op of acting and learning in "
        "reprodqn's own kernels, each one written order of correctly rounded IEEE-754 "
        "float32 operations (docs/universal-numerics.md), so the chain is one on every CPU, "
        "thread count and torch version; the device, floor and threads then change speed "
        "only. It covers the Nature and NIPS networks, one Q head or a dueling one, uniform "
        "or prioritized replay, 1-step or n-step targets. standard: torch's kernels pinned "
        "by the floor above, exact on one stack (CPU floor, torch and oneDNN version, GPU "
        "model and driver); for what the universal kernels do not cover (R2D2's priority "
        "mixture, replay in a GPU's memory, CUDA graphs) and runs trained before the "
        "universal default (a params file or a run that names no mode is standard).",
    )
    replay_on_device: bool = Field(
        False,
        description="The replay memory's frames in the device's memory and each minibatch "
        "gathered there from one upload that asks the host to wait for nothing: the same "
        "chain. On a GPU, 7.06 GB of its memory per run at capacity 1M; on a CPU the "
        "memory is already there and only its container changes. Uniform replay, "
        "agent.n_step 1, one actor.",
    )
    cuda_graphs: bool = Field(
        False,
        description="The update (minibatch gather, both networks, loss, backward, "
        "optimizer step) and the greedy action each launched as one CUDA graph, "
        "captured after the deterministic settings: the same chain. Needs a CUDA device "
        "(refused on a CPU), compute.replay_on_device and an RMSprop optimizer (Adam's "
        "bias correction changes each step).",
    )


def check_universal(config) -> None:
    """What the universal mode computes, said in one line naming the field it lacks."""
    if config.compute.numerics != "universal":
        return
    needs = {
        # R2D2's mixture reads later transitions' TD errors through the standard path
        "priority.eta: 0 (R2D2's priority mixture is not covered)": (
            not config.replay.prioritized or config.priority.eta == 0
        ),
        "compute.replay_on_device: false": not config.compute.replay_on_device,
    }
    for need, met in needs.items():
        if not met:
            raise ValueError(
                f"compute.numerics: universal needs {need}, or compute.numerics: standard"
            )


def check_speed_options(config) -> None:
    """The GPU path's options where they can run: said in one line naming the field."""
    compute, agent = config.compute, config.agent
    if compute.replay_on_device:
        needs = {
            "replay.prioritized: false": not config.replay.prioritized,
            "agent.n_step: 1": agent.n_step == 1,
            "train.actors: 1": config.train.actors == 1,
        }
        for need, met in needs.items():
            if not met:
                raise ValueError(f"compute.replay_on_device: true needs {need}")
    if compute.cuda_graphs:
        if compute.device == "cpu":
            raise ValueError(
                "compute.cuda_graphs: true needs a CUDA device, not compute.device cpu"
            )
        if not compute.replay_on_device:
            raise ValueError(
                "compute.cuda_graphs: true needs compute.replay_on_device: true (the graph "
                "gathers its minibatch there)"
            )
        if agent.optimizer == "adam":
            raise ValueError(
                "compute.cuda_graphs: true needs agent.optimizer rmsprop or rmsprop_centered "
                "(Adam's bias correction changes each step)"
            )
