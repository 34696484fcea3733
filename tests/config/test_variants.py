"""The DQN family against its definitions: the Double target on a hand-built example, the
dueling head's identities, n-step returns across terminals, life losses and cuts; and each
variant trains twice to one chain and resumes to it, while the default stays the paper's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from reprodqn.config.params import load_params, resolve_run
from reprodqn.dqn.agent import DoubleDQNAgent, DQNAgent, make_agent
from reprodqn.dqn.network import build_q_network
from reprodqn.dqn.replay import ReplayMemory
from tests.helpers import PARAMS, TINY, label, stop_after_first_resume_point, train_tiny

# ---------------------------------------------------------------------------------------------
# Double DQN


class Table(torch.nn.Module):
    """Q-values looked up by a state's id (its first pixel)."""

    def __init__(self, rows):
        super().__init__()
        self.rows = torch.tensor(rows, dtype=torch.float32)

    def forward(self, frames):
        return self.rows[frames[:, 0, 0, 0].long()]


def hand_built_agent(double: bool, dtype="float64"):
    config = load_params(
        PARAMS, ["agent.network=nips", f"agent.double={double}", f"agent.target_dtype={dtype}"]
    ).agent
    agent = make_agent(
        config,
        n_actions=2,
        history_length=4,
        screen_size=84,
        device=torch.device("cpu"),
        init_generator=torch.Generator().manual_seed(1),
        learning_starts=50_000,
        reward_clip=1.0,
    )
    # next state 0: online prefers action 1, target values it 2 (its own max is 5);
    # next state 1: online prefers action 0, target values it 1 (its own max is 7)
    agent.online = Table([[1.0, 3.0], [4.0, 0.0]])
    agent.target = Table([[5.0, 2.0], [1.0, 7.0]])
    return agent


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_double_target_takes_the_online_argmax_valued_by_the_target_network(dtype):
    next_states = torch.zeros(2, 4, 84, 84, dtype=torch.uint8)
    next_states[1] = 1
    rewards = torch.tensor([1.0, -1.0])
    live = torch.tensor([True, True])
    exact = dtype == "float64"  # rounded once from float64, as the authors'

    def same(ours, expected):
        expected = [float(np.float32(x)) for x in expected]
        return (
            ours.tolist() == expected
            if exact
            else ours.tolist() == pytest.approx(expected, rel=1e-6, abs=1e-7)
        )

    double = hand_built_agent(True, dtype)
    assert isinstance(double, DoubleDQNAgent)
    assert same(double.td_target(rewards, next_states, live), [1 + 0.99 * 2, -1 + 0.99 * 1])
    dqn = hand_built_agent(False, dtype)
    assert type(dqn) is DQNAgent
    assert same(dqn.td_target(rewards, next_states, live), [1 + 0.99 * 5, -1 + 0.99 * 7])
    ended = torch.tensor([False, True])
    assert same(double.td_target(rewards, next_states, ended), [1.0, -1 + 0.99 * 1])


# ---------------------------------------------------------------------------------------------
# Dueling


@pytest.mark.parametrize("kind", ["nature", "nips"])
def test_dueling_head_is_value_plus_centred_advantage(kind):
    net = build_q_network(kind, 4, 4, 84, torch.Generator().manual_seed(3), dueling=True)
    frames = torch.randint(
        0, 256, (5, 4, 84, 84), dtype=torch.uint8, generator=torch.Generator().manual_seed(4)
    )
    with torch.no_grad():
        q = net(frames).double()
        torso = net.layers(frames.float() / 255.0)
        value = net.value(torso).double()
        advantage = net.advantage(torso).double()
    assert q.shape == (5, 4)
    assert torch.allclose(q.mean(dim=1, keepdim=True), value, atol=1e-6)  # mean_a Q = V
    assert torch.allclose(
        q - q.mean(dim=1, keepdim=True), advantage - advantage.mean(dim=1, keepdim=True), atol=1e-6
    )
    assert torch.equal(q.argmax(dim=1), advantage.argmax(dim=1))
    assert not torch.allclose(value, torch.zeros_like(value))  # both streams carry signal
    # each stream has its own hidden layer of the torso's width
    hidden = {"nature": 512, "nips": 256}[kind]
    assert net.value[0].out_features == net.advantage[0].out_features == hidden


