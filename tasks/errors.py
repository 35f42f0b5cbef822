"""The one error type for a run configuration that cannot be honoured."""

from collections.abc import Iterable


class ConfigError(ValueError):
    """A run-config value is unknown or out of range; raised before any training."""

    @classmethod
    def choice(cls, key: str, value: object, allowed: Iterable[object]) -> "ConfigError":
        """An unknown value for ``key``, listing the allowed ones."""
        allowed_text = ", ".join(str(a) for a in allowed)
        return cls(f"{key}={value!r} is not valid; allowed values: {allowed_text}")

    @classmethod
    def bound(cls, key: str, value: object, requirement: str) -> "ConfigError":
        """A value for ``key`` outside its range, saying what is required."""
        return cls(f"{key}={value!r} is not valid; it must be {requirement}")
