"""The cryptographic primitives of secure aggregation, all from kept libraries: X25519 key
agreement and HKDF (``cryptography``), authenticated encryption of shares (Fernet, through
Flower's ``flwr.common.secure_aggregation.crypto.symmetric_encryption``) and of relayed learners
(AES-256-GCM, ``cryptography``: binary, so a box is its plaintext plus 28 bytes where a Fernet
token is base64, 4/3 of it), Shamir secret sharing
(pycryptodome's, which Flower's ``crypto.shamir`` wraps), SHA-256 commitments, and the masks'
generator: the AES-256-CTR keystream of a 32-byte seed (``cryptography``).

Shares are pycryptodome's over GF(2^128), one per 16-byte chunk of the secret, called
directly: Flower's wrapper pads every secret with one more chunk and starts a thread pool on
every call, which cost more than the sharing itself here. A share is its 1-byte index and one
16-byte share per chunk. Self-mask seeds are 16 bytes (AES-128, one chunk: rebuilding them is
the server's work on every sum), masking keys 32 (X25519).

Flower's own mask generator (``secaggplus_utils.pseudo_rand_gen``) folds the seed into 32 bits
for numpy's ``RandomState``, so a server could try every mask; the keystream here is as strong
as its 256-bit key. Every function that takes bytes received from elsewhere raises
``DecodeError`` on anything malformed.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Sequence

import numpy as np
from Crypto.Protocol.SecretSharing import Shamir
from cryptography.exceptions import InvalidKey, InvalidTag
from cryptography.fernet import InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from flwr.common.secure_aggregation.crypto.symmetric_encryption import decrypt, encrypt

from functions.errors import DecodeError

KEY_BYTES = 32  # an X25519 key, a derived key
SEED_BYTES = 16  # a self-mask seed: an AES-128 key
NONCE_BYTES = 12  # an AES-GCM box's nonce, drawn at random (its tag is 16 bytes)
MAX_WRAP_BYTES = 256  # a key sealed to another (a Fernet token of 32 bytes is 140 bytes)
CHUNK = 16  # pycryptodome's Shamir shares 16-byte secrets
DIGEST_BYTES = 32  # SHA-256
MASK_PURPOSE = b"flower-beyond-averaging secure-sum mask"
SHARE_PURPOSE = b"flower-beyond-averaging secure-sum shares"


def new_key_pair() -> tuple[bytes, bytes]:
    """A fresh X25519 key pair as raw bytes: (private, public)."""
    private = X25519PrivateKey.generate()
    return private.private_bytes_raw(), private.public_key().public_bytes_raw()


def public_of(private: bytes) -> bytes:
    """The public key of a raw X25519 private key (``DecodeError`` if it is not one)."""
    return _private(private).public_key().public_bytes_raw()


def _private(raw: bytes) -> X25519PrivateKey:
    if not isinstance(raw, bytes) or len(raw) != KEY_BYTES:
        raise DecodeError(f"a private key must be {KEY_BYTES} bytes")
    return X25519PrivateKey.from_private_bytes(raw)


def agreements(private: bytes, publics: Sequence[bytes], purpose: bytes) -> list[bytes]:
    """The 32-byte key that the owner of ``private`` shares with the owner of each of
    ``publics``, for ``purpose`` (X25519, then HKDF-SHA256 with ``purpose`` as its info); the
    private key is loaded once, which costs as much as an exchange."""
    if any(not isinstance(p, bytes) or len(p) != KEY_BYTES for p in publics):
        raise DecodeError(f"a public key must be {KEY_BYTES} bytes")
    key = _private(private)
    derived = []
    for public in publics:
        try:
            secret = key.exchange(X25519PublicKey.from_public_bytes(public))
        except (ValueError, InvalidKey) as err:  # e.g. a low-order point: an all-zero secret
            raise DecodeError(f"unusable public key: {err}") from None
        hkdf = HKDF(algorithm=hashes.SHA256(), length=KEY_BYTES, salt=None, info=purpose)
        derived.append(hkdf.derive(secret))
    return derived


def mask(seed: bytes, length: int) -> np.ndarray:
    """``length`` uint64 words of the AES-CTR keystream keyed by ``seed`` (16 or 32 bytes:
    AES-128 or AES-256): a mask that only the holders of ``seed`` can reproduce (read-only:
    callers add it to or subtract it from their own vector)."""
    if len(seed) not in (SEED_BYTES, KEY_BYTES):
        raise DecodeError(f"a mask seed must be {SEED_BYTES} or {KEY_BYTES} bytes")
    encryptor = Cipher(algorithms.AES(seed), modes.CTR(bytes(16))).encryptor()
    return np.frombuffer(encryptor.update(bytes(8 * length)), dtype=np.uint64)


def seal(key: bytes, plaintext: bytes) -> bytes:
    """``plaintext`` encrypted and authenticated under the 32-byte ``key`` (Fernet)."""
    return encrypt(base64.urlsafe_b64encode(key), plaintext)


def unseal(key: bytes, token: bytes) -> bytes:
    """What ``seal`` sealed; ``DecodeError`` when ``token`` was not sealed under ``key`` or was
    altered."""
    try:
        return decrypt(base64.urlsafe_b64encode(key), token)
    except (InvalidToken, TypeError, ValueError):
        raise DecodeError("a sealed share that does not open with the pair's key") from None


def box(key: bytes, plaintext: bytes, context: bytes) -> bytes:
    """``plaintext`` encrypted and authenticated under the 32-byte ``key`` and bound to
    ``context`` (AES-256-GCM: a random nonce, the ciphertext, the tag)."""
    nonce = os.urandom(NONCE_BYTES)
    return nonce + AESGCM(key).encrypt(nonce, plaintext, context)


def unbox(key: bytes, sealed: bytes, context: bytes) -> bytes:
    """What ``box`` boxed under ``key`` with ``context``; ``DecodeError`` when it was not, or
    was altered."""
    if not isinstance(sealed, bytes) or len(sealed) < NONCE_BYTES + 16:
        raise DecodeError("a box too short to hold a nonce and a tag")
    try:
        return AESGCM(key).decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], context)
    except (InvalidTag, TypeError, ValueError):
        raise DecodeError("a box that does not open with the key") from None


def share_bytes(secret_bytes: int) -> int:
    """The length of a share of a secret of ``secret_bytes`` (a multiple of 16)."""
    return 1 + secret_bytes


def split_secret(secret: bytes, threshold: int, count: int) -> list[bytes]:
    """``count`` Shamir shares of ``secret`` (16 or 32 bytes), any ``threshold`` of which
    rebuild it; share i (from 1) starts with the byte i."""
    if len(secret) not in (SEED_BYTES, KEY_BYTES) or not 2 <= threshold <= count <= 255:
        raise ValueError("a 16- or 32-byte secret, and 2 <= threshold <= count <= 255")
    chunks = [
        Shamir.split(threshold, count, secret[i : i + CHUNK], ssss=False)
        for i in range(0, len(secret), CHUNK)
    ]
    return [bytes([parts[0][0]]) + b"".join(p[1] for p in parts) for parts in zip(*chunks)]


def join_shares(shares: list[bytes], threshold: int, secret_bytes: int) -> bytes:
    """The ``secret_bytes``-long secret that ``threshold`` of ``shares`` (distinct indices,
    well formed, at least ``threshold`` of them) rebuild; ``DecodeError`` otherwise. Shares that
    are not all of one secret rebuild another value: callers check it against a commitment.

    Any ``threshold`` of them rebuild the same secret; the work differs. pycryptodome's
    ``combine`` weighs each share by the inverse of its index's differences (XOR in GF(2^128))
    from the others' indices, a bit-by-bit product and inversion in Python unless that inverse
    is 1: indices 2m and 2m + 1 differ by 1, so with a threshold of 2 such a pair is used when
    there is one."""
    size = share_bytes(secret_bytes)
    if len(shares) < threshold or any(not isinstance(s, bytes) or len(s) != size for s in shares):
        raise DecodeError(f"at least {threshold} shares, each of {size} bytes")
    if len({s[0] for s in shares}) != len(shares) or any(s[0] == 0 for s in shares):
        raise DecodeError("two shares with the same index, or an index 0")
    chosen = shares[:threshold]
    if threshold == 2:
        by_index = {s[0]: s for s in shares}
        pair = next((i for i in sorted(by_index) if i % 2 == 0 and i + 1 in by_index), None)
        if pair is not None:
            chosen = [by_index[pair], by_index[pair + 1]]
    try:
        return b"".join(
            Shamir.combine([(s[0], s[1 + i : 1 + i + CHUNK]) for s in chosen], ssss=False)
            for i in range(0, secret_bytes, CHUNK)
        )
    except ValueError as err:
        raise DecodeError(f"shares that rebuild no secret: {err}") from None


def digest(data: bytes) -> bytes:
    """SHA-256 of ``data``: a commitment to a random secret or share that reveals nothing of it."""
    h = hashes.Hash(hashes.SHA256())
    h.update(data)
    return h.finalize()
