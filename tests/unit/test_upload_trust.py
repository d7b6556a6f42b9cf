"""What counts as code in an upload (bytes and effective config, not names), the one list of
parameters that widen a loader's trust, and model files confined to their version folder."""

from __future__ import annotations

import _ctypes
import io
import json
import pickle
import zipfile
from pathlib import Path
from typing import Any

import lightgbm
import numpy as np
import pytest
import skops.io as sio
import torch
import xgboost
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import FunctionTransformer

from inferd.backends.registry import default_registry
from inferd.backends.sklearn import ACCEPTED_PARAMETERS
from inferd.backends.trust import TRUSTING_PARAMETERS, trusting_parameters
from inferd.codecs.model_config import parse_json_config
from inferd.errors import InvalidArgumentError, PermissionDeniedError
from inferd.repository.loader import LoadOptions
from inferd.repository.manager import ControlMode, RepositoryManager
from inferd.repository.trust import check_client_config, config_runs_code, file_runs_code
from tests.helpers.models import ADD_SUB_CONFIG, add_sub_model, write_add_sub

ROWS = np.random.default_rng(0).random((40, 4))
LABELS = (ROWS[:, 0] > 0.5).astype(np.int64)


class Double(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


def _torch_bytes(save: Any, obj: Any, **kwargs: Any) -> bytes:
    out = io.BytesIO()
    save(obj, out, **kwargs)
    return out.getvalue()


def _zip(names: list[str]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name in names:
            archive.writestr(name, b"{}")
    return out.getvalue()


def _code_files() -> dict[str, bytes]:
    module = torch.jit.script(Double())
    exported = torch.export.export(Double(), (torch.ones(2),))
    pipeline = Pipeline(
        [("unpickle", FunctionTransformer(func=pickle.loads)), ("fit", LogisticRegression())]
    )
    return {
        "torchscript": _torch_bytes(torch.jit.save, module),
        "torch.save": _torch_bytes(torch.save, {"w": torch.ones(2)}),
        "torch legacy": _torch_bytes(
            torch.save, {"w": torch.ones(2)}, _use_new_zipfile_serialization=False
        ),
        "torch.export": _torch_bytes(torch.export.save, exported),
        "pickle 0": pickle.dumps(Path("x"), protocol=0),
        "pickle 1": pickle.dumps(Path("x"), protocol=1),
        "pickle 5": pickle.dumps({"a": 1}, protocol=5),
        "native library": Path(_ctypes.__file__).read_bytes(),
        "skops beyond the safe set": sio.dumps(pipeline),
        "other zip": _zip(["weights.json"]),
    }


def _model_files() -> dict[str, bytes]:
    booster = xgboost.train({"objective": "binary:logistic"}, xgboost.DMatrix(ROWS, LABELS), 2)
    gbm = lightgbm.train({"objective": "binary", "verbose": -1}, lightgbm.Dataset(ROWS, LABELS), 2)
    return {
        "onnx": add_sub_model(),
        "xgboost json": bytes(booster.save_raw(raw_format="json")),
        "xgboost ubj": bytes(booster.save_raw(raw_format="ubj")),
        "lightgbm text": gbm.model_to_string().encode(),
        "skops, safe types only": sio.dumps(LogisticRegression().fit(ROWS, LABELS)),
        "openvino ir": b'<?xml version="1.0"?>\n<net name="m" version="11"></net>\n',
        "weights": np.random.default_rng(1).standard_normal(4096).astype(np.float32).tobytes(),
        "text": b"cat\ndog\n",
    }


@pytest.fixture(scope="module")
def code_files() -> dict[str, bytes]:
    return _code_files()


@pytest.fixture(scope="module")
def model_files() -> dict[str, bytes]:
    return _model_files()


CODE_KINDS = [
    "torchscript",
    "torch.save",
    "torch legacy",
    "torch.export",
    "pickle 0",
    "pickle 1",
    "pickle 5",
    "native library",
    "skops beyond the safe set",
    "other zip",
]


@pytest.mark.parametrize("kind", CODE_KINDS)
def test_code_is_code_whatever_its_name(code_files: dict[str, bytes], kind: str) -> None:
    assert sorted(code_files) == sorted(CODE_KINDS)
    for name in ("1/model.onnx", "1/model.bin", "1/model.skops", "1/weights"):
        assert file_runs_code(name, code_files[kind]) is not None, (kind, name)


def test_model_files_are_not_code(model_files: dict[str, bytes]) -> None:
    for kind, content in model_files.items():
        assert file_runs_code("1/model.bin", content) is None, kind


@pytest.mark.parametrize(
    "name", ["1/model.py", "1/model.pyc", "1/model.pkl", "1/m.joblib", "1/libop.so", "1/libop.so.1"]
)
def test_code_by_name(name: str) -> None:
    assert file_runs_code(name, b"") is not None


@pytest.mark.parametrize(
    "config",
    [
        {"platform": "pytorch_libtorch"},
        {"platform": "torch_export"},
        {"backend": "pytorch"},
        {"backend": "torch"},
        {"backend": "python"},
        {"platform": "tensorrt_plan"},
        {"backend": "onnxruntime", "model_operations": {"op_library_filename": ["libop.so"]}},
        {"backend": "onnxruntime", "parameters": {"custom_op_library": {"string_value": "x"}}},
        {"backend": "fil", "parameters": {"anything": {"string_value": "/opt/libop.so"}}},
        {"backend": "onnxruntime", "parameters": {"EXECUTION_ENV_PATH": {"string_value": "x"}}},
    ],
)
def test_configs_that_run_code(config: dict[str, Any]) -> None:
    parsed = parse_json_config(json.dumps(config), "test")
    assert config_runs_code(parsed, default_registry().backend_name_for_platform) is not None


@pytest.mark.parametrize(
    "config",
    [
        {"platform": "onnxruntime_onnx"},
        {"backend": "sklearn", "parameters": {"predict_proba": {"string_value": "true"}}},
        {"backend": "fil", "parameters": {"model_type": {"string_value": "xgboost_json"}}},
        {"backend": "openvino"},
    ],
)
def test_configs_that_do_not_run_code(config: dict[str, Any]) -> None:
    parsed = parse_json_config(json.dumps(config), "test")
    assert config_runs_code(parsed, default_registry().backend_name_for_platform) is None


def test_one_list_of_trusting_parameters() -> None:
    assert set(TRUSTING_PARAMETERS["sklearn"]) <= set(ACCEPTED_PARAMETERS)
    assert trusting_parameters(["skops_trusted_types", "predict_proba"]) == ["skops_trusted_types"]
    assert trusting_parameters(["SKOPS_TRUSTED_TYPES", "cache_dir", "CPU_EXTENSION_PATH"]) == [
        "CPU_EXTENSION_PATH",
        "SKOPS_TRUSTED_TYPES",
        "cache_dir",
    ]
    assert trusting_parameters(["allow_pickle", "plugin_library"]) == [
        "allow_pickle",
        "plugin_library",
    ]
    assert trusting_parameters(["intra_op_thread_count", "EXECUTION_ENV_PATH"]) == []


def test_client_config_setting_trust_is_refused_by_name() -> None:
    config = {"backend": "sklearn", "parameters": {"skops_trusted_types": {"string_value": "x"}}}
    with pytest.raises(PermissionDeniedError, match="parameter 'skops_trusted_types' widens"):
        check_client_config("m", json.dumps(config))
    check_client_config("m", json.dumps({"backend": "sklearn"}))
    check_client_config("m", "{not json")  # reported where the config is read


def _manager(roots: list[Path], **flags: Any) -> RepositoryManager:
    return RepositoryManager(
        roots, default_registry(), mode=ControlMode.EXPLICIT, options=LoadOptions(**flags)
    )


@pytest.mark.parametrize("auto_complete", [True, False])
async def test_symlinked_model_file_is_refused(tmp_path: Path, auto_complete: bool) -> None:
    (tmp_path / "outside.onnx").write_bytes(add_sub_model())
    model_dir = tmp_path / "repo" / "linked"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "config.pbtxt").write_text(ADD_SUB_CONFIG.replace("{name}", "linked"))
    (model_dir / "1" / "model.onnx").symlink_to(tmp_path / "outside.onnx")
    write_add_sub(tmp_path / "repo", "simple")
    manager = _manager([tmp_path / "repo"], auto_complete=auto_complete)
    try:
        with pytest.raises(
            InvalidArgumentError,
            match=r"default_model_filename 'model\.onnx' resolves outside .*copy or hard-link",
        ):
            await manager.load("linked")
        await manager.load("simple")
        assert manager.ready_versions("simple") == [1]
    finally:
        await manager.close()


async def test_backend_chosen_from_the_uploaded_files_is_judged(tmp_path: Path) -> None:
    manager = RepositoryManager(
        [tmp_path], default_registry(), mode=ControlMode.EXPLICIT, allow_model_upload=True
    )
    try:
        with pytest.raises(PermissionDeniedError, match="tensorrt backend runs code"):
            await manager.load(
                "plan", config_json='{"max_batch_size": 0}', files={"1/model.plan": b"\0" * 64}
            )
    finally:
        await manager.close()
