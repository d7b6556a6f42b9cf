"""Paths named by a model's configuration or by a load request, confined to the model.

A configuration can arrive over the network (the load API's ``config`` override), so every file
name it holds is a relative path that must stay inside the model directory: no absolute path, no
``..``, no empty part, and, once resolved (symlinks followed), still under the directory.
"""

from __future__ import annotations

from pathlib import Path

from inferd.codecs.model_config import ModelConfig
from inferd.errors import ConfigError

MAX_RELATIVE_PATH_BYTES = 1024
MAX_PATH_PART_BYTES = 255
MAX_PATH_DEPTH = 16
MODEL_DIRECTORY_VARIABLE = "$$TRITON_MODEL_DIRECTORY"
_EXECUTION_ENV_PATH = "EXECUTION_ENV_PATH"


def relative_parts(rel: str, what: str) -> tuple[str, ...]:
    """The parts of ``rel``, a relative POSIX path that cannot leave the directory it is
    joined to; raise :class:`ConfigError` naming ``what`` otherwise."""

    def refuse(why: str) -> ConfigError:
        return ConfigError(f"{what} {rel!r} {why}")

    if not rel:
        raise refuse("is empty")
    if len(rel.encode("utf-8", "surrogatepass")) > MAX_RELATIVE_PATH_BYTES:
        raise refuse(f"is longer than {MAX_RELATIVE_PATH_BYTES} bytes")
    if "\\" in rel or any(ord(c) < 0x20 or ord(c) == 0x7F for c in rel):
        raise refuse("must not contain '\\' or control characters")
    if rel.startswith("/"):
        raise refuse("must be a relative path")
    parts = rel.split("/")
    if len(parts) > MAX_PATH_DEPTH:
        raise refuse(f"is more than {MAX_PATH_DEPTH} levels deep")
    for part in parts:
        if part in ("", ".", ".."):
            raise refuse("must not contain empty, '.' or '..' parts")
        if len(part.encode("utf-8", "surrogatepass")) > MAX_PATH_PART_BYTES:
            raise refuse(f"has a part longer than {MAX_PATH_PART_BYTES} bytes")
    return tuple(parts)


def is_inside(path: Path, base: Path) -> bool:
    """True if ``path``, with symlinks resolved, is ``base`` or lies under it."""
    try:
        path.resolve().relative_to(base.resolve())
    except ValueError:
        return False
    return True


def resolve_inside(base: Path, rel: str, what: str) -> Path:
    """``base / rel`` after checking ``rel`` and that the resolved path stays under ``base``."""
    path = base.joinpath(*relative_parts(rel, what))
    if not is_inside(path, base):
        hint = ""
        if path.is_symlink():
            hint = (
                "; it is a symbolic link leading out of the folder: copy or hard-link the file "
                "into it instead"
            )
        raise ConfigError(f"{what} {rel!r} resolves outside {base}{hint}")
    return path


def model_file_inside(version_dir: Path, filename: str, what: str) -> Path:
    """The model file ``filename`` of a version (inside its folder of the same name when that is
    a folder, as ONNX allows), checked with :func:`resolve_inside` to stay in ``version_dir``."""
    path = resolve_inside(version_dir, filename, what)
    inner = path / filename
    if path.is_dir() and inner.exists():
        return resolve_inside(path, filename, what)
    return path


def check_config_paths(config: ModelConfig) -> None:
    """Refuse a configuration whose file names could leave the model directory.

    Covers ``default_model_filename``, ``cc_model_filenames``, outputs' ``label_filename``,
    warm-up ``input_data_file`` and the Python models' ``EXECUTION_ENV_PATH`` parameter.
    """
    name = config.name
    if config.default_model_filename:
        relative_parts(config.default_model_filename, f"model '{name}': default_model_filename")
    for key, filename in config.cc_model_filenames.items():
        relative_parts(filename, f"model '{name}': cc_model_filenames[{key!r}]")
    for output in config.output:
        if output.label_filename:
            relative_parts(
                output.label_filename, f"model '{name}': output '{output.name}' label_filename"
            )
    for warmup in config.model_warmup:
        for input_name, item in warmup.inputs.items():
            if item.WhichOneof("input_data_type") == "input_data_file":
                relative_parts(
                    item.input_data_file,
                    f"model '{name}': warmup '{warmup.name}' input '{input_name}' input_data_file",
                )
    if _EXECUTION_ENV_PATH in config.parameters:
        value = config.parameters[_EXECUTION_ENV_PATH].string_value
        prefix = MODEL_DIRECTORY_VARIABLE + "/"
        if not value.startswith(prefix):
            raise ConfigError(
                f"model '{name}': parameter {_EXECUTION_ENV_PATH} {value!r} must name a file "
                f"inside the model directory, as '{prefix}<path>'"
            )
        relative_parts(value[len(prefix) :], f"model '{name}': parameter {_EXECUTION_ENV_PATH}")


__all__ = [
    "MAX_PATH_DEPTH",
    "MAX_PATH_PART_BYTES",
    "MAX_RELATIVE_PATH_BYTES",
    "MODEL_DIRECTORY_VARIABLE",
    "check_config_paths",
    "is_inside",
    "model_file_inside",
    "relative_parts",
    "resolve_inside",
]
