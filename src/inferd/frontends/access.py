"""Who may call which API: Triton's restricted-API groups, the admin token and inferd's closed
groups.

A pure policy shared by both front ends. Each front end names the API group an endpoint belongs
to and passes a lookup for request headers (HTTP) or invocation metadata (gRPC); the policy
raises :class:`~inferd.errors.PermissionDeniedError` or
:class:`~inferd.errors.UnauthenticatedError`, which the edges map like any other error.

Three rules, checked in this order:

* **Closed groups.** inferd's own traffic-steering groups (:data:`CLOSED_APIS`: ``rollout``,
  ``feedback``) answer PERMISSION_DENIED to everyone unless the operator set a token that
  guards them, restricted them (``--http-restricted-api``) or opened them (``--open-api``).
  Triton's groups keep Triton's behaviour: open until a token or a restriction guards them.
* **Restrictions**, in Triton's syntax ``API[,API...]:KEY=VALUE``: a request to a listed API must
  carry the header (gRPC: metadata) ``KEY`` with the value ``VALUE``.
* **Tokens.** The admin token, when set, is required as ``Authorization: Bearer <token>`` on the
  APIs that change the server's state (:data:`ADMIN_APIS`). The ``feedback`` group takes the
  feedback token or the admin token, so inference rights alone cannot steer a bandit. A group
  the operator opened needs no token (restrictions still apply).
"""

from __future__ import annotations

import enum
import hmac
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from inferd.errors import InvalidArgumentError, PermissionDeniedError, UnauthenticatedError


class Api(enum.Enum):
    """API groups, named as in Triton's ``--http-restricted-api`` flag, plus inferd's own."""

    HEALTH = "health"
    METADATA = "metadata"
    INFERENCE = "inference"
    SHARED_MEMORY = "shared-memory"
    MODEL_CONFIG = "model-config"
    MODEL_REPOSITORY = "model-repository"
    STATISTICS = "statistics"
    TRACE = "trace"
    LOGGING = "logging"
    # inferd's own: traffic policies (set, clear, promote, roll back) and version rollback/unpin
    ROLLOUT = "rollout"
    # inferd's own: rewards for answered requests, which steer bandit policies
    FEEDBACK = "feedback"
    # the OpenAI-compatible API under /v1 (models, completions, chat, embeddings)
    OPENAI = "openai"
    # the web console under /console: its page, assets, summary and live event stream
    CONSOLE = "console"


# The groups that change what the server serves or how it behaves: the admin token guards them.
ADMIN_APIS: frozenset[Api] = frozenset(
    {Api.MODEL_REPOSITORY, Api.SHARED_MEMORY, Api.TRACE, Api.LOGGING, Api.ROLLOUT, Api.FEEDBACK}
)

# inferd's traffic-steering groups: closed until a token guards them or the operator opens them.
CLOSED_APIS: frozenset[Api] = frozenset({Api.ROLLOUT, Api.FEEDBACK})

HeaderLookup = Callable[[str], "str | None"]  # lower-case name -> value, None when absent


@dataclass(frozen=True, slots=True)
class Restriction:
    apis: frozenset[Api]
    key: str  # lower-case: HTTP header names and gRPC metadata keys are case-insensitive
    value: str = field(repr=False)
    spelled: str = ""  # the key as the operator wrote it, for messages

    @property
    def shown_key(self) -> str:
        return self.spelled or self.key


def parse_restriction(text: str, *, flag: str = "--http-restricted-api") -> Restriction:
    """Parse ``API[,API...]:KEY=VALUE``; raise :class:`InvalidArgumentError` naming the flaw."""
    groups, sep, pair = text.partition(":")
    key, eq, value = pair.partition("=")
    usage = f"{flag} '{text}' must look like API[,API...]:KEY=VALUE"
    if not sep or not eq or not groups.strip() or not key.strip():
        raise InvalidArgumentError(usage)
    apis: set[Api] = set()
    for name in groups.split(","):
        apis.add(parse_api(name, flag=flag))
    return Restriction(frozenset(apis), key.strip().lower(), value, key.strip())


def parse_api(name: str, *, flag: str) -> Api:
    """The API group called ``name``; :class:`InvalidArgumentError` naming ``flag`` if none is."""
    known = {api.value: api for api in Api}
    api = known.get(name.strip())
    if api is None:
        raise InvalidArgumentError(
            f"{flag}: unknown API '{name.strip()}'; expected one of "
            f"{', '.join(a.value for a in Api)}"
        )
    return api


def cross_site_refusal(header: HeaderLookup) -> str | None:
    """Why a state-changing request looks sent by another site's page (a cross-site request
    forgery), or None. Browsers say where a request comes from: ``Sec-Fetch-Site`` (anything
    but ``same-origin`` or ``none`` is refused) or, from older ones, an ``Origin`` whose host
    is not the ``Host`` the request was sent to. Clients that are not browsers send neither."""
    site = header("sec-fetch-site")
    if site is not None and site.strip().lower() not in ("same-origin", "none"):
        return (
            f"refused a state-changing request sent from another site (Sec-Fetch-Site: {site}); "
            "send it from the console on this server or from a client that is not a browser"
        )
    origin = header("origin")
    if origin is not None and site is None:
        host = (header("host") or "").strip().lower()
        _, _, origin_host = origin.strip().lower().partition("://")
        if origin.strip().lower() == "null" or origin_host.rstrip("/") != host:
            return (
                f"refused a state-changing request from origin '{origin}', which is not this "
                "server's; send it from the console on this server or from a client that is "
                "not a browser"
            )
    return None


