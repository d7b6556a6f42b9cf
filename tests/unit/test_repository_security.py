"""Confinement of names and paths in the repository: uploads, config file names, clean-up."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

from inferd.backends.registry import default_registry
from inferd.errors import (
    ConfigError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
)
from inferd.repository.loader import LoadOptions
from inferd.repository.manager import ControlMode, RepositoryManager
from inferd.repository.paths import relative_parts, resolve_inside
from inferd.repository.uploads import UploadArea
from tests.helpers.models import ADD_SUB_CONFIG, add_sub_model, write_add_sub

CONFIG = json.dumps({"name": "up", "backend": "onnxruntime", "max_batch_size": 8})


@pytest.mark.parametrize(
    "rel",
    ["", "/etc/passwd", "../x", "a/../../x", "a//b", "a/./b", "a/", "a\\b", "a\x00b", "x/" * 17],
)
def test_relative_parts_refuses_escapes(rel: str) -> None:
    with pytest.raises(ConfigError):
        relative_parts(rel, "test path")


def test_relative_parts_accepts_nested_names() -> None:
    assert relative_parts("1/model.onnx", "p") == ("1", "model.onnx")
    assert relative_parts("1/sub/.hidden", "p") == ("1", "sub", ".hidden")


def test_resolve_inside_refuses_a_symlink_out(tmp_path: Path) -> None:
    base = tmp_path / "model"
    base.mkdir()
    (tmp_path / "secret").write_text("s")
    (base / "link").symlink_to(tmp_path / "secret")
    with pytest.raises(ConfigError, match="resolves outside"):
        resolve_inside(base, "link", "label_filename")
    (base / "labels.txt").write_text("a")
    assert resolve_inside(base, "labels.txt", "label_filename") == base / "labels.txt"


def test_upload_area_writes_and_removes_only_its_own_directories(tmp_path: Path) -> None:
    area = UploadArea()
    model_dir = area.write("up", {("1", "model.onnx"): b"x", ("labels.txt",): b"a"})
    root = area.root
    assert root is not None
    assert (model_dir / "1" / "model.onnx").read_bytes() == b"x"
    assert model_dir.parent.parent == root
    canary = tmp_path / "canary"
    canary.mkdir()
    area.remove(canary / "child")  # not an upload: left alone
    area.remove(canary)
    assert canary.is_dir()
    area.remove(model_dir)
    assert not model_dir.parent.exists()
    assert root.is_dir()
    area.write("up", {("1", "a"): b""})
    area.close()
    assert not root.exists()


def test_upload_area_refuses_bad_names_and_clashing_files() -> None:
    area = UploadArea()
    try:
        with pytest.raises(InvalidArgumentError):
            area.write("../x", {("1", "a"): b""})
        with pytest.raises(InvalidArgumentError, match="cannot be written"):
            area.write("up", {("1",): b"file", ("1", "a"): b"then a child"})
        assert area.owned() == []
        assert area.root is not None
        assert list(area.root.iterdir()) == []
    finally:
        area.close()


def _manager(roots: list[Path], **flags: bool) -> RepositoryManager:
    return RepositoryManager(
        roots, default_registry(), mode=ControlMode.EXPLICIT, options=LoadOptions(), **flags
    )


@pytest.mark.parametrize("name", ["/abs/model", "../escape", "..", ".", "a/b", "", "x\x00"])
async def test_manager_refuses_path_names_on_load_and_unload(tmp_path: Path, name: str) -> None:
    repo = tmp_path / "repo"
    write_add_sub(repo, "simple")
    canary = tmp_path / "canary"
    canary.mkdir()
    (canary / "keep").write_text("k")
    manager = _manager([repo], allow_model_upload=True)
    try:
        with pytest.raises(InvalidArgumentError, match="invalid model name"):
            await manager.load(name, config_json=CONFIG, files={"1/model.onnx": add_sub_model()})
        with pytest.raises(InvalidArgumentError, match="invalid model name"):
            await manager.load(name)
        with pytest.raises(InvalidArgumentError, match="invalid model name"):
            await manager.unload(name)
    finally:
        await manager.close()
    assert (canary / "keep").read_text() == "k"


async def test_uploads_need_the_operator_opt_in(tmp_path: Path) -> None:
    files = {"1/model.onnx": add_sub_model()}
    manager = _manager([tmp_path])
    try:
        with pytest.raises(PermissionDeniedError, match="--allow-model-upload"):
            await manager.load("up", config_json=CONFIG, files=files)
    finally:
        await manager.close()
    manager = _manager([tmp_path], allow_model_upload=True)
    try:
        await manager.load("up", config_json=CONFIG, files=files)
        assert manager.ready_versions("up") == [1]
        for code_files, config in [
            ({"1/model.py": b"import os"}, {"backend": "python"}),
            ({"1/model.pkl": b"x"}, {"backend": "sklearn"}),
            ({"1/model.txt": b"import os"}, {"backend": "python"}),
            (
                {"1/model.onnx": add_sub_model()},
                {
                    "backend": "onnxruntime",
                    "parameters": {
                        "EXECUTION_ENV_PATH": {
                            "string_value": "$$TRITON_MODEL_DIRECTORY/env.tar.gz"
                        }
                    },
                },
            ),
        ]:
            with pytest.raises(PermissionDeniedError, match="--allow-code-upload"):
                await manager.load("code", config_json=json.dumps(config), files=code_files)
    finally:
        await manager.close()


@pytest.mark.parametrize(
    "override",
    [
        {"default_model_filename": "../../x/model.onnx"},
        {"default_model_filename": "/etc/passwd"},
        {"cc_model_filenames": {"k": "../model.onnx"}},
        {
            "output": [
                {
                    "name": "OUTPUT0",
                    "data_type": "TYPE_INT32",
                    "dims": [16],
                    "label_filename": "../../../../etc/hostname",
                }
            ]
        },
        {
            "model_warmup": [
                {
                    "name": "w",
                    "batch_size": 1,
                    "inputs": {
                        "INPUT0": {
                            "data_type": "TYPE_INT32",
                            "dims": [16],
                            "input_data_file": "../../../etc/hostname",
                        }
                    },
                }
            ]
        },
        {"parameters": {"EXECUTION_ENV_PATH": {"string_value": "/opt/env.tar.gz"}}},
    ],
)
async def test_config_override_cannot_name_files_outside_the_model(
    tmp_path: Path, override: dict[str, object]
) -> None:
    write_add_sub(tmp_path, "simple")
    manager = _manager([tmp_path])
    config = {"platform": "onnxruntime_onnx", "max_batch_size": 8, **override}
    try:
        with pytest.raises(InvalidArgumentError, match="failed to load 'simple'"):
            await manager.load("simple", config_json=json.dumps(config))
    finally:
        await manager.close()


async def test_repository_label_symlink_out_of_the_model_is_refused(tmp_path: Path) -> None:
    (tmp_path / "outside.txt").write_text("secret\n")
    config = ADD_SUB_CONFIG.replace(
        'name: "OUTPUT0"', 'name: "OUTPUT0" label_filename: "labels.txt"'
    )
    model_dir = write_add_sub(tmp_path / "repo", "simple", config=config)
    (model_dir / "labels.txt").symlink_to(tmp_path / "outside.txt")
    manager = _manager([tmp_path / "repo"])
    try:
        with pytest.raises(InvalidArgumentError, match="resolves outside"):
            await manager.load("simple")
    finally:
        await manager.close()


async def test_unknown_model_load_is_not_found(tmp_path: Path) -> None:
    manager = _manager([tmp_path])
    try:
        with pytest.raises(NotFoundError, match="failed to load 'nope', failed to poll"):
            await manager.load("nope")
    finally:
        await manager.close()


async def test_no_temporary_directory_outlives_its_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    temp_root = tmp_path / "tmp"
    temp_root.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp_root))
    write_add_sub(tmp_path / "repo", "simple")
    manager = _manager([tmp_path / "repo"], allow_model_upload=True)

    def upload_dirs() -> int:
        return sum(len(dirs) for _, dirs, _ in os.walk(temp_root))

    good = {"1/model.onnx": add_sub_model(1)}
    config = json.dumps({"name": "simple", "backend": "onnxruntime", "max_batch_size": 8})
    try:
        await manager.load("simple", config_json=config, files=good)
        baseline = upload_dirs()
        assert baseline > 0
        for _ in range(3):
            with pytest.raises(InvalidArgumentError):  # the model file is not ONNX
                await manager.load("simple", config_json=config, files={"1/model.onnx": b"x"})
            with pytest.raises(InvalidArgumentError):  # bad key
                await manager.load("simple", config_json=config, files={"1//m": b"x"})
            with pytest.raises(InvalidArgumentError):  # bad config JSON
                await manager.load("simple", config_json="{nope", files=good)
            await manager.load("simple", config_json=config, files=good)  # reload
            assert upload_dirs() == baseline
        await manager.load("simple")  # back to the repository's files
        assert upload_dirs() == 1  # the (empty) uploads root
        await manager.load("simple", config_json=config, files=good)
        await manager.unload("simple")
        assert upload_dirs() == 1
        await manager.load("simple", config_json=config, files=good)
    finally:
        await manager.close()
    assert upload_dirs() == 0
