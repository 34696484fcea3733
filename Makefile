# reprodqn: every target creates the virtual environment first if it is missing.
# torch is pinned to 2.13.0 and installed on its own first: the machine's local CPU build
# satisfies it, where an unpinned torch would pull a multi-GB CUDA build.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: venv repro smoke test test-slow bench lint clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

# The main job. Until the DVC pipeline lands: one smoke-sized training run.
repro: $(STAMP)
	$(BIN)/reprodqn train --group deterministic --run 0 --params params.yaml \
	  --set train.steps=5000 --set replay.capacity=10000 --set replay.learning_starts=1000 \
	  --set train.checkpoint_every=1000 --set train.resume_every=2500 --set train.log_every=500 \
	  --runs-dir runs-smoke

test: $(STAMP)
	$(BIN)/python -m pytest

test-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow

bench: $(STAMP)
	$(BIN)/python bench/replay_memory.py
	$(BIN)/python bench/train_throughput.py

lint: $(STAMP)
	$(BIN)/ruff check src tests bench

clean:
	rm -rf $(VENV) runs-smoke .pytest_cache