def closed_message(api: Api) -> str:
    """What a call to a closed group is told: how the operator opens it."""
    if api is Api.FEEDBACK:
        return (
            "the feedback API is closed: rewards steer traffic, so this server takes them only "
            "with a token. Start it with --feedback-token-file FILE (or INFERD_FEEDBACK_TOKEN) "
            "or --admin-token-file FILE (or INFERD_ADMIN_TOKEN) and send 'Authorization: Bearer "
            "<token>', or open it to every client with --open-api feedback"
        )
    return (
        f"the {api.value} API is closed: it changes which version serves which request, so "
        "this server takes it only with a token. Start it with --admin-token-file FILE (or "
        "INFERD_ADMIN_TOKEN) and send 'Authorization: Bearer <token>', or open it to every "
        f"client with --open-api {api.value}"
    )


@dataclass(frozen=True, slots=True)
class AccessPolicy:
    """The access rules of one front end. The default policy lets every request through except
    to the closed groups (:data:`CLOSED_APIS`)."""

    restrictions: tuple[Restriction, ...] = ()
    admin_token: str | None = field(default=None, repr=False)
    feedback_token: str | None = field(default=None, repr=False)
    opened: frozenset[Api] = frozenset()  # closed groups the operator opened (--open-api)
    admin_apis: frozenset[Api] = ADMIN_APIS
    _by_api: dict[Api, Restriction] = field(default_factory=dict, init=False, repr=False)
    _tokens: dict[Api, tuple[bytes, ...]] = field(default_factory=dict, init=False, repr=False)
    _closed: frozenset[Api] = field(default=frozenset(), init=False, repr=False)

    def __post_init__(self) -> None:
        by_api: dict[Api, Restriction] = {}
        for restriction in self.restrictions:
            for api in restriction.apis:
                if api in by_api:
                    raise InvalidArgumentError(
                        f"API '{api.value}' is restricted more than once; give each API one "
                        "KEY=VALUE"
                    )
                by_api[api] = restriction
        if self.admin_token is not None and not self.admin_token:
            raise InvalidArgumentError("the admin token must not be empty")
        if self.feedback_token is not None and not self.feedback_token:
            raise InvalidArgumentError("the feedback token must not be empty")
        wrong = sorted(api.value for api in self.opened - CLOSED_APIS)
        if wrong:
            raise InvalidArgumentError(
                f"--open-api {', '.join(wrong)}: only "
                f"{' and '.join(sorted(a.value for a in CLOSED_APIS))} are closed by default; "
                "the other groups are open unless a token or a restriction guards them"
            )
        tokens: dict[Api, tuple[bytes, ...]] = {}
        for api in Api:
            accepted: tuple[str | None, ...] = (self.feedback_token,) if api is Api.FEEDBACK else ()
            if api in self.admin_apis:
                accepted += (self.admin_token,)
            given = tuple(t.encode() for t in accepted if t is not None)
            if given and api not in self.opened:
                tokens[api] = given
        closed = frozenset(
            api for api in CLOSED_APIS - self.opened if api not in tokens and api not in by_api
        )
        object.__setattr__(self, "_by_api", by_api)
        object.__setattr__(self, "_tokens", tokens)
        object.__setattr__(self, "_closed", closed)

    def guards(self, api: Api) -> bool:
        """Whether a request to ``api`` needs any check at all (cheap; for the hot path)."""
        return api in self._by_api or api in self._tokens or api in self._closed

    def is_closed(self, api: Api) -> bool:
        """Whether every request to ``api`` is refused (a closed group nobody opened)."""
        return api in self._closed

    def check(self, api: Api, header: HeaderLookup) -> None:
        if api in self._closed:
            raise PermissionDeniedError(closed_message(api))
        restriction = self._by_api.get(api)
        if restriction is not None:
            got = header(restriction.key)
            if got is None or not hmac.compare_digest(got.encode(), restriction.value.encode()):
                raise PermissionDeniedError(
                    f"This API is restricted, expecting header '{restriction.shown_key}'"
                )
        tokens = self._tokens.get(api)
        if tokens is not None:
            auth = header("authorization") or ""
            scheme, _, token = auth.partition(" ")
            sent = token.strip().encode()
            # every token compared, so the time taken does not say which one came close
            matched = [hmac.compare_digest(sent, accepted) for accepted in tokens]
            if scheme.lower() != "bearer" or not any(matched):
                which = (
                    "the server's feedback token or admin token"
                    if api is Api.FEEDBACK
                    else "the server's admin token"
                )
                raise UnauthenticatedError(
                    f"the {api.value} API requires the header 'Authorization: Bearer <token>' "
                    f"with {which}"
                )

    def describe(self, api: Api) -> str:
        """How ``api`` is guarded, in one word for the console: ``closed``, ``restricted``,
        ``token``, ``restricted+token`` or ``open``."""
        if api in self._closed:
            return "closed"
        restricted, token = api in self._by_api, api in self._tokens
        parts = [w for w, on in (("restricted", restricted), ("token", token)) if on]
        return "+".join(parts) or "open"

    def unguarded(self, apis: Iterable[Api] = ADMIN_APIS) -> list[Api]:
        """The APIs among ``apis`` that any client may call (for the startup warning)."""
        return [api for api in apis if not self.guards(api)]


__all__ = [
    "ADMIN_APIS",
    "CLOSED_APIS",
    "AccessPolicy",
    "Api",
    "HeaderLookup",
    "Restriction",
    "closed_message",
    "cross_site_refusal",
    "parse_api",
    "parse_restriction",
]
