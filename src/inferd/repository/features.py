"""Config features this server does not serve yet are refused at load time, never ignored."""

from __future__ import annotations

from inferd.codecs.model_config import ModelConfig
from inferd.errors import UnsupportedError


def check_supported(config: ModelConfig) -> None:
    """Raise :class:`UnsupportedError` naming the first config feature that cannot be honoured."""
    problems: list[str] = []
    scheduling = config.WhichOneof("scheduling_choice")
    if scheduling == "sequence_batching":
        seq = config.sequence_batching
        if seq.iterative_sequence:
            problems.append("sequence_batching.iterative_sequence")
        if seq.WhichOneof("strategy_choice") == "oldest" and seq.oldest.preserve_ordering:
            problems.append("sequence_batching.oldest.preserve_ordering")
    if len(config.batch_input) or len(config.batch_output):
        problems.append("batch_input / batch_output (ragged batching helpers)")
    if len(config.model_repository_agents.agents):
        problems.append("model_repository_agents")
    if len(config.model_operations.op_library_filename):
        problems.append("model_operations (custom operator libraries)")
    accelerators = config.optimization.execution_accelerators
    if len(accelerators.cpu_execution_accelerator):
        names = ", ".join(a.name for a in accelerators.cpu_execution_accelerator)
        problems.append(f"optimization.execution_accelerators.cpu_execution_accelerator ({names})")
    for group in config.instance_group:
        if group.HasField("rate_limiter"):
            problems.append(f"instance_group '{group.name}' rate_limiter")
        if len(group.profile) or len(group.secondary_devices) or group.passive:
            problems.append(f"instance_group '{group.name}' profile/secondary_devices/passive")
    if problems:
        raise UnsupportedError(
            f"the config uses {problems[0]}, which this server does not support yet; "
            "remove it from config.pbtxt to serve the model without it"
            + (f" (also unsupported: {'; '.join(problems[1:])})" if len(problems) > 1 else "")
        )
