"""Observers of answered requests: each sees the model, version, request and every output; one
that raises is logged and neither fails the request nor stops the others."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferd.core.inference import InferRequest, RequestedOutput
from inferd.core.model_spec import ModelSpec
from inferd.repository.manager import ControlMode
from inferd.server.config import ServerConfig
from inferd.server.server import Server

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "models"


class Recorder:
    def __init__(self) -> None:
        self.seen: list[tuple[str, int, InferRequest, dict[str, np.ndarray[Any, Any]]]] = []

    def observe(
        self,
        spec: ModelSpec,
        version: int,
        request: InferRequest,
        outputs: Mapping[str, np.ndarray[Any, Any]],
    ) -> None:
        self.seen.append((spec.name, version, request, dict(outputs)))


class Broken:
    def observe(self, *args: object) -> None:
        raise RuntimeError("observer bug")


async def test_observers_see_answers_and_a_failing_one_is_contained(
    caplog: pytest.LogCaptureFixture,
) -> None:
    first, second = Recorder(), Recorder()
    config = ServerConfig(
        model_repositories=(EXAMPLES,),
        model_control_mode=ControlMode.EXPLICIT,
        load_models=("simple",),
        allow_http=False,
        allow_grpc=False,
        allow_metrics=False,
    )
    server = Server(config, observers=(first, Broken(), second))
    await server.start()
    try:
        a = np.arange(16, dtype=np.int32).reshape(1, 16)
        request = InferRequest(
            model_name="simple",
            inputs={"INPUT0": a, "INPUT1": a},
            outputs=[RequestedOutput("OUTPUT0", classification=2)],
        )
        response = await server.engine.infer(request)
    finally:
        await server.stop()
    assert response.outputs["OUTPUT0"].dtype == np.object_  # the client asked for classes
    assert list(response.outputs) == ["OUTPUT0"]
    for recorder in (first, second):
        assert len(recorder.seen) == 1
        name, version, seen_request, outputs = recorder.seen[0]
        assert (name, version) == ("simple", 1)
        assert seen_request is request
        np.testing.assert_array_equal(outputs["OUTPUT0"], a + a)  # the values, not the classes
    assert "observer bug" in caplog.text
