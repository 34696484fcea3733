# reprodqn's pinned environment: `make docker-build`, then `make docker-run` (dvc repro).
#
# Base: nvidia/cuda:13.0.1-runtime-ubuntu24.04, pinned by digest. torch 2.13's Linux wheels
# bring their own CUDA 13 libraries (requirements.lock: nvidia-*-cu13), so the image needs
# only a CUDA 13 runtime and a driver that supports it. To re-verify or bump the digest:
#   docker buildx imagetools inspect nvidia/cuda:13.0.1-runtime-ubuntu24.04
# and compare the "Digest:" line with the one below (README, "Container").
# BASE may name another Debian-family image; CI builds on a debootstrapped Debian bookworm.
ARG BASE=nvidia/cuda:13.0.1-runtime-ubuntu24.04@sha256:c3fde347d52d578c84fd644bc177bc7ec333feaf11550d990da4084d7612e4c7
# torch's build: cuda installs the locked CUDA build (requirements.lock); cpu installs the
# local torch==2.13.0 CPU wheel TORCH_WHEEL from the build context "torch-wheels"
# (make docker-build TORCH=cpu), and the lock without torch's CUDA packages.
ARG TORCH=cuda

# empty unless the build supplies it: --build-context torch-wheels=DIR
FROM scratch AS torch-wheels

FROM ${BASE}
ARG BASE
ARG TORCH
ARG TORCH_WHEEL=torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl
ARG TORCH_WHEEL_SHA256=
LABEL org.opencontainers.image.base.name="${BASE}" \
      io.github.reprodqn.torch="${TORCH}" \
      io.github.reprodqn.torch-wheel-sha256="${TORCH_WHEEL_SHA256}"

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

ENV PATH=/opt/venv/bin:$PATH \
    PYTHONHASHSEED=0 \
    CUBLAS_WORKSPACE_CONFIG=:4096:8 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MLFLOW_DISABLE_TELEMETRY=true \
    DVC_NO_ANALYTICS=1 \
    REPRODQN_IMAGE_TORCH=${TORCH} \
    UV_PYTHON_DOWNLOADS=never \
    UV_SYSTEM_CERTS=1

# Python from the base's own distribution (Ubuntu 24.04: 3.12; Debian bookworm: 3.11);
# git records the bundle's commit in conditions.json. None of them touches numbers, and
# the base image fixes the snapshot they come from.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates git python3 python3-venv \
    && rm -rf /var/lib/apt/lists/*

# uv from PyPI, pinned by version and hash (Linux x86_64, the lock's platform); it makes
# the environment from the base's Python and installs the lock, never a Python of its own.
RUN python3 -m venv /opt/uv \
    && echo "uv==0.13.9 --hash=sha256:d7f459fe4fd247d830351c75686d3996ace3c6f3f728eb0e85a30b7ada0cef19" \
       > /tmp/uv.txt \
    && /opt/uv/bin/pip install --no-cache-dir --require-hashes -r /tmp/uv.txt \
    && ln -s /opt/uv/bin/uv /usr/local/bin/uv \
    && rm /tmp/uv.txt \
    && uv venv --python "$(command -v python3)" /opt/venv

# exact versions and hashes of every dependency (regenerate: `make lock`); the CPU build
# drops torch and the packages only its CUDA build needs, and adds the local wheel by hash
COPY requirements.lock /tmp/requirements.lock
RUN --mount=type=bind,from=torch-wheels,target=/wheels \
    case "$TORCH" in \
      cuda) cp /tmp/requirements.lock /tmp/install.txt ;; \
      cpu) awk '/^[a-z]/ { cuda = /^(torch|triton|cuda-[a-z-]+|nvidia-[a-z0-9-]+)==/ \
                                  && !/^nvidia-ml-py==/ } !cuda' /tmp/requirements.lock \
             > /tmp/install.txt \
           && echo "torch @ file:///wheels/${TORCH_WHEEL} --hash=sha256:${TORCH_WHEEL_SHA256}" \
             >> /tmp/install.txt ;; \
      *) echo "TORCH must be cuda or cpu, not '$TORCH'" >&2; exit 2 ;; \
    esac \
    && uv pip install --python /opt/venv/bin/python --no-cache --no-deps --require-hashes \
       -r /tmp/install.txt \
    && rm /tmp/requirements.lock /tmp/install.txt

# the package and the checkout files its data links to (src/reprodqn/data: params.yaml,
# presets, the authors' start states, the pipelines a `reprodqn init` workspace gets)
COPY pyproject.toml README.md LICENSE params.yaml dvc.yaml .dvcignore CITATION.cff /tmp/reprodqn/
COPY .dvc/config /tmp/reprodqn/.dvc/config
COPY presets /tmp/reprodqn/presets
COPY start_sequences/authors.json start_sequences/authors-LICENSE.md \
     start_sequences/authors-initstates.txt start_sequences/dvc.yaml /tmp/reprodqn/start_sequences/
COPY src /tmp/reprodqn/src
# then the environment's SBOM, made once here and kept in it: a study's conditions stage
# reads it instead of spending cyclonedx's 20 s and more on every `make docker-run`
RUN uv pip install --python /opt/venv/bin/python --no-cache --no-deps --no-build-isolation \
       /tmp/reprodqn \
    && rm -rf /tmp/reprodqn \
    && python -P -c "from reprodqn.determinism.sbom import bake_sbom; print(bake_sbom())" \
    && groupadd --gid 10001 reprodqn \
    && useradd --uid 10001 --gid 10001 --create-home reprodqn

USER 10001:10001
WORKDIR /workspace
CMD ["dvc", "repro"]
