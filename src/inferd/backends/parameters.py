"""Reading a model config's string ``parameters`` as typed values, with one error wording."""

from __future__ import annotations

from collections.abc import Sequence

from inferd.errors import ConfigError

TRUE_WORDS = frozenset({"1", "true", "on", "yes"})
FALSE_WORDS = frozenset({"0", "false", "off", "no"})


def bool_param(
    params: dict[str, str],
    key: str,
    default: bool | None = None,
    *,
    label: str | None = None,
    expected: str = "a boolean (true/false, 1/0)",
) -> bool | None:
    """``params[key]`` as a boolean; ``default`` when absent; ConfigError when unreadable."""
    raw = params.get(key)
    if raw is None:
        return default
    lowered = raw.strip().lower()
    if lowered in TRUE_WORDS:
        return True
    if lowered in FALSE_WORDS:
        return False
    raise ConfigError(f"parameter '{label or key}' must be {expected}, got '{raw}'")


def int_param(
    params: dict[str, str],
    key: str,
    default: int | None = None,
    *,
    minimum: int = 0,
    label: str | None = None,
    expected: str = "an integer",
) -> int | None:
    """``params[key]`` as an integer ``>= minimum``; ``default`` when absent."""
    raw = params.get(key)
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise ConfigError(
            f"parameter '{label or key}' must be {expected} >= {minimum}, got '{raw}'"
        )
    return value


def check_keys(params: dict[str, str], accepted: Sequence[str], backend: str) -> None:
    """Refuse any parameter key the backend does not know (a typo must not be ignored)."""
    unknown = sorted(k for k in params if k not in accepted)
    if unknown:
        raise ConfigError(
            f"unknown parameter '{unknown[0]}' for backend '{backend}'; accepted parameters: "
            f"{', '.join(sorted(accepted))}"
        )
