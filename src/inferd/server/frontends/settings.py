"""What the engine process tells a front end: a JSON document, never a pickle.

The engine writes :meth:`Settings.encode` (an 8-byte little-endian length, then the JSON text)
on the front end's standard input; the front end reads it with :meth:`Settings.decode`. JSON
carries data only (unpickling runs code, and a pickle ties the two processes to one version of
every class in it), and the reader accepts exactly the fields below: an unknown, missing or
mistyped field is refused with its name.
"""

from __future__ import annotations

import dataclasses
import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inferd.frontends.access import Api, Restriction
from inferd.frontends.tls import TlsSettings
from inferd.server.config import ServerConfig
from inferd.server.frontends.channel import ChannelSpec
from inferd.server.frontends.doorbell import Doorbell

__all__ = ["FRONTEND_FIELDS", "Settings", "SettingsError", "frontend_config", "local_infer"]

LENGTH = struct.Struct("<Q")

#: the server settings a front end serves with (the rest concern the engine alone)
FRONTEND_FIELDS = (
    "model_repositories",
    "exit_timeout_secs",
    "http_address",
    "http_max_input_bytes",
    "http_max_json_input_bytes",
    "http_header_timeout_s",
    "http_body_timeout_s",
    "http_idle_timeout_s",
    "http_max_connections",
    "http_restricted_apis",
    "http_tls",
    "openai_max_body_bytes",
    "grpc_address",
    "grpc_restricted_protocols",
    "grpc_tls",
    "admin_token",
    "feedback_token",
    "open_apis",
)


class SettingsError(ValueError):
    """A settings document the front end cannot use (names the field)."""


def frontend_config(config: ServerConfig) -> ServerConfig:
    """``config`` less what only the engine reads (models, monitoring, tracing...)."""
    return ServerConfig(**{name: getattr(config, name) for name in FRONTEND_FIELDS})


def local_infer(config: ServerConfig) -> bool:
    """Inference requests are decoded in the front end unless they may name shared-memory
    regions (the engine holds the registry) or are traced (the engine's tracer begins them)."""
    return not config.allow_shared_memory and config.tracing is None


