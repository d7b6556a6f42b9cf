"""TLS settings of a front end: the server's certificate and, for mutual TLS, the client CA."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from inferd.errors import InvalidArgumentError


@dataclass(frozen=True, slots=True)
class TlsSettings:
    cert_file: Path
    key_file: Path
    root_cert_file: Path | None = None  # CA bundle that client certificates must chain to
    require_client_cert: bool = False  # mutual TLS

    def __post_init__(self) -> None:
        if self.require_client_cert and self.root_cert_file is None:
            raise InvalidArgumentError("mutual TLS needs a root certificate to verify clients with")

    def read(self) -> tuple[bytes, bytes, bytes | None]:
        """The certificate chain, private key and client CA as PEM bytes (blocking)."""

        def load(path: Path, what: str) -> bytes:
            try:
                return path.read_bytes()
            except OSError as exc:
                raise InvalidArgumentError(f"cannot read the TLS {what} '{path}': {exc}") from exc

        root = load(self.root_cert_file, "root certificate") if self.root_cert_file else None
        return load(self.cert_file, "certificate"), load(self.key_file, "key"), root


__all__ = ["TlsSettings"]
