#!/usr/bin/env bash
# Opt-in end-to-end run of the docker compose deployment on this machine:
# build the images, start SuperLink + ServerApp SuperExec + 2 SuperNodes with their ClientApp
# SuperExecs (host networking, loopback ports), run short jobs through `flwr run`, check that
# they finished, print a summary, tear everything down.
#
#   FL_DOCKER=1 docker/run-compose.sh            # insecure (compose.yml)
#   FL_DOCKER=1 FL_DOCKER_TLS=1 docker/run-compose.sh   # + compose.tls.yml: TLS, SuperNode auth
#   FL_DOCKER=1 FL_DOCKER_PERIMETER=1 docker/run-compose.sh   # + compose.perimeter.yml (and TLS):
#                                the SuperNodes reach the SuperLink through the nginx perimeter
#   FL_DOCKER=1 FL_DOCKER_SITES=penguins docker/run-compose.sh   # + compose.sites.yml: sites 0
#                                and 1 of `python -m tasks.sites <table>` (penguins, cars or
#                                digits), each mounted read-only into its own node's ClientApp
#                                SuperExec only; default jobs FFGB (trees), FedFW, fedxgb-hist
#   FL_DOCKER=1 FL_DOCKER_WARM=1 docker/run-compose.sh   # + compose.warm.yml (last): the
#                                SuperExecs fork each ServerApp / ClientApp from a warm parent
#                                (deploy/warm_superexec.py) and ask for tasks every 0.1 s;
#                                combines with the others
#
# Environment (all optional):
#   FL_BASE=auto|official|local  official flwr/* images (pulled) or a locally built base
#                                (debootstrap + docker import, flwr.Dockerfile); auto: official
#                                if they are present or can be pulled, local otherwise
#   FL_JOBS                      run configs separated by ';' (default: a FedFW and a FedFun job)
#   FL_JOB_TIMEOUT               seconds per job (default 1200)
#   FL_RESULTS_DIR               where the ServerApp writes results (default docker/results)
#   FL_BUILD_CA                  CA bundle for pip in builds (default
#                                /etc/ssl/certs/ca-certificates.crt if present; empty: none)
#   FL_TORCH_WHEELS              a folder with a local torch wheel, served to the build on
#                                127.0.0.1:${FL_WHEELS_PORT:-39499} (default /opt/wheels if it
#                                holds torch-*.whl); otherwise TORCH_INDEX_URL (default:
#                                PyTorch's CPU index), TORCH_SPEC
#   FL_KEEP_UP=1                 leave the deployment (and a dockerd this script started) running
#   FL_REBUILD_BASE=1            remake the local Debian base even if present
# Needs: docker (a daemon, or root + dockerd: then it is started with --bridge=none
# --iptables=false and stopped at the end), docker-compose or `docker compose`, the project's
# venv (.venv, for the `flwr` CLI) or `flwr` on PATH; local base: debootstrap.
set -euo pipefail

if [ "${FL_DOCKER:-0}" != 1 ]; then
  cat <<'EOF'
run-compose.sh: skipped (opt-in). It builds the SuperExec image (~2 GB, minutes), starts the
compose deployment and runs two short jobs. Enable with:
  FL_DOCKER=1 docker/run-compose.sh              (FL_DOCKER_TLS=1 for TLS + SuperNode auth)
See docker/README.md.
EOF
  exit 0
fi

HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
PROJECT=fl-beyond
TS=$(date +%Y%m%d-%H%M%S)
LOGDIR="$(mktemp -d -t fl-docker-run.XXXXXX)"
RESULTS="${FL_RESULTS_DIR:-$HERE/results}"
TLS="${FL_DOCKER_TLS:-0}"
PERIMETER="${FL_DOCKER_PERIMETER:-0}"
WARM="${FL_DOCKER_WARM:-0}"
[ "$PERIMETER" = 1 ] && TLS=1   # the perimeter terminates TLS
PERIMETER_IMAGE="${PERIMETER_IMAGE:-beyond-averaging/perimeter:latest}"
FLWR_VERSION=1.42.0
SUPEREXEC_IMAGE="${SUPEREXEC_IMAGE:-beyond-averaging/superexec:latest}"
SUMMARY="$LOGDIR/summary.txt"
DOCKERD_PID=""
HTTP_PID=""
COPIED_CA=""
STARTED_COMPOSE=0

