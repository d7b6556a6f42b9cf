"""The admin token, read as ``inferd serve`` reads it: ``--admin-token-file FILE`` (its content,
without surrounding whitespace) or else the ``INFERD_ADMIN_TOKEN`` environment variable.

``inferd serve`` requires it as ``Authorization: Bearer <token>`` on its management APIs;
``inferd analyze`` sends it on its model control calls.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from inferd.errors import InvalidArgumentError

ENV_VAR = "INFERD_ADMIN_TOKEN"


def read_admin_token(file: Path | None, environ: Mapping[str, str]) -> str | None:
    """The token, or None when neither the file nor the variable gives one; an unreadable or
    empty file, or an empty variable, raises :class:`InvalidArgumentError`."""
    if file is not None:
        try:
            token = file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise InvalidArgumentError(f"cannot read --admin-token-file: {exc}") from exc
        if not token:
            raise InvalidArgumentError(f"--admin-token-file '{file}' is empty")
        return token
    env = environ.get(ENV_VAR)
    if env is not None and not env.strip():
        raise InvalidArgumentError(f"{ENV_VAR} is set but empty")
    return env.strip() if env else None


__all__ = ["ENV_VAR", "read_admin_token"]
