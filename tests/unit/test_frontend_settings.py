"""The settings the engine sends a front end: JSON with exactly the known fields, no pickle."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import pytest

from inferd.frontends.access import Api, Restriction
from inferd.frontends.tls import TlsSettings
from inferd.server.config import ServerConfig
from inferd.server.frontends.settings import (
    FRONTEND_FIELDS,
    LENGTH,
    Settings,
    SettingsError,
    frontend_config,
)


def _settings(**config: Any) -> Settings:
    full = ServerConfig(
        model_repositories=(Path("/models/a"), Path("/models/b")),
        exit_timeout_secs=12.5,
        http_max_connections=7,
        http_restricted_apis=(
            Restriction(
                frozenset({Api.MODEL_REPOSITORY, Api.HEALTH}), "x-admin", "s3cret", "X-Admin"
            ),
        ),
        grpc_restricted_protocols=(Restriction(frozenset({Api.INFERENCE}), "key", "v"),),
        http_tls=TlsSettings(
            Path("/tls/cert.pem"), Path("/tls/key.pem"), Path("/tls/ca.pem"), True
        ),
        admin_token="admin-token",
        feedback_token=None,
        open_apis=frozenset({Api.ROLLOUT}),
        allow_pickle_models=True,  # the engine's alone: not sent
        **config,
    )
    return Settings(
        index=1,
        config=frontend_config(full),
        channel={
            "incoming": "inferd-fe-1-a",
            "outgoing": "inferd-fe-1-b",
            "wake_fd": 5,
            "peer_fd": 6,
        },
        slot_bytes=16384,
        http_port=8000,
        grpc_port=None,
        openai_port=9000,
        local_infer=True,
        connection_fds=(7, 8, 9),
    )


def test_settings_round_trip_through_json() -> None:
    settings = _settings()
    again = Settings.from_json(settings.to_json())
    assert again == settings
    assert again.config.http_tls == settings.config.http_tls
    assert again.config.http_restricted_apis == settings.config.http_restricted_apis
    assert again.config.http_access().opened == frozenset({Api.ROLLOUT})


def test_the_encoding_is_a_length_and_json_of_the_front_end_fields_only() -> None:
    blob = _settings().encode()
    (length,) = LENGTH.unpack(blob[: LENGTH.size])
    assert length == len(blob) - LENGTH.size
    document = json.loads(blob[LENGTH.size :])
    assert set(document["config"]) == set(FRONTEND_FIELDS)
    assert "allow_pickle_models" not in document["config"]
    assert document["config"]["http_tls"]["cert_file"] == "/tls/cert.pem"


def _document() -> dict[str, Any]:
    return json.loads(_settings().to_json())  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ((), "settings: unknown field(s) surprise"),
        (("config",), "settings.config: unknown field(s) surprise"),
        (("config", "http_tls"), "settings.config.http_tls: unknown field(s) surprise"),
        (("channel",), "settings.channel: unknown field(s) surprise"),
    ],
)
def test_an_unknown_field_is_refused_by_name(where: tuple[str, ...], message: str) -> None:
    document = _document()
    target = document
    for key in where:
        target = target[key]
    target["surprise"] = 1
    with pytest.raises(SettingsError) as refused:
        Settings.from_json(json.dumps(document))
    assert message in str(refused.value)


def test_an_unknown_field_of_a_restriction_is_refused() -> None:
    document = _document()
    document["config"]["http_restricted_apis"][0]["extra"] = True
    with pytest.raises(SettingsError, match=r"http_restricted_apis: unknown field\(s\) extra"):
        Settings.from_json(json.dumps(document))


def test_a_missing_field_is_refused_by_name() -> None:
    document = _document()
    del document["config"]["http_max_connections"]
    with pytest.raises(SettingsError, match=r"missing field\(s\) http_max_connections"):
        Settings.from_json(json.dumps(document))
    document = _document()
    del document["channel"]["wake_fd"]
    with pytest.raises(SettingsError, match=r"settings\.channel: missing field\(s\) wake_fd"):
        Settings.from_json(json.dumps(document))


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        (("slot_bytes",), "16384", "settings.slot_bytes"),
        (("index",), True, "settings.index"),  # a JSON true is no count
        (("config", "http_max_connections"), 7.5, "settings.config.http_max_connections"),
        (("config", "admin_token"), 1, "settings.config.admin_token"),
        (("channel", "peer_fd"), "6", "settings.channel.peer_fd"),
    ],
)
def test_a_mistyped_field_is_refused_by_name(
    path: tuple[str, ...], value: object, field: str
) -> None:
    document = _document()
    target = document
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(SettingsError) as refused:
        Settings.from_json(json.dumps(document))
    assert field in str(refused.value)


def test_an_unknown_api_group_and_a_bad_descriptor_are_refused() -> None:
    document = _document()
    document["config"]["open_apis"] = ["everything"]
    with pytest.raises(SettingsError, match="unknown API group 'everything'"):
        Settings.from_json(json.dumps(document))
    document = _document()
    document["connection_fds"] = [7, -1]
    with pytest.raises(SettingsError, match="connection_fds"):
        Settings.from_json(json.dumps(document))


def test_the_config_checks_still_apply() -> None:
    document = _document()
    document["config"]["model_repositories"] = []
    with pytest.raises(SettingsError, match=r"settings\.config: at least one --model-repository"):
        Settings.from_json(json.dumps(document))


def test_a_pickle_is_not_read() -> None:
    """What the engine sent before: it would run code on unpickling; now it is refused."""
    with pytest.raises(SettingsError, match="not JSON"):
        Settings.from_json(pickle.dumps({"index": 1}))