log() { printf '[run-compose %s] %s\n' "$(date +%H:%M:%S)" "$*"; }
note() { printf '%s\n' "$*" | tee -a "$SUMMARY"; }
die() { log "ERROR: $*" >&2; exit 1; }
now() { date +%s.%N; }
secs() { python3 -c "print(f'{$2 - $1:.1f}')"; }

# --- tools ---------------------------------------------------------------------------------
if [ -x "$ROOT/.venv/bin/flwr" ]; then FLWR="$ROOT/.venv/bin/flwr"; PY="$ROOT/.venv/bin/python"
else FLWR="$(command -v flwr || true)"; PY="$(command -v python3)"; fi
[ -n "$FLWR" ] || die "no flwr CLI: run 'make install' (creates .venv) or pip install flwr==$FLWR_VERSION"
command -v docker >/dev/null || die "docker CLI missing (Debian: apt-get install -y docker.io docker-compose)"
if docker compose version >/dev/null 2>&1; then COMPOSE=(docker compose)
elif command -v docker-compose >/dev/null; then COMPOSE=(docker-compose)
else die "no compose tool (docker compose plugin or docker-compose)"; fi
FILES=(-f "$HERE/compose.yml")
[ "$TLS" = 1 ] && FILES+=(-f "$HERE/compose.tls.yml")
[ "$PERIMETER" = 1 ] && FILES+=(-f "$HERE/compose.perimeter.yml")
SITES_TABLE="${FL_DOCKER_SITES:-}"
[ -n "$SITES_TABLE" ] && FILES+=(-f "$HERE/compose.sites.yml")
[ "$WARM" = 1 ] && FILES+=(-f "$HERE/compose.warm.yml")   # last: it keeps the commands before it
compose() { (cd "$HERE" && "${COMPOSE[@]}" -p "$PROJECT" "${FILES[@]}" "$@"); }

