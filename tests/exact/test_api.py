"""reprodqn.exact, the public API, piece by piece: streams that resume exactly, a chain
that names what was computed, resume points that restore modules, optimizers and lists of
environments, a run folder that refuses another config, and verify on any two folders."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import reprodqn.envs  # noqa: F401  (registers the envs)
from reprodqn import exact
from reprodqn.core.errors import InputError
from reprodqn.determinism import isa
from reprodqn.forensics import chains, script_rerun
from tests.helpers import cli_env


def test_streams_resume_exactly_and_are_independent_by_name():
    streams = exact.Streams(numpy={"noise": 5}, torch={"init": 1, "actions": 2})
    streams["noise"].random(3)
    torch.rand(2, generator=streams["actions"])
    saved = streams.get_state()
    expected = (streams["noise"].random(4), torch.rand(4, generator=streams["actions"]))
    streams.set_state(saved)
    again = (streams["noise"].random(4), torch.rand(4, generator=streams["actions"]))
    assert np.array_equal(expected[0], again[0]) and torch.equal(expected[1], again[1])
    other = exact.Streams(numpy={"noise": 5}, torch={"init": 99, "actions": 2})
    other["noise"].random(3)
    torch.rand(2, generator=other["actions"])  # the init seed changed: actions did not
    assert torch.equal(torch.rand(4, generator=other["actions"]), expected[1])
    with pytest.raises(KeyError, match="no stream named 'nosie'"):
        streams["nosie"]
    with pytest.raises(InputError, match="stream names"):
        other.set_state({"numpy": {}, "torch": saved["torch"]})


def test_the_chain_names_every_loss_and_the_weights_and_cuts_back_on_restore(tmp_path):
    net = torch.nn.Linear(3, 2)
    chain = exact.HashChain(tmp_path)
    chain.checkpoint(0, net)
    chain.extend(torch.tensor([0.5, 0.25]))
    saved = chain.get_state()
    line = chain.checkpoint(10, net, {"note": "x"})
    assert line["updates"] == 2 and line["loss_chain_sha256"] != exact.EMPTY_CHAIN
    assert line["loss_chain_sha256"] == exact.chain_losses(exact.EMPTY_CHAIN, np.array([0.5, 0.25]))
    flipped = exact.HashChain(tmp_path / "b")
    flipped.extend([0.25, 0.5])  # the order is part of what was computed
    assert flipped.loss_chain != line["loss_chain_sha256"]
    assert (tmp_path / "checkpoints" / "step-000000010.safetensors").exists()
    with pytest.raises(InputError, match="step 10 is not after the last one, 10"):
        chain.checkpoint(10, net)  # a step counter left out of the resume point repeats
    chain.set_state(saved)
    lines = (tmp_path / "hashes.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [0]


def test_a_log_restored_to_a_resume_point_drops_the_lines_written_after_it(tmp_path):
    log = exact.JsonLog(tmp_path / "scores.jsonl")
    log.write({"step": 1, "score": 2.0})
    exact.save_resume_point(tmp_path, 1, {"log": log})
    log.write({"step": 2, "score": 5.0})  # written after the point: a killed run's
    exact.load_resume_point(tmp_path, {"log": log})
    log.write({"step": 2, "score": 5.0})  # the resumed run writes it again, once
    lines = (tmp_path / "scores.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [1, 2]


def test_a_resume_point_restores_modules_optimizers_envs_and_plain_values(tmp_path):
    def world():
        torch_gen = torch.Generator().manual_seed(0)
        net = torch.nn.Linear(4, 2)
        with torch.no_grad():
            net.weight.copy_(torch.rand(net.weight.shape, generator=torch_gen))
        optimizer = torch.optim.Adam(net.parameters(), lr=0.01)
        envs = [gym.make("reprodqn/Breakout-v0", mode="train").unwrapped for _ in range(2)]
        for i, env in enumerate(envs):
            env.reset(seed=i)
        return net, optimizer, envs

    def advance(net, optimizer, envs, n):
        for _ in range(n):
            loss = net(torch.ones(1, 4)).pow(2).sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            frames = [env.step(1)[0] for env in envs]
        return net.weight.detach().clone(), frames

    net, optimizer, envs = world()
    advance(net, optimizer, envs, 3)
    exact.save_resume_point(tmp_path, 3, {"net": net, "opt": optimizer, "envs": envs, "n": 3})
    expected = advance(net, optimizer, envs, 5)

    net2, optimizer2, envs2 = world()
    saved = exact.load_resume_point(tmp_path, {"net": net2, "opt": optimizer2, "envs": envs2})
    assert saved is not None and saved["n"] == 3
    got = advance(net2, optimizer2, envs2, 5)
    assert torch.equal(expected[0], got[0])
    assert all(np.array_equal(a, b) for a, b in zip(expected[1], got[1], strict=True))
    assert exact.load_resume_point(tmp_path / "none", {"net": net2}) is None
    with pytest.raises(InputError, match="no state for"):
        exact.load_resume_point(tmp_path, {"other": net2})


def test_the_chain_takes_any_float_dtype_and_tensors_with_gradients(tmp_path):
    """bfloat16 losses and weights are chained as the float32 numbers they are; a list of
    losses that require grad is chained as its values; None is refused."""
    values = [0.5, 1.25, -3.0]  # exact in bfloat16
    as_floats, as_bf16 = exact.HashChain(tmp_path / "f"), exact.HashChain(tmp_path / "b")
    as_floats.extend(values)
    as_bf16.extend(torch.tensor(values, dtype=torch.bfloat16))
    assert as_floats.loss_chain == as_bf16.loss_chain
    weight = torch.tensor([2.0], requires_grad=True)
    as_floats.extend([weight * 1.0, weight * 2.0])
    as_bf16.extend([2.0, 4.0])
    assert as_floats.loss_chain == as_bf16.loss_chain and as_floats.updates == 5
    line = as_bf16.checkpoint(0, {"w": torch.ones(2, dtype=torch.bfloat16)})
    assert len(line["weights_sha256"]) == 64
    with pytest.raises(InputError, match="got None"):
        as_floats.extend(None)


POLICY = """
import sys, torch
from torch import nn
from reprodqn import exact
policy = nn.Sequential(nn.Conv2d(4, 8, 8, stride=4), nn.ReLU(), nn.Flatten(), nn.Linear(800, 3))
generator = torch.Generator().manual_seed(5)
for parameter in policy.parameters():
    nn.init.normal_(parameter, std=0.1, generator=generator)
