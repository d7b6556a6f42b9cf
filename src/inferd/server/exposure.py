"""What a server configuration exposes to the network, for the warnings logged at startup.

The model-repository API can change what the server runs (explicit model-control mode), and with
uploads enabled it writes files sent by clients. Reachable beyond the loopback interface without
a restriction or an admin token, any host on the network can use it: say so loudly.
"""

from __future__ import annotations

import ipaddress

from inferd.frontends.access import AccessPolicy, Api
from inferd.repository.manager import ControlMode
from inferd.server.config import ServerConfig


def is_loopback(address: str) -> bool:
    """True for addresses only this machine can reach (``localhost``, 127.0.0.0/8, ``::1``)."""
    host = address.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name: assume it resolves to a reachable interface


def exposure_warnings(config: ServerConfig) -> list[str]:
    """One message per front end whose management API any network client may call."""
    if config.model_control_mode is not ControlMode.EXPLICIT:
        return []  # load and unload are refused in the other modes
    what = "load and unload models"
    if config.allow_code_upload:
        what = "upload and run code (Python models, pickles) as this server's user"
    elif config.allow_model_upload:
        what = "upload model files and load or replace models"
    fronts: list[tuple[str, bool, str, AccessPolicy, str]] = [
        ("HTTP", config.allow_http, config.http_address, config.http_access(), "--http"),
        ("gRPC", config.allow_grpc, config.grpc_address, config.grpc_access(), "--grpc"),
    ]
    warnings: list[str] = []
    for name, enabled, address, policy, flag in fronts:
        if not enabled or is_loopback(address) or policy.guards(Api.MODEL_REPOSITORY):
            continue
        restrict = f"{flag}-restricted-api" if flag == "--http" else f"{flag}-restricted-protocol"
        warnings.append(
            f"the {name} model-repository API on {address} is open to the network: any client "
            f"that reaches it can {what}. Protect it with --admin-token-file (or "
            f"INFERD_ADMIN_TOKEN) or {restrict} model-repository:KEY=VALUE, or bind "
            f"{flag}-address 127.0.0.1 (see docs/security.md)"
        )
    return warnings


__all__ = ["exposure_warnings", "is_loopback"]
