"""ONNX Runtime's thread parameters reach the sessions: counts, spinning, the cgroup-sized
default, and loud refusals of values and misspelt keys (real sessions, read back)."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

import onnxruntime as ort
import pytest
from onnx_graphs import add_sub, save

from inferd.backends import onnxruntime as ort_backend
from inferd.backends.base import LoadContext
from inferd.backends.onnxruntime import OnnxRuntimeBackend, OnnxRuntimeModel
from inferd.backends.registry import default_registry
from inferd.backends.threads import available_cores
from inferd.codecs.model_config import parse_pbtxt, spec_from_proto
from inferd.core.model_spec import InstanceGroupSpec
from inferd.errors import ConfigError
from inferd.repository.autocomplete import complete_config
from inferd.repository.normalize import normalize_and_validate

CPU_GROUP = InstanceGroupSpec(name="g", kind="KIND_CPU", count=1)
INTRA = "session.intra_op.allow_spinning"
INTER = "session.inter_op.allow_spinning"


def _param(key: str, value: str) -> str:
    return f'parameters {{ key: "{key}" value: {{ string_value: "{value}" }} }} '


def _load(tmp_path: Path, config_text: str) -> OnnxRuntimeModel:
    model_dir = tmp_path / "m"
    save(add_sub(), model_dir / "1" / "model.onnx")
    cfg = parse_pbtxt(config_text, str(model_dir / "config.pbtxt"))
    complete_config(
        cfg, model_dir, [1], default_registry(load_entry_points=False), auto_complete=True
    )
    normalize_and_validate(cfg, model_dir)
    spec = spec_from_proto(cfg)
    ctx = LoadContext(spec=spec, version=1, model_dir=model_dir, version_dir=model_dir / "1")
    return OnnxRuntimeBackend().load(ctx)


def _entry(session: ort.InferenceSession, key: str) -> str:
    return str(session.get_session_options().get_session_config_entry(key))


def _cores(monkeypatch: pytest.MonkeyPatch, cores: int) -> None:
    monkeypatch.setattr(ort_backend, "available_cores", lambda: cores)


def test_spinning_is_off_by_default_on_every_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _cores(monkeypatch, 2)
    model = _load(tmp_path, "instance_group [{ count: 2 kind: KIND_CPU }]")
    assert model.solo is not None
    instance = model.create_instance(CPU_GROUP, 0)
    for session in (model.solo.session, instance.session):
        assert _entry(session, INTRA) == "0"
        assert _entry(session, INTER) == "0"


@pytest.mark.parametrize("value", ["1", "true"])
def test_allow_spinning_reaches_every_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    _cores(monkeypatch, 2)
    model = _load(
        tmp_path, "instance_group [{ count: 2 kind: KIND_CPU }] " + _param("allow_spinning", value)
    )
    assert model.solo is not None  # the config's word also holds for the solo session
    instance = model.create_instance(CPU_GROUP, 0)
    for session in (model.solo.session, instance.session):
        assert _entry(session, INTRA) == "1"
        assert _entry(session, INTER) == "1"


def test_onnx_runtime_spinning_keys_set_one_pool_each(tmp_path: Path) -> None:
    model = _load(
        tmp_path,
        "instance_group [{ count: 1 kind: KIND_CPU }] "
        + _param(INTRA, "1")
        + _param("execution_mode", "1")
        + _param("inter_op_thread_count", "2"),
    )
    session = model.create_instance(CPU_GROUP, 0).session
    assert _entry(session, INTRA) == "1"
    assert _entry(session, INTER) == "0"  # the default holds for the pool not named
    assert session.get_session_options().inter_op_num_threads == 2
    assert session.get_session_options().execution_mode == ort.ExecutionMode.ORT_PARALLEL


def test_explicit_thread_count_starts_that_many_threads(tmp_path: Path) -> None:
    """ONNX Runtime starts N-1 pool threads (the caller is the Nth): counted in /proc."""
    if not sys.platform.startswith("linux"):
        pytest.skip("counts the threads in /proc/self/task")
    tasks = Path("/proc/self/task")
    before = len(list(tasks.iterdir()))
    # one instance: the session built at load is the instance's own (no solo session)
    model = _load(
        tmp_path,
        "instance_group [{ count: 1 kind: KIND_CPU }] " + _param("intra_op_thread_count", "5"),
    )
    session = model.create_instance(CPU_GROUP, 0).session
    assert session.get_session_options().intra_op_num_threads == 5
    assert len(list(tasks.iterdir())) - before >= 4


@pytest.mark.parametrize(("quota", "expected"), [("100000 100000", 1), ("max 100000", None)])
def test_the_default_follows_the_cgroup_quota(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, quota: str, expected: int | None
) -> None:
    cgroup = tmp_path / "cgroup"
    cgroup.mkdir()
    (cgroup / "cpu.max").write_text(quota + "\n")
    monkeypatch.setattr(ort_backend, "available_cores", lambda: available_cores(cgroup))
    model = _load(tmp_path, "instance_group [{ count: 1 kind: KIND_CPU }]")
    threads = model.create_instance(CPU_GROUP, 0).session.get_session_options()
    affinity = len(os.sched_getaffinity(0))
    assert threads.intra_op_num_threads == (expected or affinity)


def test_the_default_divides_the_cores_among_the_instances(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _cores(monkeypatch, 6)
    model = _load(tmp_path, "instance_group [{ count: 3 kind: KIND_CPU }]")
    instance = model.create_instance(CPU_GROUP, 0)
    assert instance.session.get_session_options().intra_op_num_threads == 2
    assert model.solo is not None
    assert model.solo.session.get_session_options().intra_op_num_threads == 6


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (_param("allow_spinning", "sometimes"), "parameter 'allow_spinning' must be a boolean"),
        (_param(INTER, "2"), f"parameter '{INTER}' must be a boolean"),
        (
            _param("allow_spinning", "0") + _param(INTRA, "1"),
            f"parameter '{INTRA}' is '1' but 'allow_spinning' is '0'",
        ),
        (_param("intra_op_thread_count", "1.5"), "parameter 'intra_op_thread_count' must be"),
        (
            _param("intra_op_threads", "2"),
            "unknown parameter 'intra_op_threads' for backend 'onnxruntime'; did you mean "
            "'intra_op_thread_count'?",
        ),
        (_param("INTRA_OP_THREAD_COUNT", "2"), "did you mean 'intra_op_thread_count'?"),
        (_param("intra_op_num_threads", "2"), "did you mean 'intra_op_thread_count'?"),
        (_param("enable_cpu_mem_arena", "0"), "did you mean 'enable_mem_arena'?"),
        (_param("allow_spining", "0"), "did you mean 'allow_spinning'?"),
    ],
)
def test_bad_thread_parameters_are_refused_by_name(
    tmp_path: Path, config: str, message: str
) -> None:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, config)
    assert message in str(info.value)


def test_keys_of_other_parts_are_left_to_them(tmp_path: Path) -> None:
    # e.g. the embeddings route's keys on an ONNX model: not this backend's to refuse
    model = _load(tmp_path, _param("normalize", "false") + _param("truncate_dimensions", "1"))
    assert model.create_instance(CPU_GROUP, 0).session is not None


def test_the_load_logs_the_thread_layout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    _cores(monkeypatch, 4)
    with caplog.at_level(logging.INFO, logger=ort_backend.__name__):
        _load(tmp_path, "instance_group [{ count: 2 kind: KIND_CPU }]")
    [line] = [r.getMessage() for r in caplog.records if "intra-op" in r.getMessage()]
    assert line == (
        "model 'm' version 1: onnxruntime 2 session(s) x 2 intra-op thread(s) (4 core(s) shared "
        "by 2 instance(s)), solo session 4 thread(s), inter-op threads unused (sequential), "
        "spinning off"
    )
