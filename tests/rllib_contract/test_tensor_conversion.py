"""`rllib_ners.utils.tensor_conversion` converts as RLlib's own helpers do, on
every dtype a module or a buffer hands it: the same values and the same
dtypes as `convert_to_torch_tensor` and `convert_to_numpy`."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from ray.rllib.utils.numpy import convert_to_numpy
from ray.rllib.utils.torch_utils import convert_to_torch_tensor

from rllib_ners.utils.tensor_conversion import numpy_to_tensor, tensor_to_numpy

DTYPES = [
    np.float64,
    np.float32,
    np.float16,
    np.int64,
    np.int32,
    np.int8,
    np.uint8,
    np.bool_,
]


@pytest.mark.parametrize("dtype", DTYPES)
def test_tensor_to_numpy_is_rllibs_tensor_to_numpy_connector(dtype):
    tensor = torch.from_numpy(np.arange(6).reshape(2, 3).astype(dtype))
    ours, theirs = tensor_to_numpy(tensor), convert_to_numpy(tensor)
    assert ours.dtype == theirs.dtype, (ours.dtype, theirs.dtype)
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("dtype", DTYPES)
def test_numpy_to_tensor_is_rllibs_convert_to_torch_tensor(dtype):
    array = np.arange(6).reshape(2, 3).astype(dtype)
    ours, theirs = numpy_to_tensor(array, "cpu"), convert_to_torch_tensor(array)
    assert ours.dtype == theirs.dtype, (ours.dtype, theirs.dtype)
    assert torch.equal(ours, theirs)
