#!/bin/bash
# The wheels a lent GPU machine needs beside its own torch (benchmarks/README.md, case `devices`):
# flwr and what it and the apps import, at the versions of .venv, for the device's Python 3.12
# on x86_64, into .whl/ (git-ignored: run this in each fresh checkout before the device call
#   run(command="bash benchmarks/device_check.sh", carry=[".whl"], timeout_s=540)
# which installs them there when flwr does not import).
set -euo pipefail
cd "$(dirname "$0")/.."
PIP=${PIP:-.venv/bin/pip}
NAMES="flwr cryptography cffi pycparser iterators pycryptodome tomli tomli-w alembic SQLAlchemy
  greenlet Mako fastapi starlette pydantic pydantic_core typing-inspection annotated-types
  prompt_toolkit wcwidth uvicorn mlxtend flwr-datasets datasets dill multiprocess
  grpcio-health-checking"
# the versions this checkout's .venv runs (the newest ones can import more: fastapi 0.165 needs
# opentelemetry, which the device lacks); a name the venv lacks is taken unpinned
FROZEN=$("$PIP" list --format=freeze 2>/dev/null | tr '[:upper:]_' '[:lower:]-')
SPECS=()
for name in $NAMES; do
  key=$(echo "$name" | tr '[:upper:]_' '[:lower:]-')
  SPECS+=("$(echo "$FROZEN" | grep -m1 "^$key==" || echo "$name")")
done
rm -rf .whl
"$PIP" download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform any -d .whl "${SPECS[@]}"
du -sh .whl
