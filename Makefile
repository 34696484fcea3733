# reprodqn: every target creates the virtual environment first if it is missing.
# torch is pinned to 2.13.0 and installed on its own first: a local CPU build satisfies it
# where one exists, where an unpinned torch would pull a multi-GB CUDA build.

PYTHON  ?= python3
VENV    := .venv
BIN     := $(CURDIR)/$(VENV)/bin
STAMP   := $(VENV)/.installed
SMOKE   := build/smoke
LAPTOP  ?= build/laptop
# make laptop GAME=pong LAPTOP=build/laptop-pong: the study on another game, evaluated on
# GAME_STATES: by default the game's own start states where this checkout has them
# (start_sequences/GAME.json, made by the paper's method), otherwise none (from the reset
# screen after no-ops, not the paper's protocol); or any start-sequence file of that game
GAME    ?=
GAME_STATES ?= $(if $(wildcard start_sequences/$(GAME).json),start_sequences/$(GAME).json,none)
UI_PORT ?= 5000
IMAGE   ?= reprodqn:latest
# make bundle RESUME=STEP ships this run's resume point at STEP
RESUME_RUN ?= deterministic/0
MLFLOW_DB ?= $(CURDIR)/mlflow.db
WORKSPACE ?= $(CURDIR)
TEST_WORKERS ?= 2
TORCH   ?= cuda
TORCH_WHEELS ?= /opt/wheels
TORCH_WHEEL  ?= torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl
CONTAINER    ?= docker
PODMAN_FLAGS ?= --runtime runc --cgroup-manager cgroupfs
USER_ID  ?= $(shell id -u)
GROUP_ID ?= $(shell id -g)
ifeq ($(CONTAINER),podman)
ENGINE    := CONTAINERS_CONF=$(or $(CONTAINERS_CONF),$(CURDIR)/.ci/container/containers.conf) \
             podman $(PODMAN_FLAGS)
GPU_FLAGS := --device nvidia.com/gpu=all
BUILD_FLAGS := --format docker
else
ENGINE    := $(CONTAINER)
GPU_FLAGS := --gpus all
endif

export PATH := $(BIN):$(PATH)
export DVC_NO_ANALYTICS := 1
export PYTHONHASHSEED := 0

.PHONY: venv repro select smoke smoke-workspace smoke-reference smoke-standard-reference laptop laptop-workspace laptop-verify \
        laptop-reference test test-slow test-slurm bench lint docs-tables docs docs-serve dvc-deps ui lock docker-build docker-run \
        gpu-check \
        bundle clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e '.[study,test,sb3]'
	touch $@

# The main job: the paper-scale study (6 groups x 5 runs x 20M steps; days on a GPU),
# evaluated on the start states params.yaml names (by default the authors' own 100).
repro: $(STAMP)
	dvc repro

# The paper's start-state method, our draw (start_sequences/dvc.yaml): 1000 candidates,
# a 5M-step ranker, 100 drawn from the top 250. Evaluate on them with
# evaluation.start_sequences: start_sequences/selected.json.
select: $(STAMP)
	dvc repro start_sequences/dvc.yaml

# $(call fill-workspace,DIR): the pipeline's files in a scratch workspace; what it has made
# (runs/, evaluations/, .dvc/cache) stays, so a study there resumes where it stopped.
define fill-workspace
	mkdir -p $(1)/start_sequences
	cp dvc.yaml .dvcignore CITATION.cff $(1)/
	[ -d $(1)/.dvc ] || { cp -r .dvc $(1)/.dvc && rm -rf $(1)/.dvc/tmp; }
	cp start_sequences/dvc.yaml start_sequences/authors* $(wildcard start_sequences/$(GAME).json) \
	  $(1)/start_sequences/
	rm -rf $(1)/src && cp -r src $(1)/src && find $(1)/src -name __pycache__ -prune -exec rm -rf {} +
endef

# The smoke workspace alone (make docker-run WORKSPACE=build/smoke runs it in the image).
# PRESET=NAME makes it for a preset (presets/NAME.yaml, a DQN-family variant, applied before
# the smoke scale, presets/smoke.yaml); NUMERICS=standard in the standard numerics.
smoke-workspace: $(STAMP)
	rm -rf $(SMOKE)
	$(call fill-workspace,$(SMOKE))
	reprodqn params --params params.yaml $(if $(PRESET),--preset $(PRESET)) \
	  --overlay presets/smoke.yaml $(if $(NUMERICS),--set compute.numerics=$(NUMERICS)) \
	  --out $(SMOKE)/params.yaml

# The same pipeline at smoke scale (presets/smoke.yaml over params.yaml), in a scratch
# workspace so the real one is untouched; MLflow runs go to this workspace's store.
smoke: smoke-workspace
	cd $(SMOKE) && MLFLOW_TRACKING_URI=sqlite:///$(MLFLOW_DB) \
	  REPRODQN_MLFLOW_EXPERIMENT=reprodqn-smoke$(if $(PRESET),-$(PRESET)) dvc repro
	@echo "smoke: report in $(SMOKE)/reports/report.md; MLflow: make ui"

