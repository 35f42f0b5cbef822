# Flower runtime image (flwr only, no app dependencies) built from a plain Python base,
# laid out like Flower's official images (venv in /python/venv, non-root user `app`
# uid 49999, HOME=/app). Use it where the official flwr/superlink, flwr/supernode and
# flwr/superexec images cannot be pulled: as the SuperLink and SuperNode image and as the
# BASE_IMAGE of superexec.Dockerfile. Needs python3 with the venv module (Debian:
# python3-venv). Build context: docker/.
#
#   docker build --network host -f docker/flwr.Dockerfile \
#     --build-arg PYTHON_IMAGE=local/debian-python:bookworm -t local/flwr:1.42.0 docker
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
FROM ${PYTHON_IMAGE}

ARG FLWR_VERSION=1.42.0
# Optional: a CA bundle for pip behind a TLS-intercepting proxy (run-compose.sh copies the
# host's bundle to docker/build-ca/ca-certificates.crt; empty folder otherwise).
COPY build-ca/ /tmp/build-ca/
RUN set -eu; \
    if [ -s /tmp/build-ca/ca-certificates.crt ]; then export PIP_CERT=/tmp/build-ca/ca-certificates.crt; fi; \
    PY=$(command -v python3 || command -v python); \
    "$PY" -m venv /python/venv; \
    /python/venv/bin/python -m pip install --no-cache-dir --disable-pip-version-check \
      "flwr==${FLWR_VERSION}"; \
    useradd --no-create-home --home-dir /app -c "" --uid 49999 app; \
    mkdir -p /app; chown -R app:app /app /python/venv; \
    rm -rf /tmp/build-ca

ENV PATH=/python/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONIOENCODING=UTF-8 \
    LANG=C.UTF-8 \
    LC_ALL=C.UTF-8 \
    HOME=/app \
    FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1
WORKDIR /app
USER app
