"""A candidate applied to a model's config: the load API's override, ``config.pbtxt`` text, and
the model directory written with it.

The analyzer starts from the repository's own ``config.pbtxt`` (or, for a model without one, the
config the server completed) and changes only the fields a :class:`Candidate` names, so the
config it writes keeps every other line's meaning.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2

from inferd.codecs.model_config import ModelConfig, from_json_dict, parse_pbtxt
from inferd.errors import InvalidArgumentError
from inferd.tools.analyze.space import Candidate, ModelFacts

__all__ = [
    "INTER_OP_KEY",
    "INTRA_OP_KEY",
    "apply_candidate",
    "candidate_of",
    "facts_of",
    "load_base_config",
    "override_json",
    "pbtxt_text",
    "served_message",
    "write_config",
]

# the parameter names Triton's ONNX Runtime backend reads (and inferd's, backends/onnxruntime.py)
INTRA_OP_KEY = "intra_op_thread_count"
INTER_OP_KEY = "inter_op_thread_count"
_KIND_CPU = model_config_pb2.ModelInstanceGroup.Kind.Value("KIND_CPU")
_ORT_PLATFORMS = frozenset({"onnxruntime_onnx"})
_ORT_BACKENDS = frozenset({"onnxruntime"})


def load_base_config(model_dir: Path, served: dict[str, Any] | None) -> ModelConfig:
    """The repository's ``config.pbtxt``; without one, the served (completed) config."""
    path = model_dir / "config.pbtxt"
    if path.is_file():
        return parse_pbtxt(path.read_text(encoding="utf-8"), str(path))
    if served is None:
        raise InvalidArgumentError(f"{model_dir} has no config.pbtxt and the server sent none")
    return from_json_dict(_known_fields(served))


def _known_fields(rendered: dict[str, Any]) -> dict[str, Any]:
    """Drop top-level keys this protobuf schema does not know (a newer server's fields)."""
    known = set(ModelConfig.DESCRIPTOR.fields_by_name)
    return {key: value for key, value in rendered.items() if key in known}


def served_message(served: dict[str, Any], fallback: ModelConfig) -> ModelConfig:
    """The served config as a message; ``fallback`` when its JSON does not parse here (a
    server newer than this schema)."""
    try:
        return from_json_dict(_known_fields(served))
    except (json_format.ParseError, ValueError, TypeError):
        return fallback


def is_onnxruntime(config: ModelConfig) -> bool:
    return config.platform in _ORT_PLATFORMS or config.backend in _ORT_BACKENDS


def facts_of(config: ModelConfig) -> ModelFacts:
    """What the default search space depends on."""
    scheduling = config.WhichOneof("scheduling_choice")
    return ModelFacts(
        name=config.name,
        max_batch_size=int(config.max_batch_size),
        onnxruntime=is_onnxruntime(config),
        sequence=scheduling == "sequence_batching",
        ensemble=config.platform == "ensemble",
    )


def candidate_of(config: ModelConfig) -> Candidate:
    """The settings a (served, completed) config runs with, as a candidate, for display."""
    dynamic = config.WhichOneof("scheduling_choice") == "dynamic_batching"
    db = config.dynamic_batching
    params = {key: value.string_value for key, value in config.parameters.items()}
    return Candidate(
        instances=sum(int(g.count) for g in config.instance_group) or 1,
        max_batch_size=int(config.max_batch_size),
        dynamic_batching=dynamic,
        max_queue_delay_us=int(db.max_queue_delay_microseconds) if dynamic else 0,
        preferred_batch_sizes=tuple(int(s) for s in db.preferred_batch_size) if dynamic else (),
        intra_op_threads=_int_or_none(params.get(INTRA_OP_KEY)),
        inter_op_threads=_int_or_none(params.get(INTER_OP_KEY)),
    )


def _int_or_none(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text.strip())
    except ValueError:
        return None


def apply_candidate(base: ModelConfig, candidate: Candidate) -> ModelConfig:
    """A copy of ``base`` with the candidate's settings; every other field untouched."""
    config = ModelConfig()
    config.CopyFrom(base)
    config.max_batch_size = candidate.max_batch_size
    del config.instance_group[:]
    group = config.instance_group.add()
    group.kind = _KIND_CPU
    group.count = candidate.instances
    if candidate.dynamic_batching:
        db = config.dynamic_batching  # selects the oneof, clearing any other scheduler
        db.SetInParent()
        db.max_queue_delay_microseconds = candidate.max_queue_delay_us
        del db.preferred_batch_size[:]
        db.preferred_batch_size.extend(candidate.preferred_batch_sizes)
    elif config.WhichOneof("scheduling_choice") == "dynamic_batching":
        config.ClearField("dynamic_batching")
    for key, value in (
        (INTRA_OP_KEY, candidate.intra_op_threads),
        (INTER_OP_KEY, candidate.inter_op_threads),
    ):
        if value is None:
            if key in config.parameters:
                del config.parameters[key]
        else:
            config.parameters[key].string_value = str(value)
    return config


def override_json(config: ModelConfig) -> str:
    """The load API's ``config`` parameter: the whole config as JSON (only the fields set)."""
    return json.dumps(json_format.MessageToDict(config, preserving_proto_field_name=True))


def pbtxt_text(config: ModelConfig, header: str = "") -> str:
    """``config.pbtxt`` text, with ``header`` as comment lines on top."""
    comments = "".join(f"# {line}".rstrip() + "\n" for line in header.splitlines())
    return comments + text_format.MessageToString(config)


def write_config(
    model_dir: Path,
    config: ModelConfig,
    header: str,
    *,
    output_repository: Path | None,
    copy: bool = True,
) -> Path:
    """Write the config and return the file written.

    With ``output_repository``: into ``output_repository/<model>/``, a copy of the model
    directory (or the config file alone when ``copy`` is false). Without: in place, the old file
    kept as ``config.pbtxt.orig`` (the first time only, so the original survives reruns).
    """
    if output_repository is not None:
        target_dir = output_repository / model_dir.name
        if target_dir.resolve() == model_dir.resolve():
            raise InvalidArgumentError(
                f"--output-repository {output_repository} is the model's own repository; "
                "use --apply to change the model in place"
            )
        if copy:
            if target_dir.exists():
                shutil.rmtree(target_dir)
            shutil.copytree(
                model_dir,
                target_dir,
                symlinks=True,
                ignore=shutil.ignore_patterns("config.pbtxt.orig"),
            )
        else:
            target_dir.mkdir(parents=True, exist_ok=True)
    else:
        target_dir = model_dir
        current = model_dir / "config.pbtxt"
        backup = model_dir / "config.pbtxt.orig"
        if current.is_file() and not backup.exists():
            shutil.copy2(current, backup)
    path = target_dir / "config.pbtxt"
    path.write_text(pbtxt_text(config, header), encoding="utf-8")
    return path
