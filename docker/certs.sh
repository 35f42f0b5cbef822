#!/usr/bin/env bash
# TLS certificates and SuperNode authentication keys for compose.tls.yml.
#
#   docker/certs.sh [HOST ...]
#
# Writes (next to this script unless CERTS_DIR / KEYS_DIR say otherwise):
#   certs/ca.crt, certs/ca.key           a self-signed CA (keep ca.key off the nodes)
#   certs/server.pem, certs/server.key   the SuperLink's server certificate, signed by the CA,
#                                        SANs: localhost, 127.0.0.1, ::1 and every HOST given
#                                        (a DNS name or an IP address: the name the SuperNodes
#                                        and `flwr` dial on other machines)
#   certs/node.pem, certs/node.key       a loopback-only certificate (localhost, 127.0.0.1, ::1)
#                                        for each SuperNode's Runtime API, which its ClientApp
#                                        SuperExec dials; SuperNodes never get the SuperLink's key
#   keys/supernode-<i>, .pub             ECDSA P-384 key pairs (ssh-keygen -t ecdsa -b 384),
#                                        i = 0 .. NUM_SUPERNODES-1 (default 2), for
#                                        SuperNode authentication (register the .pub files
#                                        with `flwr supernode register`)
# Existing files are kept (FORCE=1 remakes them).
# Private keys (ca.key, server.key, node.key, supernode-<i>) are created mode 0600 (made under
# umask 077, never chmod-ed afterwards) and are never readable by other users:
#   as root, the keys the containers read (server.key, node.key, supernode-<i>) are then given
#   to uid 49999, the `app` user of Flower's images (CERT_UID overrides), still 0600;
#   as another user, they stay that user's, 0600, and run-compose.sh runs the containers with
#   that user's uid and gid (FL_UID / FL_GID in the compose files), so they can read them.
# RSA_BITS (default 4096): size of the CA's and the servers' RSA keys.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
CERTS_DIR="${CERTS_DIR:-$HERE/certs}"
KEYS_DIR="${KEYS_DIR:-$HERE/keys}"
NUM_SUPERNODES="${NUM_SUPERNODES:-2}"
DAYS="${DAYS:-365}"
CERT_UID="${CERT_UID:-49999}"
RSA_BITS="${RSA_BITS:-4096}"
mkdir -p "$CERTS_DIR" "$KEYS_DIR"

private_key() {  # PATH: a new RSA key, created mode 0600 (umask 077 in a subshell)
  (umask 077 && rm -f "$1" && openssl genrsa -out "$1" "$RSA_BITS" 2>/dev/null)
}

give_to_containers() {  # private keys the containers must read: as root, to the containers' user
  if [ "$(id -u)" = 0 ]; then chown "$CERT_UID:$CERT_UID" "$@"; fi
}

server_cert() {  # NAME CN SANS: certs/NAME.pem + NAME.key signed by the CA
  local name=$1 cn=$2 san=$3 ext
  private_key "$CERTS_DIR/$name.key"
  openssl req -new -key "$CERTS_DIR/$name.key" -subj "/O=Flower Beyond Averaging/CN=$cn" \
    -out "$CERTS_DIR/$name.csr"
  ext=$(mktemp)
  printf 'basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=%s\n' \
    "$san" >"$ext"
  openssl x509 -req -in "$CERTS_DIR/$name.csr" -CA "$CERTS_DIR/ca.crt" -CAkey "$CERTS_DIR/ca.key" \
    -CAcreateserial -out "$CERTS_DIR/$name.pem" -days "$DAYS" -sha256 -extfile "$ext" 2>/dev/null
  rm -f "$ext" "$CERTS_DIR/$name.csr"
  give_to_containers "$CERTS_DIR/$name.key"
}

sans="DNS:localhost,IP:127.0.0.1,IP:::1"
for host in "$@"; do
  if [[ "$host" =~ ^[0-9.]+$ || "$host" == *:* ]]; then sans="$sans,IP:$host"; else sans="$sans,DNS:$host"; fi
done

if [ "${FORCE:-0}" = 1 ] || [ ! -s "$CERTS_DIR/server.pem" ]; then
  private_key "$CERTS_DIR/ca.key"
  openssl req -x509 -new -key "$CERTS_DIR/ca.key" -sha256 -days "$DAYS" \
    -subj "/O=Flower Beyond Averaging/CN=flower-ca" -out "$CERTS_DIR/ca.crt"
  server_cert server superlink "$sans"
  server_cert node supernode-runtime "DNS:localhost,IP:127.0.0.1,IP:::1"
  rm -f "$CERTS_DIR/ca.srl"
  echo "[certs] CA and server certificate in $CERTS_DIR (SANs: $sans)"
else
  echo "[certs] $CERTS_DIR/server.pem exists (FORCE=1 remakes it)"
fi

for ((i = 0; i < NUM_SUPERNODES; i++)); do
  key="$KEYS_DIR/supernode-$i"
  if [ "${FORCE:-0}" = 1 ] || [ ! -s "$key" ]; then
    rm -f "$key" "$key.pub"
    (umask 077 && ssh-keygen -q -t ecdsa -b 384 -N "" -C "supernode-$i" -f "$key")
    chmod 0644 "$key.pub"   # the public half: made 0600 under the umask, it may be read by all
    give_to_containers "$key"
    echo "[certs] SuperNode key pair $key(.pub)"
  fi
done
