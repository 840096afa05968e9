"""examples/kernels: LeakyRelu and the row softmax run and meet their checks."""
import numpy as np
import pytest


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_leaky_relu_is_bitwise_numpy(example, dtype):
    mod = example("leaky_relu")
    res, x, y = mod.run(n=8 * 2048, dtype=dtype, tile_length=512)
    assert np.array_equal(y.view(np.uint8), mod.golden(x, 0.01).view(np.uint8))
    assert res.cycles > 0


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "bf16"])
def test_row_softmax_meets_the_precision_standard(example, dtype):
    mod = example("softmax")
    res, x, y = mod.run(rows=16, cols=128, block_dim=4, dtype=dtype)
    ok, info = mod.check(y, x, dtype)
    assert ok, info
    assert np.allclose(y.astype(np.float64).sum(axis=1), 1.0, atol=1e-2)


def test_example_scripts_print_their_timing(example, capsys):
    example("leaky_relu").main()
    example("add_manual_flags").main()
    out = capsys.readouterr().out
    assert "cycles" in out and " us" in out and "bitwise equal to numpy" in out


def test_fixed_address_local_tensors_count_in_the_ub_peak(example, capsys):
    # LocalTensor(dtype, pos, addr, n) bypasses the allocator: the UB peak said 0 B
    res = example("add_manual_flags").main(n=8 * 2048, block_dim=8, buffer_num=2)
    tile = 2048 // 8 // 2
    assert res.stats["ub_peak_bytes"] == 3 * tile * 2 * 4     # x, y, z: tile x buffer_num fp32 each
