"""Prioritized replay against Schaul et al. and R2D2: sampling frequencies follow p^alpha,
new transitions enter at the running max, priorities are set once per index, the weights
and the mixture are the papers' formulas, draws survive save/restore, a killed run resumes
to its chain, and bad input is one line."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from reprodqn.config.params import PriorityConfig, load_params
from reprodqn.core.errors import InputError
from reprodqn.determinism.rng import AuthorsStream
from reprodqn.dqn import priority_rule
from reprodqn.dqn.prioritized_replay import PrioritizedReplay, check_memory
from reprodqn.dqn.replay import ReplayMemory
from tests.helpers import PARAMS, TINY, cli_env, label, train_command


def filled(capacity=400, steps=400, n_step=1, alpha=0.6, eta=0.0, episode=50):
    """PER over a memory of episodes of `episode` steps, no cuts."""
    config = PriorityConfig(alpha=alpha, eta=eta)
    per = PrioritizedReplay(ReplayMemory(capacity, 4, 2, n_step=n_step), config)
    for t in range(steps):
        per.add(label(t), t % 4, 1.0, (t + 1) % episode == 0, t % episode)
    return per


def test_sampling_frequencies_follow_priorities_chi_square_on_100k_draws():
    per = filled()
    rng = np.random.default_rng(0)
    sampleable = np.array([i for i in range(per.memory.size) if per.sampleable(i)])
    per.set_priorities(sampleable, rng.gamma(1.0, size=len(sampleable)))
    stream = AuthorsStream(5)
    draws = np.concatenate([per.sample_indices(32, stream) for _ in range(100_000 // 32)])
    counts = np.bincount(draws, minlength=per.memory.capacity)
    leaves = per.tree.leaves
    assert set(np.flatnonzero(counts)) <= set(sampleable)
    expected = leaves[sampleable] / leaves[sampleable].sum() * len(draws)
    assert stats.chisquare(counts[sampleable], expected).pvalue > 1e-3
    # stratified: draw j lies in the j-th equal segment of the mass, so a batch is ordered
    batches = draws.reshape(-1, 32)
    assert (np.diff(batches, axis=1) >= 0).all()
    # alpha = 0 is uniform over what can be sampled
    flat = filled(alpha=0.0)
    flat.set_priorities(sampleable, rng.gamma(1.0, size=len(sampleable)))
    assert np.allclose(flat.tree.leaves[sampleable], 1.0)


def test_new_transitions_enter_at_the_running_max_and_unsampleable_ones_at_zero():
    per = filled(steps=120)
    assert per.tree.leaves[10] == 1.0  # nothing learned yet: max priority 1
    assert per.tree.leaves[50] == per.tree.leaves[52] == 0.0  # first steps of an episode
    assert per.tree.leaves[:4].sum() == 0.0  # below the authors' index range
    per.set_priorities(np.array([10, 11]), np.array([3.0, 0.5]))
    assert per.max_priority == 3.0 + 1e-6
    per.add(label(999), 0, 0.0, False, 20)
    assert per.tree.leaves[120] == pytest.approx((3.0 + 1e-6) ** 0.6, rel=1e-15)


def test_duplicate_indices_take_the_first_occurrence_and_alpha_is_applied_once():
    per = filled()
    per.set_priorities(np.array([20, 30, 20]), np.array([2.0, 1.0, 5.0]))
    assert per.tree.leaves[20] == (2.0 + 1e-6) ** 0.6
    assert per.tree.leaves[30] == (1.0 + 1e-6) ** 0.6


def test_importance_weights_and_beta_are_schauls():
    config = PriorityConfig(beta_start=0.4, beta_steps=1000)
    assert priority_rule.beta(config, 0) == 0.4
    assert priority_rule.beta(config, 500) == pytest.approx(0.7)
    assert priority_rule.beta(config, 5000) == 1.0
    batch = {"probabilities": np.array([0.1, 0.2, 0.4]), "population": 10}
    weights = priority_rule.importance_weights(batch, config, 1000)  # beta = 1
    assert weights.tolist() == pytest.approx([1.0, 0.5, 0.25])  # (N P)^-1 / max
    assert (
        priority_rule.importance_weights(
            batch, config.model_copy(update={"importance_weights": False}), 0
        )
        is None
    )


def test_r2d2_mixture_is_eta_max_plus_one_minus_eta_mean_over_the_window():
    errors = np.array([[1.0, 3.0, np.nan], [2.0, np.nan, np.nan], [0.0, 1.0, 2.0]])
    assert priority_rule.mixture(errors, 0.9).tolist() == pytest.approx(
        [0.9 * 3 + 0.1 * 2, 2.0, 0.9 * 2 + 0.1 * 1]
    )
    assert priority_rule.mixture(errors, 0.0).tolist() == [1.0, 2.0, 0.0]  # plain |delta|


def test_window_holds_the_later_transitions_of_the_same_episode():
    per = filled(n_step=3, eta=0.9, episode=50)
    window = per.window(np.array([10, 48]), np.array([3, 2]))  # 48: episode ends at 49
    assert window["valid"].tolist() == [[False, True, True], [False, True, False]]
    assert window["transitions"]["indices"].tolist() == [11, 12, 49]


def test_same_draws_after_save_and_restore_of_a_much_updated_tree():
    per = filled(capacity=300, steps=900)
    rng = np.random.default_rng(3)
    stream = AuthorsStream(9)
    for _ in range(2000):
        indices = per.sample_indices(32, stream)
        per.set_priorities(indices, rng.random(32) * 4)
    state, stream_state = per.get_state(), stream.get_state()
    expected = [per.sample_indices(32, stream) for _ in range(50)]
    restored = PrioritizedReplay(ReplayMemory(300, 4, 2), per.config)
    restored.set_state(state)
    again = AuthorsStream(0)
    again.set_state(stream_state)
    assert np.array_equal(restored.tree.nodes, per.tree.nodes)
    assert all(np.array_equal(a, restored.sample_indices(32, again)) for a in expected)
    assert per.max_priority > 1  # the running max is state too: new transitions enter at it
    for replay in (per, restored):
        for t in range(10):  # slot 0 onward: the first few are below the index range
            replay.add(label(5000 + t), 0, 0.0, False, 7 + t)
    assert per.tree.leaves[9] == per.max_priority**0.6
    assert np.array_equal(restored.tree.nodes, per.tree.nodes)
    state["tree"][1] += 1.0  # a tree that is not its leaves' is refused
    with pytest.raises(ValueError, match="differs from the tree of its leaves"):
        PrioritizedReplay(ReplayMemory(300, 4, 2), per.config).set_state(state)


def test_memory_that_does_not_fit_is_an_input_error():
    assert (
        check_memory(1_000_000, 84, physical=64 * 2**30) == 1_000_000 * (84 * 84 + 8) + 16 * 2**20
    )
    with pytest.raises(
        InputError,
        match=r"replay.capacity \(1,000,000\): prioritized replay "
        r"needs 6.6 GiB, this machine has 4.0 GiB",
    ):
        check_memory(1_000_000, 84, physical=4 * 2**30)


# ---------------------------------------------------------------------------------------------
# Bad input on the command line: one line, exit 2


@pytest.mark.parametrize(
    "override, field",
    [
        ("priority.alpha=1.5", "priority.alpha"),
        ("priority.beta_start=-0.1", "priority.beta_start"),
        ("priority.eta=2", "priority.eta"),
        ("agent.n_step=0", "agent.n_step"),
        ("agent.n_step=49995", "agent.n_step"),
        ("agent.double=maybe", "agent.double"),
    ],
)
def test_bad_variant_params_are_one_line_and_exit_2(override, field):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "reprodqn.cli",
            "params",
            "--params",
            str(PARAMS),
            "--explain",
            "agent",
            "--set",
            override,
        ],
        capture_output=True,
        text=True,
        env=cli_env(),
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and field in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_preset_and_unfitting_capacity_are_one_line_and_exit_2(tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "reprodqn.cli",
            "params",
            "--params",
            str(PARAMS),
            "--preset",
            "rainbow",
            "--out",
            str(tmp_path / "p"),
        ],
        capture_output=True,
        text=True,
        env=cli_env(),
    )
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert (
        "--preset rainbow: no such preset (the package's, or presets/rainbow.yaml" in result.stderr
    )
    assert (
        "expected one of adam, authors-2018, deepmind-2015, double, dueling, laptop, per, "
        "r2d2-priority, smoke" in result.stderr
    )
    overrides = [*TINY, "replay.prioritized=true", "replay.capacity=100000000000"]
    command = train_command(tmp_path, overrides)
    result = subprocess.run(command, capture_output=True, text=True, env=cli_env())
    errors = [line for line in result.stderr.splitlines() if "error" in line.lower()]
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert len(errors) == 1 and errors[0].startswith(
        "reprodqn: error: replay.capacity (100,000,000,000): prioritized replay needs"
    ), result.stderr  # after "starting"


def test_n_step_limit_follows_the_replay_history():
    assert load_params(PARAMS, ["agent.n_step=49994"]).agent.n_step == 49_994
    with pytest.raises(
        InputError,
        match=r"agent.n_step \(49995\) exceeds what replay history "
        r"allows: at most 49994",
    ):
        load_params(PARAMS, ["agent.n_step=49995"])


def test_prioritized_run_killed_after_many_tree_updates_resumes_to_the_uninterrupted_chain(
    tmp_path,
):
    """kill -9 a real R2D2-priority run (PER, 5-step, Double) after its first resume point,
    by which time the tree has taken ~125 batches of new priorities; rerun; same chain."""
    import signal
    import time

    overrides = [
        *TINY,
        "train.steps=1200",
        "train.resume_every=700",
        "agent.double=true",
        "replay.prioritized=true",
        "agent.n_step=5",
        "priority.eta=0.9",
        "priority.alpha=0.9",
        "priority.importance_weights=false",
        "compute.numerics=standard",  # the mixture is not in the universal kernels
    ]
    command = train_command(tmp_path / "killed", overrides, "minibatch", 1)
    subprocess.run(
        train_command(tmp_path / "whole", overrides, "minibatch", 1),
        check=True,
        capture_output=True,
        env=cli_env(),
    )
    run_dir = tmp_path / "killed" / "minibatch" / "1"
    process = subprocess.Popen(
        command,
        env=cli_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    marker = run_dir / "resume" / "latest.json"
    deadline = time.monotonic() + 300
    while not marker.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert process.poll() is None, "training finished before it could be killed"
    process.send_signal(signal.SIGKILL)
    process.wait()
    rerun = subprocess.run(
        command,
        capture_output=True,
        text=True,
        env=cli_env(),
    )
    assert rerun.returncode == 0 and "resumed at step 700" in rerun.stderr, rerun.stderr
    assert (run_dir / "hashes.jsonl").read_bytes() == (
        tmp_path / "whole" / "minibatch" / "1" / "hashes.jsonl"
    ).read_bytes()
