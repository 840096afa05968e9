"""examples/kernels written after pyasc's samples beyond the tutorials: each runs as shipped
(its own golden check and sanitizer check pass, it prints its timing), and each meets its
golden away from the sizes it ships with."""
import ml_dtypes
import numpy as np
import pytest

SCRIPTS = ["add_scalar_auto_sync", "add_tail_pad", "sum_squares", "axpy_bf16"]


@pytest.mark.parametrize("name", SCRIPTS)
def test_example_main_runs_and_prints_its_timing(example, capsys, name):
    example(name).main()
    out = capsys.readouterr().out
    assert "cycles" in out and " us" in out and "sanitizer: no findings" in out


@pytest.mark.parametrize("total", [1, 31, 4096, 5000])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_add_tail_meets_its_golden_at_any_length(example, total, dtype):
    mod = example("add_tail_pad")
    res, x, y, z = mod.run(total=total, dtype=dtype, tile_length=128, sanitize=True)
    assert np.array_equal(z, (x.astype(np.float64) + y.astype(np.float64)).astype(dtype))
    assert res.sanitizer.ok, res.sanitizer.text()


def test_add_scalar_broadcasts_y0_on_other_tilings(example):
    mod = example("add_scalar_auto_sync")
    res, x, y, z = mod.run(n=4096, block_dim=4, tile_num=4, dtype=np.float16)
    assert np.array_equal(z, (x.astype(np.float64) + np.float64(y[0])).astype(np.float16))


def test_sum_squares_is_within_the_fp32_bound_and_not_trivially(example):
    mod = example("sum_squares")
    res, x, out = mod.run(n=8 * 4096, block_dim=8, tile_length=1024)
    exact = float(np.sum(x.astype(np.float64) ** 2))
    assert abs(float(out[0]) - exact) <= x.size * 2.0 ** -24 * exact
    assert not mod.within_bound(float(out[0]) * (1 + 2.0 ** -7), x)     # the check can fail


def test_axpy_bf16_is_the_fp32_steps_bitwise(example):
    mod = example("axpy_bf16")
    res, x, y, z = mod.run(n=4 * 2048, block_dim=4, tile_length=512, a=-0.75)
    xf, yf = x.astype(np.float32), y.astype(np.float32)
    assert np.array_equal(z.view(np.uint16), (xf * np.float32(-0.75) + yf).astype(ml_dtypes.bfloat16).view(np.uint16))
