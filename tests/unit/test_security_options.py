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


@pytest.mark.parametrize("mode", list(ControlMode))
def test_every_open_admin_group_is_warned_about_in_every_mode(
    tmp_path: Path, mode: ControlMode
) -> None:
    opened = ServerConfig(
        (tmp_path,),
        model_control_mode=mode,
        allow_shared_memory=True,
        open_apis=frozenset({Api.ROLLOUT, Api.FEEDBACK}),
    )
    http, grpc = exposure_warnings(opened)
    assert http.startswith("the HTTP API on 0.0.0.0 is open to the network")
    assert grpc.startswith("the gRPC API on 0.0.0.0 is open to the network")
    for group in ("(shared-memory)", "(rollout)", "(feedback)"):
        assert group in http
    assert "(shared-memory)" in grpc
    assert "(rollout)" not in grpc  # traffic policies are served over HTTP only
    assert ("load and unload models (model-repository)" in http) is (mode is ControlMode.EXPLICIT)
    assert "drop --open-api feedback rollout" in http
    repository = "model-repository," if mode is ControlMode.EXPLICIT else ""
    assert f"--http-restricted-api feedback,{repository}rollout,shared-memory:KEY=VALUE" in http
    # the opened groups need no token even when one is set: still open, still warned about
    (only,) = exposure_warnings(
        ServerConfig(
            (tmp_path,), model_control_mode=mode, admin_token="t", open_apis=opened.open_apis
        )
    )
    assert "(rollout)" in only
    assert "(feedback)" in only
    assert "(shared-memory)" not in only
    # closed by default, guarded by a token, or restricted: nothing to warn about
    assert exposure_warnings(ServerConfig((tmp_path,), model_control_mode=mode)) == (
        exposure_warnings(ServerConfig((tmp_path,), model_control_mode=ControlMode.EXPLICIT))
        if mode is ControlMode.EXPLICIT
        else []
    )
    restricted = ServerConfig(
        (tmp_path,),
        model_control_mode=mode,
        open_apis=opened.open_apis,
        http_restricted_apis=(parse_restriction("rollout,feedback,model-repository:k=v"),),
        grpc_restricted_protocols=(parse_restriction("model-repository:k=v"),),
    )
    assert exposure_warnings(restricted) == []
    loopback = ServerConfig(
        (tmp_path,),
        model_control_mode=mode,
        allow_shared_memory=True,
        open_apis=opened.open_apis,
        http_address="127.0.0.1",
        grpc_address="::1",
    )
    assert exposure_warnings(loopback) == []


def test_the_traffic_steering_groups_are_closed_without_a_token() -> None:
    closed = AccessPolicy()
    for api in (Api.ROLLOUT, Api.FEEDBACK):
        assert closed.guards(api)
        assert closed.is_closed(api)
        with pytest.raises(PermissionDeniedError, match=f"--open-api {api.value}"):
            closed.check(api, {"authorization": "Bearer anything"}.get)
    for api in (Api.MODEL_REPOSITORY, Api.SHARED_MEMORY, Api.TRACE, Api.LOGGING):
        assert not closed.guards(api)  # Triton's groups stay open, as in Triton
    opened = AccessPolicy(opened=frozenset({Api.ROLLOUT}))
    opened.check(Api.ROLLOUT, {}.get)
    assert opened.is_closed(Api.FEEDBACK)
    restricted = AccessPolicy((parse_restriction("rollout:k=v"),))
    restricted.check(Api.ROLLOUT, {"k": "v"}.get)  # a restriction opens it to its header
    with pytest.raises(PermissionDeniedError, match="expecting header 'k'"):
        restricted.check(Api.ROLLOUT, {}.get)
    tokens = AccessPolicy(admin_token="a", feedback_token="f")
    tokens.check(Api.FEEDBACK, {"authorization": "Bearer f"}.get)
    tokens.check(Api.FEEDBACK, {"authorization": "Bearer a"}.get)
    tokens.check(Api.ROLLOUT, {"authorization": "Bearer a"}.get)
    with pytest.raises(UnauthenticatedError, match="admin token"):
        tokens.check(Api.ROLLOUT, {"authorization": "Bearer f"}.get)
    with pytest.raises(UnauthenticatedError, match="feedback token or admin token"):
        tokens.check(Api.FEEDBACK, {}.get)
    with pytest.raises(InferdError, match="only feedback and rollout are closed"):
        AccessPolicy(opened=frozenset({Api.INFERENCE}))


def test_feedback_token_and_open_api_flags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("INFERD_FEEDBACK_TOKEN", raising=False)
    assert _config(tmp_path).feedback_token is None
    assert _config(tmp_path).open_apis == frozenset()
    token_file = tmp_path / "feedback"
    token_file.write_text("fb\n")
    assert _config(tmp_path, "--feedback-token-file", str(token_file)).feedback_token == "fb"
    monkeypatch.setenv("INFERD_FEEDBACK_TOKEN", "from-env")
    assert _config(tmp_path).feedback_token == "from-env"
    assert "from-env" not in repr(_config(tmp_path))
    monkeypatch.setenv("INFERD_FEEDBACK_TOKEN", " ")
    with pytest.raises(InferdError, match="INFERD_FEEDBACK_TOKEN is set but empty"):
        _config(tmp_path)
    monkeypatch.delenv("INFERD_FEEDBACK_TOKEN")
    both = _config(tmp_path, "--open-api", "rollout", "--open-api", "feedback")
    assert both.open_apis == {Api.ROLLOUT, Api.FEEDBACK}
    with pytest.raises(SystemExit):
        _config(tmp_path, "--open-api", "inference")
    assert "invalid choice: 'inference'" in capsys.readouterr().err
    with pytest.raises(InferdError, match="the gRPC API has no rollout calls"):
        _config(tmp_path, "--grpc-restricted-protocol", "rollout:k=v")