def test_dueling_weights_come_from_the_init_stream_alone_and_default_is_unchanged():
    a = build_q_network("nips", 4, 4, 84, torch.Generator().manual_seed(7), dueling=True)
    b = build_q_network("nips", 4, 4, 84, torch.Generator().manual_seed(7), dueling=True)
    assert all(
        torch.equal(x, y)
        for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    )
    plain = build_q_network("nips", 4, 4, 84, torch.Generator().manual_seed(7))
    assert list(plain.state_dict()) == [
        "layers.0.weight",
        "layers.0.bias",
        "layers.2.weight",
        "layers.2.bias",
        "layers.5.weight",
        "layers.5.bias",
        "layers.7.weight",
        "layers.7.bias",
    ]
    assert torch.equal(plain.state_dict()["layers.0.weight"], a.state_dict()["layers.0.weight"])


# ---------------------------------------------------------------------------------------------
# n-step returns


GAMMA = 0.9


def episode_log(seed: int, steps: int):
    """Steps as the trainer stores them: (reward, terminal, episode_time), with terminals
    (game over or life loss when it ends the episode) and cuts (a new episode begins without
    a terminal, as the evaluation cut or a truncation)."""
    rng = np.random.default_rng(seed)
    log, time = [], 0
    for _ in range(steps):
        roll = rng.random()
        terminal, cut = roll < 0.08, 0.08 <= roll < 0.12
        log.append((float(rng.integers(-1, 2)) * (1 + rng.random()), terminal, time))
        time = 0 if terminal or cut else time + 1
    return log


def expected_n_step(log, i: int, n: int):
    """From the definition: G = sum_{k<m} gamma^k r_{i+k}, stopping after a terminal (no
    bootstrap) or before step i+m that began a new episode (bootstrap with gamma^m)."""
    total, m = 0.0, 0
    for k in range(n):
        if k > 0 and log[i + k][2] == 0:  # i+k starts a new episode: cut before it
            return total, GAMMA**m, i + m - 1
        total += GAMMA**k * float(np.float32(log[i + k][0]))  # stored as float32
        m = k + 1
        if log[i + k][1]:
            return total, 0.0, i + k
    return total, GAMMA**n, i + n - 1


@pytest.mark.parametrize("n", [2, 3, 5])
def test_n_step_returns_match_the_definition_across_terminals_and_cuts(n):
    log = episode_log(seed=n, steps=600)
    replay = ReplayMemory(1000, 4, 2, episode_time_wraps=False, n_step=n, discount=GAMMA)
    for t, (reward, terminal, time) in enumerate(log):
        replay.add(label(t), t % 4, reward, terminal, time)
    indices = np.array([i for i in range(4, replay.size - n) if replay.valid(i)])
    assert len(indices) > 300
    batch = replay.transitions(indices)
    kinds = set()
    for row, i in enumerate(indices):
        total, discount, last = expected_n_step(log, i, n)
        assert batch["rewards"][row] == pytest.approx(total, abs=1e-12)
        assert batch["discounts"][row] == pytest.approx(discount, abs=1e-15)
        assert batch["terminals"][row] == (discount == 0.0)
        # s' is the state after step `last`: its frames last-3 .. last
        assert np.array_equal(
            batch["next_states"][row], np.stack([label(t) for t in range(last - 3, last + 1)])
        )
        assert np.array_equal(batch["states"][row], np.stack([label(t) for t in range(i - 4, i)]))
        kinds.add("terminal" if discount == 0 else "cut" if last < i + n - 1 else "full")
    assert kinds == {"terminal", "cut", "full"}  # every case was exercised
    # a transition whose s ends one episode and whose a_i begins the next is never sampled
    straddling = [i for i in range(4, replay.size - n) if log[i][2] == 0 and not log[i - 1][1]]
    assert straddling and not any(replay.valid(i) for i in straddling)


