"""The one client of a server's HTTP admin API: the model repository (index, load, unload, the
served config, rollback, unpin) and the traffic policies (``/v2/models/{m}/rollout``, promote,
rollback, feedback).

Every call goes to one :class:`~inferd.client.endpoint.Endpoint`: with its extra headers, its
bearer token and, for an HTTPS server, its TLS settings. Errors map once, here:

* no answer (refused connection, timeout, failed TLS handshake): :class:`ServerUnreachableError`
  (an ``UNAVAILABLE`` error) naming the URL;
* 401: :class:`ServerUnauthenticatedError`, 403: :class:`ServerPermissionDeniedError` (both
  :class:`AccessDeniedError`), with the server's message and what to pass;
* any other error answer: :class:`RepositoryCallError` with the server's message.
"""

from __future__ import annotations

import contextlib
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from typing import TYPE_CHECKING, Any, TypedDict

from inferd.client.endpoint import Endpoint
from inferd.client.headers import Headers
from inferd.client.tls import HttpsSettings, handshake_error
from inferd.errors import (
    AccessDeniedError,
    RepositoryCallError,
    ServerPermissionDeniedError,
    ServerUnauthenticatedError,
    ServerUnreachableError,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["TOKEN_HINT", "AdminClient", "CallOptions", "access_message", "is_restricted"]

TIMEOUT_S = 600.0  # a load or rollback may load a version and warm it up first
TOKEN_HINT = (
    "pass its admin token with --admin-token-file FILE (or the INFERD_ADMIN_TOKEN environment "
    "variable)"
)
HEADER_HINT = "pass the header it expects with -H NAME:VALUE"
# Triton's (and inferd's) answer to a call of a restricted API without its header; over gRPC it
# comes with status UNAVAILABLE, so the words are what tell it apart
RESTRICTED_WORDS = "is restricted, expecting header"


def is_restricted(message: str) -> bool:
    """Whether a server's error message is a restricted API's refusal."""
    return RESTRICTED_WORDS in message


def access_message(
    unauthenticated: bool,
    detail: str,
    *,
    subject: str = "model control",
    token_hint: str = TOKEN_HINT,
) -> str:
    """One line saying what the server refused and what to pass: the token for an
    unauthenticated call (401), the restricted API's header for a forbidden one (403)."""
    what = token_hint if unauthenticated else HEADER_HINT
    return f"the server refused {subject} ({detail}): {what}"


def refusal(
    status: int, detail: str, *, subject: str = "model control", token_hint: str = TOKEN_HINT
) -> AccessDeniedError:
    """The error a 401 or 403 answer raises."""
    if status == 403 and not is_restricted(detail):
        # closed rather than restricted: the server's message names the flag that opens it
        return ServerPermissionDeniedError(f"the server refused {subject} (HTTP 403: {detail})")
    message = access_message(
        status == 401, f"HTTP {status}: {detail}", subject=subject, token_hint=token_hint
    )
    if status == 401:
        return ServerUnauthenticatedError(message)
    return ServerPermissionDeniedError(message)


class CallOptions(TypedDict, total=False):
    """The options of :meth:`AdminClient.call` and :meth:`AdminClient.call_raw`."""

    subject: str
    token_hint: str
    timeout_s: float | None


def _quoted(model: str) -> str:
    return urllib.parse.quote(model, safe="")


class AdminClient:
    """Blocking calls (run them in a thread from async code); one per endpoint."""

    def __init__(self, endpoint: Endpoint, *, timeout_s: float = TIMEOUT_S) -> None:
        self.endpoint = endpoint
        self._timeout_s = timeout_s
        self._headers = dict(endpoint.all_headers())
        self._context = None if endpoint.tls is None else endpoint.tls.context()

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        headers: Headers = (),
        admin_token: str | None = None,
        tls: HttpsSettings | None = None,
        timeout_s: float = TIMEOUT_S,
    ) -> AdminClient:
        """The client of the server ``-u URL`` names (:meth:`Endpoint.from_url`), with the
        connection flags' headers and TLS settings and the admin token."""
        endpoint = Endpoint.from_url(url, tls=tls, headers=headers, token=admin_token)
        return cls(endpoint, timeout_s=timeout_s)

    def call(self, method: str, path: str, body: Any = None, **options: Unpack[CallOptions]) -> Any:
        """One call (with :meth:`call_raw`'s options); the answer's JSON (None for an empty
        answer)."""
        raw = self.call_raw(method, path, body, **options)
        return json.loads(raw) if raw.strip() else None

    def call_raw(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        subject: str = "model control",
        token_hint: str = TOKEN_HINT,
        timeout_s: float | None = None,
    ) -> bytes:
        """One call; the answer's bytes. ``subject`` and ``token_hint`` word a refusal's message;
        ``timeout_s`` None: the client's timeout."""
        base = self.endpoint.base_url
        headers = dict(self._headers)
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(base + path, data=data, method=method, headers=headers)
        timeout = self._timeout_s if timeout_s is None else timeout_s
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=self._context) as answer:
                return bytes(answer.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            with contextlib.suppress(json.JSONDecodeError, AttributeError):
                detail = str(json.loads(detail).get("error", detail))
            if exc.code in (401, 403):
                raise refusal(exc.code, detail, subject=subject, token_hint=token_hint) from None
            raise RepositoryCallError(detail or f"HTTP {exc.code}") from None
        except urllib.error.URLError as exc:
            tls = self.endpoint.tls
            if isinstance(exc.reason, ssl.SSLError) and tls is not None:
                failed = handshake_error(exc.reason, base, tls.hint)
                raise ServerUnreachableError(failed.message) from None
            raise ServerUnreachableError(f"{base} did not answer: {exc.reason}") from None
        except (OSError, ValueError) as exc:
            raise ServerUnreachableError(f"{base} did not answer: {exc}") from None

    # the model repository

    def index(self) -> list[dict[str, str]]:
        """The repository index: one row per model version (a never-loaded model: its name)."""
        answer = self.call("POST", "/v2/repository/index", {})
        if not isinstance(answer, list):
            raise RepositoryCallError(
                f"{self.endpoint.base_url} answered the index with {answer!r}"
            )
        return [{str(k): str(v) for k, v in row.items()} for row in answer]

    def load(self, model: str, config_json: str | None = None) -> None:
        """Load (or reload) ``model``; ``config_json`` replaces its config for this load."""
        body: dict[str, Any] = {}
        if config_json is not None:
            body = {"parameters": {"config": config_json}}
        self.call("POST", f"/v2/repository/models/{_quoted(model)}/load", body)

    def unload(self, model: str) -> None:
        self.call("POST", f"/v2/repository/models/{_quoted(model)}/unload", {})

    def config(self, model: str) -> dict[str, Any]:
        """The served config, in Triton's JSON rendering."""
        answer = self.call("GET", f"/v2/models/{_quoted(model)}/config", timeout_s=30.0)
        if not isinstance(answer, dict):
            raise RepositoryCallError(
                f"{self.endpoint.base_url} answered the config with {answer!r}"
            )
        return answer

    def rollback(self, model: str, version: int | None = None) -> dict[str, str]:
        """Roll ``model`` back; the answer names the pinned version and the one it replaced."""
        body: dict[str, Any] = {} if version is None else {"version": version}
        answer = self.call("POST", f"/v2/repository/models/{_quoted(model)}/rollback", body)
        if not isinstance(answer, dict):
            raise RepositoryCallError(
                f"{self.endpoint.base_url} answered the rollback with {answer!r}"
            )
        return {str(k): str(v) for k, v in answer.items()}

    def unpin(self, model: str) -> None:
        self.call("POST", f"/v2/repository/models/{_quoted(model)}/unpin", {})

    # traffic policies

    def _rollout(
        self, method: str, path: str, body: Any = None, *, token_hint: str = TOKEN_HINT
    ) -> dict[str, Any] | None:
        answer = self.call(
            method, path, body, subject="the rollout call", token_hint=token_hint, timeout_s=30.0
        )
        return answer if isinstance(answer, dict) else None

    def rollout_get(self, model: str) -> dict[str, Any] | None:
        """The model's policy with its live figures."""
        return self._rollout("GET", f"/v2/models/{_quoted(model)}/rollout")

    def rollout_set(self, model: str, policy: dict[str, Any]) -> dict[str, Any] | None:
        """Replace the model's policy (the rollout.yaml schema, as a dict)."""
        return self._rollout("PUT", f"/v2/models/{_quoted(model)}/rollout", policy)

    def rollout_clear(self, model: str) -> None:
        self._rollout("DELETE", f"/v2/models/{_quoted(model)}/rollout")

    def rollout_promote(self, model: str) -> dict[str, Any] | None:
        return self._rollout("POST", f"/v2/models/{_quoted(model)}/rollout/promote", {})

    def rollout_rollback(self, model: str, reason: str = "") -> dict[str, Any] | None:
        return self._rollout(
            "POST", f"/v2/models/{_quoted(model)}/rollout/rollback", {"reason": reason}
        )

    def feedback(
        self, model: str, request_id: str, reward: float, *, token_hint: str = TOKEN_HINT
    ) -> dict[str, Any] | None:
        """Credit ``reward`` to the variant that answered ``request_id``."""
        return self._rollout(
            "POST",
            f"/v2/models/{_quoted(model)}/feedback",
            {"id": request_id, "reward": reward},
            token_hint=token_hint,
        )
