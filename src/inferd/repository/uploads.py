"""Model files uploaded with a load request (``file:<path>`` parameters).

Uploads are off unless the operator enables them, and uploads that would run code need a second
opt-in; what counts as code (judged by the bytes and the effective configuration, not by file
names alone) is decided in ``repository/trust.py``. Every file is written below a directory this
module created for that upload, inside one root per manager; clean-up removes only directories
it created, never anything derived from a request.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from inferd.codecs.model_config import ModelConfig
from inferd.core.names import check_model_name
from inferd.errors import (
    ConfigError,
    InvalidArgumentError,
    ModelLoadError,
    PermissionDeniedError,
)
from inferd.repository.paths import MAX_PATH_PART_BYTES, is_inside, relative_parts
from inferd.repository.trust import (
    CODE_SUFFIXES,
    BackendForPlatform,
    config_runs_code,
    file_runs_code,
)

_log = logging.getLogger("inferd.repository")

Vet = Callable[[ModelConfig], None]

MODEL_UPLOAD_FLAG = "--allow-model-upload"
CODE_UPLOAD_FLAG = "--allow-code-upload"


def upload_parts(name: str, files: Mapping[str, bytes]) -> dict[tuple[str, ...], bytes]:
    """Check every ``file:`` key (the part after ``file:``) and return contents by path parts."""
    checked: dict[tuple[str, ...], bytes] = {}
    for key, content in files.items():
        where = f"failed to load '{name}', failed to poll from model repository"
        if any(
            len(part.encode("utf-8", "surrogatepass")) > MAX_PATH_PART_BYTES
            for part in key.split("/")
        ):
            # Triton answers this case (a name no file system takes) with INTERNAL, and
            # tritonclient's model-control example checks that status and text
            raise ModelLoadError(
                f"{where}: load parameter 'file:{key[:32]}...' names a file or directory longer "
                f"than {MAX_PATH_PART_BYTES} bytes"
            )
        try:
            parts = relative_parts(key, "file override path")
        except ConfigError as exc:
            raise InvalidArgumentError(
                f"{where}: invalid load parameter 'file:{key}': {exc}"
            ) from None
        checked[parts] = content
    return checked


def check_upload_allowed(
    name: str,
    files: Mapping[tuple[str, ...], bytes],
    config: ModelConfig,
    backend_for_platform: BackendForPlatform,
    *,
    allow_model_upload: bool,
    allow_code_upload: bool,
) -> None:
    """Raise :class:`PermissionDeniedError` unless the operator enabled this kind of upload.

    ``config`` is the parsed ``config`` override (a ``ModelConfig``); ``backend_for_platform``
    maps a platform name to a backend name (or None).
    """
    if not allow_model_upload:
        raise PermissionDeniedError(
            f"failed to load '{name}': uploading model files ('file:' load parameters) is "
            f"disabled; start the server with {MODEL_UPLOAD_FLAG} to enable it"
        )
    if allow_code_upload:
        return
    for parts, content in files.items():
        path = "/".join(parts)
        what = file_runs_code(path, content)
        if what is not None:
            raise PermissionDeniedError(
                f"failed to load '{name}': uploaded file '{path}' is {what} and would run code "
                f"on the server; start the server with {CODE_UPLOAD_FLAG} (as well as "
                f"{MODEL_UPLOAD_FLAG}) to allow it"
            )
    check_no_code(name, config, backend_for_platform)


def check_no_code(name: str, config: ModelConfig, backend_for_platform: BackendForPlatform) -> None:
    """Refuse an uploaded model whose configuration makes it run code (its backend, platform,
    custom operators or parameters)."""
    what = config_runs_code(config, backend_for_platform)
    if what is not None:
        raise PermissionDeniedError(
            f"failed to load '{name}': an uploaded model using {what} runs code on the "
            f"server; start the server with {CODE_UPLOAD_FLAG} (as well as "
            f"{MODEL_UPLOAD_FLAG}) to allow it"
        )


def no_code_vet(name: str, backend_for_platform: BackendForPlatform) -> Vet:
    """:func:`check_no_code` for ``prepare``'s ``vet``: an uploaded model's config is judged
    again once auto-complete knows its backend (it may pick one from the files) and once
    complete."""

    def vet(config: ModelConfig) -> None:
        check_no_code(name, config, backend_for_platform)

    return vet


class UploadArea:
    """The directories uploads are written to: a root made on first use, one fresh
    subdirectory per upload. Not thread-safe: call from one thread at a time per upload."""

    def __init__(self) -> None:
        self._root: Path | None = None
        self._owned: dict[Path, Path] = {}  # model directory -> the upload directory holding it

    @property
    def root(self) -> Path | None:
        return self._root

    def owned(self) -> list[Path]:
        return sorted(self._owned)

    def write(self, name: str, files: Mapping[tuple[str, ...], bytes]) -> Path:
        """Write ``files`` into a fresh ``<upload>/<name>/`` and return that model directory.

        Blocking. Raises :class:`InvalidArgumentError` (nothing left behind) if a file cannot
        be written where it belongs.
        """
        check_model_name(name)
        if self._root is None:
            self._root = Path(tempfile.mkdtemp(prefix="inferd-uploads-")).resolve()
        upload = Path(tempfile.mkdtemp(prefix="upload-", dir=self._root))
        model_dir = upload / name
        self._owned[model_dir] = upload
        current: tuple[str, ...] = ()
        try:
            model_dir.mkdir()
            for current, content in files.items():
                _write_file(model_dir, current, content)
        except InvalidArgumentError:
            self.remove(model_dir)
            raise
        except OSError as exc:
            self.remove(model_dir)
            raise InvalidArgumentError(
                f"failed to load '{name}', file override '{'/'.join(current)}' cannot be "
                f"written: {exc.strerror or exc}"
            ) from None
        return model_dir

    def remove(self, model_dir: Path) -> None:
        """Delete the upload holding ``model_dir``; anything this area did not create is left
        alone (and logged)."""
        upload = self._owned.pop(model_dir, None)
        if upload is None or self._root is None or upload.parent != self._root:
            _log.error("refusing to delete %s: not an upload directory of this server", model_dir)
            return
        shutil.rmtree(upload, ignore_errors=True)

    def close(self) -> None:
        """Delete every upload and the root."""
        for model_dir in list(self._owned):
            self.remove(model_dir)
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None


def _write_file(model_dir: Path, parts: tuple[str, ...], content: bytes) -> None:
    target = model_dir.joinpath(*parts)
    target.parent.mkdir(parents=True, exist_ok=True)
    if not is_inside(target.parent, model_dir):
        raise InvalidArgumentError(
            f"failed to load '{model_dir.name}', file override '{'/'.join(parts)}' resolves "
            "outside the model directory"
        )
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(target, flags, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(content)


__all__ = [
    "CODE_SUFFIXES",
    "CODE_UPLOAD_FLAG",
    "MODEL_UPLOAD_FLAG",
    "UploadArea",
    "check_no_code",
    "check_upload_allowed",
    "no_code_vet",
    "upload_parts",
]
