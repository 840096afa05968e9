"""benchmarks/run.py runs end to end on small sizes and reports what it measured (the figures
themselves are never asserted: they are wall-clock ratios)."""
from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest

import opsim

_PATH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "run.py"
_spec = importlib.util.spec_from_file_location("opsim_benchmark_run", _PATH)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_tiled_numpy_floor_computes_the_formula_on_the_kernels_tiling():
    # 3 cores with a remainder on the last one and a partial last tile: every element is
    # computed once, bit for bit as numpy's ((x - y) * cof) * g
    n = 3 * 5000 + 7
    rng = np.random.default_rng(1)
    g, x, y = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    spec = opsim.TensorSpec((n,), "fp32")
    tiling = opsim.run("mse_loss_backward", device="atlas-a2", mode="timing", trace="off",
                       tiling={"block_dim": 3, "tile_length": 1024},
                       grad_output=spec, self=spec, target=spec, reduction="mean").tiling
    assert tiling.block_dim == 3 and tiling.last_core != tiling.per_core
    cof = float(np.float32(2.0 / n))
    got = bench.tiled_numpy_mse(g, x, y, cof, tiling)
    assert np.array_equal(got, bench.numpy_mse(g, x, y, cof))


@pytest.mark.slow   # ~3.5 s: it times a million raw SimPy timeouts
def test_run_reports_every_figure_on_small_sizes(capsys):
    figures = bench.main(["--elements", str(1 << 16), "--timing-elements", str(1 << 17), "--repeat", "1",
                          "--no-ff-demo"])
    for key in ("full_over_numpy", "tiled_numpy_over_numpy", "timing_big_over_full",
                "instructions_over_simpy", "timing_instructions_over_simpy"):
        assert figures[key] > 0
    out = capsys.readouterr().out
    assert "the kernel's tiles in numpy" in out and "target <= 2" in out
