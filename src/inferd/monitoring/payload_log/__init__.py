"""Sampled request/response logging to rotating JSONL or Parquet files, per model, written by a
thread of its own so that logging never slows or fails a request (docs/observability.md)."""

from inferd.monitoring.payload_log.logger import PayloadLogger
from inferd.monitoring.payload_log.settings import FORMATS, PayloadLogSettings

__all__ = ["FORMATS", "PayloadLogSettings", "PayloadLogger"]
