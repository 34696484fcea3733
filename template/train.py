"""The study's training run, exact through reprodqn.exact: replace the data, the model and
the loss with your own and keep the lines marked `# exact`.

The example fits a small network to a noisy sine drawn from the `data` stream, in
minibatches drawn from the `minibatch` stream, from weights drawn from the `init` stream.
Killed at any moment, the same command resumes from the last resume point and ends with
the chain an uninterrupted run ends with.

    python train.py --params params.yaml --out results/run
"""

from __future__ import annotations

import argparse
import contextlib
import time
from pathlib import Path

import numpy as np
import yaml

from reprodqn import exact
from reprodqn.exact import universal

exact.cpu_floor("portable")  # exact: before torch (its kernels are chosen at the first op)

import torch  # noqa: E402
from torch import nn  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--params", type=Path, default=Path("params.yaml"))
    p.add_argument("--out", type=Path, required=True, help="the run's folder")
    p.add_argument("--until", type=int, default=None, help="stop after this step (resumable)")
    return p.parse_args(argv)


def make_data(config: dict, generator: np.random.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    x = generator.uniform(-3.0, 3.0, size=(config["samples"], 1))
    y = np.sin(x) + generator.normal(0.0, 0.1, size=x.shape)
    return torch.from_numpy(x.astype(np.float32)), torch.from_numpy(y.astype(np.float32))


def make_model(config: dict, generator: torch.Generator) -> nn.Module:
    """Built without torch's default initialisation (it draws from the global generator),
    then initialised from the init stream alone. In the universal numerics the layers are
    reprodqn's (it has no tanh: ReLU), initialised in its arithmetic."""
    if config["numerics"] == "universal":
        model = nn.Sequential(
            exact.uninitialised(universal.Linear, 1, config["hidden"]),
            universal.ReLU(),
            exact.uninitialised(universal.Linear, config["hidden"], 1),
        )
        universal.init_(model, generator)  # exact
        return model
    model = nn.Sequential(
        exact.uninitialised(nn.Linear, 1, config["hidden"]),
        nn.Tanh(),
        exact.uninitialised(nn.Linear, config["hidden"], 1),
    )
    for layer in (model[0], model[2]):
        bound = layer.in_features**-0.5
        nn.init.uniform_(layer.weight, -bound, bound, generator=generator)
        nn.init.uniform_(layer.bias, -bound, bound, generator=generator)
    return model


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    params = yaml.safe_load(args.params.read_text())
    config = params["train"]
    process = exact.setup(threads=config["threads"], numerics=config["numerics"])  # exact
    universal_mode = config["numerics"] == "universal"
    exact.start_run(args.out, params, process)  # exact: refuses a folder of other params
    seeds = dict(params["seeds"])
    streams = exact.Streams(numpy={"data": seeds.pop("data")}, torch=seeds)  # exact
    x, y = make_data(config, streams["data"])
    model = make_model(config, streams["init"])
    adam = universal.Adam if universal_mode else torch.optim.Adam
    optimizer = adam(model.parameters(), lr=config["learning_rate"], betas=(0.9, 0.999), eps=1e-8)
    chain = exact.HashChain(args.out, config["numerics"])  # exact
    parts = {"model": model, "optimizer": optimizer, "streams": streams, "chain": chain}  # exact
    saved = exact.load_resume_point(args.out, parts)  # exact
    step = 0 if saved is None else int(saved["step"])  # exact
    if saved is None:
        chain.checkpoint(0, model)  # exact
    end = config["steps"] if args.until is None else min(args.until, config["steps"])
    mse = universal.regression_loss if universal_mode else nn.functional.mse_loss
    started, first = time.monotonic(), step
    while step < end:
        rows = torch.randint(len(x), (config["batch_size"],), generator=streams["minibatch"])
        with universal.strict() if universal_mode else contextlib.nullcontext():  # exact
            loss = mse(model(x[rows]), y[rows])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        chain.extend(loss)  # exact
        step += 1
        if step % config["checkpoint_every"] == 0 or step == config["steps"]:
            chain.checkpoint(step, model)  # exact
            rate = (step - first) / (time.monotonic() - started)
            print(f"step {step}/{end}  loss {loss.item():.4f}  {rate:,.0f} steps/s")
        if step % config["resume_every"] == 0 or step == end:
            exact.save_resume_point(args.out, step, parts | {"step": step})  # exact


if __name__ == "__main__":
    exact.main(main)  # a refusal of exact: one line on stderr, exit 2
