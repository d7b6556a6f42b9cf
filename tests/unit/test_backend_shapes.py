"""The one reshape rule between config tensors and model tensors (``inferd.backends.shapes``)."""

from __future__ import annotations

import numpy as np
import pytest

from inferd.backends.shapes import refit, to_config, to_model
from inferd.core.datatypes import from_name
from inferd.core.model_spec import TensorSpec
from inferd.errors import InternalError, InvalidInputError

FP32 = from_name("FP32")


def test_one_variable_dimension_takes_what_the_element_count_leaves() -> None:
    x = np.zeros((5, 2, 7, 3))  # [batch] + dims [2, -1, 3]
    assert refit(x, True, (2, -1, 3), (-1,)).shape == (5, 42)
    assert refit(x[0], False, (2, -1, 3), (6, -1)).shape == (6, 7)
    assert refit(np.zeros((4, 6)), True, (6,), (2, 3)).shape == (4, 2, 3)


def test_several_take_the_sizes_of_the_other_side_in_order() -> None:
    x = np.zeros((5, 2, 7, 3, 4))  # [batch] + dims [2, -1, 3, -1]
    assert refit(x, True, (2, -1, 3, -1), (-1, 6, -1)).shape == (5, 7, 6, 4)
    unknown = np.zeros((4, 6))
    assert refit(unknown, True, (6,), (-1, -1)) is unknown  # ambiguous: the runtime judges


def test_rank_zero_model_inputs_take_a_one_element_request() -> None:
    tensor = TensorSpec("X", FP32, (1,))
    assert to_model(np.ones(1), tensor, False, model_rank=0).shape == ()
    assert to_model(np.ones(1), tensor, False, model_rank=1).shape == (1,)
    assert to_config(np.float32(2.0), tensor, False, "m").shape == (1,)


def test_a_request_that_does_not_fit_is_the_client_error_an_output_the_model_fault() -> None:
    tensor = TensorSpec("X", FP32, (2, 3), reshape=(6,))
    with pytest.raises(InvalidInputError, match=r"input 'X' with shape \[1, 5\]"):
        to_model(np.ones((1, 5)), tensor, True)
    with pytest.raises(InternalError, match=r"model 'm' returned output 'X' with shape \[1, 5\]"):
        to_config(np.ones((1, 5)), tensor, True, "m")
