"""inferd on Ray, with one local Ray (2 CPUs) for the module: ``inferd batch --ray`` gives the
single-process run's outputs, and the Ray Serve deployment answers tritonclient over HTTP."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest

ray = pytest.importorskip("ray")

import psutil  # noqa: E402  (Ray's dependency)
import tritonclient.http as httpclient  # noqa: E402

from inferd.cli.perf_inprocess import running_engine  # noqa: E402
from inferd.tools.batch.job import BatchJob, run_batch  # noqa: E402
from inferd.tools.batch.ray_job import RayOptions, run_ray_batch  # noqa: E402

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    # Ray's deprecations inside Ray itself, and Ray Data's advice when a job has fewer blocks
    # than actors
    pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.*"),
    pytest.mark.filterwarnings("ignore:The minimum number of concurrent actors:UserWarning"),
]


@pytest.fixture(scope="module")
def local_ray() -> Iterator[Any]:
    level = logging.getLogger("inferd").level  # running_engine quiets it; put it back after
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield ray
    finally:
        ray.shutdown()
        logging.getLogger("inferd").setLevel(level)


def _table(folder: Path) -> pa.Table:
    return pads.dataset(folder, format="parquet").to_table().sort_by("row")


def _bad(path: Path) -> dict[int, str]:
    if not path.exists():
        return {}
    return {b["row"]: b["reason"] for b in map(json.loads, path.read_text().splitlines())}


def test_a_ray_run_writes_what_a_single_process_run_writes(
    local_ray: Any, example_repo: Path, tmp_path: Path
) -> None:
    rng = np.random.default_rng(5)
    rows = [list(rng.integers(0, 17, 64).astype(float)) for _ in range(300)]
    rows[7][0] = float("nan")
    rows[250] = rows[250][:10]
    pq.write_table(pa.table({"input": pa.array(rows)}), tmp_path / "digits.parquet")

    def job(out: str) -> BatchJob:
        return BatchJob("digits", tmp_path / "digits.parquet", tmp_path / out, shard_rows=64)

    async def single() -> None:
        async with running_engine(example_repo, "digits") as engine:
            await run_batch(engine, job("single"))

    asyncio.run(single())
    report = run_ray_batch(
        job("ray"), example_repo, RayOptions(actors=2, instances=1), engine=running_engine
    )
    assert (report.written, report.bad) == (298, 2)
    single_table, ray_table = _table(tmp_path / "single"), _table(tmp_path / "ray")
    assert ray_table.schema == single_table.schema
    assert ray_table.equals(single_table)
    assert ray_table.num_rows == 298
    single_bad = _bad(tmp_path / "single" / "_bad_rows.jsonl")
    assert _bad(tmp_path / "ray" / "_bad_rows.jsonl") == single_bad
    assert sorted(single_bad) == [7, 250]


def _proxy_url() -> str:
    """The address of this Ray's Serve proxy (started on port 0): the one socket its actor
    listens on at 127.0.0.1 that answers inferd's liveness route."""
    import http.client

    for proc in psutil.Process().children(recursive=True):
        try:
            if "ProxyActor" not in " ".join(proc.cmdline()):
                continue
            # Ray puts its own newer psutil on sys.path, but a psutil imported earlier in the
            # run (nncf and kserve need one) is the one this module sees: name the call both have
            connections = getattr(proc, "net_connections", None) or proc.connections
            sockets = connections(kind="tcp")
        except psutil.Error:
            continue
        for sock in sockets:
            if sock.status != psutil.CONN_LISTEN or sock.laddr.ip != "127.0.0.1":
                continue
            conn = http.client.HTTPConnection("127.0.0.1", sock.laddr.port, timeout=10)
            try:
                conn.request("GET", "/v2/health/live")
                if conn.getresponse().status == 200:
                    return f"127.0.0.1:{sock.laddr.port}"
            except OSError:
                continue
            finally:
                conn.close()
    raise AssertionError("no Ray Serve proxy answers on 127.0.0.1")


def test_ray_serve_deployment_answers_tritonclient(local_ray: Any, example_repo: Path) -> None:
    from ray import serve

    from inferd.integrations.ray_serve import inferd_deployment

    serve.start(http_options={"host": "127.0.0.1", "port": 0})
    try:
        app = inferd_deployment(num_replicas=1, ray_actor_options={"num_cpus": 0.5}).bind(
            example_repo, load_models=("simple",)
        )
        serve.run(app, name="inferd", route_prefix="/")
        client = httpclient.InferenceServerClient(_proxy_url())
        try:
            assert client.is_server_ready()
            assert client.is_model_ready("simple")
            assert not client.is_model_ready("digits")  # explicit control: only what was named
            a = np.arange(32, dtype=np.int32).reshape(2, 16)
            b = np.ones((2, 16), dtype=np.int32)
            inputs = []
            for name, array in (("INPUT0", a), ("INPUT1", b)):
                tensor = httpclient.InferInput(name, [2, 16], "INT32")
                tensor.set_data_from_numpy(array, binary_data=name == "INPUT0")
                inputs.append(tensor)
            result = client.infer("simple", inputs)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
            config = client.get_model_config("simple")
            assert config["max_batch_size"] == 8
        finally:
            client.close()
    finally:
        serve.shutdown()
