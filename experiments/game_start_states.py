"""The paper's start-state method on a game the authors published none for: rank 1000
random candidates by a trained ranker's max-Q at their end states, draw 100 from the top
250, and write the game's start-sequence file with the ranker's provenance (its run's
config, its chain up to the checkpoint used, the candidates' seed). Then show what the
selection did: every candidate's max-Q by rank with the 100 marked, and the ranker's
greedy score on the selected states against plain resets (no-op starts).

It runs the pipeline's own stages (`reprodqn candidates`, `ranker` adopting the checkpoint,
`select`) in a scratch workspace, so the file is what `dvc repro start_sequences/dvc.yaml`
makes with `ranker.checkpoint` set:

    .venv/bin/python experiments/game_start_states.py --run ~/reprodqn-ranker/pong/out/run \\
        --step 500000 --preset authors-2018 --game pong --out start_sequences/pong.json \\
        --figure docs/games/pong-selection.png
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def stage(workspace: Path, *argv: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "reprodqn.cli", *argv], cwd=workspace, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"reprodqn {argv[0]}: {done.stderr.strip()}")
    print(done.stderr.strip().splitlines()[-1], flush=True)


def chain_to(run: Path, step: int) -> list[dict]:
    if not (run / "hashes.jsonl").is_file():
        raise SystemExit(f"{run}: no hashes.jsonl (--run names the ranker's run directory)")
    lines = [json.loads(line) for line in (run / "hashes.jsonl").read_text().splitlines()]
    kept = [line for line in lines if line["step"] <= step]
    if not kept or kept[-1]["step"] != step:
        raise SystemExit(f"{run}: no checkpoint at step {step}")
    return kept


def scores(params_path: Path, checkpoint: Path, sha256: str, specs_of: str, states) -> list:
    """The ranker's greedy scores: on the selected states, or on no-op starts."""
    import torch

    from reprodqn.config.params import load_params, resolve_run
    from reprodqn.evaluation.protocol import Protocol, episode_specs, load_network, play
    from reprodqn.evaluation.start_states import load

    params = load_params(params_path)
    config = resolve_run(params, "deterministic", 0)
    protocol = Protocol.for_run(config, params.evaluation)
    net = load_network(checkpoint, sha256, torch.device("cpu"))
    if specs_of == "selected":
        sequences = load(states)["sequences"]
        specs = episode_specs(protocol, len(sequences), 0)
        return [r.score for r in play(net, specs, protocol, sequences)]
    specs = episode_specs(protocol, states, 0, config.env.noop_max)
    return [r.score for r in play(net, specs, protocol, None)]


