"""The names of the example models, apart from their builders (cheap to import: the CLI's help
text and the docs state the count read from here)."""

from __future__ import annotations

__all__ = ["EXAMPLE_COUNT", "MODEL_NAMES", "TORCH_MODEL_NAMES"]

#: The models of ``examples/models``: every one serves with the default install (no PyTorch).
MODEL_NAMES: tuple[str, ...] = (
    "simple",
    "simple_int8",
    "simple_string",
    "digits",
    "simple_identity",
    "digits_preprocess",
    "digits_postprocess",
    "digits_pipeline",
    "digits_cnn",
    "fraud_xgboost",
    "wine_pipeline",
    "simple_sequence",
    "simple_dyna_sequence",
    "simple_string_dyna_sequence",
    "signal_filter",
    "repeat_int32",
    "bls_router",
)
#: The examples that need PyTorch to serve, kept in a repository of their own
#: (``examples/models-torch``) so that ``examples/models`` serves whole without PyTorch.
TORCH_MODEL_NAMES: tuple[str, ...] = ("digits_cnn_torch",)

#: How many example models there are; the README, examples/README.md and the CLI state it.
EXAMPLE_COUNT = len(MODEL_NAMES) + len(TORCH_MODEL_NAMES)
