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


def test_columns_in_one_copy_are_rllibs_conversion_of_each():
    """`host_tensors_in_one_copy` (a GPU Learner's batch in one transfer),
    run here into a CPU buffer: every column comes back with the dtype, shape
    and values of RLlib's conversion of that column alone, odd sizes, empty,
    read-only and non-contiguous columns among them, all views of one copy."""
    from rllib_ners.utils.tensor_conversion import (
        as_rllib_host_tensor,
        host_tensors_in_one_copy,
    )

    rng = np.random.default_rng(0)
    read_only = rng.normal(size=(5, 3))
    read_only.flags.writeable = False
    columns = {
        f"col_{np.dtype(dtype).name}": (rng.normal(size=(7, 3)) * 50).astype(dtype)
        for dtype in DTYPES
    }
    columns.update(
        obs=rng.integers(0, 255, (3, 11, 11, 4), dtype=np.uint8),
        odd_bytes=rng.integers(-5, 5, 33).astype(np.int8),
        empty=np.zeros((0, 4), np.float32),
        read_only=read_only,
        strided=rng.normal(size=(6, 8))[:, ::3],
        already_a_tensor=torch.arange(9, dtype=torch.float64).reshape(3, 3),
    )
    host = {name: as_rllib_host_tensor(value) for name, value in columns.items()}
    moved = host_tensors_in_one_copy(host, "cpu", pinned=False)
    assert list(moved) == list(columns)
    for name, value in columns.items():
        theirs = convert_to_torch_tensor(value)
        assert moved[name].dtype == theirs.dtype, name
        assert moved[name].shape == theirs.shape, name
        assert torch.equal(moved[name], theirs), name
    storages = {t.untyped_storage().data_ptr() for t in moved.values() if t.numel()}
    assert len(storages) == 1
    assert all(
        t.untyped_storage().data_ptr() != moved["obs"].untyped_storage().data_ptr()
        for t in host.values()
    ), "a copy, not the host columns' memory"
