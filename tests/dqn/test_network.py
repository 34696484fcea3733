"""Q-network initialisation depends on the init stream alone."""

import torch

from reprodqn.determinism.checkpoints import cpu_weights, weights_sha256
from reprodqn.dqn.network import build_q_network


def net(kind="nature", seed=1):
    return build_q_network(kind, 4, 4, 84, torch.Generator().manual_seed(seed))


def test_init_is_a_function_of_the_init_generator_and_leaves_the_global_one_alone():
    torch.manual_seed(0)
    before = torch.get_rng_state().clone()
    a, b, c = net(seed=1), net(seed=1), net(seed=2)
    assert torch.equal(torch.get_rng_state(), before)
    assert weights_sha256(cpu_weights(a)) == weights_sha256(cpu_weights(b))
    assert weights_sha256(cpu_weights(a)) != weights_sha256(cpu_weights(c))


def test_architectures_and_default_init_bounds():
    nature, nips = net("nature"), net("nips")
    # conv 32x8x8/4, 64x4x4/2, 64x3x3/1, fc 3136->512->4 (Mnih et al. 2015)
    nature_count = (
        (32 * 4 * 64 + 32)
        + (64 * 32 * 16 + 64)
        + (64 * 64 * 9 + 64)
        + (3136 * 512 + 512)
        + (512 * 4 + 4)
    )
    # conv 16x8x8/4, 32x4x4/2, fc 2592->256->4 (Mnih et al. 2013)
    nips_count = (16 * 4 * 64 + 16) + (32 * 16 * 16 + 32) + (2592 * 256 + 256) + (256 * 4 + 4)
    assert sum(p.numel() for p in nature.parameters()) == nature_count
    assert sum(p.numel() for p in nips.parameters()) == nips_count
    frames = torch.zeros(3, 4, 84, 84, dtype=torch.uint8)
    assert nature(frames).shape == nips(frames).shape == (3, 4)
    first = nature.layers[0]
    bound = 1 / (4 * 8 * 8) ** 0.5
    assert first.weight.abs().max() <= bound and first.weight.abs().max() > 0.9 * bound


# what the subprocess runs: each network's acting forward, an evaluation chunk and an update
ROUTING_PROBE = """
from reprodqn.determinism import isa
isa.apply("portable")
import numpy as np, torch
from reprodqn.config.params import load_params
from reprodqn.determinism import numerics
from reprodqn.dqn.agent import make_agent
numerics.configure("cpu", 1, True)
class Greedy:  # an exploration stream that never explores
    def uniform(self):
        return 1.0
params = load_params(PARAMS_PATH)
states = np.random.default_rng(0).integers(0, 256, (33, 4, 84, 84), dtype=np.uint8)
batch = {"states": states[:32], "next_states": states[1:], "actions": np.zeros(32, np.int64),
         "rewards": np.ones(32, np.float32), "terminals": np.zeros(32, bool)}
for network, dueling in (("nature", False), ("nips", False), ("nature", True)):
    agent_config = params.agent.model_copy(update={"network": network, "dueling": dueling})
    agent = make_agent(agent_config, n_actions=4, history_length=4, screen_size=84,
                       device=torch.device("cpu"), init_generator=torch.Generator(),
                       learning_starts=0, reward_clip=1.0)
    agent.greedy_action(states[0])
    agent.act_lockstep(states[:3], [Greedy()] * 3)
    agent.update(batch)
print("probe done")
"""


def test_no_layer_computes_in_mkl_on_a_cpu():
    """Every product of the CPU's forward, backward and acting runs in oneDNN
    (dqn.network): MKL's fast branches are vendor-dependent and its portable one slow. MKL
    prints each call it makes under MKL_VERBOSE; a layer left to torch's dispatch (a plain
    nn.Linear, or a convolution at batch 1) shows up as an SGEMM."""
    import subprocess
    import sys

    from tests.helpers import PARAMS, cli_env

    code = ROUTING_PROBE.replace("PARAMS_PATH", repr(str(PARAMS)))
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=cli_env(MKL_VERBOSE="1")
    )
    assert result.returncode == 0, result.stderr
    assert "probe done" in result.stdout
    calls = [line for line in result.stdout.splitlines() if line.startswith("MKL_VERBOSE")]
    assert calls == []
