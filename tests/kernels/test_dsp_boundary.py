"""The DSP library and hthread answer any argument with a status code."""
from __future__ import annotations

import numpy as np
import pytest

from opsim.kernels import dsp
from opsim.kernels.dsp import DspLibrary, DspStatus
from opsim.simulator import hthread as ht
from opsim.simulator.hthread import HThread


def _rt():
    rt = HThread("mt7004", trace_level="off")
    assert rt.hthread_dev_open(0) == 0
    return rt


@pytest.mark.parametrize("runtime", [None, "rt", 0])
def test_the_library_with_no_runtime_returns_a_status(runtime):
    assert dsp.fp_binarycrossentropygrad_s(runtime, 64, 1, 0x80000000, 0x80001000, 0, 0x80002000, 0x80003000,
                                           0, 1) == DspStatus.ERR_RUNTIME
    assert DspLibrary(runtime).hp_binarycrossentropygrad_p(64, 1, 0, 0, 0, 0, 0, 0) == DspStatus.ERR_RUNTIME


def test_hthread_garbage_arguments_return_codes():
    rt = _rt()
    base = rt.device.gm.base
    assert rt.host_mem_copy(0, None, base, 16, 0) == ht.HT_ERROR_INVALID_PARAM
    assert rt.host_mem_copy(0, np.zeros(4, dtype=object), base, 16, 0) == ht.HT_ERROR_INVALID_PARAM
    assert rt.host_mem_copy(0, np.zeros(8, np.float32), base, None, 0) == ht.HT_ERROR_INVALID_PARAM
    assert rt.host_mem_copy(0, np.zeros(8, np.float32), base, 16, None) == ht.HT_ERROR_INVALID_PARAM
    assert rt.hthread_mem_write(0, base, np.zeros(4, dtype=object)) == ht.HT_ERROR_INVALID_PARAM
    assert rt.hthread_mem_write(np.array([0, 0]), base, b"ab") == ht.HT_ERROR_NOT_OPEN
    assert rt.hthread_group_masked_create(0, 1, lambda ctx: iter(()), 0, 0, None)[1] == ht.HT_ERROR_INVALID_PARAM
    assert rt.launch_group(0, 1, lambda ctx: iter(()), None)[1] == ht.HT_ERROR_INVALID_PARAM
    assert rt.launch_group(0, 1, lambda ctx: iter(()), object())[1] == ht.HT_ERROR_INVALID_PARAM
    assert rt.hthread_malloc(0, 64, 1.0)[1] == ht.HT_ERROR_INVALID_PARAM            # flags 1.0 is not HT_MEM_WO
    assert rt.host_tlsf_malloc(0, 0, 1.0, 64)[1] == ht.HT_ERROR_INVALID_PARAM       # nor mem_type DDR
    priv = rt.spec.private.base
    assert rt.hthread_mem_write(0, priv, b"abcd", core_id=True) == ht.HT_ERROR_INVALID_PARAM
    assert "core_id True" in rt.get_recent_err_msg()
    assert all("invalid argument:" not in m for m in rt.errors)                     # checked, not caught


def test_a_failed_hthread_copy_writes_nothing():
    rt = _rt()
    base = rt.device.gm.base
    assert rt.hthread_mem_write(0, base, np.arange(8, dtype=np.float32)) == 0
    before = rt.device.space.snapshot_digest()
    assert rt.host_mem_copy(0, np.ones(8, np.float32), base, -4, 0) == ht.HT_ERROR_INVALID_PARAM
    assert rt.host_mem_copy(0, np.ones(8, np.float32)[::2], base, 16, 1) == ht.HT_ERROR_INVALID_PARAM
    assert rt.device.space.snapshot_digest() == before
