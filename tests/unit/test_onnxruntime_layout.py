"""ONNX Runtime's default thread layout: instances share the cores, a lone batch gets them all."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnx_graphs import add_sub, save

from inferd.backends import onnxruntime as ort_backend
from inferd.backends.base import LoadContext
from inferd.backends.onnxruntime import OnnxRuntimeBackend, OnnxRuntimeModel, parse_settings
from inferd.backends.registry import default_registry
from inferd.codecs.model_config import parse_pbtxt, spec_from_proto
from inferd.core.inference import InferRequest
from inferd.core.model_spec import InstanceGroupSpec, ModelSpec
from inferd.errors import InferdError
from inferd.repository.autocomplete import complete_config
from inferd.repository.normalize import normalize_and_validate

CPU_GROUP = InstanceGroupSpec(name="g", kind="KIND_CPU", count=1)


def _spec(config_text: str) -> ModelSpec:
    return spec_from_proto(parse_pbtxt(config_text, "m"))


def _model(
    tmp_path: Path, config_text: str, monkeypatch: pytest.MonkeyPatch, cores: int
) -> OnnxRuntimeModel:
    monkeypatch.setattr(ort_backend, "available_cores", lambda: cores)
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


def _threads(session: ort.InferenceSession) -> int:
    return int(session.get_session_options().intra_op_num_threads)


def _add(instance: object) -> None:
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    b = np.ones((2, 16), dtype=np.int32)
    [result] = instance.execute([InferRequest(model_name="m", inputs={"INPUT0": a, "INPUT1": b})])  # type: ignore[attr-defined]
    assert not isinstance(result, InferdError), result
    np.testing.assert_array_equal(result["OUTPUT0"], a + b)


@pytest.mark.parametrize(
    ("config", "cores", "threads", "solo"),
    [
        ("instance_group [{ count: 2 kind: KIND_CPU }]", 2, 1, 2),  # the default on 2 cores
        ("instance_group [{ count: 2 kind: KIND_CPU }]", 8, 4, 8),
        ("instance_group [{ count: 3 }, { count: 1 kind: KIND_CPU }]", 8, 2, 8),
        ("instance_group [{ count: 4 kind: KIND_CPU }]", 2, 1, 2),  # more instances than cores
        ("instance_group [{ count: 1 kind: KIND_CPU }]", 2, 2, 0),  # one instance has them all
        ("instance_group [{ count: 2 kind: KIND_CPU }]", 1, 1, 0),  # one core: nothing to gain
        ("instance_group [{ count: 2 kind: KIND_GPU }]", 8, 4, 0),  # the device computes
    ],
)
def test_default_layout(config: str, cores: int, threads: int, solo: int) -> None:
    spec = _spec(config)
    spec = dataclasses.replace(
        spec,
        instance_groups=tuple(
            dataclasses.replace(g, kind=g.kind if g.kind != "KIND_AUTO" else "KIND_CPU")
            for g in spec.instance_groups
        ),
    )
    settings = parse_settings(spec, cores=cores)
    assert settings.intra_op_threads == threads
    assert settings.solo_threads == solo


@pytest.mark.parametrize("value", ["1", "2", "0"])
def test_an_explicit_thread_count_is_honoured_and_gets_no_solo_session(value: str) -> None:
    spec = _spec(
        "instance_group [{ count: 2 kind: KIND_CPU }] "
        f'parameters {{ key: "intra_op_thread_count" value: {{ string_value: "{value}" }} }}'
    )
    settings = parse_settings(spec, cores=8)
    assert settings.intra_op_threads == int(value)
    assert settings.solo_threads == 0


def test_sessions_are_built_with_the_layout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = _model(tmp_path, "instance_group [{ count: 2 kind: KIND_CPU }]", monkeypatch, cores=2)
    assert model.solo is not None
    assert _threads(model.solo.session) == 2
    first, second = (model.create_instance(CPU_GROUP, i) for i in range(2))
    assert _threads(first.session) == _threads(second.session) == 1
    # three distinct sessions: the solo one is not also an instance's own
    assert len({id(model.solo.session), id(first.session), id(second.session)}) == 3
    # each session has its own pool: no process-wide pool that would bind every other session
    for session in (model.solo.session, first.session, second.session):
        assert session.get_session_options().use_per_session_threads is True
    # no session's threads spin after a run, taking the cores from the next batches
    spinning = "session.intra_op.allow_spinning"
    for session in (model.solo.session, first.session, second.session):
        assert session.get_session_options().get_session_config_entry(spinning) == "0"


def test_explicit_threads_build_no_solo_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = _model(
        tmp_path,
        "instance_group [{ count: 2 kind: KIND_CPU }] "
        'parameters { key: "intra_op_thread_count" value: { string_value: "2" } }',
        monkeypatch,
        cores=2,
    )
    assert model.solo is None
    instance = model.create_instance(CPU_GROUP, 0)
    assert _threads(instance.session) == 2
    _add(instance)


def test_a_lone_batch_runs_on_the_solo_session_and_concurrent_ones_on_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = _model(tmp_path, "instance_group [{ count: 2 kind: KIND_CPU }]", monkeypatch, cores=2)
    solo = model.solo
    assert solo is not None
    first, second = (model.create_instance(CPU_GROUP, i) for i in range(2))
    _add(first)
    _add(second)
    assert solo.runs == 2  # each ran alone
    # while another run of the model is in progress, an instance uses its own session
    held = solo.enter()
    assert held is solo.session
    try:
        _add(second)
        assert solo.runs == 3  # only the held run counted
    finally:
        solo.leave()
    _add(first)
    assert solo.runs == 4


def test_concurrent_runs_never_share_the_solo_session(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = _model(tmp_path, "instance_group [{ count: 2 kind: KIND_CPU }]", monkeypatch, cores=2)
    solo = model.solo
    assert solo is not None
    inside = 0
    most = 0
    guard = threading.Lock()
    real_run = solo.session.run

    def counting_run(*args: object, **kwargs: object) -> object:
        nonlocal inside, most
        with guard:
            inside += 1
            most = max(most, inside)
        try:
            return real_run(*args, **kwargs)  # type: ignore[arg-type]
        finally:
            with guard:
                inside -= 1

    solo.session = _Proxy(solo.session, counting_run)  # type: ignore[assignment]
    instances = [model.create_instance(CPU_GROUP, i) for i in range(2)]
    errors: list[BaseException] = []

    def hammer(index: int) -> None:
        try:
            for _ in range(200):
                _add(instances[index])
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=hammer, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert most == 1


class _Proxy:
    def __init__(self, session: ort.InferenceSession, run: object) -> None:
        self._session = session
        self.run = run

    def __getattr__(self, name: str) -> object:
        return getattr(self._session, name)


def test_close_releases_the_solo_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _model(tmp_path, "instance_group [{ count: 2 kind: KIND_CPU }]", monkeypatch, cores=2)
    instance = model.create_instance(CPU_GROUP, 0)
    instance.close()
    model.close()
    assert model.solo is None
    [result] = instance.execute(
        [
            InferRequest(
                model_name="m",
                inputs={
                    "INPUT0": np.zeros((1, 16), np.int32),
                    "INPUT1": np.zeros((1, 16), np.int32),
                },
            )
        ]
    )
    assert isinstance(result, InferdError)
