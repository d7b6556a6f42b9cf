"""Repository layout, config file selection and the backend registry."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from inferd.backends.base import LoadContext, LoadedModel
from inferd.backends.registry import BackendRegistry, default_registry
from inferd.codecs.model_config import ModelConfig
from inferd.errors import ConfigError, UnavailableError
from inferd.repository.config import read_model_config
from inferd.repository.layout import duplicated, find_models, list_versions


def test_list_versions_ignores_leading_zero_and_non_numeric(tmp_path: Path) -> None:
    for name in ("1", "3", "10", "0", "01", "abc", "2a"):
        (tmp_path / name).mkdir()
    (tmp_path / "7").write_text("a file, not a version")
    assert list_versions(tmp_path) == [1, 3, 10]


def test_list_versions_of_missing_dir_is_empty(tmp_path: Path) -> None:
    assert list_versions(tmp_path / "nope") == []


def test_find_models_reports_names_in_several_roots(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for path in (a / "m1", a / "shared", b / "shared", b / "m2", a / ".hidden"):
        path.mkdir(parents=True)
    (a / "README.md").write_text("not a model")
    found = find_models([a, b, tmp_path / "missing"])
    assert sorted(found) == ["m1", "m2", "shared"]
    assert found["shared"] == [a / "shared", b / "shared"]
    assert duplicated(found) == {"shared": [a / "shared", b / "shared"]}


def test_read_config_pbtxt(tmp_path: Path) -> None:
    (tmp_path / "config.pbtxt").write_text('name: "m" max_batch_size: 2')
    assert read_model_config(tmp_path).max_batch_size == 2


def test_missing_config_is_empty(tmp_path: Path) -> None:
    assert read_model_config(tmp_path) == ModelConfig()


def test_custom_config_name_and_fallback(tmp_path: Path) -> None:
    (tmp_path / "config.pbtxt").write_text("max_batch_size: 2")
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "big.pbtxt").write_text("max_batch_size: 64")
    assert read_model_config(tmp_path, config_name="big").max_batch_size == 64
    assert read_model_config(tmp_path, config_name="absent").max_batch_size == 2


def test_override_json_replaces_the_file(tmp_path: Path) -> None:
    (tmp_path / "config.pbtxt").write_text("max_batch_size: 2")
    cfg = read_model_config(tmp_path, override_json='{"max_batch_size": "16"}')
    assert cfg.max_batch_size == 16


def test_bad_config_error_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "config.pbtxt").write_text("max_batch_size: 2\nnot_a_field: 1\n")
    with pytest.raises(ConfigError, match=r"config\.pbtxt:2:1.*not_a_field"):
        read_model_config(tmp_path)


class _FakeBackend:
    name = "fake"
    platforms: tuple[str, ...] = ("fake_platform",)
    default_model_filename = "model.fake"

    def auto_complete(self, config: Any, model_path: Path, *, default_max_batch_size: int) -> None:
        pass

    def load(self, ctx: LoadContext) -> LoadedModel:
        raise NotImplementedError


def test_registry_by_backend_and_platform() -> None:
    registry = BackendRegistry()
    backend = _FakeBackend()
    registry.register(backend)
    assert registry.names() == ["fake"]
    assert registry.for_config(ModelConfig(backend="fake")) is backend
    assert registry.for_config(ModelConfig(platform="fake_platform")) is backend
    with pytest.raises(ConfigError, match=r"unsupported backend 'other'; available backends: fake"):
        registry.for_config(ModelConfig(backend="other"))
    with pytest.raises(ConfigError, match=r"unsupported platform 'p'; available backends: fake"):
        registry.for_config(ModelConfig(platform="p"))
    with pytest.raises(ConfigError, match="neither a backend nor a platform"):
        registry.for_config(ModelConfig())


def test_lazy_backend_is_built_once_and_missing_runtime_names_the_extra() -> None:
    registry = BackendRegistry()
    calls: list[int] = []

    def build() -> _FakeBackend:
        calls.append(1)
        return _FakeBackend()

    def broken() -> _FakeBackend:
        raise ImportError("No module named 'torch'")

    registry.register_lazy("fake", build, platforms=("fake_platform",))
    registry.register_lazy("pytorch", broken, platforms=("pytorch_libtorch",), extra="torch")
    assert calls == []
    first = registry.for_config(ModelConfig(platform="fake_platform"))
    assert registry.get("fake") is first
    assert calls == [1]
    with pytest.raises(UnavailableError, match=r"pip install 'inferd\[torch\]'"):
        registry.get("pytorch")


def test_entry_point_backends_resolve_by_platform_after_import() -> None:
    registry = BackendRegistry()
    registry.register_lazy("fake", _FakeBackend, platforms_known=False)
    assert registry.backend_name_for_platform("fake_platform") == "fake"


def test_default_registry_has_onnxruntime() -> None:
    registry = default_registry(load_entry_points=False)
    assert "onnxruntime" in registry.names()
    backend = registry.for_config(ModelConfig(platform="onnxruntime_onnx"))
    assert backend.name == "onnxruntime"
    assert backend.default_model_filename == "model.onnx"
    assert "onnxruntime" in default_registry().names()
