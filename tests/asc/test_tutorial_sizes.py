"""The matmul kernels at the shapes of pyasc tutorials 03, 04 and 05 (slow lane)."""
import numpy as np
import pytest

import opsim.asc as asc
import opsim.asc.lib.host as host

pytestmark = pytest.mark.slow


def test_cube_only_matmul_at_tutorial_04_shape(example):
    mod = example("matmul_cube_only")
    res, c, want = mod.run(m=128, k=64, n=30720, cores=24)
    assert np.array_equal(c, want)
    assert res.stats["block_dim"] == 24


def test_matmul_leaky_relu_at_tutorial_05_shape(example):
    mod = example("matmul_leaky_relu")
    res, c, want = mod.run(m=1024, k=256, n=640, vector_cores=2, base_m=256, base_n=128, alpha=0.001)
    assert np.array_equal(c, want)


def test_mixed_iterate_all_at_tutorial_03_shape():
    import importlib.util
    import pathlib
    path = pathlib.Path(__file__).with_name("test_asc_cube.py")
    spec = importlib.util.spec_from_file_location("asc_test_cube", path)
    tc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tc)
    m, k, n = 512, 512, 1024
    rng = np.random.default_rng(0)
    a = rng.integers(-5, 5, (m, k)).astype(np.float16)
    b = rng.integers(-5, 5, (k, n)).astype(np.float16)
    c = np.zeros((m, n), np.float32)
    t = host.MultiCoreMatmulTiling(host.get_ascendc_platform())
    t.set_dim(48)
    t.set_org_shape(m, n, k)
    t.set_shape(m, n, k)
    tiling = asc.adv.TCubeTiling()
    assert t.get_tiling(tiling) == 0
    tc.mixed_iterate_all[int(tiling.used_core_num) // 2, None](a, b, c, tiling)
    assert np.array_equal(c, a.astype(np.float32) @ b.astype(np.float32))
