"""What a server configuration exposes to the network, for the warnings logged at startup.

Every API group that changes what the server runs or serves, reachable beyond the loopback
interface with nothing guarding it (no admin token, no restriction), is listed with what any host
on the network can do through it: the model repository in explicit mode (with uploads, writing
files and running code), shared memory when it is enabled, and the rollout and feedback groups
when the operator opened them (``--open-api``). The answer is a pure function of the
configuration, in every control mode.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Set

from inferd.frontends.access import AccessPolicy, Api
from inferd.frontends.grpc.handlers import API_BY_METHOD, HEALTH_API_BY_METHOD
from inferd.frontends.http.routes import API as HTTP_API
from inferd.repository.manager import ControlMode
from inferd.server.config import ServerConfig

# the API groups each front end serves
_HTTP_APIS: frozenset[Api] = frozenset(HTTP_API.values())
_GRPC_APIS: frozenset[Api] = frozenset(API_BY_METHOD.values()) | frozenset(
    HEALTH_API_BY_METHOD.values()
)


def is_loopback(address: str) -> bool:
    """True for addresses only this machine can reach (``localhost``, 127.0.0.0/8, ``::1``)."""
    host = address.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: assume it resolves to a reachable interface


def open_group_allows(api: Api, config: ServerConfig) -> str | None:
    """What any client can do through ``api`` when nothing guards it, or None when that changes
    nothing (a read-only group, or one this configuration turns off)."""
    if api is Api.MODEL_REPOSITORY:
        if config.model_control_mode is not ControlMode.EXPLICIT:
            return None  # the index only: load and unload are refused in modes none and poll
        if config.allow_code_upload:
            return "upload and run code (Python models, pickles) as this server's user"
        if config.allow_model_upload:
            return "upload model files and load or replace models"
        return "load and unload models"
    if api is Api.SHARED_MEMORY:
        if not config.allow_shared_memory:
            return None  # registration is refused
        return "register shared-memory regions, reading and writing /dev/shm as this server's user"
    if api is Api.ROLLOUT:
        return (
            "set, clear, promote and roll back traffic policies, and roll back or unpin model "
            "versions"
        )
    if api is Api.FEEDBACK:
        return "post rewards that move bandit policies' traffic"
    # trace and logging answer UNIMPLEMENTED (there is nothing to change); the others only read
    return None


def _front_end_warning(
    name: str, address: str, flag: str, served: Set[Api], policy: AccessPolicy, config: ServerConfig
) -> str | None:
    open_groups: list[tuple[Api, str]] = []
    for api in sorted(policy.unguarded(served), key=lambda a: a.value):
        allows = open_group_allows(api, config)
        if allows is not None:
            open_groups.append((api, allows))
    if not open_groups:
        return None
    what = "; ".join(f"{allows} ({api.value})" for api, allows in open_groups)
    groups = ",".join(api.value for api, _ in open_groups)
    restrict = "--http-restricted-api" if flag == "--http" else "--grpc-restricted-protocol"
    opened = sorted(api.value for api, _ in open_groups if api in config.open_apis)
    unopen = f"drop --open-api {' '.join(opened)}, " if opened else ""
    return (
        f"the {name} API on {address} is open to the network: any client that reaches it can "
        f"{what}. Protect it: {unopen}set --admin-token-file (or INFERD_ADMIN_TOKEN) or "
        f"{restrict} {groups}:KEY=VALUE, or bind {flag}-address 127.0.0.1 (see docs/security.md)"
    )


def exposure_warnings(config: ServerConfig) -> list[str]:
    """One message per front end, beyond the loopback interface, whose state-changing API
    groups any network client may call, listing each group and what it allows."""
    fronts = [
        ("HTTP", config.allow_http, config.http_address, "--http", _HTTP_APIS, config.http_access),
        ("gRPC", config.allow_grpc, config.grpc_address, "--grpc", _GRPC_APIS, config.grpc_access),
    ]
    warnings: list[str] = []
    for name, enabled, address, flag, served, policy in fronts:
        if not enabled or is_loopback(address):
            continue
        warning = _front_end_warning(name, address, flag, served, policy(), config)
        if warning is not None:
            warnings.append(warning)
    return warnings


__all__ = ["exposure_warnings", "is_loopback", "open_group_allows"]
