"""TLS certificates and SuperNode keys for a deployment, made with the ``cryptography`` package
(Flower's own dependency: no openssl or ssh-keygen needed): a CA and a server certificate whose
SANs are the SuperLink's addresses, and ECDSA P-384 SuperNode keys that ``flwr supernode
register`` reads; private keys readable by their owner only.
"""

from __future__ import annotations

import ipaddress
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _write_key(
    path: Path,
    key: ec.EllipticCurvePrivateKey,
    form: serialization.PrivateFormat = serialization.PrivateFormat.TraditionalOpenSSL,
) -> None:
    """A private key file, created with mode 0600 (less the umask) and never wider: opened
    with ``O_CREAT | O_EXCL`` (an existing file is an error, not overwritten; a link planted
    at ``path`` is not followed), so no other user can read it at any moment."""
    data = key.private_bytes(serialization.Encoding.PEM, form, serialization.NoEncryption())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
    except BaseException:
        path.unlink(missing_ok=True)
        raise


CERTIFICATE_FILES = ("ca.crt", "ca.key", "server.pem", "server.key")


def make_certificates(directory: Path, hosts: list[str]) -> None:
    """``ca.crt`` and a server certificate ``server.pem``/``server.key`` signed by it, valid for
    127.0.0.1, localhost and ``hosts`` (names or IP addresses), one year. The keys are created
    mode 0600; ``FileExistsError`` (before anything is written) if any of the files exists."""
    directory.mkdir(parents=True, exist_ok=True)
    existing = [name for name in CERTIFICATE_FILES if (directory / name).exists()]
    if existing:
        raise FileExistsError(f"{directory}: {', '.join(existing)} exist already (not replaced)")
    now = datetime.now(UTC)
    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Flower deployment CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    names: list[x509.GeneralName] = [
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
        x509.DNSName("localhost"),
    ]
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    key = ec.generate_private_key(ec.SECP384R1())
    server = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "superlink")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + timedelta(days=365))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    _write_key(directory / "ca.key", ca_key)
    _write_key(directory / "server.key", key)
    (directory / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    (directory / "server.pem").write_bytes(server.public_bytes(serialization.Encoding.PEM))


def make_node_key(directory: Path, name: str) -> Path:
    """An ECDSA P-384 key pair for one SuperNode in OpenSSH format, ``name`` and ``name.pub``,
    as ``ssh-keygen -t ecdsa -b 384`` makes them (what ``flower-supernode`` reads); the private
    key created mode 0600, ``FileExistsError`` if it exists."""
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP384R1())
    path = directory / name
    _write_key(path, key, serialization.PrivateFormat.OpenSSH)
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    Path(f"{path}.pub").write_bytes(public + b"\n")
    return path
