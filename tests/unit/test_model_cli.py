"""``inferd model``: its help, and the one-line errors of a bad command line (no server needed:
each is refused before any call)."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferd.cli.main import main


def test_help_names_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["model", "--help"])
    out = capsys.readouterr().out
    for command in ("rollback", "unpin", "status"):
        assert command in out
    with pytest.raises(SystemExit):
        main(["model", "rollback", "--help"])
    out = capsys.readouterr().out
    assert "--to VERSION" in out
    assert "pinned" in out
    assert "--ssl-grpc" not in out  # HTTP only


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["rollback", "m", "--to", "0"], "argument --to: '0' is not a version number"),
        (["rollback", "m", "--ssl-grpc-use-ssl"], "unrecognized arguments: --ssl-grpc-use-ssl"),
    ],
)
def test_argument_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["model", *argv])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_bad_connection_flags_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("INFERD_ADMIN_TOKEN", raising=False)
    assert main(["model", "unpin", "m", "--ssl-https-verify-peer", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "inferd model unpin: error: --ssl-https-verify-peer applies to an HTTPS server: give "
        "-u https://HOST:PORT"
    )
    token = tmp_path / "token"
    token.write_text("secret")
    argv = ["model", "status", "--admin-token-file", str(token), "-H", "Authorization:Bearer x"]
    assert main(argv) == 2
    assert "would both be sent" in capsys.readouterr().err
    assert main(["model", "rollback", "m", "--admin-token-file", str(tmp_path / "none")]) == 2
    assert "cannot read --admin-token-file" in capsys.readouterr().err
