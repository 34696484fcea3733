"""Where a run keeps its files: read by training, evaluation, the report and verify alike
(so those stages depend on this layout, not on the training loop's source)."""

from __future__ import annotations

import json
from pathlib import Path


def checkpoint_path(run_dir: Path, step: int) -> Path:
    return Path(run_dir) / "checkpoints" / f"step-{step:09d}.safetensors"


def read_hashes(run_dir: Path) -> list[dict]:
    """hashes.jsonl: one line per checkpoint (step, weights and loss-chain SHA-256, updates)."""
    path = Path(run_dir) / "hashes.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