# The smoke study's results as the committed reference every test run checks itself against
# (tests/e2e/test_reference.py); for when results change on purpose. Its README.md is kept.
smoke-reference: smoke
	cd $(SMOKE) && reprodqn bundle --reference-dir $(CURDIR)/reference/smoke

# The same in the standard numerics (torch's kernels, exact on one stack):
# reference/smoke-standard.
smoke-standard-reference:
	$(MAKE) smoke NUMERICS=standard SMOKE=build/smoke-standard
	cd build/smoke-standard && reprodqn bundle --reference-dir $(CURDIR)/reference/smoke-standard

# The laptop study: the authors-2018 agent at the laptop scale (presets/laptop.yaml); what it
# costs is measured in docs/laptop.md. Rerun to resume; LAPTOP=DIR puts the workspace elsewhere;
# NUMERICS=standard makes it in the standard numerics (laptop-verify then parts from the
# universal reference/laptop by design).
laptop-workspace: $(STAMP)
	$(call fill-workspace,$(LAPTOP))
	reprodqn params --params params.yaml --preset authors-2018 --overlay presets/laptop.yaml \
	  $(if $(NUMERICS),--set compute.numerics=$(NUMERICS)) \
	  $(if $(GAME),--set env.game=$(GAME) --set evaluation.start_sequences=$(GAME_STATES)) \
	  --out $(LAPTOP)/params.yaml

laptop: laptop-workspace
	cd $(LAPTOP) && MLFLOW_TRACKING_URI=sqlite:///$(MLFLOW_DB) \
	  REPRODQN_MLFLOW_EXPERIMENT=reprodqn-laptop dvc repro
	@echo "laptop: report in $(LAPTOP)/reports/report.md; check it: make laptop-verify"

# Your laptop study against the committed reference: every run's chains and scores.
laptop-verify: $(STAMP)
	reprodqn verify --reference reference/laptop --root $(LAPTOP) --params $(LAPTOP)/params.yaml

# Replace reference/laptop with the laptop study's bundle (no checkpoints or resume points);
# for when results change on purpose. reference/laptop/README.md is kept; the README's
# Table 1 is rewritten from the new report.
laptop-reference: $(STAMP)
	cd $(LAPTOP) && reprodqn bundle --reference-dir $(CURDIR)/reference/laptop
	$(BIN)/python -m tools.laptop_table

# two test processes (pytest-xdist), each taking whole files, so a module's fixtures are
# made once; TEST_WORKERS=0 runs them in this process
test: $(STAMP)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile

test-slow: $(STAMP)
	$(BIN)/python -m pytest -m slow

# The Slurm backend against a real single-node Slurm on this machine (needs root: it
# installs and starts munge, slurmctld and slurmd, and stops them afterwards).
test-slurm: $(STAMP)
	.ci/slurm/start
	REPRODQN_REQUIRE_SLURM=1 $(BIN)/python -m pytest -m slurm; status=$$?; \
	  .ci/slurm/stop; exit $$status

bench: $(STAMP)
	$(BIN)/python bench/replay_memory.py
	$(BIN)/python bench/train_throughput.py
	$(BIN)/python bench/eval_throughput.py
	$(BIN)/python bench/per_overhead.py
	$(BIN)/python bench/update_options.py
	$(BIN)/python bench/act_forward.py
	$(BIN)/python bench/determinism_overhead.py
	$(BIN)/python bench/optimizer_step.py

# The docs' generated tables: the module table, from the package's own docstrings, the
# parameter reference, from the params models' descriptions, and the command list, from
# the parser's help (tests check all three).
docs-tables: $(STAMP)
	$(BIN)/python -m tools.module_table
	$(BIN)/python -m tools.params_reference
	$(BIN)/python -m tools.cli_table
	$(BIN)/python -m tools.laptop_table
	$(BIN)/python -m tools.games_table

# dvc.yaml's code dependencies, from the import graph (a test checks them).
dvc-deps: $(STAMP)
	$(BIN)/python -m tools.dvc_deps

# The manual (mkdocs.yml): built strict, so a broken link or an unlisted page fails.
docs: $(STAMP)
	$(BIN)/mkdocs build --strict

docs-serve: $(STAMP)
	$(BIN)/mkdocs serve

lint: $(STAMP)
	$(BIN)/ruff check src tests bench experiments tools examples template
	$(BIN)/ruff format --check src tests bench experiments tools examples template
	$(BIN)/python -m mypy
	$(BIN)/hadolint --no-color Dockerfile template/Dockerfile

# The MLflow UI over this workspace's store, on this machine only. MLflow 3.17 opens an
# experiment in the mode of its GenAI/Model training switch, whatever the experiment's kind:
# the link below picks Model training. Its server jobs (a job runner and 7 huey consumers,
# for GenAI features the study never uses) are off: 2 processes and ~0.5 GB RSS instead of
# 10 and ~2.4 GB (measured at start-up).
ui: $(STAMP)
	@$(BIN)/python -c "from reprodqn.study.mlflow_store import print_links; \
	  print_links('sqlite:///$(CURDIR)/mlflow.db', 'http://127.0.0.1:$(UI_PORT)')"
	MLFLOW_DISABLE_TELEMETRY=true MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false mlflow ui --backend-store-uri sqlite:///$(CURDIR)/mlflow.db \
	  --host 127.0.0.1 --port $(UI_PORT) --workers 1