# --- teardown ------------------------------------------------------------------------------
cleanup() {
  local rc=$?
  set +e
  if [ "$STARTED_COMPOSE" = 1 ]; then
    compose logs --no-color >"$LOGDIR/compose.log" 2>&1
    if [ "${FL_KEEP_UP:-0}" = 1 ]; then log "FL_KEEP_UP=1: deployment left running (compose -p $PROJECT)"
    else log "compose down"; compose down --remove-orphans >>"$LOGDIR/compose-down.log" 2>&1; fi
  fi
  [ -n "$HTTP_PID" ] && kill "$HTTP_PID" 2>/dev/null
  [ -n "$COPIED_CA" ] && rm -f "$COPIED_CA"
  if [ -n "$DOCKERD_PID" ] && [ "${FL_KEEP_UP:-0}" != 1 ]; then
    log "stopping the dockerd this script started (pid $DOCKERD_PID)"
    kill "$DOCKERD_PID" 2>/dev/null
    for _ in $(seq 60); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.5; done
  fi
  log "logs: $LOGDIR (summary.txt, build-*.log, job-*.log, compose.log)"
  [ $rc = 0 ] || log "FAILED (exit $rc)"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

: >"$SUMMARY"
note "== docker compose deployment run $TS ($( [ "$TLS" = 1 ] && echo 'TLS + SuperNode auth' || echo insecure)$( [ "$PERIMETER" = 1 ] && echo ', SuperNodes through the nginx perimeter')$( [ "$WARM" = 1 ] && echo ', warm SuperExecs'))"
note "host: $(nproc) cores, $(uname -r); compose: $("${COMPOSE[@]}" version --short 2>/dev/null || "${COMPOSE[@]}" version | head -1)"

# --- docker daemon -------------------------------------------------------------------------
if ! docker info >/dev/null 2>&1; then
  [ "$(id -u)" = 0 ] && command -v dockerd >/dev/null \
    || die "no docker daemon reachable, and cannot start one (needs root and dockerd)"
  log "starting dockerd --bridge=none --iptables=false (log: $LOGDIR/dockerd.log)"
  dockerd --bridge=none --iptables=false >"$LOGDIR/dockerd.log" 2>&1 &
  DOCKERD_PID=$!
  for _ in $(seq 120); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
  docker info >/dev/null 2>&1 || { tail -20 "$LOGDIR/dockerd.log" >&2; die "dockerd did not come up"; }
fi
note "docker daemon: $(docker version --format '{{.Server.Version}}')$( [ -n "$DOCKERD_PID" ] && echo ' (started by this script)')"

# --- ports must be free (host networking) ---------------------------------------------------
busy=""
for p in 39401 39402 39403 39405 39410 39411 39412 39420 39421 39422; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then busy="$busy $p"; fi
done
[ -z "$busy" ] || die "loopback ports in use:$busy (another deployment? '${COMPOSE[*]} -p $PROJECT down')"

# --- images ----------------------------------------------------------------------------------
have_image() { docker image inspect "$1" >/dev/null 2>&1; }
BASE="${FL_BASE:-auto}"
OFFICIAL=(flwr/superlink:$FLWR_VERSION flwr/supernode:$FLWR_VERSION flwr/superexec:$FLWR_VERSION)
if [ "$BASE" = auto ] || [ "$BASE" = official ]; then
  ok=1
  for img in "${OFFICIAL[@]}"; do
    have_image "$img" && continue
    log "docker pull $img"
    timeout 300 docker pull -q "$img" >>"$LOGDIR/pull.log" 2>&1 || { ok=0; break; }
  done
  if [ $ok = 1 ]; then BASE=official
  elif [ "$BASE" = official ]; then tail -3 "$LOGDIR/pull.log" >&2; die "cannot pull the official images"
  else log "no image registry reachable ($(tail -1 "$LOGDIR/pull.log")): building a local base"; BASE=local; fi
fi

# pip inside builds: the host's CA bundle (TLS-intercepting proxies) ...
CA_SRC="${FL_BUILD_CA-/etc/ssl/certs/ca-certificates.crt}"
if [ -n "$CA_SRC" ] && [ -s "$CA_SRC" ]; then
  COPIED_CA="$HERE/build-ca/ca-certificates.crt"; cp "$CA_SRC" "$COPIED_CA"
fi
# ... and a local torch wheel, if there is one, served on a loopback port (builds use the host
# network), otherwise PyTorch's CPU index (TORCH_INDEX_URL / TORCH_SPEC override)
WHEELS="${FL_TORCH_WHEELS:-/opt/wheels}"
TORCH_ARGS=()
wheel=$(ls "$WHEELS"/torch-*.whl 2>/dev/null | head -1 || true)
if [ -z "${TORCH_FIND_LINKS:-}" ] && [ -n "$wheel" ]; then
  # a fixed port keeps the build argument, and so docker's layer cache, the same across runs
  port="${FL_WHEELS_PORT:-39499}"
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  fi
  python3 -m http.server "$port" --bind 127.0.0.1 --directory "$WHEELS" >"$LOGDIR/wheels-http.log" 2>&1 &
  HTTP_PID=$!
  for _ in $(seq 20); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.25; done
  ver=$(basename "$wheel" | cut -d- -f2 | sed 's/%2B/+/')
  TORCH_ARGS=(--build-arg "TORCH_FIND_LINKS=http://127.0.0.1:$port/"
              --build-arg "TORCH_INDEX_URL=${TORCH_INDEX_URL:-https://pypi.org/simple}"
              --build-arg "TORCH_SPEC=${TORCH_SPEC:-torch==$ver}")
  note "torch: local wheel $(basename "$wheel") (served from $WHEELS)"
else
  [ -n "${TORCH_INDEX_URL:-}" ] && TORCH_ARGS+=(--build-arg "TORCH_INDEX_URL=$TORCH_INDEX_URL")
  [ -n "${TORCH_SPEC:-}" ] && TORCH_ARGS+=(--build-arg "TORCH_SPEC=$TORCH_SPEC")
  [ -n "${TORCH_FIND_LINKS:-}" ] && TORCH_ARGS+=(--build-arg "TORCH_FIND_LINKS=$TORCH_FIND_LINKS")
  note "torch: ${TORCH_SPEC:-torch==2.13.0} from ${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}"
fi

build() {  # NAME: docker build args...
  local name=$1; shift
  local t0; t0=$(now)
  log "build $name"
  docker build --network host "$@" >"$LOGDIR/build-$name.log" 2>&1 \
    || { tail -30 "$LOGDIR/build-$name.log" >&2; die "build $name failed"; }
  note "build $name: $(secs "$t0" "$(now)") s"
}

T_BUILD=$(now)
if [ "$BASE" = local ]; then
  LOCAL_PY=local/debian-python:bookworm
  LOCAL_FLWR=local/flwr:$FLWR_VERSION
  if ! have_image "$LOCAL_PY" || [ "${FL_REBUILD_BASE:-0}" = 1 ]; then
    t0=$(now); log "make-base.sh $LOCAL_PY (debootstrap + docker import)"
    "$HERE/make-base.sh" "$LOCAL_PY" >"$LOGDIR/build-base.log" 2>&1 \
      || { tail -20 "$LOGDIR/build-base.log" >&2; die "make-base.sh failed"; }
    note "build base ($LOCAL_PY, debootstrap + import): $(secs "$t0" "$(now)") s"
  else note "base $LOCAL_PY: present (FL_REBUILD_BASE=1 remakes it)"; fi
  build flwr -f "$HERE/flwr.Dockerfile" --build-arg "PYTHON_IMAGE=$LOCAL_PY" \
    --build-arg "FLWR_VERSION=$FLWR_VERSION" -t "$LOCAL_FLWR" "$HERE"
  export SUPERLINK_IMAGE="$LOCAL_FLWR" SUPERNODE_IMAGE="$LOCAL_FLWR" SUPEREXEC_BASE_IMAGE="$LOCAL_FLWR"
else
  export SUPERLINK_IMAGE="flwr/superlink:$FLWR_VERSION" SUPERNODE_IMAGE="flwr/supernode:$FLWR_VERSION"
  export SUPEREXEC_BASE_IMAGE="flwr/superexec:$FLWR_VERSION"
fi
build superexec -f "$HERE/superexec.Dockerfile" --build-arg "BASE_IMAGE=$SUPEREXEC_BASE_IMAGE" \
  "${TORCH_ARGS[@]}" -t "$SUPEREXEC_IMAGE" "$HERE"
export SUPEREXEC_IMAGE
if [ "$PERIMETER" = 1 ]; then   # Debian's nginx on the same base as the rest
  if [ "$BASE" = local ]; then PERIMETER_BASE="local/debian-python:bookworm"
  else PERIMETER_BASE="${PERIMETER_BASE_IMAGE:-debian:bookworm-slim}"; fi
  build perimeter -f "$HERE/perimeter.Dockerfile" --build-arg "BASE_IMAGE=$PERIMETER_BASE" \
    -t "$PERIMETER_IMAGE" "$HERE"
  export PERIMETER_IMAGE
fi
[ -n "$COPIED_CA" ] && rm -f "$COPIED_CA" && COPIED_CA=""
[ -n "$HTTP_PID" ] && kill "$HTTP_PID" 2>/dev/null && HTTP_PID=""
note "build total: $(secs "$T_BUILD" "$(now)") s (docker layer cache: unchanged steps are reused)"
note "images:"
IMAGES_RE="$SUPEREXEC_IMAGE|$SUPERLINK_IMAGE|$SUPERNODE_IMAGE|local/debian-python"
[ "$PERIMETER" = 1 ] && IMAGES_RE="$IMAGES_RE|$PERIMETER_IMAGE"   # the perimeter's image too
docker images --format '  {{.Repository}}:{{.Tag}}  {{.Size}}' \
  | grep -E "$IMAGES_RE" | sort -u | tee -a "$SUMMARY"

# --- the flwr CLI's connection ----------------------------------------------------------------
export FLWR_HOME="$LOGDIR/flwr-home" FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1
mkdir -p "$FLWR_HOME"
if [ "$TLS" = 1 ]; then
  CONN=docker-tls
  [ -s "$HERE/certs/server.pem" ] && [ -s "$HERE/keys/supernode-1.pub" ] || "$HERE/certs.sh"
  printf '[superlink]\ndefault = "%s"\n\n[superlink.%s]\naddress = "127.0.0.1:39401"\nroot-certificates = "%s"\n' \
    "$CONN" "$CONN" "$HERE/certs/ca.crt" >"$FLWR_HOME/config.toml"
else
  CONN=docker
  printf '[superlink]\ndefault = "%s"\n\n[superlink.%s]\naddress = "127.0.0.1:39401"\ninsecure = true\n' \
    "$CONN" "$CONN" >"$FLWR_HOME/config.toml"
fi

# --- start the deployment ---------------------------------------------------------------------
# The ServerApp writes the results folder; nobody else may. As root: the containers run as
# Flower's `app` user (uid 49999), who gets the folder; as another user: the containers run with
# this user's uid and gid (FL_UID / FL_GID in the compose files; certs.sh left the keys theirs,
# 0600) and HOME=/tmp inside (Flower's images make HOME=/app, writable by uid 49999 only).
if [ "$(id -u)" = 0 ]; then install -d -m 0750 -o 49999 -g 49999 "$RESULTS"
else
  install -d -m 0700 "$RESULTS"
  export FL_UID FL_GID FL_CONTAINER_HOME=/tmp
  FL_UID=$(id -u) FL_GID=$(id -g)
fi
export FL_RESULTS_DIR="$RESULTS"
SITE_CONFIG=""
if [ -n "$SITES_TABLE" ]; then   # each node's ClientApps see only their own site, read-only
  (cd "$ROOT" && "$PY" -m tasks.sites "$SITES_TABLE" --out "$LOGDIR/sites") >"$LOGDIR/sites.log" 2>&1 \
    || { cat "$LOGDIR/sites.log" >&2; die "python -m tasks.sites $SITES_TABLE failed"; }
  chmod -R a+rX "$LOGDIR/sites"
  if [ "$SITES_TABLE" = digits ]; then FL_SITE_NAME=images; suffix=""
  else FL_SITE_NAME=data.csv; suffix=.csv; fi
  export FL_SITE_NAME FL_SITE_0="$LOGDIR/sites/0$suffix" FL_SITE_1="$LOGDIR/sites/1$suffix"
  export FL_NODE_CONFIG="dataset-path='/app/site/$FL_SITE_NAME'"
  SITE_CONFIG=$(python3 - "$LOGDIR/sites/sites.json" <<'EOF'
import json, sys
m = json.load(open(sys.argv[1]))
cat = f" data.categorical='{','.join(m['categorical'])}'" if m["categorical"] else ""
print(f"task='site' data.kind='{m['kind']}' data.label='{m['label']}'{cat}")
EOF
)
  note "sites: $SITES_TABLE, site 0 $FL_SITE_0 and site 1 $FL_SITE_1, each mounted read-only at /app/site/$FL_SITE_NAME in its own node's ClientApp SuperExec"
fi
wait_ready() {  # CONNECTION NODES: the SuperLink answers and NODES SuperNodes are online
  FLWR="$FLWR" "$HERE/wait-ready.sh" "$1" "$2" 120 || die "see $LOGDIR/compose.log"
}
T_UP=$(now)
STARTED_COMPOSE=1
if [ "$TLS" = 1 ]; then
  compose up -d --no-build superlink serverapp-superexec >"$LOGDIR/compose-up.log" 2>&1
  wait_ready "$CONN" 0
  for i in 0 1; do   # SuperNode authentication: the SuperLink accepts registered keys only
    out=$("$FLWR" supernode register "$HERE/keys/supernode-$i.pub" "$CONN" --name "supernode-$i" 2>&1) \
      || { printf '%s\n' "$out" >&2; die "flwr supernode register supernode-$i failed"; }
    printf '%s\n' "$out" | tail -1 | tee -a "$SUMMARY"
  done
fi
compose up -d --no-build >>"$LOGDIR/compose-up.log" 2>&1 \
  || { tail -20 "$LOGDIR/compose-up.log" >&2; die "compose up failed"; }
wait_ready "$CONN" 2
note "deployment up, 2 SuperNodes online: $(secs "$T_UP" "$(now)") s"
compose ps >>"$SUMMARY" 2>&1
if [ -n "$SITES_TABLE" ]; then   # what each node's ClientApps can see of the sites' data
  for i in 0 1; do
    seen=$(compose exec -T "clientapp-superexec-$i" python -c "import os; p='/app/site'; print(os.listdir(p), 'writable' if os.access(f'{p}/$FL_SITE_NAME', os.W_OK) else 'read-only')" 2>&1) \
      || die "cannot look into clientapp-superexec-$i: $seen"
    note "clientapp-superexec-$i sees /app/site: $seen"
  done
fi

# --- jobs --------------------------------------------------------------------------------------
DEFAULT_JOBS="algorithm='fedfw' task='synthetic' num-server-rounds=2;algorithm='fedfun' task='wine' partitioning='kmeans' num-server-rounds=2 fedfun.initial-steps=200 fedfun.local-steps=50"
[ -n "$SITES_TABLE" ] && DEFAULT_JOBS="algorithm='ffgb' ffgb.learner='tree' $SITE_CONFIG num-server-rounds=3;algorithm='fedfw' $SITE_CONFIG num-server-rounds=3;algorithm='fedxgb-hist' $SITE_CONFIG num-server-rounds=3"
IFS=';' read -r -a JOBS <<<"${FL_JOBS:-$DEFAULT_JOBS}"
COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
FAILED=0
i=0
for cfg in "${JOBS[@]}"; do
  i=$((i + 1))
  algo=$(grep -o "algorithm='[^']*'" <<<"$cfg" | cut -d"'" -f2 || true)
  task=$(grep -o "task='[^']*'" <<<"$cfg" | cut -d"'" -f2 || true)
  name="docker-${algo:-job}-${task:-x}-$TS"
  [ "$TLS" = 1 ] && name="$name-tls"
  [ "$PERIMETER" = 1 ] && name="$name-perimeter"
  [ "$WARM" = 1 ] && name="$name-warm"
  if [ -x "$ROOT/.venv/bin/python" ]; then   # the config is checked in seconds before any run
    (cd "$ROOT" && "$PY" -m server_app.preflight --nodes 2 "$cfg") >"$LOGDIR/preflight-$i.log" 2>&1 \
      || { cat "$LOGDIR/preflight-$i.log" >&2; die "preflight refused: $cfg"; }
  fi
  log "job $i: flwr run . $CONN --run-config \"$cfg\""
  t0=$(now)
  set +e
  # the whole log to its file; a line a round (and how the run ended) to the terminal
  (cd "$ROOT" && timeout "${FL_JOB_TIMEOUT:-1200}" "$FLWR" run . "$CONN" --stream --run-config \
    "$cfg output-dir='/app/results' run-name='$name' git-commit='$COMMIT'") 2>&1 \
    | tee "$LOGDIR/job-$i.log" | sed -u 's/\x1b\[[0-9;]*m//g' \
    | grep --line-buffered -E '\[results\] round|Run (completed|failed)|Invalid run config' \
    | sed -u 's/^[A-Z]* *: *//; s/^/  /'
  rc=${PIPESTATUS[0]}
  set -e
  dt=$(secs "$t0" "$(now)")
  run_id=$(grep -o 'Successfully started run [0-9]*' "$LOGDIR/job-$i.log" | awk '{print $4}' | head -1)
  status=unknown
  if [ -n "$run_id" ]; then
    status=$("$FLWR" list "$CONN" --run-id "$run_id" --format json 2>/dev/null \
      | python3 -c 'import json,sys; print(json.load(sys.stdin)["runs"][0]["status"])' 2>/dev/null || echo unknown)
  fi
  note ""
  note "job $i: $cfg"
  note "  flwr run: exit $rc, $dt s wall; run ${run_id:-?}: $status"
  sed 's/\x1b\[[0-9;]*m//g' "$LOGDIR/job-$i.log" | grep -E '\[results\] round|Final:' | sed 's/^INFO *: *//' \
    | sed 's/^/  /' | tee -a "$SUMMARY"
  metrics="$RESULTS/$name/metrics.json"
  if [ -s "$metrics" ]; then
    python3 - "$metrics" <<'EOF' | tee -a "$SUMMARY"
import json, sys
d = json.load(open(sys.argv[1]))
s = d["summary"]
keys = [k for k in s if k.startswith(("final_", "best_"))] + ["failures_total", "wall_time_s"]
print(f"  results: {sys.argv[1].rsplit('/', 2)[0]}/{sys.argv[1].rsplit('/', 2)[1]}: "
      f"{len(d['rounds'])} rows (round 0..{s.get('rounds')}); "
      + ", ".join(f"{k}={s[k]:.4g}" if isinstance(s[k], float) else f"{k}={s[k]}" for k in keys if k in s))
# a round's latency as benchmarks.latency takes it: consecutive wall_time_s, rounds 2..R
walls = {r["round"]: r["wall_time_s"] for r in d["rounds"] if r.get("round", 0) >= 1}
gaps = [walls[t] - walls[t - 1] for t in sorted(walls) if t >= 2 and t - 1 in walls]
if gaps:
    print(f"  s/round (rounds 2..{max(walls)}): {sum(gaps) / len(gaps):.2f} "
          f"({', '.join(f'{g:.2f}' for g in gaps)})")
config = json.load(open(sys.argv[1].replace("metrics.json", "config.json")))
print(f"  {config.get('outcome', {}).get('line', 'no health line: the run ended abruptly')}")
sites = config.get("sites")
if sites:
    last = d["rounds"][-1]
    own = {k: round(v, 4) for k, v in last.items() if k.startswith("site") and "_test_" in k}
    print(f"  sites: partitions {sites['partitions']}, left out {sites['left-out']}; last round {own}")
EOF
  else note "  no results folder: the run stopped before it wrote one"; fi
  took_part=ok
  if [ -n "$SITES_TABLE" ] && [ -s "$metrics" ]; then   # both sites trained, none left out
    python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))["sites"]; sys.exit(s["partitions"] != [0, 1])' \
      "${metrics%metrics.json}config.json" || took_part=no
  fi
  if [ $rc != 0 ] || [ "$status" != finished:completed ] || [ ! -s "$metrics" ] || [ $took_part != ok ]; then
    FAILED=$((FAILED + 1)); tail -20 "$LOGDIR/job-$i.log" >&2
  fi
done

note ""
note "== $((${#JOBS[@]} - FAILED))/${#JOBS[@]} jobs finished:completed; logs in $LOGDIR"
cp "$SUMMARY" "$RESULTS/summary-$TS$( [ "$TLS" = 1 ] && echo -tls).txt" 2>/dev/null || true
[ $FAILED = 0 ]
