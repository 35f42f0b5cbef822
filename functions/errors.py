"""The one error type raised by every decoder of data that crossed the network, the array
check decoders share, and the one-line form of a failure reason."""

import re

import numpy as np


class DecodeError(ValueError):
    """A received record is malformed, inconsistent, non-finite or too large."""


class NonFiniteError(DecodeError):
    """A received number or array holds a NaN or an infinity: what a node whose training
    diverged sends (the strategy counts these apart, ``strategies.screening``)."""


def check_float32(array: object, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """``array`` if it is a finite float32 array of ``shape``; ``DecodeError`` otherwise."""
    if not isinstance(array, np.ndarray) or array.dtype != np.float32:
        raise DecodeError(
            f"{name}: expected float32, got {getattr(array, 'dtype', type(array).__name__)}"
        )
    if array.shape != shape:
        raise DecodeError(f"{name}: expected shape {shape}, got {array.shape}")
    if not np.all(np.isfinite(array)):
        raise NonFiniteError(f"{name}: contains NaN or inf")
    return array


MAX_REASON = 400  # characters of a node's failure reason that are kept
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")  # terminal colour and cursor sequences
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_FLOWER_REASON = re.compile(r"<class '[\w.]+'>:<'(.*)'>", re.S)  # Flower's runtime's format
_RAISED = re.compile(r"^(?:[\w.]+: )?\s*Exception ClientAppException occurred\. Message: ")


def one_sentence(text: object, limit: int = MAX_REASON) -> str:
    """A failure reason as one printable line: what a node sends as its error reply's reason and
    what the server records of any reason it receives (a node of ours sends one already; an
    engine's or a hostile node's may hold a traceback, colour codes or forged log lines). From a
    traceback only its last line (the exception and its message) is kept; Flower's
    ``<class ...>:<'...'>`` wrapping and its ClientAppException prefix are removed; at most
    ``limit`` characters."""
    body = _ANSI.sub("", str(text)).strip()
    wrapped = _FLOWER_REASON.fullmatch(body)
    if wrapped:
        body = wrapped.group(1)
    lines = [line.strip() for line in body.splitlines() if line.strip()]
    if any(line.startswith(("Traceback (most recent call last)", 'File "')) for line in lines):
        lines = lines[-1:]
    line = _RAISED.sub("", " ".join(lines))
    line = _CONTROL.sub(" ", line).strip() or "no reason given"
    return line if len(line) <= limit else line[: limit - 3] + "..."
