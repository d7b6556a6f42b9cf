"""``validate_request`` accepts exactly the requests whose inputs fit the model: every required
input present, no unknown ones, the configured dtype, dims equal where fixed (-1 matches any
size), one batch size within the bound. Checked against a plain restatement of those rules on
generated models and requests."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from inferd.core.datatypes import from_config_name
from inferd.core.inference import InferRequest
from inferd.core.model_spec import ModelSpec, TensorSpec
from inferd.core.validation import validate_request
from inferd.errors import InvalidArgumentError

FP32 = from_config_name("TYPE_FP32")
INT32 = from_config_name("TYPE_INT32")

dims = st.lists(st.sampled_from([-1, 1, 2, 3]), min_size=0, max_size=3).map(tuple)


@st.composite
def cases(draw: st.DrawFn) -> tuple[ModelSpec, dict[str, np.ndarray[Any, Any]]]:
    count = draw(st.integers(1, 3))
    tensors = tuple(
        TensorSpec(
            f"IN{i}",
            draw(st.sampled_from([FP32, INT32])),
            draw(dims),
            optional=draw(st.booleans()),
        )
        for i in range(count)
    )
    mbs = draw(st.sampled_from([0, 4]))
    spec = ModelSpec("m", "", "test", mbs, tensors, (), (), {}, "")
    names = draw(st.sets(st.sampled_from([f"IN{i}" for i in range(count + 1)])))
    inputs = {}
    for name in sorted(names):
        shape = tuple(draw(st.lists(st.integers(0, 5), min_size=0, max_size=4)))
        dtype = draw(st.sampled_from([np.float32, np.int32]))
        inputs[name] = np.zeros(shape, dtype)
    return spec, inputs


def fits(spec: ModelSpec, inputs: dict[str, np.ndarray[Any, Any]]) -> bool:
    by_name = {t.name: t for t in spec.inputs}
    if any(name not in by_name for name in inputs):
        return False
    if any(not t.optional and t.name not in inputs for t in spec.inputs):
        return False
    batches = set()
    for name, array in inputs.items():
        tensor = by_name[name]
        if array.dtype != tensor.datatype.dtype:
            return False
        shape = array.shape
        if spec.max_batch_size > 0:
            if not shape:
                return False
            batches.add(shape[0])
            shape = shape[1:]
        if len(shape) != len(tensor.dims):
            return False
        if any(w != -1 and g != w for g, w in zip(shape, tensor.dims, strict=True)):
            return False
    batch_ok = len(batches) == 1 and 1 <= min(batches) <= spec.max_batch_size
    return not (spec.max_batch_size > 0 and inputs and not batch_ok)


@settings(max_examples=400, deadline=None)
@given(cases())
def test_a_request_is_accepted_exactly_when_it_fits_the_model(
    case: tuple[ModelSpec, dict[str, np.ndarray[Any, Any]]],
) -> None:
    spec, inputs = case
    request = InferRequest("m", inputs)
    if fits(spec, inputs):
        rows = validate_request(request, spec)
        expected = next(iter(inputs.values())).shape[0] if spec.max_batch_size and inputs else 1
        assert rows == expected
    else:
        try:
            validate_request(request, spec)
        except InvalidArgumentError:
            return
        raise AssertionError(f"accepted a request that does not fit: {inputs} for {spec}")
