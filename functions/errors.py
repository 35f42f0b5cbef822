"""The one error type raised by every decoder of data that crossed the network."""


class DecodeError(ValueError):
    """A received record is malformed, inconsistent, non-finite or too large."""
