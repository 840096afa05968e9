"""opsim.run and TensorSpec validate every argument into a clear error: OpError with the
aclnn code where the device has one, else TypeError/ValueError naming the parameter, the
value and what is allowed; nothing is coerced."""
from __future__ import annotations

import math

import numpy as np
import pytest

import opsim


def _xyz(shape=(4, 40)):
    rng = np.random.default_rng(0)
    return {k: rng.standard_normal(shape).astype(np.float32) for k in ("grad_output", "self", "target")}


@pytest.mark.parametrize("dims", [(-1, 4), (2.5, 4), (None, 4), (math.nan, 4), (True, 4), ("4", 4)])
def test_tensorspec_refuses_dims_that_are_not_integers_ge_0(dims):
    with pytest.raises((TypeError, ValueError), match=r"TensorSpec shape\[0\]"):
        opsim.TensorSpec(dims, "fp32")


def test_tensorspec_refuses_a_bare_integer_shape_and_keeps_valid_ones():
    with pytest.raises(TypeError, match="sequence of integers"):
        opsim.TensorSpec(5, "fp32")
    assert opsim.TensorSpec([np.int64(2), 3], "bf16").shape == (2, 3)


@pytest.mark.parametrize("reduction", [1.5, None, math.inf, math.nan, True, [1]])
def test_reduction_that_is_not_an_integer_is_161002_not_truncated(reduction):
    with pytest.raises(opsim.OpError, match="reduction") as err:
        opsim.run("mse_loss_backward", **_xyz(), reduction=reduction)
    assert err.value.code == 161002


@pytest.mark.parametrize("seed", [None, 1.0, "0", True])
def test_seed_must_be_an_integer(seed):
    with pytest.raises(TypeError, match="seed"):
        opsim.run("mse_loss_backward", **_xyz(), seed=seed)
    with pytest.raises(ValueError, match="seed -1"):
        opsim.run("mse_loss_backward", **_xyz(), seed=-1)


@pytest.mark.parametrize("name", ["tiling", "device_overrides"])
@pytest.mark.parametrize("value", [1, "block_dim=1", [("block_dim", 1)]])
def test_tiling_and_device_overrides_must_be_mappings(name, value):
    with pytest.raises(TypeError, match=name):
        opsim.run("mse_loss_backward", **_xyz(), **{name: value})


def test_tiling_values_are_not_coerced():
    with pytest.raises(opsim.OpError, match="buffer_num"):
        opsim.run("mse_loss_backward", **_xyz(), tiling={"buffer_num": 1.0})
    with pytest.raises(opsim.OpError, match="block_dim"):
        opsim.run("mse_loss_backward", **_xyz(), tiling={"block_dim": True})


def test_numeric_mode_needs_data():
    x = opsim.TensorSpec((4, 40), "fp32")
    with pytest.raises(TypeError, match="numeric mode needs data"):
        opsim.run("mse_loss_backward", mode="numeric", grad_output=x, self=x, target=x)


def test_operands_must_be_arrays_of_numbers():
    with pytest.raises(TypeError, match="operand self"):
        opsim.run("mse_loss_backward", **{**_xyz(), "self": np.zeros((4, 40), dtype=object)})
    with pytest.raises(TypeError, match="operand target must be a numpy array"):
        opsim.run("mse_loss_backward", **{**_xyz(), "target": [[1.0] * 40] * 4})


def test_mode_trace_device_and_op_of_the_wrong_kind():
    with pytest.raises(TypeError, match="mode"):
        opsim.run("mse_loss_backward", mode=None, **_xyz())
    with pytest.raises(TypeError, match="trace level"):
        opsim.run("mse_loss_backward", trace=3, **_xyz())
    with pytest.raises(TypeError, match="device"):
        opsim.run("mse_loss_backward", device=None, **_xyz())
    with pytest.raises(TypeError, match="op must be"):
        opsim.run(None, **_xyz())


def test_mse_out_dtype_outside_the_list_fails_validation_with_161002():
    # out's dtype is checked against the supported list on its own (the library casts the
    # result to it), so FLOAT16 is accepted for a FLOAT self and INT32 is not
    with pytest.raises(opsim.OpError, match="out has dtype INT32") as err:
        opsim.run("mse_loss_backward", **_xyz(), out=np.zeros((4, 40), np.int32))
    assert err.value.code == 161002
    assert opsim.run("mse_loss_backward", **_xyz(), out=np.zeros((4, 40), np.float16)).outputs["out"].dtype \
        == np.float16


@pytest.mark.parametrize("op", ["mse_loss_backward", "binary_cross_entropy_backward"])
def test_numeric_mode_gives_a_given_out_its_own_dtype_as_full_mode_does(op):
    a = {k: np.random.default_rng(3).uniform(0.05, 0.95, (4, 40)).astype(np.float32)
         for k in ("grad_output", "self", "target")}
    out = np.zeros((4, 40), np.float16)
    numeric = opsim.run(op, mode="numeric", out=out, reduction=1, **a).outputs["out"]
    full = opsim.run(op, mode="full", trace="off", out=out, reduction=1, **a).outputs["out"]
    assert numeric.dtype == full.dtype == np.float16
    np.testing.assert_array_equal(numeric.view(np.uint16), full.view(np.uint16))


@pytest.mark.parametrize("nw", [None, -1, 1.5, "8"])
def test_an_invalid_num_weights_is_reported_as_such(nw):
    g = np.ones((8, 16), np.float32)
    with pytest.raises(opsim.OpError, match="numWeights") as err:
        opsim.run("embedding_dense_backward", grad=g, indices=np.zeros(8, np.int32), num_weights=nw)
    assert "null pointer" not in str(err.value)


@pytest.mark.parametrize("flag", ["yes", np.array([1, 2]), 2])
def test_embedding_flags_must_be_bools(flag):
    g = np.ones((8, 16), np.float32)
    with pytest.raises(opsim.OpError, match="scaleGradByFreq"):
        opsim.run("embedding_dense_backward", grad=g, indices=np.zeros(8, np.int32), num_weights=4,
                  scale_grad_by_freq=flag)


def test_embedding_estimate_with_only_padding_rows():
    g, idx = np.ones((16, 32), np.float32), np.zeros(16, np.int32)
    res = opsim.run("embedding_dense_backward", mode="estimate", grad=g, indices=idx, num_weights=1, padding_idx=0)
    assert res.cycles > 0
    full = opsim.run("embedding_dense_backward", grad=g, indices=idx, num_weights=1, padding_idx=0)
    assert np.all(full.outputs["out"] == 0)


def test_numeric_outputs_are_arrays_even_for_0d_operands():
    x = np.array(0.5, np.float32)
    res = opsim.run("mse_loss_backward", mode="numeric", grad_output=x, self=x, target=x)
    assert isinstance(res.outputs["out"], np.ndarray)


def test_run_stats_is_typed_and_still_a_dict():
    res = opsim.run("mse_loss_backward", **_xyz(), trace="off")
    assert isinstance(res.stats, dict) and res.stats["block_dim"] >= 1
    assert "bound" in opsim.RunStats.__annotations__
