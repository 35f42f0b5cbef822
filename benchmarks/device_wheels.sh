#!/bin/bash
# The wheels a lent GPU machine needs beside its own torch (benchmarks/README.md, section 9):
# flwr 1.41.0 and what it and the apps import, for the device's Python 3.12 on x86_64, into
# .whl/ (git-ignored: run this in each fresh checkout before the device call
#   run(command="bash benchmarks/device_check.sh", carry=[".whl"], timeout_s=540)
# which installs them there when flwr does not import).
set -euo pipefail
cd "$(dirname "$0")/.."
PIP=${PIP:-.venv/bin/pip}
"$PIP" download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform any -d .whl \
  flwr==1.41.0 cryptography cffi pycparser iterators pycryptodome tomli tomli-w alembic \
  SQLAlchemy greenlet Mako fastapi starlette pydantic pydantic_core typing-inspection \
  annotated-types prompt_toolkit wcwidth uvicorn mlxtend flwr-datasets datasets dill \
  multiprocess grpcio-health-checking
du -sh .whl
