# SuperExec image with the app's dependencies baked in: one image for both roles,
# the ServerApp SuperExec (next to the SuperLink) and the ClientApp SuperExecs (next to each
# SuperNode). The app code itself is not installed: it arrives as a FAB with every
# `flwr run`, and the SuperExec runs it with this image's Python
# (runtime dependency installation stays disabled, so no `uv sync` at run time).
# Build context: docker/.
#
#   Official base (a registry is reachable):
#     docker build -f docker/superexec.Dockerfile -t beyond-averaging/superexec:latest docker
#   Locally built base (no registry; see make-base.sh, flwr.Dockerfile):
#     docker build --network host -f docker/superexec.Dockerfile \
#       --build-arg BASE_IMAGE=local/flwr:1.42.0 \
#       --build-arg TORCH_INDEX_URL=https://pypi.org/simple \
#       --build-arg TORCH_FIND_LINKS=http://127.0.0.1:39499/ \
#       --build-arg TORCH_SPEC=torch==2.13.0+cpu -t beyond-averaging/superexec:latest docker
#   GPU nodes: a CUDA-enabled base and the CUDA wheel, e.g.
#       --build-arg BASE_IMAGE=<flwr on nvidia/cuda base> \
#       --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128
ARG BASE_IMAGE=flwr/superexec:1.42.0
FROM ${BASE_IMAGE}

# torch first, from the CPU index unless overridden (a plain `pip install torch` from PyPI
# pulls GBs of CUDA packages). TORCH_FIND_LINKS: an extra wheel location (a local mirror).
ARG TORCH_SPEC=torch==2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG TORCH_FIND_LINKS=
COPY build-ca/ /tmp/build-ca/
COPY requirements.txt /tmp/requirements.txt
RUN set -eu; \
    if [ -s /tmp/build-ca/ca-certificates.crt ]; then export PIP_CERT=/tmp/build-ca/ca-certificates.crt; fi; \
    python -m pip install --no-cache-dir --disable-pip-version-check \
      --index-url "${TORCH_INDEX_URL}" ${TORCH_FIND_LINKS:+--find-links "${TORCH_FIND_LINKS}"} \
      "${TORCH_SPEC}"; \
    python -m pip install --no-cache-dir --disable-pip-version-check -r /tmp/requirements.txt; \
    python -c "import flwr, torch, sklearn, scipy, ot, mlxtend, matplotlib, xgboost; \
print('flwr', flwr.__version__, 'torch', torch.__version__, 'cuda', torch.version.cuda)"

ENV FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1 \
    MPLBACKEND=Agg
ENTRYPOINT ["flower-superexec"]