print(exact.save_policy(policy, sys.argv[1]))
"""


def test_a_saved_policy_is_the_same_bytes_whatever_the_hash_seed_and_computes_as_the_module(
    tmp_path,
):
    """torch.jit.save of a scripted module orders each layer's constants by Python's string
    hash, so two processes with other PYTHONHASHSEED values wrote different files; the
    saved policy is played bit for bit as the module, which stays in training mode."""
    script = tmp_path / "policy.py"
    script.write_text(POLICY)
    written = {}
    for seed in ("1", "2"):
        path = tmp_path / f"seed-{seed}.pt"
        done = subprocess.run(
            [sys.executable, str(script), str(path)],
            env=cli_env(PYTHONHASHSEED=seed),
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        written[seed] = path.read_bytes()
        assert done.stdout.strip() == hashlib.sha256(written[seed]).hexdigest()
    assert written["1"] == written["2"]
    policy = torch.nn.Sequential(torch.nn.Conv2d(4, 2, 3), torch.nn.Flatten()).train()
    policy[1].eval()  # a layer the script keeps in eval mode stays so
    exact.save_policy(policy, tmp_path / "p.pt")
    frames = torch.arange(4 * 5 * 5, dtype=torch.float32).reshape(1, 4, 5, 5) / 7
    assert [m.training for m in policy.modules()] == [True, True, False]
    assert sorted(f.name for f in tmp_path.iterdir()) == [
        "p.pt",
        "policy.py",
        "seed-1.pt",
        "seed-2.pt",  # no temporary file left
    ]
    with torch.no_grad():
        assert torch.equal(torch.jit.load(tmp_path / "p.pt")(frames), policy(frames))


def test_a_run_killed_before_its_first_resume_point_starts_over_as_it_began(tmp_path):
    """No point yet: the chain and logs the killed run wrote are emptied, not appended to."""
    net = torch.nn.Linear(2, 2)

    def run(directory, losses):
        chain, log = exact.HashChain(directory), exact.JsonLog(directory / "returns.jsonl")
        assert exact.load_resume_point(directory, {"chain": chain, "log": log}) is None
        chain.checkpoint(0, net)
        for step, loss in enumerate(losses, 1):
            chain.extend(loss)
            log.write({"step": step, "loss": loss})
            chain.checkpoint(step, net)

    run(tmp_path / "whole", [1.0, 2.0, 3.0])
    run(tmp_path / "killed", [1.0, 2.0])  # killed here, before any resume point
    run(tmp_path / "killed", [1.0, 2.0, 3.0])
    for name in ("hashes.jsonl", "returns.jsonl"):
        whole, again = ((tmp_path / d / name).read_text() for d in ("whole", "killed"))
        assert whole == again and whole.count("\n") >= 3


def test_arrays_tensors_and_lists_come_back_in_place_and_the_unsavable_is_named(tmp_path):
    replay, weights, counts = np.arange(6.0).reshape(2, 3), torch.ones(3), [1, 2]
    frames, episodes = [np.zeros(2, np.uint8), np.ones(2, np.uint8)], [{"score": 1.0}]
    parts = {"replay": replay, "weights": weights, "counts": counts, "frames": frames}
    extra = {"episodes": episodes, "episode": np.int64(7), "totals": {"n": np.int64(3)}}
    exact.save_resume_point(tmp_path, 1, parts | extra)
    replay[:], counts[:], frames[:], episodes[:] = -1, [], [], []
    weights.zero_()
    saved = exact.load_resume_point(tmp_path, parts | {"episodes": episodes})
    assert np.array_equal(replay, np.arange(6.0).reshape(2, 3)) and replay.flags.writeable
    assert torch.equal(weights, torch.ones(3)) and counts == [1, 2]
    assert [f.tolist() for f in frames] == [[0, 0], [1, 1]] and frames[0].flags.writeable
    assert episodes == [{"score": 1.0}]
    assert saved is not None and saved["episode"] == 7 and saved["totals"] == {"n": 3}
    with pytest.raises(InputError, match=r"replay: resume point holds float64 \(2, 3\)"):
        exact.load_resume_point(tmp_path, {"replay": np.zeros(4)})
    env = gym.make("CartPole-v1")
    with pytest.raises(InputError, match="^env: a value of type TimeLimit cannot be saved"):
        exact.save_resume_point(tmp_path / "env", 1, {"env": env})
    with pytest.raises(InputError, match=r"^counters: key 'a/b'"):
        exact.save_resume_point(tmp_path / "slash", 1, {"counters": {"a/b": 1}})
    assert not (tmp_path / "env").exists() and not (tmp_path / "slash").exists()


def test_a_run_folder_refuses_another_config_or_script_and_records_its_conditions(
    tmp_path, monkeypatch
):
    script = tmp_path / "train.py"
    script.write_text("LOSS = 'mse'\n")
    monkeypatch.setattr(sys, "argv", [str(script), "--out", str(tmp_path)])
    process = exact.Setup(torch.device("cpu"), 1, "native", True)
    conditions = exact.start_run(tmp_path, {"lr": 0.1, "seed": 1}, process)
    assert conditions["numerics"]["torch_threads"] == 1
    assert {"config.json", "conditions.json", "sbom.cdx.json"} <= {
        p.name for p in tmp_path.iterdir()
    }
    exact.start_run(tmp_path, {"lr": 0.1, "seed": 1}, process)  # the same run, resumed
    exact.start_run(tmp_path, {"lr": np.float64(0.1), "seed": np.int64(1)}, process)
    with pytest.raises(InputError, match=r"different config: lr \(now 0.2, recorded 0.1\);"):
        exact.start_run(tmp_path, {"lr": 0.2, "seed": 1}, process)
    with pytest.raises(InputError, match=r"different config: seed \(now 1.0, recorded 1\);"):
        exact.start_run(tmp_path, {"lr": 0.1, "seed": 1.0}, process)  # equal, other digest
    script.write_text("LOSS = 'l1'\n")  # the code changed: its results are not resumed
    with pytest.raises(InputError, match=r"another version of .*train\.py"):
        exact.start_run(tmp_path, {"lr": 0.1, "seed": 1}, process)


def test_the_cpu_floor_is_refused_after_torch_has_chosen_its_kernels():
    """torch is imported in this process: a floor the environment does not already hold
    would do nothing, so it is refused in one line."""
    wanted = "avx2" if os.environ.get("MKL_CBWR") == "COMPATIBLE" else "portable"
    with pytest.raises(InputError, match="before torch is imported"):
        exact.cpu_floor(wanted)
    with pytest.raises(InputError, match="cpu_isa: 'sse'"):
        exact.cpu_floor("sse")


def test_setup_keeps_the_floor_cpu_floor_pinned_and_refuses_bad_settings_in_one_line():
    script = (
        "from reprodqn import exact\n"
        "exact.cpu_floor('avx2')\n"
        "import torch\n"
        "print(exact.setup().cpu_isa)\n"
    )
    env = {k: v for k, v in cli_env().items() if k not in isa.KNOBS}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "avx2"
    for settings, message in (
        ({"threads": "2"}, "threads: '2'; expected a whole number"),
        ({"threads": 2.5}, "threads: 2.5; expected a whole number"),
        ({"device": "gpu"}, "device: 'gpu'; expected one of cpu, cuda, auto"),
    ):
        with pytest.raises(InputError, match=message):
            exact.setup(**settings)


def _chain(root, losses):
    chain = exact.HashChain(root)
    net = exact.uninitialised(torch.nn.Linear, 2, 2)
    torch.nn.init.zeros_(net.weight)
    torch.nn.init.zeros_(net.bias)
    chain.checkpoint(0, net)
    for step, loss in enumerate(losses, 1):
        chain.extend([loss])
        chain.checkpoint(step * 10, net)


def test_verify_compares_any_two_result_folders(tmp_path):
    _chain(tmp_path / "a" / "seed-0", [1.0, 2.0, 3.0])
    _chain(tmp_path / "b" / "seed-0", [1.0, 2.0, 3.0])
    assert chains.compare(tmp_path / "a", tmp_path / "b")["identical"]
    _chain(tmp_path / "c" / "seed-0", [1.0, 2.5, 3.0])
    result = chains.compare(tmp_path / "a", tmp_path / "c")
    assert result["first_divergence"] == {"run": "seed-0", "step": 20, "fields": ["losses"]}
    _chain(tmp_path / "d" / "seed-0", [1.0, 2.0])
    shorter = chains.compare(tmp_path / "a", tmp_path / "d")
    assert shorter["prefix"] and not shorter["identical"]
    assert chains.summary(shorter).splitlines()[0] == (
        "verify: seed-0 identical through step 20; ours goes on to step 30"
    )
    cli = [sys.executable, "-m", "reprodqn.cli", "verify"]
    # run where a study of one's own keeps its own params.yaml (the template's), not ours
    (tmp_path / "params.yaml").write_text("train:\n  batch_size: 32\n  learning_rate: 0.001\n")
    same = subprocess.run(
        [*cli, "a", "b"], cwd=tmp_path, env=cli_env(), capture_output=True, text=True
    )
    assert same.returncode == 0 and "identical: 1 run, every" in same.stdout
    parted = subprocess.run(
        [*cli, "a", "c"], cwd=tmp_path, env=cli_env(), capture_output=True, text=True
    )
    assert parted.returncode == 1
    assert "first divergence in seed-0 at checkpoint step 20 (losses)" in parted.stdout
    empty = subprocess.run(
        [*cli, "a", "nowhere"], cwd=tmp_path, env=cli_env(), capture_output=True, text=True
    )
    assert empty.returncode == 2 and empty.stderr.count("\n") == 1 and "nowhere" in empty.stderr


def test_a_replicated_prefix_is_its_own_verdict_and_until_compares_through_a_step(tmp_path):
    """Rerunning the first part of a long record (the Pong ranker's to 50K of its 1M) said
    "DIFFERENT: the run is the same through step ..." and exited 1, as a divergence does."""
    _chain(tmp_path / "record", [1.0, 2.0, 3.0])  # checkpoints at steps 0, 10, 20, 30
    _chain(tmp_path / "rerun", [1.0, 2.0])
    _chain(tmp_path / "parted", [1.0, 2.5])
    cli = [sys.executable, "-m", "reprodqn.cli", "verify"]

    def verify(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*cli, *argv], cwd=tmp_path, env=cli_env(), capture_output=True, text=True
        )

    prefix = verify("rerun", "record")
    assert prefix.returncode == chains.PREFIX_EXIT == 4, prefix.stderr
    assert prefix.stdout.splitlines()[0] == (
        "verify: identical through step 20; the reference goes on to step 30"
    )
    through = verify("rerun", "record", "--until", "20")
    assert through.returncode == 0, through.stdout + through.stderr
    assert through.stdout.startswith("verify: identical through step 20: 1 run, every")
    parted = verify("parted", "record", "--until", "20")
    assert parted.returncode == 1 and "DIFFERENT" in parted.stdout
    assert verify("record", "rerun", "--until", "30").returncode == chains.PREFIX_EXIT


def test_verify_skips_scratch_copies_names_the_settings_and_refuses_itself(tmp_path):
    """A workspace's build/ (traces, reruns) and resume-points/ hold copies of chains, not
    runs; a changed setting is named with both values; a folder is not its own replica."""
    for side in ("a", "b"):
        _chain(tmp_path / side / "runs" / "0", [1.0, 2.0])
        config = {"config": {"seed": 1 if side == "a" else 2, "lr": 0.1}}
        (tmp_path / side / "runs" / "0" / "config.json").write_text(json.dumps(config))
    _chain(tmp_path / "a" / "build" / "trace" / "to-window", [9.0])
    _chain(tmp_path / "a" / "resume-points" / "0" / "logs", [1.0])
    result = chains.compare(tmp_path / "a", tmp_path / "b")
    assert result["identical"] and result["runs_compared"] == 1
    assert result["config_differing"] == ["seed (ours 1, reference 2)"]
    assert "settings that differ: seed (ours 1, reference 2)" in chains.summary(result)
    (tmp_path / "link").symlink_to(tmp_path / "a")
    with pytest.raises(InputError, match="the same folder as"):
        chains.compare(tmp_path / "a", tmp_path / "link")


SCRIPT = """
import argparse, json, os, pathlib
import torch
from reprodqn import exact
parser = argparse.ArgumentParser()
parser.add_argument("--out", type=pathlib.Path)
parser.add_argument("--until", type=int, default=3)
args = parser.parse_args()
chain = exact.HashChain(args.out)
for step in range(args.until + 1):
    chain.extend([float(step)])
    chain.checkpoint(step, {"w": torch.full((1,), float(step))})
(args.out / "knob.json").write_text(json.dumps(os.environ.get("ONEDNN_MAX_CPU_ISA")))
"""


def script_run(study: Path, script: str, env: dict | None = None) -> tuple[Path, dict]:
    """`script` as study/train.py, run once into runs/0, with the command exact.start_run
    would record in its config.json: the run folder and that command."""
    study.mkdir(exist_ok=True)
    (study / "train.py").write_text(script)
    argv = [sys.executable, "train.py", "--out", "runs/0"]
    subprocess.run(argv, cwd=study, env=env or cli_env(), check=True)
    command = {"script": "train.py", "arguments": ["--out", "runs/0"], "cwd": str(study)}
    run = study / "runs" / "0"
    (run / "config.json").write_text(json.dumps({"config": {}, "command": command}))
    return run, command


def test_a_rerun_writes_where_it_was_told_with_the_shells_cpu_knobs(tmp_path, monkeypatch):
    """A relative --scratch is this directory's, not the script's recorded one; the
    script gets the user's environment, not the floor verify applied for itself."""
    env = {k: v for k, v in cli_env().items() if k != "ONEDNN_MAX_CPU_ISA"}
    run, command = script_run(tmp_path / "study", SCRIPT, env)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    for name, value in cli_env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")  # as verify's own floor sets it
    monkeypatch.setitem(isa.STARTED_WITH, "ONEDNN_MAX_CPU_ISA", None)
    result = script_rerun.rerun(run, 2, Path("scratch"))
    assert result["identical"] and result["records_compared"] == 3
    assert json.loads((elsewhere / "scratch" / "knob.json").read_text()) is None
    assert not result["script_differs"]
    (tmp_path / "study" / "models.py").write_text("WIDTH = 64\n")
    code = {"train.py": "1" * 64, "models.py": "0" * 64, "gone.py": "0" * 64}
    (run / "config.json").write_text(
        json.dumps(
            {"config": {}, "command": command, "script_sha256": "0" * 64, "code_sha256": code}
        )
    )
    again = script_rerun.rerun(run, 2, Path("again"))
    said = script_rerun.rerun_summary(again)
    assert again["script_differs"] and "not the one that wrote the run" in said
    assert again["code_differs"] == ["gone.py (missing)", "models.py"]  # the script apart
    assert "modules here are not the ones that wrote the run (their SHA-256): gone.py" in said
    past = script_rerun.rerun(run, 5, Path("past"))  # past where the recorded run stopped
    assert past["identical"] and past["records_compared"] == 4 and past["last_step"] == 3
    assert "the same through step 3, the last checkpoint both have" in (
        script_rerun.rerun_summary(past)
    )
    (run / "hashes.jsonl").write_text("")  # killed before its first checkpoint
    with pytest.raises(InputError, match=r"hashes\.jsonl: the run recorded no checkpoint"):
        script_rerun.rerun(run, 2, Path("empty"))
    (elsewhere / "nowhere.py").write_text("import sys\n")  # ignores --out
    with pytest.raises(InputError, match=r"nowhere\.py wrote no chain"):
        script_rerun.rerun(run, 2, Path("third"), script=Path("nowhere.py"))


def test_result_logs_declared_to_the_chain_are_compared_by_verify(tmp_path):
    """State that feeds only a log (an episode-return accumulator) left out of a resume
    point changes the log, not the weights: declared as a result, the log's SHA-256 is in
    every chain line, and verify names the checkpoint where the logs part."""
    from reprodqn.core import workspace

    def run(folder, returns):
        log = exact.JsonLog(folder / "returns.jsonl")
        chain = exact.HashChain(folder, results=[log])
        for step, value in enumerate(returns, start=1):
            log.write({"step": step, "return": value})
            chain.checkpoint(step, {"w": torch.zeros(2)})
        return workspace.read_hashes(folder)

    same = run(tmp_path / "a", [1.0, 2.0, 3.0])
    assert all("results_sha256" in line for line in same)
    assert run(tmp_path / "b", [1.0, 2.0, 3.0]) == same
    other = run(tmp_path / "c", [1.0, 2.5, 3.0])  # weights and losses as before
    found = chains.first_difference(same, other)
    assert found == {"step": 2, "fields": ["result logs"]}
    plain = exact.HashChain(tmp_path / "d")
    assert "results_sha256" not in plain.checkpoint(1, {"w": torch.zeros(2)})  # as before


def test_one_thread_asked_is_one_thread_applied_in_the_universal_mode(tmp_path):
    """setup(threads=1, numerics="universal") leaves torch at one thread through a
    universal forward, and numba's thread pool is never started (the tester's 2-thread
    'universal' chain at 1 thread, and a pool spinning on a shared core)."""
    script = (
        "from reprodqn import exact\n"
        "s = exact.setup(threads=1, numerics='universal')\n"
        "import torch, numba\n"
        "from reprodqn.exact import universal\n"
        "net = torch.nn.Sequential(universal.Conv2d(4, 8, 8, 4), universal.ReLU())\n"
        "universal.init_(net, torch.Generator().manual_seed(0))\n"
        "x = torch.zeros(2, 4, 84, 84)\n"
        "with universal.strict():\n"
        "    net(x).sum\n"
        "from numba.np.ufunc import parallel\n"
        "print(torch.get_num_threads(), s.applied['torch_threads'], parallel._is_initialized)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, check=True
    )
    assert done.stdout.split() == ["1", "1", "False"]
