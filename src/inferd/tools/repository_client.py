"""A small client of a server's model repository API over HTTP(S): the index, and inferd's
rollback and unpin endpoints (``inferd model``).

Every call carries the extra headers given (a restricted API's ``KEY: VALUE``) and the admin
token (``Authorization: Bearer ...``) when there is one, over TLS for an ``https://`` server. A
refusal (HTTP 401 / 403) raises :class:`~inferd.tools.analyze.control.AccessDeniedError` with a
message saying what to pass; any other error answer raises :class:`RepositoryCallError` with the
server's message.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from inferd.errors import InferdError
from inferd.tools.analyze.control import AccessDeniedError, ServerUnreachableError, access_message
from inferd.tools.perf.headers import Headers
from inferd.tools.perf.metadata import split_url
from inferd.tools.perf.tls import HttpsSettings, handshake_error

__all__ = ["RepositoryCallError", "RepositoryClient"]

TIMEOUT_S = 600.0  # a rollback may load a version and warm it up first


class RepositoryCallError(InferdError):
    """The server answered the call with an error; the message is the server's."""


class RepositoryClient:
    def __init__(
        self,
        url: str,
        *,
        headers: Headers = (),
        admin_token: str | None = None,
        tls: HttpsSettings | None = None,
    ) -> None:
        host, port = split_url(url, 8000)
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self._base = f"{'http' if tls is None else 'https'}://{where}"
        self._headers = dict(headers)
        if admin_token is not None:
            self._headers["Authorization"] = f"Bearer {admin_token}"
        self._tls = tls
        self._context = None if tls is None else tls.context()

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        request = urllib.request.Request(
            self._base + path,
            data=json.dumps(body).encode(),
            method="POST",
            headers={**self._headers, "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(
                request, timeout=TIMEOUT_S, context=self._context
            ) as answer:
                raw = answer.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            with contextlib.suppress(json.JSONDecodeError, AttributeError):
                detail = str(json.loads(detail).get("error", detail))
            if exc.code in (401, 403):
                raise AccessDeniedError(
                    access_message(exc.code == 401, f"HTTP {exc.code}: {detail}")
                ) from None
            raise RepositoryCallError(detail or f"HTTP {exc.code}") from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, ssl.SSLError) and self._tls is not None:
                failed = handshake_error(exc.reason, self._base, self._tls.hint)
                raise ServerUnreachableError(failed.message) from None
            raise ServerUnreachableError(f"{self._base} did not answer: {exc.reason}") from None
        except (OSError, ValueError) as exc:
            raise ServerUnreachableError(f"{self._base} did not answer: {exc}") from None
        return json.loads(raw) if raw.strip() else None

    @staticmethod
    def _model_path(model: str, action: str) -> str:
        return f"/v2/repository/models/{urllib.parse.quote(model, safe='')}/{action}"

    def rollback(self, model: str, version: int | None = None) -> dict[str, str]:
        """Roll ``model`` back; the answer names the pinned version and the one it replaced."""
        body: dict[str, Any] = {} if version is None else {"version": version}
        answer = self._post(self._model_path(model, "rollback"), body)
        if not isinstance(answer, dict):
            raise RepositoryCallError(f"{self._base} answered the rollback with {answer!r}")
        return {str(k): str(v) for k, v in answer.items()}

    def unpin(self, model: str) -> None:
        self._post(self._model_path(model, "unpin"), {})

    def index(self) -> list[dict[str, str]]:
        """The repository index: one row per model version (a never-loaded model: its name)."""
        answer = self._post("/v2/repository/index", {})
        if not isinstance(answer, list):
            raise RepositoryCallError(f"{self._base} answered the index with {answer!r}")
        return [{str(k): str(v) for k, v in row.items()} for row in answer]