def figure(ranking: Path, selected: dict, out: Path, game: str, summary: dict) -> None:
    """Left: every candidate's max-Q by rank, the selected marked; right: the ranker's
    greedy scores on the selected states and from no-op starts."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows = np.genfromtxt(ranking, delimiter=",", names=True)
    order = np.argsort(rows["rank"])
    chosen = set(selected["provenance"]["candidate_indices"])
    fig, (ax, scores_ax) = plt.subplots(
        1, 2, figsize=(11, 3.8), gridspec_kw={"width_ratios": [3, 2]}
    )
    ax.plot(rows["rank"][order], rows["max_q"][order], color="0.6", lw=1, label="candidates")
    picked = [i for i in order if int(rows["index"][i]) in chosen]
    ax.scatter(rows["rank"][picked], rows["max_q"][picked], s=10, color="C3",
               label=f"the {len(picked)} selected")  # fmt: skip
    top_k = int(selected["provenance"]["ranking"].split("top ")[1].split()[0])
    ax.axvline(top_k + 0.5, color="C0", ls="--", lw=1, label=f"top {top_k}")
    ax.set_xlabel(f"rank of {len(rows)} candidates by the ranker's max-Q at the end state")
    ax.set_ylabel("max_a Q(s, a)")
    ax.set_title(f"{game}: the ranking and the draw", fontsize=10)
    ax.legend(frameon=False, fontsize=8)
    low = min(min(summary["selected"]), min(summary["resets"]))
    high = max(max(summary["selected"]), max(summary["resets"]))
    bins = np.arange(low - 0.5, high + 1.5)
    for key, colour, name in (
        ("selected", "C3", "selected states"),
        ("resets", "0.5", "no-op starts"),
    ):
        values = summary[key]
        label = f"{name}: mean {np.mean(values):.2f} ({len(values)} episodes)"
        scores_ax.hist(values, bins=bins, color=colour, alpha=0.55, label=label)
    scores_ax.set_xlabel("the ranker's greedy score per episode")
    scores_ax.set_ylabel("episodes")
    scores_ax.set_title("what the ranker scores from them", fontsize=10)
    scores_ax.set_ylim(top=scores_ax.get_ylim()[1] * 1.3)  # room for the legend
    scores_ax.legend(frameon=False, fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", type=Path, required=True, help="the ranker's run directory")
    parser.add_argument("--step", type=int, required=True, help="its checkpoint to rank with")
    parser.add_argument("--game", required=True)
    parser.add_argument("--preset", default="authors-2018", help="the ranker's preset")
    parser.add_argument("--out", type=Path, required=True, help="the game's start-sequence file")
    parser.add_argument("--figure", type=Path, required=True)
    parser.add_argument("--episodes", type=int, default=100)
    args = parser.parse_args()
    run = args.run.resolve()
    chain = chain_to(run, args.step)
    checkpoint = run / "checkpoints" / f"step-{args.step:09d}.safetensors"
    with tempfile.TemporaryDirectory() as scratch:
        ws = Path(scratch)
        stage(ws, "init", ".")
        stage(ws, "params", "--params", "params.yaml", "--preset", args.preset,
              "--set", f"env.game={args.game}", "--set", f"ranker.checkpoint={checkpoint}",
              "--set", "evaluation.start_sequences=start_sequences/selected.json",
              "--out", "study.yaml")  # fmt: skip
        (ws / "study.yaml").replace(ws / "params.yaml")
        stage(ws, "candidates")
        stage(ws, "ranker")
        # into selected.json, which is read below (the game's own default, GAME.json, is
        # already the workspace's copy of the file the package carries for the game)
        stage(ws, "select", "--out", "start_sequences/selected.json",
              "--ranking", "start_sequences/ranking.csv")  # fmt: skip
        selected = json.loads((ws / "start_sequences" / "selected.json").read_text())
        config = json.loads((run / "config.json").read_text())
        selected["provenance"]["ranker"] = {
            "run_config": config,
            "checkpoint_step": args.step,
            "chain": chain,
            "trained_by": "experiments/learning_check.py --train-only (docs/games.md)",
        }
        weights = (checkpoint, chain[-1]["weights_sha256"])
        selected_file = ws / "start_sequences" / "selected.json"
        started = time.monotonic()
        print(f"greedy play from the {selected['count']} selected states ...", flush=True)
        on_selected = scores(ws / "params.yaml", *weights, "selected", selected_file)
        print(f"  done in {time.monotonic() - started:.0f} s; then from {args.episodes} "
              "no-op starts ...", flush=True)  # fmt: skip
        on_resets = scores(ws / "params.yaml", *weights, "resets", args.episodes)
        print(f"  done in {time.monotonic() - started:.0f} s in all", flush=True)
        summary = {
            "selected_mean": sum(on_selected) / len(on_selected),
            "resets_mean": sum(on_resets) / len(on_resets),
            "selected": on_selected,
            "resets": on_resets,
        }
        selected["provenance"]["greedy_score"] = summary
        from reprodqn.core.atomic import write_json

        write_json(args.out, selected)
        figure(ws / "start_sequences" / "ranking.csv", selected, args.figure, args.game, summary)
        (args.figure.with_suffix(".csv")).write_text(
            (ws / "start_sequences" / "ranking.csv").read_text()
        )
    print(
        f"greedy score: {summary['selected_mean']:.2f} on the selected states, "
        f"{summary['resets_mean']:.2f} from no-op starts; wrote {args.out} and {args.figure}",
        flush=True,
    )


if __name__ == "__main__":
    main()
