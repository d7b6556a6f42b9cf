"""inferd batch on an engine in this process: --instances reloads the model with that many
instances, and a job resumed with other speed settings finishes what was left."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow.dataset as pads
import pytest

from inferd.cli.perf_inprocess import running_engine
from inferd.tools.batch.job import BatchJob, run_batch, set_instances
from inferd.tools.batch.shards import plan_shards
from tests.helpers.models import write_add_sub


@pytest.fixture(autouse=True)
def _inferd_log_level() -> Iterator[None]:
    """running_engine quiets inferd's logger for the command's output; put it back."""
    level = logging.getLogger("inferd").level
    yield
    logging.getLogger("inferd").setLevel(level)


async def test_instances_are_honoured_and_speed_settings_do_not_split_a_job(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "repo"
    write_add_sub(repo, "simple")
    a = np.arange(16 * 50, dtype=np.int32).reshape(50, 16)
    np.savez(tmp_path / "rows.npz", INPUT0=a, INPUT1=a)
    job = BatchJob("simple", tmp_path / "rows.npz", tmp_path / "out", shard_rows=10)
    async with running_engine(repo, "simple") as engine:
        await set_instances(engine, "simple", 3)
        spec = engine.model_config("simple")
        assert [(g.kind, g.count) for g in spec.instance_groups] == [("KIND_CPU", 3)]
        assert spec.max_batch_size == 8  # the rest of the config unchanged

        first = await run_batch(engine, job)
        assert (first.written, first.shards, first.done_before) == (50, 5, 0)
        # two shards lost, as if the run had been killed before recording them
        manifest = job.output / "_manifest.json"
        saved = json.loads(manifest.read_text())
        for shard in plan_shards(50, 10)[3:]:
            (job.output / shard.file_name).unlink()
            del saved["finished"][str(shard.index)]
        manifest.write_text(json.dumps(saved))

        faster = BatchJob("simple", job.input, job.output, shard_rows=10, batch_size=2, in_flight=5)
        again = await run_batch(engine, faster)
        assert (again.written, again.done_before) == (20, 3)
    table = pads.dataset(job.output, format="parquet").to_table().sort_by("row")
    assert table.column("row").to_pylist() == list(range(50))
    np.testing.assert_array_equal(np.array(table.column("OUTPUT0").to_pylist()), a + a)