def test_the_universal_n_step_discounts_are_running_binary64_products():
    """compute.numerics universal: gamma^k as 1, g, fl(g g), fl(fl(g g) g)... exactly (pow
    is not correctly rounded in every libm), the return summed in k order from +0."""
    n, log = 4, episode_log(seed=7, steps=400)
    replay = ReplayMemory(1000, 4, 2, False, n_step=n, discount=GAMMA, running_powers=True)
    for t, (reward, terminal, time) in enumerate(log):
        replay.add(label(t), t % 4, reward, terminal, time)
    powers = [1.0]
    for _ in range(n):
        powers.append(powers[-1] * GAMMA)
    indices = np.array([i for i in range(4, replay.size - n) if replay.valid(i)])
    batch = replay.transitions(indices)
    for row, i in enumerate(indices):
        length, total = batch["lengths"][row], 0.0
        for k in range(n):
            total += powers[k] * float(np.float32(log[i + k][0])) if k < length else 0.0
        assert batch["rewards"][row] == total  # exactly
        assert batch["discounts"][row] in (0.0, powers[length])
    # the check tells the products from pow: 0.9 ** 4 is another binary64 than 0.9 * 0.9 * 0.9 * 0.9
    assert any(GAMMA**k != powers[k] for k in range(n + 1))


def test_n_step_return_stops_at_a_life_loss_that_ends_the_episode(tmp_path):
    """A lost life is a terminal for learning (env.life_loss_ends_episode): a real run's
    stored n-step returns never sum rewards across one."""
    from reprodqn.training.loop import Run

    params = load_params(PARAMS, [*TINY, "agent.n_step=4"])
    run = Run(resolve_run(params, "deterministic", 0), tmp_path, torch.device("cpu"))
    lives_lost = []
    while run.step < 600:
        lives = run.env.emulator.lives()
        run.advance()
        if run.env.emulator.lives() < lives and not run.env.emulator.game_over():
            lives_lost.append(run.step - 1)
    assert lives_lost and all(run.replay.terminals[t] for t in lives_lost)
    before = [t - k for t in lives_lost for k in range(1, 4) if run.replay.valid(t - k)]
    batch = run.replay.transitions(np.array(before))
    assert (batch["discounts"] == 0).all()
    assert (
        batch["indices"] + batch["lengths"] - 1
        == np.array([min(t for t in lives_lost if t >= i) for i in before])
    ).all()


def test_one_step_replay_samples_the_authors_transitions_and_n_step_needs_its_window():
    log = episode_log(seed=1, steps=300)
    one = ReplayMemory(1000, 4, 2)
    three = ReplayMemory(1000, 4, 2, n_step=3)
    for t, (reward, terminal, time) in enumerate(log):
        one.add(label(t), 0, reward, terminal, time)
        three.add(label(t), 0, reward, terminal, time)
    assert "discounts" not in one.transitions(np.array([10]))
    # the window of i reaches i+2: indices up to size-4 only, and never across the cursor
    from reprodqn.determinism.rng import AuthorsStream

    drawn = three.sample_indices(2000, AuthorsStream(0))
    assert drawn.max() <= three.size - 4


# ---------------------------------------------------------------------------------------------
# Each variant: deterministic, resumable, and different from DQN


# Double DQN changes a target only where the online and target networks' argmax differ at
# a sampled s'. In 99 tiny updates at the paper's step size that never happens (the chain is
# DQN's bit for bit: the networks still pick one action everywhere), so Double is shown
# at a larger step size, against DQN at that step size.
FAST = ["agent.learning_rate=0.0025"]
VARIANTS = {
    "double": ["agent.double=true", *FAST],
    "dueling": ["agent.dueling=true"],
    "n_step": ["agent.n_step=3"],
    "per": ["replay.prioritized=true", "agent.double=true"],
    "r2d2_priority": [
        "replay.prioritized=true",
        "agent.n_step=5",
        "priority.eta=0.9",
        "priority.alpha=0.9",
        "priority.importance_weights=false",
        "compute.numerics=standard",  # the mixture is not in the universal kernels
    ],
}