# Regenerate requirements.lock (exact versions and hashes of the runtime dependencies) for
# the container's platform; the image runs the pipeline, not the tests.
lock: $(STAMP)
	$(BIN)/python -m pip install --quiet 'uv>=0.5'
	$(BIN)/uv pip compile pyproject.toml --extra study --extra sb3 --generate-hashes --python-version 3.11 \
	  --python-platform x86_64-manylinux_2_28 --no-header --quiet -o requirements.lock
	$(BIN)/python -m tools.lock_wheels  # installs on every base's Python (3.11, 3.12)

# The image: TORCH=cuda (default) installs the locked CUDA torch; TORCH=cpu the local
# torch 2.13.0 CPU wheel from TORCH_WHEELS. BASE overrides the base image (CI: a Debian
# bookworm from .ci/container/base). CONTAINER=podman runs podman with PODMAN_FLAGS, the
# flags this machine kind needs as root (runc, cgroupfs, no default ulimits).
docker-build:
	$(if $(filter-out cuda cpu,$(TORCH))$(filter-out 1,$(words $(TORCH))),\
	  $(error docker-build: TORCH must be cuda or cpu, not '$(TORCH)'))
	$(if $(filter cpu,$(TORCH)),$(if $(wildcard $(TORCH_WHEELS)/$(TORCH_WHEEL)),,\
	  $(error docker-build: TORCH=cpu needs $(TORCH_WHEEL) in TORCH_WHEELS=$(TORCH_WHEELS))))
	$(ENGINE) build $(BUILD_FLAGS) -t $(IMAGE) --build-arg TORCH=$(TORCH) $(if $(BASE),--build-arg BASE=$(BASE)) \
	  $(if $(filter cpu,$(TORCH)),--build-context torch-wheels=$(TORCH_WHEELS) \
	  --build-arg TORCH_WHEEL=$(TORCH_WHEEL) \
	  --build-arg TORCH_WHEEL_SHA256=$$(sha256sum "$(TORCH_WHEELS)/$(TORCH_WHEEL)" | cut -d' ' -f1)) .

# On a machine with an NVIDIA GPU, first: two deterministic runs give one chain, the gpu
# group's two runs part (and where), the fast path (replay on the GPU, CUDA graphs) gives
# the same chain, the audit on CUDA, throughput with 1, 4, 8 and 16 runs on each path
# sharing the GPU, and a report naming GPU, driver, CUDA and cuDNN (build/gpu-check/).
# Without a GPU it says so in one line and fails. Inside the image: reprodqn gpu-check.
gpu-check: $(STAMP)
	reprodqn gpu-check --params params.yaml --out build/gpu-check

# dvc repro inside the image: all GPUs, the workspace mounted (results, DVC state and the
# MLflow store stay on the host), as the host user. Without a GPU it runs on the CPU.
# WORKSPACE picks the directory (default: this one; build/smoke after make smoke-workspace).
docker-run:
	$(if $(wildcard $(WORKSPACE)/.),,$(error docker-run: no workspace directory $(WORKSPACE)))
	@digest=$$($(ENGINE) image inspect --format '{{.Id}}' $(IMAGE) 2>/dev/null) \
	  || { echo "docker-run: no image $(IMAGE) (make docker-build first)" >&2; exit 2; }; \
	if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
	  gpus="$(GPU_FLAGS)"; echo "docker-run: with all GPUs"; \
	else gpus=""; echo "docker-run: no GPU found; running on the CPU"; fi; \
	set -x; $(ENGINE) run --rm $$gpus --user $(USER_ID):$(GROUP_ID) -v "$(abspath $(WORKSPACE))":/workspace \
	  -w /workspace -e HOME=/tmp -e REPRODQN_WORKERS \
	  -e REPRODQN_IMAGE=$(IMAGE) -e REPRODQN_IMAGE_DIGEST=sha256:$${digest#sha256:} \
	  $(IMAGE) dvc repro

# One archive a paper can link to: code, params, dvc.lock, start sequences, conditions,
# SBOM, hash chains, evaluation results, report, manifest. CHECKPOINTS=1 adds weights;
# RESUME=STEP adds RESUME_RUN's resume point at STEP (verify --rerun starts there);
# SIGN=KEY signs the manifest with that OpenSSH private key.
bundle: $(STAMP)
	$(if $(RESUME),reprodqn resume-point $(RESUME_RUN) --step $(RESUME))
	reprodqn bundle --out dist/reprodqn-bundle.tar.gz $(if $(CHECKPOINTS),--checkpoints,) \
	  $(if $(SIGN),--sign $(SIGN),)

clean:
	rm -rf $(VENV) $(SMOKE) .pytest_cache dist
