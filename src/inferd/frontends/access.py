"""Who may call which API: Triton's restricted-API groups and the admin bearer token.

A pure policy shared by both front ends. Each front end names the API group an endpoint belongs
to and passes a lookup for request headers (HTTP) or invocation metadata (gRPC); the policy
raises :class:`~inferd.errors.PermissionDeniedError` or
:class:`~inferd.errors.UnauthenticatedError`, which the edges map like any other error.

Restrictions use Triton's syntax, ``API[,API...]:KEY=VALUE``: a request to a listed API must
carry the header (gRPC: metadata) ``KEY`` with the value ``VALUE``. The admin token, when set,
is required as ``Authorization: Bearer <token>`` on the APIs that change the server's state.
"""

from __future__ import annotations

import enum
import hmac
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from inferd.errors import InvalidArgumentError, PermissionDeniedError, UnauthenticatedError


class Api(enum.Enum):
    """API groups, named as in Triton's ``--http-restricted-api`` flag."""

    HEALTH = "health"
    METADATA = "metadata"
    INFERENCE = "inference"
    SHARED_MEMORY = "shared-memory"
    MODEL_CONFIG = "model-config"
    MODEL_REPOSITORY = "model-repository"
    STATISTICS = "statistics"
    TRACE = "trace"
    LOGGING = "logging"


# The groups that change what the server serves or how it behaves.
ADMIN_APIS: frozenset[Api] = frozenset(
    {Api.MODEL_REPOSITORY, Api.SHARED_MEMORY, Api.TRACE, Api.LOGGING}
)

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
    known = {api.value: api for api in Api}
    apis: set[Api] = set()
    for name in groups.split(","):
        api = known.get(name.strip())
        if api is None:
            raise InvalidArgumentError(
                f"{flag}: unknown API '{name.strip()}'; expected one of "
                f"{', '.join(a.value for a in Api)}"
            )
        apis.add(api)
    return Restriction(frozenset(apis), key.strip().lower(), value, key.strip())


@dataclass(frozen=True, slots=True)
class AccessPolicy:
    """The access rules of one front end. The default policy lets every request through."""

    restrictions: tuple[Restriction, ...] = ()
    admin_token: str | None = field(default=None, repr=False)
    admin_apis: frozenset[Api] = ADMIN_APIS
    _by_api: dict[Api, Restriction] = field(default_factory=dict, init=False, repr=False)

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
        object.__setattr__(self, "_by_api", by_api)

    def guards(self, api: Api) -> bool:
        """Whether a request to ``api`` needs any check at all (cheap; for the hot path)."""
        return api in self._by_api or (self.admin_token is not None and api in self.admin_apis)

    def check(self, api: Api, header: HeaderLookup) -> None:
        restriction = self._by_api.get(api)
        if restriction is not None:
            got = header(restriction.key)
            if got is None or not hmac.compare_digest(got.encode(), restriction.value.encode()):
                raise PermissionDeniedError(
                    f"This API is restricted, expecting header '{restriction.shown_key}'"
                )
        if self.admin_token is not None and api in self.admin_apis:
            auth = header("authorization") or ""
            scheme, _, token = auth.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(
                token.strip().encode(), self.admin_token.encode()
            ):
                raise UnauthenticatedError(
                    f"the {api.value} API requires the header 'Authorization: Bearer <token>' "
                    "with the server's admin token"
                )

    def unguarded(self, apis: Iterable[Api] = ADMIN_APIS) -> list[Api]:
        """The APIs among ``apis`` that any client may call (for the startup warning)."""
        return [api for api in apis if not self.guards(api)]


__all__ = [
    "ADMIN_APIS",
    "AccessPolicy",
    "Api",
    "HeaderLookup",
    "Restriction",
    "parse_restriction",
]
