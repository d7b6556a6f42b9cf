"""A decoupled model that answers from a task on the event loop (as an ensemble with a
decoupled step does) and ends right after its last response: that response still reaches
the stream, before the final flag, whatever the consumer does between responses."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np

from inferd.codecs.model_config import parse_pbtxt, spec_from_proto
from inferd.core.inference import InferRequest
from inferd.core.streaming import StreamedResponse
from inferd.repository.manager_types import ServingModel
from inferd.repository.streaming import stream_model
from inferd.scheduling.stats import ModelStats

CONFIG = """
name: "on_loop"
platform: "ensemble"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "N", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "OUT", data_type: TYPE_INT32, dims: [ 1 ] } ]
"""


class LoopScheduler:
    """Sends two responses, waits for ``gate``, sends the third and returns (no final flag of
    its own: the stream ends the request when the task is done, as for an ensemble)."""

    def __init__(self) -> None:
        self.gate = asyncio.Event()

    async def submit(self, request: InferRequest, rows: int = 1) -> dict[str, Any]:
        sink = request.sink
        assert sink is not None
        sink.send(StreamedResponse({"OUT": np.array([0], np.int32)}))
        sink.send(StreamedResponse({"OUT": np.array([1], np.int32)}))
        await self.gate.wait()
        sink.send(StreamedResponse({"OUT": np.array([2], np.int32)}))
        return {}

    async def drain(self) -> None:
        return None

    def shutdown(self) -> None:
        return None


def test_the_last_response_sent_on_the_loop_comes_before_the_final_flag() -> None:
    async def main() -> list[tuple[list[int] | None, bool]]:
        scheduler = LoopScheduler()
        spec = spec_from_proto(parse_pbtxt(CONFIG, "test"))
        model = ServingModel(spec, 1, scheduler, ModelStats("on_loop", 1))
        request = InferRequest("on_loop", {"N": np.array([3], np.int32)})
        got: list[tuple[list[int] | None, bool]] = []
        async for item in stream_model(model, request, 1):
            outputs = None if item.outputs is None else item.outputs["OUT"].tolist()
            got.append((outputs, item.final))
            if len(got) == 2:
                # the model's task runs its last step (its third response, then its end)
                # before this consumer reads on: the order a busy server's loop may take
                scheduler.gate.set()
                await asyncio.sleep(0)
        return got

    got = asyncio.run(main())
    assert got == [([0], False), ([1], False), ([2], False), (None, True)]
