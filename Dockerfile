# reprodqn's pinned environment: `make docker-build`, then `make docker-run` (dvc repro).
#
# Base: nvidia/cuda:13.0.1-runtime-ubuntu24.04, pinned by digest. torch 2.13's Linux wheels
# bring their own CUDA 13 libraries (requirements.lock: nvidia-*-cu13), so the image needs
# only a CUDA 13 runtime and a driver that supports it. To re-verify or bump the digest:
#   docker buildx imagetools inspect nvidia/cuda:13.0.1-runtime-ubuntu24.04
# and compare the "Digest:" line with the one below (README, "Container").
FROM nvidia/cuda:13.0.1-runtime-ubuntu24.04@sha256:c3fde347d52d578c84fd644bc177bc7ec333feaf11550d990da4084d7612e4c7

SHELL ["/bin/bash", "-o", "pipefail", "-c"]

# uv installs a pinned CPython 3.11 (the version the tests run on; Ubuntu 24.04 has 3.12)
COPY --from=ghcr.io/astral-sh/uv:0.13.9 /uv /usr/local/bin/uv

ENV UV_PYTHON_INSTALL_DIR=/opt/python \
    PATH=/opt/venv/bin:$PATH \
    PYTHONHASHSEED=0 \
    CUBLAS_WORKSPACE_CONFIG=:4096:8 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MLFLOW_DISABLE_TELEMETRY=true \
    DVC_NO_ANALYTICS=1

# git records the bundle's commit in conditions.json; neither package touches numbers, and
# the base image digest already fixes the Ubuntu snapshot they come from.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates git \
    && rm -rf /var/lib/apt/lists/* \
    && uv python install 3.11.18 \
    && "$(uv python find 3.11.18)" -m venv /opt/venv

# exact versions and hashes of every dependency (regenerate: `make lock`)
COPY requirements.lock /tmp/requirements.lock
RUN pip install --no-cache-dir --no-deps --require-hashes -r /tmp/requirements.lock \
    && rm /tmp/requirements.lock

COPY pyproject.toml README.md /tmp/reprodqn/
COPY src /tmp/reprodqn/src
RUN pip install --no-cache-dir --no-deps --no-build-isolation /tmp/reprodqn \
    && rm -rf /tmp/reprodqn \
    && groupadd --gid 10001 reprodqn \
    && useradd --uid 10001 --gid 10001 --create-home reprodqn

USER 10001:10001
WORKDIR /workspace
CMD ["dvc", "repro"]
