#!/usr/bin/env bash
# Wait until the SuperLink behind a flwr CLI connection answers and, with NODES > 0, until that
# many SuperNodes are online; exit 1 after TIMEOUT seconds. The flwr CLI: $FLWR, else `flwr` on
# PATH (the project's .venv/bin after `make install`); its connections: $FLWR_HOME/config.toml.
#   docker/wait-ready.sh CONNECTION [NODES] [TIMEOUT]      e.g. docker/wait-ready.sh docker 2
# (`flwr ... --format json` exits 0 even when it cannot connect: its "success" field is read.)
set -uo pipefail
conn=${1:?usage: wait-ready.sh CONNECTION [NODES] [TIMEOUT]}
nodes=${2:-0}
timeout=${3:-120}
flwr=${FLWR:-flwr}
command -v "$flwr" >/dev/null || { echo "wait-ready.sh: no flwr CLI (make install; PATH=\$PWD/.venv/bin:\$PATH)" >&2; exit 2; }
for _ in $(seq "$timeout"); do
  online=$("$flwr" supernode list "$conn" --format json 2>/dev/null | python3 -c '
import json, sys
reply = json.load(sys.stdin)
print(sum(n.get("status") == "online" for n in reply.get("nodes", [])) if reply.get("success") else -1)
' 2>/dev/null || echo -1)
  [ "$online" -ge 0 ] && [ "$online" -ge "$nodes" ] && exit 0
  sleep 1
done
echo "wait-ready.sh: after ${timeout} s the SuperLink of '$conn' $( [ "${online:--1}" -lt 0 ] && echo 'does not answer' || echo "has $online of $nodes SuperNodes online")" >&2
exit 1
