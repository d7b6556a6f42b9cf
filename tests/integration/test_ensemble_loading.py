"""Ensembles in the repository manager without a server: start-up order in the default control
mode, nested ensembles, circular ensembles, and inference through the in-process engine."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np

from inferd.backends.registry import default_registry
from inferd.core.inference import InferRequest
from inferd.engine import Engine
from inferd.repository.manager import ControlMode, RepositoryManager
from tests.e2e.test_ensembles import add_sub_step, ensemble_config, write_ensemble
from tests.helpers.models import write_add_sub


def build(root: Path) -> None:
    write_add_sub(root, "z_adder")  # sorts last: the ensembles reach it before start-up does
    chain = [
        add_sub_step("z_adder", "INPUT0", "INPUT1", "sum", "diff"),
        add_sub_step("z_adder", "sum", "diff", "OUTPUT0", "OUTPUT1"),
    ]
    write_ensemble(root, "a_chain", ensemble_config("a_chain", chain))
    # an ensemble of the ensemble: 4a, 4b
    nested = [
        add_sub_step("a_chain", "INPUT0", "INPUT1", "x", "y"),
        add_sub_step("a_chain", "x", "y", "OUTPUT0", "OUTPUT1"),
    ]
    write_ensemble(root, "b_nested", ensemble_config("b_nested", nested))
    one = [add_sub_step("cycle_two", "INPUT0", "INPUT1", "OUTPUT0", "OUTPUT1")]
    two = [add_sub_step("cycle_one", "INPUT0", "INPUT1", "OUTPUT0", "OUTPUT1")]
    write_ensemble(root, "cycle_one", ensemble_config("cycle_one", one))
    write_ensemble(root, "cycle_two", ensemble_config("cycle_two", two))


def test_default_mode_loads_step_models_first_and_refuses_circular_ensembles(
    tmp_path: Path,
) -> None:
    build(tmp_path)

    async def scenario() -> None:
        manager = RepositoryManager([tmp_path], default_registry(), mode=ControlMode.NONE)
        try:
            failures = await manager.startup()
            assert sorted(failures) == ["cycle_one", "cycle_two"]
            assert any("circular dependency" in reason for reason in failures.values())
            for name in ("z_adder", "a_chain", "b_nested"):
                assert manager.ready_versions(name) == [1], name
            # the shared step model was loaded once: one READY version, never reloaded
            assert manager.statistics("z_adder", None)[0].inference_count == 0
            engine = Engine(manager, server_version="test")
            a = np.arange(16, dtype=np.int32).reshape(1, 16)
            b = np.ones((1, 16), dtype=np.int32)
            request = InferRequest("b_nested", {"INPUT0": a, "INPUT1": b})
            response = await engine.infer(request)
            np.testing.assert_array_equal(response.outputs["OUTPUT0"], 4 * a)
            np.testing.assert_array_equal(response.outputs["OUTPUT1"], 4 * b)
            # nested: the inner ensemble counts its own requests; the adder four steps
            assert manager.statistics("a_chain", None)[0].execution_count == 2
            assert manager.statistics("z_adder", None)[0].inference_count == 4
            # independent requests through one ensemble run at the same time
            many = [
                engine.infer(InferRequest("a_chain", {"INPUT0": a, "INPUT1": b})) for _ in range(8)
            ]
            for reply in await asyncio.gather(*many):
                np.testing.assert_array_equal(reply.outputs["OUTPUT0"], 2 * a)
        finally:
            await manager.close()

    asyncio.run(scenario())
