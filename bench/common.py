"""What every benchmark shares. Importing it applies params.yaml's CPU instruction-set floor,
which must happen before torch loads (so `import common` comes before any import that loads
torch; it refuses to run after one). Also one timing helper and an agent builder, so the
benchmarks measure the same thing the same way.

    import common
    params = common.load()             # params.yaml, --set style overrides optional
    agent = common.build_agent(params)
    seconds = common.per_call_seconds(lambda: agent.update(batch), seconds=3)
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from reprodqn.config.params import load_params
from reprodqn.core.errors import InputError
from reprodqn.determinism import isa

if "torch" in sys.modules:
    raise RuntimeError(
        "import common before anything that loads torch: the CPU floor must be set first"
    )

ROOT = Path(__file__).resolve().parents[1]
PARAMS = ROOT / "params.yaml"
isa.apply(load_params(PARAMS).compute.cpu_isa)


def load(overrides: list[str] | None = None):
    """params.yaml with `section.key=value` overrides, as `--set` takes them."""
    return load_params(PARAMS, overrides or [])


def run_main(main: Callable[[], int | None]) -> NoReturn:
    """A benchmark's entry point: a wrong setting, or a device that is not there, ends in
    one line naming it and exit 2, as the package's commands do."""
    try:
        sys.exit(main())
    except InputError as error:
        print(f"{Path(sys.argv[0]).name}: {error}", file=sys.stderr)
        sys.exit(2)


def per_call_seconds(function: Callable[[], object], seconds: float, warmup: int = 20) -> float:
    """Mean wall time of one call, over as many calls as fit in `seconds` after a warm-up."""
    for _ in range(warmup):
        function()
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        function()
        calls += 1
    return (time.perf_counter() - start) / calls


def build_agent(
    params, agent_config=None, device: str = "cpu", learning_starts: int = 0, seed: int = 0
):
    """The study's agent for 4 actions at params.env's screen, its weights from `seed`
    (`agent_config` replaces params.agent, e.g. to compare two settings)."""
    import torch

    from reprodqn.dqn.agent import make_agent

    return make_agent(
        agent_config or params.agent,
        n_actions=4,
        history_length=params.env.history_length,
        screen_size=params.env.screen_size,
        device=torch.device(device),
        init_generator=torch.Generator().manual_seed(seed),
        learning_starts=learning_starts,
        reward_clip=params.env.reward_clip,
    )
