"""What the load generator reads of a model and of its statistics, from the server's answers.

Pure conversions, shared by the HTTP and gRPC clients: v2 model metadata plus the model
configuration (JSON, or the gRPC messages) become a :class:`ModelInfo`; a statistics answer
becomes the one model entry the driver compares between windows, in Triton's JSON shape with
integer counts (whatever the wire).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from inferd.client.admin import is_restricted as is_restricted
from inferd.client.endpoint import is_https as is_https
from inferd.client.endpoint import split_url as split_url
from inferd.codecs.statistics import INFER_PHASES
from inferd.errors import InvalidArgumentError
from inferd.tools.perf.transport import ModelInfo, TensorInfo

BATCH_STATS = ("compute_input", "compute_infer", "compute_output")


ACCESS_HINT = "send the header the server expects with -H NAME:VALUE"


def _tensors(entries: Any, batching: bool, what: str) -> tuple[TensorInfo, ...]:
    if not isinstance(entries, list):
        raise InvalidArgumentError(f"the model metadata has no {what} list")
    tensors = []
    for entry in entries:
        try:
            shape = tuple(int(d) for d in entry["shape"])
            name, datatype = str(entry["name"]), str(entry["datatype"])
        except (KeyError, TypeError, ValueError):
            raise InvalidArgumentError(
                f"the model metadata has a malformed {what[:-1]}: {entry!r}"
            ) from None
        if batching:  # the metadata shows the batch dimension as a leading -1
            shape = shape[1:]
        tensors.append(TensorInfo(name, datatype, shape))
    return tuple(tensors)


def model_info(metadata: Mapping[str, Any], config: Mapping[str, Any], version: str) -> ModelInfo:
    """The model as the v2 metadata and the JSON model configuration describe it."""
    try:
        max_batch_size = int(config.get("max_batch_size", 0) or 0)
    except (TypeError, ValueError):
        raise InvalidArgumentError(
            "the model configuration has a malformed max_batch_size"
        ) from None
    policy = config.get("model_transaction_policy") or {}
    return ModelInfo(
        name=str(metadata.get("name") or config.get("name") or ""),
        version=version,
        inputs=_tensors(metadata.get("inputs"), max_batch_size > 0, "inputs"),
        outputs=_tensors(metadata.get("outputs"), max_batch_size > 0, "outputs"),
        max_batch_size=max_batch_size,
        decoupled=bool(policy.get("decoupled", False)),
        sequence="sequence_batching" in config,
    )


def model_info_from_proto(metadata: Any, config: Any, version: str) -> ModelInfo:
    """The same from gRPC's ``ModelMetadataResponse`` and ``ModelConfig`` messages."""
    meta = {
        "name": metadata.name,
        "inputs": [
            {"name": t.name, "datatype": t.datatype, "shape": list(t.shape)}
            for t in metadata.inputs
        ],
        "outputs": [
            {"name": t.name, "datatype": t.datatype, "shape": list(t.shape)}
            for t in metadata.outputs
        ],
    }
    rendered: dict[str, Any] = {
        "name": config.name,
        "max_batch_size": config.max_batch_size,
        "model_transaction_policy": {"decoupled": config.model_transaction_policy.decoupled},
    }
    if config.WhichOneof("scheduling_choice") == "sequence_batching":
        rendered["sequence_batching"] = {}
    return model_info(meta, rendered, version)


def _version_key(entry: Mapping[str, Any]) -> tuple[int, str]:
    version = str(entry.get("version", ""))
    return (int(version), version) if version.isdigit() else (-1, version)


def select_statistics(
    entries: Sequence[Mapping[str, Any]], name: str, version: str
) -> dict[str, Any] | None:
    """The entry of ``name`` (and ``version``; without one, the highest version, which is the
    one served) from a ``model_stats`` list, with every count an int; None when absent."""
    mine = [e for e in entries if e.get("name") == name]
    if version:
        mine = [e for e in mine if str(e.get("version", "")) == version]
    if not mine:
        return None
    return normalise_statistics(max(mine, key=_version_key))


def _duration(value: Any) -> dict[str, int]:
    value = value if isinstance(value, Mapping) else {}
    return {"count": int(value.get("count", 0) or 0), "ns": int(value.get("ns", 0) or 0)}


def normalise_statistics(entry: Mapping[str, Any]) -> dict[str, Any]:
    """One model's statistics in Triton's JSON shape, every key present, counts as ints."""
    stats = entry.get("inference_stats") or {}
    return {
        "name": str(entry.get("name", "")),
        "version": str(entry.get("version", "")),
        "last_inference": int(entry.get("last_inference", 0) or 0),
        "inference_count": int(entry.get("inference_count", 0) or 0),
        "execution_count": int(entry.get("execution_count", 0) or 0),
        "inference_stats": {key: _duration(stats.get(key)) for key in INFER_PHASES},
        "batch_stats": [
            {"batch_size": int(b.get("batch_size", 0) or 0)}
            | {key: _duration(b.get(key)) for key in BATCH_STATS}
            for b in entry.get("batch_stats") or []
        ],
    }


def statistics_from_proto(response: Any, name: str, version: str) -> dict[str, Any] | None:
    """:func:`select_statistics` over gRPC's ``ModelStatisticsResponse``."""
    entries = []
    for model in response.model_stats:
        infer = model.inference_stats
        entries.append(
            {
                "name": model.name,
                "version": model.version,
                "last_inference": model.last_inference,
                "inference_count": model.inference_count,
                "execution_count": model.execution_count,
                "inference_stats": {
                    key: {"count": getattr(infer, key).count, "ns": getattr(infer, key).ns}
                    for key in INFER_PHASES
                },
                "batch_stats": [
                    {"batch_size": b.batch_size}
                    | {
                        key: {"count": getattr(b, key).count, "ns": getattr(b, key).ns}
                        for key in BATCH_STATS
                    }
                    for b in model.batch_stats
                ],
            }
        )
    return select_statistics(entries, name, version)


def error_text(status: int, body: bytes | None) -> str:
    """The server's message from an HTTP error answer (``{"error": ...}``), else the status;
    a refusal of the client's credentials (401, 403) also says how to send them."""
    text = _error_text(status, body)
    return f"{text} ({ACCESS_HINT})" if status in (401, 403) else text


def _error_text(status: int, body: bytes | None) -> str:
    if body:
        try:
            decoded = orjson.loads(body)
        except ValueError:
            decoded = None
        if isinstance(decoded, dict) and isinstance(decoded.get("error"), str):
            return str(decoded["error"])
        text = body[:200].decode("utf-8", "replace").strip()
        if text:
            return f"HTTP {status}: {text}"
    return f"HTTP {status} with an empty body"