@pytest.fixture(scope="module")
def dqn_chains(tmp_path_factory):
    """DQN's chains at the paper's step size and at FAST's, trained once."""
    return {
        fast: train_tiny(
            load_params(PARAMS, [*TINY, *(FAST if fast else [])]), tmp_path_factory.mktemp("dqn")
        )
        for fast in (False, True)
    }


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_variant_trains_twice_to_one_chain_resumes_to_it_and_differs_from_dqn(
    variant, dqn_chains, tmp_path
):
    params = load_params(PARAMS, [*TINY, *VARIANTS[variant]])
    first = train_tiny(params, tmp_path / "first")
    assert train_tiny(params, tmp_path / "second") == first
    stopped = tmp_path / "stopped"
    assert stop_after_first_resume_point(params, stopped) == 300
    assert train_tiny(params, stopped) == first
    dqn = dqn_chains[FAST[0] in VARIANTS[variant]]
    assert first[-1]["updates"] == dqn[-1]["updates"] == 99
    assert first[-1]["weights_sha256"] != dqn[-1]["weights_sha256"]
    assert first[-1]["loss_chain_sha256"] != dqn[-1]["loss_chain_sha256"]
    if variant != "dueling":  # same initial network; dueling has other layers
        assert first[0]["weights_sha256"] == dqn[0]["weights_sha256"]


def test_variant_knobs_at_their_defaults_leave_the_digest_unchanged():
    # the standard numerics: the digests runs were recorded with before the universal default
    standard = "compute.numerics=standard"
    params = load_params(PARAMS, [standard])
    config = resolve_run(params, "deterministic", 0)
    # the digest of the authors' DQN without the DQN-family knobs, at the avx2 floor: runs
    # recorded without those knobs stay valid; the portable floor's digest differs only there
    avx2 = resolve_run(load_params(PARAMS, [standard, "compute.cpu_isa=avx2"]), "deterministic", 0)
    assert avx2.digest() == "fc4f815d079d558414d9fc8673750e8b2283ff1e712f4c239ed23cd3ab4b901e"
    assert config.digest() == "8afe1e1bf389e0ee4cc454b579f8a7694b295f98dcddf11727aff4792d5b2c42"
    assert (
        config.experiment_digest()
        == "c39813aabab9e41007459fabdbd53a735e014672fd4bb819541116958a5cbecd"
    )
    per = resolve_run(load_params(PARAMS, ["replay.prioritized=true"]), "deterministic", 0)
    alpha = resolve_run(
        load_params(PARAMS, ["replay.prioritized=true", "priority.alpha=0.5"]), "deterministic", 0
    )
    assert len({config.digest(), per.digest(), alpha.digest()}) == 3
    for knob in ("agent.double=true", "agent.dueling=true", "agent.n_step=2"):
        assert (
            resolve_run(load_params(PARAMS, [knob]), "deterministic", 0).digest() != config.digest()
        )


# ---------------------------------------------------------------------------------------------
# Presets and the algorithm's name


@pytest.mark.parametrize(
    "preset, name",
    [
        ("double", "Double DQN (RMSprop)"),
        ("dueling", "Dueling Double DQN (RMSprop)"),
        ("per", "Double DQN, prioritized replay (RMSprop)"),
        ("r2d2-priority", "Double DQN, 5-step, prioritized replay with R2D2 priority (RMSprop)"),
        ("authors-2018", "DQN (RMSprop)"),
        ("deepmind-2015", "DQN (centred RMSProp)"),
        ("adam", "DQN (Adam)"),
    ],
)
def test_presets_are_overlays_that_run_at_smoke_scale_and_name_their_algorithm(preset, name):
    from reprodqn.config.variants import algorithm_name, preset_names, preset_path
    from tests.helpers import ROOT

    assert preset in preset_names(PARAMS) and preset_path(PARAMS, preset).exists()
    smoke = ROOT / "presets" / "smoke.yaml"
    params = load_params(PARAMS, overlay=[preset_path(PARAMS, preset), smoke])
    assert algorithm_name(params) == name
    assert params.train.steps == 3000  # the smoke scale applied after the preset
    assert algorithm_name(resolve_run(params, "environment", 1)) == name
    assert algorithm_name(load_params(PARAMS)) == "DQN (RMSprop)"


def test_report_title_names_the_algorithm(tmp_path):
    from reprodqn.report import writer
    from tests.helpers import fake_study as study

    writer.write_report(study(), tmp_path / "dqn")
    assert (
        (tmp_path / "dqn" / "report.md")
        .read_text()
        .startswith("# Report: deterministic DQN on Breakout\n")
    )
    writer.write_report(study(), tmp_path / "double", algorithm="Double DQN")
    assert (
        (tmp_path / "double" / "report.md")
        .read_text()
        .startswith("# Report: deterministic Double DQN on Breakout\n")
    )
