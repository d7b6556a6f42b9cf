"""The security options: parsed once at the edge, refused loudly when inconsistent, and the
startup warning for a management API open to the network."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferd.cli.main import build_parser
from inferd.cli.serve import config_from_args
from inferd.errors import InferdError, PermissionDeniedError, UnauthenticatedError
from inferd.frontends.access import AccessPolicy, Api, parse_restriction
from inferd.repository.manager import ControlMode
from inferd.server.config import ServerConfig
from inferd.server.exposure import exposure_warnings, is_loopback


def _config(tmp_path: Path, *flags: str) -> ServerConfig:
    args = build_parser().parse_args(["serve", "--model-repository", str(tmp_path), *flags])
    return config_from_args(args)


def test_defaults_are_closed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INFERD_ADMIN_TOKEN", raising=False)
    cfg = _config(tmp_path)
    assert not cfg.allow_model_upload
    assert not cfg.allow_code_upload
    assert cfg.admin_token is None
    assert cfg.http_tls is None
    assert cfg.grpc_tls is None
    assert cfg.http_max_json_input_bytes < cfg.http_max_input_bytes


def test_parse_restriction_like_triton() -> None:
    r = parse_restriction("model-repository,statistics:Admin-Key=s3cret")
    assert r.apis == {Api.MODEL_REPOSITORY, Api.STATISTICS}
    assert (r.key, r.value, r.shown_key) == ("admin-key", "s3cret", "Admin-Key")
    for bad in ("model-repository", "model-repository:key", ":k=v", "nope:k=v"):
        with pytest.raises(InferdError):
            parse_restriction(bad)


def test_an_api_is_restricted_once() -> None:
    with pytest.raises(InferdError, match="more than once"):
        AccessPolicy((parse_restriction("inference:a=1"), parse_restriction("inference:b=2")))


def test_policy_checks_header_and_token() -> None:
    policy = AccessPolicy((parse_restriction("statistics:k=v"),), admin_token="tok")
    assert not policy.guards(Api.INFERENCE)
    assert policy.guards(Api.STATISTICS)
    assert policy.guards(Api.MODEL_REPOSITORY)  # the token guards the admin groups
    headers: dict[str, str] = {}
    with pytest.raises(PermissionDeniedError, match="expecting header 'k'"):
        policy.check(Api.STATISTICS, headers.get)
    policy.check(Api.STATISTICS, {"k": "v"}.get)
    with pytest.raises(UnauthenticatedError):
        policy.check(Api.MODEL_REPOSITORY, {"authorization": "Bearer nope"}.get)
    with pytest.raises(UnauthenticatedError):
        policy.check(Api.MODEL_REPOSITORY, {"authorization": "Basic tok"}.get)
    policy.check(Api.MODEL_REPOSITORY, {"authorization": "Bearer tok"}.get)


def test_token_from_file_and_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("from-file\n")
    monkeypatch.setenv("INFERD_ADMIN_TOKEN", "from-env")
    assert _config(tmp_path).admin_token == "from-env"
    assert _config(tmp_path, "--admin-token-file", str(token_file)).admin_token == "from-file"
    token_file.write_text("  \n")
    with pytest.raises(InferdError, match="is empty"):
        _config(tmp_path, "--admin-token-file", str(token_file))
    assert "from-env" not in repr(_config(tmp_path))  # never logged with the config


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--allow-code-upload"], "needs --allow-model-upload"),
        (["--allow-model-upload"], "only applies to --model-control-mode=explicit"),
        (["--grpc-use-ssl"], "needs --grpc-server-cert"),
        (["--http-server-cert", "c.pem"], "TLS is off"),
        (["--http-max-json-input-size", "0"], "must be > 0"),
        (["--http-max-connections", "0"], ">= 1"),
        (["--http-restricted-api", "inference"], "API\\[,API...\\]:KEY=VALUE"),
    ],
)
def test_inconsistent_options_are_refused(tmp_path: Path, flags: list[str], message: str) -> None:
    with pytest.raises(InferdError, match=message):
        _config(tmp_path, *flags)


def test_mutual_tls_needs_a_root_certificate(tmp_path: Path) -> None:
    with pytest.raises(InferdError, match="--http-root-cert"):
        _config(
            tmp_path,
            "--http-use-ssl-mutual",
            "--http-server-cert",
            "c.pem",
            "--http-server-key",
            "k.pem",
        )


def test_loopback_addresses() -> None:
    assert is_loopback("127.0.0.1")
    assert is_loopback("::1")
    assert is_loopback("localhost")
    assert not is_loopback("0.0.0.0")
    assert not is_loopback("::")
    assert not is_loopback("10.0.0.5")


def test_open_management_api_is_warned_about(tmp_path: Path) -> None:
    base = ServerConfig((tmp_path,), model_control_mode=ControlMode.EXPLICIT)
    warnings = exposure_warnings(base)
    assert len(warnings) == 2
    assert "load and unload models" in warnings[0]
    uploads = ServerConfig(
        (tmp_path,),
        model_control_mode=ControlMode.EXPLICIT,
        allow_model_upload=True,
        allow_code_upload=True,
        grpc_address="127.0.0.1",
    )
    (only,) = exposure_warnings(uploads)
    assert "HTTP" in only
    assert "run code" in only
    guarded = ServerConfig((tmp_path,), model_control_mode=ControlMode.EXPLICIT, admin_token="t")
    assert exposure_warnings(guarded) == []
    restricted = ServerConfig(
        (tmp_path,),
        model_control_mode=ControlMode.EXPLICIT,
        http_restricted_apis=(parse_restriction("model-repository:k=v"),),
        allow_grpc=False,
    )
    assert exposure_warnings(restricted) == []
    assert exposure_warnings(ServerConfig((tmp_path,))) == []  # no load/unload in mode none
