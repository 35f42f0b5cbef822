#!/bin/bash
# Issue 37's GPU checks in one call of the device tool (benchmarks/README.md, case `devices`):
#   run(command="bash benchmarks/device_check.sh", carry=[".whl"], timeout_s=540)
# Issue 37's MLP target rows by default; all is written under $OUT through tee alone, so a
# call that hits its limit still returns what it had. Needs the GPU machine's wheels in .whl/
# (git-ignored: `bash benchmarks/device_wheels.sh` downloads them; the device machine has torch but
# no flwr: installed when flwr does not import).
# ROWS, MODES and BENCH_TIMEOUT (s) override the defaults (benchmarks.devices --only / --modes,
# its time limit); on a machine without a GPU, MODES=cpu runs the CPU half.
set -u
OUT=${OUT:-/tmp/device-check}
mkdir -p "$OUT"
ROWS=${ROWS:-"default job|MLP learners, mnist|FFGB.L"}
MODES=${MODES:-cpu,cuda-graphs,cuda-graphs-together,cpu-together}
if ! python3 -c "import flwr" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 3
  export PYTHONPATH=/tmp/site:$PWD
fi
export PYTHONUNBUFFERED=1
{ nvidia-smi -L 2>&1; git log -1 --format=%h 2>&1; python3 -c "import torch; print(torch.__version__)"; } \
  | tee "$OUT/machine.txt"
# the replayed WO-lip (FFGB.L) and the stacked MLP fits have their first GPU tests here
# (benchmarks/README.md, case `devices`)
timeout 90 python3 -m pytest -q -p no:cacheprovider tests/ffgb/test_graphed_steps.py tests/run_config/test_devices.py \
  tests/ffgb/test_ensemble_batched.py tests/ffgb/test_lockstep.py -k "cuda or gpu" 2>&1 | tee "$OUT/tests.log" | tail -3
timeout "${BENCH_TIMEOUT:-400}" python3 -m benchmarks.devices --repeats 2 --modes "$MODES" --only "$ROWS" \
  --out "$OUT/devices.md" 2>&1 | tee "$OUT/bench.log" | tail -20
