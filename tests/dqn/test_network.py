"""Q-network initialisation depends on the init stream alone."""

import torch

from reprodqn.dqn.network import build_q_network
from reprodqn.training.checkpoints import cpu_weights, weights_sha256


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
    nature_count = ((32*4*64 + 32) + (64*32*16 + 64) + (64*64*9 + 64)
                    + (3136*512 + 512) + (512*4 + 4))
    # conv 16x8x8/4, 32x4x4/2, fc 2592->256->4 (Mnih et al. 2013)
    nips_count = (16*4*64 + 16) + (32*16*16 + 32) + (2592*256 + 256) + (256*4 + 4)
    assert sum(p.numel() for p in nature.parameters()) == nature_count
    assert sum(p.numel() for p in nips.parameters()) == nips_count
    frames = torch.zeros(3, 4, 84, 84, dtype=torch.uint8)
    assert nature(frames).shape == nips(frames).shape == (3, 4)
    first = nature.layers[0]
    bound = 1 / (4 * 8 * 8) ** 0.5
    assert first.weight.abs().max() <= bound and first.weight.abs().max() > 0.9 * bound
