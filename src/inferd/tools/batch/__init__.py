"""Offline (batch) inference: a model over every row of a file, outputs written as Parquet.

``inferd batch`` runs it (``cli/batch.py``). Pure parts: ``rows.py`` (row checks),
``batches.py`` (batch size, requests in flight, slices), ``shards.py``, ``output.py`` (Arrow
tables), ``arrow_columns.py``; readers: ``sources.py``, ``columnar.py``, ``files.py``; drivers:
``pipeline.py`` (the bounded read → infer → write pipeline), ``isolate.py`` (bisecting failed
batches), ``outdir.py`` (the resumable output folder), ``job.py``, and ``ray_job.py`` (Ray Data).
"""

from inferd.tools.batch.job import BatchJob, BatchReport, run_batch, set_instances

__all__ = ["BatchJob", "BatchReport", "run_batch", "set_instances"]
