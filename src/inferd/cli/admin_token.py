"""The server's tokens, read as ``inferd serve`` reads them: the admin token from
``--admin-token-file FILE`` (its content, without surrounding whitespace) or else the
``INFERD_ADMIN_TOKEN`` environment variable; the feedback token likewise from
``--feedback-token-file FILE`` or ``INFERD_FEEDBACK_TOKEN``.

``inferd serve`` requires the admin token as ``Authorization: Bearer <token>`` on its management
APIs, and the feedback token (or the admin token) on ``/feedback``; ``inferd analyze``,
``inferd model`` and ``inferd rollout`` send them on their calls.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from inferd.errors import InvalidArgumentError

ENV_VAR = "INFERD_ADMIN_TOKEN"
FEEDBACK_ENV_VAR = "INFERD_FEEDBACK_TOKEN"


def read_token(
    file: Path | None, environ: Mapping[str, str], *, flag: str, env_var: str
) -> str | None:
    """The token from ``file`` or else ``environ[env_var]``; None when neither gives one. An
    unreadable or empty file, or an empty variable, raises :class:`InvalidArgumentError`."""
    if file is not None:
        try:
            token = file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise InvalidArgumentError(f"cannot read {flag}: {exc}") from exc
        if not token:
            raise InvalidArgumentError(f"{flag} '{file}' is empty")
        return token
    env = environ.get(env_var)
    if env is not None and not env.strip():
        raise InvalidArgumentError(f"{env_var} is set but empty")
    return env.strip() if env else None


def read_admin_token(file: Path | None, environ: Mapping[str, str]) -> str | None:
    """The admin token (``--admin-token-file`` or ``INFERD_ADMIN_TOKEN``), or None."""
    return read_token(file, environ, flag="--admin-token-file", env_var=ENV_VAR)


def read_feedback_token(file: Path | None, environ: Mapping[str, str]) -> str | None:
    """The feedback token (``--feedback-token-file`` or ``INFERD_FEEDBACK_TOKEN``), or None."""
    return read_token(file, environ, flag="--feedback-token-file", env_var=FEEDBACK_ENV_VAR)


__all__ = ["ENV_VAR", "FEEDBACK_ENV_VAR", "read_admin_token", "read_feedback_token", "read_token"]
