"""Read a model's configuration from its directory (or from a JSON override)."""

from __future__ import annotations

from pathlib import Path

from inferd.codecs.model_config import ModelConfig, parse_json_config, parse_pbtxt
from inferd.errors import ConfigError
from inferd.repository.paths import resolve_inside

CONFIG_FILENAME = "config.pbtxt"
CONFIGS_DIRNAME = "configs"


def config_path(model_dir: Path, config_name: str | None = None) -> Path:
    """The file that holds the configuration: ``configs/<name>.pbtxt`` when a custom config
    name is given and that file exists, else ``config.pbtxt`` (which may be absent)."""
    if config_name:
        custom = resolve_inside(
            model_dir / CONFIGS_DIRNAME, f"{config_name}.pbtxt", "custom model config name"
        )
        if custom.is_file():
            return custom
    return model_dir / CONFIG_FILENAME


def read_model_config(
    model_dir: Path,
    *,
    config_name: str | None = None,
    override_json: str | None = None,
) -> ModelConfig:
    """Parse the model's configuration.

    ``override_json`` (the load API's ``config`` parameter) replaces the file entirely. A model
    without any configuration file yields an empty ``ModelConfig`` for auto-complete to fill.
    """
    if override_json is not None:
        return parse_json_config(override_json, f"override for '{model_dir.name}'")
    path = config_path(model_dir, config_name)
    if not path.exists():
        return ModelConfig()
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"failed to read model configuration {path}: {exc}") from exc
    return parse_pbtxt(text, str(path))