@dataclass(frozen=True, slots=True)
class Settings:
    """One front end's settings (sent over a pipe only the engine and the front end hold)."""

    index: int
    config: ServerConfig  # frontend_config(): the FRONTEND_FIELDS only
    channel: dict[str, str | int]  # ChannelSpec.as_dict()
    slot_bytes: int
    http_port: int | None
    grpc_port: int | None
    openai_port: int | None
    local_infer: bool  # see local_infer()
    connection_fds: tuple[int, ...]  # ConnectionTable.fds(): the shared connection count

    def to_json(self) -> str:
        return json.dumps(
            {
                "index": self.index,
                "config": _config_to_json(self.config),
                "channel": dict(self.channel),
                "slot_bytes": self.slot_bytes,
                "http_port": self.http_port,
                "grpc_port": self.grpc_port,
                "openai_port": self.openai_port,
                "local_infer": self.local_infer,
                "connection_fds": list(self.connection_fds),
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> Settings:
        """The settings in ``text``; :class:`SettingsError` naming any field that is unknown,
        missing or of the wrong type."""
        try:
            data = json.loads(text)
        except (ValueError, UnicodeDecodeError) as exc:
            raise SettingsError(f"front-end settings are not JSON: {exc}") from exc
        top = _fields(data, _TOP, "settings")
        channel = _channel(top["channel"])
        fds = top["connection_fds"]
        if not all(type(fd) is int and fd >= 0 for fd in fds):
            raise SettingsError("settings.connection_fds must hold file descriptor numbers")
        try:
            config = ServerConfig(**_config_from_json(top["config"]))
        except SettingsError:
            raise
        except Exception as exc:  # the config's own checks (InvalidArgumentError)
            raise SettingsError(f"settings.config: {exc}") from exc
        return cls(
            index=top["index"],
            config=config,
            channel=channel,
            slot_bytes=top["slot_bytes"],
            http_port=top["http_port"],
            grpc_port=top["grpc_port"],
            openai_port=top["openai_port"],
            local_infer=top["local_infer"],
            connection_fds=tuple(fds),
        )

    def encode(self) -> bytes:
        blob = self.to_json().encode()
        return LENGTH.pack(len(blob)) + blob


# -- the schema: field -> the JSON types it may hold --------------------------------------------

_INT = (int,)
_OPT_INT = (int, type(None))
_STR = (str,)
_OPT_STR = (str, type(None))
_NUM = (int, float)
_TOP: dict[str, tuple[type, ...]] = {
    "index": _INT,
    "config": (dict,),
    "channel": (dict,),
    "slot_bytes": _INT,
    "http_port": _OPT_INT,
    "grpc_port": _OPT_INT,
    "openai_port": _OPT_INT,
    "local_infer": (bool,),
    "connection_fds": (list,),
}
_CONFIG: dict[str, tuple[type, ...]] = {
    "model_repositories": (list,),
    "exit_timeout_secs": _NUM,
    "http_address": _STR,
    "http_max_input_bytes": _INT,
    "http_max_json_input_bytes": _INT,
    "http_header_timeout_s": _NUM,
    "http_body_timeout_s": _NUM,
    "http_idle_timeout_s": _NUM,
    "http_max_connections": _INT,
    "http_restricted_apis": (list,),
    "http_tls": (dict, type(None)),
    "openai_max_body_bytes": _INT,
    "grpc_address": _STR,
    "grpc_restricted_protocols": (list,),
    "grpc_tls": (dict, type(None)),
    "admin_token": _OPT_STR,
    "feedback_token": _OPT_STR,
    "open_apis": (list,),
}
_RESTRICTION: dict[str, tuple[type, ...]] = {
    "apis": (list,),
    "key": _STR,
    "value": _STR,
    "spelled": _STR,
}
_TLS: dict[str, tuple[type, ...]] = {
    "cert_file": _STR,
    "key_file": _STR,
    "root_cert_file": _OPT_STR,
    "require_client_cert": (bool,),
}
assert set(_CONFIG) == set(FRONTEND_FIELDS)


def _fields(data: Any, schema: dict[str, tuple[type, ...]], where: str) -> dict[str, Any]:
    """``data`` as an object with exactly the fields of ``schema``, each of its types."""
    if not isinstance(data, dict):
        raise SettingsError(f"{where} must be a JSON object")
    unknown = sorted(set(data) - set(schema))
    if unknown:
        raise SettingsError(f"{where}: unknown field(s) {', '.join(unknown)}")
    missing = sorted(set(schema) - set(data))
    if missing:
        raise SettingsError(f"{where}: missing field(s) {', '.join(missing)}")
    for name, kinds in schema.items():
        value = data[name]
        # bool is an int in Python, and a JSON true is no count
        if type(value) not in kinds or (type(value) is bool and bool not in kinds):
            raise SettingsError(f"{where}.{name}: unexpected {type(value).__name__} value")
    return data


def _channel(data: Any) -> dict[str, str | int]:
    """A :meth:`ChannelSpec.as_dict`: its doorbells as ``<name>_fd`` descriptor numbers, its
    segments' names as strings; the fields with defaults may be left out."""
    where = "settings.channel"
    if not isinstance(data, dict):
        raise SettingsError(f"{where} must be a JSON object")
    schema: dict[str, tuple[type, ...]] = {}
    required = set()
    for spec_field in dataclasses.fields(ChannelSpec):
        doorbell = spec_field.type in ("Doorbell", Doorbell)
        name = f"{spec_field.name}_fd" if doorbell else spec_field.name
        schema[name] = _INT if doorbell else _STR
        if spec_field.default is dataclasses.MISSING:
            required.add(name)
    _fields(
        {k: v for k, v in data.items() if k in required or k not in schema},
        {k: schema[k] for k in required},
        where,
    )
    for name, value in data.items():
        if type(value) not in schema[name]:
            raise SettingsError(f"{where}.{name}: unexpected {type(value).__name__} value")
    return data


def _config_to_json(config: ServerConfig) -> dict[str, Any]:
    out: dict[str, Any] = {name: getattr(config, name) for name in FRONTEND_FIELDS}
    out["model_repositories"] = [str(p) for p in config.model_repositories]
    out["http_restricted_apis"] = [_restriction_to_json(r) for r in config.http_restricted_apis]
    out["grpc_restricted_protocols"] = [
        _restriction_to_json(r) for r in config.grpc_restricted_protocols
    ]
    out["http_tls"] = _tls_to_json(config.http_tls)
    out["grpc_tls"] = _tls_to_json(config.grpc_tls)
    out["open_apis"] = sorted(api.value for api in config.open_apis)
    return out


def _config_from_json(data: Any) -> dict[str, Any]:
    fields = dict(_fields(data, _CONFIG, "settings.config"))
    fields["model_repositories"] = tuple(
        Path(_string(p, "settings.config.model_repositories")) for p in fields["model_repositories"]
    )
    for name in ("http_restricted_apis", "grpc_restricted_protocols"):
        fields[name] = tuple(
            _restriction_from_json(r, f"settings.config.{name}") for r in fields[name]
        )
    for name in ("http_tls", "grpc_tls"):
        fields[name] = _tls_from_json(fields[name], f"settings.config.{name}")
    fields["open_apis"] = frozenset(
        _api(a, "settings.config.open_apis") for a in fields["open_apis"]
    )
    return fields


def _restriction_to_json(restriction: Restriction) -> dict[str, Any]:
    return {
        "apis": sorted(api.value for api in restriction.apis),
        "key": restriction.key,
        "value": restriction.value,
        "spelled": restriction.spelled,
    }


def _restriction_from_json(data: Any, where: str) -> Restriction:
    fields = _fields(data, _RESTRICTION, where)
    apis = frozenset(_api(a, f"{where}.apis") for a in fields["apis"])
    return Restriction(apis, fields["key"], fields["value"], fields["spelled"])


def _tls_to_json(tls: TlsSettings | None) -> dict[str, Any] | None:
    if tls is None:
        return None
    return {
        "cert_file": str(tls.cert_file),
        "key_file": str(tls.key_file),
        "root_cert_file": None if tls.root_cert_file is None else str(tls.root_cert_file),
        "require_client_cert": tls.require_client_cert,
    }


def _tls_from_json(data: Any, where: str) -> TlsSettings | None:
    if data is None:
        return None
    fields = _fields(data, _TLS, where)
    root = fields["root_cert_file"]
    return TlsSettings(
        Path(fields["cert_file"]),
        Path(fields["key_file"]),
        None if root is None else Path(root),
        fields["require_client_cert"],
    )


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise SettingsError(f"{where} must hold strings")
    return value


def _api(value: Any, where: str) -> Api:
    name = _string(value, where)
    try:
        return Api(name)
    except ValueError:
        raise SettingsError(f"{where}: unknown API group {name!r}") from None
